"""A plain ViT on the shared skeleton, for latency benchmarks that need no task (random weights, any size).

    image [B, C, H, W] → p×p patches → Linear(C·p², d) → [class token; patches] + positions → Encoder blocks
    → final norm → class token → Linear(d, classes)

A Linear over flattened non-overlapping patches is the same map as a p×p convolution of stride p (the
usual patch embedding), and its MACs are the same: patches·C·p²·d.  Sizes follow the ViT paper
(B/16: d 768, 12 layers, 12 heads, MLP 3072, patch 16, 224 px → 196 patches + 1 class token = 197 tokens;
17.56 GMACs per image).  Task code keeps its own ViT (with torchvision-compatible parameter names); this one
only has to have the same shapes and costs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bench.models.transformer import Encoder, EncoderConfig


@dataclass(frozen=True)
class ViTShape:
    d_model: int = 768
    layers: int = 12
    heads: int = 12
    mlp: int = 3072
    patch: int = 16
    image_size: int = 224
    channels: int = 3
    classes: int = 1000

    @property
    def tokens(self) -> int:
        return (self.image_size // self.patch) ** 2 + 1


SHAPES = {
    "b16": ViTShape(),
    "s16": ViTShape(d_model=384, heads=6, mlp=1536),
    # a tiny shape for tests on CPU (32 px, patch 8 → 17 tokens; d 64, MLP 256)
    "tiny": ViTShape(d_model=64, layers=2, heads=4, mlp=256, patch=8, image_size=32, classes=10),
}


class PatchTokens(nn.Module):
    """Image → tokens [B, 1 + patches, d] (class token first) and no padding mask."""

    def __init__(self, shape: ViTShape):
        super().__init__()
        if shape.image_size % shape.patch:
            raise ValueError(f"image_size={shape.image_size} is not a multiple of patch={shape.patch}")
        self.patch, self.channels = shape.patch, shape.channels
        self.patches = (shape.image_size // shape.patch) ** 2
        self.proj = nn.Linear(shape.channels * shape.patch ** 2, shape.d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, shape.d_model))
        self.pos = nn.Parameter(torch.randn(1, self.patches + 1, shape.d_model) * 0.02)

    def forward(self, images: Tensor) -> tuple[Tensor, None]:
        b, c, h, w = images.shape
        p = self.patch
        x = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * p * p)
        x = self.proj(x)
        return torch.cat([self.cls.expand(b, -1, -1), x], dim=1) + self.pos, None

    def macs(self, tokens: int | None = None) -> int:
        return self.patches * self.proj.in_features * self.proj.out_features


def build_vit(shape: ViTShape) -> Encoder:
    """A randomly initialised ViT of the given shape (class-token pooling)."""
    cfg = EncoderConfig(d_model=shape.d_model, n_layers=shape.layers, n_heads=shape.heads, d_mlp=shape.mlp,
                        activation="gelu", pool="cls")
    return Encoder(cfg, PatchTokens(shape), nn.Linear(shape.d_model, shape.classes))
