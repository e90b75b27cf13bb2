"""``bench speed`` rows in the report: ``reports/speed_<device>_b<batch>.png`` and ``reports/speed.md``.

Reads rows only (``results/speed/*/*.csv``, see :mod:`bench.speed`; the ACM kernel fit from
``results/kernels/*.fit.csv``).  For every (device, batch) one figure: time relative to dense against MACs
relative to dense for every method (the latest quiet row of each (task, arch, dtype, threads, mode,
method, fraction): :func:`latest`), with the linear-scaling line y = x and the ACM kernel's fitted line T/T_dense = a + b·f of
the latest kernel run on the same kind of device (CPU: acm_sorted; CUDA: acm_triton), at the kernel batch
closest to the speed batch.  The kernel line is one ACM MLP layer against its dense MLP, drawn for
reference: a whole model's ratio also carries attention, norms and the embedding.  One panel per
(task, arch, dtype, threads, eager/CUDA graph) present.  ``speed.md`` tabulates every point with its
efficiency and the load average during its timings.

``python -m bench.report.speed [results_dir] [reports_dir]`` draws only these files.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from bench import results
from bench.figures import save_figure
from bench.report.views import number
from bench.speed import IDEALS, NARROW, SHORT, load_rows

PANEL = ["task", "arch", "dtype", "threads", "cuda_graph"]
KEY = PANEL + ["method", "fraction"]
TARGET = 0.9  # the speed efficiency a method's saving should keep at half its work


def round_ci(rounds: str) -> tuple[float, float]:
    """95% bootstrap interval (``scipy.stats.bootstrap``, fixed random state) of the median of a point's
    per-round time ratios ("r1;r2;..."); NaN with fewer than two rounds."""
    from scipy.stats import bootstrap

    values = np.array([float(v) for v in str(rounds).split(";") if v not in ("", "nan")])
    if len(values) < 2 or np.ptp(values) == 0:
        return (float(np.median(values)),) * 2 if len(values) else (math.nan, math.nan)
    res = bootstrap((values,), np.median, confidence_level=0.95, n_resamples=2000, method="percentile",
                    random_state=np.random.default_rng(20261124))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def not_headline(row) -> str:
    """Why a row stays out of the headline tables and figures ("" when it belongs there): a dirty tree, a
    CPU timing on a loaded machine, or one whose CPU count was not recorded.

    Loaded: other processes kept more than :data:`bench.results.BUSY_OTHER_CPUS` CPUs busy on average during
    the point's timings (``other_cpus_mean``, recorded since the speed rows hold it).  Rows without it: the
    1-minute load average before or after the timings, or its mean over the rounds, above the CPU count.  The
    mean, not the highest round: a load sample counts the timing's own threads, so a timing with as many
    threads as CPUs reads about the CPU count on an idle machine, and single rounds cross it (2.01-2.08 on 2
    CPUs with nothing else running)."""
    if str(row.get("git_dirty")) == "True":
        return "timed from a dirty tree"
    if row["device"] != "cpu":
        return ""
    others = number(row.get("other_cpus_mean"))
    if math.isfinite(others):
        return (f"loaded: other processes kept {others:.2f} CPUs busy during the timings (more than "
                f"{results.BUSY_OTHER_CPUS:g})" if others > results.BUSY_OTHER_CPUS else "")
    cpus = float(row.get("cpus", math.nan))
    if not cpus > 0:
        return "CPU count not recorded (timed before rows held it)"
    rounds = [float(v) for v in str(row["loadavg_1m"]).split(";") if v not in ("", "nan")]
    loads = {"before": float(row.get("load_before", math.nan)), "after": float(row.get("load_after", math.nan)),
             "mean over the rounds": float(np.mean(rounds)) if rounds else math.nan}
    over = [f"{v:.2f} {name}" for name, v in loads.items() if v == v and v > cpus]
    if over:
        return f"loaded: 1-minute load average {', '.join(over)} on {int(cpus)} CPUs"
    return ""


def latest(rows):
    """The rows the page shows, with ``_why`` (:func:`not_headline`): of every (device, batch, panel, method,
    fraction), the latest ok row that belongs in the headline, and the latest ok row when it does not (a
    later loaded or dirty timing is listed apart and does not replace the quiet one)."""
    import pandas as pd

    ok = rows[rows["status"] == "ok"].copy()
    ok["threads"] = ok["threads"].fillna(0)
    ok = ok.assign(_why=[not_headline(r) for _, r in ok.iterrows()]).sort_values("timestamp")
    keys = ["device", "batch"] + KEY
    newest = ok.groupby(keys, dropna=False).tail(1)
    return pd.concat([ok[ok["_why"] == ""].groupby(keys, dropna=False).tail(1), newest[newest["_why"] != ""]])


def kernel_fit(results_dir: Path, device: str, batch: int) -> dict | None:
    """The latest ACM kernel fit (median vs dense eager, k iid) on ``device`` at the batch closest to
    ``batch``: {intercept, slope, batch, variant, r2}, or None."""
    import pandas as pd

    paths = sorted((results_dir / "kernels").glob("*.fit.csv"))
    frames = [pd.read_csv(p).assign(_file=p.name) for p in paths if not p.name.startswith(".")]
    if not frames:
        return None
    fits = pd.concat(frames, ignore_index=True)
    variant = "acm_triton" if device == "cuda" else "acm_sorted"
    is_gpu = ~fits["device_name"].astype(str).str.startswith("cpu")
    fits = fits[(fits["variant"] == variant) & (fits["baseline"] == "dense_eager") & (fits["statistic"] == "median")
                & (fits["k_mode"] == "iid") & (is_gpu if device == "cuda" else ~is_gpu)]
    if fits.empty:
        return None
    fits = fits[fits["run_id"] == sorted(fits["run_id"])[-1]]
    row = fits.iloc[(fits["batch"] - batch).abs().argsort().iloc[0]]
    return {"intercept": float(row["intercept"]), "slope": float(row["slope"]), "batch": int(row["batch"]),
            "variant": variant, "r2": float(row["r2"])}


def _panel_title(key: tuple) -> str:
    task, arch, dtype, threads, graph = key
    parts = [f"{task} {arch}", str(dtype)]
    if threads and not (isinstance(threads, float) and math.isnan(threads)):
        parts.append(f"{int(threads)} thread(s)")
    parts.append("CUDA graph" if str(graph) == "True" else "eager")
    return ", ".join(parts)


def efficiency_ci(row) -> tuple[float, float]:
    """95% interval of a point's efficiency: its MACs ratio over the bounds of its time ratio's interval."""
    low, high = round_ci(row["time_ratio_rounds"])
    return float(row["macs_ratio"]) / high, float(row["macs_ratio"]) / low


IDEAL_STYLES = {  # the yardsticks as grey lines (no efficiency label): (line style, legend label)
    NARROW: ({"ls": "-", "marker": "s"}, "aligned narrow dense ideal (static model, MLP width f rounded to 64)"),
    SHORT: ({"ls": "-.", "marker": "^"}, "fewer-tokens dense ideal (dense on the first f·T tokens: every weight "
                                         "read, fewer rows)"),
}


assert set(IDEAL_STYLES) == set(IDEALS), "every ideal of bench.speed needs a style here"


def _draw_ideals(ax, panel, x: str, y: str) -> None:
    """The panel's ideals (:data:`bench.speed.IDEALS`) as grey lines."""
    for name in IDEALS:
        style, label = IDEAL_STYLES[name]
        sub = panel[panel["method"] == name].sort_values("fraction")
        if not sub.empty:
            ax.plot(sub[x], sub[y], color="gray", lw=2, alpha=0.6, ms=3, label=label, **style)


