"""Uncertainty and claims: per-example statistics recompute each metric exactly as the task scored it, the
bootstrap is paired and reproducible, hull qualities are bootstrapped like the point estimate, and a claim's
verdict follows its CI (and is downgraded when seeds disagree)."""

from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np
import pandas as pd
import pytest

from bench import results, stats
from bench.report import build as report
from bench.report import checks as report_checks
from bench.report import claims as report_claims
from bench.report.page import md_escape
from bench.claims import Beats, Claim, Reaches, Select
from tests.test_report import DATASET, _row


def test_wer_and_bleu_recompute_as_the_tasks_score():
    from sacrebleu.metrics import BLEU

    from tasks.commonvoice import text

    refs = ["it's taking ages", "i can well believe that", "", "one two three"]
    hyps = ["it's ta e es", "i can believe that this", "extra words", ""]
    samples = pd.DataFrame({"target": refs, "prediction": hyps})
    edits = stats.example_statistics("wer", samples)
    assert stats.metric_from_sums("wer", edits.sum(axis=0), len(refs)) == pytest.approx(
        text.error_rates(refs, hyps)["wer"], abs=1e-15)
    cer = stats.example_statistics("cer", samples)
    assert stats.metric_from_sums("cer", cer.sum(axis=0), len(refs)) == pytest.approx(
        text.error_rates(refs, hyps)["cer"], abs=1e-15)
    bleu_refs = ["The cat sat on the mat.", "It is getting serious.", "Nothing works here today."]
    bleu_hyps = ["The cat is on the mat.", "It will come.", "Nothing works today."]
    s = stats.example_statistics("bleu", pd.DataFrame({"target": bleu_refs, "prediction": bleu_hyps}))
    assert float(stats.metric_from_sums("bleu", s.sum(axis=0), 3)) == pytest.approx(
        BLEU().corpus_score(bleu_hyps, [bleu_refs]).score, abs=1e-12)


def test_bootstrap_is_paired_and_reproducible():
    rng = np.random.default_rng(0)
    a = (rng.random(500) < 0.8).astype(float)[:, None]
    rows = {"a": a, "same": a.copy(), "b": (rng.random(500) < 0.6).astype(float)[:, None]}
    first, second = stats.bootstrap_rows("accuracy", rows, 300), stats.bootstrap_rows("accuracy", rows, 300)
    assert np.array_equal(first.draws["a"], second.draws["a"])  # fixed random state
    assert np.array_equal(first.draws["a"], first.draws["same"])  # paired: the same resampled examples
    assert first.low["a"] < first.value["a"] < first.high["a"]
    lo, hi = stats.interval(first.draws["a"] - first.draws["b"])
    assert lo > 0  # 0.8 vs 0.6 on 500 examples


def test_hull_draws_match_quality_at_budget():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 6))
        cost = rng.choice([0.1, 0.3, 0.5, 0.8, 1.0], n)
        quality = rng.random((n, 4))
        budget, hib = float(rng.choice([0.05, 0.3, 0.6, 1.0, 1.2])), bool(rng.integers(2))
        for j in range(4):  # with resample j as the estimate, resample j is read exactly like quality_at_budget
            draws = report.hull_draws(cost, quality[:, j], quality, budget, hib)
            expected = report.quality_at_budget(cost, quality[:, j], budget, hib)
            assert (np.isnan(expected) and np.isnan(draws[j])) or draws[j] == pytest.approx(expected)


