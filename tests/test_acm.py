"""Tests of method ``acm``: layer layout, masked == real paths, batch invariance, per-sample cost == the
dispatch-level counter, the public code's off-by-one, gate gradients, stage-2 labels, auxiliary losses,
cached/resumable stages.  Tiny models only (seconds)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from bench import cost, protocol
from bench.api import Batch, Task
from methods.acm.kernels.acm_torch import acm_reference_fp64
from bench.models.transformer import Encoder, EncoderConfig
from bench.run import RunContext
from methods.acm import ACMConfig
from methods.acm import modules as M
from methods.acm.method import ACMMethod, gate_labels

D, FEATURES, TOKENS, CLASSES = 16, 5, 7, 3


class TokenEmbed(nn.Module):
    """Tokens from per-position feature vectors through a Linear (MACs = tokens·in·d)."""

    def __init__(self, d: int = D):
        super().__init__()
        self.lin = nn.Linear(FEATURES, d)

    def forward(self, x):
        return self.lin(x), None

    def macs(self, tokens: int) -> int:
        return tokens * FEATURES * self.lin.out_features


def tiny_encoder(seed: int = 0, layers: int = 2) -> Encoder:
    torch.manual_seed(seed)
    cfg = EncoderConfig(d_model=D, n_layers=layers, n_heads=2, d_mlp=4 * D, pool="mean")
    return Encoder(cfg, TokenEmbed(), nn.Linear(D, CLASSES))


def tiny_acm(seed: int = 0, **settings) -> tuple[Encoder, dict[str, M.ACM]]:
    model = tiny_encoder(seed)
    torch.manual_seed(seed + 1)
    layers = M.acmize(model, M.ACMSettings(gate_hidden=8, **settings))
    for layer in layers.values():  # spread gate logits so that every k occurs
        with torch.no_grad():
            layer.gate.out.bias.normal_(std=1.0)
            layer.gate.out.weight.mul_(4.0)
    return model.eval(), layers


def inputs(batch: int = 6, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, TOKENS, FEATURES, generator=torch.Generator().manual_seed(seed))


# --- layout and paths ---------------------------------------------------------------------------------
def test_sizing_follows_the_notes():
    assert M.projection_rank(768, 4) == 96  # notes §1.1: ViT-B, N = 4
    model, layers = tiny_acm()
    assert len(layers) == 2 * 5
    mlp, q = layers["blocks.0.mlp"], layers["blocks.0.attn.q"]
    assert (mlp.width, mlp.min_k, mlp.n_choices, mlp.activation) == (16, 0, 5, "gelu")
    assert (q.width, q.min_k, q.n_choices, q.activation) == (M.projection_rank(D, 4), 1, 4, "none")
    assert mlp.fc2.bias is None and mlp.out_bias is None and mlp.fc1.bias is not None
    assert tuple(mlp.fc1.weight.shape) == (64, D) and tuple(mlp.fc2.weight.shape) == (D, 64)
    assert mlp.gate.macs_per_token() == D * 8 + 8 * 8 + 8 * 5
    only_mlp = M.acmize(tiny_encoder(), M.ACMSettings(modules="mlp"))
    assert list(only_mlp) == ["blocks.0.mlp", "blocks.1.mlp"]
    # auto gate width (paper: gating ~1% of the cost): ViT-B's 60 gates at h = 18 cost ~1% of its modules
    h = M.auto_gate_hidden(768, 3072, 4)
    assert h == 18 and M.auto_gate_hidden(64, 256, 4) == 2
    gates = 5 * (768 * h + h * h) + h * (5 + 4 * 4)
    assert gates / (4 * 768 ** 2 + 2 * 768 * 3072) == pytest.approx(0.01, rel=0.05)
    auto = M.acmize(tiny_encoder(), M.ACMSettings())
    assert auto["blocks.0.mlp"].gate.fc1.out_features == M.auto_gate_hidden(D, 4 * D, 4) == 2


@pytest.mark.parametrize("path", ["real", "masked"])
def test_exact_split_of_the_dense_mlp_with_all_learners_is_the_dense_mlp(path):
    dense = tiny_encoder().blocks[0].mlp
    acm = M.ACM(D, 4, 16, "gelu", min_k=0, output_bias=True).eval()
    with torch.no_grad():  # learner n = hidden units [16n, 16n+16) of the dense MLP: an exact partition
        acm.fc1.weight.copy_(dense.fc1.weight)
        acm.fc1.bias.copy_(dense.fc1.bias)
        acm.fc2.weight.copy_(dense.fc2.weight)
        acm.out_bias.copy_(dense.fc2.bias)
    acm.force_k, acm.path = 4, path
    z = torch.randn(3, TOKENS, D)
    torch.testing.assert_close(acm(z), dense(z), rtol=1e-5, atol=1e-6)
    acm.force_k = 2  # two learners = the dense MLP restricted to its first 32 hidden units
    h = dense.act(dense.fc1(z))
    h[..., 32:] = 0
    torch.testing.assert_close(acm(z), dense.fc2(h), rtol=1e-5, atol=1e-6)


def test_masked_path_equals_real_path_and_the_fp64_reference():
    model, layers = tiny_acm()
    x = inputs()
    with torch.no_grad():
        real = model(x)
        ks = [layer.last_k.clone() for layer in layers.values()]
        M.configure(model, path="masked")
        masked = model(x)
        assert all(torch.equal(k, layer.last_k) for k, layer in zip(ks, layers.values()))
    torch.testing.assert_close(masked, real, rtol=1e-5, atol=1e-6)
    assert len(torch.unique(torch.cat([k.flatten() for k in ks]))) == 5  # every k in 0..4 occurred

    # the training mixture Σ_c ν̂_c·h(z, k_c) equals the real path at the sampled k in the forward pass
    layer = layers["blocks.0.mlp"]
    z = torch.randn(4, TOKENS, D)
    layer.train()
    layer.generator = torch.Generator().manual_seed(3)
    mixed = layer(z)
    k = layer.last_k.clone()
    layer.eval()
    layer.path, layer.force_k = "real", k
    torch.testing.assert_close(mixed, layer(z), rtol=1e-5, atol=1e-6)
    ref = acm_reference_fp64(z.reshape(-1, D), k.reshape(-1), layer.fc1.weight, layer.fc1.bias, layer.fc2.weight,
                             layer.width, "gelu")
    torch.testing.assert_close(mixed.reshape(-1, D).double(), ref, rtol=1e-5, atol=1e-6)


def test_a_token_choosing_n_runs_n_learners_when_it_is_the_batch_maximum():
    """acm-code's loop stopped one short of the batch-maximum choice (notes §1.7)."""
    layer = M.ACM(D, 4, 16, "gelu", min_k=0).eval()
    z = torch.randn(5, D)
    full = layer.cumulative_outputs(z).detach()  # h(z, n), n = 1..4
    for k in ([4, 1, 0, 2, 4], [0, 0, 4, 0, 0], [1, 3, 2, 3, 0]):  # max = N, a lone N, max = 3 < N
        layer.force_k = torch.tensor(k)
        with torch.no_grad():
            out = layer(z)
        for t, kt in enumerate(k):
            expected = torch.zeros(D) if kt == 0 else full[t, kt - 1]
            torch.testing.assert_close(out[t], expected, rtol=1e-5, atol=1e-6)


