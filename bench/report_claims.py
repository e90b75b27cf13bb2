"""Evaluate every registered paper claim (``bench.claims``) on the report's sections into
``reports/claims.md`` (and ``claims.html``), with its numbers, 95% CIs and a verdict.

The rules are :data:`RULES` (printed at the top of claims.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from bench import stats
from bench.claims import HARNESS, Beats, Claim, Increases, Reaches, Select
from bench.report_frontier import goodness, hull_draws, hull_vertices, quality_at_budget
from bench.report_page import NA, markdown_table, md_escape, write_page
from bench.report_views import TaskView, knob_label, row_fractions

HOLDS, FAILS, UNSURE = "holds", "does not hold", "inconclusive"
UNTESTED = "not tested"  # no row matches a selection: nothing was compared
SACREBLEU_COLUMN = "sacreBLEU paired bootstrap (p of Δ = 0)"  # a test of no difference, whatever the margin
RULES = [
    "* A comparison is judged on the bootstrap draws (paired over test examples: the same resampled indices for "
    "every row of a section; parity draws each seed's test set from the seed, so there the rows of one seed share "
    "examples). With Δ = how much better A is than B (the metric's direction applied) and the check's "
    "margin m, the verdict is **holds** when the whole 95% CI of Δ lies above m, **does not hold** when it lies "
    "below m, and **inconclusive** when it contains m. A threshold check works the same way on a point's quality.",
    "* **Seeds.** Each comparison is computed per seed (seed s of A against seed s of B, a hull of seed s read at "
    "that seed's own cost), and the pooled Δ is the mean of the per-seed Δs over the seeds both sides have (the A "
    "and B columns average the same seeds, so Δ = A − B in the metric's direction). Its CI is two-level: "
    "`scipy.stats.bootstrap` resamples the seeds, and each resampled seed brings a resample of its test examples, "
    "so the CI covers the training seed as well as the test set; the \"examples only\" column holds the CI with the "
    f"seeds fixed. With fewer than {stats.MIN_SEEDS} seeds the seed level is not estimated (both CIs are the "
    "examples-only one, and the detectable effect says so). With few seeds the percentile bootstrap cannot reach "
    "beyond the seeds it has seen (its seed-level spread is too narrow), so a verdict also needs the t-interval over "
    "the per-seed values (`scipy.stats.t`, the seeds as the unit; each seed's value carries its own test-set noise) "
    "to exclude the margin, or it is inconclusive. On top, a verdict that a seed's own Δ contradicts is "
    "downgraded to inconclusive (\"seeds disagree\"), and so is one that a seed of either side cannot be checked on "
    "(its rows lack a point the comparison needs, or its own hull does not reach the cost; the per-seed column "
    "shows it as —).",
    "* **BLEU.** A point-against-point comparison on BLEU also runs sacreBLEU's own paired bootstrap test "
    "(`sacrebleu.significance.PairedTest`, 1000 resamples) for every seed pair; with margin 0, a verdict that any "
    "seed's test does not support at p < 0.05 is downgraded to inconclusive.",
    "* At a budget, a method's quality is read on its upper concave hull: the smallest concave line over its Pareto "
    "points (a point on or below the chord of two others is not a vertex; a segment is reached by running its two "
    "end points on shares of the inputs), so between two vertices the value is an interpolation. Each seed's hull "
    "is chosen on that seed's own points, on the validation split where every one of its rows has a validation "
    "metric (schema 7 rows of a task with a validation split; older rows: on the test split), and "
    "every bootstrap resample is read on that same line: the CI is that of the value printed, conditional on the "
    "vertices chosen (which points are on the front is the leaderboard's \"on the front\" share). The \"hull read "
    "between\" column names the vertices of the seed means' hull, as a guide; a seed's own hull can differ. A budget "
    "outside a method's measured cost range is \"not measured\" (inconclusive): hulls are never extrapolated.",
    "* **Multiple comparisons.** Each line has a two-sided bootstrap p-value of \"Δ equals what the line needs\" "
    "(twice the smaller share of its two-level draws on either side, as (k + 1)/(B + 1)), or, with enough seeds, "
    "the t-test's over the per-seed values (`scipy.stats.ttest_1samp`) where that is larger. A check's p is the "
    "largest of its lines' where its verdict needs every line, the smallest times the number of lines where one "
    "line settles it, and its deciding line's when it is inconclusive. The family is every tested check on this "
    "page; Holm–Bonferroni (`statsmodels.stats.multitest.multipletests`, 5%) keeps a check's verdict when it "
    "rejects, and makes it inconclusive otherwise. The summary's \"Holm-adjusted\" column is the claim's verdict "
    "from its adjusted checks.",
    "* **Detectable effect.** Beside each line: the smallest distance from what the line needs that its test "
    "would detect with 80% power at the 5% level: (z₀.₉₇₅ + z₀.₈) × the standard deviation of its two-level draws "
    "(`statsmodels.stats.power.NormalIndPower`), or, with enough seeds, the t-test's over the per-seed values "
    "(`TTestPower` at that many seeds × their standard deviation) where that is larger, since a verdict needs "
    "both. An inconclusive line whose Δ lies nearer the margin than this "
    "could not have been decided by this many seeds and examples.",
    "* **Degenerate models.** A point whose every seed outputs one label, or whose accuracy is not above the share "
    "of the test set's most frequent label (each seed's CI reaches it), is marked; a check that such a baseline "
    "\"fails\" says so (\"degenerate\"), and the summary flags the claim: the baseline learned nothing, so its "
    "failure says nothing about the architecture.",
    "* **Points compared** lists, per training-protocol version (rows without a `protocol` column are version 1), "
    "the points a claim's checks compared, counted by the seeds they have rows for.",
    "* A check over several budgets or points holds when all of them hold (quantifier \"all\"; it does not hold "
    "when any does not) or when one of them holds (\"any\"; it does not hold when none does); a claim holds when "
    "every check holds. A check whose selection matches no row is **not tested** (nothing was compared), and so "
    "is a claim with such a check that no other check refutes.",
    "* **Deciding line** (the summary): in each check, among the lines with the check's verdict, the weakest for "
    "quantifier \"all\" and the strongest for \"any\", by the centre of the line's CI against what it needs (so a "
    "check that does not hold with \"any\" shows its line closest to holding); across the checks whose verdict is "
    "the claim's (a claim needs every check), the weakest -- for a claim that does not hold, the clearest failure "
    "-- ranked by that distance in units of each line's CI half-width.",
]


@dataclass
class Side:
    """One side of a comparison over its seeds: the seed mean, its two-level draws and its draws over test
    examples only (None when a seed's row has no per-sample file)."""

    value: float = math.nan
    draws: np.ndarray | None = None
    examples: np.ndarray | None = None
    seeds: int = 0

    @classmethod
    def over(cls, values: list[float], draws: list[np.ndarray | None]) -> "Side":
        if any(d is None for d in draws):
            return cls(float(np.mean(values)), None, None, len(values))
        stacked = np.stack(draws)
        return cls(float(np.mean(values)), stats.seed_level(stacked), stacked.mean(axis=0), len(values))


@dataclass
class Test:
    """What a line's draws say beyond its interval: the interval over test examples only (seeds fixed), the
    two-sided bootstrap p-value of "Δ equals what the line needs", and the minimum detectable effect."""

    ex_lo: float = math.nan
    ex_hi: float = math.nan
    p: float = math.nan
    mde: float = math.nan
    seeds: int = 0

    @classmethod
    def of(cls, draws: np.ndarray, example_draws: np.ndarray, need: float, seed_values: list[float]) -> "Test":
        """From the line's two-level and examples-only draws and its per-seed values; the p-value and the
        detectable effect are the larger of the bootstrap's and, with enough seeds, the t-test's over the seeds
        (a verdict needs both)."""
        ex_lo, ex_hi = stats.interval(example_draws)
        p, seed_p = stats.p_value(draws, need), stats.seed_level_p(seed_values, need)
        mde, seed_mde = stats.min_detectable_effect(draws), stats.seed_level_mde(seed_values)
        return cls(ex_lo, ex_hi, max(p, seed_p) if math.isfinite(seed_p) else p,
                   max(mde, seed_mde) if math.isfinite(seed_mde) else mde, len(seed_values))

    @property
    def seed_level(self) -> bool:
        return self.seeds >= stats.MIN_SEEDS


@dataclass
class Item:
    where: str
    a: str
    b: str
    delta: float
    lo: float
    hi: float
    need: str
    seeds: str
    verdict: str
    reason: str = ""
    extra: str = ""
    # the 95% CI's ends minus what the line needs, signed so that positive is towards "holds" (nan: not measured)
    slack: tuple[float, float] = (math.nan, math.nan)
    hull: str = ""  # budget checks: the measured points each side's hull value lies between
    test: Test = field(default_factory=Test)

    @property
    def centre_slack(self) -> float:
        return (self.slack[0] + self.slack[1]) / 2


@dataclass
class CheckResult:
    title: str
    quantifier: str
    items: list[Item]
    verdict: str
    header: tuple[str, str] = ("a", "b")
    points: tuple[tuple[str, ...], ...] = ()  # the row keys of each point the check read (one per seed)
    adjusted: str = ""  # the verdict after Holm's correction over the claims page (set by :func:`adjust`)
    p_adjusted: float = math.nan

    @property
    def p(self) -> float:
        """The p-value of the check's own verdict from its lines' bootstrap p-values: a verdict that needs every
        line (holds under "all", does not hold under "any") takes the largest (an intersection-union test);
        one that a single line settles takes the smallest times the number of lines (Bonferroni); an
        inconclusive check takes its deciding line's.  NaN when nothing was tested."""
        if self.verdict == UNTESTED:
            return math.nan
        if self.verdict == UNSURE:
            line = self.deciding_item()
            return line.test.p if line is not None else math.nan
        deciding = [it.test.p for it in self.items if it.verdict == self.verdict and math.isfinite(it.test.p)]
        if not deciding:
            return math.nan
        if (self.verdict == HOLDS) == (self.quantifier == "all"):  # the verdict needs every line
            return max(deciding)
        return min(1.0, min(deciding) * len(self.items))

    def deciding_item(self) -> Item | None:
        """The line that settles the check's verdict: among the lines with that verdict, the weakest one for
        quantifier "all" (every line must hold) and the strongest one for "any" (one line is enough), by the
        centre of its CI against what it needs; lines that were not measured come last."""
        lines = [it for it in self.items if it.verdict == self.verdict] or list(self.items)
        measured = [it for it in lines if math.isfinite(it.centre_slack)]
        if not measured:
            return lines[0] if lines else None
        pick = max if self.quantifier == "any" else min
        return pick(measured, key=lambda it: it.centre_slack)


@dataclass
class ClaimResult:
    claim: Claim
    view: TaskView | None
    checks: list[CheckResult] = field(default_factory=list)
    verdict: str = UNTESTED
    reason: str = ""
    recipe: str = ""  # the training recipe of the rows read (:func:`rows_recipe`)

    @property
    def adjusted(self) -> str:
        """The claim's verdict from its checks' Holm-adjusted verdicts."""
        return combine([c.adjusted or c.verdict for c in self.checks]) if self.checks else self.verdict

    @property
    def flags(self) -> list[str]:
        """Lines whose verdict stands on a degenerate model (one that learned nothing)."""
        return [f"{it.where}: {it.reason}" for c in self.checks for it in c.items if it.reason.startswith("degenerate")]

    @property
    def evidence(self) -> str:
        """The points the claim's checks selected, their seeds and protocol versions (:func:`evidence_text`)."""
        points = {keys for check in self.checks for keys in check.points}
        return evidence_text(self.view, points) if self.view is not None else NA


# ---------------------------------------------------------------------------------------------
# Claims from the registry
# ---------------------------------------------------------------------------------------------
def claims_path(spec) -> str:
    """Where a method's or task's claims are: ``spec.claims`` if it names them, else ``CLAIMS`` in the
    ``claims`` module beside its implementation (``methods/acm/claims.py`` for ``methods.acm.method:ACM``)
    when that module exists; "" for none."""
    import importlib.util

    if getattr(spec, "claims", ""):
        return spec.claims
    package = spec.impl.partition(":")[0].rpartition(".")[0]
    try:
        found = importlib.util.find_spec(f"{package}.claims") if package else None
    except ModuleNotFoundError:
        found = None
    return f"{package}.claims:CLAIMS" if found else ""


def registered_claims() -> list[Claim]:
    """Every claim a registered method or task declares, methods first (by name), each in declaration order."""
    from dataclasses import replace

    from bench import registry

    out = []
    for kind, specs in (("method", registry.methods()), ("task", registry.tasks())):
        for name, spec in specs.items():
            path = claims_path(spec)
            if path:
                out += [replace(c, owner=f"{kind} {name}") for c in registry.load_impl(path)]
    return out


def find_view(claim: Claim, views: list[TaskView]) -> TaskView | None:
    from bench import registry

    mine = [v for v in views if v.task == claim.task]
    if claim.dataset:
        mine = [v for v in mine if claim.dataset in v.dataset]
    else:
        try:
            default = registry.task_spec(claim.task).default_dataset
        except registry.RegistryError:
            default = ""
        mine = [v for v in mine if v.dataset == default] if default else mine[:1]
    return mine[0] if mine else None


def select_points(view: TaskView, sel: Select, recipe: str | None = None):
    """The points of ``view`` that ``sel`` selects, of rows trained under ``recipe`` (None: any recipe; the
    static models are the same under every recipe)."""
    p = view.points
    mask = p["method"] == sel.method if sel.method else pd.Series(True, index=p.index)  # "": every method
    variant = p["variant"].fillna("").astype(str)
    if sel.variant_has:
        mask &= variant.str.contains(sel.variant_has, regex=False)
    if sel.variant_not:
        mask &= ~variant.str.contains(sel.variant_not, regex=False)
    if sel.variant_is is not None:
        mask &= variant == sel.variant_is
    if sel.setting_has:
        mask &= p["setting"].fillna("").astype(str).str.contains(sel.setting_has, regex=False)
    if sel.curve:
        mask &= p["curve"] == sel.curve
    if sel.kind:
        mask &= p["knob_kind"] == sel.kind
    if sel.knob:
        mask &= p["knob_value"].astype(str).map(lambda v: re.fullmatch(sel.knob, v) is not None)
    if recipe is not None and sel.kind != "static" and "recipe" in p:
        mask &= (p["recipe"] == recipe) | (p["knob_kind"] == "static")
    return p[mask].sort_values("frac", kind="stable")


# ---------------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------------
def verdict(lo: float, hi: float, need: float) -> str:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return UNSURE
    return HOLDS if lo > need else FAILS if hi < need else UNSURE


def seed_check(result: str, per_seed: dict[int, float], need: float) -> tuple[str, str]:
    """Downgrade a verdict a seed contradicts, or that a seed could not be checked on (a NaN: that seed lacks
    a row the comparison needs, or its own hull does not reach the cost); see the module docstring."""
    unchecked = [f"s{seed}" for seed, v in sorted(per_seed.items()) if not math.isfinite(v)]
    if result in (HOLDS, FAILS) and unchecked:
        return UNSURE, f"{', '.join(unchecked)} not compared: no row or hull of that seed at this cost"
    values = [v for v in per_seed.values() if math.isfinite(v)]
    if result == HOLDS and any(v <= need for v in values):
        return UNSURE, "seeds disagree"
    if result == FAILS and any(v >= need for v in values):
        return UNSURE, "seeds disagree"
    if result in (HOLDS, FAILS) and len(values) >= stats.MIN_SEEDS:
        lo, hi = stats.mean_interval(values)  # the seeds as the unit: a t-interval over the per-seed values
        if lo <= need <= hi:
            return UNSURE, f"t-interval over the seeds [{lo:+.4f}, {hi:+.4f}] contains {need:+g}"
    return result, ""


def combine(verdicts: list[str], quantifier: str = "all") -> str:
    """The verdict of lines (or checks) under a quantifier.  "all": any failure fails, every line must hold,
    and a line not tested leaves the whole not tested; "any": one line that holds suffices."""
    if not verdicts or all(v == UNTESTED for v in verdicts):
        return UNTESTED
    if quantifier == "any":
        return HOLDS if HOLDS in verdicts else FAILS if all(v == FAILS for v in verdicts) else UNSURE
    if FAILS in verdicts:
        return FAILS
    return HOLDS if all(v == HOLDS for v in verdicts) else UNTESTED if UNTESTED in verdicts else UNSURE


def ci_text(value: float, lo: float, hi: float, spec: str = ".4f", sign: bool = False) -> str:
    fmt = ("+" if sign else "") + spec
    if not math.isfinite(value):
        return NA
    text = format(value, fmt)
    return text if not (math.isfinite(lo) and math.isfinite(hi)) else f"{text} [{lo:{fmt}}, {hi:{fmt}}]"


def _note(text: str) -> str:
    return f" ({text})" if text else ""


def _point_text(view: TaskView, point) -> str:
    lo, hi = view.unc.ci(point["keys"])
    return (f"{point['curve']} {point['knob_name']}={knob_label(point['knob_value'])} "
            f"({100 * point['frac']:.1f}%): {ci_text(point['quality'], lo, hi)}")


def _seed_rows(view: TaskView, points) -> dict[int, dict]:
    """seed -> {point index: (quality of that seed's row, row key)}."""
    out: dict[int, dict] = {}
    rows = view.rows.set_index("row_key")
    for idx, point in points.iterrows():
        for key, seed in zip(point["keys"], point["seeds"]):
            out.setdefault(int(seed), {})[idx] = (float(rows.loc[key, "quality"]), key)
    return out


def evidence_text(view: TaskView, points) -> str:
    """The rows of the points a claim's checks selected, per protocol version: the points counted by the
    seeds they have (:func:`bench.report_status.cell`), e.g. "12 points · seeds 0, 1, 2 (protocol 2)"."""
    from bench.report_status import cell

    rows = view.rows[view.rows["row_key"].isin({key for keys in points for key in keys})]
    if rows.empty:
        return "no points"
    return cell(rows, [c for c in ("curve", "method", "variant", "setting", "knob_name", "knob_value") if c in rows])


def _point_keys(*frames) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(keys) for frame in frames for keys in frame["keys"])


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
def _output_text(value) -> str:
    """One model output as short text: an empty output (NaN when read back from CSV) says so; a text is
    quoted and cut to 30 characters."""
    if value != value or value == "":
        return "an empty output"
    if isinstance(value, str):
        return repr(value if len(value) <= 30 else value[:29] + "…")
    return str(value)


