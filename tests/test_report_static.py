"""The leaderboard's "Against the static models" tables (bench.report.static)."""

from __future__ import annotations

import dataclasses

import pytest

from bench import results
from bench.report import build as report
from bench.report import static as report_static
from tests.test_report import _row
from tests.test_stats_claims import _views, _write, _write_wer


def _section(tmp_path):
    for seed in (0, 1):
        _write(tmp_path, "dense", "0.5", 0.5, 0.80, seed, kind="static")
        _write(tmp_path, "dense", "1.0", 1.0, 0.90, seed, kind="static")
        _write(tmp_path, "m", "above", 0.75, 0.95, seed)  # the static hull at 75% is 0.85
        _write(tmp_path, "m", "below", 0.6, 0.70, seed)  # ... and at 60% 0.82
        _write(tmp_path, "m", "cheap", 0.3, 0.75, seed)  # cheaper than the smallest static model
        _write(tmp_path, "m", "dear", 1.2, 0.99, seed)  # costlier than the largest
    _write(tmp_path, "split", "a", 0.75, 0.95, 0)  # seed 0 far above the hull, seed 1 below it
    _write(tmp_path, "split", "a", 0.75, 0.80, 1)
    return _views(tmp_path)[0]


def test_each_method_point_is_judged_against_the_static_hull_at_its_own_cost(tmp_path):
    view = _section(tmp_path)
    comparisons = {c.curve: c for c in report_static.compare(view, tmp_path)}
    assert set(comparisons) == {"m", "split"}  # the static models are not compared with themselves
    m = comparisons["m"]
    verdicts = {it.where: report_static.word(it.verdict) for it in m.compared}
    assert verdicts == {"m tau=above (75.0%)": "better", "m tau=below (60.0%)": "worse"}
    assert m.outside == 2 and (m.count("better"), m.count("worse"), m.count("inconclusive")) == (1, 1, 0)
    above = next(it for it in m.compared if "above" in it.where)
    assert above.delta == pytest.approx(0.95 - 0.85) and above.lo > 0
    assert above.hull == "B: width=0.5 (50.0%) to width=1 (100.0%)"
    assert m.delta_range() == "-0.1200 … +0.1000"
    (split,) = comparisons["split"].compared
    # the seed mean (0.875) is above the hull (0.85), but seed 1's own Δ is below 0
    assert split.delta > 0 and report_static.word(split.verdict) == "inconclusive" and split.reason == "seeds disagree"


def test_a_seed_without_its_own_static_models_at_that_cost_leaves_the_point_inconclusive(tmp_path):
    """Seed 1 has no 50% static model, so its hull does not reach 75%, and seed 2 has no static model at all:
    the point is not established for them, however clear seed 0 and the pooled CI are."""
    _write(tmp_path, "dense", "0.5", 0.5, 0.80, 0, kind="static")
    for seed in (0, 1, 2):
        if seed < 2:
            _write(tmp_path, "dense", "1.0", 1.0, 0.90, seed, kind="static")
        _write(tmp_path, "m", "above", 0.75, 0.95, seed)
    (comparison,) = report_static.compare(_views(tmp_path)[0], tmp_path)
    (line,) = comparison.compared
    assert line.lo > 0  # the pooled CI alone would say "better"
    assert report_static.word(line.verdict) == "inconclusive"
    assert line.reason.startswith("s1, s2 not compared") and line.seeds == "s0: +0.1000, s1: —, s2: —"


def test_dense_runs_of_another_configuration_are_not_static_models(tmp_path):
    """A dense variant (another budget, say) is neither a static model nor a compared method."""
    for seed in (0, 1):
        _write(tmp_path, "dense", "0.5", 0.5, 0.80, seed, kind="static")
        _write(tmp_path, "dense", "1.0", 1.0, 0.90, seed, kind="static")
        _write(tmp_path, "m", "a", 0.75, 0.88, seed)
    row = dataclasses.replace(_row("dense", "static", "0.7", 0.7, 0.99), variant="train_steps=9999")
    results.append(tmp_path, row, "dense-variant")  # would lift the hull above m if it counted
    (comparison,) = report_static.compare(_views(tmp_path)[0], tmp_path)
    (line,) = comparison.compared
    assert line.hull == "B: width=0.5 (50.0%) to width=1 (100.0%)" and report_static.word(line.verdict) == "better"


def test_a_lower_is_better_metric_is_judged_in_its_direction(tmp_path):
    _write_wer(tmp_path, "dense", "0.5", 0.5, 0.40, kind="static")
    _write_wer(tmp_path, "dense", "1.0", 1.0, 0.30, kind="static")
    _write_wer(tmp_path, "m", "low", 0.75, 0.20)  # the static hull at 75% is 0.35
    _write_wer(tmp_path, "m", "high", 0.75 + 1e-3, 0.50)
    (comparison,) = report_static.compare(_views(tmp_path)[0], tmp_path)
    verdicts = {it.where.split()[1]: (report_static.word(it.verdict), round(it.delta, 3)) for it in comparison.compared}
    assert verdicts == {"tau=low": ("better", 0.15), "tau=high": ("worse", -0.15)}


