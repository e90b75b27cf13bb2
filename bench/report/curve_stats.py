"""The numbers on the learning curves (:class:`bench.report.curve_data.Curve`): the gain from more steps
(:func:`step_gains`, :func:`doublings`: Δ with its paired 95% CI and each seed's own gain), every other
setting against the default configuration at the same steps (:func:`compare_settings`), and the verdicts
against a task's :class:`bench.claims.BaseTarget` by the claims' rule (:func:`quality_verdict`, the
doubling gain's in :func:`step_gain`): **met**, **missed** or **inconclusive**.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench import stats
from bench.report.curve_data import Curve, Point, config_defaults
from bench.report.verdicts import FAILS, HOLDS, seed_check, verdict

MET, MISSED, UNSURE = "met", "missed", "inconclusive"
AS_TARGET = {HOLDS: MET, FAILS: MISSED}  # the claims' verdicts, read as a target's


@dataclass
class Doubling:
    steps: int  # N; the gain is from N to ``to_steps`` (2N for a doubling)
    gain: float  # mean over the paired seeds
    low: float
    high: float
    verdict: str  # against the target's doubling gain ("" without one, or when not a doubling)
    seed_gains: dict[int, float] = field(default_factory=dict)
    to_steps: int = 0

    @property
    def is_doubling(self) -> bool:
        return self.to_steps == 2 * self.steps


def step_gain(curve: Curve, n: int, m: int, threshold: float | None) -> Doubling | None:
    """Δ = quality(m) − quality(n) (metric direction applied): the mean over the seeds with rows at both,
    with the paired bootstrap CI of the difference of seed means (both on one test set; otherwise no CI
    and the verdict is inconclusive), and each seed's own gain.  A doubling is judged against
    ``threshold`` by the claims' rule: met when the whole CI is below it and no seed's own gain reaches it
    (a seed that does makes it inconclusive, "seeds disagree")."""
    at = {steps: curve.rows[curve.rows["steps"] == steps].set_index("seed") for steps in (n, m)}
    seeds = sorted(set(at[n].index) & set(at[m].index))
    if not seeds:
        return None
    per_seed = {int(s): curve.sign() * (float(at[m].loc[s, "quality"]) - float(at[n].loc[s, "quality"]))
                for s in seeds}
    lo_keys = [at[n].loc[s, "row_key"] for s in seeds]
    hi_keys = [at[m].loc[s, "row_key"] for s in seeds]
    a, b = curve.unc.mean_draws(hi_keys), curve.unc.mean_draws(lo_keys)
    same_set = a is not None and b is not None and curve.unc.test_set[hi_keys[0]] == curve.unc.test_set[lo_keys[0]]
    low, high = stats.interval(curve.sign() * (a - b)) if same_set else (math.nan, math.nan)
    judged = ""
    if threshold is not None and m == 2 * n:  # below the threshold: the claims' verdict and seed rule on −Δ
        result, why = seed_check(verdict(-high, -low, -threshold), {s: -g for s, g in per_seed.items()}, -threshold)
        judged = AS_TARGET.get(result, UNSURE) + (f" ({why})" if why else "")
    return Doubling(n, float(np.mean(list(per_seed.values()))), low, high, judged, per_seed, m)


def doublings(curve: Curve, threshold: float | None) -> list[Doubling]:
    """The gain from N to 2N steps for every N whose 2N is on the curve (see :func:`step_gain`)."""
    have = set(curve.steps)
    found = [step_gain(curve, n, 2 * n, threshold) for n in curve.steps if 2 * n in have]
    return [d for d in found if d is not None]


def step_gains(curve: Curve, threshold: float | None) -> list[Doubling]:
    """The doublings and the gain between consecutive step counts that are not one (e.g. 10,000 ->
    18,000), in order of N; only doublings are judged against the target."""
    pairs = {(n, 2 * n) for n in curve.steps if 2 * n in set(curve.steps)}
    pairs |= set(zip(curve.steps[:-1], curve.steps[1:]))
    found = [step_gain(curve, n, m, threshold) for n, m in sorted(pairs)]
    return [d for d in found if d is not None]


@dataclass
class Comparison:
    """A non-default setting against the task's default configuration at the same base steps."""
    task: str
    setting: str
    steps: int
    delta: float  # mean over paired seeds of quality(setting) − quality(default), metric direction applied
    low: float
    high: float
    verdict: str  # "better" / "worse" than the default, or inconclusive (the CI includes 0, or no CI)
    seed_deltas: dict[int, float] = field(default_factory=dict)


