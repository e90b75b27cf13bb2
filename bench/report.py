"""``python -m bench report``: every page from the rows under results/ -- the leaderboard with its per-task
Pareto figures, the claims, the speed, kernel, learning-curve and status pages.

This module runs the page modules (``bench/report_*.py``), which build on the library in
``bench/report_views.py`` (frontier math, views of the rows, tables, the page writer); it re-exports that
library, so ``bench.report.upper_hull`` and the like keep working.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from bench import (registry, report_claims, report_curves, report_method_budget, report_plots, report_speed,
                   report_static, report_status, report_throughput, results)
from bench.errors import UserError
from bench.report_views import *  # noqa: F401,F403  (the library, re-exported)
from bench.report_views import (TaskView, _header, _section_notes, attach_uncertainty, dataset_tag, latest_rows,
                                markdown_table, md_escape, points_table, rows_table, summary_table, task_views,
                                timing_view, write_page)


def write_leaderboard(views: list[TaskView], reports_dir: Path, figures: dict[str, list[str]],
                      results_dir: str, claims_summary: list[str] | None = None,
                      notes: dict[str, list[str]] | None = None,
                      static: dict[str, list] | None = None) -> list[str]:
    """``static``: each section's :func:`bench.report_static.compare` (keyed like ``notes``)."""
    static = static or {}
    n_rows = sum(len(v.rows) for v in views)
    md = ["# Leaderboard", ""] + [line + "  " for line in _header(results_dir, n_rows)]
    if claims_summary:
        md += ["", "## Claims", ""] + claims_summary
    tags = Counter((v.task, dataset_tag(v.dataset)) for v in views)
    for view in views:
        title = f"{view.task} — {view.dataset}"
        md += ["", f"## {md_escape(title)}", ""] + [note + "  " for note in _section_notes(view)]
        tag = dataset_tag(view.dataset)
        tag = view.dataset if tags[(view.task, tag)] > 1 else tag  # two sections of one task share the tag
        md += [line for line in (notes or {}).get(view.key, [])]
        for name in figures.get(view.key, []):
            if name.endswith(".png"):
                md += ["", f"![{name}]({name})"]
            else:  # a data table beside the figures
                md += ["", f"Data: [{name}]({name})"]
        for caption, (header, table) in (("Summary", summary_table(view)), ("Points", points_table(view)),
                                         ("All rows", rows_table(view))):
            md += ["", f"### {caption}: {md_escape(view.task)}, {md_escape(tag)}", "",
                   markdown_table(header, table)]
            if caption == "Summary":  # the first question after the figure: better than a smaller dense model?
                md += report_static.section_lines(view, static.get(view.key, []), tag)
        md += ["", "git sha: \\* = tracked code differed from that commit; ? = git could not tell."]
    return write_page(reports_dir, "leaderboard", "\n".join(md) + "\n", "Leaderboard")


def kernel_report(results_dir: Path, reports_dir: Path) -> list[str]:
    """The kernel pages of the methods that register one (``MethodSpec.kernel_page``), each from the rows of
    its ``bench kernels`` runs; [] where there are none."""
    written: list[str] = []
    for spec in registry.methods().values():
        if spec.kernel_page:
            written += [str(p) for p in registry.load_impl(spec.kernel_page)(results_dir, reports_dir)]
    return written


def task_figures(view: TaskView, results_dir: Path, reports_dir: Path, stem: str) -> list[Path]:
    """The figures a task registers for the report (e.g. parity: error and ponder time vs difficulty).

    The task's function gets ``stem`` (the view's file-name stem) when it accepts a fourth argument, and
    must name its files after it so that two datasets of one task never write the same file.
    """
    import inspect

    try:
        spec = registry.task_spec(view.task)
    except registry.RegistryError:
        return []  # rows of a task whose plugin is not loaded: the generic figures only
    if not spec.figures:
        return []
    draw = registry.load_impl(spec.figures)
    args = (rows_with_intervals(view), results_dir, reports_dir)
    if len(inspect.signature(draw).parameters) >= 4:
        args += (stem,)
    return [Path(p) for p in draw(*args)]


