"""timm / DeiT ViT state dicts load into the skeleton ViT and compute what the reference computes.

Reference: HF ``ViTForImageClassification`` (HF's port of the non-distilled DeiT checkpoints); its random
weights are written in timm's layout (``{"model": ...}``, q/k/v packed in ``attn.qkv``) and loaded through
the task's loader.  Same logits (1e-5, fp32) and same top-1; DeiT-S at 224 px costs 4.6 GMACs (DeiT,
Touvron et al. 2021, Table 1), checked on the counter at full size (meta device).
"""

import pytest
import torch

from bench import cost
from tasks.imagenet import vit as V
from tests.pretrained_fixtures import write_deit


def test_logits_match_transformers_vit(tmp_path):
    path, ref = write_deit(tmp_path / "deit.pth")
    sd = torch.load(path, weights_only=True)["model"]
    ours_sd, layout = V.load_vit_state_dict(sd)
    assert layout == "timm"
    model = V.build_vit(V.ViTConfig(image_size=32, patch=8, channels=3, classes=10, d_model=16, layers=2, heads=2,
                                    mlp=32)).eval()
    model.load_state_dict(ours_sd, strict=True)
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        expected = ref(pixel_values=images).logits
        got = model(images)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(got.argmax(-1), expected.argmax(-1))
    assert len(set(got.argmax(-1).tolist())) > 1


def test_distilled_and_unknown_layouts_are_refused(tmp_path):
    path, _ = write_deit(tmp_path / "deit.pth")
    sd = torch.load(path, weights_only=True)["model"]
    sd["dist_token"] = torch.zeros(1, 1, 16)
    with pytest.raises(ValueError, match="dist_token"):
        V.load_vit_state_dict(sd)


def test_imagenet_task_loads_a_timm_checkpoint(tmp_path):
    from bench import runner
    from tests.helpers import compose_tiny

    path, _ = write_deit(tmp_path / "deit.pth", image_size=28, patch=7, channels=1)
    cfg = compose_tiny("dense", "imagenet", tmp_path, f"imagenet.pretrained={path}", "imagenet.train_steps=0")
    _, task, _ = runner.build(cfg, "dense", "imagenet")
    model = task.build_backbone().eval()
    expected = V.load_vit_state_dict(torch.load(path, weights_only=True)["model"])[0]
    for name, value in model.state_dict().items():
        assert torch.equal(value, expected[name]), name


@pytest.mark.parametrize("arch,published", [("s16", 4.6), ("ti16", 1.3)])
def test_deit_macs_at_full_size(arch, published):
    with torch.device("meta"):
        model = V.build_vit(V.vit_config(arch)).eval()
        counted = cost.count(model, torch.empty(1, 3, 224, 224)).macs
    cfg = V.vit_config(arch)
    n, d = cfg.n_patches + 1, cfg.d_model
    per_layer = 4 * n * d * d + 2 * n * d * cfg.mlp + 2 * n * n * d
    analytic = cfg.n_patches * 3 * 16 * 16 * d + cfg.layers * per_layer + d * 1000
    assert counted == analytic
    assert counted / 1e9 == pytest.approx(published, abs=0.05)
