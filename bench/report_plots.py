"""Per-task trade-off figures for ``bench report`` (matplotlib, Agg backend, imported lazily).

One figure per (task, dataset): x = mean MACs per sample (or batch-1 latency), y = the task's metric.
The dense base model is drawn as dashed cross-hairs, static methods as markers, swept methods as lines
through their seed-mean points (labelled with knob values), seed spread as min-max error bars, and the
points on the task's overall Pareto front ringed in black.  A method has the same colour in every figure.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from bench.figures import save_figure  # noqa: F401  (re-exported: figure modules used it from here)
from bench.report import TaskView, knob_label, macs_unit, pareto_mask

METHOD_COLORS = {
    "dense": "#444444", "acm": "#1f77b4", "moefication": "#ff7f0e", "act": "#2ca02c", "avit": "#d62728",
    "early_exit": "#9467bd", "cct": "#8c564b", "adatape": "#e377c2",
}
_FALLBACK = ["#17becf", "#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
             "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5"]


def method_color(method: str) -> str:
    """Fixed colour per method name; unknown names get a stable (crc32-hashed) colour."""
    return METHOD_COLORS.get(method, _FALLBACK[zlib.crc32(method.encode()) % len(_FALLBACK)])


def plot_task(view: TaskView, path: Path, x: str = "cost", note: str = "") -> Path:
    """Draw one task's figure with x = "cost" (MACs, plus a top "% of dense cost" axis) or "latency"
    (batch-1 latency as a ratio to the dense base model timed in the same process)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    unit, scale = macs_unit(view.macs_dense)
    points = view.points.copy()
    if x == "cost":
        points["x"], xlabel = points["cost"] / scale, f"mean MACs per sample ({unit})"
    else:
        points["x"] = points["latency_ratio"]
        xlabel = "batch-1 latency, × the dense base model timed in the same process"
    arrow = "↑" if view.higher_is_better else "↓"
    fig, ax = plt.subplots(figsize=(8, 5.2))

    if view.dense is not None:
        dense_x = view.dense["cost"] / scale if x == "cost" else view.dense.get("latency_ratio", np.nan)
        kw = dict(color=method_color("dense"), linestyle="--", linewidth=1, alpha=0.7)
        if np.isfinite(dense_x):
            ax.axvline(dense_x, **kw)
        ax.axhline(view.dense["quality"], label=f"dense base ({view.dense['knob_name']}={knob_label(view.dense['knob_value'])})", **kw)

    styles = ["-", "--", ":", "-."]  # several curves of one method (variants) keep its colour, not its line
    seen_per_method: dict[str, int] = {}
    for curve, pts in points.groupby("curve", sort=False):
        pts = pts.sort_values("x")
        method = str(pts["method"].iloc[0])
        color = method_color(method)
        line = styles[seen_per_method.get(method, 0) % len(styles)]
        seen_per_method[method] = seen_per_method.get(method, 0) + 1
        static = str(pts["knob_kind"].iloc[0]) == "static"
        spread = pts["n_seeds"] > 1
        yerr = np.vstack([pts["quality"] - pts["q_min"], pts["q_max"] - pts["quality"]]) * spread.to_numpy()
        ax.errorbar(pts["x"], pts["quality"], yerr=yerr if spread.any() else None, color=color,
                    marker="s" if static else "o", markersize=6 if static else 4,
                    linestyle="none" if static else line, linewidth=1.5, capsize=3, label=f"{curve} ({pts['knob_kind'].iloc[0]})")
        for px, py, value in zip(pts["x"], pts["quality"], pts["knob_value"]):
            ax.annotate(knob_label(value), (px, py), xytext=(3, 4), textcoords="offset points", fontsize=7, color=color)

    front = points[pareto_mask(points["x"], points["quality"], view.higher_is_better)]
    ax.scatter(front["x"], front["quality"], s=90, facecolors="none", edgecolors="black", linewidths=0.8,
               label="on the task's Pareto front", zorder=3)

    if x == "cost":
        to_pct = lambda v: v * scale / view.macs_dense * 100  # noqa: E731
        from_pct = lambda p: p / 100 * view.macs_dense / scale  # noqa: E731
        ax.secondary_xaxis("top", functions=(to_pct, from_pct)).set_xlabel("% of dense cost")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{view.metric} {arrow}")
    subtitle = "points: seed means; error bars: min–max over seeds" + (f"; timed on {note}" if note else "")
    ax.set_title(f"{view.task} — {view.dataset}\n({subtitle})", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)
    return path
