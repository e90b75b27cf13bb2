"""Image data for task ``imagenet``: Fashion-MNIST from the Debian archive (offline default) or ImageNet-1k
(or any image-classification set) through HuggingFace ``datasets``, with no torchvision.

Fashion-MNIST (Xiao et al. 2017): the idx gz files of the Debian package ``dataset-fashion-mnist``,
60,000 train / 10,000 test 28×28 grayscale images, 10 classes.  Eval preprocessing: pixel/255, then
normalise with the training-set mean/std below.  Training augmentation: random crop with zero padding 2
and a horizontal flip (p = 0.5), before normalisation.

ImageNet (torchvision's reference recipe for ViT, ``ImageClassification`` transform): eval = resize the
shorter side to 256 (bilinear; for other image sizes s: round(s / 0.875)) → center crop 224 → /255 →
ImageNet mean/std.  Training = random-resized-crop (scale 0.08–1, ratio 3/4–4/3, 10 tries, then a
center-crop fallback) → resize to 224 (bilinear) → horizontal flip (p = 0.5) → /255 → mean/std.  No
RandAugment/mixup/cutmix: this is the "simple version" of the recipe and is named in the metric signature.

Training order is deterministic in (seed, step): epoch e visits the training split in the permutation
seeded by (seed, e); step s takes positions s·B … (s+1)·B − 1 of the concatenated epochs.  Augmentation
draws come from a generator seeded by (seed, step), so a resumed run sees exactly the same batches.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from bench.errors import UserError

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # installed by `apt-get install dataset-fashion-mnist`
# Mean/std of the 60,000 training images, pixels scaled to [0, 1] (checked in tests/test_imagenet.py).
FASHION_MNIST_MEAN = 0.2860
FASHION_MNIST_STD = 0.3530
IMAGENET_MEAN = (0.485, 0.456, 0.406)  # torchvision / ImageNet RGB statistics
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_RATIO = 224 / 256  # torchvision: resize 256 → crop 224
SPLIT_ALIASES = {"train": "train", "training": "train", "validation": "validation", "valid": "validation",
                 "val": "validation", "dev": "validation", "test": "test", "testing": "test", "eval": "validation"}


# --- training order and seeds ------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The permutation of ``range(n)`` that epoch ``epoch`` visits (seeded by seed and epoch)."""
    return np.random.default_rng([seed, epoch, 0x1A6E]).permutation(n)


def train_indices(step: int, batch_size: int, n: int, seed: int) -> np.ndarray:
    """Training-split indices of step ``step``: positions step·B … of the concatenated epoch orders."""
    positions = np.arange(step * batch_size, (step + 1) * batch_size, dtype=np.int64)
    epochs, within = positions // n, positions % n
    out = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):
        sel = epochs == epoch
        out[sel] = epoch_order(n, seed, int(epoch))[within[sel]]
    return out


def augment_rng(seed: int, step: int) -> np.random.Generator:
    return np.random.default_rng([seed, step, 0xA06])


# --- Fashion-MNIST -----------------------------------------------------------------------------------
def read_idx(path: Path) -> np.ndarray:
    """Parse an idx file (gz): magic 0x0000 08 ndim (unsigned bytes), big-endian uint32 dims, then data."""
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    if data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise UserError(f"{path}: not an idx file of unsigned bytes")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims).copy()  # writable


@functools.lru_cache(maxsize=2)
def load_fashion_mnist(root: str = FASHION_MNIST_DIR) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train": (uint8 [60000, 28, 28], int64 [60000]), "test": (… [10000, 28, 28], …)}, cached."""
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        paths = [Path(root) / f"{prefix}-{kind}-ubyte.gz" for kind in ("images-idx3", "labels-idx1")]
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise UserError(f"fashion-mnist: {missing[0]} not found; install the Debian package "
                            f"dataset-fashion-mnist or set imagenet.data_dir=/dir/with/idx-gz-files")
        images, labels = read_idx(paths[0]), read_idx(paths[1]).astype(np.int64)
        if len(images) != len(labels):
            raise UserError(f"fashion-mnist: {len(images)} images but {len(labels)} labels in {root}")
        out[split] = (images, labels)
    return out


