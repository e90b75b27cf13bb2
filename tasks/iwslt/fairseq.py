"""fairseq ``transformer`` checkpoints (e.g. IWSLT'14 De-En ``transformer_iwslt_de_en``) on the skeleton.

A checkpoint directory holds ``checkpoint_best.pt`` (or ``checkpoint_last.pt``/``model.pt``) — a pickled
dict with ``model`` (the state dict) and the architecture in ``cfg["model"]`` (fairseq ≥ 0.10: a
Namespace, dict or omegaconf DictConfig) or ``args`` (older: a Namespace) — and the dictionaries
``dict.<src>.txt``/``dict.<tgt>.txt`` (one ``symbol count`` per line; fairseq prepends ``<s>`` 0,
``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3).  The pickle is read with ``weights_only=False`` (fairseq stores
Namespaces/DictConfigs): load only checkpoints you trust, as with fairseq itself.

Architecture (Vaswani et al. 2017 as implemented by fairseq's ``TransformerModel``): token embeddings
· √d (unless ``no_scale_embedding``), fixed sinusoidal positions with fairseq's layout (frequencies
10000^(−i/(d/2 − 1)), sin in the first half, cos in the second) and offset (the first token is position
pad + 1; fairseq's own ``make_positions``), post-norm blocks by default or pre-norm
(``encoder_normalize_before``/``decoder_normalize_before``, then with a final LayerNorm), LayerNorm eps
1e-5, ReLU MLPs, the output projection ``decoder.output_projection`` (tied to the decoder embedding with
``share_decoder_input_output_embed``).  Encoder and decoder widths may differ (the Depth-Adaptive
Transformer's IWSLT model: 512 / 256): cross-attention then projects the encoder output with
k, v: d_enc → d_dec, as fairseq's ``MultiheadAttention(kdim=vdim=encoder_embed_dim)``.  Decoding starts
with ``</s>`` (fairseq's generator) and never emits ``<pad>``; fairseq's ``min_len`` (no EOS at the first
step) and unk penalty belong to its search and are not copied (the task's search is the same for every
model).

Refused (one-line error): learned positions with ``no_token_positional_embeddings``, ``layernorm_embedding``,
``decoder_input_dim``/``decoder_output_dim`` different from the width (projections), adaptive softmax,
cross-self-attention, different norm orders in encoder and decoder.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bench.errors import UserError
from bench.models.seq2seq import EncoderDecoder, Seq2SeqConfig
from tasks.iwslt.seq2seq_maps import DECODER_LAYER, ENCODER_LAYER, build_loaded, map_layers

CHECKPOINT_NAMES = ("checkpoint_best.pt", "checkpoint_last.pt", "model.pt")
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq Dictionary: ids 0..3
BOS, PAD, EOS, UNK = 0, 1, 2, 3


def read_dictionary(path: Path) -> list[str]:
    """fairseq ``dict.<lang>.txt`` → symbols by id (the four specials first)."""
    symbols = list(SPECIALS)
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if not line:
                continue
            word = line.rsplit(" ", 1)[0] if " " in line else line
            if line.endswith(" #fairseq:overwrite"):
                word = line[: -len(" #fairseq:overwrite")].rsplit(" ", 1)[0]
            symbols.append(word)
    return symbols


def find_checkpoint(directory: str | Path, key: str) -> Path:
    root = Path(directory)
    if not root.is_dir():
        raise UserError(f"{key}={directory}: no such directory")
    for name in CHECKPOINT_NAMES:
        if (root / name).exists():
            return root / name
    raise UserError(f"{key}={directory}: none of {', '.join(CHECKPOINT_NAMES)} found")


def _model_args(state: dict[str, Any]) -> dict[str, Any]:
    cfg = state.get("cfg")
    args = cfg.get("model") if isinstance(cfg, dict) or hasattr(cfg, "get") else None
    if args is None:
        args = state.get("args")
    if args is None:
        raise KeyError("cfg['model'] or args")
    if hasattr(args, "items"):
        return {k: v for k, v in args.items()}
    return dict(vars(args))


def _get(args: dict[str, Any], name: str, default: Any) -> Any:
    value = args.get(name, default)
    return default if value is None else value


def seq2seq_config(args: dict[str, Any], src_vocab: int, tgt_vocab: int, where: str) -> Seq2SeqConfig:
    """fairseq transformer args → the skeleton's config (UserError for what it cannot represent)."""
    d_enc = int(_get(args, "encoder_embed_dim", 512))
    d_dec = int(_get(args, "decoder_embed_dim", d_enc))
    refuse = {
        "layernorm_embedding": bool(_get(args, "layernorm_embedding", False)),
        "no_token_positional_embeddings": bool(_get(args, "no_token_positional_embeddings", False)),
        "adaptive_softmax_cutoff": bool(_get(args, "adaptive_softmax_cutoff", None)),
        "cross_self_attention": bool(_get(args, "cross_self_attention", False)),
        "decoder_input_dim/decoder_output_dim": int(_get(args, "decoder_input_dim", d_dec)) != d_dec
        or int(_get(args, "decoder_output_dim", d_dec)) != d_dec,
        "encoder_normalize_before != decoder_normalize_before":
            bool(_get(args, "encoder_normalize_before", False)) != bool(_get(args, "decoder_normalize_before", False)),
        "encoder_learned_pos != decoder_learned_pos":
            bool(_get(args, "encoder_learned_pos", False)) != bool(_get(args, "decoder_learned_pos", False)),
    }
    bad = [name for name, on in refuse.items() if on]
    if bad:
        raise UserError(f"{where}: the checkpoint uses {bad[0]}, which the skeleton does not represent")
    act = str(_get(args, "activation_fn", "relu"))
    if act not in ("relu", "gelu"):
        raise UserError(f"{where}: activation_fn={act!r}; supported: relu, gelu")
    pre = bool(_get(args, "encoder_normalize_before", False))
    positions = int(min(_get(args, "max_source_positions", 1024), _get(args, "max_target_positions", 1024)))
    return Seq2SeqConfig(
        vocab=tgt_vocab, src_vocab=src_vocab if src_vocab != tgt_vocab else 0, d_model=d_enc,
        enc_layers=int(_get(args, "encoder_layers", 6)), dec_layers=int(_get(args, "decoder_layers", 6)),
        n_heads=int(_get(args, "encoder_attention_heads", 8)), d_mlp=int(_get(args, "encoder_ffn_embed_dim", 2048)),
        dec_d_model=d_dec if d_dec != d_enc else 0, dec_heads=int(_get(args, "decoder_attention_heads", 8)),
        dec_mlp=int(_get(args, "decoder_ffn_embed_dim", 2048)), activation=act,
        dropout=float(_get(args, "dropout", 0.1)), norm_eps=1e-5, max_positions=positions, norm_first=pre,
        final_norm=pre, pad=PAD, bos=EOS, eos=EOS, never_emit=(PAD,), head_bias=False,
        scale_embed=not bool(_get(args, "no_scale_embedding", False)),
        fixed_positions=not bool(_get(args, "encoder_learned_pos", False)),
        tie_output=bool(_get(args, "share_decoder_input_output_embed", False))
        or bool(_get(args, "share_all_embeddings", False)),
        share_embeddings=bool(_get(args, "share_all_embeddings", False)))


