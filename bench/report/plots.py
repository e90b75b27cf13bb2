"""Per-task trade-off figures for ``bench report`` (matplotlib, Agg backend, imported lazily).

One figure per (task, dataset): x = mean MACs per sample (or batch-1 latency), y = the task's metric.
The dense base model is drawn as dashed cross-hairs, static methods as markers, swept methods as markers
at their seed-mean points joined by a line along the curve's own frontier only (a method with two budget
sets, such as CCT's (p, p) and (1, p), never zigzags between them; points off its frontier stay unjoined),
labelled with knob values placed so that no two labels overlap (a label that finds no free place is left
out and counted in the figure).  Error bars: the two-level bootstrap 95% CI of the seed mean (seeds, then test examples;
bench.stats); small horizontal ticks: the seeds' min and max.  Points on the task's overall Pareto front
are ringed in black (dotted: on it by the seed means, but in fewer than 95% of the resamples).  A method has the same colour in every figure.
"""

from __future__ import annotations

import textwrap
import zlib
from pathlib import Path

import numpy as np

from bench.figures import save_figure  # noqa: F401  (re-exported: figure modules used it from here)
from bench.report.frontier import pareto_mask, upper_hull
from bench.report.tables import FRONT_SURE, macs_unit
from bench.report.views import TaskView, knob_label

METHOD_COLORS = {
    "dense": "#444444", "acm": "#1f77b4", "moefication": "#ff7f0e", "act": "#2ca02c", "avit": "#d62728",
    "early_exit": "#9467bd", "cct": "#8c564b", "adatape": "#e377c2",
}
_FALLBACK = ["#17becf", "#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
             "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5"]


def method_color(method: str) -> str:
    """Fixed colour per method name; unknown names get a stable (crc32-hashed) colour."""
    return METHOD_COLORS.get(method, _FALLBACK[zlib.crc32(method.encode()) % len(_FALLBACK)])


# Several curves of one method (variants) keep its colour, not its marker or line style; the legend shows both,
# so that the variants can be told apart there too.  Eight markers against four line styles: no two of a
# method's first eight variants look the same.
LINE_STYLES = ("-", "--", ":", "-.")
SWEPT_MARKERS = ("o", "^", "D", "v", "P", "X", "<", ">")
STATIC_MARKERS = ("s", "p", "h", "8")  # static sizes are drawn as points only


RECIPE_ORDER = ("matched", "paper")  # a method's curves are numbered recipe by recipe, in this order


def variant_numbers(view: TaskView) -> dict[str, int]:
    """Each curve's number among its method's curves: its marker and line style.  A method's curves are
    numbered recipe by recipe (:data:`RECIPE_ORDER`, then any other), in the view's order within a recipe, so
    that a method's matched curves take the first markers (with one curve per recipe, every method draws a
    recipe with the same marker).  Computed on the cost view and passed to the
    latency figure, so that a curve keeps its look in both."""
    curves: dict[str, list[tuple[int, str]]] = {}
    for curve, pts in view.points.groupby("curve", sort=False):
        recipe = str(pts["recipe"].iloc[0]) if "recipe" in pts else ""
        rank = RECIPE_ORDER.index(recipe) if recipe in RECIPE_ORDER else len(RECIPE_ORDER)
        curves.setdefault(str(pts["method"].iloc[0]), []).append((rank, str(curve)))
    return {curve: number for ranked in curves.values()
            for number, (_, curve) in enumerate(sorted(ranked, key=lambda item: item[0]))}


def variant_style(number: int, static: bool) -> tuple[str, str]:
    """(marker, line style) of a method's ``number``-th curve."""
    markers = STATIC_MARKERS if static else SWEPT_MARKERS
    return markers[number % len(markers)], LINE_STYLES[number % len(LINE_STYLES)]


def front_rings(points, higher_is_better: bool, by_share: bool = True):
    """(sure, unsure): the points on the front by their seed means (in the figure's x), split by whether
    they stay on it in at least :data:`FRONT_SURE` of the bootstrap resamples (``front_share``, a cost
    front; with ``by_share`` False, or without shares, every front point is "sure")."""
    front = points[pareto_mask(points["x"], points["quality"], higher_is_better)]
    if not by_share or "front_share" not in front or front["front_share"].isna().all():
        return front, front.iloc[0:0]
    doubtful = front["front_share"] < FRONT_SURE  # a point without draws (NaN share) is not called doubtful
    return front[~doubtful], front[doubtful]


def percent_axis_label(view: TaskView) -> str:
    """The cost figure's top axis has one scale: the bases' median cost (``view.macs_dense``).  The tables
    divide each row by its own seed's base, which differs by a percent or so where decoding lengths differ
    (iwslt), so the axis says which base it uses when the bases differ."""
    several = "macs_dense" in view.rows and view.rows["macs_dense"].nunique() > 1
    return "% of dense cost" + (" (of the bases' median cost)" if several else "")


