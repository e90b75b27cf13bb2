"""The rows of ``python -m bench kernels`` (:mod:`methods.acm.kernels.bench`): their columns, the
T(f)/T_dense = a + b·f fits, the Figure-9-style plot, and reading them back.

Rows: ``results/kernels/<run_id>.csv``, one row per (batch, variant, k mode, fraction) point
(:data:`ROW_COLUMNS`); fits: ``<run_id>.fit.csv`` (:data:`FIT_COLUMNS`), recomputable from the rows alone
(:func:`refit`), as is the figure (:func:`plot_kernel_rows`).  Nothing here imports torch.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bench.figures import save_figure
from bench.results import atomic_write_frame

DENSE = "dense_eager"
COMPILE = "dense_compile"
IDEAL = "ideal_narrow"
ACM_VARIANTS = ("acm_naive", "acm_sorted", "acm_masked", "acm_triton")
GRAPH = "@graph"  # suffix of a variant timed as a CUDA-graph replay
BEST_DENSE = "dense_best"  # fit baseline: the fastest dense variant of the batch
NO_K_MODE = "any"  # dense and ideal rows do not depend on the k distribution (not an NA token for pandas)

ROW_COLUMNS = ["run_id", "device", "device_name", "dtype", "batch", "main_batch", "tokens", "d", "n_learners",
               "width", "activation", "k_mode", "variant", "fraction", "executed_fraction", "median_ms",
               "iqr_ms", "min_ms", "n_samples", "rel_to_dense", "rel_to_compile", "rel_to_best_dense", "gflop",
               "achieved_tflops", "peak_tflops", "pct_of_peak", "triton_config", "ideal_align", "threads",
               "rounds", "min_run_s", "status", "torch_version", "triton_version", "git_sha", "git_dirty",
               "command", "timestamp"]
FIT_COLUMNS = ["run_id", "device_name", "dtype", "batch", "tokens", "d", "n_learners", "width", "activation",
               "k_mode", "variant", "baseline", "statistic", "n_points", "intercept", "slope", "r2", "max_residual",
               "t025_rel", "t1_rel"]


def base_variant(variant: str) -> str:
    """``acm_triton@graph`` → ``acm_triton``."""
    return str(variant).split(GRAPH)[0]


# ---------------------------------------------------------------- rows and fits


def finish_rows(rows: list[dict]):
    """The measured rows as a frame of :data:`ROW_COLUMNS` (absent ones NaN), with each point's time relative
    to its batch's dense eager, dense compile and fastest dense median, its TFLOP/s and share of the peak."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    for column in ROW_COLUMNS:
        if column not in frame:
            frame[column] = math.nan
    frame = frame[ROW_COLUMNS]
    for batch, idx in frame.groupby("batch").groups.items():
        sub = frame.loc[idx]
        ok = sub["status"] == "ok"
        dense = sub.loc[(sub["variant"] == DENSE) & ok, "median_ms"]
        comp = sub.loc[(sub["variant"] == COMPILE) & ok, "median_ms"]
        best = sub.loc[sub["variant"].map(base_variant).isin([DENSE, COMPILE]) & ok, "median_ms"]
        frame.loc[idx, "rel_to_dense"] = sub["median_ms"] / dense.iloc[0] if len(dense) else math.nan
        frame.loc[idx, "rel_to_compile"] = sub["median_ms"] / comp.iloc[0] if len(comp) else math.nan
        frame.loc[idx, "rel_to_best_dense"] = sub["median_ms"] / best.min() if len(best) else math.nan
    frame["achieved_tflops"] = frame["gflop"] / frame["median_ms"]  # GFLOP / ms = TFLOP/s
    frame["pct_of_peak"] = 100.0 * frame["achieved_tflops"] / frame["peak_tflops"]
    return frame


