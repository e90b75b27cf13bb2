"""Task ``imagenet``: ViT image classification, top-1 accuracy.

Sources (``imagenet.source``):
  fashion-mnist  the real Fashion-MNIST from the Debian archive (offline default), small ViT;
  hf             ImageNet-1k (or any image-classification set) via HuggingFace ``datasets``, ViT-B/16 by
                 default, optionally from torchvision weights.  Configured data that is missing is a
                 one-line ``UserError``; there is never a silent fallback to Fashion-MNIST.
Preprocessing, training order and augmentation seeds: see tasks/imagenet/data.py.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor, nn

from bench.api import Batch, Task, encode_image
from bench.errors import UserError
from bench.models.transformer import EncoderConfig
from tasks.imagenet import data as D
from tasks.imagenet import vit as V


class ImageNetTask(Task):
    name = "imagenet"
    metric = "top1"
    higher_is_better = True
    not_base_keys = ("method_steps", "eval_batch", "eval_samples", "eval_split", "workers", "streaming")

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        self.source = str(cfg.source)
        self.image_size = int(cfg.image_size) or (28 if self.source == "fashion-mnist" else 224)
        self.workers = int(cfg.workers) or min(8, os.cpu_count() or 1)
        self._prefetch: tuple[tuple[int, int], Future] | None = None
        self._pool: ThreadPoolExecutor | None = None
        if self.source == "fashion-mnist":
            self._fm = D.load_fashion_mnist(str(cfg.data_dir) or D.FASHION_MNIST_DIR)
            images, labels = self._fm["test"]
            n = self._eval_count(len(labels))
            self._test_x = D.fashion_normalise(images[:n], self.image_size)
            self._test_y = torch.as_tensor(labels[:n])
            self._classes = int(cfg.num_classes) or 10
        elif bool(cfg.streaming):
            self._eval = D.HFImageStream(data_dir=str(cfg.data_dir), hf_name=str(cfg.hf_name),
                                         split=str(cfg.eval_split), image_key=str(cfg.image_key),
                                         label_key=str(cfg.label_key))
            self._classes = int(cfg.num_classes) or self._eval.num_classes() or 1000
        else:
            self._eval = self._open(str(cfg.eval_split))
            feature_classes = self._eval.num_classes()
            self._classes = int(cfg.num_classes) or feature_classes or 1000
            top = int(self._eval.labels[: self._eval_count(len(self._eval))].max(initial=-1))
            if top >= self._classes:
                raise UserError(f"{self._eval.source}: label {top} >= num_classes {self._classes}; "
                                "set imagenet.num_classes")
        self.vit = self._vit_config()

    # --- data -------------------------------------------------------------------------------------
    def _eval_count(self, total: int) -> int:
        limit = int(self.cfg.eval_samples)
        return min(limit, total) if limit else total

    def _open(self, split: str) -> D.HFImages:
        return D.HFImages(data_dir=str(self.cfg.data_dir), hf_name=str(self.cfg.hf_name), split=split,
                          image_key=str(self.cfg.image_key), label_key=str(self.cfg.label_key))

    @functools.cached_property
    def _train(self) -> D.HFImages:
        return self._open(str(self.cfg.train_split))

    @property
    def dataset(self) -> str:
        if self.source == "fashion-mnist":
            n_train, n_test = len(self._fm["train"][1]), len(self._fm["test"][1])
            where = "debian dataset-fashion-mnist" if not self.cfg.data_dir else str(self.cfg.data_dir)
            used = f", eval first {len(self._test_y)}" if len(self._test_y) < n_test else ""
            return f"fashion-mnist ({where}, {n_train}/{n_test}{used})"
        name = "imagenet-1k" if self._classes == 1000 else f"image-classification-{self._classes}"
        if isinstance(self._eval, D.HFImageStream):
            limit = int(self.cfg.eval_samples)
            return f"{name} ({self._eval.source}, {self.cfg.eval_split} streamed{f', first {limit}' if limit else ''})"
        n_eval = len(self._eval)
        used = f" (first {self._eval_count(n_eval)})" if self._eval_count(n_eval) < n_eval else ""
        return f"{name} ({self._eval.source}, {self.cfg.eval_split} {n_eval}{used})"

    @property
    def metric_signature(self) -> str:
        if self.source == "fashion-mnist":
            return (f"top1; eval: /255, mean {D.FASHION_MNIST_MEAN} std {D.FASHION_MNIST_STD}, "
                    f"{self.image_size}px; train aug: pad2-crop/hflip")
        return f"top1; eval: {D.eval_signature(self.image_size)}; train aug: rrc0.08/hflip"

    def train_batch(self, step: int, batch_size: int) -> Batch:
        if self.source == "fashion-mnist":
            return self._fashion_train(step, batch_size)
        # hf: decode the next step's batch in the background while this one trains (same result).
        key = (step, batch_size)
        if self._prefetch is not None and self._prefetch[0] == key:
            batch = self._prefetch[1].result()
        else:
            batch = self._hf_train(step, batch_size)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1)
        self._prefetch = ((step + 1, batch_size), self._pool.submit(self._hf_train, step + 1, batch_size))
        return batch

    def _fashion_train(self, step: int, batch_size: int) -> Batch:
        images, labels = self._fm["train"]
        idx = D.train_indices(step, batch_size, len(labels), self.run.seed)
        x = D.fashion_augment(images[idx], D.augment_rng(self.run.seed, step))
        return Batch(D.fashion_normalise(x, self.image_size), torch.as_tensor(labels[idx]),
                     {"index": torch.as_tensor(idx)})

    def train_shard(self, step: int, batch_size: int, rank: int, world: int) -> Batch:
        """hf: decode only this rank's rows (each image's augmentation has its own seed, drawn for the whole
        global batch, so a shard holds exactly the rows of the single-process batch)."""
        if self.source == "fashion-mnist" or world == 1:
            return super().train_shard(step, batch_size, rank, world)
        return self._hf_train(step, batch_size, rows=slice(rank * batch_size // world, (rank + 1) * batch_size // world))

    def _hf_train(self, step: int, batch_size: int, rows: slice = slice(None)) -> Batch:
        idx = D.train_indices(step, batch_size, len(self._train), self.run.seed)
        rng = D.augment_rng(self.run.seed, step)
        seeds = rng.integers(0, 2**63 - 1, size=len(idx))  # one generator per image: thread-order free
        idx, seeds = idx[rows], seeds[rows]
        images = self._train.images(idx)
        jobs = list(zip(images, seeds))
        x = D.preprocess(jobs, lambda job: D.train_transform(job[0], self.image_size,
                                                             np.random.default_rng(int(job[1]))),
                         self.workers)
        return Batch(x, torch.as_tensor(self._train.labels[idx]), {"index": torch.as_tensor(idx)})

    def _hf_eval(self, start: int, stop: int) -> Batch:
        idx = np.arange(start, stop)
        x = D.preprocess(self._eval.images(idx), lambda img: D.eval_transform(img, self.image_size),
                         self.workers)
        return Batch(x, torch.as_tensor(self._eval.labels[idx]), {"index": torch.as_tensor(idx)})

    def eval_batches(self) -> Iterable[Batch]:
        size = int(self.cfg.eval_batch)
        if self.source == "fashion-mnist":
            for start in range(0, len(self._test_y), size):
                sl = slice(start, start + size)
                yield Batch(self._test_x[sl], self._test_y[sl],
                            {"index": torch.arange(start, start + len(self._test_y[sl]))})
            return
        if isinstance(self._eval, D.HFImageStream):  # streamed: one batch of decoded images at a time
            start = 0
            for images, labels in self._eval.batches(size, int(self.cfg.eval_samples)):
                x = D.preprocess(images, lambda img: D.eval_transform(img, self.image_size), self.workers)
                yield Batch(x, torch.as_tensor(labels), {"index": torch.arange(start, start + len(labels))})
                start += len(labels)
            return
        total = self._eval_count(len(self._eval))
        for start in range(0, total, size):
            yield self._hf_eval(start, min(total, start + size))

    def preview(self, x: Tensor) -> list[str]:
        return [encode_image(image) for image in x]

    def example_input(self, batch_size: int) -> Tensor:
        x = self._example_pool(min(batch_size, 256))
        reps = -(-batch_size // len(x))
        return x.repeat(reps, 1, 1, 1)[:batch_size]

    @functools.lru_cache(maxsize=2)
    def _example_pool(self, n: int) -> Tensor:
        if self.source == "fashion-mnist":
            return self._test_x[:n]
        if isinstance(self._eval, D.HFImageStream):
            images, _ = next(iter(self._eval.batches(n, int(self.cfg.eval_samples))))
            return D.preprocess(images, lambda img: D.eval_transform(img, self.image_size), self.workers)
        return self._hf_eval(0, min(n, self._eval_count(len(self._eval)))).x

    # --- model ------------------------------------------------------------------------------------
    def _vit_config(self) -> V.ViTConfig:
        arch = str(self.cfg.arch)
        if arch == "auto":
            arch = "small" if self.source == "fashion-mnist" else "b16"
        channels = 1 if self.source == "fashion-mnist" else 3
        cfg = V.vit_config(arch, image_size=self.image_size, channels=channels, classes=self._classes)
        if arch == "small":
            c = self.cfg
            cfg = replace(cfg, patch=int(c.patch), d_model=int(c.d_model), layers=int(c.layers),
                          heads=int(c.heads), mlp=int(c.mlp))
        if cfg.image_size % cfg.patch:
            raise UserError(f"imagenet.image_size={cfg.image_size} is not a multiple of the patch size "
                            f"{cfg.patch}")
        if cfg.d_model % cfg.heads:
            raise UserError(f"imagenet.d_model={cfg.d_model} is not divisible by imagenet.heads={cfg.heads}")
        return cfg

    def vit_config(self, width: float = 1.0, depth: float = 1.0) -> V.ViTConfig:
        """The ViT at a size: width scales d_model (rounded to a multiple of heads) and the MLP; depth the
        number of layers (at least 1)."""
        cfg = self.vit
        heads = cfg.heads
        d_model = max(heads, int(round(cfg.d_model * width / heads)) * heads)
        return replace(cfg, d_model=d_model, mlp=max(1, int(round(cfg.mlp * width))),
                       layers=max(1, int(round(cfg.layers * depth))))

    def encoder_config(self, width: float = 1.0, depth: float = 1.0) -> EncoderConfig:
        return V.encoder_config(self.vit_config(width, depth))

    def build_backbone(self, width: float = 1.0, depth: float = 1.0) -> nn.Module:
        model = V.build_vit(self.vit_config(width, depth))
        if self.cfg.pretrained and width == 1.0 and depth == 1.0:
            self._load_pretrained(model)
        return model

    def _load_pretrained(self, model: nn.Module) -> None:
        path = str(self.cfg.pretrained)
        if not os.path.exists(path):
            raise UserError(f"imagenet.pretrained={path}: no such file; give a torchvision- or timm/DeiT-format "
                            "ViT state dict (.pth)")
        sd = torch.load(path, map_location="cpu", weights_only=True)
        sd = sd.get("model", sd) if isinstance(sd, dict) else sd
        try:
            model.load_state_dict(V.load_vit_state_dict(sd)[0], strict=True)
        except (KeyError, ValueError, RuntimeError) as err:
            first = " ".join(str(err).split())[:200]
            raise UserError(f"imagenet.pretrained={path} does not fit arch={self.cfg.arch} "
                            f"({self.vit.d_model}d x {self.vit.layers}, {self._classes} classes): {first}") from None

    def base_budget(self) -> dict[str, Any]:
        return {"steps": int(self.cfg.train_steps), "batch_size": int(self.cfg.batch_size),
                "lr": float(self.cfg.lr),
                "fit": {"weight_decay": float(self.cfg.weight_decay), "warmup": int(self.cfg.warmup),
                        "grad_clip": float(self.cfg.grad_clip) or None}}