def test_predictions_do_not_depend_on_the_rest_of_the_batch():
    model, layers = tiny_acm()
    x = inputs(8)
    with torch.no_grad():
        full = model(x)
        k_full = layers["blocks.1.mlp"].last_k.clone()
        for i in (0, 5):
            alone = model(x[i:i + 1])
            torch.testing.assert_close(alone, full[i:i + 1], rtol=1e-5, atol=1e-6)
            assert torch.equal(layers["blocks.1.mlp"].last_k[0], k_full[i])
        part = model(x[2:6])
    torch.testing.assert_close(part, full[2:6], rtol=1e-5, atol=1e-6)


# --- cost ---------------------------------------------------------------------------------------------
def test_per_sample_cost_equals_the_counter_sample_by_sample():
    model, layers = tiny_acm()
    x = inputs(6)
    with torch.inference_mode():
        report = cost.count(model, x)
        per_sample = M.sample_macs(model)
    assert report.uncounted == []
    assert float(per_sample.sum()) == pytest.approx(report.macs, rel=1e-9)
    assert len(set(per_sample.tolist())) > 1  # the decisions differ between samples
    for i in range(len(x)):  # each sample alone: the counter sees exactly its logged cost
        with torch.inference_mode():
            alone = cost.count(model, x[i:i + 1]).macs
        assert alone == pytest.approx(float(per_sample[i]), rel=1e-9)
    # k = N everywhere costs the dense model plus the gates (the learners are sized like the dense modules)
    M.configure(model, force_k=4)
    with torch.inference_mode():
        everything = cost.count(model, x).macs / len(x)
    dense = tiny_encoder().macs(TOKENS)
    gates = TOKENS * sum(layer.gate.macs_per_token() for layer in layers.values())
    assert 4 * 2 * D * M.projection_rank(D, 4) == D * D  # r = 2: four learners cost exactly one d×d projection
    assert everything == dense + gates


