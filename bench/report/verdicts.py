"""The claims' verdicts and the records of a check: the verdict words, the rule that turns a 95% CI into one
(:func:`verdict`), the seed rule that downgrades it (:func:`seed_check`), how lines combine into a check and
checks into a claim (:func:`combine`), and a check's lines (:class:`Item`, with its tests :class:`Test`)
and result (:class:`CheckResult`).  The claims page (``bench/report/claims.py``) prints the rules in full
(:data:`bench.report.claims.RULES`); the curves pages judge their targets by the same rule.

* :func:`verdict`: **holds** when the whole CI lies above what the line needs, **does not hold** when it
  lies below, **inconclusive** when it contains it (or there is no CI).
* :func:`seed_check`: a decided verdict becomes inconclusive when a seed's own value contradicts it
  ("seeds disagree"), when a seed could not be checked (its value is NaN), or, with enough seeds, when the
  t-interval over the per-seed values contains what the line needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bench import stats
from bench.report.page import NA

HOLDS, FAILS, UNSURE = "holds", "does not hold", "inconclusive"
UNTESTED = "not tested"  # no row matches a selection: nothing was compared


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
    """One line of a check: where it was read, the two sides (``b`` empty for a threshold or a correlation),
    the number judged (Δ for a comparison) with its 95% CI, what the line needs, the per-seed values and
    the verdict."""

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
    """A check's lines, combined under its quantifier ("all" or "any") into its verdict."""

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



def verdict(lo: float, hi: float, need: float) -> str:
    """The verdict of a 95% CI [lo, hi] against what a line needs (see the module docstring)."""
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
    """A value with its 95% CI, e.g. "0.8612 [0.8550, 0.8671]" (the value alone without a CI, NA without a
    value); ``sign``: with an explicit sign, for a difference."""
    fmt = ("+" if sign else "") + spec
    if not math.isfinite(value):
        return NA
    text = format(value, fmt)
    return text if not (math.isfinite(lo) and math.isfinite(hi)) else f"{text} [{lo:{fmt}}, {hi:{fmt}}]"
