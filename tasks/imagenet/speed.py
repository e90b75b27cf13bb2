"""``bench speed`` sizes of the imagenet task: its own ViT (tasks/imagenet/vit.py) at the papers' sizes,
random weights, 224 px RGB inputs drawn from N(0, 1) (only time and cost are measured).

ViT-Ti/16 and S/16 are DeiT's sizes, B/16 the ViT paper's (197 tokens; 17.56 GMACs per image: the
sizes A-ViT (DeiT-T/S), ACM (ViT-B/16) and MoEfication-on-ViT (ACM's baseline, ViT-B/16) report speed
at).  ``default`` is the offline default model (Fashion-MNIST's ViT: 28 px grey images, patch 7, d 64, 4
layers: the model a fresh clone's first rows come from), timed beside the papers' sizes.  ``tiny`` is for
tests (32 px, patch 8: 17 tokens, d 32).
"""

from __future__ import annotations

from bench.speed import SpeedArch, SpeedBackbone, Stack
from tasks.imagenet.vit import SMALL, ViTConfig, build_vit

ARCHS = {
    "ti16": SpeedArch("ti16", Stack(192, 12, 3, 768), length=224, note="DeiT-Ti/16, 224 px"),
    "s16": SpeedArch("s16", Stack(384, 12, 6, 1536), length=224, note="DeiT-S/16, 224 px"),
    "b16": SpeedArch("b16", Stack(768, 12, 12, 3072), length=224, note="ViT-B/16, 224 px"),
    "default": SpeedArch("default", Stack(SMALL.d_model, SMALL.layers, SMALL.heads, SMALL.mlp),
                         length=SMALL.image_size, note="the offline default: Fashion-MNIST ViT, 28 px grey, patch 7"),
    "tiny": SpeedArch("tiny", Stack(32, 2, 2, 128), length=32, note="tests: 32 px, patch 8"),
}


def build(arch: SpeedArch) -> SpeedBackbone:
    import torch

    s = arch.encoder
    patch, channels, classes = {"tiny": (8, 3, 10), "default": (SMALL.patch, SMALL.channels, SMALL.classes)
                                }.get(arch.name, (16, 3, 1000))
    cfg = ViTConfig(image_size=int(arch.length), patch=patch, channels=channels, classes=classes,
                    d_model=s.d_model, layers=s.layers, heads=s.heads, mlp=s.mlp)
    model = build_vit(cfg)

    def example(batch: int, generator) -> torch.Tensor:
        return torch.randn(batch, cfg.channels, cfg.image_size, cfg.image_size, generator=generator)

    return SpeedBackbone(model, example, tokens=cfg.n_patches + 1, capabilities=("encoder", "image-patches"),
                         classes=cfg.classes)
