"""Frontier math on plain arrays of (cost, quality): Pareto fronts, upper concave hulls and what they give
at a budget -- :func:`pareto_mask`, :func:`upper_hull`, :func:`quality_at_budget`, :func:`cost_to_reach`,
:func:`normalized_auc`, :func:`hypervolume` -- and the bootstrap draws of a hull value at a budget
(:func:`hull_weights`, :func:`hull_draws`).  No rows, no pages: the report's views and tables build on it.

Quality may be higher- or lower-is-better; the math flips it internally ("goodness" = quality or
-quality, :func:`goodness`) and always returns quality in the metric's own units.
"""

from __future__ import annotations

import math

import numpy as np


def goodness(quality, higher_is_better: bool) -> np.ndarray:
    """Quality as "higher is better": ``quality`` itself, or its negation for a lower-is-better metric."""
    q = np.asarray(quality, dtype=float)
    return q if higher_is_better else -q


def pareto_mask(cost, quality, higher_is_better: bool = True) -> np.ndarray:
    """Boolean mask of the points no other point dominates.

    ``j`` dominates ``i`` when cost_j <= cost_i and quality_j is at least as good, one of them strictly.
    Exact duplicates do not dominate each other (both stay); points with NaN cost or quality are never
    on the front and never dominate.
    """
    c = np.asarray(cost, dtype=float)
    g = goodness(quality, higher_is_better)
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
    keep = concave_vertices(c[front], goodness(select[front], higher_is_better))
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
    g, goal = goodness(hull_q, higher_is_better), float(goodness(target, higher_is_better))
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
    g, ref_g = goodness(quality, higher_is_better), float(goodness(ref_quality, higher_is_better))
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
    the estimate when points are close.  Which points are on the front, and how surely, is
    :func:`bench.report.views.front_share`'s question.  Returns [B]; NaN where the budget lies outside the
    points' cost range."""
    draws = np.asarray(quality_draws, dtype=float)
    weights = hull_weights(cost, quality, budget, higher_is_better, chosen_by)
    if weights is None:
        return np.full(draws.shape[1], np.nan)
    used = weights > 0
    return weights[used] @ draws[used]