def fit_line(x, y) -> dict:
    """Least squares y = a + b·x: intercept, slope, R², max |residual|, fitted y(0.25) and y(1)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 2 or np.ptp(x) == 0:
        return {"n_points": int(len(x)), "intercept": math.nan, "slope": math.nan, "r2": math.nan,
                "max_residual": math.nan, "t025_rel": math.nan, "t1_rel": math.nan}
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (intercept + slope * x)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / ss_tot if ss_tot > 0 else math.nan
    return {"n_points": int(len(x)), "intercept": float(intercept), "slope": float(slope), "r2": r2,
            "max_residual": float(np.abs(resid).max()), "t025_rel": float(intercept + 0.25 * slope),
            "t1_rel": float(intercept + slope)}


def fit_rows(rows_df):
    """The fit table of a frame of kernel rows: per (run, batch, k mode, variant), the line through the
    medians relative to dense_eager (and to dense_compile where it ran, and to the fastest dense variant
    of the batch, baseline ``dense_best``, where rows carry ``rel_to_best_dense``), and, as a
    contention-robust secondary estimate, through the per-point minimum block times relative to
    dense_eager's minimum (``statistic`` = "median" / "min").  CUDA-graph variants (``…@graph``) are
    fitted like the others."""
    import pandas as pd

    ok = rows_df[rows_df["status"] == "ok"]
    frame = ok[ok["variant"].map(base_variant).isin((IDEAL,) + ACM_VARIANTS)]
    dense_min = {}
    if "min_ms" in ok:
        for (run_id, batch), group in ok[ok["variant"] == DENSE].groupby(["run_id", "batch"]):
            dense_min[(run_id, batch)] = float(group["min_ms"].iloc[0])
    keys = ["run_id", "device_name", "dtype", "batch", "tokens", "d", "n_learners", "width", "activation",
            "k_mode", "variant"]
    out = []
    for key, group in frame.groupby(keys, sort=False, dropna=False):
        fields = dict(zip(keys, key))
        series = [(DENSE, "median", group.get("rel_to_dense")), (COMPILE, "median", group.get("rel_to_compile")),
                  (BEST_DENSE, "median", group.get("rel_to_best_dense"))]
        if (fields["run_id"], fields["batch"]) in dense_min:
            series.append((DENSE, "min", group["min_ms"] / dense_min[(fields["run_id"], fields["batch"])]))
        for baseline, statistic, values in series:
            if values is None or values.isna().all():
                continue
            fit = fit_line(group["executed_fraction"], values)
            out.append({**fields, "baseline": baseline, "statistic": statistic, **fit})
    return pd.DataFrame(out, columns=FIT_COLUMNS)


def refit(rows_csv: Path | str, reports_dir: Path | str | None = None):
    """Recompute ``<id>.fit.csv`` (and redraw the figure when ``reports_dir`` is given) from a rows file."""
    import pandas as pd

    rows_csv = Path(rows_csv)
    frame = pd.read_csv(rows_csv, keep_default_na=False, na_values=[""])
    fits = fit_rows(frame)
    atomic_write_frame(rows_csv.with_name(rows_csv.name[:-len(".csv")] + ".fit.csv"), fits)
    if reports_dir is not None:
        plot_kernel_rows(frame, Path(reports_dir) / "kernel_latency.png")
    return frame, fits


# ---------------------------------------------------------------- plotting


def load_kernel_rows(results_dir: Path | str = "results"):
    """All kernel benchmark rows under ``results_dir/kernels`` (not the fit tables), or an empty frame."""
    import pandas as pd

    paths = sorted(p for p in (Path(results_dir) / "kernels").glob("*.csv")
                   if not p.name.endswith(".fit.csv") and not p.name.startswith("."))
    if not paths:
        return pd.DataFrame()
    return pd.concat([pd.read_csv(p, keep_default_na=False, na_values=[""]) for p in paths], ignore_index=True)


_COLOURS = {"acm_naive": "tab:orange", "acm_sorted": "tab:blue", "acm_triton": "tab:red",
            "acm_masked": "tab:gray", IDEAL: "tab:green", COMPILE: "tab:purple"}
_LABELS = {"acm_naive": "ACM (naive)", "acm_sorted": "ACM (sorted, PyTorch)", "acm_triton": "ACM (Triton)",
           "acm_masked": "ACM (masked)", IDEAL: "narrow dense MLP (ideal, aligned width)",
           COMPILE: "dense MLP (torch.compile)"}


def plot_kernel_rows(rows_df, path: Path | str) -> Path:
    """Draw the Figure-9-style plot from kernel rows alone (the latest run if several are present).

    Left: wall time relative to the dense eager MLP vs executed fraction of learners at the main batch:
    points per ACM variant (filled: iid k, hollow: equal k) with their least-squares lines, the ideal narrow
    MLP, y = 1 (dense) and y = x (linear scaling).  Right: the batch breakdown of the fastest ACM variant
    present (acm_triton, else acm_sorted, else acm_naive): relative time vs fraction for each batch.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    frame = rows_df
    if "run_id" in frame and frame["run_id"].nunique() > 1:
        frame = frame[frame["run_id"] == sorted(frame["run_id"].unique())[-1]]
    frame = frame[frame["status"] == "ok"]
    if frame.empty:
        raise ValueError("no successful kernel rows to plot")
    first = frame.iloc[0]
    main_batch = int(first["main_batch"]) if "main_batch" in frame and np.isfinite(first["main_batch"]) \
        else int(frame["batch"].max())
    if main_batch not in set(frame["batch"]):
        main_batch = int(frame["batch"].max())
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5.2))
    grid = np.linspace(0, 1, 50)
    main = frame[frame["batch"] == main_batch]
    ax.axhline(1.0, color="black", lw=1.2, label="dense MLP (eager)")
    ax.plot(grid, grid, color="black", ls=":", lw=1, label="linear scaling (y = x)")
    comp = main[main["variant"] == COMPILE]
    if len(comp):
        ax.axhline(float(comp["rel_to_dense"].iloc[0]), color=_COLOURS[COMPILE], lw=1, ls="-.",
                   label=_LABELS[COMPILE])
    ideal = main[main["variant"] == IDEAL].sort_values("executed_fraction")
    if len(ideal):
        ax.plot(ideal["executed_fraction"], ideal["rel_to_dense"], color=_COLOURS[IDEAL], lw=1.5, marker="s",
                ms=3, label=_LABELS[IDEAL])
    ideal_graph = main[main["variant"] == IDEAL + GRAPH].sort_values("executed_fraction")
    if len(ideal_graph):
        ax.plot(ideal_graph["executed_fraction"], ideal_graph["rel_to_dense"], color=_COLOURS[IDEAL], lw=1,
                ls=":", marker="s", ms=2, label=_LABELS[IDEAL] + " (CUDA graph)")
    for variant in list(ACM_VARIANTS) + [v + GRAPH for v in ACM_VARIANTS]:
        for mode, sub in main[main["variant"] == variant].groupby("k_mode"):
            colour = _COLOURS[base_variant(variant)]
            hollow = mode == "equal"
            graphed = variant.endswith(GRAPH)
            fit = fit_line(sub["executed_fraction"], sub["rel_to_dense"])
            several = main.loc[main["variant"].map(base_variant).isin(ACM_VARIANTS), "k_mode"].nunique() > 1
            label = f"{_LABELS[base_variant(variant)]}" + (" (CUDA graph)" if graphed else "") + \
                (f" [k {mode}]" if several else "")
            ax.scatter(sub["executed_fraction"], sub["rel_to_dense"], s=28, zorder=3, marker="D" if graphed else "o",
                       facecolors="none" if hollow else colour, edgecolors=colour,
                       label=f"{label}: a={fit['intercept']:.3f}, b={fit['slope']:.2f}, R²={fit['r2']:.3f}")
            dense_ms = main.loc[main["variant"] == DENSE, "median_ms"]
            if len(dense_ms) and "iqr_ms" in sub:  # the spread of the timings: half the IQR either side
                half = sub["iqr_ms"].astype(float) / 2 / float(dense_ms.iloc[0])
                ax.errorbar(sub["executed_fraction"], sub["rel_to_dense"], yerr=half, fmt="none", ecolor=colour,
                            elinewidth=0.8, capsize=2, zorder=2)
            if np.isfinite(fit["slope"]):
                ax.plot(grid, fit["intercept"] + fit["slope"] * grid, color=colour, lw=1,
                        ls=(0, (1, 2)) if hollow else ("-." if graphed else "--"))
    ax.set_xlabel("executed fraction of learners (FLOPs relative to dense MLP)")
    ax.set_ylabel("wall time relative to dense MLP (eager)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(bottom=0)
    ax.set_title(f"batch {main_batch} ({main_batch * int(first['tokens'])} tokens); bars: interquartile range "
                 "of the timings", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")

    present = [v for v in ("acm_triton", "acm_sorted", "acm_naive") if v in set(frame["variant"])]
    if present:
        variant = present[0]
        sub = frame[frame["variant"] == variant]
        modes = sub["k_mode"].unique()
        mode = "iid" if "iid" in modes else modes[0]
        sub = sub[sub["k_mode"] == mode]
        batches = sorted(sub["batch"].unique())
        cmap = plt.get_cmap("viridis")
        for i, batch in enumerate(batches):
            b = sub[sub["batch"] == batch].sort_values("executed_fraction")
            fit = fit_line(b["executed_fraction"], b["rel_to_dense"])
            dense_ms = frame[(frame["batch"] == batch) & (frame["variant"] == DENSE)]["median_ms"]
            dense_txt = f", dense {dense_ms.iloc[0]:.3g} ms" if len(dense_ms) else ""
            if len(dense_ms) and "iqr_ms" in b:  # half the interquartile range of the timings either side
                bx.errorbar(b["executed_fraction"], b["rel_to_dense"], fmt="none", elinewidth=0.8, capsize=2,
                            yerr=b["iqr_ms"].astype(float) / 2 / float(dense_ms.iloc[0]),
                            ecolor=cmap(i / max(1, len(batches) - 1)))
            bx.plot(b["executed_fraction"], b["rel_to_dense"], marker="o", ms=4,
                    color=cmap(i / max(1, len(batches) - 1)),
                    label=f"batch {batch}: a={fit['intercept']:.3f}, b={fit['slope']:.2f}{dense_txt}")
        bx.axhline(1.0, color="black", lw=1.2)
        bx.plot(grid, grid, color="black", ls=":", lw=1)
        bx.set_title(f"batch-size breakdown: {_LABELS[variant]}, k {mode}", fontsize=10)
        bx.set_xlabel("executed fraction of learners")
        bx.set_ylabel("wall time relative to dense MLP (same batch)")
        bx.set_xlim(-0.02, 1.02)
        bx.set_ylim(bottom=0)
        bx.grid(alpha=0.3)
        bx.legend(fontsize=7, loc="upper left")
    threads = first.get("threads")
    thread_txt = f", {int(threads)} threads" if threads is not None and np.isfinite(threads) else ""
    fig.suptitle(f"ACM layer latency vs executed learners — {first['device_name']}, {first['dtype']}{thread_txt}\n"
                 f"tokens/sample {int(first['tokens'])}, d {int(first['d'])}, N {int(first['n_learners'])} × "
                 f"{int(first['width'])}, {first['activation']}; gate included, k random", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path
