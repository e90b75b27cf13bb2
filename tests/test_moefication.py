"""MoEfication: balanced clustering, neuron permutation, real (grouped) path vs masked path vs dense,
batch-independent router targets and predictions, per-sample MACs vs the dispatch-level counter, router
training on a frozen model, and the cached end-to-end build on the tiny parity-sequence task."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from bench import cost, train
from bench.api import Batch
from bench.errors import UserError
from bench.models.transformer import MLP, Encoder, EncoderConfig
from methods.moefication.clustering import balanced_kmeans, objective
from methods.moefication.layers import MoEMLP, permute_mlp, router_targets
from methods.moefication.method import expert_order, moe_layers, moefy, router_loss, router_width, set_mode
from tests.helpers import build_tiny

D, D_MLP, E, T = 16, 64, 8, 7


class TokenEmbed(nn.Module):
    """Inputs are already tokens [B, T, d] (no padding)."""

    def forward(self, x):
        return x, None

    def macs(self, tokens: int) -> int:
        return 0


def relu_encoder(seed: int = 0, layers: int = 2) -> Encoder:
    torch.manual_seed(seed)
    cfg = EncoderConfig(d_model=D, n_layers=layers, n_heads=2, d_mlp=D_MLP, activation="relu")
    return Encoder(cfg, TokenEmbed(), nn.Linear(D, 3)).eval()


def moe_encoder(seed: int = 0) -> Encoder:
    model = relu_encoder(seed)
    moefy(model, E, 12, seed=seed, iters=10)
    return model.eval()


def tokens(batch: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, T, D, generator=torch.Generator().manual_seed(seed))


# --- clustering and permutation ------------------------------------------------------------------
def test_balanced_kmeans_sizes_determinism_and_quality():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(4, 5)) * 5
    points = np.concatenate([c + 0.1 * rng.normal(size=(16, 5)) for c in centres])[rng.permutation(64)]
    labels = balanced_kmeans(points, 4, seed=3)
    assert np.bincount(labels, minlength=4).tolist() == [16, 16, 16, 16]
    assert np.array_equal(labels, balanced_kmeans(points, 4, seed=3))
    # well-separated equal-size blobs are recovered exactly (each found cluster is one blob)
    truth = np.argmin(((points[:, None] - centres[None]) ** 2).sum(-1), axis=1)
    for c in range(4):
        assert len(set(truth[labels == c])) == 1
    # on unstructured data: exactly balanced, and better than a random balanced split
    noise = rng.normal(size=(96, 8))
    labels = balanced_kmeans(noise, 8, seed=0)
    assert np.bincount(labels).tolist() == [12] * 8
    assert objective(noise, labels) < objective(noise, rng.permutation(np.repeat(np.arange(8), 12)))
    with pytest.raises(ValueError):
        balanced_kmeans(noise, 7, seed=0)


def test_permutation_makes_clusters_contiguous_and_preserves_the_mlp():
    torch.manual_seed(0)
    mlp = MLP(D, D_MLP, "relu").eval()
    x = torch.randn(5, T, D)
    before = mlp(x)
    normed = torch.nn.functional.normalize(mlp.fc1.weight.detach().double(), dim=1).numpy()
    labels = balanced_kmeans(normed, E, seed=0, iters=10)  # what expert_order clusters
    order = expert_order(mlp.fc1.weight, E, seed=0, iters=10)
    # after the permutation, neuron slice e holds exactly cluster e's neurons
    assert labels[order.numpy()].tolist() == np.repeat(np.arange(E), D_MLP // E).tolist()
    rows, bias, cols = mlp.fc1.weight[order].clone(), mlp.fc1.bias[order].clone(), mlp.fc2.weight[:, order].clone()
    permute_mlp(mlp, order)
    assert torch.equal(mlp.fc1.weight, rows) and torch.equal(mlp.fc1.bias, bias)
    assert torch.equal(mlp.fc2.weight, cols)
    torch.testing.assert_close(mlp(x), before, rtol=1e-5, atol=1e-6)


# --- execution paths -----------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 3, E])
def test_real_path_equals_masked_path(k):
    model = moe_encoder()
    x = tokens(6)
    with torch.inference_mode():
        set_mode(model, "masked")
        for layer in moe_layers(model):
            layer.k = k
        masked = model(x)
        masked_sel = [layer.last_selected.clone() for layer in moe_layers(model)]
        set_mode(model, "real")
        real = model(x)
    torch.testing.assert_close(real, masked, rtol=1e-5, atol=1e-5)
    for layer, sel in zip(moe_layers(model), masked_sel):
        assert layer.last_selected.shape == (6, T, k)
        assert torch.equal(layer.last_selected, sel)
        assert len(set(layer.last_selected[0, 0].tolist())) == k  # k distinct experts per token


def test_k_equals_E_real_path_is_the_relufied_dense_model():
    dense = relu_encoder()
    moe = copy.deepcopy(dense)
    moefy(moe, E, 12, seed=0, iters=10)
    x = tokens(4)
    with torch.inference_mode():
        reference = dense(x)
        set_mode(moe, "dense")
        torch.testing.assert_close(moe(x), reference, rtol=1e-5, atol=1e-5)  # permutation keeps the function
        set_mode(moe, "real")
        torch.testing.assert_close(moe(x), reference, rtol=1e-5, atol=1e-5)  # k = E after moefy
        for layer in moe_layers(moe):
            layer.k = 2
        assert not torch.allclose(moe(x), reference, atol=1e-4)  # fewer experts really change the output


def test_real_path_runs_only_the_selected_experts():
    """Counter: MLP hidden GEMMs scale with k (no dense-then-zero); router cost is always there."""
    model = moe_encoder()
    x = tokens(3)
    layer = moe_layers(model)[0]
    reports = {}
    for k in (1, 2, E):
        for m in moe_layers(model):
            m.k = k
        reports[k] = cost.count(model, x).macs
    pair_total = 2 * 3 * T * layer.pair_macs()  # 2 layers, 3 samples, T tokens, one extra expert each
    assert reports[2] - reports[1] == pair_total
    assert reports[E] - reports[1] == (E - 1) * pair_total


# --- batch independence --------------------------------------------------------------------------
def test_router_targets_are_per_token_and_batch_independent():
    hidden = torch.relu(torch.randn(10, D_MLP))
    hidden[3] = 0.0  # a token with no active neuron
    full = router_targets(hidden, E)
    part = router_targets(hidden[:2], E)
    scaled = router_targets(torch.cat([hidden[:2], 100 * hidden[2:]]), E)  # a loud rest of the batch
    torch.testing.assert_close(full[:2], part)
    torch.testing.assert_close(scaled[:2], part)
    assert full.shape == (10, E) and float(full.min()) >= 0.0 and float(full.max()) <= 1.0
    sums = hidden.view(10, E, -1).sum(-1)
    torch.testing.assert_close(full[0], sums[0] / sums[0].max())
    assert torch.equal(full[3], torch.zeros(E))
    assert torch.allclose(full[torch.arange(10) != 3].amax(-1), torch.ones(9))


def test_predictions_are_batch_invariant_on_the_real_path():
    model = moe_encoder()
    x = tokens(12)
    with torch.inference_mode():
        for k in (1, 3):
            for m in moe_layers(model):
                m.k = k
            full = model(x)
            torch.testing.assert_close(model(x[:5]), full[:5], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(model(x[7:8]), full[7:8], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(model(x.flip(0)), full.flip(0), rtol=1e-5, atol=1e-6)


# --- router training -----------------------------------------------------------------------------
def test_router_training_learns_on_a_frozen_model(tmp_path: Path):
    model = moe_encoder(seed=2)
    moes = moe_layers(model)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if ".router." not in n}
    routers_before = [m.router.fc2.weight.detach().clone() for m in moes]
    set_mode(model, "dense")
    for m in moes:
        m.record = True

    def batch_fn(step: int) -> Batch:
        return Batch(tokens(32, seed=100 + step), torch.zeros(32, dtype=torch.long))

    def captured_mass(k: int) -> float:
        """Share of true activation mass in the router's top-k experts (1.0 = oracle), layer 0, fresh data."""
        with torch.no_grad():
            model(tokens(64, seed=7))
            inputs, targets = moes[0].recorded
            top = moes[0].router(inputs).topk(k, dim=-1).indices
            return float((targets.gather(1, top).sum(1) / targets.sum(1).clamp_min(1e-9)).mean())

    before = captured_mass(2)
    result = train.fit(model, batch_fn, router_loss, steps=150, lr=1e-2, ckpt=tmp_path / "r.pt",
                       desc="router", params=[p for m in moes for p in m.router.parameters()])
    assert np.isfinite(result.final_loss)
    after = captured_mass(2)
    for name, p in model.named_parameters():
        if name in frozen:
            assert torch.equal(p, frozen[name]), f"{name} changed while only routers train"
    assert any(not torch.equal(m.router.fc2.weight, w) for m, w in zip(moes, routers_before))
    assert after > before + 0.05 and after > 2 / E + 0.1, (before, after)


