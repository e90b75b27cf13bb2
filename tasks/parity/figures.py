"""Parity figure for ``bench report``: error rate and mean ponder steps vs difficulty (Graves Fig. 6/7).

Reads the per-sample tables kept beside the rows (difficulty, score, ponder_steps); one curve per
(method, knob value), averaged over seeds.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench import results


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
    return (data.groupby(["method", "knob_name", "knob_value", "difficulty"], as_index=False)
            .agg(error=("error", "mean"), ponder_steps=("ponder_steps", "mean"), n=("score", "size")))


def difficulty_figure(rows: pd.DataFrame, results_dir: Path, reports_dir: Path, stem: str = "parity") -> list[Path]:
    """``<stem>_difficulty.png`` and ``<stem>_difficulty.csv`` for one dataset's rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.figures import save_figure

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
        ax_err.plot(curve["difficulty"], curve["error"], style, color=color, marker=".", label=label)
        if curve["ponder_steps"].notna().any():
            ax_steps.plot(curve["difficulty"], curve["ponder_steps"], style, color=color, marker=".", label=label)
    ax_err.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax_err.set(xlabel="difficulty (non-zero entries)", ylabel="error rate ↓ (0.5 = chance)", ylim=(-0.02, 0.6),
               title="error vs difficulty")
    ax_steps.set(xlabel="difficulty (non-zero entries)", ylabel="mean ponder steps N", title="ponder time vs difficulty")
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
    return [path, table_path]