def test_hull_draws_keep_the_estimates_hull():
    # two points close in quality at one cost and a cheaper one: the front is chosen on the estimates, so a
    # vertex's draws are its own draws (not the better of the two in each resample), and between vertices
    # the draws are the same straight-line mix as the estimate
    rng = np.random.default_rng(5)
    cost = np.array([0.5, 1.0, 1.0])
    draws = np.vstack([0.7 + 0.01 * rng.standard_normal(1000), 0.80 + 0.01 * rng.standard_normal(1000),
                       0.79 + 0.01 * rng.standard_normal(1000)])
    estimate = np.array([0.7, 0.80, 0.79])
    assert np.array_equal(report.hull_draws(cost, estimate, draws, 1.0), draws[1])
    assert np.allclose(report.hull_draws(cost, estimate, draws, 0.75), 0.5 * draws[0] + 0.5 * draws[1])
    lo, hi = stats.interval(report.hull_draws(cost, estimate, draws, 1.0))
    assert lo < 0.80 < hi  # the interval brackets the printed value
    assert np.all(np.isnan(report.hull_draws(cost, estimate, draws, 0.4)))  # below the cheapest: not measured
    # past a dominated costliest point the hull is flat at the last Pareto point
    weights = report.hull_weights([0.2, 0.5, 0.9], [0.6, 0.9, 0.8], 0.7)
    assert weights.tolist() == [0.0, 1.0, 0.0]


def _write(results_dir, method, knob, frac, accuracy, seed, n=2000, kind="train", protocol=results.PROTOCOL_VERSION,
           constant=False, code_version=""):
    rng = np.random.default_rng(zlib.crc32(f"{method}/{knob}/{seed}".encode()))  # stable across processes
    score = (np.arange(n) < round(accuracy * n)).astype(float)  # exactly the intended accuracy ...
    rng.shuffle(score)  # ... on examples drawn at random
    row = dataclasses.replace(_row(method, kind, knob, frac, float(score.mean()), seed=seed), n_eval=n,
                              protocol=protocol, code_version=code_version)
    target = (score if constant else np.zeros(n)).astype(int)  # a constant predictor: label 1 at the accuracy's rate
    prediction = np.ones(n, dtype=int) if constant else (1 - score).astype(int)  # right exactly where score is 1
    samples = pd.DataFrame({"target": target, "prediction": prediction, "score": score, "macs": frac,
                            "index": np.arange(n)})
    results.append(results_dir, row, f"{method}-{knob}-s{seed}", samples)


def _views(results_dir):
    views = report.task_views(results.load(results_dir))
    for view in views:
        report.attach_uncertainty(view, results_dir)
    return views


def test_claim_verdicts_follow_the_ci_and_the_seeds(tmp_path):
    for seed in (0, 1):
        _write(tmp_path, "dense", "1.0", 1.0, 0.90, seed, kind="static")
        _write(tmp_path, "good", "a", 0.5, 0.88, seed)
        _write(tmp_path, "bad", "a", 0.5, 0.60, seed)
    _write(tmp_path, "split", "a", 0.5, 0.95, 0)  # seed 0 far above dense, seed 1 far below
    _write(tmp_path, "split", "a", 0.5, 0.70, 1)
    views = _views(tmp_path)
    dense = Select("dense")

    def judge(check):
        claim = Claim("c", "test", "test", "toy", (check,), dataset=DATASET)
        return report_claims.evaluate(claim, views, tmp_path).verdict

    assert judge(Beats(Select("good"), Select("bad"), budgets=(0.5,))) == "holds"
    assert judge(Beats(Select("bad"), Select("good"), budgets=(0.5,))) == "does not hold"
    assert judge(Beats(Select("good"), dense, margin=-0.05, b_is_point=True)) == "holds"
    assert judge(Beats(Select("good"), dense, margin=-0.001, b_is_point=True)) == "does not hold"
    assert judge(Reaches(Select("bad"), 0.7, fails=True)) == "holds"
    assert judge(Beats(Select("split"), Select("bad"), budgets=(0.5,))) == "holds"
    # the seed mean of "split" is below dense, but seed 0 is far above: seeds disagree -> inconclusive
    assert judge(Beats(Select("split"), dense, b_is_point=True)) == "inconclusive"
    assert judge(Beats(Select("good"), Select("bad"), budgets=(0.2,))) == "inconclusive"  # not measured there


@pytest.mark.parametrize("task,metric,columns", [("iwslt", "bleu", ["bleu_stats"]),
                                                 ("commonvoice", "wer", ["word_edits", "ref_words"])])
