"""Every method point against the static models of its section, at the point's own cost.

The question a reader of a Pareto figure asks first: does this conditional-computation point beat simply
running a smaller dense model of the same cost?  The static models are the section's points whose knob
kind is "static" (the dense base and its narrower or shallower sizes).  Their hull (Pareto points joined
by straight lines; a point on a segment is reached by running its two end models on shares of the
inputs) is read at each method point's cost and compared with the point, with the claims' rules
(:func:`bench.report_claims._beats`, margin 0): paired bootstrap over test examples, and a verdict that
any seed contradicts is inconclusive.  The hull is never extrapolated, so a point cheaper than the
smallest static model or costlier than the largest is not compared; the table counts those.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.claims import Beats, Select
from bench.report import NA, TaskView, markdown_table, md_escape
from bench.report_claims import FAILS, HOLDS, CheckResult, _beats, _ci_text

STATIC = "static"
WORDS = {HOLDS: "better", FAILS: "worse"}  # anything else: inconclusive
RULE = ("Δ = the point's quality − the static models' hull at the point's cost (the metric's direction "
        "applied: Δ > 0 is better), paired bootstrap over test examples; **better** / **worse** when the 95% CI "
        "excludes 0 and no seed's own Δ contradicts it, **inconclusive** otherwise. The static models' hull "
        "joins their Pareto points by straight lines and is never extrapolated: points outside its cost range "
        "are counted, not compared.")


@dataclass
class StaticComparison:
    curve: str
    check: CheckResult
    outside: int  # the curve's points outside the static models' cost range

    @property
    def compared(self) -> list:
        return [it for it in self.check.items if math.isfinite(it.delta)]

    def count(self, verdict_word: str) -> int:
        return sum(1 for it in self.compared if word(it.verdict) == verdict_word)


def word(verdict: str) -> str:
    return WORDS.get(verdict, "inconclusive")


def compare(view: TaskView, results_dir) -> list[StaticComparison]:
    """One comparison per non-static curve of the section; [] when the section has no static points or no
    bootstrap draws."""
    points = view.points
    if view.unc is None or not (points["knob_kind"] == STATIC).any():
        return []
    static = Select(method="", kind=STATIC, label="static models")
    out = []
    for curve, pts in points[points["knob_kind"] != STATIC].groupby("curve", sort=False):
        check = _beats(view, Beats(a=Select(method=str(pts["method"].iloc[0]), curve=str(curve)), b=static,
                                   title=f"{curve} against the static models"), results_dir)
        outside = sum(1 for it in check.items if not math.isfinite(it.delta))
        out.append(StaticComparison(str(curve), check, outside))
    return out


def static_range(view: TaskView) -> tuple[float, float]:
    fracs = view.points.loc[view.points["knob_kind"] == STATIC, "frac"]
    return float(fracs.min()), float(fracs.max())


def section_lines(view: TaskView, comparisons: list[StaticComparison], tag: str) -> list[str]:
    """The leaderboard's "Against the static models" subsection of one section (no lines without static
    points)."""
    if not comparisons:
        return []
    lo, hi = static_range(view)
    md = ["", f"### Against the static models: {md_escape(view.task)}, {md_escape(tag)}", ""]
    span = f"{lo:.1%}" if hi - lo < 5e-4 else f"{lo:.1%} – {hi:.1%}"
    if not any(c.compared for c in comparisons):
        return md + [f"No method point lies within the static models' cost range ({span} of dense cost), so none "
                     "is compared: the static hull is never extrapolated. Smaller static sizes (`method=dense` "
                     "with `dense.width` / `dense.depth`) at the methods' costs would make the comparison."]
    md += [f"Static models of this section span {span} of dense cost. {RULE}", ""]
    summary = [[c.curve, str(len(c.compared)), str(c.count("better")), str(c.count("worse")),
                str(c.count("inconclusive")), str(c.outside)] for c in comparisons]
    md += [markdown_table(["method", "points compared", "better", "worse", "inconclusive",
                           "outside the static range"], summary)]
    table = []
    for c in comparisons:
        for it in c.compared:
            table.append([it.where, it.a, it.b, it.hull.removeprefix("B: ") or NA,
                          _ci_text(it.delta, it.lo, it.hi, ".4f", sign=True), it.seeds or NA,
                          word(it.verdict) + (f" ({it.reason})" if it.reason else "")])
    if table:
        md += ["", markdown_table(["point", f"{view.metric} [95% CI]", "static hull at its cost [95% CI]",
                                   "static hull read between", "Δ [95% CI]", "per seed Δ", "verdict"], table)]
    return md