# --- cost ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("moefication")


def test_sample_macs_formula_matches_counter_for_every_k(tiny_dir: Path):
    task, method, model = build_tiny("moefication", "parity", tiny_dir, "parity.variant=sequence")
    batch = next(iter(task.eval_batches()))
    n_layers = len(moe_layers(model))
    for k in method.knob_values():
        method.set_knob(model, k)
        with torch.inference_mode():
            report = cost.count(model, batch.x)
            per_sample = method.sample_macs(model, batch)
        assert report.uncounted == []
        assert per_sample.shape == (len(batch),)
        assert float(per_sample.sum()) == pytest.approx(report.macs, rel=1e-9)
        layer = moe_layers(model)[0]
        t = layer.last_tokens
        # fixed part: everything but the MLP hidden GEMMs, plus routers on every token
        expected = model.macs(t) - sum(m.macs(t) for m in moe_layers(model)) \
            + n_layers * layer.router.macs(t) + n_layers * t * k * layer.pair_macs()
        assert torch.all(per_sample == expected)


# --- end to end ----------------------------------------------------------------------------------
def test_build_caches_stages_relufies_and_sweeps_k(tiny_dir: Path, monkeypatch):
    task, method, model = build_tiny("moefication", "parity", tiny_dir, "parity.variant=sequence")
    experts = int(method.cfg.experts)
    assert method.knob_values()[-1] == experts and len(method.knob_values()) >= 2
    moes = moe_layers(model)
    assert moes and all(isinstance(m.act, nn.ReLU) and m.mode == "real" for m in moes)
    d = moes[0].fc1.in_features
    assert all(m.router.fc1.out_features == router_width(d, experts, 0) for m in moes)
    cache = tiny_dir / "cache" / "parity" / "moefication"
    relu_ckpt, = cache.glob("relu-*.pt")
    router_ckpt, = cache.glob(f"router-E{experts}-*.pt")
    relu_state = torch.load(relu_ckpt, weights_only=False)["model"]
    final_state = torch.load(router_ckpt, weights_only=False)["model"]
    for name, value in relu_state.items():
        if ".mlp." in name:  # neurons only permuted: the same multiset of fc1 rows
            if name.endswith("fc1.weight"):
                key = lambda w: sorted(map(tuple, w.tolist()))  # noqa: E731
                assert key(final_state[name]) == key(value)
        else:  # everything else frozen during router training
            assert torch.equal(final_state[name], value), name
    x = next(iter(task.eval_batches())).x
    with torch.inference_mode():
        method.set_knob(model, 1)
        first = model(x)
    # second build: both stages load from cache (the checkpoint is already permuted: no clustering)
    def no_clustering(*args, **kwargs):
        raise AssertionError("clustering ran although the router stage is cached")

    monkeypatch.setattr("methods.moefication.method.clustering.balanced_kmeans", no_clustering)
    _, method2, model2 = build_tiny("moefication", "parity", tiny_dir, "parity.variant=sequence")
    with torch.inference_mode():
        method2.set_knob(model2, 1)
        torch.testing.assert_close(model2(x), first)
    assert "relu " in method.train_budget() and "router-E" in method.train_budget()
    assert f"E={experts}" in method.variant()