def test_per_sample_files_hold_the_bootstrap_statistics(tmp_path, task, metric, columns):
    """A real (tiny) run writes each example's sufficient statistics (BLEU n-gram counts, WER edit counts);
    they equal what the report would recompute from the stored texts, and sum to the row's metric."""
    from bench import runner, stats
    from tests.helpers import compose_tiny

    cfg = compose_tiny("dense", task, tmp_path, "timing=false")
    runner.run(cfg, "dense", task, "test")
    row = results.load(tmp_path / "results").iloc[0]
    samples = pd.read_csv(stats.samples_path(row.to_dict(), tmp_path / "results"), keep_default_na=False,
                          na_values=[""])
    assert set(columns) <= set(samples.columns)
    stored = stats.example_statistics(metric, samples)
    from_texts = stats.example_statistics(metric, samples.drop(columns=columns))
    np.testing.assert_array_equal(stored, from_texts)
    value = float(stats.metric_from_sums(metric, stored.sum(axis=0), len(stored)))
    assert value == pytest.approx(float(row["quality"]), rel=1e-9, abs=1e-12)


def test_two_dense_bases_in_one_results_dir_name_the_cause(tmp_path):
    """A point measured under two configurations (a changed default budget) stops the claims with a line
    that says so and what to do, instead of a bare count."""
    _write(tmp_path, "dense", "1.0", 1.0, 0.90, 0, kind="static")
    _write(tmp_path, "dense", "1.0b", 1.0, 0.91, 0, kind="static")
    _write(tmp_path, "good", "a", 0.5, 0.88, 0)
    claim = Claim("c", "test", "test", "toy", (Beats(Select("good"), Select("dense"), b_is_point=True),),
                  dataset=DATASET)
    with pytest.raises(ValueError) as err:
        report_claims.evaluate(claim, _views(tmp_path), tmp_path)
    message = str(err.value)
    assert "found 2" in message and "remove the superseded rows" in message and "\n" not in message


def test_a_claim_flags_rows_made_by_older_code(tmp_path, monkeypatch):
    """Rows whose code_version names versions that today's code has bumped past are flagged on the claim (its
    verdict reads them until their points are re-run); today's rows and rows from before explicit versions
    are not."""
    old, today = "skeleton1.trainer1.toy1.good1", "skeleton1.trainer1.toy1.good2"
    for seed in (0, 1):
        _write(tmp_path, "good", "a", 0.5, 0.88, seed, code_version=old)
        _write(tmp_path, "good", "b", 0.3, 0.85, seed, code_version=today)
        _write(tmp_path, "fine", "a", 0.5, 0.88, seed)  # before explicit versions: keeps counting, no flag
    monkeypatch.setattr(report_claims.versions, "current_tag", lambda task, method: f"skeleton1.trainer1.{task}1.{method}2")
    views = _views(tmp_path)
    flagged = report_claims.evaluate(Claim("c", "test", "test", "toy", (Reaches(Select("good"), 0.5),),
                                           dataset=DATASET), views, tmp_path)
    assert flagged.older_code == [f"good: 2 rows of {old} (today {today})"]
    assert "⚑ older code" in "\n".join(report_claims.summary_lines([flagged]))
    assert f"**Older code** (rows made before a behaviour change; the campaign re-runs their points): good: 2 rows" \
        in report_claims.claims_markdown([flagged], str(tmp_path))
    clean = report_claims.evaluate(Claim("d", "test", "test", "toy", (Reaches(Select("fine"), 0.5),),
                                         dataset=DATASET), views, tmp_path)
    assert clean.older_code == [] and "⚑ older code" not in "\n".join(report_claims.summary_lines([clean]))