def constant_prediction(view: TaskView, keys) -> str:
    """A note when every seed of a point gives one and the same output on every test example (a model that
    learned nothing about the input; for a classifier, its accuracy is that label's frequency); "" otherwise
    or when a seed has no per-sample outputs."""
    outputs = set()
    for key in keys:
        samples = view.unc.samples.get(key) if view.unc is not None else None
        if samples is None or "prediction" not in samples.columns or len(samples) == 0:
            return ""
        distinct = samples["prediction"].unique()
        if len(distinct) != 1:
            return ""
        outputs.add(_output_text(distinct[0]))
    # a classifier's accuracy is then the share of its one label in the test set
    tail = f": its {view.metric} is that label's share of the test set" if view.metric in (
        "accuracy", "top1") else ""
    if len(outputs) == 1:
        return f"every seed outputs {next(iter(outputs))} on every example{tail}"
    return (f"each seed outputs one label on every example ({' / '.join(sorted(outputs))}){tail}"
            if outputs else "")


def majority_share(view: TaskView, keys) -> str:
    """A note when a classifier is no better than always predicting the test set's most frequent label
    (every seed's example-level 95% CI reaches down to that label's share); "" otherwise."""
    if view.metric not in ("accuracy", "top1") or view.unc is None:
        return ""
    shares = []
    for key in keys:
        samples = view.unc.samples.get(key)
        if samples is None or "target" not in samples.columns or key not in view.unc.low:
            return ""
        share = float(samples["target"].value_counts(normalize=True).max())
        if view.unc.low[key] > share:
            return ""
        shares.append(share)
    return f"no better than always predicting the most frequent label ({max(shares):.4f} of the test set)"