def sinusoidal_table(positions: int, dim: int, pad: int = PAD) -> Tensor:
    """Rows 0..positions−1 = fairseq's sinusoidal embeddings of positions pad+1, pad+2, … (see above)."""
    half = dim // 2
    rate = math.log(10000) / (half - 1)
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -rate)
    angle = torch.arange(positions + pad + 1, dtype=torch.float).unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).view(positions + pad + 1, -1)
    if dim % 2 == 1:
        table = torch.cat([table, torch.zeros(positions + pad + 1, 1)], dim=1)
    return table[pad + 1:]


def skeleton_state_dict(sd: dict[str, Tensor], cfg: Seq2SeqConfig, learned_pos: bool) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    used = {k for k in sd if k.endswith((".version", "embed_positions._float_tensor"))}

    def take(theirs: str, ours: str) -> None:
        out[ours] = sd[theirs]
        used.add(theirs)

    take("encoder.embed_tokens.weight", "encoder.embed.tok.weight")
    take("decoder.embed_tokens.weight", "decoder.embed.tok.weight")
    head = "decoder.output_projection.weight" if "decoder.output_projection.weight" in sd else "decoder.embed_out"
    if head in sd:
        take(head, "decoder.head.weight")
    else:
        out["decoder.head.weight"] = sd["decoder.embed_tokens.weight"]
    for side, dim in (("encoder", cfg.d_model), ("decoder", cfg.d_dec)):
        if learned_pos:  # fairseq's LearnedPositionalEmbedding: rows pad+1 … are positions 0 …
            table = sd[f"{side}.embed_positions.weight"][PAD + 1: PAD + 1 + cfg.max_positions]
            used.add(f"{side}.embed_positions.weight")
        else:
            table = sinusoidal_table(cfg.max_positions, dim)
        out[f"{side}.embed.pos.weight"] = table
        if cfg.final_norm:
            take(f"{side}.layer_norm.weight", f"{side}.norm.weight")
            take(f"{side}.layer_norm.bias", f"{side}.norm.bias")
    map_layers(sd, out, used, "encoder.layers", "encoder.blocks", cfg.enc_layers, ENCODER_LAYER)
    map_layers(sd, out, used, "decoder.layers", "decoder.blocks", cfg.dec_layers, DECODER_LAYER)
    unknown = sorted(set(sd) - used)
    if unknown:
        raise ValueError(f"keys without a counterpart in the skeleton: {', '.join(unknown[:5])}")
    return out


