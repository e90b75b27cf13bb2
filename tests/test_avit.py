"""A-ViT: halting math against a hand-written per-token loop, real (gathered) path == masked path, cost
from the decision log == the counter, batch invariance, losses, halting-signal calibration."""

import math

import pytest
import torch

from bench import cost
from methods.avit import model as M
from methods.avit.method import calibrate_halting
from tests.encoder_fixtures import tiny_encoder, token_batch

GAMMA, BETA, EPS = 2.0, 0.0, 0.01  # h = sigmoid(2 e_0): scores spread over (0, 1), tokens halt at every depth


def avit(per_token=False, layers=4, eps=EPS):
    return M.AViTEncoder(tiny_encoder(per_token=per_token, layers=layers), GAMMA, BETA, eps).eval()


@torch.no_grad()
def reference(model: M.AViTEncoder, ids: torch.Tensor):
    """One sample, token by token, with Python floats: active tokens only (halted ones are not keys)."""
    enc = model.encoder
    x, mask = enc.embed(ids[None])
    t, d = x.shape[1], x.shape[2]
    valid = [True] * t if mask is None else (~mask[0]).tolist()
    active = [k for k in range(t) if valid[k]]
    state = {k: x[0, k] for k in active}
    c = {k: 0.0 for k in active}
    acc = {k: torch.zeros(d) for k in active}
    steps, rem = [0.0] * t, [0.0] * t
    n_layers = len(enc.blocks)
    kept = []
    for l, block in enumerate(enc.blocks):
        kept.append(len(active))
        if not active:
            continue
        out = block(torch.stack([state[k] for k in active])[None])[0]
        halted = []
        for j, k in enumerate(active):
            state[k] = out[j]
            steps[k] += 1
            last = l == n_layers - 1
            h = 1.0 if last else 1.0 / (1.0 + math.exp(-(GAMMA * float(out[j, 0]) - BETA)))
            if last or c[k] + h >= 1.0 - model.epsilon:
                rem[k] = 1.0 - c[k]
                acc[k] = acc[k] + rem[k] * out[j]
                halted.append(k)
            else:
                c[k] += h
                acc[k] = acc[k] + h * out[j]
        active = [k for k in active if k not in halted]
    full = torch.zeros(1, t, d)
    for k, v in acc.items():
        full[0, k] = v
    logits = enc.head(enc.pool(enc.norm(full), mask))[0]
    return logits, torch.tensor(steps), torch.tensor(rem), torch.tensor(kept)


