"""Parity outputs for ``bench report``: error rate and mean ponder steps vs difficulty (Graves Fig. 6/7),
and ACT against the static recurrences at equal cost.

Reads the per-sample tables kept beside the rows (difficulty, score, ponder_steps); one curve per
(method, knob value), averaged over seeds.  The equal-cost table interpolates the static curve (the cell
applied 1, 2, 4, ... times at full width: dense rows ``w1-d<k>``) linearly at each ACT point's cost.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench import results
from bench.figures import save_figure


def difficulty_table(rows: pd.DataFrame, results_dir: Path) -> pd.DataFrame:
    """Per (method, knob_value, difficulty): error rate, mean ponder steps, samples (seeds pooled)."""
    frames = []
    for row in rows.itertuples(index=False):
        try:
            samples = results.load_samples(results_dir, row.task, row.method, row.run_id)
        except FileNotFoundError:
            continue
        samples = samples.assign(method=row.method, knob_value=str(row.knob_value), knob_name=row.knob_name)
        if "ponder_steps" not in samples:
            samples["ponder_steps"] = float("nan")
        frames.append(samples)
    if not frames:
        return pd.DataFrame()
    data = pd.concat(frames, ignore_index=True)
    data["error"] = 1.0 - data["score"]
    table = (data.groupby(["method", "knob_name", "knob_value", "difficulty"], as_index=False)
             .agg(error=("error", "mean"), errors=("error", "sum"), ponder_steps=("ponder_steps", "mean"),
                  ponder_sd=("ponder_steps", "std"), n=("score", "size")))
    return _with_intervals(table)


def _with_intervals(table: pd.DataFrame) -> pd.DataFrame:
    """95% CIs per difficulty: the error rate's Wilson interval (``scipy.stats.binomtest``; seeds pooled, so
    it covers the test examples, not the seeds) and a normal interval of the mean ponder steps."""
    import numpy as np
    from scipy.stats import binomtest

    lo, hi = [], []
    for k, n in zip(table["errors"].round().astype(int), table["n"]):
        ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=0.95, method="wilson")
        lo.append(ci.low)
        hi.append(ci.high)
    half = 1.96 * table["ponder_sd"].fillna(0.0) / np.sqrt(table["n"])
    return table.assign(error_lo=lo, error_hi=hi, ponder_lo=table["ponder_steps"] - half,
                        ponder_hi=table["ponder_steps"] + half).drop(columns=["errors", "ponder_sd"])


def equal_cost_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per ACT knob value (seed means): accuracy and cost, and the static recurrences' accuracy at that cost.

    ``static_at_cost`` is NaN outside the static points' cost range (no extrapolation); ``act_minus_static``
    > 0 means ACT is more accurate than a static network of the same mean cost.
    """
    import numpy as np

    static = rows[(rows["method"] == "dense") & rows["knob_value"].astype(str).str.match(r"^w1-d\d+(\.0)?$")]
    act = rows[rows["method"] == "act"]
    if static.empty or act.empty:
        return pd.DataFrame()
    curve = static.groupby("knob_value").agg(cost=("cost_pct_dense", "mean"), quality=("quality", "mean"))
    curve = curve.sort_values("cost")
    out = []
    for value, group in act.groupby("knob_value", sort=False):
        cost, quality = float(group["cost_pct_dense"].mean()), float(group["quality"].mean())
        inside = curve["cost"].min() <= cost <= curve["cost"].max()
        at = float(np.interp(cost, curve["cost"], curve["quality"])) if inside else float("nan")
        out.append({"method": "act", "knob_name": group["knob_name"].iloc[0], "knob_value": str(value),
                    "seeds": int(group["seed"].nunique()), "accuracy": quality, "cost_pct": cost,
                    "static_points": ";".join(f"{k}:{c:.1f}%:{q:.4f}" for k, (c, q) in curve.iterrows()),
                    "static_at_cost": at, "act_minus_static": quality - at})
    return pd.DataFrame(out).sort_values("cost_pct", kind="stable").reset_index(drop=True)


def difficulty_figure(rows: pd.DataFrame, results_dir: Path, reports_dir: Path, stem: str = "parity") -> list[Path]:
    """``<stem>_difficulty.png``, ``<stem>_difficulty.csv`` and ``<stem>_equal_cost.csv`` for one dataset's rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = difficulty_table(rows, Path(results_dir))
    if table.empty:
        return []
    dataset = rows["dataset"].iloc[0]
    fig, (ax_err, ax_steps) = plt.subplots(1, 2, figsize=(13, 4.8))
    curves = list(table.groupby(["method", "knob_name", "knob_value"], sort=True))
    palette = plt.get_cmap("tab10")
    for i, ((method, knob, value), curve) in enumerate(curves):
        label = f"{method} {knob}={value}"
        style = "-" if curve["ponder_steps"].notna().any() else "--"  # adaptive solid, static dashed
        color = palette(i % 10)
        ax_err.errorbar(curve["difficulty"], curve["error"],
                        yerr=[curve["error"] - curve["error_lo"], curve["error_hi"] - curve["error"]],
                        fmt=style, color=color, marker=".", capsize=2, elinewidth=0.8, label=label)
        if curve["ponder_steps"].notna().any():
            ax_steps.errorbar(curve["difficulty"], curve["ponder_steps"],
                              yerr=[curve["ponder_steps"] - curve["ponder_lo"], curve["ponder_hi"] - curve["ponder_steps"]],
                              fmt=style, color=color, marker=".", capsize=2, elinewidth=0.8, label=label)
    top = max(0.55, float(table["error_hi"].max()) + 0.03)  # never clip a point or its interval
    ax_err.axhline(0.5, color="black", lw=1.0, ls=":", label="chance (error 0.5)")
    ax_err.set(xlabel="difficulty (non-zero entries)", ylabel="error rate ↓", ylim=(-0.02, top),
               title="error vs difficulty (95% Wilson CI over test examples)")
    ax_steps.set(xlabel="difficulty (non-zero entries)", ylabel="mean ponder steps N",
                 title="ponder time vs difficulty (95% CI of the mean)")
    for ax in (ax_err, ax_steps):
        ax.grid(alpha=0.3)
    ax_steps.legend(*ax_err.get_legend_handles_labels(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                    title="seeds pooled")
    fig.suptitle(f"parity — {dataset}; dashed = static (no ponder steps)", fontsize=10)
    fig.tight_layout()
    path = Path(reports_dir) / f"{stem}_difficulty.png"
    save_figure(fig, path)
    plt.close(fig)
    table_path = Path(reports_dir) / f"{stem}_difficulty.csv"
    results.atomic_write_frame(table_path, table)
    written = [path, table_path]
    equal = equal_cost_table(rows)
    if not equal.empty:
        written.append(Path(reports_dir) / f"{stem}_equal_cost.csv")
        results.atomic_write_frame(written[-1], equal)
    return written