def test_each_claim_says_which_points_it_compared(tmp_path):
    """The summary and each claim's section list the points the checks compared, per protocol version,
    counted by their seeds, so "three seeds of the new rows" can be checked on the page."""
    new = results.PROTOCOL_VERSION
    for seed in (0, 1, 2):
        _write(tmp_path, "good", "a", 0.5, 0.88, seed)
        _write(tmp_path, "good", "b", 0.3, 0.85, seed)
        _write(tmp_path, "good", "c", 0.9, 0.89, seed)
    for seed in (0, 1):
        _write(tmp_path, "bad", "a", 0.5, 0.60, seed, protocol=1)
    _write(tmp_path, "dense", "1.0", 1.0, 0.90, 0, kind="static")
    views = _views(tmp_path)

    def evaluate(*checks):
        claim = Claim("c", "test", "test", "toy", checks, dataset=DATASET)
        return report_claims.evaluate(claim, views, tmp_path)

    assert evaluate(Reaches(Select("good"), 0.5)).evidence == f"3 points · seeds 0, 1, 2 (protocol {new})"
    # a point two checks share counts once; points above max_cost are not compared
    result = evaluate(Beats(Select("good"), Select("bad"), max_cost=0.6), Reaches(Select("good", knob="a"), 0.5),
                      Reaches(Select("dense"), 0.5))
    expected = f"1 point · seeds 0, 1 (protocol 1) / 2 points · seeds 0, 1, 2; 1 point · seed 0: dense width=1.0 (protocol {new})"
    assert result.evidence == expected
    assert evaluate(Beats(Select("good"), Select("nothing"), budgets=(0.5,))).evidence == "no points"
    empty = evaluate(Reaches(Select("nothing"), 0.5))  # a selection that matches no rows says so
    assert empty.verdict == "not tested" and empty.checks[0].items[0].where == "no points of nothing"
    page = report_claims.claims_markdown([result], str(tmp_path))
    assert f"| {md_escape(expected)} |" in page and f"**Points compared**: {md_escape(expected)}" in page


def test_the_summary_shows_the_line_that_decides_the_claim(tmp_path):
    """With quantifier "any" a failing check is decided by its line closest to holding, and with "all" a
    holding check by its weakest line; the summary shows that line and what it needs."""
    for seed in (0, 1):
        _write(tmp_path, "dense", "1.0", 1.0, 0.90, seed, kind="static")
        _write(tmp_path, "m", "far", 0.3, 0.60, seed)
        _write(tmp_path, "m", "near", 0.5, 0.80, seed)
        _write(tmp_path, "m", "mid", 0.7, 0.70, seed)
    views = _views(tmp_path)

    def summary(check):
        claim = Claim("c", "test", "test", "toy", (Reaches(Select("dense"), 0.5), check), dataset=DATASET)
        result = report_claims.evaluate(claim, views, tmp_path)
        return result, report_claims.summary_lines([result])[-1]

    result, line = summary(Beats(Select("m"), Select("dense"), margin=-0.01, b_is_point=True, quantifier="any"))
    assert result.verdict == "does not hold"
    assert "check 2, m tau=near (50.0%): Δ = -0.1000" in line and f"| {md_escape('Δ > -0.01')} |" in line
    claim = Claim("c", "test", "test", "toy", (Reaches(Select("m"), 0.55, quantifier="all"),
                                                Reaches(Select("dense"), 0.5)), dataset=DATASET)
    result = report_claims.evaluate(claim, views, tmp_path)
    line = report_claims.summary_lines([result])[-1]
    assert result.verdict == "holds" and "check 1, m tau=far (30.0%): 0.6000" in line and "| at least 0.55 |" in line
    # a claim needs every check: across checks, the clearest failure decides one that does not hold (ranked in
    # units of each line's CI half-width), wherever it is
    claim = Claim("c", "test", "test", "toy", (Reaches(Select("m"), 0.75, quantifier="all"),
                                                Reaches(Select("m", knob="far"), 0.95)), dataset=DATASET)
    result = report_claims.evaluate(claim, views, tmp_path)
    assert [c.verdict for c in result.checks] == ["does not hold", "does not hold"]
    assert report_claims.deciding(result)[0] == 2 and "tau=far" in report_claims.deciding(result)[1].where
    # ... and the weakest check decides one that holds, even when it comes second
    claim = Claim("c", "test", "test", "toy", (Reaches(Select("dense"), 0.5),
                                                Reaches(Select("m", knob="near"), 0.75)), dataset=DATASET)
    result = report_claims.evaluate(claim, views, tmp_path)
    assert result.verdict == "holds" and report_claims.deciding(result)[0] == 2


