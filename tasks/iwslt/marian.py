"""HuggingFace Marian (``MarianMTModel``, e.g. Helsinki-NLP/opus-mt-de-en) on the encoder–decoder skeleton.

Architecture (Junczys-Dowmunt et al. 2018; HF ``modeling_marian``): token embeddings scaled by √d
(``scale_embedding``), fixed sinusoidal positions (angle pos / 10000^(2⌊j/2⌋/d); sin of the even-j angles
in the first half of the dimensions, cos of the odd-j ones in the second; positions 0, 1, …; taken from
``embed_positions.weight`` when the checkpoint stores it, else computed; frozen),
post-norm blocks (LayerNorm eps 1e-5 after each residual add), no final LayerNorm, Swish (SiLU) MLPs in
opus-mt, one shared embedding matrix for encoder, decoder and output projection
(``share_encoder_decoder_embeddings``, ``tie_word_embeddings``), an output bias ``final_logits_bias``.
Ids: eos 0, unk 1, pad = vocab − 1; the decoder starts with pad (``decoder_start_token_id``) and never
generates pad (Marian's generation forbids it), hence ``bos = pad`` and ``never_emit = (pad,)``.

HF scales q by dh^-1/2 after its projection, the skeleton scales QKᵀ: the same function (logits agree to
1e-5 in tests/test_pretrained_marian.py).  Dropout: one rate (config ``dropout``) for embeddings,
attention probabilities and MLP outputs; HF's separate ``attention_dropout``/``activation_dropout`` are
not represented (evaluation is unaffected).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from bench.errors import UserError
from bench.models.pretrained import hf
from bench.models.seq2seq import EncoderDecoder, Seq2SeqConfig
from tasks.iwslt.seq2seq_maps import DECODER_LAYER, ENCODER_LAYER, build_loaded, map_layers

ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}


def seq2seq_config(config: dict[str, Any], where: str) -> Seq2SeqConfig:
    """A ``MarianConfig`` dict → the skeleton's config (UserError for what it cannot represent)."""
    if config.get("model_type", "marian") != "marian":
        raise UserError(f"{where}: model_type {config.get('model_type')!r}; expected a Marian checkpoint")
    act = config.get("activation_function", "swish")
    if act not in ACTIVATIONS:
        raise UserError(f"{where}: activation_function={act!r}; supported: {', '.join(ACTIVATIONS)}")
    for flag in ("normalize_before", "normalize_embedding", "add_final_layer_norm"):
        if config.get(flag):
            raise UserError(f"{where}: {flag}=true is not a Marian post-norm model; not supported")
    vocab = int(config["vocab_size"])
    dec_vocab = int(config.get("decoder_vocab_size") or vocab)
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    if shared and dec_vocab != vocab:
        raise UserError(f"{where}: shared embeddings but decoder_vocab_size {dec_vocab} != vocab_size {vocab}")
    pad = int(config.get("pad_token_id", vocab - 1))
    start = int(config.get("decoder_start_token_id", pad))
    if start != pad:
        raise UserError(f"{where}: decoder_start_token_id {start} != pad_token_id {pad}; not a Marian layout")
    d = int(config["d_model"])
    return Seq2SeqConfig(
        vocab=dec_vocab, src_vocab=0 if dec_vocab == vocab else vocab, d_model=d,
        enc_layers=int(config["encoder_layers"]), dec_layers=int(config["decoder_layers"]),
        n_heads=int(config["encoder_attention_heads"]), d_mlp=int(config["encoder_ffn_dim"]),
        dec_heads=int(config["decoder_attention_heads"]), dec_mlp=int(config["decoder_ffn_dim"]),
        activation=ACTIVATIONS[act], dropout=float(config.get("dropout", 0.1)), norm_eps=1e-5,
        max_positions=int(config.get("max_position_embeddings", 512)), norm_first=False, final_norm=False,
        pad=pad, bos=pad, eos=int(config.get("eos_token_id", 0)), never_emit=(pad,), head_bias=True,
        scale_embed=bool(config.get("scale_embedding", True)), fixed_positions=True,
        tie_output=bool(config.get("tie_word_embeddings", True)), share_embeddings=shared and dec_vocab == vocab)


def sinusoidal_table(positions: int, dim: int) -> Tensor:
    """Marian's position table (see the module docstring), computed in float64 as HF does."""
    j = np.arange(dim)
    angle = np.arange(positions)[:, None] / np.power(10000, 2 * (j // 2) / dim)[None, :]
    half = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    out = torch.empty(positions, dim)
    out[:, :half] = torch.FloatTensor(np.sin(angle[:, 0::2]))
    out[:, half:] = torch.FloatTensor(np.cos(angle[:, 1::2]))
    return out


def skeleton_state_dict(hf_sd: dict[str, Tensor], cfg: Seq2SeqConfig) -> dict[str, Tensor]:
    """``MarianMTModel`` weights → skeleton names (KeyError if one is missing, ValueError for unknown ones).
    Tied matrices saved once (safetensors keeps one of them) are filled from ``model.shared.weight``."""
    sd = hf.strip_prefix(hf_sd, ("model.",))
    shared = sd.get("shared.weight")
    out: dict[str, Tensor] = {}
    used: set[str] = {"shared.weight"}

    def take(theirs: str, ours: str, fallback: Tensor | None = None) -> None:
        if theirs not in sd and fallback is None:
            raise KeyError(theirs)
        out[ours] = sd.get(theirs, fallback)
        used.add(theirs)

    take("encoder.embed_tokens.weight", "encoder.embed.tok.weight", shared)
    take("decoder.embed_tokens.weight", "decoder.embed.tok.weight", shared)
    take("lm_head.weight", "decoder.head.weight", out["decoder.embed.tok.weight"])
    table = sinusoidal_table(cfg.max_positions, cfg.d_model)
    take("encoder.embed_positions.weight", "encoder.embed.pos.weight", table)
    take("decoder.embed_positions.weight", "decoder.embed.pos.weight", sinusoidal_table(cfg.max_positions, cfg.d_dec))
    bias = sd["final_logits_bias"]
    used.add("final_logits_bias")
    out["decoder.head.bias"] = bias.reshape(-1)
    map_layers(sd, out, used, "encoder.layers", "encoder.blocks", cfg.enc_layers, ENCODER_LAYER)
    map_layers(sd, out, used, "decoder.layers", "decoder.blocks", cfg.dec_layers, DECODER_LAYER)
    unknown = sorted(set(sd) - used)
    if unknown:
        raise ValueError(f"keys without a counterpart in the skeleton: {', '.join(unknown[:5])}")
    return out


def load(directory: str | Path, key: str) -> EncoderDecoder:
    """The Marian model of a HuggingFace directory, weights loaded and ties restored."""
    where = f"{key}={directory}"
    weights = hf.load_weights(directory, key)
    config = hf.read_json(Path(directory) / "config.json", "a MarianConfig (config.json)", key)
    cfg = seq2seq_config(config, where)
    return build_loaded(cfg, lambda: skeleton_state_dict(weights, cfg), where, "its config.json")
