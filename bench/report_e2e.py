"""End-to-end ACM timing in the report: ``reports/e2e.md`` and ``reports/e2e_latency.png`` from the rows of
``python -m methods.acm.e2e`` (``results/e2e/*.csv``), read as data only.

One section per device kind: "GPU" when CUDA rows exist (the latest CUDA run), "CPU" for CPU rows (the
latest CPU run); a missing GPU section says so.  Each section's table: per batch and mode (eager / CUDA
graph), the dense model and the ACM model at every fraction, with latency, throughput and the ratio to the
dense model of the same batch and mode, all measured in one process.
"""

from __future__ import annotations

import math
from pathlib import Path

from bench import results


def load_e2e_rows(results_dir: Path | str = "results"):
    """All rows under ``results_dir/e2e`` (an empty frame when there are none)."""
    import pandas as pd

    paths = sorted(p for p in (Path(results_dir) / "e2e").glob("*.csv") if not p.name.startswith("."))
    if not paths:
        return pd.DataFrame()
    return pd.concat([pd.read_csv(p, keep_default_na=False, na_values=[""]) for p in paths], ignore_index=True)


def _latest(frame):
    last = frame.sort_values("timestamp")["run_id"].iloc[-1]
    return frame[frame["run_id"] == last]


def _fmt(value: float, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}g}"


def _section(title: str, run) -> list[str]:
    first = run.iloc[0]
    threads = f", {int(first['threads'])} thread(s)" if math.isfinite(float(first["threads"])) else ""
    lines = [f"## {title} ({first['device_name']})", "",
             f"`{first['command']}` — {first['arch']} ({int(first['tokens'])} tokens), {first['dtype']}{threads}, "
             f"git {str(first['git_sha'])[:10]}{' (dirty tree)' if str(first['git_dirty']) == 'True' else ''}, "
             f"{first['timestamp']}.", "",
             "| batch | mode | model | fraction (target) | executed fraction | MACs, % of dense | median ms "
             "| samples/s | time / dense |", "|---|---|---|---|---|---|---|---|---|"]
    ok = run[run["status"] == "ok"].sort_values(["batch", "cuda_graph", "variant", "fraction"],
                                                ascending=[True, True, False, True])
    for _, r in ok.iterrows():
        pct = 100.0 * r["macs_per_sample"] / r["macs_dense_per_sample"] if r["macs_dense_per_sample"] else math.nan
        lines.append(f"| {int(r['batch'])} | {'CUDA graph' if str(r['cuda_graph']) == 'True' else 'eager'} | "
                     f"{r['variant']} | {r['fraction']:.2f} | {r['executed_fraction']:.3f} | {_fmt(pct, 4)} | "
                     f"{_fmt(r['median_ms'], 4)} | {_fmt(r['throughput_per_s'], 4)} | {_fmt(r['rel_to_dense'])} |")
    failed = run[run["status"] != "ok"]
    for _, r in failed.iterrows():
        lines.append(f"\n{r['variant']} f={r['fraction']:.2f} batch {int(r['batch'])}: {r['status']}")
    syncs = {s for s in run["sync_check"].dropna().astype(str) if s}
    if syncs:
        lines.append(f"\nACM forward under `torch.cuda.set_sync_debug_mode('error')`: {', '.join(sorted(syncs))}")
    return lines + [""]


def plot_e2e(run, path: Path) -> Path:
    """Time relative to dense vs executed fraction, one line per (batch, mode)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.report_plots import save_figure

    ok = run[(run["status"] == "ok") & (run["variant"] == "acm")]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (batch, graph), sub in ok.groupby(["batch", "cuda_graph"]):
        sub = sub.sort_values("executed_fraction")
        mode = "CUDA graph" if str(graph) == "True" else "eager"
        ax.plot(sub["executed_fraction"], sub["rel_to_dense"], marker="o", label=f"batch {batch}, {mode}")
    ax.axhline(1.0, color="black", lw=1, label="dense (same batch and mode)")
    ax.plot([0, 1], [0, 1], color="black", ls=":", lw=1, label="linear scaling")
    ax.set_xlabel("executed fraction of learner compute (cost-weighted)")
    ax.set_ylabel("ACM model time / dense model time")
    first = run.iloc[0]
    ax.set_title(f"ACM {first['arch']} end to end — {first['device_name']}, {first['dtype']}", fontsize=10)
    ax.set_xlim(0, 1.02)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    try:
        save_figure(fig, path)
    finally:
        plt.close(fig)
    return path


def write(results_dir: Path | str, reports_dir: Path | str) -> list[str]:
    """Write ``e2e.md`` (and ``e2e_latency.png`` from the GPU run, else the CPU run) if e2e rows exist."""
    rows = load_e2e_rows(results_dir)
    if rows.empty:
        return []
    reports_dir = Path(reports_dir)
    lines = ["# ACM end to end: ACM ViT vs dense ViT (same process, interleaved)", ""]
    gpu, cpu = rows[rows["device"] == "cuda"], rows[rows["device"] == "cpu"]
    if len(gpu):
        lines += _section("GPU", _latest(gpu))
    else:
        lines += ["## GPU", "", "No GPU rows: the end-to-end comparison has not been measured on a GPU.", ""]
    if len(cpu):
        lines += _section("CPU", _latest(cpu))
    table = reports_dir / "e2e.md"
    figure = plot_e2e(_latest(gpu if len(gpu) else cpu), reports_dir / "e2e_latency.png")
    results.atomic_write_text(table, "\n".join(lines) + "\n")
    return [str(table), str(figure)]