def plot_task(view: TaskView, path: Path, x: str = "cost", note: str = "",
              variants: dict[str, int] | None = None) -> Path:
    """Draw one task's figure with x = "cost" (MACs, plus a top "% of dense cost" axis) or "latency"
    (batch-1 latency as a ratio to the dense base model timed in the same process).  ``variants``: each
    curve's :func:`variant_numbers` (default: this view's)."""
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

    variants = variant_numbers(view) if variants is None else variants
    labels = []
    for curve, pts in points.groupby("curve", sort=False):
        pts = pts[np.isfinite(pts["x"])].sort_values("x")
        if pts.empty:
            continue
        method = str(pts["method"].iloc[0])
        color = method_color(method)
        static = str(pts["knob_kind"].iloc[0]) == "static"
        marker, line = variant_style(variants.get(str(curve), 0), static)
        chosen = pts["val_quality"] if "val_quality" in pts else None  # vertices chosen on validation
        hx, hy = upper_hull(pts["x"], pts["quality"], view.higher_is_better, chosen) if not static else ([], [])
        hull = len(hx) > 1  # the legend shows a line only where one is drawn
        lo = pts["ci_lo"] if "ci_lo" in pts else pd_nan(pts)
        hi = pts["ci_hi"] if "ci_hi" in pts else pd_nan(pts)
        have = np.isfinite(lo.to_numpy(float)) & np.isfinite(hi.to_numpy(float))
        yerr = np.vstack([np.where(have, pts["quality"] - lo, 0.0), np.where(have, hi - pts["quality"], 0.0)])
        size = 6 if static else 4
        ax.errorbar(pts["x"], pts["quality"], yerr=yerr, color=color, marker=marker, markersize=size,
                    linestyle="none", elinewidth=1.2, capsize=3)
        ax.plot([], [], color=color, marker=marker, markersize=size, linestyle=line if hull else "none",
                linewidth=1.5, label=f"{curve} ({pts['knob_kind'].iloc[0]})")  # the legend's entry
        spread = pts["n_seeds"] > 1
        if spread.any():
            ax.scatter(np.tile(pts["x"][spread].to_numpy(), 2),
                       np.concatenate([pts["q_min"][spread].to_numpy(), pts["q_max"][spread].to_numpy()]),
                       marker="_", s=60, color=color, linewidths=1.0, alpha=0.8, zorder=2)
        if hull:
            ax.plot(hx, hy, color=color, linestyle=line, linewidth=1.5)
        labels += [(px, py, knob_label(value), color) for px, py, value in zip(pts["x"], pts["quality"],
                                                                                pts["knob_value"])]

    # the front of the cost figure is the tables' front: fractions of each row's own dense base (``frac``)
    front_x = points.assign(x=points["frac"]) if x == "cost" else points
    sure, unsure = front_rings(front_x, view.higher_is_better, by_share=(x == "cost"))
    sure, unsure = points.loc[sure.index], points.loc[unsure.index]
    ax.scatter(sure["x"], sure["quality"], s=90, facecolors="none", edgecolors="black", linewidths=0.8,
               label="on the task's Pareto front" + (f" (in ≥ {FRONT_SURE:.0%} of resamples)" if len(unsure) else ""),
               zorder=3)
    if len(unsure):
        ax.scatter(unsure["x"], unsure["quality"], s=90, facecolors="none", edgecolors="black", linewidths=0.8,
                   linestyles="dotted", label="on the front by the seed means only", zorder=3)

    if x == "cost":
        to_pct = lambda v: v * scale / view.macs_dense * 100  # noqa: E731
        from_pct = lambda p: p / 100 * view.macs_dense / scale  # noqa: E731
        ax.secondary_xaxis("top", functions=(to_pct, from_pct)).set_xlabel(percent_axis_label(view))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{view.metric} {arrow}")
    subtitle = "points: seed means; error bars: 95% two-level bootstrap CI (seeds, test examples); ticks: seed min/max"
    ax.set_title(f"{view.task} — {view.dataset}\n({subtitle})", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    omitted = place_labels(ax, labels)
    footer = []
    if note:
        footer.append(f"timed on {note}")
    if omitted:
        footer.append(f"{omitted} point label(s) left out to avoid overlaps (knob values are in the leaderboard)")
    if footer:
        ax.text(0.0, -0.14, "\n".join(textwrap.fill(f, 120) for f in footer), transform=ax.transAxes,
                fontsize=7, va="top", ha="left", color="#333333")
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)
    return path


def pd_nan(frame):
    import pandas as pd

    return pd.Series(np.nan, index=frame.index)


def place_labels(ax, labels: list[tuple[float, float, str, str]]) -> int:
    """Annotate points with short texts, each at the first of a ring of offsets where it overlaps no label
    placed before it and no marker; returns how many labels found no free place (they are left out)."""
    fig = ax.figure
    fig.canvas.draw()  # the data-to-pixel transform and text sizes are final only after a draw
    renderer = fig.canvas.get_renderer()
    to_px = ax.transData.transform
    markers = [to_px((x, y)) for x, y, _, _ in labels]
    taken: list[tuple[float, float, float, float]] = [(mx - 4, my - 4, mx + 4, my + 4) for mx, my in markers]
    offsets = [(4, 4), (4, -10), (-4, 4), (-4, -10), (8, 12), (8, -18), (-8, 12), (-8, -18), (14, 0), (-14, 0),
               (4, 20), (4, -26)]
    omitted = 0
    for x, y, text, color in labels:
        placed = False
        for dx, dy in offsets:
            ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7, color=color,
                              ha="left" if dx >= 0 else "right")
            box = ann.get_window_extent(renderer)
            rect = (box.x0, box.y0, box.x1, box.y1)
            inside = ax.get_window_extent(renderer)
            clear = all(rect[2] <= t[0] or rect[0] >= t[2] or rect[3] <= t[1] or rect[1] >= t[3] for t in taken)
            if clear and inside.x0 <= rect[0] and rect[2] <= inside.x1 and inside.y0 <= rect[1] and rect[3] <= inside.y1:
                taken.append(rect)
                placed = True
                break
            ann.remove()
        omitted += not placed
    return omitted
