"""Statistics a reviewer signs: two-level intervals over seeds and test examples, the concave hull,
Holm over the claims page, minimum detectable effects, and flags on models that learned nothing."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch

from bench import results, stats
from bench.report import build as report
from bench.report import claims as report_claims
from bench.report import verdicts as report_verdicts
from bench.claims import Beats, Claim, Reaches, Select
from tests.test_report import DATASET, _row
from tests.test_stats_claims import _views, _write


def _judge(views, tmp_path, *checks):
    return report_claims.evaluate(Claim("c", "test", "test", "toy", checks, dataset=DATASET), views, tmp_path)


def test_a_point_interval_covers_the_seeds_with_three_and_the_examples_only_with_two(tmp_path):
    for seed, accuracy in enumerate((0.80, 0.85, 0.90)):
        _write(tmp_path, "m", "a", 0.5, accuracy, seed)
    for seed in (0, 1):
        _write(tmp_path, "two", "a", 0.4, 0.80 + 0.05 * seed, seed)
    view = _views(tmp_path)[0]
    keys = view.points.set_index("method").loc["m", "keys"]
    lo, hi = view.unc.ci(keys)
    ex_lo, ex_hi = view.unc.example_ci(keys)
    assert ex_lo < 0.85 < ex_hi and ex_hi - ex_lo < 0.03  # 6,000 examples: the test set alone is narrow
    assert lo < 0.82 and hi > 0.88  # the seeds (0.80 ... 0.90) are the larger part of the uncertainty
    two = view.points.set_index("method").loc["two", "keys"]
    assert view.unc.ci(two) == view.unc.example_ci(two)  # two seeds: the seed level is not estimated


def test_two_level_draws_are_paired_and_reproducible():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.8, 0.01, (3, 500)), rng.normal(0.7, 0.01, (3, 500))
    assert np.array_equal(stats.seed_level(a), stats.seed_level(a))
    # the same seed resamples for both sides: the difference of the draws is the draws of the differences
    assert np.allclose(stats.seed_level(a) - stats.seed_level(b), stats.seed_level(a - b))
    assert np.array_equal(stats.seed_level(a[:2]), a[:2].mean(axis=0))


def test_a_point_below_the_chord_of_two_others_is_not_a_hull_vertex():
    cost, quality = [0.2, 0.5, 0.6, 1.0], [0.5, 0.8, 0.81, 0.9]  # (0.6, 0.81) lies below the chord 0.5 -> 1.0
    hull_c, hull_q = report.upper_hull(cost, quality)
    assert list(hull_c) == [0.2, 0.5, 1.0] and list(hull_q) == [0.5, 0.8, 0.9]
    assert report.quality_at_budget(cost, quality, 0.6) == pytest.approx(0.82)  # on the chord, above the point
    # lower is better (WER): the mirror image
    assert list(report.upper_hull(cost, [0.5, 0.2, 0.19, 0.1], False)[0]) == [0.2, 0.5, 1.0]
    # a point exactly on the chord is not a vertex either
    assert list(report.upper_hull([0.0, 0.5, 1.0], [0.0, 0.5, 1.0])[0]) == [0.0, 1.0]


def test_holm_over_the_page_makes_a_marginal_verdict_inconclusive():
    def check(p: float, verdict: str = report_verdicts.HOLDS) -> report_verdicts.CheckResult:
        item = report_verdicts.Item("x", "", "", 0.1, 0.01, 0.2, "Δ > 0", "", verdict,
                                    test=report_verdicts.Test(p=p))
        return report_verdicts.CheckResult("t", "all", [item], verdict)

    strong, marginal, failing = check(0.001), check(0.03), check(0.002, report_verdicts.FAILS)
    unsure = check(0.4, report_verdicts.UNSURE)
    claims = [report_claims.ClaimResult(Claim("a", "s", "x", "toy", ()), None, [strong, marginal]),
              report_claims.ClaimResult(Claim("b", "s", "x", "toy", ()), None, [failing, unsure])]
    assert report_claims.adjust(claims) == 4  # the family: every tested check of the page
    assert (strong.adjusted, marginal.adjusted, failing.adjusted) == ("holds", "inconclusive", "does not hold")
    assert strong.p_adjusted == pytest.approx(0.004)  # the smallest of four, times four
    assert marginal.p_adjusted == pytest.approx(0.06)  # the third smallest, times two: no longer below 5%
    assert claims[0].adjusted == "inconclusive" and claims[1].adjusted == "does not hold"


def test_a_check_needing_every_line_takes_the_largest_p_and_one_line_the_smallest_times_the_lines():
    lines = [report_verdicts.Item(str(i), "", "", 0.1, 0.01, 0.2, "", "", report_verdicts.HOLDS,
                                  test=report_verdicts.Test(p=p)) for i, p in enumerate((0.01, 0.02))]
    assert report_verdicts.CheckResult("t", "all", lines, report_verdicts.HOLDS).p == 0.02
    any_line = report_verdicts.CheckResult("t", "any", lines, report_verdicts.HOLDS)
    assert any_line.p == pytest.approx(0.02)  # 0.01 × 2


def test_detectable_effects_follow_the_spread_and_the_seed_count():
    draws = np.random.default_rng(0).normal(0.0, 0.01, 20_000)
    assert stats.min_detectable_effect(draws) == pytest.approx(2.8016 * 0.01, rel=0.02)  # z_.975 + z_.8
    assert math.isnan(stats.seed_level_mde([0.1, 0.2]))
    three = stats.seed_level_mde([0.0, 0.01, 0.02])  # sd 0.01: t with 2 degrees of freedom needs much more
    assert three == pytest.approx(3.264 * 0.01, rel=1e-3)
    assert stats.p_value(draws, 0.0) > 0.5 and stats.p_value(draws + 0.05, 0.0) == pytest.approx(2 / 20_001)


def test_a_verdict_that_the_t_interval_over_the_seeds_does_not_support_is_inconclusive(tmp_path):
    n = 20_000
    for seed, gain in enumerate((0.01, 0.04, 0.07)):  # every seed better, but the seeds spread widely
        _write(tmp_path, "a", "x", 0.5, 0.80 + gain, seed, n=n)
        _write(tmp_path, "b", "x", 0.5, 0.80, seed, n=n)
    views = _views(tmp_path)
    result = _judge(views, tmp_path, Beats(Select("a"), Select("b"), budgets=(0.5,)))
    line = result.checks[0].items[0]
    assert line.lo > 0  # the two-level bootstrap alone would say "holds"
    assert result.verdict == "inconclusive" and line.reason.startswith("t-interval over the seeds")
    assert line.test.mde > line.delta  # ... and the test could not have decided an effect this size
    assert line.test.p > 0.05 and line.test.p == pytest.approx(stats.seed_level_p([0.01, 0.04, 0.07], 0.0), rel=0.05)


def _write_balanced(results_dir, method, accuracy, seed, n=2000, majority=0.5):
    """A classifier's row on a test set whose most frequent label has share ``majority``."""
    rng = np.random.default_rng(seed + 17)
    target = (rng.random(n) < majority).astype(int)
    right = np.zeros(n, dtype=bool)
    right[rng.choice(n, round(accuracy * n), replace=False)] = True
    prediction = np.where(right, target, 1 - target)
    row = dataclasses.replace(_row(method, "train", "x", 0.5, float(right.mean()), seed=seed), n_eval=n)
    samples = pd.DataFrame({"target": target, "prediction": prediction, "score": right.astype(float), "macs": 0.5,
                            "index": np.arange(n)})
    results.append(results_dir, row, f"{method}-s{seed}", samples)