def _time_panel(ax, panel, methods, colours, fit, grid) -> None:
    import numpy as np

    ax.plot(grid, grid, color="black", ls=":", lw=1, label="linear scaling (time = MACs)")
    ax.axhline(1.0, color="black", lw=0.8)
    if fit is not None:
        ax.plot(grid, fit["intercept"] + fit["slope"] * grid, color="gray", ls="--", lw=1,
                label=f"ACM kernel fit ({fit['variant']}, one layer, batch {fit['batch']}): "
                      f"{fit['intercept']:.2f} + {fit['slope']:.2f}·f")
    _draw_ideals(ax, panel, "macs_ratio", "time_ratio")
    for i, method in enumerate(methods):
        sub = panel[panel["method"] == method].sort_values("macs_ratio")
        if sub.empty:
            continue
        half = sub.iloc[(sub["fraction"] - 0.5).abs().argsort().iloc[0]]
        ci = np.array([round_ci(text) for text in sub["time_ratio_rounds"]])
        # the rounds are stored rounded (4 decimals): clip the rounding out of the bars
        ax.errorbar(sub["macs_ratio"], sub["time_ratio"], yerr=[(sub["time_ratio"] - ci[:, 0]).clip(lower=0),
                                                                (ci[:, 1] - sub["time_ratio"]).clip(lower=0)],
                    marker="o", color=colours(i), capsize=2, elinewidth=0.8,
                    label=f"{method} (efficiency {half['speed_efficiency']:.2f} at f={half['fraction']:g})")
    ax.scatter([1.0], [1.0], color="black", zorder=3, s=20, label="dense")
    ax.set_xlabel("MACs / dense MACs (counted)")
    ax.set_ylabel("time / dense time (same process, interleaved)")
    ax.set_xlim(0, 1.2)
    ax.set_ylim(0, max(1.3, float(panel["time_ratio"].max()) * 1.05))


