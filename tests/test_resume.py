"""Training stages resume after an interruption and end exactly where an uninterrupted run ends."""

import pytest
import torch
from torch import nn

from bench import train
from bench.api import Batch


def _data(step: int) -> Batch:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(16, 4, generator=g)
    return Batch(x, (x.sum(1) > 0).long())


def _loss(model, batch):
    return nn.functional.cross_entropy(model(batch.x), batch.y)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def test_interrupt_then_resume_matches_uninterrupted(tmp_path):
    straight = _model()
    train.fit(straight, _data, _loss, steps=30, lr=1e-2, ckpt=tmp_path / "a.pt", desc="a")

    resumed = _model()
    with pytest.raises(KeyboardInterrupt):
        train.fit(resumed, _data, _loss, steps=30, lr=1e-2, ckpt=tmp_path / "b.pt", desc="b", stop_after=12)
    assert (tmp_path / "b.partial.pt").exists() and not (tmp_path / "b.pt").exists()
    fresh = _model()  # a new process would start from a fresh model
    result = train.fit(fresh, _data, _loss, steps=30, lr=1e-2, ckpt=tmp_path / "b.pt", desc="b")
    assert result.resumed_from == 12
    assert (tmp_path / "b.pt").exists() and not (tmp_path / "b.partial.pt").exists()
    for p, q in zip(straight.state_dict().values(), fresh.state_dict().values()):
        torch.testing.assert_close(p, q)


def test_finished_stage_is_loaded_not_retrained(tmp_path):
    model = _model()
    train.fit(model, _data, _loss, steps=5, lr=1e-2, ckpt=tmp_path / "c.pt", desc="c")
    other = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))

    def no_data(step):
        raise AssertionError("a cached stage must not train again")

    result = train.fit(other, no_data, _loss, steps=5, lr=1e-2, ckpt=tmp_path / "c.pt", desc="c")
    assert result.resumed_from == 5
    for p, q in zip(model.state_dict().values(), other.state_dict().values()):
        torch.testing.assert_close(p, q)


def test_a_trained_parameter_without_gradient_is_named_at_the_first_step(tmp_path):
    """Data-parallel training syncs exactly the trained parameters, so a stage that declares one its loss never
    reaches stops at the first step, naming it (not after hours, on the next step of a DDP run)."""
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2), nn.Linear(2, 2))  # the last one is unused

    def loss(m, batch):
        return nn.functional.cross_entropy(m[2](m[1](m[0](batch.x))), batch.y)

    with pytest.raises(RuntimeError, match=r"stage d: 2 trained parameters get no gradient \(3.weight, 3.bias\)"):
        train.fit(model, _data, loss, steps=3, lr=1e-2, ckpt=tmp_path / "d.pt", desc="d")
    assert all(p.requires_grad for p in model.parameters())


def test_parameters_a_stage_does_not_train_get_no_gradient_and_are_unfrozen_after(tmp_path):
    model = _model()
    first, last = list(model[0].parameters()), list(model[2].parameters())
    seen = []

    def loss(m, batch):
        seen.append([p.requires_grad for p in m.parameters()])
        return _loss(m, batch)

    before = [p.detach().clone() for p in first]
    train.fit(model, _data, loss, steps=3, lr=1e-2, ckpt=tmp_path / "e.pt", desc="e", params=last)
    assert seen[0] == [False, False, True, True]
    assert all(torch.equal(p, q) for p, q in zip(first, before))
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_stop_during_the_update_waits_for_the_step_to_end(signum, monkeypatch):
    """A signal that arrives inside ``signals.deferred`` (the optimizer update and the step count) raises only
    as the block ends: the code after it inside the block still runs, so a saved step is never half-updated."""
    import os
    import signal

    from bench import signals

    monkeypatch.setattr(signals, "requested", [])
    previous = signal.signal(signal.SIGTERM, signals._on_sigterm)
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals.deferred():
                os.kill(os.getpid(), getattr(signal, signum))
                done.append("rest of the update")
        assert done == ["rest of the update"]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_trainer_updates_inside_a_deferred_block(tmp_path, monkeypatch):
    """The optimizer step runs with signals held (the test above shows what that guarantees)."""
    from bench import signals

    held = []
    real = signals.deferred

    def watching():
        held.append(True)
        return real()

    monkeypatch.setattr(signals, "deferred", watching)
    train.fit(_model(), _data, _loss, steps=4, lr=1e-2, ckpt=tmp_path / "d.pt", desc="d")
    assert len(held) == 4
