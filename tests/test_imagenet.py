"""Task ``imagenet``: ViT weights mapping onto torchvision's names, published GMACs, data loaders and errors."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from bench import cost
from bench.errors import UserError
from tasks.imagenet import SPEC, ImageNetConfig
from tasks.imagenet import data as D
from tasks.imagenet import vit as V
from tasks.imagenet.task import ImageNetTask

HAVE_FMNIST = Path(D.FASHION_MNIST_DIR, "train-images-idx3-ubyte.gz").exists()
needs_fmnist = pytest.mark.skipif(not HAVE_FMNIST, reason=f"{D.FASHION_MNIST_DIR} absent: "
                                  "apt-get install dataset-fashion-mnist")


def make_task(**overrides) -> ImageNetTask:
    cfg = OmegaConf.structured(ImageNetConfig)
    for key, value in overrides.items():
        cfg[key] = value
    return ImageNetTask(cfg, SimpleNamespace(seed=0))


# --- torchvision state dict ------------------------------------------------------------------------
def vit_b_16_keys() -> dict[str, tuple[int, ...]]:
    """torchvision ``vit_b_16().state_dict()`` names and shapes, written out from its documentation."""
    d, mlp = 768, 3072
    keys = {"class_token": (1, 1, d), "conv_proj.weight": (d, 3, 16, 16), "conv_proj.bias": (d,),
            "encoder.pos_embedding": (1, 197, d)}
    for i in range(12):
        p = f"encoder.layers.encoder_layer_{i}."
        keys.update({p + "ln_1.weight": (d,), p + "ln_1.bias": (d,),
                     p + "self_attention.in_proj_weight": (3 * d, d), p + "self_attention.in_proj_bias": (3 * d,),
                     p + "self_attention.out_proj.weight": (d, d), p + "self_attention.out_proj.bias": (d,),
                     p + "ln_2.weight": (d,), p + "ln_2.bias": (d,),
                     p + "mlp.0.weight": (mlp, d), p + "mlp.0.bias": (mlp,),
                     p + "mlp.3.weight": (d, mlp), p + "mlp.3.bias": (d,)})
    keys.update({"encoder.ln.weight": (d,), "encoder.ln.bias": (d,), "heads.head.weight": (1000, d),
                 "heads.head.bias": (1000,)})
    return keys


def test_vit_b16_maps_onto_torchvision_names_and_shapes():
    with torch.device("meta"):
        model = V.build_vit(V.vit_config("B/16"))
    tv = V.to_torchvision_state_dict(model.state_dict())
    expected = vit_b_16_keys()
    assert {k: tuple(v.shape) for k, v in tv.items()} == expected
    assert sum(int(np.prod(s)) for s in expected.values()) == 86_567_656  # torchvision docs: 86.57M params
    # A torchvision-format state dict loads strictly.
    with torch.device("meta"):
        fake = {k: torch.empty(s) for k, s in expected.items()}
    model.load_state_dict(V.from_torchvision_state_dict(fake), strict=True, assign=True)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 25 and all(m.eps == 1e-6 for m in norms)


def test_state_dict_round_trip_is_exact_and_unknown_keys_fail():
    torch.manual_seed(0)
    model = V.build_vit(V.vit_config("small", layers=2))
    ours = model.state_dict()
    back = V.from_torchvision_state_dict(V.to_torchvision_state_dict(ours))
    assert set(back) == set(ours) and all(torch.equal(back[k], ours[k]) for k in ours)
    tv = V.to_torchvision_state_dict(ours)
    with pytest.raises(ValueError, match="pre_logits"):
        V.from_torchvision_state_dict({**tv, "heads.pre_logits.weight": torch.zeros(1)})
    with pytest.raises(KeyError):
        V.from_torchvision_state_dict({k: v for k, v in tv.items() if "ln_2" not in k})


def torchvision_style_forward(sd: dict, x: torch.Tensor, cfg: V.ViTConfig) -> torch.Tensor:
    """torchvision's ViT computation on its own state dict (conv patches, cls first, nn.MultiheadAttention)."""
    d = cfg.d_model
    x = F.conv2d(x, sd["conv_proj.weight"], sd["conv_proj.bias"], stride=cfg.patch)
    x = x.reshape(x.shape[0], d, -1).permute(0, 2, 1)
    x = torch.cat([sd["class_token"].expand(x.shape[0], -1, -1), x], dim=1) + sd["encoder.pos_embedding"]
    for i in range(cfg.layers):
        p = f"encoder.layers.encoder_layer_{i}."
        mha = torch.nn.MultiheadAttention(d, cfg.heads, batch_first=True)
        mha.load_state_dict({"in_proj_weight": sd[p + "self_attention.in_proj_weight"],
                             "in_proj_bias": sd[p + "self_attention.in_proj_bias"],
                             "out_proj.weight": sd[p + "self_attention.out_proj.weight"],
                             "out_proj.bias": sd[p + "self_attention.out_proj.bias"]})
        y = F.layer_norm(x, (d,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"], eps=1e-6)
        x = x + mha(y, y, y, need_weights=False)[0]
        y = F.layer_norm(x, (d,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"], eps=1e-6)
        y = F.linear(F.gelu(F.linear(y, sd[p + "mlp.0.weight"], sd[p + "mlp.0.bias"])),
                     sd[p + "mlp.3.weight"], sd[p + "mlp.3.bias"])
        x = x + y
    x = F.layer_norm(x, (d,), sd["encoder.ln.weight"], sd["encoder.ln.bias"], eps=1e-6)
    return F.linear(x[:, 0], sd["heads.head.weight"], sd["heads.head.bias"])


def test_loaded_torchvision_weights_compute_the_same_function():
    torch.manual_seed(1)
    cfg = V.vit_config("small", image_size=32, patch=8, channels=3, d_model=24, heads=3, mlp=40, layers=2)
    tv = {k: torch.randn_like(v) * 0.2 for k, v in V.to_torchvision_state_dict(V.build_vit(cfg).state_dict()).items()}
    model = V.build_vit(cfg).eval()
    model.load_state_dict(V.from_torchvision_state_dict(tv), strict=True)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), torchvision_style_forward(tv, x, cfg), atol=1e-5, rtol=1e-5)


# --- cost -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,gmacs", [("b32", 4.41), ("b16", 17.56), ("l32", 15.38), ("l16", 61.55)])
def test_counter_reproduces_torchvision_gmacs(name, gmacs):
    with torch.device("meta"):
        cfg = V.vit_config(name)
        model = V.build_vit(cfg).eval()
        report = cost.count(model, torch.empty(1, 3, 224, 224))
    assert report.uncounted == []
    assert abs(report.macs / 1e9 - gmacs) / gmacs < 0.005
    assert model.macs(cfg.n_patches + 1) == report.macs


def test_small_vit_analytic_macs_equal_counter_on_cpu():
    model = V.build_vit(V.SMALL).eval()
    report = cost.count(model, torch.randn(2, 1, 28, 28))
    assert report.macs == 2 * model.macs(V.SMALL.n_patches + 1) and report.uncounted == []


# --- Fashion-MNIST --------------------------------------------------------------------------------
@needs_fmnist
def test_fashion_mnist_loader_counts_labels_and_statistics():
    data = D.load_fashion_mnist()
    (xtr, ytr), (xte, yte) = data["train"], data["test"]
    assert xtr.shape == (60000, 28, 28) and xte.shape == (10000, 28, 28) and xtr.dtype == np.uint8
    assert np.bincount(ytr).tolist() == [6000] * 10 and np.bincount(yte).tolist() == [1000] * 10
    mean, std = xtr.mean(dtype=np.float64) / 255.0, xtr.std(dtype=np.float64) / 255.0
    assert abs(mean - D.FASHION_MNIST_MEAN) < 1e-4 and abs(std - D.FASHION_MNIST_STD) < 1e-4


@needs_fmnist
def test_fashion_task_batches_are_deterministic_and_cover_epochs():
    task = make_task()
    a, b = task.train_batch(7, 32), make_task().train_batch(7, 32)
    assert a.x.shape == (32, 1, 28, 28) and torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert not torch.equal(a.x, task.train_batch(8, 32).x)
    other_seed = ImageNetTask(task.cfg, SimpleNamespace(seed=1)).train_batch(7, 32)
    assert not torch.equal(a.meta["index"], other_seed.meta["index"])
    # The labels are the ones of the indexed training images; one epoch visits every image once.
    assert torch.equal(a.y, torch.as_tensor(D.load_fashion_mnist()["train"][1][a.meta["index"].numpy()]))
    epoch = np.concatenate([D.train_indices(s, 1000, 60000, 0) for s in range(60)])
    assert np.array_equal(np.sort(epoch), np.arange(60000))
    straddle = D.train_indices(468, 128, 60000, 0)  # positions 59904..60031: 96 of epoch 0, 32 of epoch 1
    assert np.array_equal(straddle[:96], D.epoch_order(60000, 0, 0)[-96:])
    assert np.array_equal(straddle[96:], D.epoch_order(60000, 0, 1)[:32])
    # Eval: fixed order, eval_samples, normalisation only.
    small = make_task(eval_samples=300, eval_batch=128)
    batches = list(small.eval_batches())
    assert [len(b) for b in batches] == [128, 128, 44]
    raw = D.load_fashion_mnist()["test"][0][:128].astype(np.float32) / 255.0
    expected = (raw - D.FASHION_MNIST_MEAN) / D.FASHION_MNIST_STD
    torch.testing.assert_close(batches[0].x[:, 0], torch.from_numpy(expected))
    assert small.example_input(5).shape == (5, 1, 28, 28)
    assert "fashion-mnist" in small.dataset and "60000/10000" in small.dataset


def test_fashion_augment_crops_within_padding_and_flips():
    img = np.arange(28 * 28, dtype=np.int64).reshape(1, 28, 28).repeat(64, 0) % 251 + 1
    out = D.fashion_augment(img.astype(np.uint8), np.random.default_rng(0))
    for o in out:  # every output is a shifted (and maybe mirrored) window of the zero-padded input
        padded = np.pad(img[0], 2)
        hits = [(dy, dx, f) for dy in range(5) for dx in range(5) for f in (False, True)
                if np.array_equal(o, (padded[dy:dy + 28, dx:dx + 28][:, ::-1] if f else padded[dy:dy + 28, dx:dx + 28]))]
        assert hits
    assert len({o.tobytes() for o in out}) > 10


@needs_fmnist
def test_backbone_sizes_and_registry_overrides():
    task = make_task()
    assert task.vit == V.SMALL
    half = task.vit_config(width=0.5, depth=0.5)
    assert (half.d_model, half.mlp, half.layers, half.heads) == (32, 128, 2, 4)
    odd = task.vit_config(width=0.3)  # 19.2 → a multiple of 4 heads
    assert odd.d_model % odd.heads == 0 and odd.d_model == 20
    # the base model's fit settings are the task config's (whatever its defaults are)
    assert task.base_budget()["fit"] == {"weight_decay": float(task.cfg.weight_decay), "warmup": int(task.cfg.warmup),
                                         "grad_clip": float(task.cfg.grad_clip)}
    from bench import config

    cfg = config.compose(["task=imagenet", *SPEC.test_overrides])
    tiny = ImageNetTask(cfg.imagenet, SimpleNamespace(seed=0))
    model = tiny.build_backbone().eval()
    batch = next(iter(tiny.eval_batches()))
    assert sum(len(b) for b in tiny.eval_batches()) == 256
    assert cost.count(model, batch.x).macs == len(batch) * model.macs(model.embed.n_patches + 1)


@needs_fmnist
def test_pretrained_torchvision_file_initialises_the_base_model(tmp_path):
    torch.manual_seed(3)
    donor = V.build_vit(V.SMALL)
    path = tmp_path / "vit.pth"
    torch.save(V.to_torchvision_state_dict(donor.state_dict()), path)
    model = make_task(pretrained=str(path)).build_backbone()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), donor.state_dict().values()))
    with pytest.raises(UserError, match="does not fit"):
        make_task(pretrained=str(path), d_model=32).build_backbone()


