"""Figure of the speech task, drawn by ``bench report`` from one evaluation set's rows: WER and CER against
cost (% of the dense base model), one line per method (and ACM variant) and seed (solid: seed 0, dotted:
others; the dense base as a thin horizontal line), written as ``<stem>_wer_cer.png``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from bench.figures import save_figure
from bench.report.plots import method_color


def _cer(extra: str) -> float:
    for part in str(extra).split(";"):
        if part.startswith("cer="):
            return float(part[4:])
    return float("nan")


def draw(rows, results_dir: Path, reports_dir: Path, stem: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if rows.empty:
        return []
    rows = rows.copy()
    dataset, task = rows["dataset"].iloc[0], rows["task"].iloc[0]
    rows["cer"] = rows["extra_metrics"].map(_cer)
    rows["cost"] = rows["cost_pct_dense"]
    rows["variant"] = rows["variant"].fillna("").astype(str)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, metric, label in ((axes[0], "quality", "WER ↓"), (axes[1], "cer", "CER ↓")):
        for (method, variant, recipe), group in rows.groupby(["method", "variant", "recipe"], sort=True):
            color = method_color(method)
            name = method if method != "acm" else f"acm ({variant.split(';')[1]})" if ";" in variant else method
            name += f" [recipe={recipe}]" if method != "dense" else ""
            for seed, seed_rows in group.groupby("seed"):
                line = seed_rows.sort_values("cost")
                yerr = None
                if metric == "quality" and "quality_lo" in line:  # WER: the row's bootstrap CI
                    yerr = [line["quality"] - line["quality_lo"], line["quality_hi"] - line["quality"]]
                ax.errorbar(line["cost"], line[metric], yerr=yerr, fmt="-" if seed == 0 else ":",
                            marker="s" if method == "dense" else "o", color=color, ms=5, capsize=1.5,
                            elinewidth=0.6, label=f"{name}, seed {seed}")
                if method == "dense":
                    base = line[line["knob_value"] == "w1-d1"]
                    if len(base):
                        ax.axhline(float(base[metric].iloc[0]), color=color, ls="-" if seed == 0 else ":",
                                   lw=0.6, alpha=0.6)
        ax.set_xlabel("cost, % of dense MACs per clip")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(textwrap.fill(f"{task}: {dataset}; WER bars: 95% bootstrap CI over test utterances (CER: none)",
                               160), fontsize=8)
    fig.subplots_adjust(top=0.82)
    out = Path(reports_dir) / f"{stem}_wer_cer.png"
    save_figure(fig, out)
    plt.close(fig)
    return [out]