def load(directory: str | Path, key: str, src_lang: str, tgt_lang: str) -> tuple[EncoderDecoder, list[str], list[str]]:
    """(model, source symbols, target symbols) of a fairseq checkpoint directory."""
    where = f"{key}={directory}"
    path = find_checkpoint(directory, key)
    dicts = []
    for lang in (src_lang, tgt_lang):
        file = Path(directory) / f"dict.{lang}.txt"
        if not file.exists():
            raise UserError(f"{where}: no {file.name} (fairseq dictionaries dict.{src_lang}.txt, dict.{tgt_lang}.txt)")
        dicts.append(read_dictionary(file))
    state = torch.load(path, map_location="cpu", weights_only=False)
    try:
        args = _model_args(state)
        sd = state["model"]
    except (KeyError, TypeError) as err:
        raise UserError(f"{where}: {path.name} is not a fairseq checkpoint (no {err})") from None
    arch = str(args.get("arch", args.get("_name", "transformer")))
    if not arch.startswith("transformer"):
        raise UserError(f"{where}: arch {arch!r}; only fairseq transformer checkpoints load here")
    src_vocab = int(sd["encoder.embed_tokens.weight"].shape[0])
    tgt_vocab = int(sd["decoder.embed_tokens.weight"].shape[0])
    if (src_vocab, tgt_vocab) != (len(dicts[0]), len(dicts[1])):
        raise UserError(f"{where}: embeddings have {src_vocab}/{tgt_vocab} rows but the dictionaries "
                        f"{len(dicts[0])}/{len(dicts[1])} symbols (fairseq pads dictionaries to a multiple of 8: "
                        "use the dict files the model was trained with)")
    cfg = seq2seq_config(args, src_vocab, tgt_vocab, where)
    learned = bool(_get(args, "encoder_learned_pos", False))
    model = build_loaded(cfg, lambda: skeleton_state_dict(sd, cfg, learned), where, "the architecture")
    return model, dicts[0], dicts[1]