def test_a_classifier_no_better_than_the_most_frequent_label_is_degenerate(tmp_path):
    for seed in (0, 1, 2):
        _write_balanced(tmp_path, "guess", 0.70, seed, majority=0.70)  # varied outputs, majority-rate accuracy
        _write_balanced(tmp_path, "good", 0.90, seed, majority=0.70)
    views = _views(tmp_path)
    result = _judge(views, tmp_path, Reaches(Select("guess"), 0.95, fails=True), Reaches(Select("good"), 0.95,
                                                                                         fails=True))
    assert result.verdict == "holds"
    assert len(result.flags) == 1 and "most frequent label" in result.flags[0] and "guess" in result.flags[0]


def test_a_claim_that_a_constant_predictor_fails_is_flagged(tmp_path):
    for seed in (0, 1, 2):
        _write(tmp_path, "base", "x", 0.5, 0.55, seed, constant=True)  # one label for every example
        _write_balanced(tmp_path, "good", 0.95, seed)
    views = _views(tmp_path)
    result = _judge(views, tmp_path, Reaches(Select("base"), 0.9, fails=True))
    assert result.verdict == "holds"
    assert result.flags and "degenerate" in result.flags[0]
    assert "degenerate baseline" in report_claims.summary_lines([result])[-1]
    learned = _judge(views, tmp_path, Reaches(Select("good"), 0.99, fails=True))
    assert learned.verdict == "holds" and not learned.flags  # a model that learned something: no flag


