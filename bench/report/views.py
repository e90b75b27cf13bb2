"""The per-section views of the rows: :func:`latest_rows` (drop superseded re-runs) and :func:`task_views`
(one :class:`TaskView` per (task, dataset), with seed-averaged points per method and knob value), the rows
timed alike (:func:`timing_view`), and the bootstrap uncertainty of the points (:func:`attach_uncertainty`,
:func:`front_share`).  The frontier math is ``bench/report/frontier.py``, the tables ``bench/report/tables.py``,
the page writer ``bench/report/page.py`` and the figures ``bench/report/plots.py`` (matplotlib is imported
only there, lazily); every page module (``bench/report/*.py``) builds on them and ``bench/report/build.py`` runs
them all.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import results, stats
from bench.report.frontier import common_range, goodness


# ---------------------------------------------------------------------------------------------
# Data preparation
# ---------------------------------------------------------------------------------------------
# A point's identity (issue 22): its config hash without run-level keys that cannot change a result (see
# bench.results.NON_RESULT_KEYS), its training budget, and the code that made it.  Rows with the same
# identity are duplicates (the latest is kept); rows of the same config and budget made by other code are a
# re-run of the point, and the latest run supersedes the earlier ones.  Rows that differ in config or budget
# are different points, never collapsed: where a method has several for one knob value and seed, the config
# keys that differ become part of its curve label (``setting``).
POINT_KEY = ["task", "dataset", "method", "variant", "knob_name", "knob_value", "seed", "identity", "train_budget"]
ROW_KEY = POINT_KEY + ["code"]
CURVE_KEY = ["method", "variant", "setting", "knob_name"]


def _flat(config: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = str(value)
    return out


def _identities(frame):
    """Identity hash and flattened config of every row (from ``<row_id>.config.yaml`` beside the row when
    the frame came from :func:`bench.results.load`; else the stored config hash and no config)."""
    import yaml

    identity, configs = [], []
    for r in frame.to_dict("records"):
        row_file = r.get("row_file")
        path = Path(row_file) if isinstance(row_file, str) and row_file.endswith(".csv") else None
        config_file = path.with_name(path.name[:-len(".csv")] + ".config.yaml") if path else None
        if config_file is not None and config_file.exists():
            config = yaml.load(config_file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            identity.append(results.identity_hash(config, str(r["method"]), str(r["task"])))
            config = results.without_added_defaults(config, str(r["task"]))
            configs.append(_flat({k: v for k, v in config.items() if k not in results.NON_RESULT_KEYS}))
        else:
            identity.append(str(r["config_hash"]))
            configs.append({})
    return identity, configs


def _settings(frame, configs: list[dict[str, str]]) -> list[str]:
    """Per row: the config keys (``key=value``) that tell apart rows of one method with the same variant,
    knob value and seed but another identity (e.g. CCT's ``cct.pairs=diagonal`` vs ``decoder``); "" for
    methods without such rows."""
    keys_per_method: dict[tuple, set[str]] = {}
    group_cols = ["task", "dataset", "method", "variant", "knob_name", "knob_value", "seed"]
    for _, group in frame.groupby(group_cols, sort=False):
        if group["identity"].nunique() < 2:
            continue
        rows = [configs[i] for i in group["_pos"]]
        differing = {k for k in set().union(*rows) if len({c.get(k) for c in rows}) > 1}
        keys_per_method.setdefault(tuple(group.iloc[0][["task", "dataset", "method"]]), set()).update(differing)
    out = []
    for r in frame.to_dict("records"):
        config = configs[r["_pos"]]
        keys = sorted(keys_per_method.get((r["task"], r["dataset"], r["method"]), ()))
        out.append(";".join(f"{k.split('.', 1)[-1]}={config.get(k, '')}" for k in keys))
    return out


def latest_rows(frame):
    """One row per point: duplicates (same identity, budget and code) and earlier runs of the same point
    (other code) are dropped, the latest timestamp kept.  ``frame.attrs["dedup"]`` counts what was dropped."""
    import pandas as pd

    frame = results.upgrade(frame.copy().reset_index(drop=True))
    for column in ("variant", "knob_name", "git_sha", "config_hash", "uncounted_ops", "train_budget"):
        frame[column] = frame[column].map(lambda v: "" if pd.isna(v) else str(v))
    frame["knob_value"] = frame["knob_value"].astype(str)
    identity, configs = _identities(frame)
    frame["identity"], frame["_pos"] = identity, range(len(frame))
    frame["code"] = [c if isinstance(c, str) and c else f"git:{g}" for c, g in zip(frame["code_version"],
                                                                                    frame["git_sha"])]
    frame["_when"] = pd.to_datetime(frame["timestamp"], utc=True, errors="coerce", format="ISO8601")
    frame = frame.sort_values("_when", kind="stable", na_position="first")
    n_read = len(frame)
    unique = frame.drop_duplicates(ROW_KEY, keep="last")
    latest = unique.drop_duplicates(POINT_KEY, keep="last")
    latest = latest.assign(setting=_settings(latest, configs))
    files = latest["row_file"] if "row_file" in latest else pd.Series("", index=latest.index)
    latest["row_key"] = [f if isinstance(f, str) and f else f"{t}/{m}/{r}"
                         for f, t, m, r in zip(files, latest["task"], latest["method"], latest["run_id"])]
    out = latest.drop(columns=["_when", "_pos"]).reset_index(drop=True)
    out.attrs["dedup"] = {"read": n_read, "duplicates": n_read - len(unique), "superseded": len(unique) - len(latest)}
    return out


def knob_label(value: str) -> str:
    try:
        return f"{float(value):g}"
    except ValueError:
        return str(value)


@dataclass
class TaskView:
    """Everything the figures and tables need for one (task, dataset)."""

    task: str
    dataset: str
    metric: str
    higher_is_better: bool
    macs_dense: float
    rows: object  # deduplicated result rows (DataFrame), with a "curve" label column
    points: object  # one line per (curve, knob value): seed means, min/max, counts (DataFrame)
    dense: dict | None  # the dense base point: cost, quality, latency_ms, knob_value
    common: tuple[float, float] | None  # common cost range of swept curves, fraction of dense cost
    unc: object = None  # bench.stats.Uncertainty of the rows, once attach_uncertainty ran

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.task)

    @property
    def key(self) -> str:
        """The section's key in the report's per-section dicts (figures, notes, static comparisons)."""
        return f"{self.task}\0{self.dataset}"


def _distinct_parts(variants: list[str]) -> dict[str, str]:
    """Each variant string reduced to its ";"-separated parts that differ between the variants."""
    split = {v: v.split(";") for v in variants}
    common = set.intersection(*(set(parts) for parts in split.values())) if split else set()
    return {v: ";".join(p for p in parts if p not in common) or v for v, parts in split.items()}


def _without_recipe(variant) -> str:
    """A variant or setting string without its ``recipe=`` part (NaN -> ""): a label names the recipe once,
    from the row's ``recipe`` column."""
    if variant != variant:
        return ""
    return ";".join(part for part in str(variant).split(";") if not part.startswith("recipe="))


def _curve_labels(rows) -> list[str]:
    """"method", plus " [variant]" if the method appears with several variants on this task (only the
    parts that differ, the recipe left out), plus " [recipe=…]" if it appears under several recipes, plus
    " (knob)" if it appears with several knobs.  Full variants stay in the rows table."""
    if "setting" not in rows:
        rows = rows.assign(setting="")
    protocol = protocol_versions(rows)
    protocols_per_method = protocol.groupby(rows["method"]).nunique()
    recipes_per_method = rows["recipe"].groupby(rows["method"]).nunique()
    knobs_per_method = rows.groupby("method")["knob_name"].nunique()
    variants = rows["variant"].map(_without_recipe) if "variant" in rows else rows["method"].map(lambda _: "")
    short = {m: _distinct_parts(list(group.unique())) for m, group in variants.groupby(rows["method"])}
    labels = []
    for (method, _, setting, knob), variant, version, kind in zip(rows[CURVE_KEY].itertuples(index=False), variants,
                                                                  protocol, rows["recipe"]):
        label = method + (f" [{short[method][variant]}]" if variant and len(short[method]) > 1 else "")
        setting = _without_recipe(setting)  # a setting may name the recipe too: the label names it once
        label += f" [{setting}]" if setting else ""
        label += f" [protocol {int(version)}]" if protocols_per_method[method] > 1 else ""  # never one curve
        label += f" [recipe={kind}]" if recipes_per_method[method] > 1 else ""
        labels.append(label + (f" ({knob})" if knobs_per_method[method] > 1 else ""))
    return labels


def row_fractions(rows, macs_dense: float):
    """Each row's fraction of dense cost, against its own run's dense base (``macs_dense``: the base of the
    same seed, whose cost can differ by seed where decoding lengths do); against the section's dense cost
    ``macs_dense`` where a row lacks its own."""
    if "macs_dense" not in rows:
        return rows["macs_mean"].astype(float) / macs_dense
    own = rows["macs_dense"].astype(float)
    return rows["macs_mean"].astype(float) / own.where(own.gt(0) & np.isfinite(own), macs_dense)


def _aggregate(rows, macs_dense: float):
    for column in ("latency_b1_ratio", "throughput_ratio", "val_quality"):  # absent from older schema versions
        if column not in rows:
            rows = rows.assign(**{column: math.nan})
    for column in ("setting", "variant", "row_key"):
        if column not in rows:
            rows = rows.assign(**{column: ""})
    rows = rows.assign(_frac=row_fractions(rows, macs_dense))
    grouped = rows.groupby(["curve", "method", "knob_value"], sort=False)
    points = grouped.agg(
        knob_kind=("knob_kind", "first"), knob_name=("knob_name", "first"),
        cost=("macs_mean", "mean"), frac=("_frac", "mean"), quality=("quality", "mean"),
        val_quality=("val_quality", lambda v: v.mean(skipna=False)),  # NaN unless every seed has one
        q_min=("quality", "min"), q_max=("quality", "max"), n_seeds=("seed", "nunique"),
        latency_ms=("latency_b1_ms", "mean"), latency_ratio=("latency_b1_ratio", "mean"),
        throughput_ratio=("throughput_ratio", "mean"),
        keys=("row_key", tuple), seeds=("seed", tuple), variant=("variant", "first"), recipe=("recipe", "first"),
        setting=("setting", "first"),
    ).reset_index()
    return points.sort_values(["curve", "cost"], kind="stable").reset_index(drop=True)


def is_swept(curve_points) -> bool:
    """A swept curve: an eval- or train-time knob with at least two distinct costs."""
    kind = str(curve_points["knob_kind"].iloc[0])
    return kind != "static" and curve_points["cost"].nunique() >= 2


def task_views(frame) -> list[TaskView]:
    views = []
    for (task, dataset), rows in latest_rows(frame).groupby(["task", "dataset"], sort=True):
        rows = rows.copy()
        rows["curve"] = _curve_labels(rows)
        macs_dense = float(rows["macs_dense"].median())
        if not math.isfinite(macs_dense) or macs_dense <= 0:
            macs_dense = float(rows["macs_mean"].max())
        points = _aggregate(rows, macs_dense)
        dense_points = points[points["method"] == "dense"]
        dense = None
        if len(dense_points):
            best = dense_points.loc[(dense_points["cost"] - macs_dense).abs().idxmin()]
            dense = {k: best[k] for k in ("cost", "quality", "latency_ms", "latency_ratio", "knob_value",
                                          "knob_name")}
        ranges = [(c["frac"].min(), c["frac"].max()) for _, c in points.groupby("curve") if is_swept(c)]
        views.append(TaskView(task, dataset, str(rows["metric"].iloc[0]), bool(rows["higher_is_better"].iloc[0]),
                              macs_dense, rows, points, dense, common_range(ranges)))
    return views


def load_class(rows) -> list[str]:
    """Per row: "loaded" when other processes competed for the cores while it was timed, "quiet" when they
    did not, "load unknown" for rows written before the load was recorded (schema < 3).  Measured as the
    CPUs other processes kept busy during the timing (schema 8: above :data:`bench.results.BUSY_OTHER_CPUS`
    is loaded); for older rows, as the 1-minute load average read before it against the CPU count (which
    also counts a training of the same run that had just ended)."""
    nan = [math.nan] * len(rows)
    load = rows["timing_load_avg"] if "timing_load_avg" in rows else nan
    cpus = rows["timing_cpus"] if "timing_cpus" in rows else [0] * len(rows)
    others = rows["timing_other_cpus"] if "timing_other_cpus" in rows else nan
    out = []
    for value, n, other in zip(load, cpus, others):
        value, n, other = (number(v) for v in (value, n, other))
        if math.isfinite(other):
            out.append("loaded" if other > results.BUSY_OTHER_CPUS else "quiet")
        else:
            out.append("load unknown" if not (math.isfinite(value) and math.isfinite(n) and n > 0)
                       else "loaded" if value > n else "quiet")
    return out


def number(value) -> float:
    """A cell as a float: NaN where it is empty or not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def timing_view(view: TaskView) -> tuple[TaskView, str] | None:
    """The rows of ``view`` that were timed against the dense base model in the same process, restricted
    to one (device, thread count, load class): rows timed under different settings, or on a loaded and a
    quiet machine, are never drawn together.  The setting with the most timed rows wins (ties: quiet
    before unknown before loaded, then fewer threads).  The label says what was drawn and what was left
    out and why.  None if no row has timing ratios."""
    rows = view.rows
    if "latency_b1_ratio" not in rows:
        return None
    rows = rows.assign(_load=load_class(rows))
    timed = rows[rows["latency_b1_ratio"].gt(0)]
    if timed.empty:
        return None
    counts = timed.groupby(["device", "timing_threads", "_load"]).size().reset_index(name="n")
    counts["_rank"] = counts["_load"].map({"quiet": 0, "load unknown": 1, "loaded": 2})
    best = counts.sort_values(["n", "_rank", "timing_threads", "device"], ascending=[False, True, True, True]).iloc[0]
    chosen = (timed["device"] == best["device"]) & (timed["timing_threads"] == best["timing_threads"]) & \
        (timed["_load"] == best["_load"])
    keep = timed[chosen].drop(columns="_load")
    points = _aggregate(keep, view.macs_dense)
    dense = None
    if view.dense is not None:
        match = points[(points["method"] == "dense") & (points["knob_value"] == str(view.dense["knob_value"]))]
        if len(match):
            dense = {**view.dense, "latency_ratio": float(match["latency_ratio"].iloc[0])}
    left = []
    untimed = rows[~rows["latency_b1_ratio"].gt(0)]
    if len(untimed):
        left.append(f"{len(untimed)} without same-process ratios ({', '.join(sorted(set(untimed['curve'])))})")
    other = timed[~chosen]
    for (device, threads, load), group in other.groupby(["device", "timing_threads", "_load"]):
        left.append(f"{len(group)} timed on {device}, {int(threads)} thread(s), {load} "
                    f"({', '.join(sorted(set(group['curve'])))})")
    label = (f"{best['device']}, {int(best['timing_threads'])} thread(s), {best['_load']}; "
             f"{len(keep)} of {len(rows)} rows drawn")
    label += "; left out: " + "; ".join(left) if left else ""
    timed_view = TaskView(view.task, view.dataset, view.metric, view.higher_is_better, view.macs_dense, keep,
                          points, dense, view.common, view.unc)
    if view.unc is not None:
        cis = [view.unc.ci(keys) for keys in points["keys"]]
        points["ci_lo"], points["ci_hi"] = [c[0] for c in cis], [c[1] for c in cis]
    return timed_view, label


# ---------------------------------------------------------------------------------------------
# Uncertainty of points, hull qualities and front membership (bootstrap draws from bench.stats)
# ---------------------------------------------------------------------------------------------
def attach_uncertainty(view: TaskView, results_dir) -> TaskView:
    """Bootstrap the view's rows (bench.stats.rows_uncertainty) and add to its points the 95% CI of each
    seed mean (``ci_lo``/``ci_hi``) and the share of resamples in which the point is on the task's
    Pareto front (``front_share``)."""
    view.unc = stats.rows_uncertainty(view.rows, results_dir)
    _add_point_intervals(view)
    return view


def _add_point_intervals(view: TaskView) -> None:
    points = view.points
    cis = [view.unc.ci(keys) for keys in points["keys"]]
    points["ci_lo"], points["ci_hi"] = [c[0] for c in cis], [c[1] for c in cis]
    points["front_share"] = front_share(view)


def point_draws(view: TaskView, keys) -> np.ndarray | None:
    return None if view.unc is None else view.unc.mean_draws(keys)


def front_share(view: TaskView) -> np.ndarray:
    """Per point: the share of bootstrap resamples in which it is on the task's Pareto front (costs fixed at
    their measured means, qualities resampled jointly); NaN for points without draws."""
    points = view.points
    draws = [point_draws(view, keys) for keys in points["keys"]]
    have = np.array([d is not None for d in draws])
    out = np.full(len(points), np.nan)
    if have.sum() == 0:
        return out
    cost = points["frac"].to_numpy(dtype=float)[have]
    g = goodness(np.stack([d for d in draws if d is not None]), view.higher_is_better)  # [P, B]
    c_le = cost[:, None] <= cost[None, :]  # [j, i]: c_j <= c_i
    c_lt = cost[:, None] < cost[None, :]
    gj, gi = g[:, None, :], g[None, :, :]
    dominated = ((c_le[:, :, None] & (gj >= gi)) & (c_lt[:, :, None] | (gj > gi))).any(axis=0)  # [i, B]
    out[have] = 1.0 - dominated.mean(axis=1)
    return out



def protocol_versions(rows):
    """Each row's training-protocol version (rows without a ``protocol`` column were made under version 1)."""
    protocol = rows["protocol"] if "protocol" in rows else rows["method"].map(lambda _: math.nan)
    return protocol.map(results.protocol_version).astype(int)


def disjoint_ranges(view: TaskView) -> str:
    """Why a section has no common cost range: no swept methods, or the two whose ranges do not meet."""
    ranges = {curve: (float(c["frac"].min()), float(c["frac"].max()))
              for curve, c in view.points.groupby("curve", sort=False) if is_swept(c)}
    if not ranges:
        return "no swept methods"
    ends_first = min(ranges, key=lambda curve: ranges[curve][1])
    starts_last = max(ranges, key=lambda curve: ranges[curve][0])
    (lo_a, hi_a), (lo_b, hi_b) = ranges[ends_first], ranges[starts_last]
    return (f"{ends_first} ({lo_a:.1%} – {hi_a:.1%}) ends below where {starts_last} ({lo_b:.1%} – {hi_b:.1%}) "
            "starts")


def dataset_tag(dataset: str) -> str:
    """A short name for a section's dataset: its name before the first parenthesis, and the evaluation set
    when the dataset names one ("...; eval <set>: <size>"); the leaderboard uses the whole name where two
    sections of one task would share a tag."""
    name = dataset.split(" (")[0].strip()
    evaluation = re.search(r"; eval ([^:;]+)", dataset)
    return f"{name}, eval {evaluation.group(1).strip()}" if evaluation else name
