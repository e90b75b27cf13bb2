"""``bench speed`` sizes of the commonvoice task: its CTC encoder (conv stem → skeleton blocks → per-frame
head) at a base size on 10 s of audio, random weights, random log-mel inputs.

``base``: d 768, 12 blocks, 12 heads, MLP 3072 (the size of wav2vec 2.0 Base / HuBERT Base transformers),
80 log-mel bins at a 10 ms hop: 10 s = 998 frames (25 ms window) → 249 tokens after the two stride-2
convolutions.  ``tiny`` is for tests (1 s, d 32).
"""

from __future__ import annotations

from bench.speed import SpeedArch, SpeedBackbone, Stack
from tasks.commonvoice.model import build_ctc_encoder, conv_out

N_MELS, VOCAB, HOP_S, WINDOW_S = 80, 29, 0.010, 0.025
ARCHS = {
    "base": SpeedArch("base", Stack(768, 12, 12, 3072), length=10.0, note="base-size encoder, 10 s of audio"),
    "tiny": SpeedArch("tiny", Stack(32, 2, 2, 128), length=1.0, note="tests: 1 s"),
}


def build(arch: SpeedArch) -> SpeedBackbone:
    import torch

    from bench.models.transformer import EncoderConfig

    s = arch.encoder
    n_mels = 16 if arch.name == "tiny" else N_MELS
    frames = 1 + int(round((arch.length - WINDOW_S) / HOP_S))
    cfg = EncoderConfig(d_model=s.d_model, n_layers=s.layers, n_heads=s.heads, d_mlp=s.mlp, activation="gelu",
                        pool="mean")
    model = build_ctc_encoder(cfg, n_mels, VOCAB)

    def example(batch: int, generator) -> torch.Tensor:
        return torch.randn(batch, frames, n_mels, generator=generator)

    return SpeedBackbone(model, example, tokens=conv_out(conv_out(frames)), capabilities=("encoder", "token-outputs"))