def test_the_hull_is_chosen_on_the_validation_split_and_read_on_the_test_split():
    cost = [0.2, 0.5, 0.6, 1.0]
    test = [0.50, 0.80, 0.83, 0.90]  # on the test split (0.6, 0.83) is above the chord 0.5 -> 1.0 ...
    valid = [0.50, 0.80, 0.79, 0.90]  # ... on the validation split it is below it: not a vertex
    assert list(report.upper_hull(cost, test)[0]) == [0.2, 0.5, 0.6, 1.0]
    hull_c, hull_q = report.upper_hull(cost, test, chosen_by=valid)
    assert list(hull_c) == [0.2, 0.5, 1.0] and list(hull_q) == [0.50, 0.80, 0.90]  # test values at those vertices
    assert report.quality_at_budget(cost, test, 0.6, chosen_by=valid) == pytest.approx(0.82)
    draws = np.array(test)[:, None] + np.zeros((4, 5))
    assert np.allclose(report.hull_draws(cost, test, draws, 0.6, chosen_by=valid), 0.82)
    # a point without a validation value: every vertex is chosen on the test split (never a mix)
    assert list(report.upper_hull(cost, test, chosen_by=[0.5, math.nan, 0.79, 0.9])[0]) == [0.2, 0.5, 0.6, 1.0]


def test_rows_of_a_task_with_a_validation_split_carry_its_metric(tmp_path):
    from bench import runner
    from tests.helpers import compose_tiny

    cfg = compose_tiny("dense", "parity", tmp_path, "timing=false")
    row = pd.read_csv(runner.run(cfg, "dense", "parity", "test")[0]).iloc[0]
    assert row["val_n"] == row["n_eval"] and 0 <= row["val_quality"] <= 1
    task = runner.build(cfg, "dense", "parity")[1]
    valid = task.validation_task()
    first = next(iter(task.eval_batches())).x, next(iter(valid.eval_batches())).x
    assert not torch.equal(*first)  # another draw than the test split (and than training's stream)


def test_a_claim_reads_the_paper_recipe_rows_and_says_when_it_falls_back_to_matched(tmp_path):
    for seed in (0, 1, 2):
        _write_balanced(tmp_path, "m", 0.60, seed)  # the harness's equal budget (recipe column: matched)
    views = _views(tmp_path)
    claim = Claim("c", "s", "m reaches 0.8", "toy", (Reaches(Select("m"), 0.8),), dataset=DATASET)
    fallback = report_claims.evaluate(claim, views, tmp_path)
    assert fallback.recipe == "matched" and fallback.verdict == "does not hold"
    assert "no recipe=paper rows of these methods yet" in report_claims.claims_markdown([fallback], str(tmp_path))
    for seed in (0, 1, 2):  # the paper's recipe: another training, another identity
        rng = np.random.default_rng(seed)
        target = (rng.random(2000) < 0.5).astype(int)
        right = rng.random(2000) < 0.9
        row = dataclasses.replace(_row("m", "train", "x", 0.5, float(right.mean()), seed=seed), n_eval=2000,
                                  recipe="paper", config_hash="feedfeedfeedfeed")
        samples = pd.DataFrame({"target": target, "prediction": np.where(right, target, 1 - target),
                                "score": right.astype(float), "macs": 0.5, "index": np.arange(2000)})
        results.append(tmp_path, row, f"m-paper-s{seed}", samples)
    paper = report_claims.evaluate(claim, _views(tmp_path), tmp_path)
    assert paper.recipe == "paper" and paper.verdict == "holds"
    assert "**Rows read**: recipe=paper  " in report_claims.claims_markdown([paper], str(tmp_path))