def _write_wer(results_dir, method, knob, frac, wer, n=2000, kind="train"):
    """A WER row (lower is better) whose per-sample file holds one-word references with the given edits."""
    rng = np.random.default_rng(zlib.crc32(f"{method}/{knob}".encode()))
    edits = (np.arange(n) < round(wer * n)).astype(float)
    rng.shuffle(edits)
    row = dataclasses.replace(_row(method, kind, knob, frac, float(edits.mean())), n_eval=n, metric="wer",
                              higher_is_better=False, metric_signature="wer")
    samples = pd.DataFrame({"word_edits": edits, "ref_words": 1.0, "macs": frac, "index": np.arange(n)})
    results.append(results_dir, row, f"{method}-{knob}", samples)


@pytest.mark.parametrize("fails,quantifier,verdict,decides", [
    (False, "any", "holds", "low"),        # WER at most 0.35: the lowest WER is the strongest line
    (False, "all", "does not hold", "high"),  # ... and the highest the line that fails most
    (True, "all", "does not hold", "low"),    # WER above 0.25 ("fails"): the lowest WER fails it most
    (True, "any", "holds", "high"),           # ... and the highest holds it most
])
def test_the_deciding_line_follows_the_metric_direction_and_fails(tmp_path, fails, quantifier, verdict, decides):
    """Slack points towards "holds" for a lower-is-better metric and for a "stays below" (fails) check."""
    from bench import metrics

    assert metrics.EDIT_COLUMNS["wer"] == ("word_edits", "ref_words")
    for knob, frac, wer in (("low", 0.3, 0.20), ("mid", 0.5, 0.30), ("high", 0.7, 0.40)):
        _write_wer(tmp_path, "w", knob, frac, wer)
    views = _views(tmp_path)
    claim = Claim("c", "test", "test", "toy",
                  (Reaches(Select("w"), 0.25 if fails else 0.35, fails=fails, quantifier=quantifier),),
                  dataset=DATASET)
    result = report_claims.evaluate(claim, views, tmp_path)
    assert result.verdict == verdict
    assert f"tau={decides} " in report_claims.deciding(result)[1].where


def test_a_budget_names_the_points_its_hull_value_lies_between(tmp_path):
    """A budget's value is read on the hull: the claims page names the measured points either side (or the
    one it sits on, or the last Pareto point the hull stays flat after), and "not measured" outside."""
    for knob, frac, accuracy in (("far", 0.3, 0.60), ("near", 0.5, 0.80), ("mid", 0.7, 0.70)):
        _write(tmp_path, "m", knob, frac, accuracy, 0)
    points = report_checks.select_points(_views(tmp_path)[0], Select("m"))
    segment = lambda budget: report_checks.hull_segment(points, budget, True)  # noqa: E731
    assert segment(0.4) == "tau=far (30.0%) to tau=near (50.0%)"
    assert segment(0.5) == "tau=near (50.0%)"
    assert segment(0.6) == "tau=near (50.0%), flat beyond it (the costlier points are dominated)"
    assert segment(0.2) == segment(0.8) == "not measured"
    # a point-by-point check against a hull names the B points each A point is compared between
    _write(tmp_path, "a", "x", 0.4, 0.75, 0)
    claim = Claim("c", "test", "test", "toy", (Beats(Select("a"), Select("m")),), dataset=DATASET)
    (line,) = report_claims.evaluate(claim, _views(tmp_path), tmp_path).checks[0].items
    assert line.hull == "B: tau=far (30.0%) to tau=near (50.0%)"


def test_the_leaderboard_says_how_many_front_points_survive_the_resamples(tmp_path):
    """"Pareto-optimal" counts the points on the front by their seed means, and beside it how many stay on the
    front in at least 95% of the bootstrap resamples: a point ahead of another by 0.1 pt is not sure."""
    _write(tmp_path, "dense", "1.0", 1.0, 0.90, 0, kind="static")
    _write(tmp_path, "m", "a", 0.3, 0.60, 0)
    _write(tmp_path, "m", "b", 0.5, 0.80, 0)
    _write(tmp_path, "n", "c", 0.5, 0.801, 0)  # beats b by 2 of 2000 examples: on the front by the mean only
    view = _views(tmp_path)[0]
    header, table = report.summary_table(view)
    flag = {line[0]: line[header.index("Pareto-optimal")] for line in table}
    assert flag["m"] == "yes (1/2; 1 in ≥ 95% of resamples)"
    assert flag["n"] == "yes (1/1; 0 in ≥ 95% of resamples)"


