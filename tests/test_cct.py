"""CCT: noisy gates and the two-sided group budget loss, the real path (gathered rows, zero K/V rows)
against the hard-gated masked path, and per-sample cost from the decisions against the counter."""

from __future__ import annotations

import pytest
import torch

from bench import cost
from bench.models.transformer import Encoder, EncoderConfig
from methods.cct import model as M


class VecEmbed(torch.nn.Module):
    """Continuous test input [B, T, 4] → tokens [B, T, d] (varied tokens, so gates split them)."""

    def __init__(self, d: int):
        super().__init__()
        self.proj = torch.nn.Linear(4, d)

    def forward(self, x):
        return self.proj(x), None

    def macs(self, tokens: int) -> int:
        return tokens * 4 * self.proj.out_features


def _inputs(b: int) -> torch.Tensor:
    return torch.randn(b, 9, 4, generator=torch.Generator().manual_seed(b))


def _model(gate_bias: float = 0.0, slices: int = 4) -> M.CCTModel:
    torch.manual_seed(0)
    cfg = EncoderConfig(d_model=16, n_layers=2, n_heads=2, d_mlp=32)
    base = Encoder(cfg, VecEmbed(16), torch.nn.Linear(16, 3))
    model = M.CCTModel(base, n_budgets=3, slices=slices, gate_hidden=8, gate_bias=gate_bias)
    with torch.no_grad():  # gates that split tokens: some units on, some off
        for block in model.blocks:
            for net in (block.gate_kv, block.gate_q, block.gate_f):
                net.fc1.weight.normal_(0, 1.0)
                net.fc1.bias.zero_()
                net.fc2.weight.normal_(0, 1.0)
                net.fc2.bias.fill_(gate_bias)
    return model.eval()


def test_gates_are_noisy_in_training_and_hard_at_inference():
    logits = torch.tensor([-2.0, -0.1, 0.0, 0.3, 4.0])
    hard = M.CCTBlock._gate(logits, 5.0, None, hard=True)
    assert hard.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]  # g >= 0.5 <=> G >= 0
    soft = M.CCTBlock._gate(logits, 0.0, None, hard=False)
    torch.testing.assert_close(soft, torch.sigmoid(logits))
    g = torch.Generator().manual_seed(0)
    noisy = M.CCTBlock._gate(torch.zeros(10000), 5.0, g, hard=False)
    expected = torch.sigmoid(5.0 * torch.randn(10000, generator=torch.Generator().manual_seed(0)))
    torch.testing.assert_close(noisy, expected)
    assert float((noisy > 0.99).float().mean() + (noisy < 0.01).float().mean()) > 0.3  # pushed to the ends


def test_budget_loss_is_two_sided_per_group():
    """|C_budget − C_util| / C_budget summed over the budget groups, from the soft gates of the forward."""
    model = _model(gate_bias=0.0).train()
    x = _inputs(6)
    symbols = torch.tensor([0, 0, 1, 1, 2, 2])
    budgets = torch.tensor([1.0, 0.5, 0.2], dtype=torch.float64)
    model(x, symbols)
    t = model.last_tokens
    per_sample, full = torch.zeros(6, dtype=torch.float64), 0.0
    for block in model.blocks:
        kv, att, ffn = block.unit_macs(t)
        g_kv, g_q, g_f = block.last_gates
        per_sample += (g_kv.sum(1) * kv + g_q.sum(1) * att + g_f.sum((1, 2)) * ffn).double().detach()
        full += t * (kv + att + block.slices * ffn)
    expected = sum(abs(float(budgets[i]) * full * 2 - float(per_sample[2 * i:2 * i + 2].sum()))
                   / (float(budgets[i]) * full * 2) for i in range(3))
    loss = model.budget_loss(symbols, budgets)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    # two-sided: gates all on under budget 0.5 costs |0.5 − 1| / 0.5 = 1; all off under 0.5 costs 1 too
    for bias, want in ((30.0, 1.0), (-30.0, 1.0)):
        m = _model(gate_bias=bias).train()
        for block in m.blocks:
            for net in (block.gate_kv, block.gate_q, block.gate_f):
                net.fc2.weight.data.zero_()
        m(x, torch.ones(6, dtype=torch.long))
        assert float(m.budget_loss(torch.ones(6, dtype=torch.long), budgets).detach()) == pytest.approx(want, abs=1e-6)