# --- training-time pieces -----------------------------------------------------------------------------
def _task_loss_grads(gate_grad: str) -> list[torch.Tensor | None]:
    model, layers = tiny_acm()
    model.train()
    M.configure(model, gate_grad=gate_grad, generator=torch.Generator().manual_seed(0))
    loss = nn.functional.cross_entropy(model(inputs()), torch.tensor([0, 1, 2, 0, 1, 2]))
    loss.backward()
    return [p.grad for layer in layers.values() for p in layer.gate.parameters()]


def test_the_task_loss_trains_the_gates_only_in_the_straight_through_variant():
    st = _task_loss_grads("straight_through")
    assert all(g is not None for g in st) and sum(float(g.abs().sum()) for g in st) > 0
    none = _task_loss_grads("none")
    assert all(g is None or float(g.abs().sum()) == 0.0 for g in none)


def test_distill_modes():
    layer = M.ACM(D, 4, 16, "gelu", min_k=0)
    z, target = torch.randn(10, D), torch.randn(10, D)
    for detach, first_learner_gets_grad in ((True, False), (False, True)):
        layer.zero_grad()
        out = layer.cumulative_outputs(z, detach_earlier=detach)
        nn.functional.mse_loss(out[:, 1], target).backward()  # the loss of h(z, 2) only
        g = layer.fc1.weight.grad
        assert (float(g[:16].abs().sum()) > 0) == first_learner_gets_grad
        assert float(g[16:32].abs().sum()) > 0 and float(g[32:].abs().sum()) == 0
        torch.testing.assert_close(out, layer.cumulative_outputs(z, detach_earlier=not detach))


def test_gate_labels_follow_the_threshold_rule():
    target = torch.zeros(4, 1)
    zero = torch.full((4, 1), 10.0)
    # distances d(1..4) per token; tau = 0.8: label = first n ≥ 2 with d(n)/d(n-1) ≥ 0.8, else N = 4
    d = torch.tensor([[5.0, 4.5, 1.0, 0.5],   # n=2: 0.9 ≥ 0.8 → 2 (acm-code's argmax quirk would give 4)
                      [5.0, 2.0, 1.8, 0.1],   # n=3: 0.9 → 3
                      [5.0, 2.0, 1.0, 0.1],   # never → 4
                      [5.0, 1.0, 0.5, 0.45]])  # n=4: 0.9 → 4
    labels = gate_labels(d.unsqueeze(-1), zero, target, tau=0.8)
    assert labels.tolist() == [2, 3, 4, 4]