def test_a_point_that_outputs_one_class_everywhere_says_so(tmp_path):
    """A model that predicts one label on every example scores the label frequency; the claims page says so
    beside its value, so two such rows with equal numbers read as what they are."""
    for seed in (0, 1):
        _write(tmp_path, "dense", "1.0", 1.0, 0.90, seed, kind="static")
        _write(tmp_path, "flat", "a", 0.5, 0.50, seed, constant=True)
    views = _views(tmp_path)
    claim = Claim("c", "test", "test", "toy", (Reaches(Select("flat"), 0.6, fails=True),
                                                Reaches(Select("dense"), 0.6)), dataset=DATASET)
    result = report_claims.evaluate(claim, views, tmp_path)
    flat, dense = result.checks[0].items[0].a, result.checks[1].items[0].a
    assert flat.endswith("(every seed outputs 1 on every example: its accuracy is that label's share of the test set)")
    assert "every seed" not in dense
    assert report_checks.output_text(float("nan")) == "an empty output"  # an empty text read back from CSV
    assert report_checks.output_text("x" * 40) == repr("x" * 29 + "…")


def test_the_pareto_figure_rings_uncertain_front_points_apart(tmp_path):
    from bench.report import plots as report_plots

    _write(tmp_path, "dense", "1.0", 1.0, 0.90, 0, kind="static")
    _write(tmp_path, "m", "a", 0.3, 0.60, 0)
    _write(tmp_path, "m", "b", 0.5, 0.80, 0)
    _write(tmp_path, "n", "c", 0.5, 0.801, 0)  # ahead of b by 2 of 2000 examples
    view = _views(tmp_path)[0]
    points = view.points.assign(x=view.points["cost"])
    sure, unsure = report_plots.front_rings(points, True)
    assert set(sure["knob_value"]) == {"a", "1.0"} and set(unsure["knob_value"]) == {"c"}
    assert len(report_plots.front_rings(points, True, by_share=False)[1]) == 0
    assert (tmp_path / "fig.png") == report_plots.plot_task(view, tmp_path / "fig.png")


def _write_two_bases(tmp_path):
    """Two seeds whose dense bases cost 100 and 120 MACs, with points at their own fractions of them."""
    n = 2000
    for seed, base, points in ((0, 100.0, (("a", 0.4, 0.70), ("b", 0.6, 0.80))),
                               (1, 120.0, (("a", 0.3, 0.70), ("b", 0.5, 0.85)))):
        for method, knob, frac, accuracy, kind in (("dense", "1.0", 1.0, 0.90, "static"),
                                                   *(("m", k, f, q, "train") for k, f, q in points)):
            score = (np.arange(n) < round(accuracy * n)).astype(float)
            np.random.default_rng(seed).shuffle(score)
            row = dataclasses.replace(_row(method, kind, knob, frac, float(score.mean()), seed=seed), n_eval=n,
                                      macs_mean=frac * base, macs_dense=base)
            samples = pd.DataFrame({"target": 0, "prediction": (1 - score).astype(int), "score": score,
                                    "macs": frac * base, "index": np.arange(n)})
            results.append(tmp_path, row, f"{method}-{knob}-s{seed}", samples)


def _item_at(tmp_path, budget: float):
    claim = Claim("c", "test", "test", "toy", (Beats(Select("m"), Select("dense"), budgets=(budget,),
                                                     b_is_point=True, margin=-0.2),), dataset=DATASET)
    return report_claims.evaluate(claim, _views(tmp_path), tmp_path).checks[0].items[0]


