"""Tiny skeleton encoders for method unit tests: class-token or per-token heads, with or without padding."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bench.models.transformer import Encoder, EncoderConfig

PAD = 0


class TokenEmbed(nn.Module):
    """Token ids [B, n] (0 = padding) → [B, n + 1, d] with a class token first, and the padding mask."""

    def __init__(self, vocab: int, n: int, d_model: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.cls = nn.Parameter(torch.randn(1, 1, d_model))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d_model) * 0.5)

    def forward(self, ids: Tensor) -> tuple[Tensor, Tensor | None]:
        x = torch.cat([self.cls.expand(ids.shape[0], -1, -1), self.tokens(ids)], dim=1) + self.pos
        pad = torch.cat([torch.zeros_like(ids[:, :1], dtype=torch.bool), ids == PAD], dim=1)
        return x, (pad if bool(pad.any()) else None)

    def macs(self, tokens: int) -> int:
        return 0


class PerTokenEncoder(Encoder):
    """An encoder whose head reads every token (as a CTC head reads every frame): pool keeps [B, T, d]."""

    def pool(self, x: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        return x


def tiny_encoder(per_token: bool = False, layers: int = 3, classes: int = 5, n: int = 10, seed: int = 0) -> Encoder:
    torch.manual_seed(seed)
    cfg = EncoderConfig(d_model=16, n_layers=layers, n_heads=2, d_mlp=32, pool="cls")
    cls = PerTokenEncoder if per_token else Encoder
    return cls(cfg, TokenEmbed(7, n, 16), nn.Linear(16, classes)).eval()


def token_batch(batch: int = 6, n: int = 10, padded: bool = False, seed: int = 1) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 7, (batch, n), generator=g)
    if padded:
        lengths = torch.randint(3, n + 1, (batch,), generator=g)
        ids = ids.masked_fill(torch.arange(n)[None, :] >= lengths[:, None], PAD)
    return ids