def degenerate(view: TaskView, keys) -> str:
    """Why a point learned nothing (one output for every example, or no better than the constant predictor
    of the most frequent label), or ""."""
    return constant_prediction(view, keys) or majority_share(view, keys)


def _reaches(view: TaskView, check: Reaches, recipe: str | None = None) -> CheckResult:
    pts = select_points(view, check.select, recipe)
    hib = view.higher_is_better
    items = [] if not pts.empty else [Item(f"no points of {check.select.name}", NA, "", math.nan, math.nan,
                                           math.nan, "", "", UNTESTED, "no rows match the selection")]
    for idx, point in pts.iterrows():
        draws = view.unc.mean_draws(point["keys"])
        lo, hi = stats.interval(draws) if draws is not None else (math.nan, math.nan)
        g = float(goodness(point["quality"], hib))
        glo, ghi = (lo, hi) if hib else (-hi, -lo)
        need = float(goodness(check.threshold, hib))
        per_seed = {int(s): float(goodness(float(view.rows.set_index("row_key").loc[k, "quality"]), hib))
                    for k, s in zip(point["keys"], point["seeds"])}
        if check.fails:  # "stays below": the mirror image
            result = verdict(-ghi, -glo, -need)
            result, reason = seed_check(result, {s: -v for s, v in per_seed.items()}, -need)
        else:
            result = verdict(glo, ghi, need)
            result, reason = seed_check(result, per_seed, need)
        slack = (need - ghi, need - glo) if check.fails else (glo - need, ghi - need)
        word = ("worse than" if check.fails else "at least") if hib else ("above" if check.fails else "at most")
        test = Test()
        if draws is not None:
            test = Test.of(goodness(draws, hib), goodness(view.unc.example_draws(point["keys"]), hib), need,
                           list(per_seed.values()))
        learned = degenerate(view, point["keys"])
        if learned and check.fails and result == HOLDS:  # "the baseline fails" of a model that learned nothing
            reason = f"degenerate: {learned}"
        items.append(Item(
            where=f"{point['curve']} {point['knob_name']}={knob_label(point['knob_value'])} ({100 * point['frac']:.1f}%)",
            a=ci_text(point["quality"], lo, hi) + _note(learned), b="",
            delta=g, lo=glo, hi=ghi,
            need=f"{word} {check.threshold:g}",
            seeds=", ".join(f"s{s}: {float(goodness(v, hib)):.4f}" for s, v in sorted(per_seed.items())),
            verdict=result, reason=reason, slack=slack, test=test))
    title = check.title or (f"{check.select.name} {'fails' if check.fails else 'reaches'}: "
                            f"{view.metric} {'below' if check.fails == hib else 'above'} {check.threshold:g}")
    return CheckResult(title, check.quantifier, items, combine([i.verdict for i in items], check.quantifier),
                       points=_point_keys(pts))


