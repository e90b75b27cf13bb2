"""Task ``imagenet``: image classification with a ViT (registration only; no torch here).

Offline default: Fashion-MNIST (Debian ``dataset-fashion-mnist``) with a small ViT (28 px, patch 7,
d 64, 4 layers, 4 heads, MLP 256).  ``imagenet.source=hf`` reads ImageNet-1k (or another image-classification set) through
HuggingFace ``datasets`` from local files (``imagenet.data_dir``) or the local hub cache
(``imagenet.hf_name``) with a ViT-B/16-like backbone (``imagenet.arch``), optionally initialised from a
torchvision- or timm/DeiT-format state dict (``imagenet.pretrained``).  Metric: top-1 accuracy.
"""

from dataclasses import dataclass

from bench.params import param
from bench.registry import TaskSpec, register_task

ARCHS = ["auto", "small", "ti16", "s16", "b16", "b32", "l16", "l32", "h14"]


@dataclass
class ImageNetConfig:
    source: str = param("fashion-mnist", choices=["fashion-mnist", "hf"],
                        help="fashion-mnist: Debian dataset-fashion-mnist (offline default); "
                             "hf: HuggingFace datasets from data_dir or hf_name (e.g. ImageNet-1k)")
    data_dir: str = param("", help="hf: directory/glob of parquet files, a save_to_disk dir or an imagefolder "
                                   "tree; fashion-mnist: dir of the idx gz files (default: Debian's)")
    hf_name: str = param("", help="hf: dataset name resolved from the local HF cache only (hub is offline)")
    image_key: str = param("image", help="hf: image column")
    label_key: str = param("label", help="hf: label column")
    train_split: str = param("train", help="hf: training split")
    eval_split: str = param("validation", help="hf: evaluation split")
    num_classes: int = param(0, min=0, help="classes of the head (0 = from the data: 10 for fashion-mnist; "
                                            "the ClassLabel feature or 1000 for hf)")
    arch: str = param("auto", choices=ARCHS,
                      help="ViT size: auto = small for fashion-mnist, b16 for hf; small uses patch/d_model/"
                           "layers/heads/mlp below; named sizes (ti16 … h14) ignore them")
    image_size: int = param(0, min=0, help="input side in pixels (0 = 28 for fashion-mnist, 224 for hf)")
    patch: int = param(7, min=1, help="arch=small: patch size (image_size must be a multiple)")
    d_model: int = param(64, min=4, help="arch=small: width")
    layers: int = param(4, min=1, help="arch=small: depth of the dense model")
    heads: int = param(4, min=1, help="arch=small: attention heads (must divide d_model)")
    mlp: int = param(256, min=1, help="arch=small: MLP hidden size")
    pretrained: str = param("", help="path of a ViT state dict (.pth) for the base model: torchvision "
                                     "(vit_b_16 …) or timm/DeiT (deit_small_patch16_224 …) layout, told apart by its keys")
    train_steps: int = param(75040, min=0, help="optimizer steps of the dense base model "
                                                "(160 epochs of Fashion-MNIST at batch 128: the most within an "
                                                "hour on 2 cores; calibrated by the learning curve in "
                                                "reports/curves.md)")
    method_steps: int = param(2345, min=0, help="TOTAL training steps every method gets on top of the base "
                                                "model (split among its stages by the method)")
    batch_size: int = param(128, min=1, help="training batch size")
    lr: float = param(1e-3, min=0.0, help="peak learning rate (linear warm-up, cosine decay)")
    weight_decay: float = param(0.05, min=0.0, help="AdamW weight decay (0 = Adam)")
    warmup: int = param(500, min=0, help="linear warm-up steps")
    grad_clip: float = param(1.0, min=0.0, help="gradient-norm clipping (0 = off)")
    eval_batch: int = param(500, min=1, help="evaluation batch size")
    eval_samples: int = param(0, min=0, help="evaluate on the first N images of the eval split (0 = all)")
    workers: int = param(0, min=0, help="hf: image decoding threads (0 = up to 8, by CPU count)")
    streaming: bool = param(False, help="hf: read the evaluation split as a streamed HuggingFace IterableDataset "
                                        "(parquet files or a hub dataset; one batch in memory at a time)")


SPEC = register_task(TaskSpec(
    name="imagenet",
    config=ImageNetConfig,
    impl="tasks.imagenet.task:ImageNetTask",
    claims="tasks.imagenet.claims:CLAIMS",
    speed="tasks.imagenet.speed",
    description="image classification with a ViT: Fashion-MNIST offline (default) or ImageNet-1k via "
                "HuggingFace datasets (source=hf); metric top-1",
    metric="top1",
    higher_is_better=True,
    backbones=lambda cfg: ("encoder", "pooled-outputs", "image-patches"),
    test_overrides=("imagenet.d_model=16", "imagenet.layers=2", "imagenet.heads=2",
                    "imagenet.mlp=32", "imagenet.train_steps=3", "imagenet.method_steps=10",
                    "imagenet.batch_size=16", "imagenet.warmup=0", "imagenet.eval_batch=128",
                    "imagenet.eval_samples=256"),
    eval_examples=("imagenet.eval_samples=128", "imagenet.eval_batch=64"),
))
