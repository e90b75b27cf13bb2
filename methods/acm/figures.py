"""ACM figures, drawn by ``bench report`` from rows only: per-patch compute heatmaps (the paper's Fig. 6)
and the per-sample cost histogram (Fig. 8).

- ``<stem>_acm_heatmaps_<β>.png``: the first test samples of one row per β_target (lowest seed), each
  above its map of the fraction of learners executed per patch, averaged over every ACM of every layer,
  from the samples file's ``token_compute`` and ``input_preview`` fields that the run writes (rows made
  before those fields existed have no heatmap);
- ``<stem>_acm_cost_hist.png``: the distribution of per-sample MACs as % of the dense model, one
  histogram per β_target (seeds pooled), from the per-sample files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench import results
from bench.figures import save_figure, token_map_figure
from bench.stats import mean_interval


def _acm_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["method"] == "acm"].sort_values(["variant", "knob_value", "seed"])


def cost_series(rows: pd.DataFrame, results_dir: Path) -> dict[str, np.ndarray]:
    """{label: per-sample cost in % of dense} for every acm row (seeds pooled per β and variant)."""
    acm = _acm_rows(rows)
    several_variants = acm["variant"].nunique() > 1
    pooled: dict[str, list] = {}
    for _, row in acm.iterrows():
        try:
            samples = results.load_samples(results_dir, row["task"], "acm", row["run_id"])
        except FileNotFoundError:
            continue
        # rows of different variants (e.g. loss weights) would share a β label: name what differs
        alpha = next((part for part in str(row["variant"]).split(";") if part.startswith("alpha=")), "")
        label = f"β={row['knob_value']}{f', {alpha}' if several_variants and alpha else ''}"
        entry = pooled.setdefault(label, [[], [], [], row["metric"]])  # costs, qualities, seeds, metric
        entry[0].append(100.0 * samples["macs"].to_numpy() / float(row["macs_dense"]))
        entry[1].append(float(row["quality"]))
        entry[2].append(str(row["seed"]))
    out = {}
    for label, (costs, qualities, seeds, metric) in pooled.items():
        seed_text = f", seeds {','.join(seeds)}" if len(seeds) > 1 else ""
        out[f"{label} ({np.mean(qualities):.3f} {metric}{seed_text})"] = np.concatenate(costs)
    return out


def figures(rows: pd.DataFrame, results_dir: Path, reports_dir: Path, stem: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acm = _acm_rows(rows)
    if acm.empty:
        return []
    written = []
    for knob, group in acm.groupby("knob_value", sort=True):
        row = group.sort_values("seed").iloc[0]
        try:
            samples = results.load_samples(results_dir, row["task"], "acm", row["run_id"])
        except FileNotFoundError:
            continue
        title = (f"ACM β_target={knob} (seed {row['seed']}): fraction of learners executed per patch "
                 f"(mean over all ACMs; real path) — {row['dataset']}")
        path = token_map_figure(samples, title, Path(reports_dir) / f"{stem}_acm_heatmaps_{knob}.png",
                                label="fraction of learners")
        if path is not None:
            written.append(path)
    series = cost_series(rows, results_dir)
    if series:
        fig, ax = plt.subplots(figsize=(7, 3.4))
        for label, values in series.items():
            low, high = mean_interval(values)  # 95% t-interval of the mean over test samples
            ax.hist(values, bins=40, alpha=0.55, label=f"{label}: mean {values.mean():.1f}% [{low:.1f}, {high:.1f}]")
        ax.set_xlabel("per-sample cost (% of dense MACs, gates included)")
        ax.set_ylabel("samples")
        ax.set_title(f"ACM per-sample cost — {acm['dataset'].iloc[0]}\n(per-sample rows in {results_dir})", fontsize=8)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
        path = Path(reports_dir) / f"{stem}_acm_cost_hist.png"
        save_figure(fig, path)
        plt.close(fig)
        written.append(path)
    return written
