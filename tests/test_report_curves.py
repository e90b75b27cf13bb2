"""The dense learning-curve page (bench/report/curves.py, with bench/report/curve_data.py and curve_stats.py):
points, doubling gains and target verdicts from rows under results/curves, with the task's declared BASE_TARGET."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from bench import results
from bench.report import curve_data as curve_data
from bench.report import curve_stats as curve_stats
from bench.report import curves as report_curves
from tasks.imagenet import ImageNetConfig

N = 4000


def _write(results_dir, steps: int, accuracy: float, seed: int, *, d_model: int | None = None, correct=None,
           threads: int = 2, eval_limit: int = 0, day: int | None = None, minutes: float | None = None,
           without: tuple[str, ...] = (), leaderboard: bool = False, width: float = 1.0, protocol: int | None = None,
           device: str = "cpu", dataset: str = "toy images", target: int = 0, first_index: int = 0,
           keys: dict | None = None):
    """A dense imagenet row trained for ``steps`` under results_dir/curves (under results_dir itself, the
    leaderboard, with ``leaderboard``), scoring ``accuracy`` on N examples (the first round(accuracy·N)
    correct unless ``correct`` gives the mask)."""
    score = (np.arange(N) < round(accuracy * N)).astype(float) if correct is None else correct.astype(float)
    config = {f.name: f.default for f in dataclasses.fields(ImageNetConfig)}
    config["train_steps"] = steps
    if d_model is not None:
        config["d_model"] = d_model
    config.update(keys or {})
    for key in without:  # a row made before the key existed
        config.pop(key)
    row = results.ResultRow(
        method="dense", task="imagenet", dataset=dataset, knob_name="size", knob_value="w1-d1",
        knob_kind="static", seed=seed, variant="", metric="top1", quality=float(score.mean()), higher_is_better=True,
        metric_signature="top1", n_eval=N, macs_mean=1.0, macs_p10=1.0, macs_p50=1.0, macs_p90=1.0, macs_dense=1.0,
        cost_pct_dense=100.0, macs_counted_mean=1.0, cost_check="agree", uncounted_ops="",
        train_budget=f"{steps} steps x batch 128 (the task's base budget)",
        train_time_s=steps / 10.0 if minutes is None else minutes * 60.0,
        run_id=f"r{steps}-{seed}-{d_model}", config_hash=f"h{steps}{d_model}{threads}{eval_limit}", command="test",
        git_sha="0" * 12, git_dirty=False, versions="", device=device,
        timestamp=f"2026-01-{(seed + 1 if day is None else day):02d}T00:00:00Z", timing_threads=threads,
        latency_b1_ms=math.nan, latency_b1_iqr_ms=math.nan, throughput_per_s=math.nan, throughput_batch=0,
        dense_latency_b1_ms=math.nan, dense_throughput_per_s=math.nan, latency_b1_ratio=math.nan,
        throughput_ratio=math.nan, timing_rounds=0, params=1,
        **({} if protocol is None else {"protocol": protocol}))
    samples = pd.DataFrame({"target": target, "prediction": 0, "score": score, "macs": 1.0,
                            "index": np.arange(first_index, first_index + N)})
    config_yaml = yaml.safe_dump({"seed": seed, "threads": threads, "eval_limit": eval_limit, "imagenet": config,
                                  "dense": {"width": width, "depth": 1.0}})
    return results.append(results_dir if leaderboard else results_dir / "curves", row,
                   f"w{width}-d1-{steps}-{d_model}-t{threads}-e{eval_limit}-p{protocol}-s{seed}", samples, config_yaml)


def test_doubling_verdicts_and_non_default_curves(tmp_path):
    default = curve_data.default_train_steps("imagenet")
    assert default and curve_data.base_target("imagenet").doubling_gain == pytest.approx(0.002)
    for seed in (0, 1):
        _write(tmp_path, default // 2, 0.80, seed)  # doubling to the default gains 8 points: not saturated
        _write(tmp_path, default, 0.88, seed)
        _write(tmp_path, 2 * default, 0.88, seed)  # the same examples right: the gain is exactly 0
        _write(tmp_path, default, 0.70, seed, d_model=32)  # another configuration: a separate curve
    curves = curve_data.load_curves(tmp_path)
    assert len(curves) == 2
    main = next(c for c in curves if c.is_default)
    other = next(c for c in curves if not c.is_default)
    assert main.steps == [default // 2, default, 2 * default] and other.steps == [default]
    assert "imagenet.d_model=32" in other.setting

    gains = {d.steps: d for d in curve_stats.doublings(main, 0.002)}
    assert gains[default // 2].gain == pytest.approx(0.08)
    assert gains[default // 2].low > 0.002 and gains[default // 2].verdict == curve_stats.MISSED
    assert gains[default].gain == pytest.approx(0.0) and (gains[default].low, gains[default].high) == (0.0, 0.0)
    assert gains[default].verdict == curve_stats.MET

    # the d_model=32 setting against the default at the default's steps: 0.70 vs 0.88, paired
    (compared,) = curve_stats.compare_settings(curves, tmp_path)
    assert compared.steps == default and compared.setting == other.setting
    assert compared.delta == pytest.approx(-0.18) and compared.high < 0 and compared.verdict == "worse"
    assert compared.seed_deltas == {0: pytest.approx(-0.18), 1: pytest.approx(-0.18)}

    written = report_curves.write(tmp_path, tmp_path / "reports")
    md = (tmp_path / "reports" / "curves.md").read_text()
    assert "## Settings against the default" in md and "| worse |" in md
    assert any(p.endswith(".png") for p in written)
    for path in written:
        if path.endswith(".png"):
            assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    summary = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    assert "doubling the default gains &lt; 0.002 | 0.0000 \\[0.0000, 0.0000\\] | met" in summary
    assert "base trains in ≤ 60 min" in summary and "d_model=32" not in summary  # only the default is judged
    assert "Not the task's default configuration" in md
    assert f"| {default} (default) | 0.8800" in md
    assert f"| {default} (the default's steps) | 0.7000" in md  # the d_model=32 curve is not the default


def test_a_small_gain_with_a_wide_interval_is_inconclusive(tmp_path):
    default = curve_data.default_train_steps("imagenet")
    rng = np.random.default_rng(0)
    base = rng.random(N) < 0.85
    flipped = base.copy()
    # 400 examples change: 202 wrong ones become right, 198 right ones wrong (Δ = 4/4000 = 0.001)
    flipped[rng.choice(np.flatnonzero(~base), 202, replace=False)] = True
    flipped[rng.choice(np.flatnonzero(base), 198, replace=False)] = False
    gain = flipped.mean() - base.mean()
    _write(tmp_path, default, 0.0, 0, correct=base)
    _write(tmp_path, 2 * default, 0.0, 0, correct=flipped)
    (curve,) = curve_data.load_curves(tmp_path)
    (d,) = curve_stats.doublings(curve, 0.002)
    assert d.gain == pytest.approx(0.001) == pytest.approx(gain) and d.low < 0.002 < d.high
    assert d.verdict == curve_stats.UNSURE


def test_quality_targets_follow_the_metric_direction():
    def curve(hib):
        return curve_data.Curve("t", "d", "wer", hib, "", pd.DataFrame(), None)

    point = curve_data.Point(1, 0.25, 0.22, 0.28, [0], [0.25], 1.0)
    assert curve_stats.quality_verdict(curve(False), point, 0.30) == curve_stats.MET  # WER ≤ 0.30
    assert curve_stats.quality_verdict(curve(False), point, 0.20) == curve_stats.MISSED
    assert curve_stats.quality_verdict(curve(False), point, 0.25) == curve_stats.UNSURE
    assert curve_stats.quality_verdict(curve(True), point, 0.20) == curve_stats.MET  # BLEU-like ≥
    nan = curve_data.Point(1, 0.25, math.nan, math.nan, [0], [0.25], 1.0)
    assert curve_stats.quality_verdict(curve(True), nan, 0.20) == curve_stats.UNSURE


def test_no_curve_rows_write_nothing(tmp_path):
    assert report_curves.write(tmp_path, tmp_path / "reports") == []
    assert not (tmp_path / "reports").exists()


def test_one_row_per_seed_and_step_and_eval_limit_apart(tmp_path):
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default, 0.80, 0, threads=1, day=1)
    _write(tmp_path, default, 0.80, 0, threads=2, day=2)  # the same model re-evaluated with other threads
    _write(tmp_path, 2 * default, 0.81, 0)
    _write(tmp_path, 2 * default, 0.90, 1)  # no seed 1 at N: left out of the paired gain
    _write(tmp_path, default, 0.50, 0, eval_limit=100)  # another test set: another curve
    curves = curve_data.load_curves(tmp_path)
    main = next(c for c in curves if c.is_default)
    assert len(curves) == 2 and "eval_limit=100" in next(c for c in curves if not c.is_default).setting
    assert list(main.rows.loc[main.rows["steps"] == default, "seed"]) == [0]
    (d,) = curve_stats.doublings(main, 0.002)
    assert d.seed_gains == {0: pytest.approx(0.01)} and d.gain == pytest.approx(0.01)
    assert report_curves._slug(main) == "imagenet" and report_curves._slug(curves[1]).startswith("imagenet_")


def test_doubling_gain_of_a_lower_is_better_metric_is_a_drop(tmp_path):
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default, 0.70, 0)
    _write(tmp_path, 2 * default, 0.75, 0)
    (curve,) = curve_data.load_curves(tmp_path)
    curve.higher_is_better = False  # read the same scores as an error rate: more is worse
    (d,) = curve_stats.doublings(curve, 0.002)
    assert d.gain == pytest.approx(-0.05) and d.high < 0 and d.verdict == curve_stats.MET


def test_unknown_training_time_is_not_a_miss(tmp_path):
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default, 0.80, 0, minutes=math.nan)
    report_curves.write(tmp_path, tmp_path / "reports")
    line = next(l for l in (tmp_path / "reports" / "curves.md").read_text().splitlines()
                if "base trains in" in l and l.startswith("| imagenet"))
    assert line.rstrip().endswith("| n/a | inconclusive |")
    _write(tmp_path, default, 0.80, 0, minutes=75.0, day=5)
    report_curves.write(tmp_path, tmp_path / "reports")
    line = next(l for l in (tmp_path / "reports" / "curves.md").read_text().splitlines()
                if "base trains in" in l and l.startswith("| imagenet"))
    assert line.rstrip().endswith("| 75.0 min | missed |")


def test_a_target_belongs_to_its_task():
    assert curve_data.base_target("iwslt").quality == pytest.approx(10.0)
    assert curve_data.base_target("wmt") is None  # registered from the same package, another target


def test_a_row_made_before_a_key_existed_stays_on_the_default_curve(tmp_path):
    """A config key added later (with the earlier behaviour as its default) is missing from older rows'
    configs: they stay on the default curve, beside newer rows that store it."""
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default // 2, 0.80, 0, without=("streaming",))
    _write(tmp_path, default, 0.88, 0)
    (curve,) = curve_data.load_curves(tmp_path)
    assert curve.is_default and curve.steps == [default // 2, default]


def test_a_setting_a_seed_contradicts_is_inconclusive(tmp_path):
    """Setting comparisons follow the claims' rule: a seed on the other side of 0 makes them inconclusive."""
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default, 0.80, 0)
    _write(tmp_path, default, 0.80, 1)
    _write(tmp_path, default, 0.90, 0, d_model=32)
    _write(tmp_path, default, 0.79, 1, d_model=32)
    (compared,) = curve_stats.compare_settings(curve_data.load_curves(tmp_path), tmp_path)
    assert compared.low > 0 and compared.verdict == "inconclusive"


