"""A-ViT figures, drawn by ``bench report`` from rows only.

``<stem>_avit_tokens_kept.png``: for one row per knob value (lowest seed), the share of tokens still
running at each block over the whole test set (the per-sample ``avit_kept_l<l>`` columns);
``<stem>_avit_token_depth_<knob>.png``: for the first test samples, their per-token depth maps
(``token_compute``) over the input (``input_preview``), as the run wrote them (rows made before those
fields existed have none).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from bench import results
from bench.figures import save_figure, token_map_figure
from bench.stats import mean_interval


def _order(value: str) -> tuple[int, float, str]:
    """Sort key of a trained point's knob value: numbers first (rows of the ponder-weight knob before the
    ``halting`` knob existed), then the text values (``target4of12`` ... , ``pw0.01`` ...) by their number."""
    try:
        return (0, float(value), "")
    except ValueError:
        number = re.search(r"\d+(?:\.\d*)?(?:e-?\d+)?", value)
        return (1, float(number.group()) if number else 0.0, value)


def figures(rows: pd.DataFrame, results_dir: Path, reports_dir: Path, stem: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    avit = rows[rows["method"] == "avit"]
    if avit.empty:
        return []
    written = []
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    drawn = 0
    for knob, group in avit.groupby("knob_value", sort=True):
        row = group.sort_values("seed").iloc[0]  # one row per knob value: the lowest seed
        try:
            samples = results.load_samples(results_dir, row["task"], "avit", row["run_id"])
        except FileNotFoundError:
            continue
        layers = sorted((c for c in samples if c.startswith("avit_kept_l")), key=lambda c: int(c[11:]))
        if layers:
            shares = np.array([100.0 * samples[c].mean() for c in layers])
            cis = np.array([mean_interval(100.0 * samples[c].to_numpy()) for c in layers])  # 95% t, test samples
            weight, _, eps = str(knob).partition("@eps")  # one colour per trained model, a style per eps
            weights = sorted({str(k).partition("@eps")[0] for k in avit["knob_value"]}, key=_order)
            eps_values = sorted({str(k).partition("@eps")[2] for k in avit["knob_value"]} - {""}, key=float)
            style = "-" if not eps else (":", "--", "-.")[eps_values.index(eps) % 3]
            ax.errorbar(range(1, len(layers) + 1), shares, yerr=[shares - cis[:, 0], cis[:, 1] - shares],
                        marker="o", ls=style, capsize=2, color=plt.get_cmap("tab10")(weights.index(weight) % 10),
                        label=f"{knob} ({row['cost_pct_dense']:.0f}% MACs, seed {row['seed']})")
            ax.set_xticks(range(1, len(layers) + 1))
            drawn += 1
        title = (f"A-ViT {knob} (seed {row['seed']}): blocks each token ran, as a share of the depth — "
                 f"{row['dataset']}")
        safe = str(knob).replace("@", "_at_")
        path = token_map_figure(samples, title, Path(reports_dir) / f"{stem}_avit_token_depth_{safe}.png",
                                label="share of blocks run")
        if path is not None:
            written.append(path)
    if drawn:
        ax.set_ylim(0, 105)
        ax.set_xlabel("block")
        ax.set_ylabel("tokens still running (% of tokens)")
        ax.set_title(f"A-ViT: tokens kept per block over the test set; colour: trained model, "
                     f"broken lines: eval-time eps;\nbars: 95% CI over test samples — {avit['dataset'].iloc[0]}", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
        path = Path(reports_dir) / f"{stem}_avit_tokens_kept.png"
        save_figure(fig, path)
        written.insert(0, path)
    plt.close(fig)
    return written