def test_router_width_follows_acm_code_ratio():
    assert router_width(768, 128, 0) == 128  # acm-code's ViT-B router
    assert router_width(64, 8, 0) == 11  # the small default ViT: ~2.4% of an MLP, like ViT-B
    assert router_width(16, 8, 0) == 8  # never narrower than E
    assert router_width(64, 8, 128) == 128  # an explicit width is kept


def test_bad_k_is_a_user_error(tmp_path: Path):
    from bench import config, runner

    cfg = config.compose(["method=moefication", "task=parity", "parity.variant=sequence",
                          "moefication.experts=4", "moefication.k_values=[1,5]",
                          f"cache_dir={tmp_path}", f"results_dir={tmp_path}"])
    _, _, method = runner.build(cfg, "moefication", "parity")
    with pytest.raises(UserError, match="k_values"):
        method.knob_values()


def test_expert_size_rule_matches_the_acm_setup_and_the_harness_widths():
    """experts=0: the divisor of the MLP width nearest to width/24 (the ACM code's 128 experts of 24 neurons)."""
    from methods.moefication.method import auto_experts

    assert auto_experts(3072, 24) == 128  # ViT-B: the ACM code's setup exactly
    assert auto_experts(768, 24) == 32  # commonvoice: 32 experts of 24 neurons
    assert auto_experts(256, 24) == 8  # imagenet's offline ViT: 10.7 lies between 8 and 16, nearer 8 (32 neurons)
    assert auto_experts(512, 24) == 16  # iwslt: 21.3 -> 16 experts of 32
    assert auto_experts(32, 24) == 2  # never a single expert where the width can be split
    for width in (96, 256, 384, 512, 768, 1000, 3072):
        assert width % auto_experts(width, 24) == 0