def hull_segment(pts, budget: float, higher_is_better: bool) -> str:
    """Which measured points a hull value at ``budget`` (a fraction of dense cost) is read between: one point
    where the budget is a hull vertex, else the two vertices either side (the value is on the straight line
    joining them); "not measured" outside the points' cost range."""
    c = pts["frac"].to_numpy(dtype=float)
    chosen = pts["val_quality"].to_numpy(dtype=float) if "val_quality" in pts else None
    vertices, max_cost = hull_vertices(c, pts["quality"].to_numpy(dtype=float), higher_is_better, chosen)
    if vertices.size == 0 or not (c[vertices[0]] - 1e-9 <= budget <= max(max_cost, c[vertices[-1]]) + 1e-9):
        return "not measured"
    several = pts["curve"].nunique() > 1

    def name(i: int) -> str:
        point = pts.iloc[i]
        curve = f"{point['curve']} " if several else ""
        return f"{curve}{point['knob_name']}={knob_label(point['knob_value'])} ({100 * c[i]:.1f}%)"

    at = c[vertices]
    if budget >= at[-1] - 1e-9:  # at or past the last vertex: the hull is flat there
        last = name(int(vertices[-1]))
        return last if budget <= at[-1] + 1e-9 else f"{last}, flat beyond it (the costlier points are dominated)"
    exact = np.flatnonzero(np.isclose(at, budget, rtol=0, atol=1e-9))
    if exact.size:
        return name(int(vertices[exact[0]]))
    right = int(np.searchsorted(at, budget))
    return f"{name(int(vertices[right - 1]))} to {name(int(vertices[right]))}"