def test_budget_loss_gradient_reaches_gates():
    model = _model().train()
    x = _inputs(4)
    symbols = torch.tensor([1, 1, 2, 2])
    model(x, symbols)
    model.budget_loss(symbols, torch.tensor([1.0, 0.5, 0.2])).backward()
    assert model.blocks[0].gate_f.fc2.weight.grad.abs().sum() > 0
    assert model.budget_embed.weight.grad[1:].abs().sum() > 0


@pytest.mark.parametrize("symbol", [0, 1, 2])
def test_real_path_equals_hard_masked_path_and_counter(symbol):
    model = _model()
    model.budget_index = symbol
    x = _inputs(24)
    with torch.inference_mode():
        masked = model(x)
        masked_decisions = [(b.last.kv.clone(), b.last.q.clone(), b.last.ffn.clone()) for b in model.blocks]
        model.real_path = True
        real = model(x)
        report = cost.count(model, x)
        logged = model.sample_macs()
    torch.testing.assert_close(real, masked, rtol=1e-5, atol=1e-5)
    for block, (kv, q, ffn) in zip(model.blocks, masked_decisions):
        assert torch.equal(block.last.kv, kv) and torch.equal(block.last.q, q) and torch.equal(block.last.ffn, ffn)
        # the test needs mixed decisions to mean anything
        assert 0 < float(block.last.kv.float().mean()) < 1 and 0 < float(block.last.q.float().mean()) < 1
    assert report.uncounted == []
    assert float(logged.sum()) == pytest.approx(report.macs, rel=1e-9)
    assert len(set(logged.tolist())) > 1  # per-sample cost varies with the decisions


def test_real_path_is_batch_invariant():
    """A sample alone (the batch-1 path: one fused attention call) gives its row of the batch's output."""
    model = _model()
    model.real_path = True
    x = _inputs(6)
    with torch.inference_mode():
        batch = model(x)
        alone = torch.cat([model(x[i:i + 1]) for i in range(6)])
    torch.testing.assert_close(alone, batch, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["no queries", "no slices", "a sample without queries", "everything on"])
def test_real_path_with_forced_edge_decisions_equals_the_reference_and_counter(case):
    model = _model()
    block = model.blocks[0]
    x = model.tokens(_inputs(3), None)
    b, t = x.shape[:2]
    g = torch.Generator().manual_seed(1)
    kv, q, ffn = (torch.rand(b, t, generator=g) < 0.5, torch.rand(b, t, generator=g) < 0.5,
                  torch.rand(b, t, block.slices, generator=g) < 0.5)
    if case == "no queries":
        q[:] = False
    elif case == "no slices":
        ffn[:] = False
    elif case == "a sample without queries":
        q[1] = False
    else:
        kv[:], q[:], ffn[:] = True, True, True
    block.force = M.Decisions(kv, q, ffn)
    with torch.inference_mode():
        real = block.forward_real(x)
        expected = torch.stack([_reference_block(block, x[s], False, M.Decisions(kv[s], q[s], ffn[s]))
                                for s in range(b)])
        model.real_path = True
        for other in model.blocks[1:]:
            other.force = M.Decisions(kv, q, ffn)
        report = cost.count(model, _inputs(3))
        logged = model.sample_macs()
    torch.testing.assert_close(real, expected, rtol=1e-5, atol=1e-5)
    assert report.uncounted == [] and float(logged.sum()) == pytest.approx(report.macs, rel=1e-9)


