"""The method-budget curves on the curves page (bench/report/method_budget.py): a method's quality against
``<task>.method_steps``, with the leaderboard's row as the default budget's point, Δ against the dense base
and each doubling's gain judged against the task's doubling yardstick."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from bench import results
from bench.report import curve_stats as curve_stats
from bench.report import curves as report_curves
from bench.report import method_budget as mb
from tasks.imagenet import ImageNetConfig

N = 4000
DEFAULT_BUDGET = ImageNetConfig.method_steps
BASE_STEPS = ImageNetConfig.train_steps


def _row(method: str, seed: int, correct: np.ndarray, *, budget: str, knob: tuple[str, str], cost: float,
         config_hash: str, day: int, protocol: int | None = None) -> results.ResultRow:
    return results.ResultRow(
        method=method, task="imagenet", dataset="toy images", knob_name=knob[0], knob_value=knob[1],
        knob_kind="static" if method == "dense" else "trained", seed=seed, variant="", metric="top1",
        quality=float(correct.mean()), higher_is_better=True, metric_signature="top1", n_eval=N, macs_mean=cost,
        macs_p10=cost, macs_p50=cost, macs_p90=cost, macs_dense=100.0, cost_pct_dense=cost, macs_counted_mean=cost,
        cost_check="agree", uncounted_ops="", train_budget=budget, train_time_s=60.0, run_id=f"{config_hash}-s{seed}",
        config_hash=config_hash, command="test", git_sha="0" * 12, git_dirty=False, versions="", device="cpu",
        timestamp=f"2026-01-{day:02d}T00:00:00Z", timing_threads=2, latency_b1_ms=math.nan,
        latency_b1_iqr_ms=math.nan, throughput_per_s=math.nan, throughput_batch=0, dense_latency_b1_ms=math.nan,
        dense_throughput_per_s=math.nan, latency_b1_ratio=math.nan, throughput_ratio=math.nan, timing_rounds=0,
        params=1, **({} if protocol is None else {"protocol": protocol}))


def _samples(correct: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"target": 0, "prediction": 0, "score": correct.astype(float), "macs": 1.0,
                         "index": np.arange(N)})


def _mask(accuracy: float) -> np.ndarray:
    return np.arange(N) < round(accuracy * N)


def write_base(results_dir, seed: int, accuracy: float, *, steps: int = BASE_STEPS, width: float = 1.0,
               curves: bool = False) -> None:
    """A dense base row of the default configuration but ``train_steps`` (and width): the leaderboard's
    (results_dir/imagenet/dense), or under results_dir/curves with ``curves``."""
    config = {f.name: f.default for f in dataclasses.fields(ImageNetConfig)}
    config["train_steps"] = steps
    correct = _mask(accuracy)
    row = _row("dense", seed, correct, budget=f"{steps} steps x batch 128 (the task's base budget)",
               knob=("size", f"w{width:g}-d1"), cost=100.0 * width, config_hash=f"base{steps}w{width}", day=1)
    results.append(results_dir / "curves" if curves else results_dir, row, f"base{steps}w{width}-s{seed}",
                   _samples(correct), yaml.safe_dump({"seed": seed, "imagenet": config,
                                                      "dense": {"width": width, "depth": 1.0}}))


def write_acm(results_dir, seed: int, method_steps: int, correct: np.ndarray | float, *, alpha_b: float = 0.1,
              leaderboard: bool = False, protocol: int | None = None, day: int = 2, base_steps: int = BASE_STEPS,
              run: dict | None = None, samples: bool = True) -> None:
    """An ACM row (β 0.4) trained with ``method_steps`` on top of the base (``base_steps``): under
    results_dir/curves, or the leaderboard (results_dir itself) with ``leaderboard``; ``run``: run-level
    keys of its config.yaml; ``samples=False`` deletes its per-sample file."""
    correct = _mask(correct) if isinstance(correct, float) else correct
    config = {f.name: f.default for f in dataclasses.fields(ImageNetConfig)}
    config["method_steps"], config["train_steps"] = method_steps, base_steps
    chash = f"acm{method_steps}a{alpha_b}p{protocol}b{base_steps}"
    budget = (f"distill 400 + gates 100 + e2e-b0.4 {method_steps - 500} steps x batch 128 on top of the dense base "
              f"model (method budget {method_steps} steps)")
    row = _row("acm", seed, correct, budget=budget, knob=("beta_target", "0.4"),
               cost=45.0 - method_steps / DEFAULT_BUDGET, config_hash=chash, day=day, protocol=protocol)
    paths = results.append(results_dir if leaderboard else results_dir / "curves", row, f"{chash}-s{seed}",
                           _samples(correct), yaml.safe_dump({"seed": seed, **(run or {}), "imagenet": config,
                                                              "acm": {"beta_target": 0.4, "alpha_b": alpha_b}}))
    if not samples:
        for path in results_dir.rglob(f"{chash}-s{seed}.samples.csv*"):
            path.unlink()
    return paths


def test_method_budget_parsed_from_the_training_budget():
    assert mb.method_budget("relu 1876 + router-E8 469 steps x batch 128 on top of the dense base model "
                            "(method budget 2345 steps)") == 2345
    assert mb.method_budget("75040 steps x batch 128 (the task's base budget)") is None


def test_a_curve_joins_the_leaderboard_point_and_judges_each_doubling(tmp_path):
    for seed in (0, 1):
        write_base(tmp_path, seed, 0.92 + 0.01 * seed)  # each seed's own base: the pairing is by seed
        write_base(tmp_path, seed, 0.50, steps=BASE_STEPS // 2, curves=True)  # not the base ACM starts from
        write_base(tmp_path, seed, 0.60, width=0.5)  # a static size, not the base either
        # the default budget's point; the leaderboard's run keys differ from the curve rows' (none change results)
        write_acm(tmp_path, seed, DEFAULT_BUDGET, 0.88, leaderboard=True,
                  run={"results_dir": "results", "threads": 4, "timing": True})
        write_acm(tmp_path, seed, DEFAULT_BUDGET, 0.10, leaderboard=True, protocol=1, day=5)  # later, older protocol
        write_acm(tmp_path, seed, DEFAULT_BUDGET, 0.70, alpha_b=1.0, leaderboard=True)  # another setting
        write_acm(tmp_path, seed, 2 * DEFAULT_BUDGET, 0.90)  # doubling gains 2 points: still gaining
        write_acm(tmp_path, seed, 4 * DEFAULT_BUDGET, 0.90)  # the same examples right: gains exactly 0
    (curve,) = mb.load_budget_curves(tmp_path)
    assert curve.method == "acm" and curve.knob == "beta_target=0.4"
    assert curve.curve.steps == [DEFAULT_BUDGET, 2 * DEFAULT_BUDGET, 4 * DEFAULT_BUDGET]
    assert curve.curve.default_steps == DEFAULT_BUDGET
    assert curve.cost_pct[2 * DEFAULT_BUDGET] == pytest.approx(43.0)
    assert sorted(curve.base["seed"]) == [0, 1]

    gains = {d.steps: d for d in curve_stats.step_gains(curve.curve, 0.002)}
    assert gains[DEFAULT_BUDGET].gain == pytest.approx(0.02) and gains[DEFAULT_BUDGET].verdict == curve_stats.MISSED
    assert gains[2 * DEFAULT_BUDGET].gain == pytest.approx(0.0)
    assert gains[2 * DEFAULT_BUDGET].verdict == curve_stats.MET

    against = {a.steps: a for a in mb.against_base(curve, tmp_path)}
    assert against[DEFAULT_BUDGET].delta == pytest.approx(-0.045) and against[DEFAULT_BUDGET].high < 0
    assert against[DEFAULT_BUDGET].verdict == mb.BELOW
    assert against[4 * DEFAULT_BUDGET].seed_deltas == {0: pytest.approx(-0.02), 1: pytest.approx(-0.03)}

    written = report_curves.write(tmp_path, tmp_path / "reports", mb.section(tmp_path, tmp_path / "reports"))
    md = (tmp_path / "reports" / "curves.md").read_text()
    section = md.split("## Method budgets", 1)[1]
    assert f"| {DEFAULT_BUDGET} (default) | 44.0 | 0.8800" in section
    assert f"| {DEFAULT_BUDGET} → {2 * DEFAULT_BUDGET} | 0.0200" in section and "| missed |" in section
    assert "| met |" in section and "0.7000" not in section  # the α_b = 1 point is not on this curve
    assert "0.1000" not in section  # nor the earlier protocol's row
    assert "| s0: -0.0400, s1: -0.0500 |" in section  # Δ per seed, each against its own base
    figures = [p for p in written if "curves_budget_imagenet_acm_" in p]
    assert len(figures) == 1 and open(figures[0], "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_seeds_that_disagree_leave_the_comparison_with_the_base_inconclusive(tmp_path):
    rng = np.random.default_rng(0)
    for seed, accuracy in ((0, 0.97), (1, 0.90)):  # one seed above the base, one below; the mean is above
        write_base(tmp_path, seed, 0.91)
        write_acm(tmp_path, seed, 2 * DEFAULT_BUDGET, rng.permutation(_mask(accuracy)))
    (curve,) = mb.load_budget_curves(tmp_path)
    (against,) = mb.against_base(curve, tmp_path)
    assert against.seed_deltas[0] > 0 > against.seed_deltas[1]
    assert against.low > 0  # the CI alone would say "above": the disagreeing seed decides
    assert against.verdict == f"{curve_stats.UNSURE} (seeds disagree)"


def test_earlier_protocols_and_leaderboard_only_points_draw_no_curve(tmp_path):
    write_base(tmp_path, 0, 0.92)
    write_acm(tmp_path, 0, DEFAULT_BUDGET, 0.88, leaderboard=True)  # no curve row: the leaderboard alone
    assert mb.load_budget_curves(tmp_path) == []
    write_acm(tmp_path, 0, 2 * DEFAULT_BUDGET, 0.90, protocol=1)  # a curve row of the first protocol
    assert mb.load_budget_curves(tmp_path) == []
    assert mb.section(tmp_path, tmp_path / "reports") == ([], [])
    write_acm(tmp_path, 0, 2 * DEFAULT_BUDGET, 0.90, day=3)  # the same point under today's protocol
    (curve,) = mb.load_budget_curves(tmp_path)
    assert curve.curve.steps == [DEFAULT_BUDGET, 2 * DEFAULT_BUDGET]


def test_a_curve_on_another_base_budget_pairs_with_that_base(tmp_path):
    """ACM started from a base trained for half the default steps is compared with that base, not with
    the default one; with no base of its configuration, the table says so."""
    half = BASE_STEPS // 2
    write_base(tmp_path, 0, 0.92)
    write_acm(tmp_path, 0, 2 * DEFAULT_BUDGET, 0.86, base_steps=half)
    (curve,) = mb.load_budget_curves(tmp_path)
    assert curve.base.empty and mb.against_base(curve, tmp_path) == []
    lines, _ = mb.section(tmp_path, tmp_path / "reports")
    page = "\n".join(lines)
    assert "n/a: no dense base of this configuration" in page
    assert f"| {DEFAULT_BUDGET} (default) | — | not run under today's protocol |" in page
    write_base(tmp_path, 0, 0.84, steps=half, curves=True)  # its base, on the dense learning curve
    (curve,) = mb.load_budget_curves(tmp_path)
    (against,) = mb.against_base(curve, tmp_path)
    assert against.delta == pytest.approx(0.02) and against.verdict == mb.ABOVE


def test_a_row_without_its_per_sample_file_gets_no_interval(tmp_path):
    write_base(tmp_path, 0, 0.92)
    write_acm(tmp_path, 0, 2 * DEFAULT_BUDGET, 0.80, samples=False)
    (curve,) = mb.load_budget_curves(tmp_path)
    (against,) = mb.against_base(curve, tmp_path)
    assert against.delta == pytest.approx(-0.12) and math.isnan(against.low) and math.isnan(against.high)
    assert against.verdict.startswith(f"{curve_stats.UNSURE} (no paired CI: ")
    assert "per-sample" in against.verdict
