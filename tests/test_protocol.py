"""The protocol every run follows: same-process timing against the dense base model (interleaved rounds,
ratios stored in the row), and a counter/decision-log disagreement failing the run before anything is
written (unless explicitly allowed, which the row records)."""

import math

import pytest
import torch
from torch import nn

from bench import results, runner, timing
from bench.errors import UserError
from tests.helpers import compose_tiny


class _Tagged(nn.Module):
    def __init__(self, tag: str, log: list[str]):
        super().__init__()
        self.tag, self.log = tag, log

    def forward(self, x):
        self.log.append(self.tag)
        return x


def test_interleaved_rounds_and_ratios(monkeypatch):
    """Fake per-call times (method 2 ms, dense 1 ms at batch 1; 8 ms vs 4 ms at batch 4): the stored
    ratios are exact and the two models alternate which one is timed first in each round."""
    calls: list[str] = []
    method, dense = _Tagged("m", calls), _Tagged("d", calls)
    seconds = {("m", 1): 2e-3, ("d", 1): 1e-3, ("m", 4): 8e-3, ("d", 4): 4e-3}
    timed: list[tuple[str, int]] = []

    def fake_time_call(fn, *, threads, min_run_time, device):
        assert device == "cpu"  # the models live on CPU: the timer of that device
        before = len(calls)
        out = fn()
        key = (calls[before], out.shape[0])
        timed.append(key)
        return seconds[key], 0.1 * seconds[key]

    monkeypatch.setattr(timing, "time_call", fake_time_call)
    result = timing.measure_against_dense(method, dense, lambda b: torch.zeros(b, 3), batch=4, threads=1,
                                          min_run_time=0.01, rounds=3)
    assert result.latency_b1_ratio == pytest.approx(2.0)
    assert result.throughput_ratio == pytest.approx(0.5)
    assert result.latency_b1_ms == pytest.approx(2.0) and result.dense_latency_b1_ms == pytest.approx(1.0)
    assert result.throughput_per_s == pytest.approx(4 / 8e-3)
    assert result.dense_throughput_per_s == pytest.approx(4 / 4e-3)
    assert result.rounds == 3
    # round 0: m d (batch 1), m d (batch 4); round 1: d m, d m; round 2: m d, m d
    assert [t for t, _ in timed] == ["m", "d", "m", "d", "d", "m", "d", "m", "m", "d", "m", "d"]


def test_rounds_must_be_positive():
    with pytest.raises(ValueError):
        timing.measure_against_dense(nn.Identity(), nn.Identity(), lambda b: torch.zeros(b, 2), batch=2,
                                     threads=1, min_run_time=0.01, rounds=0)


def test_row_stores_same_process_dense_timing(tmp_path):
    cfg = compose_tiny("dense", "parity", tmp_path, "dense.width=0.5")
    written = runner.run(cfg, "dense", "parity", "test")
    assert len(written) == 1
    row = results.load(tmp_path / "results").iloc[0]
    assert row["cost_check"] == "agree"
    assert row["timing_rounds"] == 2 and row["timing_threads"] == cfg.threads
    for column in ("latency_b1_ms", "dense_latency_b1_ms", "latency_b1_ratio", "throughput_ratio",
                   "dense_throughput_per_s"):
        assert math.isfinite(row[column]) and row[column] > 0, column


def _doubling_log(monkeypatch):
    from methods.dense.method import Dense

    original = Dense.sample_macs
    monkeypatch.setattr(Dense, "sample_macs", lambda self, model, batch: 2 * original(self, model, batch))


def test_counter_log_disagreement_fails_before_writing(tmp_path, monkeypatch):
    _doubling_log(monkeypatch)
    cfg = compose_tiny("dense", "parity", tmp_path, "timing=false")
    with pytest.raises(UserError) as err:
        runner.run(cfg, "dense", "parity", "test")
    message = str(err.value)
    assert "\n" not in message
    assert "disagree by +100.0%" in message and "no rows written" in message
    assert "allow_cost_mismatch=true" in message
    assert not list((tmp_path / "results").rglob("*.csv"))


def test_allowed_disagreement_is_recorded_in_the_row(tmp_path, monkeypatch):
    _doubling_log(monkeypatch)
    cfg = compose_tiny("dense", "parity", tmp_path, "timing=false", "allow_cost_mismatch=true")
    assert len(runner.run(cfg, "dense", "parity", "test")) == 1
    row = results.load(tmp_path / "results").iloc[0]
    assert row["cost_check"].startswith("MISMATCH allowed: counter")
    assert row["macs_mean"] == pytest.approx(2 * row["macs_counted_mean"])


def test_one_timer_for_runs_speed_and_kernels(monkeypatch):
    """A run's timings come from the device timer of ``bench speed`` and ``bench kernels``: time_call is the
    median and IQR of that timer's samples."""
    from bench.kernels import timer

    asked = []

    def fake_device_timer(device, min_run_s, threads, quick=False):
        asked.append((device, min_run_s, threads))
        return lambda fn: [fn() or 1.0, 2.0, 3.0, 4.0, 5.0]

    monkeypatch.setattr(timing, "device_timer", fake_device_timer)
    median, iqr = timing.time_call(lambda: None, threads=2, min_run_time=0.5)
    assert asked == [("cpu", 0.5, 2)] and (median, iqr) == timer.median_iqr([1.0, 2.0, 3.0, 4.0, 5.0])
