"""The kernel page of ``bench report`` (``MethodSpec.kernel_page``): the figure and the T(f) = a + b·f fit
table of the latest ``bench kernels`` run, drawn from its rows alone (``reports/kernel_latency.png``,
``reports/kernel_fit.md``)."""

from __future__ import annotations

from pathlib import Path

from bench import results
from bench.report.page import markdown_table
from methods.acm.kernels.bench_rows import fit_rows, load_kernel_rows, plot_kernel_rows


def kernel_page(results_dir: Path, reports_dir: Path) -> list[str]:
    """The ACM kernel figure and fit table from the latest ``bench kernels`` run, if there is one."""
    rows = load_kernel_rows(results_dir)
    if rows.empty:
        return []
    latest = rows[rows["run_id"] == rows.sort_values("timestamp")["run_id"].iloc[-1]]
    figure = plot_kernel_rows(latest, reports_dir / "kernel_latency.png")
    columns = ["batch", "k_mode", "variant", "baseline", "statistic", "n_points", "intercept", "slope", "r2",
               "max_residual", "t025_rel", "t1_rel"]
    fits = fit_rows(latest)[columns]
    table = reports_dir / "kernel_fit.md"
    header = columns
    body = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in fits.itertuples(index=False)]
    results.atomic_write_text(table, "# ACM kernel: T(f) = a + b*f fits (relative to the dense MLP)\n\n"
                              f"Latest run: `{latest['command'].iloc[0]}` on {latest['device_name'].iloc[0]}, "
                              f"git {str(latest['git_sha'].iloc[0])[:10]}.\n\n"
                              f"![ACM kernel latency against the routed fraction]({Path(figure).name})\n\n"
                              + markdown_table(header, body) + "\n")
    return [str(figure), str(table)]
