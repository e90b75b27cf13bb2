"""AdaTape figure, drawn by ``bench report`` from rows only: tape length and accuracy against difficulty.

For a (task, dataset) whose samples carry a ``difficulty`` column (parity: the number of non-zero
elements) it reads every row of ``adatape``, ``dense`` and ``act`` and their per-sample files (score,
tape_len) and writes

- ``<stem>_adatape_difficulty.png``: left, error rate by difficulty for every model (seeds pooled);
  right, mean tape length by difficulty for every AdaTape point (T, tau), eval-time caps left out;
- ``<stem>_adatape_difficulty.csv``: the table behind it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench import results
from bench.report.plots import save_figure
from bench.stats import mean_interval, proportion_interval


def table(rows: pd.DataFrame, results_dir: Path) -> pd.DataFrame:
    if not (rows["method"] == "adatape").any():
        return pd.DataFrame()
    rows = rows[rows["method"].isin(["adatape", "dense", "act"])]
    frames = []
    for row in rows.itertuples(index=False):
        try:
            samples = results.load_samples(results_dir, row.task, row.method, row.run_id)
        except FileNotFoundError:
            continue
        label = row.method if row.method != "adatape" else f"adatape {row.knob_value}"
        if row.method == "act":
            label = f"UT+ACT tau={row.knob_value}"
        if row.method == "dense":
            label = f"Transformer ({row.knob_value})"
        samples = samples.assign(model=label, method=row.method, dataset=row.dataset, seed=row.seed)
        if "difficulty" not in samples:
            return pd.DataFrame()
        if "tape_len" not in samples:
            samples["tape_len"] = float("nan")
        frames.append(samples)
    if not frames:
        return pd.DataFrame()
    data = pd.concat(frames, ignore_index=True)
    data["error"] = 1.0 - data["score"]
    table = (data.groupby(["dataset", "method", "model", "difficulty"], as_index=False)
             .agg(error=("error", "mean"), errors=("error", "sum"), tape_len=("tape_len", "mean"),
                  tape_lo=("tape_len", lambda v: mean_interval(v)[0]),
                  tape_hi=("tape_len", lambda v: mean_interval(v)[1]), n=("score", "size"), seeds=("seed", "nunique")))
    ci = [proportion_interval(int(round(k)), int(n)) for k, n in zip(table["errors"], table["n"])]
    return table.assign(error_lo=[c[0] for c in ci], error_hi=[c[1] for c in ci]).drop(columns=["errors"])


def draw(rows: pd.DataFrame, results_dir: Path, reports_dir: Path, stem: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = table(rows, results_dir)
    if data.empty:
        return []
    fig, (ax_err, ax_len) = plt.subplots(1, 2, figsize=(13, 4.8))
    palette = plt.get_cmap("tab10")
    for i, (model, curve) in enumerate(data.groupby("model", sort=True)):
        color = palette(i % 10)
        style = "--" if not model.startswith("adatape") else ("-" if "cap" not in model else ":")
        seeds = int(curve["seeds"].max())
        ax_err.errorbar(curve["difficulty"], curve["error"], yerr=[curve["error"] - curve["error_lo"],
                                                                   curve["error_hi"] - curve["error"]],
                        fmt=style, color=color, marker=".", capsize=1.5, elinewidth=0.7,
                        label=f"{model} ({seeds} seed{'s' if seeds > 1 else ''})")
        if model.startswith("adatape") and "cap" not in model:
            ax_len.errorbar(curve["difficulty"], curve["tape_len"], yerr=[curve["tape_len"] - curve["tape_lo"],
                                                                       curve["tape_hi"] - curve["tape_len"]],
                            fmt=style, color=color, marker=".", capsize=1.5, elinewidth=0.7, label=model)
    ax_err.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax_err.set(xlabel="difficulty (non-zero elements)", ylabel="error rate ↓ (0.5 = chance)", ylim=(-0.02, 1.02),
               title="error vs difficulty, 95% Wilson CI (dotted: AdaTape with T capped at eval)")
    ax_len.set(xlabel="difficulty (non-zero elements)", ylabel="mean tape tokens read",
               title="AdaTape tape length vs difficulty (95% t-interval)")
    for ax in (ax_err, ax_len):
        ax.grid(alpha=0.3)
    ax_err.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3)
    ax_len.legend(fontsize=7, loc="best", title="knob T<T>-tau<tau>")
    fig.suptitle(f"{rows['task'].iloc[0]} — {data['dataset'].iloc[0]}; seeds pooled", fontsize=10)
    fig.tight_layout()
    path = Path(reports_dir) / f"{stem}_adatape_difficulty.png"
    save_figure(fig, path)
    plt.close(fig)
    csv = Path(reports_dir) / f"{stem}_adatape_difficulty.csv"
    results.atomic_write_frame(csv, data)
    return [path, csv]