def test_auxiliary_losses():
    layers = [M.ACM(D, 4, 16, "gelu", min_k=0), M.ACM(D, 4, 2, "none", min_k=1)]
    # image 0: all tokens k = 4 in both; image 1: MLP k in {0, 4} half/half, projection k = 1
    mlp_k = torch.tensor([[4, 4, 4, 4], [0, 4, 0, 4]])
    proj_k = torch.tensor([[4, 4, 4, 4], [1, 1, 1, 1]])
    for layer, k in zip(layers, (mlp_k, proj_k)):
        layer.last_choice = nn.functional.one_hot(k - layer.min_k, layer.n_choices).float()
    aux = M.auxiliary_losses(layers, beta_target=0.5)
    p_mlp, p_proj = layers[0].learner_macs(), layers[1].learner_macs()
    frac1 = (2 * 4 * p_mlp + 4 * p_proj) / (4 * 4 * (p_mlp + p_proj))
    assert float(aux["fraction"]) == pytest.approx((1.0 + frac1) / 2)
    assert float(aux["budget"]) == pytest.approx(abs((1.0 + frac1) / 2 - 0.5))
    # entropy: image 1's MLP histogram is {0: .5, 4: .5} → log 2 / log 5; all others 0
    assert float(aux["entropy"]) == pytest.approx(-(torch.log(torch.tensor(2.0)) / torch.log(torch.tensor(5.0))) / 4)
    b = torch.tensor([1.0, (8 + 4) / 32])
    assert float(aux["diversity"]) == pytest.approx(-float((b[0] - b[1]).abs()) * 2 / 4)


# --- the method: stages, cache, resume ----------------------------------------------------------------
class ToyTask(Task):
    """Classify which third of the feature range token 0's first feature falls in (learnable, tiny)."""

    name = "toy"

    @property
    def dataset(self) -> str:
        return "toy"

    def _batch(self, seed: int, size: int) -> Batch:
        x = torch.randn(size, TOKENS, FEATURES, generator=torch.Generator().manual_seed(seed))
        y = torch.bucketize(x[:, 0, 0].contiguous(), torch.tensor([-0.43, 0.43]))
        return Batch(x, y)

    def train_batch(self, step: int, batch_size: int) -> Batch:
        return self._batch(1000 + step, batch_size)

    def eval_batches(self):
        yield self._batch(7, 32)

    def example_input(self, batch_size: int):
        return self._batch(7, batch_size).x

    def build_backbone(self, width: float = 1.0, depth: float = 1.0) -> nn.Module:
        return tiny_encoder(0)

    def base_budget(self):
        return {"steps": 30, "batch_size": 16, "lr": 3e-3}


def make_method(cache, **overrides) -> ACMMethod:
    run_cfg = OmegaConf.create({"seed": 0, "device": "cpu", "cache_dir": str(cache)})
    run = RunContext(run_cfg, "acm", "toy")
    task = ToyTask(OmegaConf.create({"method_steps": 60}), run)
    values = {"min_distill_steps": 5, "min_gate_steps": 5, "gate_hidden": 8, **overrides}
    cfg = OmegaConf.structured(ACMConfig(**values))
    return ACMMethod(cfg, task, run)


def stage_steps(method: ACMMethod) -> dict[str, int]:
    return {p.stage.name.split("-")[0]: p.steps for p in protocol.plan(method).stages}