def test_a_setting_without_a_default_curve_on_its_dataset_is_listed_not_compared(tmp_path):
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default, 0.70, 0, d_model=32)
    (listed,) = curve_stats.compare_settings(curve_data.load_curves(tmp_path), tmp_path)
    assert listed.verdict.startswith("not compared") and math.isnan(listed.delta)


def test_a_setting_that_changes_the_training_data_is_compared_on_the_same_test_examples(tmp_path):
    """A setting whose rows name another dataset (more training data, e.g. iwslt.ding_phrases) is compared
    with the default curve evaluated on the same test examples (indices and targets), paired; one evaluated
    on other examples is listed, not compared.  Alone on its dataset, it is named by the keys it changes."""
    default = curve_data.default_train_steps("imagenet")
    for seed in (0, 1):
        _write(tmp_path, default, 0.80, seed)
        _write(tmp_path, default, 0.85, seed, d_model=32, dataset="toy images + more training images")
        _write(tmp_path, default, 0.90, seed, d_model=48, dataset="other toy images", target=1)
        _write(tmp_path, default, 0.90, seed, d_model=16, dataset="later toy images", first_index=N)
        # a key added later (bench.results.ADDED_TASK_DEFAULTS), off its default: not the default curve
        _write(tmp_path, default, 0.75, seed, threads=1, dataset="streamed toy images", keys={"streaming": True})
    curves = curve_data.load_curves(tmp_path)
    more = next(c for c in curves if c.dataset.endswith("more training images"))
    assert not more.is_default and more.setting == "imagenet.d_model=32"
    compared = {c.setting: c for c in curve_stats.compare_settings(curves, tmp_path)}
    streamed = next(c for c in curves if c.dataset == "streamed toy images")
    assert not streamed.is_default and streamed.setting == "imagenet.streaming=True"
    compared = {c.setting: c for c in curve_stats.compare_settings(curves, tmp_path)}
    assert compared["imagenet.streaming=True"].delta == pytest.approx(-0.05)
    del compared["imagenet.streaming=True"]
    assert set(compared) == {"imagenet.d_model=32", "imagenet.d_model=48", "imagenet.d_model=16"}
    better = compared["imagenet.d_model=32"]
    assert better.delta == pytest.approx(0.05) and better.low > 0 and better.verdict == "better"
    assert better.seed_deltas == {0: pytest.approx(0.05), 1: pytest.approx(0.05)}
    for other in (compared["imagenet.d_model=48"], compared["imagenet.d_model=16"]):  # other targets, examples
        assert other.verdict.startswith("not compared") and math.isnan(other.delta)


