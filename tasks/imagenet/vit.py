"""Vision Transformer (Dosovitskiy et al. 2021) on the shared skeleton, with torchvision-compatible weights.

The model is ``bench.models.transformer.Encoder`` with:

    embed   PatchEmbed: Conv2d(C, d, kernel=stride=p) → flatten patches row-major → prepend a learned
            class token → add learned position embeddings (T = n_patches + 1 tokens)
    blocks  pre-norm Blocks (LayerNorm eps 1e-6, GELU MLP), as torchvision's ``EncoderBlock``
    norm    final LayerNorm; pool="cls" (token 0)
    head    Linear(d, classes)

Parameter names map one-to-one onto torchvision's ``VisionTransformer`` state dict (``vit_b_16`` etc.),
except that torchvision packs q/k/v into ``self_attention.in_proj_weight`` [3d, d] / ``in_proj_bias``
[3d] (``nn.MultiheadAttention``'s convention: rows in q, k, v order), which we split.  See
:func:`from_torchvision_state_dict` / :func:`to_torchvision_state_dict`.

timm / DeiT state dicts (``deit_small_patch16_224`` etc., Touvron et al. 2021: the same architecture,
pre-norm, LayerNorm eps 1e-6, GELU, class-token pooling) load through :func:`from_timm_state_dict`:
``cls_token``, ``pos_embed``, ``patch_embed.proj``, ``blocks.i.{norm1, attn.qkv (q, k, v rows), attn.proj,
norm2, mlp.fc1, mlp.fc2}``, ``norm``, ``head``.  Distilled DeiT (``dist_token``/``head_dist``), layer
scale (DeiT-III ``ls1``/``ls2``) and global-average-pooling variants (``fc_norm``) are refused: their keys
have no counterpart.  ``load_vit_state_dict`` tells the layouts apart by their keys.

Architectures (ViT paper Table 1; Ti/S from DeiT): width d, depth L, heads h, MLP size.  MACs follow the
torchvision convention (matmul/conv only), which reproduces its published 4.41 / 17.56 / 15.38 / 61.55
GMACs for B/32, B/16, L/32, L/16 at 224 px (tested in tests/test_imagenet.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from bench.models.transformer import Encoder, EncoderConfig


@dataclass(frozen=True)
class ViTConfig:
    image_size: int = 224
    patch: int = 16
    channels: int = 3
    classes: int = 1000
    d_model: int = 768
    layers: int = 12
    heads: int = 12
    mlp: int = 3072

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch) ** 2


# name → (d_model, layers, heads, mlp, patch) at 224 px, 1000 classes.
_ARCHS: dict[str, tuple[int, int, int, int, int]] = {
    "ti16": (192, 12, 3, 768, 16),
    "s16": (384, 12, 6, 1536, 16),
    "b16": (768, 12, 12, 3072, 16),
    "b32": (768, 12, 12, 3072, 32),
    "l16": (1024, 24, 16, 4096, 16),
    "l32": (1024, 24, 16, 4096, 32),
    "h14": (1280, 32, 16, 5120, 14),
}
# The offline default: Fashion-MNIST 28×28 grayscale, patch 7 → 16 patches + cls, 10 classes (3.5 MMACs;
# patch 4 → 49 patches costs 11.2 MMACs and ~3x the CPU time per training step).
SMALL = ViTConfig(image_size=28, patch=7, channels=1, classes=10, d_model=64, layers=4, heads=4, mlp=256)
ARCH_NAMES = ("small", *_ARCHS)


def canonical_arch(name: str) -> str:
    """'B/16', 'vit_b_16', 'b16' → 'b16' (raises ValueError for unknown names)."""
    key = re.sub(r"^vit[-_]?", "", name.strip().lower())
    key = re.sub(r"[^a-z0-9]", "", key)
    if key not in ARCH_NAMES:
        raise ValueError(f"unknown ViT architecture '{name}'; choose one of {', '.join(ARCH_NAMES)}")
    return key


def vit_config(name: str, **overrides) -> ViTConfig:
    """The named architecture (224 px, 3 channels, 1000 classes unless overridden), or ``small``."""
    key = canonical_arch(name)
    if key == "small":
        return replace(SMALL, **overrides)
    d, layers, heads, mlp, patch = _ARCHS[key]
    return replace(ViTConfig(d_model=d, layers=layers, heads=heads, mlp=mlp, patch=patch), **overrides)


class PatchEmbed(nn.Module):
    """Image [B, C, H, W] → tokens [B, 1 + n_patches, d] (class token first), no padding mask."""

    def __init__(self, image_size: int, patch: int, channels: int, d_model: int):
        super().__init__()
        if image_size % patch:
            raise ValueError(f"image_size={image_size} is not divisible by patch={patch}")
        self.image_size, self.patch, self.channels = image_size, patch, channels
        self.n_patches = (image_size // patch) ** 2
        self.proj = nn.Conv2d(channels, d_model, kernel_size=patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos = nn.Parameter(torch.empty(1, self.n_patches + 1, d_model).normal_(std=0.02))
        # torchvision's init of conv_proj: truncated normal with std sqrt(1 / fan_in), zero bias.
        fan_in = channels * patch * patch
        nn.init.trunc_normal_(self.proj.weight, std=math.sqrt(1.0 / fan_in))
        nn.init.zeros_(self.proj.bias)

    def forward(self, images: Tensor) -> tuple[Tensor, None]:
        x = self.proj(images).flatten(2).transpose(1, 2)  # [B, n_patches, d], patches row-major
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.pos, None

    def macs(self, tokens: int | None = None) -> int:
        """n_patches·(C·p²)·d: the convolution always runs on the whole image, whatever ``tokens`` is."""
        return self.n_patches * self.channels * self.patch ** 2 * self.proj.out_channels


def encoder_config(cfg: ViTConfig) -> EncoderConfig:
    # torchvision: GELU MLP, LayerNorm eps 1e-6, class-token pooling, no dropout by default.
    return EncoderConfig(d_model=cfg.d_model, n_layers=cfg.layers, n_heads=cfg.heads, d_mlp=cfg.mlp,
                         activation="gelu", dropout=0.0, norm_eps=1e-6, pool="cls")


def build_vit(cfg: ViTConfig) -> Encoder:
    model = Encoder(encoder_config(cfg), PatchEmbed(cfg.image_size, cfg.patch, cfg.channels, cfg.d_model),
                    nn.Linear(cfg.d_model, cfg.classes))
    model.vit = cfg  # type: ignore[assignment]  # plain attribute: the architecture, for methods/tests
    return model


# --- torchvision state-dict mapping -----------------------------------------------------------------
# (our suffix, torchvision suffix) inside one block; q/k/v are handled separately (packed in torchvision).
_BLOCK_KEYS = [
    ("norm1.weight", "ln_1.weight"), ("norm1.bias", "ln_1.bias"),
    ("attn.o.weight", "self_attention.out_proj.weight"), ("attn.o.bias", "self_attention.out_proj.bias"),
    ("norm2.weight", "ln_2.weight"), ("norm2.bias", "ln_2.bias"),
    ("mlp.fc1.weight", "mlp.0.weight"), ("mlp.fc1.bias", "mlp.0.bias"),
    ("mlp.fc2.weight", "mlp.3.weight"), ("mlp.fc2.bias", "mlp.3.bias"),
]
_TOP_KEYS = [
    ("embed.cls", "class_token"), ("embed.proj.weight", "conv_proj.weight"),
    ("embed.proj.bias", "conv_proj.bias"), ("embed.pos", "encoder.pos_embedding"),
    ("norm.weight", "encoder.ln.weight"), ("norm.bias", "encoder.ln.bias"),
    ("head.weight", "heads.head.weight"), ("head.bias", "heads.head.bias"),
]
_TV_LAYER = "encoder.layers.encoder_layer_{}."


def _n_layers(keys, pattern: str) -> int:
    found = {int(m.group(1)) for k in keys if (m := re.match(pattern, k))}
    return max(found) + 1 if found else 0


def from_torchvision_state_dict(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """torchvision ``VisionTransformer`` state dict → ours (q/k/v split from ``in_proj``).  KeyError if a
    key is missing; torchvision keys we do not know (e.g. ``heads.pre_logits``) raise ValueError."""
    out: dict[str, Tensor] = {}
    used: set[str] = set()
    for ours, theirs in _TOP_KEYS:
        out[ours] = sd[theirs]
        used.add(theirs)
    for i in range(_n_layers(sd, r"encoder\.layers\.encoder_layer_(\d+)\.")):
        prefix, mine = _TV_LAYER.format(i), f"blocks.{i}."
        for ours, theirs in _BLOCK_KEYS:
            out[mine + ours] = sd[prefix + theirs]
            used.add(prefix + theirs)
        for kind in ("weight", "bias"):
            packed = sd[f"{prefix}self_attention.in_proj_{kind}"]
            used.add(f"{prefix}self_attention.in_proj_{kind}")
            for name, part in zip("qkv", packed.chunk(3, dim=0)):
                out[f"{mine}attn.{name}.{kind}"] = part.clone()
    unknown = sorted(set(sd) - used)
    if unknown:
        raise ValueError(f"torchvision keys without a counterpart here: {', '.join(unknown[:5])}")
    return out


_TIMM_BLOCK = {"norm1": "norm1", "attn.proj": "attn.o", "norm2": "norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
_TIMM_TOP = {"cls_token": "embed.cls", "pos_embed": "embed.pos", "patch_embed.proj.weight": "embed.proj.weight",
             "patch_embed.proj.bias": "embed.proj.bias", "norm.weight": "norm.weight", "norm.bias": "norm.bias",
             "head.weight": "head.weight", "head.bias": "head.bias"}


def from_timm_state_dict(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """timm ``VisionTransformer`` / DeiT state dict → ours (q/k/v split from ``attn.qkv``).  KeyError if a
    key is missing; unknown timm keys raise ValueError."""
    out: dict[str, Tensor] = {}
    used: set[str] = set()
    for theirs, ours in _TIMM_TOP.items():
        out[ours] = sd[theirs]
        used.add(theirs)
    for i in range(_n_layers(sd, r"blocks\.(\d+)\.")):
        prefix = f"blocks.{i}."
        for theirs, ours in _TIMM_BLOCK.items():
            for kind in ("weight", "bias"):
                out[f"{prefix}{ours}.{kind}"] = sd[f"{prefix}{theirs}.{kind}"]
                used.add(f"{prefix}{theirs}.{kind}")
        for kind in ("weight", "bias"):
            packed = sd[f"{prefix}attn.qkv.{kind}"]
            used.add(f"{prefix}attn.qkv.{kind}")
            for name, part in zip("qkv", packed.chunk(3, dim=0)):
                out[f"{prefix}attn.{name}.{kind}"] = part.clone()
    unknown = sorted(set(sd) - used)
    if unknown:
        raise ValueError(f"timm keys without a counterpart here: {', '.join(unknown[:5])}")
    return out


def load_vit_state_dict(sd: dict[str, Tensor]) -> tuple[dict[str, Tensor], str]:
    """(our state dict, layout name) of a torchvision or timm/DeiT ViT state dict (``{"model": ...}``
    wrappers, as in DeiT's released files, are unwrapped by the caller)."""
    if "cls_token" in sd or "patch_embed.proj.weight" in sd:
        return from_timm_state_dict(sd), "timm"
    return from_torchvision_state_dict(sd), "torchvision"


def to_torchvision_state_dict(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    """Our ViT state dict → torchvision ``VisionTransformer`` names (q/k/v packed into ``in_proj``)."""
    out: dict[str, Tensor] = {}
    for ours, theirs in _TOP_KEYS:
        out[theirs] = sd[ours]
    for i in range(_n_layers(sd, r"blocks\.(\d+)\.")):
        prefix, mine = _TV_LAYER.format(i), f"blocks.{i}."
        for ours, theirs in _BLOCK_KEYS:
            out[prefix + theirs] = sd[mine + ours]
        for kind in ("weight", "bias"):
            out[f"{prefix}self_attention.in_proj_{kind}"] = torch.cat(
                [sd[f"{mine}attn.{name}.{kind}"] for name in "qkv"], dim=0)
    return out