@pytest.mark.parametrize("per_token,padded", [(False, False), (False, True), (True, True)])
@pytest.mark.parametrize("real", [False, True])
def test_halting_matches_per_token_reference(per_token, padded, real):
    model = avit(per_token=per_token)
    model.real_path = real
    ids = token_batch(6, padded=padded)
    with torch.no_grad():
        out = model(ids)
    log = model.last
    assert len(set(log.steps[log.valid].tolist())) >= 3, "test needs tokens halting at several depths"
    for i in range(len(ids)):
        ref_out, ref_steps, ref_rem, ref_kept = reference(model, ids[i])
        torch.testing.assert_close(out[i], ref_out, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(log.steps[i], ref_steps)
        torch.testing.assert_close(log.remainder[i], ref_rem, rtol=1e-5, atol=1e-6)
        assert log.kept[i].tolist() == ref_kept.tolist()


def test_real_path_equals_masked_path_and_is_batch_invariant():
    model = avit()
    ids = token_batch(8, padded=True, seed=3)
    with torch.no_grad():
        model.real_path = False
        masked = model(ids)
        masked_kept = model.last.kept.clone()
        model.real_path = True
        real = model(ids)
        real_kept = model.last.kept.clone()
        alone = torch.cat([model(ids[i:i + 1]) for i in range(len(ids))])
        reversed_ = model(ids.flip(0)).flip(0)
    torch.testing.assert_close(real, masked, rtol=1e-4, atol=1e-5)
    assert torch.equal(real_kept, masked_kept)
    torch.testing.assert_close(alone, real, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(reversed_, real, rtol=1e-4, atol=1e-5)


def test_ragged_block_path_equals_grouped_fallback(monkeypatch):
    """The real path's one-matrix-per-batch block (ragged_block) and the per-count grouped fallback agree."""
    model = avit()
    model.real_path = True
    ids = token_batch(8, padded=True, seed=5)
    with torch.no_grad():
        ragged = model(ids)
        kept = model.last.kept.clone()
        monkeypatch.setattr(M, "_plain_block", lambda block: False)
        grouped = model(ids)
    torch.testing.assert_close(ragged, grouped, rtol=1e-4, atol=1e-5)
    assert torch.equal(kept, model.last.kept) and len(set(kept[:, -1].tolist())) > 1  # ragged counts occurred


def test_mean_field_weights_sum_to_one():
    """sum_l p^l = 1 per token: p = h at the blocks before the halting block, R = 1 - sum of them at it."""
    model = avit()
    with torch.no_grad():
        model(token_batch(6))
    log = model.last
    assert bool((log.remainder > 0).all()) and bool((log.remainder <= 1).all())
    assert bool((log.steps >= 1).all()) and bool((log.steps <= 4).all())
    total = torch.zeros_like(log.remainder)
    for l, h in enumerate(model.last.layer_scores):
        halted_here = log.steps == l + 1
        total = total + torch.where(halted_here, log.remainder, torch.where(log.steps > l + 1, h, 0 * h))
    torch.testing.assert_close(total, torch.ones_like(total))


def test_real_path_removes_tokens_cost_matches_counter():
    model = avit()
    model.real_path = True
    ids = token_batch(8, padded=True, seed=5)
    with torch.inference_mode():
        report = cost.count(model, ids)
        logged = model.sample_macs()
    assert report.uncounted == []
    assert float(logged.sum()) == pytest.approx(report.macs, rel=1e-9)
    dense = model.encoder.macs(ids.shape[1] + 1)
    assert float(logged.max()) < dense  # tokens really left the computation
    # one sample alone costs exactly what the log says for it
    with torch.inference_mode():
        alone = cost.count(model, ids[2:3]).macs
    assert alone == pytest.approx(float(logged[2]), rel=1e-9)


def test_no_halting_costs_the_dense_model():
    model = M.AViTEncoder(tiny_encoder(layers=3), 10.0, 1e6, 0.01).eval()
    model.real_path = True
    ids = token_batch(4)
    with torch.inference_mode():
        out = model(ids)
        dense_out = model.encoder(ids)
    assert torch.equal(model.last.steps, torch.full_like(model.last.steps, 3.0))
    torch.testing.assert_close(out, dense_out, rtol=1e-5, atol=1e-6)  # p = (0, 0, 1): the last block's output
    assert float(model.sample_macs()[0]) == model.encoder.macs(ids.shape[1] + 1)


def test_ponder_and_distribution_losses():
    log = M.HaltLog(steps=torch.tensor([[1.0, 2.0, 3.0]]), remainder=torch.tensor([[1.0, 0.5, 0.25]]),
                    kept=torch.tensor([[3, 2, 1]]),
                    layer_scores=[torch.tensor([[0.9, 0.5, 0.4]]), torch.tensor([[0.0, 1.0, 0.35]]),
                                  torch.tensor([[0.0, 0.0, 1.0]])],
                    valid=torch.tensor([[True, True, True]]))
    assert float(M.ponder_loss(log)) == pytest.approx((2.0 + 2.5 + 3.25) / 3)
    # class token left out: H = (0.5+0.4, 1.0+0.35, 1.0) / 2, normalised
    raw = torch.tensor([0.9, 1.35, 1.0]) / 2
    dist = M.halting_distribution(log, skip_first_token=True)
    torch.testing.assert_close(dist, raw / raw.sum())
    prior = M.gaussian_prior(3, 2.0)
    assert float(prior.sum()) == pytest.approx(1.0) and int(prior.argmax()) == 1
    kl = float(M.distribution_loss(log, prior, True))
    assert kl == pytest.approx(float((prior * (prior / dist).log()).sum()), rel=1e-4)
    assert kl > 0


def test_ponder_loss_trains_halting_through_the_masked_path():
    model = avit()
    model.train()
    out = model(token_batch(4))
    M.ponder_loss(model.last).backward()
    grad = model.encoder.blocks[0].mlp.fc2.bias.grad
    assert grad is not None and float(grad[0]) < 0  # raising e_0 early raises h, lowers R: descent raises it


def test_calibration_sets_median_halting_score():
    model = M.AViTEncoder(tiny_encoder(layers=4), 10.0, 30.0, 0.01)
    x = token_batch(16)
    calibrate_halting(model, x, 0.1)
    with torch.no_grad():
        h, mask = model.encoder.embed(x)
        for l, block in enumerate(model.encoder.blocks[:-1]):
            h = block(h, mask)
            assert float(model.scores(h).median()) == pytest.approx(0.1, abs=1e-3), l


def test_tokens_kept_figures_from_rows(tmp_path):
    from bench import results, runner
    from methods.avit.figures import figures
    from tests.helpers import compose_tiny

    cfg = compose_tiny("avit", "imagenet", tmp_path, "timing=false")
    runner.run(cfg, "avit", "imagenet", "test")
    rows = results.load(tmp_path / "results")
    paths = figures(rows, tmp_path / "results", tmp_path / "reports", "imagenet")
    names = [p.name for p in paths]
    assert names[0] == "imagenet_avit_tokens_kept.png" and all(p.stat().st_size > 0 for p in paths)
    assert len([n for n in names if n.startswith("imagenet_avit_token_depth_")]) == rows["knob_value"].nunique()


@pytest.mark.parametrize("target", [4, 6, 8, 10])
def test_target_depth_sweep_declares_and_priors_its_targets(tmp_path, target):
    """The ACM protocol (avit.sweep=target with its weights): one point per target depth of a 12-block ViT,
    scaled to the model's depth; the prior's mode is the declared target on 12 blocks and its mean the
    scaled target (the 4-block offline ViT: target/3)."""
    from bench import runner
    from methods.avit.method import scaled_target
    from tests.helpers import compose_tiny

    cfg = compose_tiny("avit", "imagenet", tmp_path, "avit.sweep=target", f"avit.target={target}",
                       "avit.ponder_weight=5e-4", "avit.distr_weight=1.0")
    method = runner.build(cfg, "avit", "imagenet")[2]
    assert method.knob_values() == [f"target{target}of12", f"target{target}of12@eps0.5"]
    assert "sweep=target (ACM protocol);pw=0.0005;prior=gauss(w=1)" in method.variant()
    assert method.stages()[0].name == f"target{target}-pw0.0005"
    assert method.target_depth(12) == pytest.approx(target)
    assert method.target_depth(4) == pytest.approx(target / 3)
    prior12 = M.gaussian_prior(12, method.target_depth(12))
    assert int(prior12.argmax()) + 1 == target
    blocks = torch.arange(1, 13, dtype=torch.float64)
    assert float((prior12.double() * blocks).sum()) == pytest.approx(target, abs=0.05)
    prior4 = M.gaussian_prior(4, method.target_depth(4)).double()
    assert int(prior4.argmax()) + 1 == round(scaled_target(target, 4))
    # the distribution loss is smallest for a halting distribution at that target
    others = [t for t in (4, 6, 8, 10) if t != target]
    log = _log_with_distribution(prior12)
    own = float(M.distribution_loss(log, prior12, False))
    assert abs(own) < 0.05  # H is clamped to [0.01, 0.99]: not exactly 0
    assert all(float(M.distribution_loss(log, M.gaussian_prior(12, t), False)) > own + 0.1 for t in others)


def _log_with_distribution(dist: torch.Tensor) -> M.HaltLog:
    """A one-token log whose per-block halting scores are ``dist`` (so H = dist after normalisation)."""
    layers = dist.shape[0]
    return M.HaltLog(steps=torch.tensor([[float(layers)]]), remainder=torch.zeros(1, 1),
                     kept=torch.ones(1, layers, dtype=torch.long),
                     layer_scores=[dist[l].reshape(1, 1).float() for l in range(layers)],
                     valid=torch.ones(1, 1, dtype=torch.bool))


def test_trained_prior_is_the_declared_target_and_the_ponder_weight_sweep_is_a_labelled_variant(tmp_path):
    from tests.helpers import build_tiny

    _, method, model = build_tiny("avit", "parity", tmp_path, "parity.variant=sequence", "avit.sweep=target",
                                  "avit.target=4")
    layers = len(model.encoder.blocks)
    torch.testing.assert_close(method._prior, M.gaussian_prior(layers, 4 * layers / 12))
    assert "sweep=target;" in method.variant()  # not the ACM protocol's weights: not labelled as it
    _, pw, _ = build_tiny("avit", "parity", tmp_path, "parity.variant=sequence")  # the default: the harness's
    assert pw.knob_values()[0] == "pw0.03"
    assert "sweep=ponder_weight (harness variant)" in pw.variant() and "t=8/12L" in pw.variant()
    torch.testing.assert_close(pw._prior, M.gaussian_prior(layers, 8 * layers / 12))  # 2/3 of the depth