def rows_with_intervals(view: TaskView):
    """The view's rows with each row's 95% bootstrap interval over test examples (``quality_lo`` /
    ``quality_hi``; NaN where the row has none), for the figure functions tasks and methods register."""
    keys = view.rows["row_key"] if "row_key" in view.rows else view.rows.index.to_series()
    return view.rows.assign(quality_lo=keys.map(view.unc.low).astype(float),
                            quality_hi=keys.map(view.unc.high).astype(float))


def method_figures(view: TaskView, results_dir: Path, reports_dir: Path, stem: str) -> list[Path]:
    """The figures each method with rows in this (task, dataset) registers (``MethodSpec.figures``), drawn
    from the view's rows and their per-sample files; files are named after ``stem``."""
    written: list[Path] = []
    for name in sorted(view.rows["method"].unique()):
        try:
            spec = registry.method_spec(name)
        except registry.RegistryError:
            continue  # rows of a method whose plugin is not loaded
        if spec.figures:
            written += [Path(p) for p in registry.load_impl(spec.figures)(rows_with_intervals(view), results_dir,
                                                                          reports_dir, stem)]
    return written


SLUG_MAX = 60  # longer dataset descriptions are cut and made unique by a hash of the full text


def _slug(text: str) -> str:
    """A file-name-safe form of ``text``; over SLUG_MAX characters: its start plus 8 hex digits of its
    SHA-256 (stable, and distinct datasets with a common start still get distinct names)."""
    import hashlib

    slug = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9.=-]+", "_", text)).strip("_")
    if len(slug) <= SLUG_MAX:
        return slug
    return slug[:SLUG_MAX - 9].rstrip("_") + "_" + hashlib.sha256(text.encode()).hexdigest()[:8]


def view_stems(views: list[TaskView]) -> dict[tuple[str, str], str]:
    """A stable file-name stem per (task, dataset): it never depends on which other datasets have rows.

    The task's own name (``parity`` -> ``parity_pareto.png``) goes to its default dataset: the one its
    ``TaskSpec.default_dataset`` names, or, for a task that names none, the dataset of its earliest row
    (rows are append-only, so adding a dataset never renames an existing one's files).  Every other
    dataset gets ``<task>_<dataset slug>``.  Two views mapping to one stem is an error (never a silent
    overwrite).
    """
    stems: dict[tuple[str, str], str] = {}
    for task in sorted({v.task for v in views}):
        mine = [v for v in views if v.task == task]
        try:
            default = registry.task_spec(task).default_dataset
        except registry.RegistryError:
            default = ""
        if not default:
            first = min(mine, key=lambda v: (str(v.rows["timestamp"].min()), v.dataset))
            default = first.dataset
        for view in mine:
            stems[(task, view.dataset)] = view.slug if view.dataset == default else \
                f"{view.slug}_{_slug(view.dataset)}"
    seen: dict[str, tuple[str, str]] = {}
    for key, stem in stems.items():
        if stem in seen:
            raise UserError(f"report: datasets {seen[stem][1]!r} and {key[1]!r} of task {key[0]} map to the same "
                             f"file names ({stem}_*); rename one of them")
        seen[stem] = key
    return stems


MANIFEST = ".written"  # in reports_dir: the results dir, then the files the last `bench report` wrote from it


def main(results_dir: str = "results", reports_dir: str = "reports", echo=print) -> list[str]:
    """Write the per-task figures, reports/claims.{md,html}, the speed, curve and status pages and
    reports/leaderboard.{md,html}; return the paths written.  ``echo`` receives what was read (rows,
    duplicates, per-sample files, claims).

    Files the previous report *from the same results directory* wrote (listed in
    ``<reports_dir>/.written``) that this one does not write are removed, so a section whose rows are gone
    leaves no stale figure behind; files the report never wrote, and files written from another results
    directory, are never touched."""
    written = write_all(results_dir, reports_dir, echo)
    out = Path(reports_dir)
    manifest = out / MANIFEST
    # the results dir relative to the reports dir, so a committed manifest holds in any clone
    source = f"results_dir: {os.path.relpath(Path(results_dir).resolve(), out.resolve())}"
    previous = manifest.read_text().split("\n") if manifest.exists() else []
    names = sorted({Path(p).name for p in written if Path(p).parent.resolve() == out.resolve()})
    if previous and previous[0] == source:
        for name in previous[1:]:
            stale = out / name
            if name and name not in names and "/" not in name and stale.is_file():
                stale.unlink()
                echo(f"removed {stale} (written by an earlier report, not by this one)")
    if names:
        results.atomic_write_text(manifest, "\n".join([source, *names]) + "\n")
    return written