def _reference_block(block: M.CCTBlock, x: torch.Tensor, drop_inactive: bool,
                     forced: M.Decisions | None = None) -> torch.Tensor:
    """One sample [T, d] through a hard-gated CCT block, written out; inactive K/V rows are zero vectors,
    or (``drop_inactive``) removed from the keys.  ``forced``: the sample's decisions ([T], [T], [T, M]) in
    place of its gates'."""
    y = block.norm1(x)
    on_kv = block.gate_kv(y).squeeze(-1) >= 0 if forced is None else forced.kv
    on_q = block.gate_q(y).squeeze(-1) >= 0 if forced is None else forced.q
    k, v = block.ln_k(block.k(y)), block.ln_v(block.v(y))
    if drop_inactive:
        k, v = k[on_kv], v[on_kv]
    else:
        k, v = k * on_kv.unsqueeze(-1), v * on_kv.unsqueeze(-1)
    att = block._attend(block.q(y).unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0))[0]
    x = x + on_q.unsqueeze(-1) * block.o(block.ln_o(att))
    on_f = block.gate_f(block.norm2(x)) >= 0 if forced is None else forced.ffn
    return x + sum(on_f[:, i:i + 1] * block._slice(i, x) for i in range(block.slices))


def test_inactive_kv_rows_are_zero_keys_that_take_softmax_mass():
    model = _model()
    block = model.blocks[0]
    x = model.tokens(_inputs(5), None)
    with torch.inference_mode():
        real = block.forward_real(x)
        assert bool((~block.last.kv).any()) and bool(block.last.q.any())
        for i in range(5):
            torch.testing.assert_close(real[i], _reference_block(block, x[i], False), rtol=1e-5, atol=1e-5)
        dropped = torch.stack([_reference_block(block, x[i], True) for i in range(5)])
    assert not torch.allclose(real, dropped, atol=1e-4)  # removing the rows would change the semantics


def test_calibrated_model_with_all_gates_on_is_close_to_dense():
    torch.manual_seed(0)
    cfg = EncoderConfig(d_model=16, n_layers=2, n_heads=2, d_mlp=32)
    base = Encoder(cfg, VecEmbed(16), torch.nn.Linear(16, 3)).eval()
    x = _inputs(64)
    with torch.no_grad():
        dense = base(x)
    model = M.CCTModel(base, n_budgets=1, slices=4, gate_hidden=4, gate_bias=30.0).eval()
    with torch.no_grad():
        model.budget_embed.weight.zero_()
        uncalibrated = model(x)
        model.calibrate(x)
        calibrated = model(x)
    err_cal = float((calibrated - dense).abs().mean())
    err_raw = float((uncalibrated - dense).abs().mean())
    assert err_cal < err_raw


def _stage_model(task: str, tmp_path, *overrides: str):
    """The model CCT's training stage starts from on ``task`` (tiny config, untrained base), in training mode."""
    from bench import runner
    from tests.helpers import compose_tiny

    _, task_impl, method = runner.build(compose_tiny("cct", task, tmp_path, *overrides), "cct", task)
    torch.manual_seed(0)
    return method, method.convert(task_impl.build_backbone()).train(), task_impl.example_input(4)


@pytest.mark.parametrize("task", ["imagenet", "iwslt"])
def test_dropout_is_active_while_training_the_cct_stage(task, tmp_path):
    """The paper trains CCT with dropout 0.1 everywhere (Eq. 13: Dropout(LN(a))): two training forwards of
    the stage's model differ, evaluation is deterministic, and cct.dropout=0 switches it off."""
    method, model, x = _stage_model(task, tmp_path)
    assert float(method.cfg.dropout) == 0.1
    assert method.stages()[0].config["dropout"] == 0.1  # part of the stage's cache key
    with torch.no_grad():
        first, second = model(x), model(x)
        assert not torch.allclose(first, second)
        model.eval()
        torch.testing.assert_close(model(x), model(x))
    _, still, x = _stage_model(task, tmp_path, "cct.dropout=0.0")
    with torch.no_grad():
        torch.testing.assert_close(still(x), still(x))


def test_control_network_width_default_is_in_the_papers_range():
    """The paper tested control networks 64, 128 and 256 wide (§6, iv); the default is the smallest."""
    from bench import config
    from methods.cct import CCTConfig

    assert CCTConfig().gate_hidden == 64
    assert config.compose(["method=cct", "task=imagenet"])["cct"].gate_hidden == 64