def beats(view: TaskView, check: Beats, results_dir, recipe: str | None = None) -> CheckResult:
    a_pts, b_pts = select_points(view, check.a, recipe), select_points(view, check.b, recipe)
    hib = view.higher_is_better
    items: list[Item] = []
    if a_pts.empty or b_pts.empty:
        missing = check.a.name if a_pts.empty else check.b.name
        return CheckResult(check.title or f"{check.a.name} vs {check.b.name}", check.quantifier,
                           [Item(f"no points of {missing}", "", "", math.nan, math.nan, math.nan, "", "", UNSURE,
                                 "no rows")], UNTESTED)  # nothing compared
    a_seeds, b_seeds = _seed_rows(view, a_pts), _seed_rows(view, b_pts)
    # a seed's hull is drawn at its own rows' costs, not the seed means'
    own_frac = dict(zip(view.rows["row_key"], row_fractions(view.rows, view.macs_dense)))
    own_val = dict(zip(view.rows["row_key"], view.rows["val_quality"] if "val_quality" in view.rows
                       else [math.nan] * len(view.rows)))
    b_point = b_pts.iloc[0] if check.b_is_point else None
    if check.b_is_point and len(b_pts) != 1:
        found = "; ".join(f"{p['curve']} {p['knob_name']}={knob_label(p['knob_value'])}" for _, p in b_pts.iterrows())
        raise ValueError(f"claim check {check.title!r}: b_is_point needs exactly one point of {check.b.name}, "
                         f"found {len(b_pts)} ({found}): either the claim's selector matches several points "
                         "(narrow it), or rows of one point made under two configurations (a changed default "
                         "budget or protocol) share the results directory (remove the superseded rows; git "
                         "history keeps them)")
    b_note = _note(constant_prediction(view, b_point["keys"])) if check.b_is_point else ""  # one B point: once

    # draws are paired only on one test set (the same resampled indices): rows on another set give no CI
    keys = [key for frame in (a_pts, b_pts) for point_keys in frame["keys"] for key in point_keys]
    one_set = len({view.unc.test_set.get(key) for key in keys}) == 1

    def row_draws(key: str) -> np.ndarray | None:
        return view.unc.mean_draws([key]) if one_set else None

    def seed_hull(seeds: dict[int, dict], seed: int, x: float) -> tuple[float, np.ndarray | None]:
        """One seed's hull at ``x`` (its rows at their own cost fractions; vertices chosen on its rows'
        validation quality where they have one) and its draws; NaN without rows."""
        entries = list(seeds.get(seed, {}).values())
        fracs, qualities = [own_frac[e[1]] for e in entries], [e[0] for e in entries]
        chosen = [own_val[e[1]] for e in entries]
        value = quality_at_budget(fracs, qualities, x, hib, chosen) if entries else math.nan
        draws = [row_draws(e[1]) for e in entries]
        if not math.isfinite(value) or any(d is None for d in draws):
            return value, None
        return value, hull_draws(fracs, qualities, np.stack(draws), x, hib, chosen)

    def b_at(x: float, seed: int) -> tuple[float, np.ndarray | None]:
        if check.b_is_point:
            entry = b_seeds.get(seed, {}).get(b_pts.index[0])
            return (entry[0], row_draws(entry[1])) if entry else (math.nan, None)
        return seed_hull(b_seeds, seed, x)

    def pooled(pairs: dict[int, tuple]) -> tuple[Side, Side, dict]:
        """Per seed s a pair (A_s, its draws, B_s, its draws) -> A and B over the seeds where both are
        measured (so Δ is the mean of the per-seed Δs, and both sides average the same seeds, in seed order,
        so their two-level draws resample the same seeds) and the per-seed Δs (NaN: that seed not compared)."""
        per_seed = {s: (float(goodness(qa, hib) - goodness(qb, hib)) if math.isfinite(qa) and math.isfinite(qb)
                        else math.nan) for s, (qa, _, qb, _) in pairs.items()}
        both = [pairs[s] for s, v in per_seed.items() if math.isfinite(v)]
        if not both:  # nothing compared: A's own value (over its measured seeds) for the record
            measured = [p for p in pairs.values() if math.isfinite(p[0])]
            a = Side.over([p[0] for p in measured], [p[1] for p in measured]) if measured else Side()
            return a, Side(), per_seed
        return (Side.over([p[0] for p in both], [p[1] for p in both]),
                Side.over([p[2] for p in both], [p[3] for p in both]), per_seed)

    def item(where, pairs, extra="", pvalues=(), hull="", a_note="") -> Item:
        a, b, per_seed = pooled(pairs)
        delta = float(goodness(a.value, hib) - goodness(b.value, hib)) if math.isfinite(a.value) and \
            math.isfinite(b.value) else math.nan
        lo = hi = math.nan
        test = Test()
        if a.draws is not None and b.draws is not None:
            diff = goodness(a.draws, hib) - goodness(b.draws, hib)
            lo, hi = stats.interval(diff)
            test = Test.of(diff, goodness(a.examples, hib) - goodness(b.examples, hib), check.margin,
                           [v for v in per_seed.values() if math.isfinite(v)])
        result = verdict(lo, hi, check.margin) if math.isfinite(delta) else UNSURE
        reason = "" if math.isfinite(delta) else "not measured at this cost"
        if math.isfinite(delta):
            result, reason = seed_check(result, per_seed, check.margin)
            if a.draws is None or b.draws is None:
                reason = "no CI: a compared row has no per-sample file"
        if result != UNSURE and check.margin == 0 and pvalues and any(p >= 0.05 for p in pvalues):
            result, reason = UNSURE, "sacreBLEU paired test p ≥ 0.05"
        a_lo, a_hi = stats.interval(a.draws) if a.draws is not None else (math.nan, math.nan)
        b_lo, b_hi = stats.interval(b.draws) if b.draws is not None else (math.nan, math.nan)
        need = (f"Δ > {check.margin:+g}" if check.margin else "Δ > 0")
        return Item(where, ci_text(a.value, a_lo, a_hi) + _note(a_note), ci_text(b.value, b_lo, b_hi) + b_note, delta,
                    lo, hi, need,
                    ", ".join(f"s{s}: {v:+.4f}" if math.isfinite(v) else f"s{s}: {NA}" for s, v in sorted(per_seed.items())),
                    result, reason, extra, (lo - check.margin, hi - check.margin), hull, test)

    if check.budgets:
        for x in check.budgets:
            pairs = {seed: (*seed_hull(a_seeds, seed, x), *b_at(x, seed))  # a seed either side lacks: not compared
                     for seed in sorted(set(a_seeds) | set(b_seeds))}
            hull = f"A: {hull_segment(a_pts, x, hib)}" + ("" if check.b_is_point else f"; B: {hull_segment(b_pts, x, hib)}")
            items.append(item(f"at {x:.0%} of dense cost", pairs, hull=hull))
    else:
        for idx, point in a_pts.iterrows():
            if point["frac"] > check.max_cost:
                continue
            pairs, pvalues, extra = {}, [], []
            for seed in sorted(a_seeds):  # every seed of the point; one B lacks is not compared (NaN)
                entry = a_seeds[seed].get(idx)
                if entry is None:
                    continue
                # B's hull of that seed at that seed's own cost
                pairs[seed] = (entry[0], row_draws(entry[1]), *b_at(own_frac[entry[1]], seed))
                if view.metric == "bleu" and check.b_is_point:
                    b_entry = b_seeds.get(seed, {}).get(b_pts.index[0])
                    test = _sacrebleu(view, b_entry[1], entry[1]) if b_entry else None
                    if test is not None:
                        pvalues.append(test["p_value"])
                        extra.append(f"s{seed}: p = {test['p_value']:.3f}")
            items.append(item(f"{check.a.name} {point['knob_name']}={knob_label(point['knob_value'])} "
                              f"({100 * point['frac']:.1f}%)", pairs, "; ".join(extra), pvalues,
                              a_note=constant_prediction(view, point["keys"]),
                              hull="" if check.b_is_point else f"B: {hull_segment(b_pts, float(point['frac']), hib)}"))
    title = check.title or f"{check.a.name} better than {check.b.name}"
    return CheckResult(title, check.quantifier, items, combine([i.verdict for i in items], check.quantifier),
                       (check.a.name, check.b.name),
                       _point_keys(a_pts if check.budgets else a_pts[a_pts["frac"] <= check.max_cost], b_pts))