def test_consecutive_steps_that_are_not_a_doubling_get_a_gain_but_no_target(tmp_path):
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default // 2, 0.80, 0)
    _write(tmp_path, 3 * default // 4, 0.84, 0)
    _write(tmp_path, default, 0.86, 0)
    (curve,) = curve_data.load_curves(tmp_path)
    gains = {(d.steps, d.to_steps): d for d in curve_stats.step_gains(curve, 0.002)}
    assert set(gains) == {(default // 2, 3 * default // 4), (3 * default // 4, default), (default // 2, default)}
    assert gains[(default // 2, default)].is_doubling and gains[(default // 2, default)].verdict == curve_stats.MISSED
    step = gains[(default // 2, 3 * default // 4)]
    assert step.gain == pytest.approx(0.04) and step.low > 0 and step.verdict == ""
    assert [(d.steps, d.to_steps) for d in curve_stats.doublings(curve, 0.002)] == [(default // 2, default)]


def test_a_doubling_past_the_time_limit_says_so(tmp_path):
    """When the default's doubling was not run, the page says whether twice the default's measured training
    time would pass the limit (then the default is the most within it), not just "not run"."""
    default = curve_data.default_train_steps("imagenet")
    limit = curve_data.base_target("imagenet").minutes

    def doubling_line():
        report_curves.write(tmp_path, tmp_path / "reports")
        return next(l for l in (tmp_path / "reports" / "curves.md").read_text().splitlines()
                    if "doubling the default" in l and l.startswith("| imagenet"))

    _write(tmp_path, default, 0.80, 0, minutes=0.4 * limit)
    assert doubling_line().rstrip().endswith(f"| not run ({2 * default} steps) |")
    _write(tmp_path, default, 0.80, 0, minutes=0.9 * limit)  # the same point, re-written: a longer training
    assert doubling_line().rstrip().endswith(f"| out of reach: {2 * default} steps would take about "
                                             f"{1.8 * limit:.0f} min (twice the default's), over the "
                                             f"{limit:g}-min limit; the gains up to the default are in the task's 'Gain from more steps' table |")


def test_the_leaderboards_default_bases_are_points_of_the_default_curve(tmp_path):
    """The leaderboard's dense base rows (results/<task>/dense) of the default configuration and today's
    protocol join the default curve, so the targets are judged on every seed of the base; its other sizes
    and rows of an earlier protocol do not."""
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default // 2, 0.80, 0)
    _write(tmp_path, default, 0.86, 0)
    _write(tmp_path, default, 0.87, 1, leaderboard=True)
    _write(tmp_path, default, 0.60, 2, leaderboard=True, width=0.5)  # a static size: not a curve point
    _write(tmp_path, default, 0.50, 2, leaderboard=True, protocol=1)  # an earlier protocol
    _write(tmp_path, default, 0.55, 2, leaderboard=True, eval_limit=100)  # another test set: not the default
    old = _write(tmp_path, default, 0.45, 3, leaderboard=True, day=20)  # a row file from before the column
    pd.read_csv(old).drop(columns=["protocol"]).to_csv(old, index=False)
    (curve,) = curve_data.load_curves(tmp_path)
    at_default = curve.rows[curve.rows["steps"] == default].sort_values("seed")
    assert list(at_default["seed"]) == [0, 1] and list(at_default["quality"]) == [0.86, 0.87]
    assert results.load(tmp_path).shape[0] == 5  # the leaderboard rows themselves are untouched


def _flip(correct: np.ndarray, fix: int, spoil: int, rng) -> np.ndarray:
    """Another training's per-example correctness: ``fix`` wrong examples become right, ``spoil`` right ones
    wrong (two trainings of one model disagree on a few percent of the test set)."""
    out = correct.copy()
    out[rng.choice(np.flatnonzero(~correct), fix, replace=False)] = True
    out[rng.choice(np.flatnonzero(correct), spoil, replace=False)] = False
    return out


def test_the_equal_budget_control_must_gain_less_than_the_seed_spread(tmp_path):
    """imagenet's target: the dense model trained for train_steps + method_steps gains less over the default
    base than the base's seed spread (max − min over its seeds): the upper end of the paired CI of
    control − base below the spread (met), its lower end above (missed), inconclusive otherwise; each
    training disagrees with the others on ~5% of the examples, as real ones do."""
    default = curve_data.default_train_steps("imagenet")
    control = default + ImageNetConfig.method_steps
    assert curve_data.base_target("imagenet").equal_budget_control
    rng = np.random.default_rng(0)

    def control_line():
        report_curves.write(tmp_path, tmp_path / "reports")
        return next(l for l in (tmp_path / "reports" / "curves.md").read_text().splitlines()
                    if "equal-budget control" in l and l.startswith("| imagenet"))

    base0 = rng.random(N) < 0.88
    base1 = _flip(base0, 160, 80, rng)  # the other seed: +2 pt, so a spread of 0.02
    _write(tmp_path, default, 0.0, 0, correct=base0)
    assert control_line().rstrip().endswith(f"| not run ({control} steps, a seed the base has) |")
    _write(tmp_path, control, 0.0, 0, correct=_flip(base0, 100, 96, rng))  # Δ = +0.001
    assert "the spread needs two seeds of the base" in control_line()
    _write(tmp_path, default, 0.0, 1, correct=base1, leaderboard=True)
    _write(tmp_path, control, 0.0, 1, correct=_flip(base1, 96, 100, rng))  # Δ = −0.001
    line = control_line()
    assert "base seed spread 0.0200 over 2 seed(s)" in line and line.rstrip().endswith("| met |")
    (curve,) = curve_data.load_curves(tmp_path)
    (gain,) = [d for d in curve_stats.step_gains(curve, None) if d.to_steps == control]
    assert gain.high - gain.low > 0.004  # a realistic interval, not a degenerate one
    md = (tmp_path / "reports" / "curves.md").read_text()
    assert f"| {control} (equal-budget control) |" in md

    # the control far better on both seeds (Δ ≈ +0.06): the base is undertrained by this yardstick
    _write(tmp_path, control, 0.0, 0, correct=_flip(base0, 260, 20, rng), day=9)
    _write(tmp_path, control, 0.0, 1, correct=_flip(base1, 260, 20, rng), day=9)
    assert control_line().rstrip().endswith("| missed |")

    # a spread as small as the test-set noise: the interval straddles it
    _write(tmp_path, default, 0.0, 1, correct=_flip(base0, 12, 8, rng), leaderboard=True, day=10)  # spread 0.001
    _write(tmp_path, control, 0.0, 0, correct=_flip(base0, 100, 96, rng), day=11)
    _write(tmp_path, control, 0.0, 1, correct=_flip(base0, 100, 96, rng), day=11)
    assert control_line().rstrip().endswith("| inconclusive |")


def test_a_seed_at_or_past_the_spread_makes_the_control_check_inconclusive(tmp_path):
    default = curve_data.default_train_steps("imagenet")
    control = default + ImageNetConfig.method_steps
    rng = np.random.default_rng(1)
    base0 = rng.random(N) < 0.70
    base1 = _flip(base0, 400, 0, rng)  # spread 0.10
    for seed, base, gain in ((0, base0, -80), (1, base1, 420)):  # seed 1's own Δ ≈ +0.105 passes the spread
        _write(tmp_path, default, 0.0, seed, correct=base)
        fix, spoil = (gain, 0) if gain > 0 else (0, -gain)
        _write(tmp_path, control, 0.0, seed, correct=_flip(base, fix, spoil, rng))
    report_curves.write(tmp_path, tmp_path / "reports")
    line = next(l for l in (tmp_path / "reports" / "curves.md").read_text().splitlines()
                if "equal-budget control" in l and l.startswith("| imagenet"))
    assert line.rstrip().endswith("| inconclusive (seeds disagree) |")


def test_every_training_of_the_default_counts_for_the_time_target(tmp_path):
    """The same point trained again (a calibration row and the leaderboard's base of the same seed) is
    another measurement of the training time: the target judges the longest and lists them all, although
    the quality comes from the latest row only."""
    default = curve_data.default_train_steps("imagenet")
    limit = curve_data.base_target("imagenet").minutes
    _write(tmp_path, default, 0.80, 0, minutes=limit - 1.0, day=1)
    _write(tmp_path, default, 0.80, 0, minutes=limit + 2.5, day=2, leaderboard=True)
    (curve,) = curve_data.load_curves(tmp_path)
    assert len(curve.rows) == 1 and [t.minutes for t in curve.train_minutes[default]] == [limit - 1.0, limit + 2.5]
    report_curves.write(tmp_path, tmp_path / "reports")
    line = next(l for l in (tmp_path / "reports" / "curves.md").read_text().splitlines()
                if "base trains in" in l and l.startswith("| imagenet"))
    assert line.rstrip().endswith(f"| {limit + 2.5:.1f} min (the longest of 2 trainings: {limit - 1.0:.1f}, "
                                  f"{limit + 2.5:.1f} min) | missed |")


def test_the_time_target_names_the_processor_of_each_training(tmp_path):
    """The limit is wall clock on 2 cores, and the same configuration's time depends on the processor (one
    calibration base trained in 59 min on one processor model, the same configuration far longer on
    another): the target's line names each training's processor when they differ, and the one processor
    otherwise; the verdict stays the longest training's."""
    default = curve_data.default_train_steps("imagenet")
    limit = curve_data.base_target("imagenet").minutes

    def time_line() -> str:
        report_curves.write(tmp_path, tmp_path / "reports")
        return next(l for l in (tmp_path / "reports" / "curves.md").read_text().splitlines()
                    if "base trains in" in l and l.startswith("| imagenet")).rstrip()

    _write(tmp_path, default, 0.80, 0, minutes=limit - 1.0, day=1, device="cpu: Fast CPU 1")
    assert time_line().endswith(f"| {limit - 1.0:.1f} min (on Fast CPU 1) | met |")
    _write(tmp_path, default, 0.80, 0, minutes=limit - 2.0, day=2, leaderboard=True, device="cpu: Fast CPU 1")
    assert time_line().endswith(f"| {limit - 1.0:.1f} min (the longest of 2 trainings: {limit - 2.0:.1f}, "
                                f"{limit - 1.0:.1f} min, on Fast CPU 1) | met |")
    _write(tmp_path, default, 0.80, 1, minutes=limit + 25.0, day=3, leaderboard=True, device="cpu: Slow CPU 2")
    assert time_line().endswith(f"| {limit + 25.0:.1f} min (the longest of 3 trainings: {limit - 2.0:.1f} min on "
                                f"Fast CPU 1, {limit - 1.0:.1f} min on Fast CPU 1, {limit + 25.0:.1f} min on "
                                "Slow CPU 2) | missed |")


def test_curves_are_named_by_what_they_change_from_the_defaults(tmp_path):
    """The default configuration's curve is unnamed while it is its dataset's only curve, and "default
    configuration" beside others; a setting is named by the keys it changes from the task's defaults alone
    (not by keys another setting changes); a curve of another dataset is named apart."""
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default, 0.80, 0)
    assert [c.setting for c in curve_data.load_curves(tmp_path)] == [""]
    _write(tmp_path, default, 0.82, 0, d_model=32)
    _write(tmp_path, default // 2, 0.83, 0, width=0.5)  # (another run id than the default's)
    _write(tmp_path, default, 0.70, 1, dataset="other images")
    names = {(c.dataset, c.setting) for c in curve_data.load_curves(tmp_path)}
    assert names == {("toy images", curve_data.DEFAULT_SETTING), ("toy images", "imagenet.d_model=32"),
                     ("toy images", "dense.width=0.5"), ("other images", "")}
    written = report_curves.write(tmp_path, tmp_path / "reports")
    assert len({p for p in written if p.endswith(".png")}) == 4  # every curve its own figure


def test_a_setting_with_no_step_count_of_the_default_is_listed_not_compared(tmp_path):
    """A setting trained only at step counts (or seeds) the default's curve lacks, e.g. a larger variant
    with its own budget, is listed in the comparisons with its steps, not left out and not compared."""
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default, 0.80, 0)
    _write(tmp_path, default // 4, 0.85, 0, d_model=256)
    _write(tmp_path, default, 0.86, 1, d_model=256)  # the default's steps, but a seed the default lacks
    (listed,) = curve_stats.compare_settings(curve_data.load_curves(tmp_path), tmp_path)
    assert listed.setting == "imagenet.d_model=256" and listed.steps == 0 and math.isnan(listed.delta)
    assert listed.verdict == ("not compared: no default-configuration point at the same steps and seed "
                              f"(this setting's steps: {default // 4}, {default})")


def test_a_curve_names_the_devices_that_trained_it(tmp_path):
    """A curve trained on a GPU (a larger variant) says so beside its dataset; a CPU curve names its
    processors; a bare ``cpu`` names none."""
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default, 0.80, 0, device="cpu")
    _write(tmp_path, default, 0.85, 0, d_model=256, device="NVIDIA H200")
    _write(tmp_path, default // 2, 0.84, 1, d_model=256, device="cpu: Fast CPU 1")
    report_curves.write(tmp_path, tmp_path / "reports")
    lines = (tmp_path / "reports" / "curves.md").read_text().splitlines()
    dataset_lines = [l for l in lines if l.startswith("Dataset: toy images.")]
    assert len(dataset_lines) == 2
    default_line = next(l for l in dataset_lines if "d\\_model=256" not in l)
    wide_line = next(l for l in dataset_lines if "d\\_model=256" in l)
    assert "Trained on" not in default_line
    assert wide_line.endswith("Trained on: Fast CPU 1, NVIDIA H200.")
    _write(tmp_path, 2 * default, 0.86, 0, d_model=256, device="cpu")  # a training on an unnamed CPU joins
    report_curves.write(tmp_path, tmp_path / "reports")
    text = (tmp_path / "reports" / "curves.md").read_text()
    assert "Trained on: Fast CPU 1, NVIDIA H200, an unrecorded device." in text


def test_a_leaderboard_of_rows_from_before_the_protocol_column_is_read_as_protocol_1(tmp_path):
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default, 0.86, 0)
    old = _write(tmp_path, default, 0.45, 1, leaderboard=True)
    pd.read_csv(old).drop(columns=["protocol"]).to_csv(old, index=False)
    (curve,) = curve_data.load_curves(tmp_path)
    assert list(curve.rows["seed"]) == [0]


def test_a_doubling_a_seed_contradicts_is_not_met(tmp_path):
    """The CI of the mean gain lies below the 0.002 yardstick, but one seed's own gain reaches it: the
    claims' seed rule makes the verdict inconclusive, not met."""
    default = curve_data.default_train_steps("imagenet")
    base = np.arange(N) < 3400
    up, down = base.copy(), base.copy()
    up[3400:3410] = True  # seed 0 gains 10 examples (+0.0025)
    down[:10] = False  # seed 1 loses 10 others (−0.0025)
    for seed, after in ((0, up), (1, down)):
        _write(tmp_path, default, 0.0, seed, correct=base)
        _write(tmp_path, 2 * default, 0.0, seed, correct=after)
    (curve,) = curve_data.load_curves(tmp_path)
    (d,) = curve_stats.doublings(curve, 0.002)
    assert d.gain == pytest.approx(0.0) and d.high < 0.002 and d.seed_gains[0] == pytest.approx(0.0025)
    assert d.verdict == f"{curve_stats.UNSURE} (seeds disagree)"


def test_only_the_default_curve_marks_its_point_as_the_default(tmp_path, monkeypatch):
    """Another setting's curve marks the default's step count, not "the default" (it is not the default)."""
    default = curve_data.default_train_steps("imagenet")
    _write(tmp_path, default, 0.88, 0)
    _write(tmp_path, default, 0.70, 0, d_model=32)
    labels = {}
    monkeypatch.setattr(report_curves, "save_figure", lambda fig, path: labels.update(
        {path.name: [t.get_text() for t in fig.axes[0].get_legend().get_texts()]}))
    for curve in curve_data.load_curves(tmp_path):
        report_curves.plot_curve(curve, curve_data.points(curve), None, tmp_path / f"{curve.is_default}.png")
    assert f"default ({default} steps)" in labels["True.png"]
    assert f"the default's steps ({default})" in labels["False.png"]
    assert not any(t.startswith("default") for t in labels["False.png"])
