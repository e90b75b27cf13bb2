"""Shared helpers of the translation loaders (Marian, fairseq): layer-name maps."""

from __future__ import annotations

from torch import Tensor

from bench.errors import UserError
from bench.models.seq2seq import EncoderDecoder

# Per-layer suffix maps onto the skeleton (both HF Marian/BART and fairseq use these names inside a layer).
ENCODER_LAYER = {"self_attn.q_proj": "attn.q", "self_attn.k_proj": "attn.k", "self_attn.v_proj": "attn.v",
                 "self_attn.out_proj": "attn.o", "self_attn_layer_norm": "norm1", "fc1": "mlp.fc1",
                 "fc2": "mlp.fc2", "final_layer_norm": "norm2"}
DECODER_LAYER = {**ENCODER_LAYER, "encoder_attn.q_proj": "cross.q", "encoder_attn.k_proj": "cross.k",
                 "encoder_attn.v_proj": "cross.v", "encoder_attn.out_proj": "cross.o",
                 "encoder_attn_layer_norm": "norm_c"}


def map_layers(sd: dict[str, Tensor], out: dict[str, Tensor], used: set[str], theirs: str, ours: str,
               layers: int, table: dict[str, str]) -> None:
    """Copy ``{theirs}.{i}.{name}.{weight,bias}`` to ``{ours}.{i}.{mapped}.{weight,bias}``."""
    for i in range(layers):
        for name, mapped in table.items():
            for kind in ("weight", "bias"):
                key = f"{theirs}.{i}.{name}.{kind}"
                out[f"{ours}.{i}.{mapped}.{kind}"] = sd[key]
                used.add(key)



def build_loaded(cfg, map_weights, where: str, mismatch: str):
    """The skeleton ``EncoderDecoder`` of ``cfg`` with the mapped weights loaded strictly: a mapping that
    fails (``KeyError``/``ValueError``: ``mismatch`` names what the weights do not fit) or a state dict
    that does not fit the model is one ``UserError`` line naming ``where``."""
    try:
        sd = map_weights()
    except (KeyError, ValueError) as err:
        raise UserError(f"{where}: the weights do not fit {mismatch} ({err})") from None
    model = EncoderDecoder(cfg)
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as err:
        raise UserError(f"{where}: {' '.join(str(err).split())[:200]}") from None
    return model
