"""Balanced k-means: split n points into E clusters of exactly n/E points each (MoEfication §3.1).

MoEfication's parameter clustering groups an MLP's hidden neurons by their L2-normalised fc1 rows with
a size-constrained k-means (every expert gets d_mlp/E neurons).  Here: k-means++ seeding from a seeded
generator, then Lloyd iterations whose assignment step is the EXACT capacity-constrained assignment
(minimum total squared distance with every cluster holding exactly n/E points), solved as a linear
assignment of points to n cluster "slots" (scipy's ``linear_sum_assignment``; scipy comes with
scikit-learn).  Both steps never increase the objective, so the loop stops when labels repeat or after
``iters`` iterations.  Everything is deterministic given the seed.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


def _squared_distances(points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """[n, E] squared Euclidean distances (‖x‖² − 2x·c + ‖c‖², no [n, E, d] intermediate)."""
    sq = (points ** 2).sum(axis=1)[:, None] - 2.0 * points @ centroids.T + (centroids ** 2).sum(axis=1)[None]
    return np.maximum(sq, 0.0)


def kmeans_plus_plus(points: np.ndarray, clusters: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding (Arthur & Vassilvitskii 2007): each next centre ∝ squared distance to the nearest."""
    centroids = [points[rng.integers(len(points))]]
    for _ in range(1, clusters):
        nearest = _squared_distances(points, np.stack(centroids)).min(axis=1)
        total = nearest.sum()
        if total <= 0:  # all points coincide with chosen centres: pick any
            index = rng.integers(len(points))
        else:
            index = rng.choice(len(points), p=nearest / total)
        centroids.append(points[index])
    return np.stack(centroids)


def balanced_assignment(distances: np.ndarray, size: int) -> np.ndarray:
    """Labels minimising Σ distance[i, label_i] subject to every cluster holding exactly ``size`` points."""
    n, clusters = distances.shape
    if n != clusters * size:
        raise ValueError(f"{n} points cannot be split into {clusters} clusters of {size}")
    slots = np.repeat(distances, size, axis=1)  # slot j belongs to cluster j // size
    rows, cols = linear_sum_assignment(slots)
    labels = np.empty(n, dtype=np.int64)
    labels[rows] = cols // size
    return labels


def balanced_kmeans(points: np.ndarray, clusters: int, *, seed: int, iters: int = 30) -> np.ndarray:
    """Cluster labels in [0, clusters) with exactly len(points)/clusters points per cluster."""
    points = np.asarray(points, dtype=np.float64)
    n = len(points)
    if clusters < 1 or n % clusters:
        raise ValueError(f"cannot split {n} neurons into {clusters} equal experts")
    size = n // clusters
    rng = np.random.default_rng(seed)
    centroids = kmeans_plus_plus(points, clusters, rng)
    labels = balanced_assignment(_squared_distances(points, centroids), size)
    for _ in range(iters - 1):
        centroids = np.stack([points[labels == c].mean(axis=0) for c in range(clusters)])
        new = balanced_assignment(_squared_distances(points, centroids), size)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels


def objective(points: np.ndarray, labels: np.ndarray) -> float:
    """Within-cluster sum of squared distances to the cluster means (for tests and diagnostics)."""
    points = np.asarray(points, dtype=np.float64)
    return float(sum(((points[labels == c] - points[labels == c].mean(axis=0)) ** 2).sum()
                     for c in np.unique(labels)))