def fashion_normalise(images_u8: np.ndarray | Tensor, image_size: int) -> Tensor:
    """uint8 [B, 28, 28] → float [B, 1, S, S]: /255, mean/std normalisation, bilinear resize if S ≠ 28."""
    x = torch.as_tensor(images_u8).float().div_(255.0)
    x = ((x - FASHION_MNIST_MEAN) / FASHION_MNIST_STD).unsqueeze(1)
    if x.shape[-1] != image_size:
        x = torch.nn.functional.interpolate(x, size=(image_size, image_size), mode="bilinear",
                                            align_corners=False)
    return x


def fashion_augment(images_u8: np.ndarray, rng: np.random.Generator, pad: int = 2) -> np.ndarray:
    """Random crop after zero padding ``pad`` and a horizontal flip with p = 0.5 (per image)."""
    b, h, w = images_u8.shape
    padded = np.pad(images_u8, ((0, 0), (pad, pad), (pad, pad)))
    offsets = rng.integers(0, 2 * pad + 1, size=(b, 2))
    flips = rng.random(b) < 0.5
    rows = offsets[:, 0, None] + np.arange(h)[None, :]  # [B, h]
    cols = offsets[:, 1, None] + np.arange(w)[None, :]  # [B, w]
    cols = np.where(flips[:, None], cols[:, ::-1], cols)
    return padded[np.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]


# --- PIL preprocessing (torchvision's ImageClassification recipe, written with PIL/numpy) ------------
def resize_shorter(img, size: int):
    """Resize so the shorter side is ``size`` (longer side: int(size·long/short)), bilinear."""
    from PIL import Image

    w, h = img.size
    if w <= h:
        new = (size, int(size * h / w))
    else:
        new = (int(size * w / h), size)
    return img if new == (w, h) else img.resize(new, Image.BILINEAR)