def test_stages_are_cached_shared_across_budgets_and_resume_exactly(tmp_path):
    method = make_method(tmp_path / "a", beta_target=0.25)
    assert stage_steps(method) == {"distill": 5, "gates": 3, "e2e": 52}  # floors 5/5; gates capped at 5% of 60
    assert "distill 5 + gates 3 + e2e-b0.25 52 steps x batch 16" in method.train_budget()
    defaults = ACMConfig()
    method.cfg.min_distill_steps, method.cfg.min_gate_steps = defaults.min_distill_steps, defaults.min_gate_steps
    method.task.cfg.method_steps = 2345
    assert stage_steps(method) == {"distill": 400, "gates": 100, "e2e": 1845}  # the default floors bind
    method.task.cfg.method_steps = 1000
    assert stage_steps(method) == {"distill": 200, "gates": 50, "e2e": 750}  # floors capped at 20% / 5%
    method.task.cfg.method_steps, method.cfg.min_distill_steps, method.cfg.min_gate_steps = 60, 5, 5
    model = protocol.train(method)
    keys_a = {p.stage.name: p.key for p in method.training_plan.stages}
    batch = next(iter(method.task.eval_batches()))
    with torch.inference_mode():
        report = cost.count(model, batch.x)
        logged = method.sample_macs(model, batch)
        columns = method.sample_columns(model, batch)
    assert float(logged.sum()) == pytest.approx(report.macs, rel=1e-9)
    assert columns["acm_fraction"].shape == (32,) and float(columns["acm_fraction"].max()) <= 1.0
    assert "gate_grad=straight_through" in method.variant() and "distill=no_detach" in method.variant()

    other = make_method(tmp_path / "a", beta_target=0.75)
    protocol.train(other)
    keys_b = {p.stage.name: p.key for p in other.training_plan.stages}
    assert keys_b["distill"] == keys_a["distill"] and keys_b["gates"] == keys_a["gates"]
    assert keys_b["e2e-b0.75"] != keys_a["e2e-b0.25"]
    files = sorted(p.name.split("-")[0] for p in (tmp_path / "a" / "toy" / "acm").glob("*.pt"))
    assert files == ["distill", "e2e", "e2e", "gates"]  # stages 1-2 trained once for both budgets

    # interrupt every stage (Ctrl-C after 2 steps of each call) and resume until done: same weights
    interrupted = make_method(tmp_path / "b", beta_target=0.25)
    interrupted.run.fit_extra = {"stop_after": 2}
    interruptions = 0
    while True:
        try:
            resumed = protocol.train(interrupted)
            break
        except KeyboardInterrupt:
            interruptions += 1
    assert interruptions == 14 + 2 + 1 + 25  # the dense base (30 steps), then stages of 5, 3 and 52 steps
    for (name, a), b in zip(model.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_registration_is_light_and_support_needs_an_encoder():
    code = "import sys, methods.acm; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(Path(__file__).parents[1]))
    from bench import registry

    spec = registry.method_spec("acm")
    assert spec.knob == "beta_target" and spec.knob_kind == "train"
    parity = registry.task_spec("parity")
    vector = OmegaConf.structured(parity.config(variant="vector"))
    sequence = OmegaConf.structured(parity.config(variant="sequence"))
    assert "no" in registry.support_reason(spec, parity, vector)
    assert registry.support_reason(spec, parity, sequence) is None


def test_figures_are_drawn_from_rows_only(tmp_path):
    """A real (tiny) run writes the per-token maps and input previews of its first samples; the figures
    are drawn from the rows and samples files alone, building no model."""
    from bench import results, runner
    from methods.acm.figures import figures
    from tests.helpers import compose_tiny

    cfg = compose_tiny("acm", "imagenet", tmp_path, "timing=false", "acm.beta_target=0.5")
    runner.run(cfg, "acm", "imagenet", "test")
    rows = results.load(tmp_path / "results")
    samples = results.load_samples(tmp_path / "results", "imagenet", "acm", rows["run_id"].iloc[0])
    kept = samples["token_compute"].fillna("").astype(str).str.len() > 0
    assert int(kept.sum()) == runner.PREVIEW_SAMPLES and bool(kept.iloc[: runner.PREVIEW_SAMPLES].all())
    assert samples["input_preview"].iloc[0].startswith("1x28x28:")

    def no_model(*args, **kwargs):
        raise AssertionError("a figure built a model")

    import bench.run
    original = bench.run.RunContext.base_model
    bench.run.RunContext.base_model = no_model
    try:
        paths = figures(rows, tmp_path / "results", tmp_path / "reports", "imagenet")
    finally:
        bench.run.RunContext.base_model = original
    assert [Path(p).name for p in paths] == ["imagenet_acm_heatmaps_0.5.png", "imagenet_acm_cost_hist.png"]
    assert all(Path(p).stat().st_size > 5000 for p in paths)
