"""The report's library: frontier math, the per-section views of the rows and their tables, and the page
writer.  Every page module (``bench/report_*.py``) builds on it; ``bench/report.py`` runs them all.

Three layers, each usable on its own:

* frontier math on plain arrays of (cost, quality): :func:`pareto_mask`, :func:`upper_hull`,
  :func:`quality_at_budget`, :func:`cost_to_reach`, :func:`normalized_auc`, :func:`hypervolume`;
* data preparation: :func:`latest_rows` (drop superseded re-runs) and :func:`task_views` (one
  :class:`TaskView` per (task, dataset), with seed-averaged points per method and knob value);
* output: :func:`summarize` (one leaderboard line per method), the tables and the Markdown/HTML writer.
  Figures live in ``bench/report_plots.py`` (matplotlib is imported only there, lazily).

Quality may be higher- or lower-is-better; the math flips it internally ("goodness" = quality or
-quality) and always returns quality in the metric's own units.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import results, stats

BUDGETS = (0.25, 0.50, 0.75, 1.00)  # fractions of the dense base model's cost
# "Reaches dense quality" tolerance δ, in the metric's units: half a point on the metric's own scale, that is
# 0.005 for rates in [0, 1] (0.5 percentage point of accuracy or WER) and 0.5 for sacreBLEU's 0-100 scale.
DELTA = 0.005
DELTA_BY_METRIC = {"bleu": 0.5}
REFERENCE_COST = 1.5  # hypervolume reference cost, as a fraction of the dense base model's cost
# Hypervolume reference quality per metric: worse than any real result.  Metrics not listed get
# 0.0 if higher is better, 1.0 if lower is better (right for rates in [0, 1], such as error or WER).
REFERENCE_POINTS = {"accuracy": 0.0, "top1": 0.0, "top5": 0.0, "f1": 0.0, "bleu": 0.0,
                    "wer": 1.0, "cer": 1.0, "error": 1.0}
NA = "—"


# ---------------------------------------------------------------------------------------------
# Frontier math
# ---------------------------------------------------------------------------------------------
def _goodness(quality, higher_is_better: bool) -> np.ndarray:
    q = np.asarray(quality, dtype=float)
    return q if higher_is_better else -q


def pareto_mask(cost, quality, higher_is_better: bool = True) -> np.ndarray:
    """Boolean mask of the points no other point dominates.

    ``j`` dominates ``i`` when cost_j <= cost_i and quality_j is at least as good, one of them strictly.
    Exact duplicates do not dominate each other (both stay); points with NaN cost or quality are never
    on the front and never dominate.
    """
    c = np.asarray(cost, dtype=float)
    g = _goodness(quality, higher_is_better)
    valid = np.isfinite(c) & np.isfinite(g)
    mask = np.zeros(c.shape, dtype=bool)
    for i in np.flatnonzero(valid):
        dominators = valid & (c <= c[i]) & (g >= g[i]) & ((c < c[i]) | (g > g[i]))
        mask[i] = not dominators.any()
    return mask


def upper_hull(cost, quality, higher_is_better: bool = True, chosen_by=None) -> tuple[np.ndarray, np.ndarray]:
    """The upper concave hull of a set of points, as vertices (cost ascending, quality).

    Definition used throughout this module: the smallest concave, non-decreasing (in goodness) line over the
    Pareto points (duplicates merged), from the cheapest Pareto point on -- so a point on or below the chord
    of two others is not a vertex.  A segment is achievable: running its two end configurations on a random
    mix of samples gives, in expectation, every point of the line between them, so the hull is the best
    quality a budget buys by mixing measured configurations.  If the costliest measured point is not a
    vertex, the hull is continued flat from the last vertex to that cost (any budget in between affords that
    vertex, so nothing is extrapolated).  The hull therefore spans exactly [min cost, max cost] of the finite
    points.  ``chosen_by`` (the points' validation-split quality): the vertices are chosen on it and the
    hull reads ``quality`` at them (:func:`hull_vertices`).  Empty arrays if no point is finite.
    """
    c, q = np.asarray(cost, dtype=float), np.asarray(quality, dtype=float)
    vertices, max_cost = hull_vertices(c, q, higher_is_better, chosen_by)
    if vertices.size == 0:
        return np.empty(0), np.empty(0)
    hull_c, hull_q = c[vertices], q[vertices]
    if max_cost > hull_c[-1]:
        hull_c, hull_q = np.append(hull_c, max_cost), np.append(hull_q, hull_q[-1])
    return hull_c, hull_q


def selection_quality(quality, chosen_by) -> np.ndarray:
    """What a hull's vertices are chosen on: ``chosen_by`` (validation-split quality) where every point with
    a finite ``quality`` has a finite one, else ``quality`` itself (rows without a validation metric)."""
    q = np.asarray(quality, dtype=float)
    if chosen_by is None:
        return q
    v = np.asarray(chosen_by, dtype=float)
    return v if v.shape == q.shape and np.all(np.isfinite(v[np.isfinite(q)])) else q


def hull_vertices(cost, quality, higher_is_better: bool = True, chosen_by=None) -> tuple[np.ndarray, float]:
    """The indices of the hull's vertices (cost ascending; the first of points at equal cost) and the cost
    of the costliest finite point (where a flat continuation ends).  The vertices are the Pareto points of
    :func:`selection_quality` that :func:`concave_vertices` keeps: with a validation metric the front is
    chosen off the test split, so a test value is never both what selected a point and what is reported."""
    c, q = np.asarray(cost, dtype=float), np.asarray(quality, dtype=float)
    select = selection_quality(q, chosen_by)
    mask = pareto_mask(c, select, higher_is_better) & np.isfinite(q)
    if not mask.any():
        return np.empty(0, dtype=int), math.nan
    index = np.flatnonzero(mask)
    index = index[np.argsort(c[index], kind="stable")]
    _, first = np.unique(c[index], return_index=True)  # one point per cost: the first of equal ones
    front = index[first]
    keep = concave_vertices(c[front], _goodness(select[front], higher_is_better))
    return front[keep], float(np.nanmax(np.where(np.isfinite(q), c, np.nan)))


def concave_vertices(cost: np.ndarray, goodness: np.ndarray) -> list[int]:
    """Indices of the vertices of the upper concave chain through points sorted by cost (a monotone-chain
    scan): a point on or below the chord joining its neighbours on the chain is dropped."""
    chain: list[int] = []
    for i in range(len(cost)):
        while len(chain) >= 2:
            a, b = chain[-2], chain[-1]
            # b is not above the chord a -> i: (g_b - g_a)(c_i - c_a) <= (g_i - g_a)(c_b - c_a)
            if (goodness[b] - goodness[a]) * (cost[i] - cost[a]) <= (goodness[i] - goodness[a]) * (cost[b] - cost[a]):
                chain.pop()
            else:
                break
        chain.append(i)
    return chain


def _in_range(x: float, lo: float, hi: float) -> bool:
    tol = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    return math.isfinite(x) and lo - tol <= x <= hi + tol


def quality_at_budget(cost, quality, budget: float, higher_is_better: bool = True, chosen_by=None) -> float:
    """Quality on the upper hull at cost ``budget``; NaN outside the hull's cost range (no extrapolation)."""
    hull_c, hull_q = upper_hull(cost, quality, higher_is_better, chosen_by)
    if hull_c.size == 0 or not _in_range(budget, hull_c[0], hull_c[-1]):
        return math.nan
    return float(np.interp(np.clip(budget, hull_c[0], hull_c[-1]), hull_c, hull_q))


def cost_to_reach(cost, quality, target: float, higher_is_better: bool = True, chosen_by=None) -> float:
    """Smallest cost at which the upper hull reaches quality ``target`` (linear between vertices).

    Returns the hull's lowest cost if its cheapest point already reaches the target, NaN if it never does.
    """
    hull_c, hull_q = upper_hull(cost, quality, higher_is_better, chosen_by)
    g, goal = _goodness(hull_q, higher_is_better), float(_goodness(target, higher_is_better))
    reached = np.flatnonzero(g >= goal)
    if reached.size == 0 or not math.isfinite(goal):
        return math.nan
    i = int(reached[0])
    if i == 0:
        return float(hull_c[0])
    fraction = (goal - g[i - 1]) / (g[i] - g[i - 1])  # i is the first vertex reaching the goal: g[i-1] < goal
    return float(hull_c[i - 1] + fraction * (hull_c[i] - hull_c[i - 1]))


def normalized_auc(cost, quality, lo: float, hi: float, higher_is_better: bool = True, chosen_by=None) -> float:
    """Area under the upper hull over [lo, hi] divided by (hi - lo): the hull's mean quality there.

    NaN if the hull does not cover [lo, hi] or the range is empty (lo > hi); quality at ``lo`` if lo == hi.
    """
    hull_c, hull_q = upper_hull(cost, quality, higher_is_better, chosen_by)
    if hull_c.size == 0 or not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        return math.nan
    if not (_in_range(lo, hull_c[0], hull_c[-1]) and _in_range(hi, hull_c[0], hull_c[-1])):
        return math.nan
    if hi == lo:
        return float(np.interp(lo, hull_c, hull_q))
    inner = hull_c[(hull_c > lo) & (hull_c < hi)]
    xs = np.concatenate([[lo], inner, [hi]])
    ys = np.interp(xs, hull_c, hull_q)
    return float(np.sum((ys[1:] + ys[:-1]) / 2 * np.diff(xs)) / (hi - lo))


def hypervolume(cost, quality, ref_cost: float, ref_quality: float, higher_is_better: bool = True) -> float:
    """2-D area dominated by the points and bounded by the reference corner (ref_cost, ref_quality).

    The union of the rectangles [cost_i, ref_cost] x [ref_quality, quality_i] (a staircase, no
    interpolation), in cost units x quality units.  Points costlier than ref_cost or worse than
    ref_quality add nothing; 0.0 if no point beats the reference.
    """
    c = np.asarray(cost, dtype=float)
    g, ref_g = _goodness(quality, higher_is_better), float(_goodness(ref_quality, higher_is_better))
    keep = np.isfinite(c) & np.isfinite(g) & (c < ref_cost) & (g > ref_g)
    c, g = c[keep], g[keep]
    front = pareto_mask(c, g, True)
    c, index = np.unique(c[front], return_index=True)
    g = g[front][index]  # increasing with cost on a front
    widths = np.diff(np.append(c, ref_cost))
    return float(np.sum(widths * (g - ref_g)))


def common_range(ranges: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Intersection of cost ranges; None if there are none or they do not overlap."""
    if not ranges:
        return None
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    return (lo, hi) if lo <= hi else None


def reach_delta(metric: str) -> float:
    """δ of "cost to reach dense − δ" for a metric (:data:`DELTA_BY_METRIC`, else :data:`DELTA`)."""
    return DELTA_BY_METRIC.get(metric.lower(), DELTA)


def reference_quality(metric: str, higher_is_better: bool) -> float:
    return REFERENCE_POINTS.get(metric.lower(), 0.0 if higher_is_better else 1.0)


def macs_unit(macs: float) -> tuple[str, float]:
    """(unit name, divisor) for a MACs magnitude: GMACs, MMACs, KMACs or MACs."""
    for name, scale in (("GMACs", 1e9), ("MMACs", 1e6), ("KMACs", 1e3)):
        if math.isfinite(macs) and abs(macs) >= scale:
            return name, scale
    return "MACs", 1.0


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

    frame = frame.copy().reset_index(drop=True)
    for column in ("variant", "knob_name", "git_sha", "config_hash", "uncounted_ops", "train_budget"):
        if column not in frame:
            frame[column] = ""
        frame[column] = frame[column].map(lambda v: "" if pd.isna(v) else str(v))
    frame["knob_value"] = frame["knob_value"].astype(str)
    identity, configs = _identities(frame)
    frame["identity"], frame["_pos"] = identity, range(len(frame))
    code = frame["code_version"] if "code_version" in frame else pd.Series("", index=frame.index)
    frame["code"] = [c if isinstance(c, str) and c else f"git:{g}" for c, g in zip(code, frame["git_sha"])]
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


def _curve_labels(rows) -> list[str]:
    """"method", plus " [variant]" if the method appears with several variants on this task (only the
    parts that differ), plus " (knob)" if it appears with several knobs.  Full variants stay in the rows
    table."""
    if "setting" not in rows:
        rows = rows.assign(setting="")
    protocol = protocol_versions(rows)
    protocols_per_method = protocol.groupby(rows["method"]).nunique()
    recipe = rows["recipe"].fillna("matched") if "recipe" in rows else rows["method"].map(lambda _: "matched")
    recipes_per_method = recipe.groupby(rows["method"]).nunique()
    knobs_per_method = rows.groupby("method")["knob_name"].nunique()
    short = {m: _distinct_parts([str(v) for v in group.unique()])
             for m, group in rows.fillna({"variant": ""}).groupby("method")["variant"]}
    labels = []
    for (method, variant, setting, knob), version, kind in zip(rows[CURVE_KEY].itertuples(index=False), protocol,
                                                            recipe):
        variant = "" if variant != variant else str(variant)  # NaN -> ""
        label = method + (f" [{short[method][variant]}]" if variant and len(short[method]) > 1 else "")
        label += f" [{setting}]" if setting == setting and setting else ""
        label += f" [protocol {int(version)}]" if protocols_per_method[method] > 1 else ""  # never one curve
        label += f" [recipe={kind}]" if recipes_per_method[method] > 1 and f"recipe={kind}" not in label else ""
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
    # rows before the recipe column were trained on the core's equal budget
    rows = rows.assign(recipe=rows["recipe"].fillna("matched") if "recipe" in rows else "matched")
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
    """Per row: "loaded" when the 1-minute load average read before its timing exceeded the CPU count
    (other processes competed for the cores), "quiet" when it did not, "load unknown" for rows written
    before the load was recorded (schema < 3)."""
    load = rows["timing_load_avg"] if "timing_load_avg" in rows else [math.nan] * len(rows)
    cpus = rows["timing_cpus"] if "timing_cpus" in rows else [0] * len(rows)
    out = []
    for value, n in zip(load, cpus):
        try:
            value, n = float(value), float(n)
        except (TypeError, ValueError):
            value, n = math.nan, math.nan
        out.append("load unknown" if not (math.isfinite(value) and math.isfinite(n) and n > 0)
                   else "loaded" if value > n else "quiet")
    return out


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
    g = _goodness(np.stack([d for d in draws if d is not None]), view.higher_is_better)  # [P, B]
    c_le = cost[:, None] <= cost[None, :]  # [j, i]: c_j <= c_i
    c_lt = cost[:, None] < cost[None, :]
    gj, gi = g[:, None, :], g[None, :, :]
    dominated = ((c_le[:, :, None] & (gj >= gi)) & (c_lt[:, :, None] | (gj > gi))).any(axis=0)  # [i, B]
    out[have] = 1.0 - dominated.mean(axis=1)
    return out


def hull_weights(cost, quality, budget: float, higher_is_better: bool = True, chosen_by=None) -> np.ndarray | None:
    """Weights over the points with ``weights @ quality == quality_at_budget(cost, quality, budget)``: the
    two hull vertices either side of ``budget`` share the weight linearly (one vertex carries it all at a
    vertex or on the flat continuation past the last vertex); None outside the hull's cost range."""
    c, q = np.asarray(cost, dtype=float), np.asarray(quality, dtype=float)
    vertices, max_cost = hull_vertices(c, q, higher_is_better, chosen_by)
    if vertices.size == 0 or not _in_range(budget, c[vertices[0]], max(max_cost, c[vertices[-1]])):
        return None
    at = c[vertices]
    x = float(np.clip(budget, at[0], max(max_cost, at[-1])))
    weights = np.zeros(c.size)
    right = int(np.searchsorted(at, x, side="left"))
    if right >= at.size:  # on the flat continuation past the last vertex
        weights[vertices[-1]] = 1.0
    elif at[right] == x or right == 0:
        weights[vertices[right]] = 1.0
    else:
        share = (x - at[right - 1]) / (at[right] - at[right - 1])
        np.add.at(weights, [vertices[right - 1], vertices[right]], [1.0 - share, share])
    return weights


def hull_draws(cost, quality, quality_draws: np.ndarray, budget: float,
               higher_is_better: bool = True, chosen_by=None) -> np.ndarray:
    """Bootstrap draws of :func:`quality_at_budget` at ``budget``, with the hull fixed by the estimates.

    ``quality`` ([points]) are the points' estimates and ``quality_draws`` ([points, B]) their resamples
    (costs fixed).  The hull's vertices and the share of each are chosen once, on the estimates, and every
    resample is read on that same line: the CI is that of the value printed (a point that is a vertex gets
    exactly its own CI), not of a maximum re-chosen in every resample, whose percentile interval sits above
    the estimate when points are close.  Which points are on the front, and how surely, is :func:`front_share`'s
    question.  Returns [B]; NaN where the budget lies outside the points' cost range."""
    draws = np.asarray(quality_draws, dtype=float)
    weights = hull_weights(cost, quality, budget, higher_is_better, chosen_by)
    if weights is None:
        return np.full(draws.shape[1], np.nan)
    used = weights > 0
    return weights[used] @ draws[used]


# ---------------------------------------------------------------------------------------------
# Summaries and tables
# ---------------------------------------------------------------------------------------------
FRONT_SURE = 0.95  # a point counts as surely on the front when it is in this share of the resamples


def summarize(view: TaskView):
    """One line per curve: counts, Pareto flag, quality at budgets, cost to reach dense, AUC, hypervolume.

    Costs are fractions of the dense base model's cost; qualities are in the metric's units.  "Reaches
    dense" means within the metric's :func:`reach_delta`.
    """
    import pandas as pd

    delta = reach_delta(view.metric)

    hib, points = view.higher_is_better, view.points
    on_front = pareto_mask(points["frac"], points["quality"], hib)
    target = math.nan
    if view.dense is not None:
        target = view.dense["quality"] - delta if hib else view.dense["quality"] + delta
    ref_q = reference_quality(view.metric, hib)
    lines = []
    for curve, idx in points.groupby("curve", sort=False).groups.items():
        pts = points.loc[idx]
        c, q, v = pts["frac"].to_numpy(), pts["quality"].to_numpy(), pts["val_quality"].to_numpy()
        curve_front = on_front[points.index.get_indexer(idx)]
        line = {
            "method": curve, "knob": pts["knob_name"].iloc[0], "kind": pts["knob_kind"].iloc[0],
            "points": len(pts), "seeds": view.rows.loc[view.rows["curve"] == curve, "seed"].nunique(),
            "pareto": int(curve_front.sum()),
            # points on the front in at least 95% of the bootstrap resamples (None: no draws)
            "pareto_sure": (int((curve_front & (pts["front_share"] >= FRONT_SURE)).sum())
                            if "front_share" in pts and pts["front_share"].notna().any() else None),
        }
        draws = [point_draws(view, keys) for keys in pts["keys"]] if "keys" in pts else []
        for budget in BUDGETS:
            line[f"q@{budget:.0%}"] = quality_at_budget(c, q, budget, hib, v)
            line[f"ci@{budget:.0%}"] = (math.nan, math.nan)
            if draws and all(d is not None for d in draws) and math.isfinite(line[f"q@{budget:.0%}"]):
                line[f"ci@{budget:.0%}"] = stats.interval(hull_draws(c, q, np.stack(draws), budget, hib, v))
        line["reach"] = cost_to_reach(c, q, target, hib, v)
        line["auc"] = normalized_auc(c, q, *view.common, hib, v) if view.common else math.nan
        line["chosen_on"] = "validation" if selection_quality(q, v) is not q else "test"
        line["hv"] = hypervolume(c, q, REFERENCE_COST, ref_q, hib)
        lines.append(line)
    return pd.DataFrame(lines)


def _num(x, spec: str = ".4f", suffix: str = "") -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return NA
    return format(x, spec) + suffix if math.isfinite(x) else NA


def _with_ci(value, ci, spec: str = ".4f") -> str:
    """"0.8612 [0.8550, 0.8671]": a value and its 95% CI (the value alone where there is no CI)."""
    text = _num(value, spec)
    lo, hi = ci
    if text == NA or not (math.isfinite(lo) and math.isfinite(hi)):
        return text
    return f"{text} [{lo:{spec}}, {hi:{spec}}]"


def points_table(view: TaskView) -> tuple[list[str], list[list[str]]]:
    """One line per point (curve, knob value): cost, seed mean with its bootstrap 95% CI over test
    examples, the seed range, and the share of resamples in which the point is on the task's front."""
    header = ["method", "knob", "% dense", f"{view.metric} (seed mean) [95% CI]", "examples only [95% CI]", "seeds",
              "seed range", "on the front (share of resamples)"]
    table = []
    for r in view.points.to_dict("records"):
        spread = f"{r['q_min']:.4f} – {r['q_max']:.4f}" if r["n_seeds"] > 1 else NA
        share = r.get("front_share", math.nan)
        examples = view.unc.example_ci(r["keys"]) if view.unc is not None else (math.nan, math.nan)
        table.append([r["curve"], f"{r['knob_name']}={knob_label(r['knob_value'])}", _num(100 * r["frac"], ".1f", "%"),
                      _with_ci(r["quality"], (r.get("ci_lo", math.nan), r.get("ci_hi", math.nan))),
                      _with_ci(r["quality"], examples) if r["n_seeds"] >= stats.MIN_SEEDS else "(the same: "
                      f"{r['n_seeds']} seed{'s' if r['n_seeds'] > 1 else ''})",
                      str(r["n_seeds"]), spread, _num(100 * share, ".0f", "%")])
    return header, table


def summary_table(view: TaskView) -> tuple[list[str], list[list[str]]]:
    summary = summarize(view)
    header = ["method", "knob", "kind", "#points", "#seeds", "Pareto-optimal"]
    header += [f"{view.metric} @ {b:.0%} dense" for b in BUDGETS]
    header += [f"cost to reach dense {'−' if view.higher_is_better else '+'} δ", "normalized AUC", "hypervolume",
               "hull chosen on"]
    table = []
    for s in summary.to_dict("records"):
        sure = s.get("pareto_sure")
        flag = (f"yes ({s['pareto']}/{s['points']}" + (f"; {sure} in ≥ {FRONT_SURE:.0%} of resamples" if sure is not None
                                                        else "") + ")") if s["pareto"] else "no"
        table.append([s["method"], s["knob"], s["kind"], str(s["points"]), str(s["seeds"]), flag]
                     + [_with_ci(s[f"q@{b:.0%}"], s[f"ci@{b:.0%}"]) for b in BUDGETS]
                     + [_num(100 * s["reach"], ".1f", "%"), _num(s["auc"]), _num(s["hv"]), s["chosen_on"]])
    return header, table


def rows_table(view: TaskView) -> tuple[list[str], list[list[str]]]:
    unit, scale = macs_unit(view.macs_dense)
    header = ["method", "knob", f"{view.metric} [95% CI]", f"mean {unit}", "% dense", f"p10/p50/p90 {unit}",
              "latency b1 ms", "throughput/s", "latency b1 ×dense", "throughput ×dense", "threads", "timing load",
              "params", "seed", "variant", "git sha", "config hash"]
    table = []
    rows = view.rows.assign(_cost=view.rows["macs_mean"], _load=load_class(view.rows),
                            _frac=row_fractions(view.rows, view.macs_dense))
    # one knob value's seeds together, the knob values in order of their mean cost
    rows = rows.assign(_knob=rows["knob_value"].astype(str))
    rows = rows.assign(_point_cost=rows.groupby(["curve", "_knob"])["_cost"].transform("mean"))
    rows = rows.sort_values(["curve", "_point_cost", "_knob", "seed"], kind="stable")
    unc = view.unc
    for r in rows.to_dict("records"):
        # "*": tracked code differed from the commit; "?": git could not tell (an empty git_dirty)
        sha = str(r["git_sha"])[:7] + {"True": "*", "False": ""}.get(str(r["git_dirty"]), "?")
        key = r.get("row_key")
        ci = (unc.low.get(key, math.nan), unc.high.get(key, math.nan)) if unc is not None else (math.nan, math.nan)
        load = r["_load"] if r["_load"] != "loaded" else f"LOADED ({float(r['timing_load_avg']):.1f} on {int(r['timing_cpus'])} CPUs)"
        table.append([
            r["curve"], f"{r['knob_name']}={knob_label(r['knob_value'])}", _with_ci(r["quality"], ci),
            _num(r["macs_mean"] / scale, ".4g"), _num(100 * r["_frac"], ".1f", "%"),
            "/".join(_num(r[k] / scale, ".4g") for k in ("macs_p10", "macs_p50", "macs_p90")),
            _num(r["latency_b1_ms"], ".3g"), _num(r["throughput_per_s"], ".4g"),
            _num(r.get("latency_b1_ratio"), ".3g"), _num(r.get("throughput_ratio"), ".3g"),
            str(r["timing_threads"]), load, _num(r["params"], ",.0f"),
            str(r["seed"]), str(r["variant"]) if r["variant"] == r["variant"] else "", sha,
            str(r["config_hash"])[:10],
        ])
    return header, table


_MD_SPECIAL = str.maketrans({**{c: "\\" + c for c in "\\`*_[]|>"}, "<": "&lt;"})


def md_escape(text: str) -> str:
    """Text as literal Markdown (no emphasis, code, links or table breaks from names such as early_exit)."""
    return str(text).translate(_MD_SPECIAL)


def markdown_table(header: list[str], table: list[list[str]]) -> str:
    def cells(values):
        return "| " + " | ".join(md_escape(v) for v in values) + " |"
    return "\n".join([cells(header), "|" + "|".join("---" for _ in header) + "|"] + [cells(r) for r in table])


PAGE_STYLE = """
body{font-family:system-ui,sans-serif;margin:0 auto;padding:1em 2em;max-width:1400px;line-height:1.4;color:#222}
nav.toc{border:1px solid #ddd;background:#fafafa;padding:.5em 1em;margin:1em 0}
nav.toc ul{margin:.2em 0;padding-left:1.2em}
div.table-wrap{overflow-x:auto;max-width:100%;margin:.5em 0 1em 0}
table{border-collapse:collapse;font-size:85%}
td,th{border:1px solid #ccc;padding:2px 6px;white-space:nowrap;text-align:left;vertical-align:top}
th{background:#f0f0f0}
img{max-width:100%;height:auto;display:block;margin:.5em 0}
code{background:#f3f3f3;padding:0 .2em}
"""


def render_html(markdown_text: str, title: str) -> str:
    """A Markdown page as standalone HTML (Python-Markdown with its ``tables`` and ``toc`` extensions):
    a table of contents, every table inside a horizontally scrolling container, images inline."""
    import markdown

    converter = markdown.Markdown(extensions=["tables", "toc", "sane_lists"],
                                  extension_configs={"toc": {"toc_depth": "2"}})
    body = converter.convert(markdown_text)
    body = body.replace("<table>", '<div class="table-wrap"><table>').replace("</table>", "</table></div>")
    toc = f'<nav class="toc"><strong>Contents</strong>{converter.toc}</nav>'
    first_heading_end = body.find("</h1>")
    body = body[:first_heading_end + 5] + "\n" + toc + body[first_heading_end + 5:] if first_heading_end >= 0 \
        else toc + body
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{PAGE_STYLE}</style></head><body>\n{body}\n</body></html>\n")


def write_page(reports_dir: Path | str, stem: str, markdown_text: str, title: str) -> list[str]:
    """Write ``<stem>.md`` and its standalone ``<stem>.html`` (:func:`render_html`) atomically into
    ``reports_dir``; return both paths."""
    out = Path(reports_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, page = out / f"{stem}.md", out / f"{stem}.html"
    results.atomic_write_text(md, markdown_text)
    results.atomic_write_text(page, render_html(markdown_text, title))
    return [str(md), str(page)]


def protocol_versions(rows):
    """Each row's training-protocol version (rows without a ``protocol`` column were made under version 1)."""
    protocol = rows["protocol"] if "protocol" in rows else rows["method"].map(lambda _: math.nan)
    return protocol.map(results.protocol_version).astype(int)


def _section_notes(view: TaskView) -> list[str]:
    delta = reach_delta(view.metric)
    unit, scale = macs_unit(view.macs_dense)
    arrow = "↑" if view.higher_is_better else "↓"
    notes = [f"Dataset: **{md_escape(view.dataset)}**. Metric: {view.metric} {arrow}. "
             f"Dense base cost: {view.macs_dense / scale:.4g} {unit} per sample."]
    if view.dense is None:
        notes.append("No dense base row: cost to reach dense quality is not defined.")
    else:
        notes.append(f"Dense base ({view.dense['knob_name']}={knob_label(view.dense['knob_value'])}) "
                     f"{view.metric} = {view.dense['quality']:.4f}; target = dense {'−' if view.higher_is_better else '+'} δ"
                     f" (δ = {delta:g}).")
    if view.common is None:
        notes.append(f"Common cost range of the swept methods: none ({disjoint_ranges(view)}), so normalized "
                     "AUC is not reported.")
    else:
        notes.append(f"Normalized AUC over the common cost range {view.common[0]:.1%} – {view.common[1]:.1%} of dense cost.")
    return notes


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


def _header(results_dir: str, n_rows: int) -> list[str]:
    refs = ", ".join(f"{k}: {v:g}" for k, v in REFERENCE_POINTS.items())
    return [
        "Generated by `python -m bench report` from the result rows under "
        f"`{results_dir}/` ({n_rows} rows after keeping the latest run of each point).",
        f"Uncertainty: [95% CI] = two-level bootstrap of the seed mean ({stats.N_RESAMPLES} resamples, percentile; "
        "`scipy.stats.bootstrap`): the training seeds are resampled, then the test examples within each resampled "
        "seed (paired: every row of a section, each seed of a point included, is resampled with the same example indices; parity generates each "
        "seed's test set from the seed, so there the rows of one seed share examples), so the CI covers the choice "
        f"of seed as well as the test set. With fewer than {stats.MIN_SEEDS} seeds the seed level is not estimated "
        "and the CI covers the test examples only; the points table shows the examples-only CI beside the two-level "
        "one, and the seed range. Quality at a budget is bootstrapped on the method's hull as drawn from the seed "
        "means (every resample is read on the same hull points, so a measured point keeps its own CI). How and "
        "why: docs/measurement.md.",
        "Cost = mean MACs per sample (GMACs = the vision papers' \"GFLOPs\"); % = of the task's dense base model.",
        "Points = seed means per knob value. Quality at 25/50/75/100% of dense cost is interpolated on each "
        "method's upper concave hull (a point below the chord of two others is not a vertex; continued flat to its "
        "costliest point), never "
        f"extrapolated ({NA} = outside the measured range). Cost to reach dense quality uses δ = half a point on "
        f"the metric's scale (each task's section gives it): {DELTA:g} for rates in [0, 1] (0.5 pp of accuracy or "
        "WER), " + ", ".join(f"{v:g} for {k}" for k, v in DELTA_BY_METRIC.items()) + " (0-100 scale).",
        "Kind (of a method's knob): train = each knob value is a training of its own; eval = one trained model "
        "evaluated at each knob value; static = fixed-size dense models.",
        "Normalized AUC: the hull's mean quality over the cost range all of a section's curves cover (the section "
        "gives it), in the metric's units and direction (↑: higher is better; ↓: lower).",
        "Rows tables: \"latency b1 ×dense\" and \"throughput ×dense\" are ratios to the dense base timed in the "
        "same process, interleaved with the method (docs/measurement.md, \"How cost and time are measured\"): compare those "
        "rather than milliseconds timed in different sessions.",
        f"Hypervolume: cost as a fraction of dense cost, reference point = ({REFERENCE_COST:g} × dense cost, "
        f"reference quality per metric: {refs}; other metrics 0 if ↑, 1 if ↓).",
        f"Pareto-optimal: yes (k/n; j in ≥ {FRONT_SURE:.0%} of resamples) = k of the method's n points are on the "
        "task's overall front by their seed means, and j of them are on it in at least that share of the bootstrap "
        "resamples of the test examples (the points table gives each point's share).",
        "Against the static models: each method point against the hull of the section's static models (the dense "
        "base and its other sizes) at the point's own cost, with the claims' rules (paired CI, seeds must "
        "agree): better, worse or inconclusive.",
        "What has been run (points, seeds, protocol per method): [status.md](status.md); how long the dense "
        "bases train and what more steps would gain: [curves.md](curves.md).",
    ]


def dataset_tag(dataset: str) -> str:
    """A short name for a section's dataset: its name before the first parenthesis, and the evaluation set
    when the dataset names one ("...; eval <set>: <size>"); the leaderboard uses the whole name where two
    sections of one task would share a tag."""
    name = dataset.split(" (")[0].strip()
    evaluation = re.search(r"; eval ([^:;]+)", dataset)
    return f"{name}, eval {evaluation.group(1).strip()}" if evaluation else name