def test_default_k_grid_scales_with_the_experts():
    from methods.moefication.method import default_k_values

    assert default_k_values(8) == [1, 2, 4, 6, 8]  # the grid of the committed rows at E = 8
    assert default_k_values(32) == [4, 8, 16, 24, 32]
    assert default_k_values(2) == [1, 2]


def test_default_experts_follow_the_expert_size_rule_end_to_end(tmp_path: Path):
    """Without moefication.experts the method splits each MLP by the rule, names E in its stage and
    variant, and sweeps the scaled k grid; an explicit E is kept."""
    from bench import config, runner
    from methods.moefication.method import auto_experts, default_k_values

    base = ["method=moefication", "task=parity", "parity.variant=sequence", "parity.d_model=48",
            f"cache_dir={tmp_path}", f"results_dir={tmp_path}"]
    method = runner.build(config.compose(base), "moefication", "parity")[2]
    width = method._mlp_width()
    assert width == 4 * 48 and method.experts() == auto_experts(192, 24) == 8  # 192 / 24 = 8 experts of 24
    assert method.knob_values() == default_k_values(8)
    assert method.stages()[1].name == "router-E8" and method.stages()[1].config["experts"] == 8
    assert method.variant().startswith("E=8;")
    explicit = runner.build(config.compose([*base, "moefication.experts=4"]), "moefication", "parity")[2]
    assert explicit.experts() == 4 and explicit.knob_values() == [1, 2, 3, 4]