def test_a_seeds_own_hull_is_read_at_its_own_rows_cost_fractions(tmp_path):
    """Where the dense base's cost differs by seed, a seed's per-seed Δ at a budget reads that seed's hull at
    its rows' own fractions of its own base (seed 1's point at 50% of its base is read at 50%)."""
    _write_two_bases(tmp_path)
    item = _item_at(tmp_path, 0.5)
    assert "s0: -0.1500" in item.seeds  # halfway between 0.70 (40%) and 0.80 (60%)
    assert "s1: -0.0500" in item.seeds  # exactly its 50% point, not a read at the seed means' fractions
    # the pooled Δ is the mean of the per-seed Δs (the hull of the seed means would give -0.10625)
    assert item.delta == pytest.approx(-0.10)


def test_the_hull_column_names_the_seeds_that_reach_a_budget_the_seed_means_do_not(tmp_path):
    """At 30%, only seed 1's own hull is measured (its cheapest point is there; seed 0's is at 40%, and the
    seed means' cheapest at 35%): the line compares no seed pair with both sides, and its hull column says
    which seed's hull reached the budget rather than a bare "not measured"."""
    _write_two_bases(tmp_path)
    item = _item_at(tmp_path, 0.3)
    assert item.seeds == "s0: —, s1: -0.2000"
    assert item.hull == "A: not measured on the seed means' hull (reached by the own hull of s1)"
    assert _item_at(tmp_path, 0.2).hull == "A: not measured"  # no seed reaches it


def test_the_pooled_delta_averages_the_seeds_both_sides_have(tmp_path):
    """A point with seed 0 only, against static models with seeds 0, 1, 2: the pooled Δ is seed 0's Δ (the
    other seeds' weaker static models do not enter it), and it is always the mean of the per-seed Δs."""
    for seed in (0, 1, 2):
        _write(tmp_path, "dense", "small", 0.25, 0.70, seed, kind="static")
        _write(tmp_path, "dense", "1.0", 1.0, 0.86 if seed == 0 else 0.70, seed, kind="static")
    _write(tmp_path, "m", "a", 0.5, 0.80, 0)
    claim = Claim("c", "test", "test", "toy", (Beats(Select("m"), Select("dense")),), dataset=DATASET)
    item = report_claims.evaluate(claim, _views(tmp_path), tmp_path).checks[0].items[0]
    assert item.seeds == "s0: +0.0467"  # 0.80 against 0.70 + (0.25 / 0.75) * 0.16
    assert item.delta == pytest.approx(0.80 - (0.70 + 0.16 / 3))  # not against the three seeds' mean hull
    assert item.lo < item.delta < item.hi
    assert item.b.startswith("0.7533")


def test_the_a_column_averages_only_the_seeds_b_also_has(tmp_path):
    """A on three seeds against a B point on seed 0 only: A, B and Δ are seed 0's, and the other seeds of A
    are not compared (the verdict then cannot hold: those seeds are unchecked)."""
    for seed, accuracy in ((0, 0.80), (1, 0.60), (2, 0.60)):
        _write(tmp_path, "m", "a", 0.5, accuracy, seed)
    _write(tmp_path, "dense", "1.0", 1.0, 0.70, 0, kind="static")
    claim = Claim("c", "test", "test", "toy", (Beats(Select("m"), Select("dense"), b_is_point=True),),
                  dataset=DATASET)
    item = report_claims.evaluate(claim, _views(tmp_path), tmp_path).checks[0].items[0]
    assert item.a.startswith("0.8000") and item.b.startswith("0.7000") and item.delta == pytest.approx(0.10)
    assert item.seeds == "s0: +0.1000, s1: —, s2: —" and item.verdict == "inconclusive"



def test_rows_on_different_test_sets_are_compared_without_a_ci(tmp_path):
    """Paired draws need one test set: a comparison whose rows were scored on different sets gives its Δ but
    no CI, and so no verdict."""
    _write(tmp_path, "m", "a", 0.5, 0.80, 0)
    _write(tmp_path, "dense", "1.0", 1.0, 0.70, 0, kind="static", n=1000)
    claim = Claim("c", "test", "test", "toy", (Beats(Select("m"), Select("dense"), b_is_point=True),),
                  dataset=DATASET)
    item = report_claims.evaluate(claim, _views(tmp_path), tmp_path).checks[0].items[0]
    assert item.delta == pytest.approx(0.10) and math.isnan(item.lo)
    assert item.verdict == "inconclusive" and item.reason.startswith("no CI")