def _sacrebleu(view: TaskView, base_key: str, system_key: str) -> dict | None:
    base, system = view.unc.samples.get(base_key), view.unc.samples.get(system_key)
    if base is None or system is None or len(base) != len(system):
        return None
    texts = lambda frame, col: ["" if v != v else str(v) for v in frame[col]]  # noqa: E731
    return stats.sacrebleu_paired_test((texts(base, "prediction"), texts(base, "target")),
                                       (texts(system, "prediction"), texts(system, "target")))


def _increases(view: TaskView, check: Increases, recipe: str | None = None) -> CheckResult:
    from scipy.stats import bootstrap, pearsonr, rankdata

    def spearman(x, y, axis=-1):
        return pearsonr(rankdata(x, axis=axis), rankdata(y, axis=axis), axis=axis).statistic

    pts = select_points(view, check.select, recipe)
    items = [] if not pts.empty else [Item(f"no points of {check.select.name}", NA, "", math.nan, math.nan,
                                           math.nan, "ρ > 0", "", UNTESTED, "no rows match the selection")]
    for _, point in pts.iterrows():
        for key, seed in zip(point["keys"], point["seeds"]):
            samples = view.unc.samples.get(key)
            where = f"{point['curve']} {point['knob_name']}={knob_label(point['knob_value'])}, seed {seed}"
            if samples is None or not {check.x, check.y} <= set(samples.columns):
                items.append(Item(where, NA, "", math.nan, math.nan, math.nan, "ρ > 0", "", UNSURE,
                                  f"per-sample file lacks {check.x}/{check.y}"))
                continue
            x, y = samples[check.x].to_numpy(float), samples[check.y].to_numpy(float)
            rho = float(spearman(x, y))
            res = bootstrap((x, y), spearman, paired=True, vectorized=True, n_resamples=stats.N_RESAMPLES,
                            batch=50, confidence_level=stats.CONFIDENCE, method="percentile",
                            random_state=np.random.default_rng(stats.RANDOM_SEED))
            lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
            test = Test.of(res.bootstrap_distribution, res.bootstrap_distribution, 0.0, [rho])
            items.append(Item(where, f"Spearman ρ({check.y}, {check.x}) = {ci_text(rho, lo, hi, '.3f')}", "", rho,
                              lo, hi, "ρ > 0", "", verdict(lo, hi, 0.0), slack=(lo, hi), test=test))
    title = check.title or f"{check.select.name}: {check.y} increases with {check.x}"
    return CheckResult(title, check.quantifier, items, combine([i.verdict for i in items], check.quantifier),
                       points=_point_keys(pts))


