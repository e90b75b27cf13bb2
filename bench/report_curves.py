"""Learning curves of the dense base models: the evidence behind each task's offline default budget.

``bench report`` reads the rows under ``<results_dir>/curves/`` (dense base models trained with
different ``<task>.train_steps``, written there by ``bench run ... results_dir=results/curves``) and the
leaderboard's dense base rows of each task's default configuration made under today's training protocol
(``<results_dir>/<task>/dense``: every seed of the base the methods start from is a point of the default
curve), and writes ``reports/curves.md`` (and ``.html``) and one figure per task,
``reports/curves_<task>.png``.

What the page answers, per task and dataset (rows that differ in anything but ``train_steps`` are
separate curves):

* quality against base steps: the seed mean with its two-level bootstrap 95% CI (seeds, then test
  examples; ``bench.stats``, paired: every row of a curve is resampled with the same examples);
* the gain from more steps: from each N to 2N when both were run (the doublings the target judges), and
  between consecutive step counts otherwise: Δ = quality(larger) − quality(smaller), the metric's
  direction applied, with its paired 95% CI;
* every other setting (e.g. ``iwslt.dropout=0.3``) against the default configuration at the same steps:
  Δ with one paired bootstrap over both curves' rows, better / worse / inconclusive by the claims' rule
  (seeds included), so that a calibration choice between settings rests on a CI, not on two point values;
  a setting that changes the training data (its rows name another dataset, e.g. ``iwslt.ding_phrases``)
  is compared with the default curve evaluated on the same test examples;
* the task's declared :class:`bench.claims.BaseTarget` (``BASE_TARGET`` in ``tasks/<name>/claims.py``):
  a quality threshold (e.g. WER ≤ 0.30) and/or a doubling gain below which the base counts as trained
  to saturation, and the training time allowed.  Verdicts use the claims' rule
  (``bench.report_claims``): **met** when the whole 95% CI is on the target's side, **missed** when it is
  wholly on the other side, **inconclusive** otherwise.  The training time is the rows' ``train_time_s``:
  the wall clock recorded in the base model's checkpoint by the run that trained it; a point trained more
  than once (other seeds, or the same seed again in another session) is judged on its longest training,
  a worst case on a shared machine, and the page lists every training.  With ``equal_budget_control``, the
  dense model trained for ``train_steps + method_steps`` (the control) must gain less over the default base
  than the base's seed spread (max − min over its seeds): met when the upper end of the paired 95% CI of
  control − base is below the spread and no seed's own Δ reaches it, missed when the lower end is above
  it, inconclusive otherwise.  The CI covers the test examples, as everywhere on the page; the seed
  spread is the yardstick the calibration asks for, derived from the base's own seeds.

Only rows made under today's training protocol count.  Rows of one curve are one per (steps, seed), the
latest: a re-evaluation of the same model (another ``threads``, ``timing``) and a re-training of the same
point (a calibration row and the leaderboard's base of the same seed) both keep the latest row's quality.
A doubling gain pairs the seeds that have rows at both N and 2N, on one test set, and lists each seed's
own gain beside the mean; a seed whose own gain reaches the target's makes "met" inconclusive (the
claims' seed rule).  Only the default configuration's curve (every
key at the task's default but ``train_steps``) is judged against the target.  The default budget (the
task's ``train_steps`` default in its config dataclass) is marked on each curve.  A key added to the task
after a row was made is read as its default (options are added with the earlier behaviour as default).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from bench import results, stats
from bench.report_page import markdown_table, md_escape, write_page
from bench.report_verdicts import FAILS, HOLDS, seed_check, verdict

MET, MISSED, UNSURE = "met", "missed", "inconclusive"
AS_TARGET = {HOLDS: MET, FAILS: MISSED}  # the claims' verdicts, read as a target's
CURVES_DIR = "curves"


class Training(NamedTuple):
    """One training of a curve's point: its wall minutes (the row's ``train_time_s``) and the processor it
    ran on (the row's ``device``, without its ``cpu:`` prefix): the 60-min targets are wall clock on 2 cores,
    and the same configuration's time depends on which processor those are."""
    minutes: float
    device: str


DEFAULT_SETTING = "default configuration"


def _device(value: object) -> str:
    """The processor a row's ``device`` names (``cpu: <model>`` → ``<model>``); "" when it names none (a bare
    ``cpu``, or no value)."""
    text = "" if pd.isna(value) else str(value).strip()
    kind, _, model = text.partition(":")
    return model.strip() if model else ("" if kind.lower() in ("", "cpu", "cuda") else text)


@dataclass
class Curve:
    task: str
    dataset: str
    metric: str
    higher_is_better: bool
    setting: str  # the config keys (beside train_steps) that set this curve apart, "" if it is the only one
    rows: "object"  # DataFrame: the curve's latest rows
    default_steps: int | None
    is_default: bool = True  # every other key at the task's default (the targets apply to this curve only)
    setting_key: str = ""
    unc: stats.Uncertainty = field(default_factory=stats.Uncertainty)
    train_minutes: dict[int, list[Training]] = field(default_factory=dict)  # steps -> every training

    @property
    def steps(self) -> list[int]:
        return sorted({int(s) for s in self.rows["steps"]})

    def keys(self, steps: int) -> list[str]:
        return list(self.rows.loc[self.rows["steps"] == steps, "row_key"])

    def sign(self) -> float:
        return 1.0 if self.higher_is_better else -1.0


def train_steps(budget: str) -> int | None:
    """The base steps of a dense row's ``train_budget`` ("18760 steps x batch 128 (...)")."""
    match = re.match(r"\s*(\d+) steps", str(budget))
    return int(match.group(1)) if match else None


def _config_defaults(task: str) -> dict[str, object]:
    """The default of every key of the task's config dataclass ({} for an unregistered task)."""
    from dataclasses import MISSING

    from bench import registry

    try:
        spec = registry.task_spec(task)
    except registry.RegistryError:
        return {}
    return {f.name: f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default
            for f in fields(spec.config)}


def task_defaults(task: str) -> dict[str, str]:
    """The task's config defaults as a curve setting (``<task>.<key>`` -> str), with the dense base size."""
    out = {f"{task}.{k}": str(v) for k, v in _config_defaults(task).items() if k != "train_steps"}
    if not out:
        return {}
    return {**out, "dense.width": "1.0", "dense.depth": "1.0", "eval_limit": "0",
            **{k: str(v) for k, v in results.IMPLICIT_DEFAULTS.items()}}


def default_train_steps(task: str) -> int | None:
    steps = _config_defaults(task).get("train_steps")
    return None if steps is None else int(steps)


def base_target(task: str):
    """The task's declared ``BASE_TARGET`` (in its claims module), or None."""
    import importlib

    from bench import registry
    from bench.report_claims import claims_path

    try:
        path = claims_path(registry.task_spec(task))
    except registry.RegistryError:
        return None
    if not path:
        return None
    module = importlib.import_module(path.partition(":")[0])
    target = getattr(module, "BASE_TARGET", None)
    # a module serves every task registered from its package (iwslt and wmt): the target names its task
    return target if target is not None and target.task == task else None


def _curve_setting(config: dict, task: str) -> dict[str, str]:
    """What, beside ``train_steps``, decides a dense base row and its test set: the task section, the dense
    size, the training precision and ``eval_limit`` (threads, paths and timing change neither)."""
    # a key the row's config lacks was added to the task after the row was made: options are added with
    # the behaviour before them as their default, so the row had that default
    stored = {**_config_defaults(task), **(config.get(task) or {})}
    section = {f"{task}.{k}": str(v) for k, v in stored.items() if k != "train_steps"}
    size = {f"dense.{k}": str(v) for k, v in (config.get("dense") or {}).items()}
    run = {k: str(config.get(k, d)) for k, d in {**results.IMPLICIT_DEFAULTS, "eval_limit": 0}.items()}
    return {**section, **size, **run}


def _is_default(setting: dict[str, str], task: str) -> bool:
    """Whether a curve setting is the task's default configuration (every key at its default)."""
    defaults = task_defaults(task)
    return bool(defaults) and all(setting.get(k) == v for k, v in defaults.items())


def load_curves(results_dir: Path | str) -> list[Curve]:
    """The curves under ``<results_dir>/curves``, with the leaderboard's default dense bases of today's
    protocol: dense rows grouped by (task, dataset, setting)."""
    import yaml

    from bench.report_views import latest_rows, protocol_versions

    curve_rows = results.load(Path(results_dir) / CURVES_DIR).assign(leaderboard=False)
    if curve_rows.empty:
        return []
    # a method's rows under curves are method-budget curves (bench/report_method_budget.py), not these
    curve_rows = curve_rows[curve_rows["method"] == "dense"]
    if curve_rows.empty:
        return []
    board = results.load(results_dir)
    curve_sets = set(zip(curve_rows["task"], curve_rows["dataset"]))  # only where a curve exists, on its data
    board = board[pd.Series([pair in curve_sets for pair in zip(board["task"], board["dataset"])],
                            index=board.index, dtype=bool)]
    frame = pd.concat([curve_rows, board.assign(leaderboard=True)], ignore_index=True)
    frame = frame[(frame["method"] == "dense") & (protocol_versions(frame) == results.PROTOCOL_VERSION)].copy()
    if frame.empty:
        return []
    frame["steps"] = frame["train_budget"].map(train_steps)
    frame = frame[frame["steps"].notna()].reset_index(drop=True)
    by_key: dict[str, dict[str, str]] = {}  # setting hash -> setting
    keys = []
    for row in frame.to_dict("records"):
        path = Path(row["row_file"])
        config_path = path.with_name(path.name[:-len(".csv")] + ".config.yaml")
        config = yaml.safe_load(config_path.read_text()) if config_path.exists() else {}
        setting = _curve_setting(config or {}, row["task"])
        keys.append(results.stable_hash(setting))
        by_key[keys[-1]] = setting
    frame["setting_key"] = keys
    # the leaderboard's dense rows join only as the default configuration's base (its other sizes and
    # evaluation sets are not points of a learning curve)
    on_default = [_is_default(by_key[k], str(t)) for k, t in zip(frame["setting_key"], frame["task"])]
    frame = frame[~frame["leaderboard"] | pd.Series(on_default, index=frame.index)].copy()
    # every training of a point counts for its time, before re-runs are reduced to the latest row: the same
    # model trained again (another session, another machine load) is another measurement of the same budget
    timed = (frame.dropna(subset=["train_time_s"])
             .drop_duplicates(["task", "dataset", "setting_key", "steps", "seed", "train_time_s"]))
    trainings: dict[tuple, list[Training]] = {}
    for key, group in timed.groupby(["task", "dataset", "setting_key", "steps"]):
        devices = group["device"] if "device" in group else [""] * len(group)
        trainings[key] = sorted(Training(float(t) / 60.0, _device(d))
                                for t, d in zip(group["train_time_s"], devices))
    frame = latest_rows(frame)
    # one row per (curve, steps, seed), the latest: a re-evaluation (other threads/timing) or a re-training
    frame = frame.sort_values("timestamp", kind="stable").drop_duplicates(
        ["task", "dataset", "setting_key", "steps", "seed"], keep="last")
    curves = []
    for (task, dataset), group in frame.groupby(["task", "dataset"], sort=True):
        keys = sorted(set(group["setting_key"]))
        defaults_here = sum(_is_default(by_key[k], str(task)) for k in keys)
        for key in keys:
            rows = group[group["setting_key"] == key].reset_index(drop=True)
            is_default = _is_default(by_key[key], str(task))
            # a setting is named by the keys it changes from the task's defaults (or, failing those, by the
            # keys that differ between the curves of this dataset); the default configuration by that name
            # when other curves share its dataset, by none when it is the only one
            if is_default and defaults_here == 1:
                setting = DEFAULT_SETTING if len(keys) > 1 else ""
            else:  # (several "default" curves differ in keys the task no longer declares: named by those)
                defaults = {} if is_default else task_defaults(str(task))
                others = [by_key[k] for k in keys]
                differing = (sorted(k for k in by_key[key] if k in defaults and defaults[k] != by_key[key][k])
                             or sorted(k for k in by_key[key] if len({o.get(k) for o in others}) > 1))
                setting = ", ".join(f"{k}={by_key[key][k]}" for k in differing)
            first = rows.iloc[0]
            minutes = {int(n): trainings.get((task, dataset, key, n), []) for n in set(rows["steps"])}
            curves.append(Curve(task=str(task), dataset=str(dataset), metric=str(first["metric"]),
                                higher_is_better=bool(first["higher_is_better"]), setting=setting, rows=rows,
                                train_minutes=minutes,
                                default_steps=default_train_steps(str(task)), is_default=is_default,
                                setting_key=key))
    for curve in curves:
        curve.unc = stats.rows_uncertainty(curve.rows, results_dir)
    return curves


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------
@dataclass
class Point:
    steps: int
    quality: float
    low: float
    high: float
    seeds: list[int]
    seed_values: list[float]
    train_minutes: float  # the longest training of the point
    trainings: list[Training] = field(default_factory=list)  # every training (re-runs included)


def points(curve: Curve) -> list[Point]:
    out = []
    for steps in curve.steps:
        rows = curve.rows[curve.rows["steps"] == steps].sort_values("seed")
        low, high = curve.unc.ci(list(rows["row_key"]))
        trainings = curve.train_minutes.get(steps, [])
        out.append(Point(steps=steps, quality=float(rows["quality"].mean()), low=low, high=high,
                         seeds=[int(s) for s in rows["seed"]], seed_values=[float(q) for q in rows["quality"]],
                         train_minutes=max((t.minutes for t in trainings), default=math.nan),
                         trainings=trainings))
    return out


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


def _gain(curve: Curve, n: int, m: int, threshold: float | None) -> Doubling | None:
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
    """The gain from N to 2N steps for every N whose 2N is on the curve (see :func:`_gain`)."""
    have = set(curve.steps)
    found = [_gain(curve, n, 2 * n, threshold) for n in curve.steps if 2 * n in have]
    return [d for d in found if d is not None]


def step_gains(curve: Curve, threshold: float | None) -> list[Doubling]:
    """The doublings and the gain between consecutive step counts that are not one (e.g. 10,000 ->
    18,000), in order of N; only doublings are judged against the target."""
    pairs = {(n, 2 * n) for n in curve.steps if 2 * n in set(curve.steps)}
    pairs |= set(zip(curve.steps[:-1], curve.steps[1:]))
    found = [_gain(curve, n, m, threshold) for n, m in sorted(pairs)]
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
    extra = _config_defaults(curve.task).get("method_steps")
    if not curve.is_default or not curve.default_steps or extra is None:
        return None
    return curve.default_steps + int(extra)


def control_check(curve: Curve, default: Point | None) -> list[str]:
    """Whether the equal-budget control gains less over the default base than the base's seed spread (see
    the module docstring): Δ = control − base, the mean over the seeds both have, with its paired CI over
    test examples and each seed's own Δ; the spread is max − min over the base's seeds (two or more)."""
    control = control_steps(curve)
    name = "the equal-budget control gains less than the base's seed spread"
    if default is None or control is None:
        return [name, "n/a", "not run"]
    name = f"{name} ({control} steps)"
    gain = _gain(curve, curve.default_steps, control, None) if control in curve.steps else None
    if gain is None:
        return [name, "n/a", f"not run ({control} steps, a seed the base has)"]
    spread = max(default.seed_values) - min(default.seed_values)
    value = (f"Δ = {_fmt(gain.gain, curve.metric)} [{_fmt(gain.low, curve.metric)}, {_fmt(gain.high, curve.metric)}]"
             f" ({', '.join(f's{s}: {_fmt(g, curve.metric)}' for s, g in gain.seed_gains.items())}); "
             f"base seed spread {_fmt(spread, curve.metric)} over {len(default.seeds)} seed(s)")
    if len(default.seeds) < 2:
        return [name, value, "inconclusive: the spread needs two seeds of the base"]
    # below the spread is above its negation: the claims' verdict and seed rule on −Δ against −spread
    result, why = seed_check(verdict(-gain.high, -gain.low, -spread), {s: -g for s, g in gain.seed_gains.items()},
                             -spread)
    return [name, value, AS_TARGET.get(result, UNSURE) + (f" ({why})" if why else "")]


def below(low: float, high: float, threshold: float) -> str:
    """Whether a quantity is below ``threshold`` at 95% (the claims' rule on its negation): met / missed /
    inconclusive (no CI: inconclusive)."""
    return AS_TARGET.get(verdict(-high, -low, -threshold), UNSURE)


def quality_verdict(curve: Curve, point: Point, threshold: float) -> str:
    """Whether a point reaches ``threshold`` in the metric's direction at 95% (the claims' rule)."""
    s = curve.sign()
    low, high = sorted((s * point.low, s * point.high))
    return AS_TARGET.get(verdict(low, high, s * threshold), UNSURE)


# ---------------------------------------------------------------------------------------------
# Page and figures
# ---------------------------------------------------------------------------------------------
def _fmt(value: float, metric: str) -> str:
    return "n/a" if not math.isfinite(value) else (f"{value:.2f}" if metric == "bleu" else f"{value:.4f}")


def _slug(curve: Curve, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """File-name part of a curve: the task for its default configuration (the first such curve of the task:
    not in ``taken``, the slugs given so far), else the task and a stable hash of the curve's setting (and
    dataset)."""
    if curve.is_default and curve.setting in ("", DEFAULT_SETTING) and curve.task not in taken:
        return curve.task
    return f"{curve.task}_{results.stable_hash([curve.dataset, curve.setting_key], 8)}"


def plot_curve(curve: Curve, pts: list[Point], target, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.figures import save_figure

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    control = next((p for p in pts if p.steps == control_steps(curve)), None)
    pts = [p for p in pts if p is not control]  # the control is a marker of its own, not a curve point
    x = [p.steps for p in pts]
    y = [p.quality for p in pts]
    err = np.array([[p.quality - p.low if math.isfinite(p.low) else 0.0 for p in pts],
                    [p.high - p.quality if math.isfinite(p.high) else 0.0 for p in pts]])
    ax.errorbar(x, y, yerr=err, marker="o", color="#1f77b4", capsize=3, label="seed mean, 95% CI (test examples)")
    for p in pts:
        if len(p.seed_values) > 1:
            ax.scatter([p.steps] * len(p.seed_values), p.seed_values, s=10, color="#1f77b4", alpha=0.4,
                       zorder=1)
    if curve.default_steps in x:
        i = x.index(curve.default_steps)
        ax.scatter([x[i]], [y[i]], s=140, facecolors="none", edgecolors="black", zorder=3,
                   label=f"default ({curve.default_steps} steps)" if curve.is_default
                   else f"the default's steps ({curve.default_steps})")
    if control is not None:
        ax.errorbar([control.steps], [control.quality],
                    yerr=[[control.quality - control.low if math.isfinite(control.low) else 0.0],
                          [control.high - control.quality if math.isfinite(control.high) else 0.0]],
                    marker="^", color="#ff7f0e", capsize=3, linestyle="none",
                    label=f"equal-budget control ({control.steps} steps)")
    if target is not None and target.quality is not None:
        ax.axhline(target.quality, color="#d62728", linestyle="--", linewidth=1,
                   label=f"target {'≥' if curve.higher_is_better else '≤'} {target.quality:g}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(x)
    ax.set_xticklabels([str(s) for s in x], rotation=30)
    ax.minorticks_off()
    ax.set_xlabel("dense base training steps (log scale)")
    ax.set_ylabel(f"{curve.metric} {'↑' if curve.higher_is_better else '↓'}")
    dataset = curve.dataset if len(curve.dataset) <= 70 else curve.dataset[:67] + "..."
    title = f"{curve.task}: dense base learning curve\n{dataset}"  # the dataset actually used
    ax.set_title(title + (f"\n{curve.setting}" if curve.setting else ""), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    save_figure(fig, path)
    plt.close(fig)
    return path


def training_list(runs: list[Training]) -> str:
    """The time target's detail: every training's minutes when there are several, each with its processor
    when they ran on different ones (the verdict is the longest's, whichever processor it ran on)."""
    devices = {t.device for t in runs}
    if len(devices) > 1:
        return (f" (the longest of {len(runs)} trainings: "
                + ", ".join(f"{t.minutes:.1f} min on {t.device or 'an unrecorded device'}" for t in runs) + ")")
    on = f"on {runs[0].device}" if runs and runs[0].device else ""
    if len(runs) > 1:
        return (f" (the longest of {len(runs)} trainings: {', '.join(f'{t.minutes:.1f}' for t in runs)} min"
                + (f", {on})" if on else ")"))
    return f" ({on})" if on else ""


def curve_section(curve: Curve, slug: str, target) -> tuple[list[str], dict]:
    pts = points(curve)
    gain_threshold = None if target is None or not curve.is_default else target.doubling_gain
    doubles = step_gains(curve, gain_threshold)
    arrow = "↑" if curve.higher_is_better else "↓"
    # the processors or GPUs of every training of the curve's points (the rows' ``device``); a device the rows
    # do not name (a bare ``cpu``) is listed as such beside named ones, and alone names none
    named = {t.device for runs in curve.train_minutes.values() for t in runs}
    devices = [] if not named - {""} else sorted(d or "an unrecorded device" for d in named)
    lines = [f"## {md_escape(curve.task)}" + (f" — {md_escape(curve.setting)}" if curve.setting else ""), "",
             f"Dataset: {md_escape(curve.dataset)}. Metric: {curve.metric} {arrow}."
             + (f" Curve setting: {md_escape(curve.setting)}." if curve.setting else "")
             + (f" Trained on: {md_escape(', '.join(devices))}." if devices else ""), "",
             f"![{curve.task} learning curve](curves_{slug}.png)", ""]
    table = []
    for p in pts:
        label = {curve.default_steps: " (default)" if curve.is_default else " (the default's steps)",
                 control_steps(curve): " (equal-budget control)"}.get(p.steps, "")
        table.append([str(p.steps) + label,
                      f"{_fmt(p.quality, curve.metric)} [{_fmt(p.low, curve.metric)}, {_fmt(p.high, curve.metric)}]",
                      ", ".join(f"s{s}: {_fmt(v, curve.metric)}" for s, v in zip(p.seeds, p.seed_values)),
                      f"{p.train_minutes:.1f}" if math.isfinite(p.train_minutes) else "n/a"])
    lines += [markdown_table(["base steps", f"{curve.metric} [95% CI]", "per seed", "training minutes (longest)"],
                             table), ""]
    if doubles:
        rows = [[f"{d.steps} → {d.to_steps}", f"{_fmt(d.gain, curve.metric)} [{_fmt(d.low, curve.metric)}, "
                 f"{_fmt(d.high, curve.metric)}]",
                 ", ".join(f"s{s}: {_fmt(g, curve.metric)}" for s, g in d.seed_gains.items())]
                + ([f"< {gain_threshold:g}" if d.is_doubling else "— (not a doubling)", d.verdict or "—"]
                   if gain_threshold is not None else [])
                for d in doubles]
        header = ["steps", "gain Δ [95% CI]", "per seed"] + (["target", "verdict"] if gain_threshold is not None else [])
        lines += ["Gain from more steps (Δ = quality at the larger − quality at the smaller step count, the "
                  "metric's direction applied; over the seeds both step counts have, so it can differ from the difference of "
                  "the table's seed means above; paired over test examples; the target judges doublings, N → 2N):",
                  "", markdown_table(header, rows), ""]
    summary = {"task": curve.task, "default": curve.default_steps, "checks": []}
    default = next((p for p in pts if p.steps == curve.default_steps), None)
    if target is not None and not curve.is_default:
        lines += ["Not the task's default configuration: the default's targets are not judged here.", ""]
    if target is not None and curve.is_default:
        checks = []
        if target.quality is not None:
            sign = "≥" if curve.higher_is_better else "≤"
            verdict = quality_verdict(curve, default, target.quality) if default else "not run"
            value = f"{_fmt(default.quality, curve.metric)} [{_fmt(default.low, curve.metric)}, " \
                    f"{_fmt(default.high, curve.metric)}]" if default else "n/a"
            checks.append([f"{curve.metric} {sign} {target.quality:g} at the default", value, verdict])
        if target.doubling_gain is not None:
            d = next((d for d in doubles if d.steps == curve.default_steps and d.is_doubling), None)
            value = f"{_fmt(d.gain, curve.metric)} [{_fmt(d.low, curve.metric)}, {_fmt(d.high, curve.metric)}]" \
                if d else "n/a"
            if d:
                verdict = d.verdict
            elif not curve.default_steps:
                verdict = "not run"
            elif default and target.minutes and 2 * default.train_minutes > target.minutes:
                verdict = (f"out of reach: {2 * curve.default_steps} steps would take about "
                           f"{2 * default.train_minutes:.0f} min (twice the default's), over the "
                           f"{target.minutes:g}-min limit; the gains up to the default are in the task's 'Gain from more steps' "
                           "table")
            else:
                verdict = f"not run ({2 * curve.default_steps} steps)"
            checks.append([f"doubling the default gains < {target.doubling_gain:g}", value, verdict])
        if target.equal_budget_control:
            checks.append(control_check(curve, default))
        if target.minutes:
            minutes = default.train_minutes if default else math.nan
            known = math.isfinite(minutes)
            runs = default.trainings if default else []
            value = f"{minutes:.1f} min" + training_list(runs)
            checks.append([f"base trains in ≤ {target.minutes:g} min", value if known else "n/a",
                           (MET if minutes <= target.minutes else MISSED) if known else
                           UNSURE if default else "not run"])
        lines += [f"Target ({md_escape(target.source)}):", "",
                  markdown_table(["target", "value [95% CI]", "verdict"], checks), ""]
        summary["checks"] = checks
    return lines, {**summary, "points": pts}


def write(results_dir: Path | str, reports_dir: Path | str,
          budget: tuple[list[str], list[str]] | None = None) -> list[str]:
    """Write reports/curves.{md,html} and one figure per curve; ``budget``: the method-budget curves' section
    and its figures (``bench.report_method_budget.section``), placed at the end.  [] when there is nothing."""
    curves = load_curves(results_dir)
    budget_lines, budget_figures = budget or ([], [])
    if not curves and not budget_lines:
        return []
    out = Path(reports_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Learning curves of the dense base models", "",
             f"Generated by `python -m bench report` from the rows under `{results_dir}/{CURVES_DIR}/`: dense "
             "base models of one task configuration trained for different `<task>.train_steps`; and from the "
             f"leaderboard's dense base rows of each task's default configuration (`{results_dir}/<task>/dense`, "
             f"training protocol {results.PROTOCOL_VERSION}), the models every method starts from. Re-create a "
             "point with the row's `command`; e.g. `python -m bench run method=dense task=imagenet "
             "imagenet.train_steps=37520 results_dir=results/curves timing=false threads=2`. Method rows under "
             f"`{results_dir}/{CURVES_DIR}/` (other `<task>.method_steps`) are the method-budget curves at the "
             "end of the page.", "",
             f"Uncertainty: two-level bootstrap of the seed mean ({stats.N_RESAMPLES} resamples, percentile, "
             "paired within a curve; `scipy.stats.bootstrap`): the seeds, then the test examples; with fewer than "
             f"{stats.MIN_SEEDS} seeds it covers the test set only (docs/measurement.md, \"Statistics\"). "
             "A target is **met** when the whole 95% CI is on its side, **missed** when the whole CI is on the "
             "other side, **inconclusive** otherwise. Training minutes: the row's `train_time_s`, the wall "
             "clock the run that trained the base recorded in its checkpoint. A seed trained more than once (e.g. "
             "a calibration run and the leaderboard's base) shows the latest training's quality; for time, "
             "every training of a point counts, the longest decides (a worst case: the machine is shared, so "
             "the same training takes different times in different sessions), and the time target lists "
             "them all, with the processor they ran on (the row's `device`; sessions do not always get the same "
             "processor model, and the same training's time depends on it). Only rows of today's training "
             "protocol count.", ""]
    summary_rows, sections, written, slugs = [], [], [], set()
    for curve in curves:
        slug = _slug(curve, slugs)
        slugs.add(slug)
        target = base_target(curve.task)
        section, summary = curve_section(curve, slug, target)
        sections += section
        written.append(str(plot_curve(curve, summary["points"], target, out / f"curves_{slug}.png")))
        for check in summary["checks"]:
            summary_rows.append([curve.task + (f" ({curve.setting})" if curve.setting else ""),
                                 str(curve.default_steps), *check])
    if summary_rows:
        lines += ["## Summary", "", markdown_table(["task", "default steps", "target", "value [95% CI]",
                                                    "verdict"], summary_rows), ""]
    comparisons = compare_settings(curves, results_dir)
    if comparisons:
        lines += ["## Settings against the default", "",
                  "Δ = quality of the setting − quality of the task's default configuration at the same base "
                  "steps (the metric's direction applied: Δ > 0 is better), over the seeds both have, paired "
                  "over test examples; **better** / **worse** when the 95% CI excludes 0, **inconclusive** "
                  "otherwise.", "",
                  markdown_table(["task", "setting", "base steps", "Δ [95% CI]", "per seed", "verdict"],
                                 [[c.task, c.setting, str(c.steps) if c.steps else "—",
                                   f"{c.delta:+.4g} [{c.low:+.4g}, {c.high:+.4g}]" if c.steps else "—",
                                   ", ".join(f"s{s}: {d:+.4g}" for s, d in sorted(c.seed_deltas.items())),
                                   c.verdict] for c in comparisons]), ""]
    lines += sections + budget_lines
    return written + budget_figures + write_page(out, "curves", "\n".join(lines).rstrip() + "\n",
                                "Learning curves of the dense base models")