def test_a_claim_without_rows_is_not_tested():
    from bench.report.verdicts import FAILS, HOLDS, UNSURE, UNTESTED, combine

    assert combine([]) == UNTESTED and combine([UNTESTED, UNTESTED], "any") == UNTESTED
    assert combine([HOLDS, UNTESTED]) == UNTESTED and combine([FAILS, UNTESTED]) == FAILS
    assert combine([UNSURE, UNTESTED]) == UNTESTED and combine([HOLDS, UNTESTED], "any") == HOLDS
    assert combine([HOLDS, UNSURE]) == UNSURE and combine([HOLDS, HOLDS]) == HOLDS


def test_claims_of_tasks_without_rows_are_not_tested(tmp_path):
    """With only parity's dense rows, every claim on another task is "not tested", never "inconclusive"."""
    import shutil
    from pathlib import Path

    from bench.report import build as report

    source = Path(__file__).resolve().parents[1] / "results" / "parity" / "dense"
    shutil.copytree(source, tmp_path / "results" / "parity" / "dense")
    report.main(str(tmp_path / "results"), str(tmp_path / "reports"), echo=lambda *a: None)
    text = (tmp_path / "reports" / "claims.md").read_text()
    imagenet = text.split("acm-imagenet-avit-early-exit", 2)[2].split("\n## ", 1)[0]
    assert "**Verdict: not tested** (no rows of task imagenet" in imagenet, imagenet[:500]


def test_a_paper_claim_is_quoted_and_the_harness_own_claims_are_listed_apart(tmp_path):
    for seed in (0, 1):
        _write(tmp_path, "m", "a", 0.5, 0.80, seed)
    views = _views(tmp_path)
    paper = Claim("p", "Someone 2020", "m reaches 0.7", "toy", (Reaches(Select("m"), 0.7),), dataset=DATASET,
                  quote="Our method reaches 70% accuracy.", section="§4.1, Table 2", axis="accuracy against FLOPs")
    own = Claim("h", "harness", "m reaches 0.9", "toy", (Reaches(Select("m"), 0.9),), dataset=DATASET,
                kind="harness")
    results_ = [report_claims.evaluate(c, views, tmp_path) for c in (paper, own)]
    page = report_claims.claims_markdown(results_, str(tmp_path))
    assert f"> {md_escape('Our method reaches 70% accuracy.')}" in page
    assert f"— Someone 2020, {md_escape('§4.1, Table 2')}; stated on accuracy against FLOPs" in page
    summary = "\n".join(report_claims.summary_lines(results_))
    papers, _, harness = summary.partition("no paper makes these claims")
    assert "| p |" in papers and "| h |" not in papers and "| h |" in harness
    assert "**The harness asks** (harness)" in page


def test_every_registered_paper_claim_quotes_its_paper_and_the_harness_own_claims_do_not():
    """A paper's claim carries the paper's sentence (short: at most two sentences, verbatim, with "[…]" for
    what is left out), where it is, and the axis the paper states it on; a question no paper asks is of kind
    "harness" and quotes nothing.  Nothing in a claim points outside the repository."""
    import re

    from bench.claims import HARNESS, PAPER

    found = report_claims.registered_claims()
    assert found
    for claim in found:
        assert claim.kind in (PAPER, HARNESS), claim.id
        if claim.kind == HARNESS:
            assert not claim.quote and not claim.section, claim.id
            assert claim.note, f"{claim.id}: say why no paper makes this claim"
            continue
        assert claim.quote and claim.section and claim.axis, claim.id
        sentences = [s for part in claim.quote.split("[…]") for s in re.split(r"(?<=[.!?])\s+", part.strip()) if s]
        assert len(sentences) <= 2 and len(claim.quote) <= 400, f"{claim.id}: quote one or two sentences"
        for text in (claim.quote, claim.section, claim.axis, claim.note, claim.source):
            assert "/work/" not in text and "shared/papers" not in text, claim.id