def claim_selects(claim: Claim) -> list[Select]:
    """Every selection of a claim's checks (a comparison has two)."""
    return [sel for check in claim.checks
            for sel in ((check.a, check.b) if isinstance(check, Beats) else (check.select,))]


def rows_recipe(claim: Claim, view: TaskView) -> str:
    """The recipe whose rows a claim reads: its own (the papers' recipes), or "matched" while none of its
    selections has rows of that recipe (the page says so)."""
    for sel in claim_selects(claim):
        if sel.kind == "static":  # the static models are the same under every recipe
            continue
        if (select_points(view, sel, claim.recipe)["knob_kind"] != "static").any():  # trained rows of that recipe
            return claim.recipe
    return "matched"


def evaluate(claim: Claim, views: list[TaskView], results_dir) -> ClaimResult:
    view = find_view(claim, views)
    out = ClaimResult(claim, view)
    if view is None or view.unc is None:
        out.reason = f"no rows of task {claim.task}" + (f" dataset containing {claim.dataset!r}" if claim.dataset else "")
        return out
    out.recipe = rows_recipe(claim, view)
    for check in claim.checks:
        if isinstance(check, Reaches):
            out.checks.append(_reaches(view, check, out.recipe))
        elif isinstance(check, Beats):
            out.checks.append(beats(view, check, results_dir, out.recipe))
        elif isinstance(check, Increases):
            out.checks.append(_increases(view, check, out.recipe))
        else:
            raise TypeError(f"claim {claim.id}: unknown check {type(check).__name__}")
    out.verdict = combine([c.verdict for c in out.checks])
    return out


def adjust(claim_results: list[ClaimResult]) -> int:
    """Holm–Bonferroni over every tested check of the claims page (the family): a check keeps its verdict
    ("holds" or "does not hold") when Holm rejects "Δ equals what it needs" at 5%, and is inconclusive
    otherwise.  Returns the family's size."""
    checks = [c for r in claim_results for c in r.checks]
    reject, adjusted = stats.holm([c.p for c in checks])
    for check, rejected, p in zip(checks, reject, adjusted):
        check.p_adjusted = p
        decided = check.verdict in (HOLDS, FAILS)
        check.adjusted = check.verdict if (rejected and decided) or check.verdict == UNTESTED else UNSURE
    return sum(math.isfinite(c.p) for c in checks)


# ---------------------------------------------------------------------------------------------
# claims.md
# ---------------------------------------------------------------------------------------------
def _standardized(item: Item) -> float:
    """How far a line is towards "holds", in units of its CI's half-width (comparable across checks whose
    numbers are in different units); NaN when not measured."""
    half = (item.slack[1] - item.slack[0]) / 2
    return item.centre_slack / half if half > 0 else math.copysign(math.inf, item.centre_slack)


def deciding(result: ClaimResult) -> tuple[int, Item] | None:
    """(check number, line) that settles the claim's verdict.  Within a check, :meth:`CheckResult.deciding_item`;
    across the checks with the claim's verdict (a claim needs every check): the weakest for a claim that holds
    or is inconclusive (the check closest to failing or least sure), the clearest failure for one that does not
    hold -- ranked by each line's distance from what it needs in units of its CI's half-width, since the checks'
    numbers can be in different units (a metric, a rank correlation)."""
    found = [(number, check.deciding_item()) for number, check in enumerate(result.checks, 1)
             if check.verdict == result.verdict]
    found = [(n, it) for n, it in found if it is not None]
    if not found:
        return None
    measured = [(n, it) for n, it in found if math.isfinite(it.centre_slack)]
    if not measured:
        return found[0]
    return min(measured, key=lambda pair: _standardized(pair[1]))


def _headline(result: ClaimResult) -> tuple[str, str]:
    """The deciding line of the claim as (short text, what it needs)."""
    found = deciding(result)
    if found is None:
        return result.reason or NA, NA
    number, it = found
    value = f"Δ = {ci_text(it.delta, it.lo, it.hi, '.4f', sign=True)}" if it.b else it.a
    prefix = f"check {number}, " if len(result.checks) > 1 else ""
    value = f": {value}" if value else ""
    return f"{prefix}{it.where}{value}" + (f" ({it.reason})" if it.reason else ""), it.need or NA


def _mde_text(test: Test) -> str:
    if not math.isfinite(test.mde):
        return NA
    return f"{test.mde:.4f}" + ("" if test.seed_level else f" (examples only: {test.seeds} seed(s))")


def _headline_mde(result: ClaimResult) -> str:
    found = deciding(result)
    return _mde_text(found[1].test) if found is not None else NA


def summary_lines(claim_results: list[ClaimResult], link: str = "claims.md") -> list[str]:
    """The summary tables: the papers' claims, then the harness's own (each a line per claim)."""
    header = ["claim", "source", "tested on", "verdict (95%)", "Holm-adjusted", "deciding line [95% CI]", "needed",
              "detectable effect (80% power)", "points compared"]

    def table(results: list[ClaimResult]) -> str:
        return markdown_table(header, [
            [r.claim.id, r.claim.source + (f", {r.claim.section}" if r.claim.section else ""),
             f"{r.claim.task}" + (f" ({r.view.dataset.split(' (')[0]})" if r.view else ""),
             r.verdict + (" ⚑ degenerate baseline" if r.flags else ""), r.adjusted, *_headline(r), _headline_mde(r),
             r.evidence] for r in results])

    papers = [r for r in claim_results if r.claim.kind != HARNESS]
    own = [r for r in claim_results if r.claim.kind == HARNESS]
    lines = [f"Every registered paper claim, judged on today's rows ([details]({link})):", "", table(papers)]
    if own:
        lines += ["", "The harness's own questions about the methods (no paper makes these claims):", "", table(own)]
    return lines


def claim_curves(claim: Claim, view: TaskView) -> set[str]:
    """The curves a claim's checks select in ``view``, by the selectors' full filters (a claim that leaves
    some of a method's points out leaves their curve out); the static models (selected by kind) are not
    among them."""
    recipe = rows_recipe(claim, view)
    return {str(curve) for sel in claim_selects(claim) if sel.kind != "static"
            for curve in select_points(view, sel, recipe)["curve"]}


