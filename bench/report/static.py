"""Every method point against the static models of its section, at the point's own cost.

The question a reader of a Pareto figure asks first: does this conditional-computation point beat simply
running a dense model of another size at the same cost?  The static models are the section's points whose
knob kind is "static" and that have no variant (the dense base and its other widths and depths, trained
with the task's defaults; a dense run with another budget or learning rate is a variant and is left out).
Their hull (Pareto points joined by straight lines, as everywhere in the report; a point on a segment is
reached by running its two end models on shares of the inputs) is read at each method point's cost and
compared with the point under the claims' rules (:func:`bench.report.checks.beats`, margin 0): paired
bootstrap over test examples, and a verdict that any seed contradicts, or that a seed cannot be checked
on, is inconclusive.  The hull is never extrapolated, so a point cheaper than the smallest static model
or costlier than the largest is not compared; the tables count those.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.claims import Beats, Select
from bench.report.checks import beats, select_points
from bench.report.page import NA, markdown_table, md_escape
from bench.report.verdicts import FAILS, HOLDS, CheckResult, Item, ci_text
from bench.report.views import TaskView

STATIC = "static"
STATIC_MODELS = Select(method="", kind=STATIC, variant_is="", label="static models")
WORDS = {HOLDS: "better", FAILS: "worse"}  # anything else: inconclusive
RULE = ("Δ = the point's quality − the static models' hull at the point's cost (the metric's direction "
        "applied: Δ > 0 is better), paired bootstrap over test examples; **better** / **worse** when the 95% CI "
        "excludes 0 and every seed's own Δ (its point against its own static models) agrees, **inconclusive** "
        "otherwise. A verdict says the sign is established, not that it is large: read Δ. The hull joins "
        "neighbouring Pareto points (the \"read between\" column names them); where the static front is not "
        "concave, a mix of two non-neighbouring sizes would do better than that line. Never extrapolated: points "
        "outside the static models' cost range are counted, not compared.")


@dataclass
class StaticComparison:
    curve: str
    check: CheckResult

    @property
    def compared(self) -> list[Item]:
        return [it for it in self.check.items if it.hull != "B: not measured"]

    @property
    def outside(self) -> int:
        """The curve's points outside the static models' cost range (not compared)."""
        return len(self.check.items) - len(self.compared)

    def count(self, verdict_word: str) -> int:
        return sum(1 for it in self.compared if word(it.verdict) == verdict_word)

    def delta_range(self) -> str:
        deltas = [it.delta for it in self.compared if math.isfinite(it.delta)]
        return f"{min(deltas):+.4f} … {max(deltas):+.4f}" if deltas else NA


def word(verdict: str) -> str:
    return WORDS.get(verdict, "inconclusive")


def static_points(view: TaskView) -> pd.DataFrame:
    return select_points(view, STATIC_MODELS)


def compare(view: TaskView, results_dir: str | Path) -> list[StaticComparison]:
    """One comparison per non-static curve of the section; [] when the section has no static models or was
    not bootstrapped (``view.unc`` unset: the report always sets it)."""
    points, static = view.points, static_points(view)
    if view.unc is None or static.empty:
        return []
    out = []
    for curve, pts in points[points["knob_kind"] != STATIC].groupby("curve", sort=False):
        check = beats(view, Beats(a=Select(method=str(pts["method"].iloc[0]), curve=str(curve)), b=STATIC_MODELS,
                                  title=f"{curve} against the static models"), results_dir)
        out.append(StaticComparison(str(curve), check))
    return out


def summary_table(comparisons: list[StaticComparison]) -> str:
    """One line per curve: points compared, how many are better / worse / inconclusive, the range of Δ, and
    the points outside the static range."""
    rows = [[c.curve, str(len(c.compared)), str(c.count("better")), str(c.count("worse")),
             str(c.count("inconclusive")), c.delta_range(), str(c.outside)] for c in comparisons]
    return markdown_table(["method", "points compared", "better", "worse", "inconclusive", "Δ from … to",
                           "outside the static range"], rows)


def section_lines(view: TaskView, comparisons: list[StaticComparison], tag: str) -> list[str]:
    """The leaderboard's "Against the static models" subsection of one section ([] without comparisons)."""
    if not comparisons:
        return []
    static = static_points(view)
    lo, hi = float(static["frac"].min()), float(static["frac"].max())
    span = f"{lo:.1%}" if hi - lo < 5e-4 else f"{lo:.1%} – {hi:.1%}"
    md = ["", f"### Against the static models: {md_escape(view.task)}, {md_escape(tag)}", ""]
    if not any(c.compared for c in comparisons):
        costs = pd.concat([view.points.loc[view.points["curve"] == c.curve, "frac"] for c in comparisons])
        sides = [side for side, present in (("cheaper", (costs < lo).any()), ("costlier", (costs > hi).any()))
                 if present]
        return md + [f"No method point lies within the static models' cost range ({span} of dense cost), so none "
                     "is compared: the static hull is never extrapolated. Static sizes (`method=dense` with "
                     f"`dense.width` / `dense.depth`) {' and '.join(sides)} than that, at the methods' costs, would "
                     "make the comparison."]
    md += [f"Static models of this section span {span} of dense cost. {RULE}", ""]
    md += [summary_table(comparisons)]
    table = []
    for c in comparisons:
        for it in c.compared:
            table.append([it.where, it.a, it.b, it.hull.removeprefix("B: ") or NA,
                          ci_text(it.delta, it.lo, it.hi, ".4f", sign=True), it.seeds or NA,
                          word(it.verdict) + (f" ({it.reason})" if it.reason else "")])
    md += ["", markdown_table(["point", f"{view.metric} [95% CI]", "static hull at its cost [95% CI]",
                               "static hull read between", "Δ [95% CI]", "per seed Δ", "verdict"], table)]
    return md


def claim_lines(comparisons: list[StaticComparison], curves: set[str]) -> list[str]:
    """For a claim's section on the claims page: the leaderboard's summary rows for the curves the claim
    compares (a claim between two methods can hold while both lose to a static model of equal cost); []
    when none of them has a comparison."""
    mine = [c for c in comparisons if c.curve in curves]
    if not mine:
        return []
    if not any(c.compared for c in mine):
        return ["None of these methods' points lies within the cost range of the section's static models, so "
                "none is compared with them (the static hull is never extrapolated; the leaderboard's section "
                "says which static sizes would make the comparison)."]
    return ["The same methods against the section's static models (the leaderboard's \"Against the static "
            "models\": each point against the static hull at its own cost, same rules; Δ > 0 = better than "
            "the static models):", "", summary_table(mine)]

