"""Tests of bench.report: frontier math on hand-computed fronts, and one end-to-end report."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench import results
from bench.report import build as report
from bench.errors import UserError

# A front with two dominated points: (3, 0.6) and (2.5, 0.7) are dominated by (2, 0.7).
COST = np.array([1.0, 2.0, 3.0, 4.0, 2.5])
ACC = np.array([0.5, 0.7, 0.6, 0.9, 0.7])


def test_pareto_mask_drops_dominated_points():
    assert report.pareto_mask(COST, ACC, True).tolist() == [True, True, False, True, False]


def test_pareto_mask_keeps_duplicates_and_ignores_nan():
    mask = report.pareto_mask([1.0, 1.0, 2.0, np.nan], [0.5, 0.5, 0.4, 0.9], True)
    assert mask.tolist() == [True, True, False, False]


def test_upper_hull_is_pareto_points_joined_linearly():
    hull_c, hull_q = report.upper_hull(COST, ACC, True)
    assert hull_c.tolist() == [1.0, 2.0, 4.0]
    assert hull_q.tolist() == [0.5, 0.7, 0.9]


def test_upper_hull_continues_flat_to_costliest_dominated_point():
    hull_c, hull_q = report.upper_hull(np.append(COST, 5.0), np.append(ACC, 0.8), True)
    assert hull_c.tolist() == [1.0, 2.0, 4.0, 5.0]
    assert hull_q.tolist() == [0.5, 0.7, 0.9, 0.9]


def test_quality_at_budget_interpolates_and_never_extrapolates():
    q = lambda b: report.quality_at_budget(COST, ACC, b, True)  # noqa: E731
    assert q(3.0) == pytest.approx(0.8)
    assert q(1.5) == pytest.approx(0.6)
    assert q(1.0) == pytest.approx(0.5) and q(4.0) == pytest.approx(0.9)
    assert math.isnan(q(0.5)) and math.isnan(q(4.5))
    flat = report.quality_at_budget(np.append(COST, 5.0), np.append(ACC, 0.8), 4.5, True)
    assert flat == pytest.approx(0.9)


def test_cost_to_reach():
    reach = lambda t: report.cost_to_reach(COST, ACC, t, True)  # noqa: E731
    assert reach(0.8) == pytest.approx(3.0)
    assert reach(0.65) == pytest.approx(1.75)
    assert reach(0.4) == pytest.approx(1.0)  # the cheapest point already reaches it
    assert math.isnan(reach(0.95))


def test_normalized_auc():
    assert report.normalized_auc([0.0, 1.0], [0.0, 1.0], 0.0, 1.0, True) == pytest.approx(0.5)
    assert report.normalized_auc([0.0, 1.0], [0.0, 1.0], 0.5, 1.0, True) == pytest.approx(0.75)
    assert report.normalized_auc(COST, ACC, 1.0, 4.0, True) == pytest.approx(2.2 / 3)
    assert report.normalized_auc(COST, ACC, 1.5, 3.0, True) == pytest.approx(1.075 / 1.5)
    assert report.normalized_auc(COST, ACC, 3.0, 3.0, True) == pytest.approx(0.8)
    assert math.isnan(report.normalized_auc(COST, ACC, 0.5, 3.0, True))  # hull does not cover lo
    assert math.isnan(report.normalized_auc(COST, ACC, 3.0, 2.0, True))  # empty range


def test_hypervolume_of_a_staircase():
    # widths to the next point / the reference cost: 1, 2, 1 -> 1*0.5 + 2*0.7 + 1*0.9
    assert report.hypervolume(COST, ACC, 5.0, 0.0, True) == pytest.approx(2.8)
    assert report.hypervolume(COST, ACC, 3.0, 0.0, True) == pytest.approx(1.2)  # (4, 0.9) is past the ref cost
    assert report.hypervolume(COST, ACC, 5.0, 0.6, True) == pytest.approx(2 * 0.1 + 1 * 0.3)
    assert report.hypervolume(COST, ACC, 0.5, 0.0, True) == 0.0


def test_lower_is_better_mirrors_higher_is_better():
    wer = 1.0 - ACC
    assert report.pareto_mask(COST, wer, False).tolist() == report.pareto_mask(COST, ACC, True).tolist()
    hull_c, hull_wer = report.upper_hull(COST, wer, False)
    assert hull_c.tolist() == [1.0, 2.0, 4.0] and hull_wer == pytest.approx([0.5, 0.3, 0.1])
    assert report.quality_at_budget(COST, wer, 3.0, False) == pytest.approx(0.2)
    assert report.cost_to_reach(COST, wer, 0.2, False) == pytest.approx(3.0)
    assert report.normalized_auc(COST, wer, 1.0, 4.0, False) == pytest.approx(1 - 2.2 / 3)
    assert report.hypervolume(COST, wer, 5.0, 1.0, False) == pytest.approx(2.8)


def test_common_range_and_units():
    assert report.common_range([(0.2, 0.8), (0.3, 0.9)]) == (0.3, 0.8)
    assert report.common_range([(0.1, 0.2), (0.3, 0.9)]) is None
    assert report.common_range([]) is None
    assert report.macs_unit(2.5e9) == ("GMACs", 1e9) and report.macs_unit(3e4) == ("KMACs", 1e3)
    assert report.reference_quality("wer", False) == 1.0 and report.reference_quality("newmetric", True) == 0.0


# --- end to end ------------------------------------------------------------------------------
DENSE_MACS = 1e6
DATASET = "toy-digits (synthetic test set)"


def _row(method, knob_kind, knob_value, frac, quality, seed=0, timestamp="2024-01-02T00:00:00+00:00"):
    macs = frac * DENSE_MACS
    return results.ResultRow(
        method=method, task="toy", dataset=DATASET, knob_name="width" if method == "dense" else "tau",
        knob_value=str(knob_value), knob_kind=knob_kind, seed=seed, variant="", metric="accuracy",
        quality=quality, higher_is_better=True, metric_signature="accuracy", n_eval=1000,
        macs_mean=macs, macs_p10=0.8 * macs, macs_p50=macs, macs_p90=1.2 * macs, macs_dense=DENSE_MACS,
        cost_pct_dense=100 * frac, macs_counted_mean=macs, cost_check="agree", uncounted_ops="",
        latency_b1_ms=1.0 + frac, latency_b1_iqr_ms=0.01, throughput_per_s=1000.0, throughput_batch=64,
        timing_threads=1, dense_latency_b1_ms=2.0, dense_throughput_per_s=900.0,
        latency_b1_ratio=(1.0 + frac) / 2.0, throughput_ratio=1000.0 / 900.0, timing_rounds=3, params=12345,
        train_budget="steps=10", train_time_s=1.0, run_id="r", config_hash="abcdef0123456789", command="test",
        git_sha="0123456789abcdef", git_dirty=False, versions="", device="cpu", timestamp=timestamp,
    )


def _toy_rows() -> list[results.ResultRow]:
    rows = [
        _row("dense", "static", 0.5, 0.5, 0.80),
        _row("dense", "static", 1.0, 1.0, 0.90),
        _row("acm", "train", 0.1, 0.3, 0.60),
        _row("acm", "train", 0.01, 0.5, 0.86),
        _row("acm", "train", 0.001, 0.9, 0.91),
        _row("acm", "train", 0.001, 0.9, 0.20, timestamp="2024-01-01T00:00:00+00:00"),  # superseded re-run
    ]
    for frac, quality in [(0.2, 0.70), (0.4, 0.85), (0.6, 0.89), (0.8, 0.88)]:
        rows += [_row("act", "eval", frac, frac, quality - 0.01, seed=0),
                 _row("act", "eval", frac, frac, quality + 0.01, seed=1)]
    return rows


def _write_results(results_dir: Path) -> None:
    for i, row in enumerate(_toy_rows()):
        results.append(results_dir, row, f"row{i:02d}")


def _section_line(markdown: str, method: str) -> list[str]:
    line = next(l for l in markdown.splitlines() if l.startswith(f"| {method} | tau") or l.startswith(f"| {method} | width"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_report_end_to_end(tmp_path):
    _write_results(tmp_path / "results")
    written = report.main(str(tmp_path / "results"), str(tmp_path / "reports"))
    png = tmp_path / "reports" / "toy_pareto.png"
    board = tmp_path / "reports" / "leaderboard.md"
    assert str(png) in written and str(board) in written
    assert (tmp_path / "reports" / "leaderboard.html").exists() and (tmp_path / "reports" / "toy_latency.png").exists()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    md = board.read_text()
    assert DATASET in md and "python -m bench report" in md
    assert "30.0% – 80.0%" in md  # common range of the swept methods act [20%, 80%] and acm [30%, 90%]
    # method, knob, kind, #points, #seeds, Pareto, q@25, q@50, q@75, q@100, reach, auc, hv
    act, acm, dense = _section_line(md, "act"), _section_line(md, "acm"), _section_line(md, "dense")
    assert act[2:10] == ["eval", "4", "2", "yes (3/4)", "0.7375", "0.8700", "0.8900", "—"]
    assert act[10] == "—"  # never reaches 0.90 - 0.005
    assert acm[2:6] == ["train", "3", "1", "yes (2/3)"] and acm[10] == "78.0%"
    assert acm[9] == "—" and float(acm[8]) == pytest.approx(0.86 + 0.25 / 0.4 * 0.05, abs=1e-4)  # at 75%
    assert dense[5] == "no"
    # the superseded acm row (quality 0.20) is gone; every remaining row is listed once
    all_rows = md.split("### All rows", 1)[1]
    assert "0.2000" not in md and all_rows.count("| act | tau=") == 8


def test_cost_to_reach_dense_uses_half_a_point_of_the_metrics_scale(tmp_path):
    """δ is half a point on the metric's scale: 0.005 of a rate, 0.5 BLEU (sacreBLEU's 0-100 scale).  The toy
    rows rescaled to BLEU reach dense − δ at the same cost as the accuracy rows (78%: the hull from 0.86 at 50%
    to 0.91 at 90% crosses 0.895); with δ = 0.005 BLEU they would need 82%."""
    import dataclasses

    assert report.reach_delta("accuracy") == report.reach_delta("WER") == 0.005 and report.reach_delta("bleu") == 0.5
    for i, row in enumerate(_toy_rows()):
        results.append(tmp_path / "bleu", dataclasses.replace(row, metric="bleu", quality=100 * row.quality),
                       f"row{i:02d}")
    report.main(str(tmp_path / "bleu"), str(tmp_path / "reports"))
    md = (tmp_path / "reports" / "leaderboard.md").read_text()
    assert _section_line(md, "acm")[10] == "78.0%"
    assert "bleu = 90.0000; target = dense − δ (δ = 0.5)" in md
    assert "0.005 for rates in [0, 1] (0.5 pp of accuracy or WER), 0.5 for bleu (0-100 scale)" in md  # the header


def test_status_page_counts_points_and_seeds_per_method(tmp_path):
    _write_results(tmp_path / "results")
    written = report.main(str(tmp_path / "results"), str(tmp_path / "reports"))
    status = tmp_path / "reports" / "status.md"
    assert str(status) in written and (tmp_path / "reports" / "status.html").exists()
    lines = {line.split("|")[3].strip(): line.split("|")[4].strip() for line in status.read_text().splitlines()
             if line.startswith("| toy |")}
    assert lines["act"] == "4 points · seeds 0, 1 (protocol 2)"
    assert lines["acm"] == "3 points · seed 0 (protocol 2)"  # the superseded re-run is not a fourth point
    assert lines["dense"] == "2 points · seed 0 (protocol 2)"
    assert list(lines)[0] == "dense"


def test_report_removes_the_files_of_sections_whose_rows_are_gone(tmp_path):
    import dataclasses

    _write_results(tmp_path / "results")
    other = dataclasses.replace(_row("dense", "static", 1.0, 1.0, 0.5), dataset="another toy set")
    results.append(tmp_path / "results", other, "other00")
    reports = tmp_path / "reports"
    first = report.main(str(tmp_path / "results"), str(reports))
    assert len([p for p in first if p.endswith("_pareto.png")]) == 2  # two sections
    (reports / "my_notes.txt").write_text("not the report's")
    for path in (tmp_path / "results" / "toy" / "dense").glob("other00*"):
        path.unlink()
    said = []
    second = report.main(str(tmp_path / "results"), str(reports), echo=said.append)
    gone = sorted(set(first) - set(second))
    assert len([p for p in second if p.endswith("_pareto.png")]) == 1
    assert gone and not any(Path(p).exists() for p in gone)  # the section's files went with its rows
    assert all(Path(p).exists() for p in second) and (reports / "my_notes.txt").exists()
    assert sum(line.startswith("removed ") for line in said) == len(gone)
    # a report from another results directory into the same reports directory removes nothing
    _write_results(tmp_path / "other")
    kept = sorted(p.name for p in reports.iterdir())
    report.main(str(tmp_path / "other"), str(reports))
    assert set(kept) <= {p.name for p in reports.iterdir()}


def test_report_without_rows_raises(tmp_path):
    with pytest.raises(UserError, match="no result rows"):
        report.main(str(tmp_path / "results"), str(tmp_path / "reports"))


def test_latest_rows_keeps_latest_timestamp():
    frame = pd.DataFrame([results.dataclasses.asdict(_row("act", "eval", 0.2, 0.2, q, timestamp=t))
                          for q, t in [(0.1, "2024-03-01T00:00:00+00:00"), (0.2, "2024-01-01T00:00:00+00:00")]])
    assert report.latest_rows(frame)["quality"].tolist() == [0.1]


def test_curve_labels_keep_only_differing_variant_parts():
    from bench.report.views import _distinct_parts

    short = _distinct_parts(["N=4;alpha=0.1;T=0.8", "N=4;alpha=1;T=0.8"])
    assert short == {"N=4;alpha=0.1;T=0.8": "alpha=0.1", "N=4;alpha=1;T=0.8": "alpha=1"}
    assert _distinct_parts(["same"]) == {"same": "same"}


def test_curve_labels_name_the_recipe_once():
    """A method under two recipes: the recipe appears once per label (from the row's recipe column), not also
    as a differing variant part; another differing part still shows."""
    import pandas as pd

    from bench.report.views import _curve_labels

    rows = pd.DataFrame({"method": ["acm", "acm", "acm", "dense"], "setting": ["", "", "", ""],
                         "variant": ["alpha=1;recipe=", "alpha=1;recipe=paper", "alpha=0.1;recipe=paper", ""],
                         "knob_name": ["beta"] * 3 + ["width"], "recipe": ["matched", "paper", "paper", "matched"]})
    assert _curve_labels(rows) == ["acm [alpha=1] [recipe=matched]", "acm [alpha=1] [recipe=paper]",
                                   "acm [alpha=0.1] [recipe=paper]", "dense"]
    one_recipe = rows[rows["recipe"] == "paper"].reset_index(drop=True)
    assert _curve_labels(one_recipe) == ["acm [alpha=1]", "acm [alpha=0.1]"]
    named = rows.assign(setting=["", "recipe=paper", "recipe=paper", ""])  # a setting that names the recipe
    assert _curve_labels(named)[1] == "acm [alpha=1] [recipe=paper]"
    parts = rows.assign(setting=["caps=[];recipe=", "caps=[];recipe=paper", "caps=[];recipe=paper", ""])
    assert _curve_labels(parts)[:2] == ["acm [alpha=1] [caps=[]] [recipe=matched]",
                                        "acm [alpha=1] [caps=[]] [recipe=paper]"]


def test_timing_view_never_mixes_thread_counts(tmp_path):
    rows = [_row("dense", "static", 1.0, 1.0, 0.90), _row("acm", "train", 0.1, 0.5, 0.85),
            _row("acm", "train", 0.2, 0.6, 0.87)]
    other = _row("acm", "train", 0.3, 0.7, 0.88)
    other.timing_threads, other.latency_b1_ratio = 4, 9.0
    for i, row in enumerate(rows + [other]):
        results.append(tmp_path, row, f"t{i}")
    (view,) = report.task_views(results.load(tmp_path))
    timed, label = report.timing_view(view)
    assert set(timed.rows["timing_threads"]) == {1}
    assert len(timed.rows) == 3 and "1 thread(s), load unknown; 3 of 4 rows drawn" in label
    assert "left out: 1 timed on cpu, 4 thread(s)" in label  # what the figure drops is said, never silent
    assert 9.0 not in set(timed.points["latency_ratio"])
    assert timed.dense["latency_ratio"] == pytest.approx(1.0)  # (1 + 1.0) / 2.0 from _row
    header, table = report.rows_table(view)
    assert "latency b1 ×dense" in header and "throughput ×dense" in header


def test_rows_without_timing_ratios_still_report(tmp_path):
    """Rows of schema version 1 (no ratio columns) load, aggregate and give no latency-ratio figure."""
    frame = pd.DataFrame([vars(_row("dense", "static", 1.0, 1.0, 0.9))]).drop(
        columns=["latency_b1_ratio", "throughput_ratio", "dense_latency_b1_ms", "dense_throughput_per_s",
                 "timing_rounds", "cost_check"])
    (view,) = report.task_views(frame)
    assert report.timing_view(view) is None
    assert math.isnan(view.points["latency_ratio"].iloc[0])


def test_dense_rows_with_another_base_budget_are_their_own_variant(tmp_path):
    """An equal-total-budget control (``imagenet.train_steps=...``) must never replace the dense base row
    in reports: rows are kept per (…, variant, knob value, seed) and the control's variant names the
    changed budget."""
    from bench import config, runner

    def variant(*overrides: str) -> str:
        cfg = config.compose(["method=dense", "task=parity", f"cache_dir={tmp_path}", *overrides])
        _, _, method = runner.build(cfg, "dense", "parity")
        return method.variant()

    assert variant() == ""
    assert variant("parity.train_steps=7") == "train_steps=7 (default 20000)"
    assert variant("parity.train_steps=7", "parity.lr=0.5") == "train_steps=7 (default 20000);lr=0.5 (default 0.001)"


def test_rows_of_two_protocol_versions_never_share_a_curve(tmp_path):
    """A row without the ``protocol`` column was trained under protocol 1; the report keeps its points on
    their own curve, apart from the same method's protocol-2 points."""
    rows = [_row("dense", "static", 1.0, 1.0, 0.90), _row("acm", "train", 0.1, 0.5, 0.85),
            _row("acm", "train", 0.2, 0.6, 0.87)]
    rows[1].protocol = 1
    for i, row in enumerate(rows):
        results.append(tmp_path, row, f"p{i}")
    (view,) = report.task_views(results.load(tmp_path))
    acm = view.points[view.points["method"] == "acm"]
    assert sorted(acm["curve"]) == ["acm [protocol 1]", "acm [protocol 2]"]
    assert set(view.points.loc[view.points["method"] == "dense", "curve"]) == {"dense"}


def test_variants_of_one_method_look_different_in_the_figure_and_its_legend(tmp_path, monkeypatch):
    """Five variants of one swept method (one of them a single point) and a static curve: every legend entry
    has its own (marker, line style), a line is shown only where the figure draws one, and a curve keeps its
    look in the latency figure."""
    import dataclasses

    from bench.report import plots as report_plots

    rows = [_row("dense", "static", 1.0, 1.0, 0.90), _row("dense", "static", 0.5, 0.5, 0.80)]
    for v in range(5):
        fracs = (0.4,) if v == 4 else (0.3, 0.6)
        rows += [dataclasses.replace(_row("acm", "train", f, f, 0.7 + 0.1 * f + 0.01 * v), variant=f"beta={v}")
                 for f in fracs]
    for i, row in enumerate(rows):
        results.append(tmp_path / "results", row, f"row{i:02d}")
    drawn = {}
    monkeypatch.setattr(report_plots, "save_figure", lambda fig, path: drawn.__setitem__(Path(path).name, fig))
    report.main(str(tmp_path / "results"), str(tmp_path / "reports"))

    def legend(name):
        handles, labels = drawn[name].axes[0].get_legend_handles_labels()
        return {label: (h.get_marker(), h.get_linestyle()) for h, label in zip(handles, labels)
                if label.startswith("acm")}

    cost = legend("toy_pareto.png")
    assert len(cost) == 5 and len({marker for marker, _ in cost.values()}) == 5
    single = next(label for label in cost if "beta=4" in label)
    assert cost[single][1] == "None" and all(style != "None" for label, (_, style) in cost.items() if label != single)
    assert legend("toy_latency.png") == cost
    assert report_plots.variant_style(0, static=True)[0] == "s"
    looks = {report_plots.variant_style(n, static=False) for n in range(8)}
    assert len(looks) == 8


def test_one_recipe_draws_with_the_same_marker_for_every_method():
    """A method whose paper-recipe curve comes first in the view still numbers its matched curve 0: with one
    curve per recipe, the matched rows of every method share one marker, the paper rows another."""
    import types

    import pandas as pd

    from bench.report import plots as report_plots

    points = pd.DataFrame({"curve": ["moe [recipe=paper]", "moe [recipe=matched]", "acm [recipe=matched]",
                                     "acm [recipe=paper]", "acm [x] [recipe=paper]"],
                           "method": ["moe", "moe", "acm", "acm", "acm"],
                           "recipe": ["paper", "matched", "matched", "paper", "paper"]})
    numbers = report_plots.variant_numbers(types.SimpleNamespace(points=points))
    assert numbers == {"moe [recipe=matched]": 0, "moe [recipe=paper]": 1, "acm [recipe=matched]": 0,
                       "acm [recipe=paper]": 1, "acm [x] [recipe=paper]": 2}


def test_rows_table_marks_dirty_and_unknown_git_state(tmp_path):
    """A row's git sha carries "*" when tracked code differed from the commit and "?" when git could not
    tell (an empty git_dirty after a round trip through the row file); a clean row carries nothing."""
    rows = [_row("dense", "static", 1.0, 1.0, 0.90), _row("acm", "train", 0.1, 0.5, 0.85),
            _row("acm", "train", 0.2, 0.6, 0.87)]
    rows[1].git_dirty, rows[2].git_dirty = True, None
    for i, row in enumerate(rows):
        results.append(tmp_path, row, f"t{i}")
    (view,) = report.task_views(results.load(tmp_path))
    header, table = report.rows_table(view)
    by_knob = {line[1]: line[header.index("git sha")] for line in table}
    assert by_knob == {"width=1": "0123456", "tau=0.1": "0123456*", "tau=0.2": "0123456?"}


def test_section_headings_name_the_dataset_and_its_evaluation_set_in_full_words():
    """Sub-headings use a short dataset tag: never cut mid-word, and two sections of one task that differ in
    their evaluation set get different headings."""
    synthetic = "espeak-ng English (trans-de-en sentences), train 12888 utterances; eval espeak-ng held-out: 987 utterances"
    real = "espeak-ng English (trans-de-en sentences), train 12888 utterances; eval real recordings: 10 utterances"
    assert report.dataset_tag(synthetic) == "espeak-ng English, eval espeak-ng held-out"
    assert report.dataset_tag(real) == "espeak-ng English, eval real recordings"
    assert report.dataset_tag("fashion-mnist (debian dataset-fashion-mnist, 60000/10000)") == "fashion-mnist"


def test_a_section_without_a_common_cost_range_names_the_ranges_that_do_not_meet():
    rows = [_row("cheap", "eval", k, f, 0.8) for k, f in (("a", 0.2), ("b", 0.4))]
    rows += [_row("costly", "eval", k, f, 0.8) for k, f in (("a", 1.1), ("b", 1.3))]
    rows.append(_row("dense", "static", "1.0", 1.0, 0.9))
    view = report.task_views(pd.DataFrame([vars(r) for r in rows]))[0]
    assert view.common is None
    assert report.disjoint_ranges(view) == "cheap (20.0% – 40.0%) ends below where costly (110.0% – 130.0%) starts"
    view = report.task_views(pd.DataFrame([vars(rows[-1])]))[0]
    assert report.disjoint_ranges(view) == "no swept methods"


def test_cost_fractions_are_against_each_seeds_own_dense_base():
    """Where the dense base's cost differs by seed (decoding lengths), each row is a fraction of its own
    seed's base, so the base sits at exactly 100% and a method at half its own base's cost at 50%."""
    import dataclasses

    rows = []
    for seed, base in ((0, 100.0), (1, 120.0)):
        dense = dataclasses.replace(_row("dense", "static", "1.0", 1.0, 0.9, seed=seed), macs_mean=base, macs_dense=base)
        half = dataclasses.replace(_row("m", "eval", "a", 0.5, 0.8, seed=seed), macs_mean=base / 2, macs_dense=base)
        rows += [dense, half]
    rows.append(dataclasses.replace(_row("n", "eval", "a", 0.5, 0.8, seed=1), macs_mean=60.0, macs_dense=120.0))
    (view,) = report.task_views(pd.DataFrame([vars(r) for r in rows]))
    frac = dict(zip(view.points["method"], view.points["frac"]))
    assert frac == {"dense": pytest.approx(1.0), "m": pytest.approx(0.5), "n": pytest.approx(0.5)}
    header, table = report.rows_table(view)
    assert {line[header.index("% dense")] for line in table} == {"100.0%", "50.0%"}


def test_the_figures_percent_axis_names_its_base_when_the_seeds_bases_differ():
    """The top axis of the cost figure has one scale (the bases' median); it says so when the seeds' bases
    differ, and stays plain when they are one cost."""
    import dataclasses

    from bench.report import plots as report_plots

    def view(base_costs):
        rows = [dataclasses.replace(_row("dense", "static", "1.0", 1.0, 0.9, seed=seed), macs_mean=base, macs_dense=base)
                for seed, base in enumerate(base_costs)]
        return report.task_views(pd.DataFrame([vars(r) for r in rows]))[0]

    assert report_plots.percent_axis_label(view([100.0, 100.0])) == "% of dense cost"
    assert report_plots.percent_axis_label(view([100.0, 120.0])) == "% of dense cost (of the bases' median cost)"
