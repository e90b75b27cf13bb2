"""The kernel page of ``bench report`` (``MethodSpec.kernel_page``): per device (the CPU first), the figure and
the T(f) = a + b·f fit table of that device's latest ``bench kernels`` run, drawn from its rows alone
(``reports/kernel_latency.png`` for the CPU, ``reports/kernel_latency_<device>.png`` for another device such
as ``cuda``; the tables in ``reports/kernel_fit.md``)."""

from __future__ import annotations

from pathlib import Path

from bench import results
from bench.report.page import markdown_table
from methods.acm.kernels.bench_rows import fit_rows, load_kernel_rows, plot_kernel_rows

COLUMNS = ["batch", "k_mode", "variant", "baseline", "statistic", "n_points", "intercept", "slope", "r2",
           "max_residual", "t025_rel", "t1_rel"]


def figure_name(device: str) -> str:
    """The CPU keeps the page's first name; another device's figure is named after it."""
    return "kernel_latency.png" if device == "cpu" else f"kernel_latency_{device.replace(':', '-')}.png"


def device_section(latest, figure: Path) -> str:
    """The latest run of one device: its command, the figure and the fit table."""
    fits = fit_rows(latest)[COLUMNS]
    body = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in fits.itertuples(index=False)]
    return (f"Latest run: `{latest['command'].iloc[0]}` on {latest['device_name'].iloc[0]}, "
            f"git {str(latest['git_sha'].iloc[0])[:10]}.\n\n"
            f"![ACM kernel latency against the routed fraction]({figure.name})\n\n"
            + markdown_table(COLUMNS, body) + "\n")


def kernel_page(results_dir: Path, reports_dir: Path) -> list[str]:
    """The ACM kernel figures and fit tables, one per device that has ``bench kernels`` rows (headed by
    the device when there are several)."""
    rows = load_kernel_rows(results_dir)
    if rows.empty:
        return []
    device_of = rows["device"].astype(str)
    devices = sorted(device_of.unique(), key=lambda device: (device != "cpu", device))
    written, sections = [], []
    for device in devices:
        mine = rows[device_of == device]
        latest = mine[mine["run_id"] == mine.sort_values("timestamp")["run_id"].iloc[-1]]
        figure = Path(plot_kernel_rows(latest, reports_dir / figure_name(device)))
        written.append(str(figure))
        sections.append((f"## {device}\n\n" if len(devices) > 1 else "") + device_section(latest, figure))
    table = reports_dir / "kernel_fit.md"
    results.atomic_write_text(table, "# ACM kernel: T(f) = a + b*f fits (relative to the dense MLP)\n\n"
                              + "\n".join(sections))
    return written + [str(table)]