def test_the_leaderboard_shows_the_comparison_after_each_sections_summary(tmp_path):
    _section(tmp_path / "results")
    report.main(str(tmp_path / "results"), str(tmp_path / "reports"))
    md = (tmp_path / "reports" / "leaderboard.md").read_text()
    table = md.split("### Against the static models", 1)[1].split("### Points", 1)[0]
    assert "Static models of this section span 50.0% – 100.0% of dense cost." in table
    # method | points compared | better | worse | inconclusive | Δ from … to | outside the static range
    assert "| m | 2 | 1 | 1 | 0 | -0.1200 … +0.1000 | 2 |" in table
    assert "| split | 1 | 0 | 0 | 1 | +0.0250 … +0.0250 | 0 |" in table
    assert "| m tau=above (75.0%) |" in table and "inconclusive (seeds disagree)" in table
    assert md.index("### Summary") < md.index("### Against the static models") < md.index("### Points")


def test_a_section_whose_methods_lie_outside_the_static_range_says_so_in_one_line(tmp_path):
    _write(tmp_path, "dense", "1.0", 1.0, 0.90, 0, kind="static")
    _write(tmp_path, "m", "a", 0.5, 0.8, 0)
    view = _views(tmp_path)[0]
    (comparison,) = report_static.compare(view, tmp_path)
    assert comparison.outside == 1 and comparison.compared == []
    lines = report_static.section_lines(view, [comparison], "toy")
    assert lines[-1].startswith("No method point lies within the static models' cost range (100.0% of dense cost)")
    assert "Static sizes (`method=dense` with `dense.width` / `dense.depth`) cheaper than that" in lines[-1]
    assert not any(line.startswith("|") for line in lines)  # no table of zeros


def test_a_section_without_static_models_has_no_such_table(tmp_path):
    _write(tmp_path, "m", "a", 0.5, 0.8, 0)
    _write(tmp_path, "m", "b", 0.7, 0.9, 0)
    assert report_static.compare(_views(tmp_path)[0], tmp_path) == []


def test_a_seed_is_compared_at_its_own_rows_cost(tmp_path):
    """The point's seeds cost 60% and 90% (mean 75%); seed 1 is judged against the static hull at 90% (0.88),
    where its 0.87 is below, not at the mean's 75% (0.85), where it would look above."""
    for seed, frac, accuracy in ((0, 0.6, 0.95), (1, 0.9, 0.87)):
        _write(tmp_path, "dense", "0.5", 0.5, 0.80, seed, kind="static")
        _write(tmp_path, "dense", "1.0", 1.0, 0.90, seed, kind="static")
        _write(tmp_path, "m", "a", frac, accuracy, seed)
    (comparison,) = report_static.compare(_views(tmp_path)[0], tmp_path)
    (line,) = comparison.compared
    assert line.seeds == "s0: +0.1300, s1: -0.0100"
    assert line.lo > 0 and report_static.word(line.verdict) == "inconclusive" and line.reason == "seeds disagree"


def test_a_claims_section_shows_its_methods_against_the_static_models(tmp_path):
    """A claim between two methods can hold while both lose to a static model of equal cost: the claims page
    gives, beside the claim, the static comparison's summary of the methods the claim compares."""
    from bench.report import claims as report_claims
    from bench.claims import Beats, Claim, Select
    from tests.test_stats_claims import DATASET

    view = _section(tmp_path)
    claim = Claim("c", "test", "test", "toy", (Beats(Select("m"), Select("dense", kind="static"), budgets=(0.75,)),),
                  dataset=DATASET)
    assert report_claims.claim_curves(claim, view) == {"m"}  # the static models are not the claim's curves
    # a selector's filters count, not only its method: one that matches no row of "m" selects no curve
    narrowed = Claim("n", "test", "test", "toy", (Beats(Select("m", variant_is="other"), Select("split")),),
                     dataset=DATASET)
    assert report_claims.claim_curves(narrowed, view) == {"split"}
    lines = report_static.claim_lines(report_static.compare(view, tmp_path), {"m"})
    assert "| m | 2 | 1 | 1 | 0 | -0.1200 … +0.1000 | 2 |" in lines[-1] and "split" not in lines[-1]
    assert report_static.claim_lines(report_static.compare(view, tmp_path), {"other"}) == []
    result = report_claims.evaluate(claim, [view], tmp_path)
    page = report_claims.claims_markdown([result], str(tmp_path), {"c": lines})
    section = page.split("## c", 1)[1]
    assert section.index("against the section's static models") < section.index("### c, check 1")


def test_a_claim_whose_methods_lie_outside_the_static_range_gets_one_line(tmp_path):
    for seed in (0, 1):
        _write(tmp_path, "dense", "1.0", 1.0, 0.90, seed, kind="static")
        _write(tmp_path, "m", "a", 0.5, 0.80, seed)
    view = _views(tmp_path)[0]
    (line,) = report_static.claim_lines(report_static.compare(view, tmp_path), {"m"})
    assert line.startswith("None of these methods' points lies within the cost range")
