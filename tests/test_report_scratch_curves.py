"""The curves of methods trained from scratch (bench/report/scratch_curves.py): recipe=paper rows of a
from-scratch method, one curve per setting, the step counts as points."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import yaml

from bench import results
from bench.report import scratch_curves as report_scratch_curves
from methods.act import ActConfig
from tasks.parity import ParityConfig

N = 1000


def _write(results_dir, method: str, steps: int, accuracy: float, seed: int, *, recipe: str = "paper",
           n: int = 8, curves: bool = True):
    score = (np.arange(N) < round(accuracy * N)).astype(float)
    task = {f.name: f.default for f in dataclasses.fields(ParityConfig)} | {"train_steps": steps, "n": n}
    section = {f.name: f.default for f in dataclasses.fields(ActConfig)}
    row = results.ResultRow(
        method=method, task="parity", dataset=f"parity-vector n={n}", knob_name="tau", knob_value="0.001",
        knob_kind="train", seed=seed, variant="", metric="accuracy", quality=float(score.mean()),
        higher_is_better=True, metric_signature="accuracy", n_eval=N, macs_mean=2.0, macs_p10=2.0, macs_p50=2.0,
        macs_p90=2.0, macs_dense=1.0, cost_pct_dense=200.0, macs_counted_mean=2.0, cost_check="agree",
        uncounted_ops="", train_budget=f"{steps} steps", train_time_s=steps / 100.0, run_id=f"r{steps}-{seed}",
        config_hash=f"h{steps}{recipe}{n}", command="test", git_sha="0" * 12, git_dirty=False, versions="",
        device="cpu", timestamp=f"2026-01-{seed + 1:02d}T00:00:00Z", timing_threads=1, latency_b1_ms=math.nan,
        latency_b1_iqr_ms=math.nan, throughput_per_s=math.nan, throughput_batch=0, dense_latency_b1_ms=math.nan,
        dense_throughput_per_s=math.nan, latency_b1_ratio=math.nan, throughput_ratio=math.nan, timing_rounds=0,
        params=1, recipe=recipe)
    samples = pd.DataFrame({"target": 0, "prediction": 0, "score": score, "macs": 2.0, "index": np.arange(N)})
    config = yaml.safe_dump({"seed": seed, "recipe": recipe, "parity": task, method: section})
    results.append(results_dir / "curves" if curves else results_dir, row, f"{method}-{steps}-{recipe}-{n}-s{seed}",
                   samples, config)


def test_one_curve_per_setting_with_its_step_counts(tmp_path):
    """recipe=paper ACT rows at two step counts (curves folder and leaderboard) make one curve with two
    points; another parity size is another curve; matched rows are not a from-scratch recipe's."""
    for seed in (0, 1, 2):
        _write(tmp_path, "act", 20000, 0.80 + 0.01 * seed, seed)
        _write(tmp_path, "act", 100000, 0.99, seed, curves=False)
    _write(tmp_path, "act", 100000, 0.60, 0, n=32)
    _write(tmp_path, "act", 50000, 0.70, 0, recipe="matched")
    curves = report_scratch_curves.load(tmp_path)
    assert [(c.dataset, sorted(c.rows["steps"].unique())) for c in curves] == [
        ("parity-vector n=32", [100000]), ("parity-vector n=8", [20000, 100000])]
    assert curves[1].setting == "parity.n=8" and curves[1].knob == "tau=0.001"
    text = "\n".join(report_scratch_curves.section(tmp_path))
    assert "| 20,000 | 0, 1, 2 | 0.8100 \\[" in text and "| 100,000 | 0, 1, 2 | 0.9900 \\[" in text
    assert "200.0%" in text and "50,000" not in text


def test_no_rows_no_section(tmp_path):
    assert report_scratch_curves.section(tmp_path) == []
