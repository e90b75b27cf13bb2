"""Early-exit figure, drawn by ``bench report`` from rows only: the distribution of exit depths at several
confidence thresholds.

It reads every ``early_exit`` row of one (task, dataset) (the per-sample ``exit_block`` column the runner
wrote beside each row), pools the seeds per threshold, and writes ``<stem>_early_exit_depth_hist.png``: one
panel per threshold, the share of test samples leaving after each block ("final" = the backbone's head
after the last block), titled with the threshold's mean accuracy and cost.  No model is run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench import results
from bench.report.plots import save_figure
from bench.stats import proportion_interval


def exit_tables(rows, results_dir: Path) -> dict[float, dict]:
    """{threshold: {"blocks": exit blocks pooled over seeds, "quality", "cost", "seeds", "metric"}}."""

    rows = rows[rows["method"] == "early_exit"]
    out: dict[float, dict] = {}
    for _, row in rows.sort_values(["seed"]).iterrows():
        samples = results.load_samples(results_dir, row["task"], "early_exit", row["run_id"])
        entry = out.setdefault(float(row["knob_value"]), {"blocks": [], "quality": [], "cost": [], "seeds": [],
                                                          "metric": row["metric"], "dataset": row["dataset"]})
        entry["blocks"].append(samples["exit_block"].to_numpy())
        entry["quality"].append(float(row["quality"]))
        entry["cost"].append(float(row["cost_pct_dense"]))
        entry["seeds"].append(int(row["seed"]))
    return out


def depth_histogram(rows, results_dir: Path, reports_dir: Path, stem: str,
                    thresholds: tuple[float, ...] = (0.7, 0.9, 0.98, 0.995, 0.999)) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = exit_tables(rows, results_dir)
    chosen = [t for t in thresholds if t in tables] or sorted(tables)[:5]
    if not chosen:
        return []
    task = rows["task"].iloc[0]
    n_blocks = int(max(np.concatenate(tables[t]["blocks"]).max() for t in chosen)) + 1
    fig, axes = plt.subplots(1, len(chosen), figsize=(2.8 * len(chosen), 2.8), sharey=True, squeeze=False)
    for ax, t in zip(axes[0], chosen):
        entry = tables[t]
        blocks = np.concatenate(entry["blocks"])
        counts = np.bincount(blocks, minlength=n_blocks)
        share = counts / len(blocks)
        ci = np.array([proportion_interval(int(c), len(blocks)) for c in counts])  # 95% Wilson, seeds pooled
        labels = [f"{b + 1}" for b in range(n_blocks - 1)] + [f"{n_blocks}+head"]
        ax.bar(range(n_blocks), share, color="#4c72b0", yerr=[share - ci[:, 0], ci[:, 1] - share], capsize=2,
               error_kw={"lw": 0.8})
        ax.set_xticks(range(n_blocks), labels)
        ax.set_xlabel("exit after block")
        seeds = ",".join(map(str, entry["seeds"]))
        ax.set_title(f"threshold {t:g}\n{entry['metric']} {np.mean(entry['quality']):.3f}, "
                     f"{np.mean(entry['cost']):.0f}% MACs\n(seeds {seeds})", fontsize=8)
    axes[0][0].set_ylabel("share of test samples")
    dataset = next(iter(tables.values()))["dataset"]
    fig.suptitle(f"early exit (SDN + ZTW): exit depth, {task} [{dataset}]; bars: 95% Wilson CI over test "
                 "samples", fontsize=9)
    fig.tight_layout()
    path = Path(reports_dir) / f"{stem}_early_exit_depth_hist.png"
    save_figure(fig, path)
    plt.close(fig)
    return [path]