def write_all(results_dir: str, reports_dir: str, echo=print) -> list[str]:
    frame = results.load(results_dir)
    kernel_paths = kernel_report(Path(results_dir), Path(reports_dir))
    kernel_paths += report_speed.write(Path(results_dir), Path(reports_dir))  # bench speed (results/speed)
    budget = report_method_budget.section(Path(results_dir), Path(reports_dir))  # method-budget curves
    kernel_paths += report_curves.write(Path(results_dir), Path(reports_dir), budget)  # dense learning curves
    kernel_paths += report_throughput.write(Path(results_dir), Path(reports_dir))  # scripts/train_throughput.py
    if frame.empty:
        if kernel_paths:
            return kernel_paths
        raise UserError(f"no result rows under {results_dir}; run `python -m bench run ...` first")
    views = task_views(frame)
    dedup = latest_rows_counts(frame, views)
    echo(f"read {dedup['read']} row files under {results_dir}/: {dedup['kept']} points kept, "
         f"{dedup['duplicates']} duplicate rows of a point and {dedup['superseded']} earlier runs of a point dropped")
    out = Path(reports_dir)
    out.mkdir(parents=True, exist_ok=True)
    for view in views:
        attach_uncertainty(view, results_dir)
        n_ci = sum(1 for k in view.rows["row_key"] if k in view.unc.draws)
        missing = sorted({note for note in view.unc.notes.values()})
        echo(f"  {view.task} — {view.dataset[:60]}: {len(view.rows)} rows, {n_ci} with per-sample bootstrap"
             + (f"; without: {', '.join(missing)}" if missing else ""))
    stems = view_stems(views)
    written, figures, notes = [], {}, {}
    for view in views:
        stem = stems[(view.task, view.dataset)]
        key = view.key
        variants = report_plots.variant_numbers(view)  # a curve looks the same in both figures
        paths = [report_plots.plot_task(view, out / f"{stem}_pareto.png", x="cost", variants=variants)]
        timed = timing_view(view)
        if timed is not None:
            paths.append(report_plots.plot_task(timed[0], out / f"{stem}_latency.png", x="latency",
                                                note=timed[1], variants=variants))
            notes[key] = ["", f"Latency figure: {md_escape(timed[1])}."]
        paths += task_figures(view, Path(results_dir), out, stem)
        paths += method_figures(view, Path(results_dir), out, stem)
        figures[key] = [p.name for p in paths]
        written += [str(p) for p in paths]
    clash = sorted({p for p in written if written.count(p) > 1})
    if clash:  # a figure function that ignores its stem; the report would show one section's data twice
        raise UserError(f"report: {', '.join(clash)} written by more than one section; name files after the stem")
    static = {view.key: report_static.compare(view, results_dir) for view in views}
    claim_paths, summary = report_claims.write(views, out, results_dir, echo=echo, static_lines=lambda r: (
        report_static.claim_lines(static.get(r.view.key, []), report_claims.claim_curves(r.claim, r.view))))
    board = write_leaderboard(views, out, figures, results_dir, claims_summary=summary, notes=notes, static=static)
    status = report_status.write(frame, out, results_dir)
    return kernel_paths + written + claim_paths + board + status


def latest_rows_counts(frame, views: list[TaskView]) -> dict[str, int]:
    counts = dict(latest_rows(frame[["task", "dataset", "method", "variant", "knob_name", "knob_value", "seed",
                                     "config_hash", "train_budget", "timestamp", "git_sha", "uncounted_ops",
                                     "run_id"] + [c for c in ("row_file", "code_version") if c in frame]])
                  .attrs["dedup"])
    counts["kept"] = sum(len(v.rows) for v in views)
    return counts
