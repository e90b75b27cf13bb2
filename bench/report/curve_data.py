"""The learning curves' rows: the dense base rows under ``<results_dir>/curves/`` and the leaderboard's
default dense bases of today's protocol, grouped into one :class:`Curve` per (task, dataset, setting)
(:func:`load_curves`), each step count's seed mean with its 95% CI (:func:`points`), the task's
configuration defaults and its declared :class:`bench.claims.BaseTarget` (:func:`base_target`).  What the
curves page makes of them: ``bench/report/curves.py`` (the rules in its docstring).
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from bench import registry, results, stats
from bench.report.claims import claims_path
from bench.report.views import latest_rows, protocol_versions

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


def config_defaults(task: str) -> dict[str, object]:
    """The default of every key of the task's config dataclass ({} for an unregistered task)."""
    try:
        spec = registry.task_spec(task)
    except registry.RegistryError:
        return {}
    return {f.name: f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default
            for f in fields(spec.config)}


def task_defaults(task: str) -> dict[str, str]:
    """The task's config defaults as a curve setting (``<task>.<key>`` -> str), with the dense base size."""
    out = {f"{task}.{k}": str(v) for k, v in config_defaults(task).items() if k != "train_steps"}
    if not out:
        return {}
    return {**out, "dense.width": "1.0", "dense.depth": "1.0", "eval_limit": "0",
            **{k: str(v) for k, v in results.IMPLICIT_DEFAULTS.items()}}


def default_train_steps(task: str) -> int | None:
    steps = config_defaults(task).get("train_steps")
    return None if steps is None else int(steps)


def base_target(task: str):
    """The task's declared ``BASE_TARGET`` (in its claims module), or None."""
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
    stored = {**config_defaults(task), **(config.get(task) or {})}
    section = {f"{task}.{k}": str(v) for k, v in stored.items() if k != "train_steps"}
    size = {f"dense.{k}": str(v) for k, v in (config.get("dense") or {}).items()}
    run = {k: str(config.get(k, d)) for k, d in {**results.IMPLICIT_DEFAULTS, "eval_limit": 0}.items()}
    return {**section, **size, **run}


def _is_default(setting: dict[str, str], task: str) -> bool:
    """Whether a curve setting is the task's default configuration (every key at its default)."""
    defaults = task_defaults(task)
    return bool(defaults) and all(setting.get(k) == v for k, v in defaults.items())


def _dense_rows(results_dir: Path | str) -> pd.DataFrame | None:
    """The dense rows of today's protocol that have a step count: those under ``<results_dir>/curves`` and
    the leaderboard's of every (task, dataset) with a curve (column ``leaderboard``); None without any."""
    curve_rows = results.load(Path(results_dir) / CURVES_DIR).assign(leaderboard=False)
    if curve_rows.empty:
        return None
    # a method's rows under curves are method-budget curves (bench/report/method_budget.py), not these
    curve_rows = curve_rows[curve_rows["method"] == "dense"]
    if curve_rows.empty:
        return None
    board = results.load(results_dir)
    curve_sets = set(zip(curve_rows["task"], curve_rows["dataset"]))  # only where a curve exists, on its data
    board = board[pd.Series([pair in curve_sets for pair in zip(board["task"], board["dataset"])],
                            index=board.index, dtype=bool)]
    frame = pd.concat([curve_rows, board.assign(leaderboard=True)], ignore_index=True)
    frame = frame[(frame["method"] == "dense") & (protocol_versions(frame) == results.PROTOCOL_VERSION)].copy()
    if frame.empty:
        return None
    frame["steps"] = frame["train_budget"].map(train_steps)
    return frame[frame["steps"].notna()].reset_index(drop=True)


def _setting_keys(frame) -> tuple[list[str], dict[str, dict[str, str]]]:
    """Each row's setting key (a stable hash of its :func:`_curve_setting`, read from the row's config file)
    and the setting of every key."""
    by_key: dict[str, dict[str, str]] = {}  # setting hash -> setting
    keys = []
    for row in frame.to_dict("records"):
        setting = _curve_setting(results.row_config(row["row_file"]), row["task"])
        keys.append(results.stable_hash(setting))
        by_key[keys[-1]] = setting
    return keys, by_key