def center_crop(img, size: int):
    w, h = img.size
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def random_resized_crop_box(w: int, h: int, rng: np.random.Generator, scale=(0.08, 1.0),
                            ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """(left, top, width, height) of an Inception-style random crop (Szegedy et al. 2015)."""
    area = w * h
    log_ratio = (np.log(ratio[0]), np.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = float(np.exp(rng.uniform(*log_ratio)))
        cw, ch = int(round(np.sqrt(target * aspect))), int(round(np.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1)), cw, ch
    in_ratio = w / h  # fallback: the largest center crop with the aspect ratio clamped to ``ratio``
    if in_ratio < ratio[0]:
        cw, ch = w, int(round(w / ratio[0]))
    elif in_ratio > ratio[1]:
        cw, ch = int(round(h * ratio[1])), h
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def to_normalised_tensor(img) -> Tensor:
    """PIL RGB → float [3, H, W]: /255, then ImageNet mean/std."""
    arr = np.asarray(img, dtype=np.float32) / 255.0
    arr = (arr - np.asarray(IMAGENET_MEAN, np.float32)) / np.asarray(IMAGENET_STD, np.float32)
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def eval_transform(img, image_size: int) -> Tensor:
    img = img.convert("RGB")
    return to_normalised_tensor(center_crop(resize_shorter(img, int(round(image_size / CROP_RATIO))),
                                            image_size))


def train_transform(img, image_size: int, rng: np.random.Generator) -> Tensor:
    from PIL import Image

    img = img.convert("RGB")
    left, top, cw, ch = random_resized_crop_box(*img.size, rng)
    img = img.resize((image_size, image_size), Image.BILINEAR, box=(left, top, left + cw, top + ch))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return to_normalised_tensor(img)


def eval_signature(image_size: int) -> str:
    return (f"resize{int(round(image_size / CROP_RATIO))}-bilinear/centercrop{image_size}/imagenet-mean-std")


# --- HuggingFace datasets ----------------------------------------------------------------------------
def _offline_datasets():
    """Import ``datasets`` with the hub switched off (env flags, and the constants if already imported)."""
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    import datasets
    import huggingface_hub.constants

    datasets.config.HF_HUB_OFFLINE = True
    datasets.config.HF_DATASETS_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True
    datasets.disable_progress_bars()
    return datasets


def _split_of(path: str) -> str | None:
    """Split named by a file path: a directory called train/val/… or a file name starting with one."""
    parts = Path(path).parts
    for part in reversed(parts[:-1]):
        if part.lower() in SPLIT_ALIASES:
            return SPLIT_ALIASES[part.lower()]
    m = re.match(r"([a-zA-Z]+)", Path(path).name)
    return SPLIT_ALIASES.get(m.group(1).lower()) if m else None


def _parquet_files(data_dir: str) -> list[str]:
    import glob

    if any(c in data_dir for c in "*?["):
        return sorted(glob.glob(data_dir, recursive=True))
    path = Path(data_dir)
    if path.is_file():
        return [str(path)]
    return sorted(str(p) for p in path.rglob("*.parquet"))


class HFImages:
    """One split of an image-classification dataset opened through ``datasets`` (local files or hub cache).

    ``data_dir`` may be: a directory (or glob) of parquet files whose names/directories name the split
    (``train-00000-of-00257.parquet``, ``validation/…``), a ``save_to_disk`` directory, or an imagefolder
    tree (``<dir>/<split>/<class>/<image>``).  ``hf_name`` is a hub name resolved from the local cache only.
    """

    def __init__(self, *, data_dir: str, hf_name: str, split: str, image_key: str, label_key: str):
        self.image_key, self.label_key, self.split = image_key, label_key, split
        if data_dir:
            self.ds, self.source = self._open_local(data_dir, split)
        elif hf_name:
            self.ds, self.source = self._open_hub(hf_name, split), f"hf hub cache: {hf_name}"
        else:
            raise UserError("imagenet.source=hf needs imagenet.data_dir=/path/to/parquet-or-imagefolder "
                            "or imagenet.hf_name=<dataset in the local HF cache>")
        missing = [k for k in (image_key, label_key) if k not in self.ds.column_names]
        if missing:
            raise UserError(f"{self.source} split '{split}' has no column '{missing[0]}' (columns: "
                            f"{', '.join(self.ds.column_names)}); set imagenet.image_key/imagenet.label_key")

    @staticmethod
    def _open_local(data_dir: str, split: str):
        datasets = _offline_datasets()
        want = SPLIT_ALIASES.get(split.lower(), split)
        if not any(c in data_dir for c in "*?[") and not Path(data_dir).exists():
            raise UserError(f"imagenet.data_dir={data_dir}: no such file or directory; point it at a "
                            "directory of parquet files, a save_to_disk directory or an imagefolder tree")
        if Path(data_dir, "dataset_dict.json").exists() or Path(data_dir, "state.json").exists():
            loaded = datasets.load_from_disk(data_dir)
            if isinstance(loaded, datasets.DatasetDict):
                return _pick_split(dict(loaded), split, f"save_to_disk {data_dir}"), \
                    f"hf save_to_disk: {data_dir}"
            return loaded, f"hf save_to_disk: {data_dir}"
        files = _parquet_files(data_dir)
        if files:
            by_split: dict[str, list[str]] = {}
            for f in files:
                by_split.setdefault(_split_of(f) or "?", []).append(f)
            chosen = by_split.get(want) or (by_split.get(split) if split != want else None)
            if not chosen:
                found = ", ".join(f"{k} ({len(v)} files)" for k, v in sorted(by_split.items()))
                raise UserError(f"imagenet.data_dir={data_dir}: no parquet files for split '{split}' (file or "
                                f"directory names give: {found}); name files {split}-*.parquet or set "
                                "imagenet.train_split/eval_split")
            ds = datasets.load_dataset("parquet", data_files={"data": chosen}, split="data")
            return ds, f"hf parquet: {data_dir}"
        try:
            loaded = datasets.load_dataset("imagefolder", data_dir=data_dir)
        except Exception as err:  # datasets raises several types for an empty/odd directory
            raise UserError(f"imagenet.data_dir={data_dir}: neither parquet files nor an imagefolder tree "
                            f"({type(err).__name__}: {' '.join(str(err).split())[:160]})") from None
        return _pick_split(dict(loaded), split, f"imagefolder {data_dir}"), f"hf imagefolder: {data_dir}"

    @staticmethod
    def _open_hub(name: str, split: str):
        datasets = _offline_datasets()
        try:
            loaded = datasets.load_dataset(name)
        except Exception as err:  # offline: ConnectionError / FileNotFoundError / DatasetNotFoundError
            raise UserError(f"imagenet.hf_name={name}: not found in the local HuggingFace cache and the hub "
                            f"is offline ({type(err).__name__}); download it on a connected machine into "
                            "$HF_HOME or point at local files with imagenet.data_dir=/path/to/parquet") from None
        return _pick_split(dict(loaded), split, f"hub cache {name}")

    def __len__(self) -> int:
        return len(self.ds)

    @functools.cached_property
    def labels(self) -> np.ndarray:
        return np.asarray(self.ds[self.label_key], dtype=np.int64)

    def num_classes(self) -> int | None:
        feature = self.ds.features.get(self.label_key)
        return getattr(feature, "num_classes", None)

    def images(self, indices: Sequence[int]) -> list[Any]:
        rows = self.ds[list(map(int, indices))]
        return [_as_pil(img) for img in rows[self.image_key]]


class HFImageStream:
    """One split read as a streamed HuggingFace ``IterableDataset`` (``imagenet.streaming=true``): rows are
    decoded as they are iterated and never collected into a table, so evaluating ImageNet-val holds one
    batch of images at a time.  Sources: parquet files under ``data_dir`` (named by split, as for the
    map-style reader) or a hub dataset in the local cache.  Training keeps the map-style reader
    (:class:`HFImages`, memory-mapped Arrow): its (seed, step) order needs random access."""

    def __init__(self, *, data_dir: str, hf_name: str, split: str, image_key: str, label_key: str):
        datasets = _offline_datasets()
        self.image_key, self.label_key = image_key, label_key
        if data_dir:
            want = SPLIT_ALIASES.get(split.lower(), split)
            files = [f for f in _parquet_files(data_dir) if (_split_of(f) or "?") in (want, split)]
            if not files:
                raise UserError(f"imagenet.streaming=true: no parquet files for split '{split}' under "
                                f"imagenet.data_dir={data_dir} (streaming reads parquet files or a hub dataset); "
                                "name them <split>-*.parquet or set imagenet.streaming=false")
            self.ds = datasets.load_dataset("parquet", data_files={"data": files}, split="data", streaming=True)
            self.source = f"hf parquet stream: {data_dir}"
        elif hf_name:
            try:
                self.ds = datasets.load_dataset(hf_name, split=split, streaming=True)
            except Exception as err:  # offline hub: several exception types
                raise UserError(f"imagenet.hf_name={hf_name}: cannot stream split '{split}' from the local "
                                f"HuggingFace cache ({type(err).__name__}); use imagenet.data_dir=/path/to/parquet") from None
            self.source = f"hf hub stream: {hf_name}"
        else:
            raise UserError("imagenet.source=hf needs imagenet.data_dir=/path/to/parquet or imagenet.hf_name")

    def num_classes(self) -> int | None:
        features = getattr(self.ds, "features", None) or {}
        return getattr(features.get(self.label_key), "num_classes", None)

    def batches(self, size: int, limit: int = 0):
        """(PIL images, labels) of consecutive rows, ``size`` at a time, the first ``limit`` rows (0 = all)."""
        images, labels, seen = [], [], 0
        for row in self.ds:
            if limit and seen >= limit:
                break
            if self.image_key not in row or self.label_key not in row:
                raise UserError(f"{self.source}: rows have no '{self.image_key}'/'{self.label_key}' column "
                                f"(columns: {', '.join(row)}); set imagenet.image_key/imagenet.label_key")
            images.append(_as_pil(row[self.image_key]))
            labels.append(int(row[self.label_key]))
            seen += 1
            if len(images) == size:
                yield images, labels
                images, labels = [], []
        if images:
            yield images, labels


def _pick_split(splits: dict[str, Any], split: str, where: str):
    want = SPLIT_ALIASES.get(split.lower(), split)
    for name, ds in splits.items():
        if name == split or SPLIT_ALIASES.get(name.lower(), name) == want:
            return ds
    raise UserError(f"{where}: no split '{split}' (splits: {', '.join(splits)}); "
                    "set imagenet.train_split/imagenet.eval_split")


def _as_pil(value: Any):
    """An ``Image`` feature value (PIL, or {'bytes', 'path'} when not decoded) → PIL image."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return value
    if isinstance(value, dict):
        if value.get("bytes"):
            import io

            return Image.open(io.BytesIO(value["bytes"]))
        return Image.open(value["path"])
    raise UserError(f"image column holds {type(value).__name__}, not images; set imagenet.image_key")


def preprocess(images: list[Any], fn, workers: int) -> Tensor:
    """Apply ``fn`` to every image (PIL decode/resize release the GIL, so threads help) and stack."""
    if workers > 1 and len(images) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return torch.stack(list(pool.map(fn, images)))
    return torch.stack([fn(img) for img in images])