# --- HuggingFace sources ---------------------------------------------------------------------------
def isolate_hf_cache(tmp_path: Path, monkeypatch) -> None:
    """Keep the arrow copies that ``load_dataset`` makes (and hub look-ups) inside tmp_path."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")
    monkeypatch.setattr(datasets.config, "HF_CACHE_HOME", str(tmp_path / "hf"))


def write_parquet_dataset(root: Path, n: int = 12, size=(48, 40)) -> list[int]:
    """``n`` random RGB PNGs (w×h = size) with labels, as train-/validation-*.parquet files."""
    import datasets
    from PIL import Image

    rng = np.random.default_rng(0)
    labels = [int(v) for v in rng.integers(0, 3, n)]
    images = [Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)) for _ in range(n)]
    images[0] = Image.new("RGB", size, (200, 30, 90))  # a constant image: exact expected pixels
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=3)})
    ds = datasets.Dataset.from_dict({"image": images, "label": labels}, features=features)
    root.mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(root / "train-00000-of-00001.parquet"))
    ds.to_parquet(str(root / "validation-00000-of-00001.parquet"))
    return labels


def test_parquet_source_reads_images_with_imagenet_preprocessing(tmp_path, monkeypatch):
    isolate_hf_cache(tmp_path, monkeypatch)
    labels = write_parquet_dataset(tmp_path / "pq")
    kw = dict(source="hf", data_dir=str(tmp_path / "pq"), arch="small", patch=16, d_model=16, heads=2,
              mlp=16, layers=1, eval_batch=5, workers=2)
    task = make_task(**kw)
    batches = list(task.eval_batches())
    assert [tuple(b.x.shape) for b in batches] == [(5, 3, 224, 224), (5, 3, 224, 224), (2, 3, 224, 224)]
    assert torch.cat([b.y for b in batches]).tolist() == labels
    mean, std = torch.tensor(D.IMAGENET_MEAN), torch.tensor(D.IMAGENET_STD)
    expected = (torch.tensor([200, 30, 90]) / 255.0 - mean) / std
    torch.testing.assert_close(batches[0].x[0], expected[:, None, None].expand(3, 224, 224))
    assert task.dataset.startswith("image-classification-3 (hf parquet: ") and "validation 12" in task.dataset
    assert "resize256-bilinear/centercrop224/imagenet-mean-std" in task.metric_signature
    assert task.build_backbone()(batches[0].x).shape == (5, 3)
    # Training batches: random-resized-crop + flip, deterministic in (seed, step) with or without prefetch.
    first = task.train_batch(0, 4)
    second = task.train_batch(1, 4)  # served by the prefetch started at step 0
    fresh = make_task(**kw).train_batch(1, 4)
    assert first.x.shape == (4, 3, 224, 224) and torch.equal(second.x, fresh.x)
    assert torch.equal(second.y, fresh.y) and not torch.equal(first.x, second.x)
    small = make_task(**{**kw, "image_size": 32, "eval_samples": 3})
    assert [tuple(b.x.shape) for b in small.eval_batches()] == [(3, 3, 32, 32)]


def test_resize_and_crop_follow_torchvision_geometry():
    from PIL import Image

    assert D.resize_shorter(Image.new("RGB", (48, 40)), 256).size == (307, 256)
    assert D.resize_shorter(Image.new("RGB", (40, 48)), 256).size == (256, 307)
    img = Image.new("RGB", (307, 256))
    img.paste((255, 255, 255), (0, 0, 42, 256))  # a white band exactly left of torchvision's crop box
    crop = np.asarray(D.center_crop(img, 224))
    assert crop.shape == (224, 224, 3) and crop.max() == 0
    rng = np.random.default_rng(0)
    for _ in range(50):
        left, top, w, h = D.random_resized_crop_box(300, 200, rng)
        assert 0 <= left and left + w <= 300 and 0 <= top and top + h <= 200 and w * h >= 0.079 * 300 * 200 * 0.99


@pytest.mark.parametrize("overrides,needle", [
    ({"data_dir": "/nonexistent/imagenet"}, "imagenet.data_dir=/nonexistent/imagenet"),
    ({"hf_name": "no-such-org/no-such-imagenet"}, "imagenet.hf_name=no-such-org/no-such-imagenet"),
    ({}, "imagenet.data_dir="),
])
def test_missing_real_data_is_one_line_user_error(overrides, needle, tmp_path, monkeypatch):
    isolate_hf_cache(tmp_path, monkeypatch)
    with pytest.raises(UserError) as err:
        make_task(source="hf", **overrides)
    message = str(err.value)
    assert "\n" not in message and needle in message and "imagenet.data_dir" in message


def test_empty_directory_and_wrong_split_are_user_errors(tmp_path, monkeypatch):
    isolate_hf_cache(tmp_path, monkeypatch)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="neither parquet files nor an imagefolder"):
        make_task(source="hf", data_dir=str(tmp_path / "empty"))
    write_parquet_dataset(tmp_path / "pq", n=3)
    with pytest.raises(UserError, match="no parquet files for split 'test'"):
        make_task(source="hf", data_dir=str(tmp_path / "pq"), eval_split="test")


def test_missing_fashion_mnist_directory_is_user_error(tmp_path):
    with pytest.raises(UserError, match="dataset-fashion-mnist"):
        make_task(data_dir=str(tmp_path))


def test_streamed_evaluation_and_rank_shards_match_the_map_style_reader(tmp_path, monkeypatch):
    """imagenet.streaming=true reads the evaluation split as an IterableDataset with the same batches; a
    rank's training shard decodes only its rows and equals those rows of the whole batch."""
    isolate_hf_cache(tmp_path, monkeypatch)
    write_parquet_dataset(tmp_path / "pq")
    kw = dict(source="hf", data_dir=str(tmp_path / "pq"), arch="small", patch=16, d_model=16, heads=2,
              mlp=16, layers=1, eval_batch=5, workers=1, image_size=32)
    mapped, streamed = make_task(**kw), make_task(**kw, streaming=True)
    assert isinstance(streamed._eval, D.HFImageStream) and "validation streamed" in streamed.dataset
    pairs = list(zip(mapped.eval_batches(), streamed.eval_batches(), strict=True))
    assert len(pairs) == 3
    for a, b in pairs:
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and torch.equal(a.meta["index"], b.meta["index"])
    whole = mapped.train_batch(3, 4)
    halves = [mapped.train_shard(3, 4, rank, 2) for rank in (0, 1)]
    assert torch.equal(torch.cat([h.x for h in halves]), whole.x)
    assert torch.equal(torch.cat([h.y for h in halves]), whole.y)