def _efficiency_panel(ax, panel, methods, colours) -> None:
    import numpy as np

    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(TARGET, color="black", ls="--", lw=0.8, label=f"target {TARGET:g} at f = 0.5")
    _draw_ideals(ax, panel, "executed_fraction", "speed_efficiency")
    for i, method in enumerate(methods):
        sub = panel[panel["method"] == method].sort_values("executed_fraction")
        if sub.empty:
            continue
        ci = np.array([efficiency_ci(r) for _, r in sub.iterrows()])
        eff = sub["speed_efficiency"].to_numpy(dtype=float)
        ax.errorbar(sub["executed_fraction"], eff, yerr=[(eff - ci[:, 0]).clip(min=0), (ci[:, 1] - eff).clip(min=0)],
                    marker="o", color=colours(i), capsize=2, elinewidth=0.8, label=method)
    ax.set_xlabel("executed fraction (the method's decisions)")
    ax.set_ylabel("speed efficiency = MACs ratio / time ratio")
    ax.set_xlim(0, 1.05)
    ax.set_ylim(0, max(1.2, float(panel["speed_efficiency"].max()) * 1.05))


def plot(rows, device: str, batch: int, fit: dict | None, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = sorted(rows.groupby(PANEL, dropna=False).groups.items(), key=lambda kv: str(kv[0]))
    fig, axes = plt.subplots(2, len(panels), figsize=(10.5 * len(panels), 10.0), squeeze=False)  # legend beside
    grid = np.linspace(0, 1.2, 50)
    colours = plt.get_cmap("tab10")
    methods = sorted(set(rows["method"]) - {"dense", *IDEALS})
    for column, (key, idx) in enumerate(panels):
        panel = rows.loc[idx]
        top, bottom = axes[0][column], axes[1][column]
        _time_panel(top, panel, methods, colours, fit, grid)
        _efficiency_panel(bottom, panel, methods, colours)
        top.set_title(f"{_panel_title(key)}\n{_load_range(panel)} during timings", fontsize=9)
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the data
    first = rows.iloc[0]
    fig.suptitle(f"bench speed: wall-clock time vs MACs, {first['device_name']}, batch {batch}; random weights and "
                 "inputs (no dataset)\nbars: 95% bootstrap CI of the median over timing rounds", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def at_half(rows) -> list[str]:
    """Every method's efficiency at f = 0.5 per panel, with its interval and whether it reaches the target."""
    lines = ["| arch | threads | mode | method | executed | efficiency | 95% CI | reaches " + f"{TARGET:g} |",
             "|---|---|---|---|---|---|---|---|"]
    half = rows[(rows["fraction"] == 0.5) & (rows["method"] != "dense")]
    for _, r in half.sort_values(KEY).iterrows():
        low, high = efficiency_ci(r)
        verdict = "yes" if low >= TARGET else ("no" if high < TARGET else "inconclusive")
        threads = "-" if not r["threads"] else str(int(r["threads"]))
        lines.append(f"| {r['arch']} | {threads} | {'graph' if str(r['cuda_graph']) == 'True' else 'eager'} | "
                     f"{r['method']} | {r['executed_fraction']:.3f} | {r['speed_efficiency']:.2f} | "
                     f"[{low:.2f}, {high:.2f}] | {verdict} |")
    return lines


def table(rows) -> list[str]:
    lines = ["| device | batch | task | arch | dtype | threads | mode | method | fraction | executed | MACs / dense "
             "| time / dense | efficiency | time (min) / dense | median ms | load avg (1 min) | other CPUs busy |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in rows.sort_values(["device", "batch"] + KEY).iterrows():
        threads = "-" if not r["threads"] else str(int(r["threads"]))
        lines.append(f"| {r['device']} | {int(r['batch'])} | {r['task']} | {r['arch']} | {r['dtype']} | {threads} | "
                     f"{'graph' if str(r['cuda_graph']) == 'True' else 'eager'} | {r['method']} | {r['fraction']:g} | "
                     f"{r['executed_fraction']:.3f} | {r['macs_ratio']:.3f} | {r['time_ratio']:.3f} | "
                     f"{r['speed_efficiency']:.2f} | {r['time_ratio_min']:.3f} | {r['median_ms']:.4g} | "
                     f"{r['loadavg_1m']} | {_mean_other_cpus(r)} |")
    return lines


def _mean_other_cpus(row) -> str:
    """The CPUs other processes kept busy on average during a point's timings, "-" in rows without it."""
    value = number(row.get("other_cpus_mean"))
    return f"{value:.2f}" if math.isfinite(value) else "-"


def _load_range(panel) -> str:
    """A figure panel's load during its timings: the range of the CPUs other processes kept busy where every
    row holds it, else of the 1-minute load average."""
    others = panel["other_cpus_mean"].astype(float)
    if others.notna().all():
        return f"other processes kept {others.min():.2f}-{others.max():.2f} CPUs busy"
    load = panel["loadavg_1m_mean"].astype(float)
    return f"load average {load.min():.1f}-{load.max():.1f}"


def write(results_dir: Path | str, reports_dir: Path | str) -> list[str]:
    """Draw every (device, batch) figure and ``speed.md``; [] when there are no speed rows."""

    results_dir, reports_dir = Path(results_dir), Path(reports_dir)
    rows = load_rows(results_dir)
    if rows.empty:
        return []
    rows = latest(rows)
    if rows.empty:
        return []
    written = []
    md = ["# bench speed: time vs MACs relative to dense (same process, interleaved)", "",
          "Efficiency = (dense time / method time) / (dense MACs / method MACs); 1 = the MACs saving is "
          "the same saving in time.  Models have random weights and are timed on random inputs of the task's "
          "shape (no dataset).  Generated from results/speed by bench/report/speed.py.", "",
          "The headline tables and figures hold only rows timed from a clean tree on a quiet machine (CPU: other "
          f"processes kept at most {results.BUSY_OTHER_CPUS:g} CPUs busy on average during the point's timings; "
          "in rows without that reading, the 1-minute load average not above the CPU count before and after "
          "the timings, nor on average over the rounds): the latest "
          "such row of every point. A point's latest row, when it is not such a row, is listed below them with "
          "the reason it is kept apart.", "",
          "Two yardsticks are timed beside the methods (grey lines, rows listed like a method's): "
          f"`{NARROW}`, the dense model with every MLP narrowed to the fraction (width rounded to 64: fewer "
          f"weights, every row), and `{SHORT}`, the dense model on the first f·T tokens (every weight, fewer "
          "rows: at a small batch, the reference for per-token decisions spread evenly over the layers, whose "
          "tokens between them read every weight as dense does).", ""]
    for (device, batch), group in rows.groupby(["device", "batch"]):
        quiet, apart = group[group["_why"] == ""], group[group["_why"] != ""]
        md += [f"## {device}, batch {int(batch)} ({group['device_name'].iloc[0]})", ""]
        if quiet.empty:
            md += ["No quiet row from a clean tree at this batch: re-time on a quiet machine "
                   "(`python -m bench speed ...` waits for one).", ""]
        else:
            path = reports_dir / f"speed_{device}_b{int(batch)}.png"
            written.append(str(plot(quiet, device, int(batch), kernel_fit(results_dir, device, int(batch)), path)))
            md += [f"![]({path.name})", "", f"Efficiency at f = 0.5 (the interval: the MACs ratio over the 95% "
                   "bootstrap interval of the median time ratio over rounds):", ""] + at_half(quiet) + [""]
            md += table(quiet) + [""]
        if not apart.empty:
            md += [f"### Kept apart ({len(apart)} rows: loaded, dirty or without a CPU count)", ""]
            md += [f"- {reason}: {len(sub)} rows" for reason, sub in apart.groupby("_why")] + [""]
            md += table(apart) + [""]
    target = reports_dir / "speed.md"
    results.atomic_write_text(target, "\n".join(md) + "\n")
    return [str(target)] + written


if __name__ == "__main__":
    args = sys.argv[1:]
    for p in write(args[0] if args else "results", args[1] if len(args) > 1 else "reports"):
        print(p)