def _same_examples(a: Curve, b: Curve) -> bool:
    """Whether two curves were evaluated on the same test examples: their first rows' per-sample files hold
    the same example indices, the same targets (references, labels) and, where both have them, the same
    sources."""
    first = [next((c.unc.samples[k] for k in c.rows["row_key"] if k in c.unc.samples), None) for c in (a, b)]
    if first[0] is None or first[1] is None or len(first[0]) != len(first[1]):
        return False
    if any(c not in f for c in ("index", "target") for f in first):
        return False
    columns = [c for c in ("index", "target", "source") if c in first[0] and c in first[1]]
    return all(
        first[0][c].astype(str).tolist() == first[1][c].astype(str).tolist() for c in columns)


def compare_settings(curves: list[Curve], results_dir: Path | str) -> list[Comparison]:
    """Every non-default curve against its task's default curve, at every step count both have: the
    difference of seed means over the seeds present in both, with one paired bootstrap over the test
    examples of all those rows (``stats.rows_uncertainty``).  The default curve is the one on the same
    dataset, or, for a setting that changes the training data (another ``dataset``), the one evaluated on
    the same test examples (:func:`_same_examples`)."""
    out = []
    for curve in curves:
        default = next((c for c in curves if c.is_default and c.task == curve.task and c.dataset == curve.dataset),
                       None)
        if curve.is_default:
            continue
        if default is None:
            default = next((c for c in curves if c.is_default and c.task == curve.task
                            and _same_examples(c, curve)), None)
        if default is None:  # e.g. a setting that changes the test set: listed, not compared
            out.append(Comparison(curve.task, curve.setting or curve.dataset, 0, math.nan, math.nan, math.nan,
                                  "not compared: no default-configuration curve on these test examples"))
            continue
        compared = len(out)
        for n in sorted(set(curve.steps) & set(default.steps)):
            at = [c.rows[c.rows["steps"] == n].set_index("seed") for c in (curve, default)]
            seeds = sorted(set(at[0].index) & set(at[1].index))
            if not seeds:
                continue
            both = pd.concat([a.loc[seeds].reset_index() for a in at], ignore_index=True)
            unc = stats.rows_uncertainty(both, results_dir)
            keys = [[a.loc[s, "row_key"] for s in seeds] for a in at]
            a, b = unc.mean_draws(keys[0]), unc.mean_draws(keys[1])
            same_set = a is not None and b is not None and unc.test_set[keys[0][0]] == unc.test_set[keys[1][0]]
            low, high = stats.interval(curve.sign() * (a - b)) if same_set else (math.nan, math.nan)
            per_seed = {int(s): curve.sign() * (float(at[0].loc[s, "quality"]) - float(at[1].loc[s, "quality"]))
                        for s in seeds}
            result, _ = seed_check(verdict(low, high, 0.0), per_seed, 0.0)  # the claims' rule, seeds included
            word = {HOLDS: "better", FAILS: "worse"}.get(result, UNSURE)
            out.append(Comparison(curve.task, curve.setting, n, float(np.mean(list(per_seed.values()))), low, high,
                                  word, per_seed))
        if len(out) == compared:  # e.g. a larger variant trained with other budgets: listed, not compared
            out.append(Comparison(curve.task, curve.setting, 0, math.nan, math.nan, math.nan,
                                  "not compared: no default-configuration point at the same steps and seed "
                                  f"(this setting's steps: {', '.join(str(n) for n in curve.steps)})"))
    return out


def control_steps(curve: Curve) -> int | None:
    """The equal-budget control's dense steps (the default base's plus a method's, ``method_steps``), or None
    for a task without a method budget or a curve that is not the default configuration's."""
    extra = config_defaults(curve.task).get("method_steps")
    if not curve.is_default or not curve.default_steps or extra is None:
        return None
    return curve.default_steps + int(extra)


def below(low: float, high: float, threshold: float) -> str:
    """Whether a quantity is below ``threshold`` at 95% (the claims' rule on its negation): met / missed /
    inconclusive (no CI: inconclusive)."""
    return AS_TARGET.get(verdict(-high, -low, -threshold), UNSURE)


def quality_verdict(curve: Curve, point: Point, threshold: float) -> str:
    """Whether a point reaches ``threshold`` in the metric's direction at 95% (the claims' rule)."""
    s = curve.sign()
    low, high = sorted((s * point.low, s * point.high))
    return AS_TARGET.get(verdict(low, high, s * threshold), UNSURE)
