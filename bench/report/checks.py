"""The claims' checks, evaluated on one section's view (:class:`bench.report.views.TaskView`): which points a
selection picks and which recipe's rows a claim reads (:func:`select_points`, :func:`rows_recipe`), a
threshold (:func:`reaches`), a comparison (:func:`beats`: at budgets on the hulls, or point by point) and a
rank correlation (:func:`increases`), and the notes on a model that learned nothing (:func:`degenerate`).
Each returns a :class:`bench.report.verdicts.CheckResult`; the claims page (``bench/report/claims.py``)
evaluates every claim with them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench import stats
from bench.claims import Beats, Claim, Increases, Reaches, Select
from bench.report.frontier import goodness, hull_draws, hull_vertices, quality_at_budget
from bench.report.page import NA
from bench.report.verdicts import (HOLDS, UNSURE, UNTESTED, CheckResult, Item, Test, ci_text, combine, seed_check,
                                   verdict)
from bench.report.views import TaskView, knob_label, row_fractions


# ---------------------------------------------------------------------------------------------
# Selections
# ---------------------------------------------------------------------------------------------
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


def _note(text: str) -> str:
    """`` (text)``, or "" without a text."""
    return f" ({text})" if text else ""


def _seed_rows(view: TaskView, points) -> dict[int, dict]:
    """seed -> {point index: (quality of that seed's row, row key)}."""
    out: dict[int, dict] = {}
    rows = view.rows.set_index("row_key")
    for idx, point in points.iterrows():
        for key, seed in zip(point["keys"], point["seeds"]):
            out.setdefault(int(seed), {})[idx] = (float(rows.loc[key, "quality"]), key)
    return out


def _point_keys(*frames) -> tuple[tuple[str, ...], ...]:
    """The row keys of every point of the frames (a check's :attr:`CheckResult.points`)."""
    return tuple(tuple(keys) for frame in frames for keys in frame["keys"])


def output_text(value) -> str:
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
        outputs.add(output_text(distinct[0]))
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


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
def reaches(view: TaskView, check: Reaches, recipe: str | None = None) -> CheckResult:
    """Each selected point reaches the check's threshold in the metric's direction (with ``fails``: stays on
    its other side), by its two-level CI and the seed rule; a baseline that "fails" because it learned
    nothing says so (:func:`degenerate`)."""
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


def _segment_or_seeds(pts, budget: float, higher_is_better: bool, reached: list[int]) -> str:
    """:func:`hull_segment` on the seed means' points, saying which seeds' own hulls reach a budget that the
    means' hull does not (a seed's hull is chosen on its own points, so its cost range can be wider)."""
    segment = hull_segment(pts, budget, higher_is_better)
    if segment != "not measured" or not reached:
        return segment
    return f"not measured on the seed means' hull (reached by the own hull of {', '.join(f's{s}' for s in reached)})"


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


def _require_one_b_point(check: Beats, b_pts) -> None:
    """A check against one B point (``b_is_point``) must select exactly one."""
    if check.b_is_point and len(b_pts) != 1:
        found = "; ".join(f"{p['curve']} {p['knob_name']}={knob_label(p['knob_value'])}" for _, p in b_pts.iterrows())
        raise ValueError(f"claim check {check.title!r}: b_is_point needs exactly one point of {check.b.name}, "
                         f"found {len(b_pts)} ({found}): either the claim's selector matches several points "
                         "(narrow it), or rows of one point made under two configurations (a changed default "
                         "budget or protocol) share the results directory (remove the superseded rows; git "
                         "history keeps them)")


@dataclass
class _Comparison:
    """What a :class:`bench.claims.Beats` check reads from a view: each side's points and, per seed, their
    rows (:func:`_seed_rows`); every row's own cost fraction and validation quality (a seed's hull is drawn
    at its own rows' costs, not the seed means'); whether all rows are on one test set (draws are paired
    only there: rows on another set give no CI); and the note on a single B point that learned nothing."""

    view: TaskView
    check: Beats
    a_pts: pd.DataFrame
    b_pts: pd.DataFrame
    a_seeds: dict[int, dict]
    b_seeds: dict[int, dict]
    own_frac: dict[str, float]
    own_val: dict[str, float]
    one_set: bool
    b_note: str

    @classmethod
    def of(cls, view: TaskView, check: Beats, a_pts, b_pts) -> "_Comparison":
        own_frac = dict(zip(view.rows["row_key"], row_fractions(view.rows, view.macs_dense)))
        own_val = dict(zip(view.rows["row_key"], view.rows["val_quality"] if "val_quality" in view.rows
                           else [math.nan] * len(view.rows)))
        keys = [key for frame in (a_pts, b_pts) for point_keys in frame["keys"] for key in point_keys]
        one_set = len({view.unc.test_set.get(key) for key in keys}) == 1
        b_note = _note(constant_prediction(view, b_pts.iloc[0]["keys"])) if check.b_is_point else ""  # once
        return cls(view, check, a_pts, b_pts, _seed_rows(view, a_pts), _seed_rows(view, b_pts), own_frac, own_val,
                   one_set, b_note)

    @property
    def hib(self) -> bool:
        return self.view.higher_is_better

    def row_draws(self, key: str) -> np.ndarray | None:
        return self.view.unc.mean_draws([key]) if self.one_set else None

    def seed_hull(self, seeds: dict[int, dict], seed: int, x: float) -> tuple[float, np.ndarray | None]:
        """One seed's hull at ``x`` (its rows at their own cost fractions; vertices chosen on its rows'
        validation quality where they have one) and its draws; NaN without rows."""
        entries = list(seeds.get(seed, {}).values())
        fracs, qualities = [self.own_frac[e[1]] for e in entries], [e[0] for e in entries]
        chosen = [self.own_val[e[1]] for e in entries]
        value = quality_at_budget(fracs, qualities, x, self.hib, chosen) if entries else math.nan
        draws = [self.row_draws(e[1]) for e in entries]
        if not math.isfinite(value) or any(d is None for d in draws):
            return value, None
        return value, hull_draws(fracs, qualities, np.stack(draws), x, self.hib, chosen)

    def b_at(self, x: float, seed: int) -> tuple[float, np.ndarray | None]:
        """B of one seed at cost ``x``: the B point's row (``b_is_point``), else B's hull of that seed."""
        if self.check.b_is_point:
            entry = self.b_seeds.get(seed, {}).get(self.b_pts.index[0])
            return (entry[0], self.row_draws(entry[1])) if entry else (math.nan, None)
        return self.seed_hull(self.b_seeds, seed, x)


def _pooled(pairs: dict[int, tuple], hib: bool) -> tuple[Side, Side, dict]:
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


def _beats_item(cmp: _Comparison, where: str, pairs: dict[int, tuple], extra: str = "", pvalues=(), hull: str = "",
                a_note: str = "") -> Item:
    """One line of a comparison: Δ = A − B over the seeds both sides have, its paired CI and tests, and the
    verdict against the check's margin (the seed rule, and sacreBLEU's test for BLEU at margin 0)."""
    check, hib = cmp.check, cmp.hib
    a, b, per_seed = _pooled(pairs, hib)
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
    return Item(where, ci_text(a.value, a_lo, a_hi) + _note(a_note), ci_text(b.value, b_lo, b_hi) + cmp.b_note,
                delta, lo, hi, need,
                ", ".join(f"s{s}: {v:+.4f}" if math.isfinite(v) else f"s{s}: {NA}" for s, v in sorted(per_seed.items())),
                result, reason, extra, (lo - check.margin, hi - check.margin), hull, test)


def _budget_items(cmp: _Comparison) -> list[Item]:
    """A line per budget of the check: each seed's A hull against its B (hull or point) at that cost."""
    items = []
    for x in cmp.check.budgets:
        # a seed either side lacks is not compared
        pairs = {seed: (*cmp.seed_hull(cmp.a_seeds, seed, x), *cmp.b_at(x, seed))
                 for seed in sorted(set(cmp.a_seeds) | set(cmp.b_seeds))}
        a_reached = [seed for seed, pair in pairs.items() if math.isfinite(pair[0])]
        b_reached = [seed for seed, pair in pairs.items() if math.isfinite(pair[2])]
        hull = f"A: {_segment_or_seeds(cmp.a_pts, x, cmp.hib, a_reached)}" + (
            "" if cmp.check.b_is_point else f"; B: {_segment_or_seeds(cmp.b_pts, x, cmp.hib, b_reached)}")
        items.append(_beats_item(cmp, f"at {x:.0%} of dense cost", pairs, hull=hull))
    return items


def _point_items(cmp: _Comparison) -> list[Item]:
    """A line per A point up to the check's ``max_cost``: each seed's row against B of that seed at the row's
    own cost (with sacreBLEU's paired test per seed for BLEU against one B point)."""
    check, view, items = cmp.check, cmp.view, []
    for idx, point in cmp.a_pts.iterrows():
        if point["frac"] > check.max_cost:
            continue
        pairs, pvalues, extra = {}, [], []
        for seed in sorted(cmp.a_seeds):  # every seed of the point; one B lacks is not compared (NaN)
            entry = cmp.a_seeds[seed].get(idx)
            if entry is None:
                continue
            # B's hull of that seed at that seed's own cost
            pairs[seed] = (entry[0], cmp.row_draws(entry[1]), *cmp.b_at(cmp.own_frac[entry[1]], seed))
            if view.metric == "bleu" and check.b_is_point:
                b_entry = cmp.b_seeds.get(seed, {}).get(cmp.b_pts.index[0])
                test = _sacrebleu(view, b_entry[1], entry[1]) if b_entry else None
                if test is not None:
                    pvalues.append(test["p_value"])
                    extra.append(f"s{seed}: p = {test['p_value']:.3f}")
        hull = "" if check.b_is_point else f"B: {hull_segment(cmp.b_pts, float(point['frac']), cmp.hib)}"
        items.append(_beats_item(cmp, f"{check.a.name} {point['knob_name']}={knob_label(point['knob_value'])} "
                                      f"({100 * point['frac']:.1f}%)", pairs, "; ".join(extra), pvalues,
                                 a_note=constant_prediction(view, point["keys"]), hull=hull))
    return items


def beats(view: TaskView, check: Beats, results_dir, recipe: str | None = None) -> CheckResult:
    """A is better than B by more than the check's margin: at each of the check's budgets (both sides' hulls),
    or at each A point up to ``max_cost`` (against B's hull at the point's cost, or against one B point)."""
    a_pts, b_pts = select_points(view, check.a, recipe), select_points(view, check.b, recipe)
    if a_pts.empty or b_pts.empty:
        missing = check.a.name if a_pts.empty else check.b.name
        return CheckResult(check.title or f"{check.a.name} vs {check.b.name}", check.quantifier,
                           [Item(f"no points of {missing}", "", "", math.nan, math.nan, math.nan, "", "", UNSURE,
                                 "no rows")], UNTESTED)  # nothing compared
    _require_one_b_point(check, b_pts)
    cmp = _Comparison.of(view, check, a_pts, b_pts)
    items = _budget_items(cmp) if check.budgets else _point_items(cmp)
    title = check.title or f"{check.a.name} better than {check.b.name}"
    return CheckResult(title, check.quantifier, items, combine([i.verdict for i in items], check.quantifier),
                       (check.a.name, check.b.name),
                       _point_keys(a_pts if check.budgets else a_pts[a_pts["frac"] <= check.max_cost], b_pts))


def _sacrebleu(view: TaskView, base_key: str, system_key: str) -> dict | None:
    """sacreBLEU's paired bootstrap test of one row against a baseline row (None without both outputs)."""
    base, system = view.unc.samples.get(base_key), view.unc.samples.get(system_key)
    if base is None or system is None or len(base) != len(system):
        return None
    texts = lambda frame, col: ["" if v != v else str(v) for v in frame[col]]  # noqa: E731
    return stats.sacrebleu_paired_test((texts(base, "prediction"), texts(base, "target")),
                                       (texts(system, "prediction"), texts(system, "target")))


def increases(view: TaskView, check: Increases, recipe: str | None = None) -> CheckResult:
    """Per selected point and seed: Spearman's ρ between two per-sample columns (``check.y`` against
    ``check.x``) with its paired bootstrap CI over the test examples, judged against ρ > 0."""
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
