"""ACT: Graves' halting rule against a per-sample reference loop, masked == real path, gradient path."""

import pytest
import torch

from bench import config, runner
from bench.models.transformer import EncoderConfig
from methods.act.model import ACTEncoder, ACTRNN
from tasks.parity.task import SequenceEmbed, make_vector
from tests.helpers import tiny_overrides


def reference_act(model: ACTRNN, x: torch.Tensor):
    """Per-sample loop written straight from Graves (2016) eqs. 6-13."""
    states, steps, remainders = [], [], []
    for row in x:
        row = row[None]
        s = row.new_zeros(1, model.cell.hidden)
        halts, seen = [], []
        for n in range(model.max_steps):
            s = model.cell(row, n == 0, s)
            h = float(model.halt(s))
            seen.append(s)
            if sum(halts) + h >= 1 - model.epsilon or n == model.max_steps - 1:
                remainder = 1.0 - sum(halts)
                p = halts + [remainder]
                break
            halts.append(h)
        assert abs(sum(p) - 1.0) < 1e-6  # the weights are a distribution
        states.append(sum(pi * si for pi, si in zip(p, seen)))
        steps.append(len(p))
        remainders.append(remainder)
    return torch.cat(states), torch.tensor(steps, dtype=torch.float), torch.tensor(remainders)


@pytest.mark.parametrize("bias", [1.0, -2.0, -4.0])
def test_rnn_matches_reference_on_both_paths(bias):
    torch.manual_seed(0)
    model = ACTRNN(10, 12, epsilon=0.01, max_steps=7, halt_bias_init=bias).eval()
    x, _, _ = make_vector(10, 40, torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref_state, ref_steps, ref_rem = reference_act(model, x)
        for real in (False, True):
            model.real_path = real
            logits = model(x)
            torch.testing.assert_close(model.last.state, ref_state, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(model.last.steps, ref_steps)
            torch.testing.assert_close(model.last.remainder, ref_rem, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(logits, model.head(ref_state), rtol=1e-5, atol=1e-6)
    if bias <= -2.0:
        assert model.last.steps.max() > 1  # the test exercises multi-step pondering


def test_max_steps_cap_keeps_weights_summing_to_one():
    torch.manual_seed(0)
    model = ACTRNN(6, 8, epsilon=0.01, max_steps=3, halt_bias_init=-20.0).eval()  # never halts by itself
    x, _, _ = make_vector(6, 16, torch.Generator().manual_seed(2))
    with torch.no_grad():
        model(x)
    assert torch.all(model.last.steps == 3)
    # p^1 + p^2 + R = 1 with tiny h's: R close to 1
    assert torch.all(model.last.remainder > 0.99)


def test_ponder_gradient_flows_through_remainder_only():
    torch.manual_seed(0)
    model = ACTRNN(6, 8, epsilon=0.01, max_steps=5, halt_bias_init=-1.0)
    x, _, _ = make_vector(6, 32, torch.Generator().manual_seed(3))
    model(x)
    assert not model.last.steps.requires_grad
    assert model.last.remainder.requires_grad
    model.last.ponder.sum().backward()
    # dR/dh^n = -1 for every earlier step: the halting unit receives gradient
    assert model.halt.linear.bias.grad is not None and model.halt.linear.bias.grad.abs() > 0


def test_encoder_masked_equals_real_and_tokens_ponder_differently():
    torch.manual_seed(0)
    cfg = EncoderConfig(d_model=16, n_layers=1, n_heads=2, d_mlp=32)
    model = ACTEncoder(cfg, SequenceEmbed(9, 16), torch.nn.Linear(16, 2), epsilon=0.01, max_steps=6,
                       halt_bias_init=-1.5).eval()
    with torch.no_grad():
        model.halt.linear.weight.normal_(0, 1.0)  # make halting token-dependent
        tokens = torch.randint(0, 3, (5, 9), generator=torch.Generator().manual_seed(4))
        masked = model(tokens)
        masked_state = model.last
        model.real_path = True
        real = model(tokens)
    torch.testing.assert_close(real, masked, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.last.steps, masked_state.steps)
    torch.testing.assert_close(model.last.state, masked_state.state, rtol=1e-4, atol=1e-5)
    assert model.last.steps.min() < model.last.steps.max()  # per-token adaptivity is exercised


def _method(tmp_path, *extra):
    """The ACT method on tiny parity, at the recipe's cap (the tiny config's act.max_steps left out)."""
    overrides = [o for o in tiny_overrides("act", "parity", tmp_path) if not o.startswith("act.max_steps")]
    cfg = config.compose([*overrides, *extra])
    return runner.build(cfg, "act", "parity")[2]


def test_paper_recipe_is_the_rnn_default(tmp_path):
    """On the RNN cell the defaults are Graves' cap M = 100 and Adam at lr 1e-4; the shared transformer block
    (the Universal Transformer baseline) keeps M = 20 and the task's rate; explicit values win."""
    method = _method(tmp_path)
    assert method.max_steps() == 100 and method.lr() == pytest.approx(1e-4)
    assert method.convert(None).max_steps == 100
    assert method.stages()[0].lr == pytest.approx(1e-4)
    assert "M=100;lr=0.0001" in method.variant()
    encoder = _method(tmp_path, "parity.variant=sequence")
    assert encoder.max_steps() == 20
    assert encoder.lr() == pytest.approx(float(encoder.task.base_budget()["lr"]))
    chosen = _method(tmp_path, "act.max_steps=7", "act.lr=3e-3")
    assert chosen.max_steps() == 7 and chosen.stages()[0].lr == pytest.approx(3e-3)


@pytest.mark.parametrize("real", [False, True])
def test_a_model_that_never_halts_stops_at_the_paper_cap(tmp_path, real):
    """The recipe's model with a halting unit that never reaches 1 − ε ponders exactly M = 100 steps, on the
    training (masked) and the evaluation (real) path, and its weights still sum to one (R ≈ 1)."""
    method = _method(tmp_path)
    model = method.convert(None)
    with torch.no_grad():
        model.halt.linear.weight.zero_()
        model.halt.linear.bias.fill_(-30.0)  # h ≈ 1e-13 per step: the sum never reaches 1 − ε
        model.real_path = real
        model.eval()(method.task.example_input(8))
    assert model.last.steps.tolist() == [100.0] * 8
    assert torch.all(model.last.remainder > 0.99)