def _trainings(frame) -> dict[tuple, list[Training]]:
    """(task, dataset, setting key, steps) -> every training of that point, shortest first: taken before
    re-runs are reduced to the latest row, since the same model trained again (another session, another
    machine load) is another measurement of the same budget."""
    timed = (frame.dropna(subset=["train_time_s"])
             .drop_duplicates(["task", "dataset", "setting_key", "steps", "seed", "train_time_s"]))
    trainings: dict[tuple, list[Training]] = {}
    for key, group in timed.groupby(["task", "dataset", "setting_key", "steps"]):
        trainings[key] = sorted(Training(float(t) / 60.0, _device(d))
                                for t, d in zip(group["train_time_s"], group["device"]))
    return trainings


def _setting_name(key: str, keys: list[str], by_key: dict[str, dict[str, str]], task: str) -> str:
    """A curve's name among the curves of its dataset (``keys``): the keys it changes from the task's
    defaults (or, failing those, the keys that differ between the curves of this dataset); the default
    configuration by that name when other curves share its dataset, by none when it is the only one."""
    defaults_here = sum(_is_default(by_key[k], task) for k in keys)
    is_default = _is_default(by_key[key], task)
    if is_default and defaults_here == 1:
        return DEFAULT_SETTING if len(keys) > 1 else ""
    # (several "default" curves differ in keys the task no longer declares: named by those)
    defaults = {} if is_default else task_defaults(task)
    others = [by_key[k] for k in keys]
    differing = (sorted(k for k in by_key[key] if k in defaults and defaults[k] != by_key[key][k])
                 or sorted(k for k in by_key[key] if len({o.get(k) for o in others}) > 1))
    return ", ".join(f"{k}={by_key[key][k]}" for k in differing)


def load_curves(results_dir: Path | str) -> list[Curve]:
    """The curves under ``<results_dir>/curves``, with the leaderboard's default dense bases of today's
    protocol: dense rows grouped by (task, dataset, setting)."""
    frame = _dense_rows(results_dir)
    if frame is None:
        return []
    frame["setting_key"], by_key = _setting_keys(frame)
    # the leaderboard's dense rows join only as the default configuration's base (its other sizes and
    # evaluation sets are not points of a learning curve)
    on_default = [_is_default(by_key[k], str(t)) for k, t in zip(frame["setting_key"], frame["task"])]
    frame = frame[~frame["leaderboard"] | pd.Series(on_default, index=frame.index)].copy()
    trainings = _trainings(frame)
    frame = latest_rows(frame)
    # one row per (curve, steps, seed), the latest: a re-evaluation (other threads/timing) or a re-training
    frame = frame.sort_values("timestamp", kind="stable").drop_duplicates(
        ["task", "dataset", "setting_key", "steps", "seed"], keep="last")
    curves = []
    for (task, dataset), group in frame.groupby(["task", "dataset"], sort=True):
        keys = sorted(set(group["setting_key"]))
        for key in keys:
            rows = group[group["setting_key"] == key].reset_index(drop=True)
            first = rows.iloc[0]
            minutes = {int(n): trainings.get((task, dataset, key, n), []) for n in set(rows["steps"])}
            curves.append(Curve(task=str(task), dataset=str(dataset), metric=str(first["metric"]),
                                higher_is_better=bool(first["higher_is_better"]),
                                setting=_setting_name(key, keys, by_key, str(task)), rows=rows,
                                train_minutes=minutes, default_steps=default_train_steps(str(task)),
                                is_default=_is_default(by_key[key], str(task)), setting_key=key))
    for curve in curves:
        curve.unc = stats.rows_uncertainty(curve.rows, results_dir)
    return curves


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
    """A point per step count of the curve: the seed mean with its 95% CI, each seed's value and every
    training of the point (the longest decides its training minutes)."""
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
