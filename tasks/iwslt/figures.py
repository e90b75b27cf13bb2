"""Translation figures for ``bench report`` (iwslt, wmt): BLEU vs average decoder depth and vs MACs, and
the Depth-Adaptive Transformer's exit depth by token position.

Reads the rows and the per-sample tables beside them.  Average decoder depth of a row: the mean exit
block over the output tokens of the final hypotheses (``avg_exit`` weighted by ``out_tokens``) when the
method logs exits (dat); else the number of decoder blocks of the model (from the row's config: the
task's ``dec_layers`` × ``dense.depth`` for static baselines).  MACs: per source sentence (the row's
mean) and decoder MACs per generated token (Σ decoder_macs / Σ out_tokens over the sentences).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from bench import results
from bench.report.plots import save_figure


def _config(results_dir: Path, row) -> dict:
    import yaml

    path = results.row_dir(results_dir, row.task, row.method) / f"{row.run_id}.config.yaml"
    try:
        return yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        return {}


def depth_table(rows: pd.DataFrame, results_dir: Path) -> pd.DataFrame:
    """One line per row: method, seed, knob, BLEU, MACs per sentence, decoder MACs per token, average depth."""
    out = []
    for row in rows.itertuples(index=False):
        try:
            samples = results.load_samples(results_dir, row.task, row.method, row.run_id)
        except FileNotFoundError:
            continue
        tokens = samples["out_tokens"].to_numpy(dtype=float) if "out_tokens" in samples else None
        if "avg_exit" in samples and tokens is not None:
            depth = float(np.sum(samples["avg_exit"] * tokens) / max(tokens.sum(), 1.0))
        else:
            cfg = _config(results_dir, row)
            layers = int(cfg.get(row.task, {}).get("dec_layers", 0) or 0)
            scale = float(cfg.get("dense", {}).get("depth", 1.0)) if row.method == "dense" else 1.0
            depth = float(max(1, int(round(layers * scale)))) if layers else float("nan")
        per_token = (float(samples["decoder_macs"].sum() / max(tokens.sum(), 1.0))
                     if tokens is not None and "decoder_macs" in samples else float("nan"))
        lo, hi = (float(getattr(row, "quality_lo", np.nan)), float(getattr(row, "quality_hi", np.nan)))
        variant = row.variant if isinstance(row.variant, str) else ""
        curve = getattr(row, "curve", None) or (f"{row.method} [{variant}]" if variant else row.method)
        out.append({"method": row.method, "curve": curve, "seed": int(row.seed), "knob_value": str(row.knob_value),
                    "variant": row.variant, "bleu": float(row.quality), "bleu_lo": lo, "bleu_hi": hi,
                    "macs_per_sentence": float(row.macs_mean),
                    "decoder_macs_per_token": per_token, "avg_decoder_depth": depth})
    return pd.DataFrame(out)


def exit_position_table(rows: pd.DataFrame, results_dir: Path) -> pd.DataFrame:
    """Counts of (oracle, knob value, token position, exit block) over the final hypotheses of dat rows
    (seeds pooled)."""
    frames = []
    for row in rows[rows["method"] == "dat"].itertuples(index=False):
        try:
            samples = results.load_samples(results_dir, row.task, row.method, row.run_id)
        except FileNotFoundError:
            continue
        cols = [c for c in samples.columns if c.startswith("exit_p")]
        if not cols:
            continue
        long = samples[cols].melt(var_name="position", value_name="exit")
        long = long[long["exit"] > 0]
        long["position"] = long["position"].str[6:].astype(int) + 1
        long["knob_value"] = str(row.knob_value)
        oracle = re.search(r"oracle=(\w+)", str(row.variant))
        long["oracle"] = oracle.group(1) if oracle else ""
        frames.append(long)
    if not frames:
        return pd.DataFrame()
    data = pd.concat(frames, ignore_index=True)
    return data.groupby(["oracle", "knob_value", "position", "exit"], as_index=False).size()


def translation_figures(rows: pd.DataFrame, results_dir: Path, reports_dir: Path, stem: str) -> list[Path]:
    """BLEU against decoder depth (every method, with the static depths), and DAT's exit depth by token
    position; the files are named after ``stem`` (the section's file-name stem)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results_dir, reports_dir = Path(results_dir), Path(reports_dir)
    task = str(rows["task"].iloc[0])
    table = depth_table(rows, results_dir)
    if table.empty:
        return []
    written: list[Path] = []
    dataset = rows["dataset"].iloc[0]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    palette = plt.get_cmap("tab10")
    # one series per configuration and seed (the report's curve names: a method's variants stay apart); a
    # colour per configuration, a marker per seed
    colours = {curve: palette(i % 10) for i, curve in enumerate(sorted(table["curve"].unique()))}
    markers = {seed: "osD^v"[i % 5] for i, seed in enumerate(sorted(table["seed"].unique()))}
    for (curve, seed), group in table.groupby(["curve", "seed"], sort=True):
        method = group["method"].iloc[0]
        color = colours[curve]
        fixed = group["knob_value"].str.startswith("exit")
        for mask, style, suffix in ((~fixed, markers[seed], ""), (fixed, "x", " fixed exit")):
            part = group[mask].sort_values("avg_decoder_depth")
            if part.empty:
                continue
            label = f"{curve} s{seed}{suffix}"
            yerr = [part["bleu"] - part["bleu_lo"], part["bleu_hi"] - part["bleu"]]  # NaN: no interval drawn
            for ax, x, scale in zip(axes, ("avg_decoder_depth", "macs_per_sentence", "decoder_macs_per_token"),
                                    (1.0, 1e6, 1e6)):
                ax.errorbar(part[x] / scale, part["bleu"], yerr=yerr, fmt=style, color=color, label=label, capsize=1.5,
                            elinewidth=0.6, linestyle="-" if method == "dat" and not suffix else "none", alpha=0.85)
    axes[0].set(xlabel="decoder blocks per output token (without exits: all)", ylabel="sacreBLEU ↑")
    axes[1].set(xlabel="MMACs per source sentence (encoder + decoder, all beams)", ylabel="sacreBLEU ↑")
    axes[2].set(xlabel="decoder MMACs per generated token", ylabel="sacreBLEU ↑")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{task} — {dataset}; bars: 95% paired-bootstrap CI over test sentences", fontsize=10)
    fig.tight_layout()
    path = reports_dir / f"{stem}_bleu_depth.png"
    save_figure(fig, path)
    plt.close(fig)
    written.append(path)
    table_path = reports_dir / f"{stem}_bleu_depth.csv"
    results.atomic_write_frame(table_path, table)
    written.append(table_path)

    exits = exit_position_table(rows, results_dir)
    if not exits.empty:
        panels = sorted({(o, v) for o, v in zip(exits["oracle"], exits["knob_value"]) if not v.startswith("exit")},
                        key=lambda p: (p[0], _knob_order(p[1]), p[1]))
        if panels:
            several = len({o for o, _ in panels}) > 1
            cols = min(5, len(panels))
            rows_n = -(-len(panels) // cols)
            fig, axes = plt.subplots(rows_n, cols, figsize=(3.6 * cols + 1, 3.2 * rows_n), squeeze=False,
                                     constrained_layout=True)
            blocks = int(exits["exit"].max())  # the same block axis in every panel
            for ax, (oracle, value) in zip(axes.flat, panels):
                part = exits[(exits["knob_value"] == value) & (exits["oracle"] == oracle)]
                positions = int(min(part["position"].max(), 25))
                grid = np.zeros((blocks, positions))
                for rec in part.itertuples(index=False):
                    if rec.position <= positions:
                        grid[int(rec.exit) - 1, int(rec.position) - 1] += rec.size
                fewest = int(grid.sum(axis=0).min())  # the smallest sample behind a column's shares
                grid = grid / np.maximum(grid.sum(axis=0, keepdims=True), 1)
                im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=1,
                               extent=(0.5, positions + 0.5, 0.5, blocks + 0.5))
                ax.set_title(_panel_title(value, oracle if several else "", fewest), fontsize=9)
                ax.set(xlabel="output token position", ylabel="exit block", yticks=range(1, blocks + 1))
            for ax in list(axes.flat)[len(panels):]:
                ax.axis("off")
            fig.colorbar(im, ax=axes.ravel().tolist(), label="share of tokens at the position")
            fig.suptitle(f"{task} — {dataset} — dat: exit depth by token position (final hypotheses, seeds pooled)",
                         fontsize=10)
            path = reports_dir / f"{stem}_dat_exits.png"
            save_figure(fig, path)
            plt.close(fig)
            written.append(path)
    return written


def _knob_order(value: str) -> float:
    """Numeric order of a DAT knob value: a shared threshold ``0.5`` (older rows), an average-exit budget
    ``ae1.5`` of validation-tuned per-block thresholds; other values (``argmax``) last."""
    text = value[2:] if value.startswith("ae") else value
    try:
        return float(text)
    except ValueError:
        return math.inf


def _knob_title(value: str) -> str:
    if value.startswith("ae"):
        return f"τ_n tuned on valid, AE ≤ {value[2:]}"
    return f"τ = {value}"


def _panel_title(value: str, oracle: str, fewest: int) -> str:
    """One short line each for the knob, the oracle (when the figure mixes oracles) and the sample size,
    so that neighbouring panel titles never run into each other."""
    lines = [_knob_title(value)] + ([f"{oracle} oracle"] if oracle else []) + [f"≥ {fewest} tokens per position"]
    return "\n".join(lines)