def _recipe_text(result: ClaimResult) -> str:
    if not result.recipe:
        return NA
    if result.recipe == result.claim.recipe:
        return f"recipe={result.recipe}"
    return (f"recipe={result.recipe}: no recipe={result.claim.recipe} rows of these methods yet, so the verdict is "
            f"on the harness's equal budget, not on the paper's recipe")


def _num_text(value: float, spec: str) -> str:
    return format(value, spec) if math.isfinite(value) else NA


def _example_text(item: Item) -> str:
    """The line's interval over test examples only (the seeds fixed), in the line's own units."""
    lo, hi = item.test.ex_lo, item.test.ex_hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return NA
    sign = "+" if item.b else ""
    return f"[{lo:{sign}.4f}, {hi:{sign}.4f}]"


def _check_test_text(check: CheckResult) -> str:
    if not math.isfinite(check.p):
        return "Nothing tested: not in the multiple-comparison family."
    return (f"p = {check.p:.3g}; Holm-adjusted over the page's checks: p = {check.p_adjusted:.3g}, "
            f"verdict **{check.adjusted}**.")


def claims_markdown(claim_results: list[ClaimResult], results_dir: str,
                    static_lines: dict[str, list[str]] | None = None) -> str:
    """``static_lines``: per claim id, lines on its methods against the static models (placed after the
    claim's verdict)."""
    md = ["# Paper claims, judged on the rows", "",
          f"Generated by `python -m bench report` from `{results_dir}/`. Each claim is declared once, next to "
          "the method (or task) it belongs to (`claims=` in its registration), and evaluated here by the core.",
          "", "## Summary", ""] + summary_lines(claim_results, "#summary")[2:]
    md += ["", "## How the verdicts are reached", "",
           f"Bootstrap: `scipy.stats.bootstrap`, {stats.N_RESAMPLES} resamples of the training seeds and the test "
           f"examples (two levels), percentile intervals, random state {stats.RANDOM_SEED} (re-running gives the "
           "same numbers); every row of a section is resampled with the same example indices, so differences are "
           "paired. A comparison's A and B are means over the seeds both sides have. "
           "Δ = how much better A is than B in the metric's direction (for WER, B − A). "
           "The reasons for each rule: docs/measurement.md, \"Statistics\"."]
    md += [""] + RULES
    for r in claim_results:
        c = r.claim
        md += ["", f"## {md_escape(c.id)}", ""]
        if c.quote:
            md += [f"> {md_escape(c.quote)}", "",
                   f"— {md_escape(c.source)}" + (f", {md_escape(c.section)}" if c.section else "")
                   + (f"; stated on {md_escape(c.axis)}" if c.axis else ""), ""]
        md += [f"**{'Claim' if c.kind != HARNESS else 'The harness asks'}** ({md_escape(c.source)}): "
               f"{md_escape(c.statement)}  ",
               f"**Declared by** {md_escape(c.owner)}; **tested on** {md_escape(c.task)}"
               + (f" — {md_escape(r.view.dataset)}" if r.view is not None else " (no rows)") + "  ",
               f"**Points compared**: {r.evidence}  ",
               f"**Rows read**: {_recipe_text(r)}  ",
               f"**Verdict: {r.verdict}**" + (f" ({md_escape(r.reason)})" if r.reason else "")]
        if c.note:
            md += ["", md_escape(c.note)]
        if (static_lines or {}).get(c.id):
            md += [""] + static_lines[c.id]
        for i, check in enumerate(r.checks, 1):
            md += ["", f"### {md_escape(c.id)}, check {i}: {md_escape(check.title)} — {check.verdict}", "",
                   f"Quantifier: {check.quantifier} of the lines below. {_check_test_text(check)}"]
            comparison = any(it.b for it in check.items)
            values = (["where", f"A = {check.header[0]}", f"B = {check.header[1]}", "Δ [95% CI]"] if comparison
                      else ["where", "value [95% CI]"])
            header = values + ["examples only [95% CI]", "needed", "per seed Δ" if comparison else "per seed", "p",
                               "detectable effect", "verdict"]
            if any(it.extra for it in check.items):
                header.insert(-1, SACREBLEU_COLUMN)
            if any(it.hull for it in check.items):
                header.insert(-1, "hull read between")
            table = []
            for it in check.items:
                v = it.verdict + (f" ({it.reason})" if it.reason else "")
                examples = _example_text(it)
                if comparison:
                    row = [it.where, it.a, it.b, ci_text(it.delta, it.lo, it.hi, ".4f", sign=True), examples,
                           it.need, it.seeds or NA]
                else:
                    row = [it.where, it.a, examples, it.need, it.seeds or NA]
                row += [_num_text(it.test.p, ".3g"), _mde_text(it.test)]
                if SACREBLEU_COLUMN in header:
                    row.append(it.extra or NA)
                if "hull read between" in header:
                    row.append(it.hull or NA)
                table.append(row + [v])
            md += ["", markdown_table(header, table)]
    return "\n".join(md) + "\n"


def write(views: list[TaskView], reports_dir: Path, results_dir, echo=print,
          static_lines: Callable[[ClaimResult], list[str]] | None = None) -> tuple[list[str], list[str]]:
    """Evaluate every registered claim; write claims.md/.html; return (paths, leaderboard summary lines).
    ``static_lines(result)``: the lines on a claim's methods against its section's static models."""
    claim_results = [evaluate(c, views, results_dir) for c in registered_claims()]
    adjust(claim_results)
    for r in claim_results:
        echo(f"  claim {r.claim.id}: {r.verdict}")
    static_lines = {r.claim.id: static_lines(r) for r in claim_results if r.view is not None} if static_lines else {}
    paths = write_page(reports_dir, "claims", claims_markdown(claim_results, str(results_dir), static_lines),
                       "Paper claims")
    return paths, summary_lines(claim_results) if claim_results else []
