"""Learning curves of the dense base models: the evidence behind each task's offline default budget.

``bench report`` reads the rows under ``<results_dir>/curves/`` (dense base models trained with
different ``<task>.train_steps``, written there by ``bench run ... results_dir=results/curves``) and the
leaderboard's dense base rows of each task's default configuration made under today's training protocol
(``<results_dir>/<task>/dense``: every seed of the base the methods start from is a point of the default
curve), and writes ``reports/curves.md`` (and ``.html``) and one figure per task,
``reports/curves_<task>.png``.

What the page answers, per task and dataset (rows that differ in anything but ``train_steps`` are
separate curves):

* quality against base steps: the seed mean with its two-level bootstrap 95% CI (seeds, then test
  examples; ``bench.stats``, paired: every row of a curve is resampled with the same examples);
* the gain from more steps: from each N to 2N when both were run (the doublings the target judges), and
  between consecutive step counts otherwise: Δ = quality(larger) − quality(smaller), the metric's
  direction applied, with its paired 95% CI;
* every other setting (e.g. ``iwslt.dropout=0.3``) against the default configuration at the same steps:
  Δ with one paired bootstrap over both curves' rows, better / worse / inconclusive by the claims' rule
  (seeds included), so that a calibration choice between settings rests on a CI, not on two point values;
  a setting that changes the training data (its rows name another dataset, e.g. ``iwslt.ding_phrases``)
  is compared with the default curve evaluated on the same test examples;
* the task's declared :class:`bench.claims.BaseTarget` (``BASE_TARGET`` in ``tasks/<name>/claims.py``):
  a quality threshold (e.g. WER ≤ 0.30) and/or a doubling gain below which the base counts as trained
  to saturation, and the training time allowed.  Verdicts use the claims' rule
  (``bench.report.verdicts``): **met** when the whole 95% CI is on the target's side, **missed** when it is
  wholly on the other side, **inconclusive** otherwise.  The training time is the rows' ``train_time_s``:
  the wall clock recorded in the base model's checkpoint by the run that trained it; a point trained more
  than once (other seeds, or the same seed again in another session) is judged on its longest training,
  a worst case on a shared machine, and the page lists every training.  With ``equal_budget_control``, the
  dense model trained for ``train_steps + method_steps`` (the control) must gain less over the default base
  than the base's seed spread (max − min over its seeds): met when the upper end of the paired 95% CI of
  control − base is below the spread and no seed's own Δ reaches it, missed when the lower end is above
  it, inconclusive otherwise.  The CI covers the test examples, as everywhere on the page; the seed
  spread is the yardstick the calibration asks for, derived from the base's own seeds.

Only rows made under today's training protocol count.  Rows of one curve are one per (steps, seed), the
latest: a re-evaluation of the same model (another ``threads``, ``timing``) and a re-training of the same
point (a calibration row and the leaderboard's base of the same seed) both keep the latest row's quality.
A doubling gain pairs the seeds that have rows at both N and 2N, on one test set, and lists each seed's
own gain beside the mean; a seed whose own gain reaches the target's makes "met" inconclusive (the
claims' seed rule).  Only the default configuration's curve (every
key at the task's default but ``train_steps``) is judged against the target.  The default budget (the
task's ``train_steps`` default in its config dataclass) is marked on each curve.  A key added to the task
after a row was made is read as its default (options are added with the earlier behaviour as default).

The rows are read into curves by ``bench/report/curve_data.py`` and the gains, comparisons and verdicts
computed by ``bench/report/curve_stats.py``; this module draws the figures and writes the page.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bench import metrics, results, stats
from bench.report import scratch_curves as report_scratch_curves
from bench.figures import save_figure
from bench.report.curve_data import (CURVES_DIR, DEFAULT_SETTING, Curve, Point, Training, base_target, load_curves,
                                     points)
from bench.report.curve_stats import (AS_TARGET, MET, MISSED, UNSURE, Comparison, Doubling, compare_settings,
                                      control_steps, quality_verdict, step_gain, step_gains)
from bench.report.page import markdown_table, md_escape, write_page
from bench.report.verdicts import seed_check, verdict


def quality_text(value: float, metric: str) -> str:
    """A quality (or a difference of qualities) as the curves page prints it (:func:`bench.metrics.text`)."""
    return metrics.text(value, metric)


def quality_ci_text(value: float, low: float, high: float, metric: str) -> str:
    """``value [low, high]``, each as :func:`quality_text` prints it."""
    return f"{quality_text(value, metric)} [{quality_text(low, metric)}, {quality_text(high, metric)}]"


def _slug(curve: Curve, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """File-name part of a curve: the task for its default configuration (the first such curve of the task:
    not in ``taken``, the slugs given so far), else the task and a stable hash of the curve's setting (and
    dataset)."""
    if curve.is_default and curve.setting in ("", DEFAULT_SETTING) and curve.task not in taken:
        return curve.task
    return f"{curve.task}_{results.stable_hash([curve.dataset, curve.setting_key], 8)}"


def plot_curve(curve: Curve, pts: list[Point], target, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    control = next((p for p in pts if p.steps == control_steps(curve)), None)
    pts = [p for p in pts if p is not control]  # the control is a marker of its own, not a curve point
    x = [p.steps for p in pts]
    y = [p.quality for p in pts]
    err = np.array([[p.quality - p.low if math.isfinite(p.low) else 0.0 for p in pts],
                    [p.high - p.quality if math.isfinite(p.high) else 0.0 for p in pts]])
    ax.errorbar(x, y, yerr=err, marker="o", color="#1f77b4", capsize=3, label="seed mean, 95% CI (test examples)")
    for p in pts:
        if len(p.seed_values) > 1:
            ax.scatter([p.steps] * len(p.seed_values), p.seed_values, s=10, color="#1f77b4", alpha=0.4,
                       zorder=1)
    if curve.default_steps in x:
        i = x.index(curve.default_steps)
        ax.scatter([x[i]], [y[i]], s=140, facecolors="none", edgecolors="black", zorder=3,
                   label=f"default ({curve.default_steps} steps)" if curve.is_default
                   else f"the default's steps ({curve.default_steps})")
    if control is not None:
        ax.errorbar([control.steps], [control.quality],
                    yerr=[[control.quality - control.low if math.isfinite(control.low) else 0.0],
                          [control.high - control.quality if math.isfinite(control.high) else 0.0]],
                    marker="^", color="#ff7f0e", capsize=3, linestyle="none",
                    label=f"equal-budget control ({control.steps} steps)")
    if target is not None and target.quality is not None:
        ax.axhline(target.quality, color="#d62728", linestyle="--", linewidth=1,
                   label=f"target {'≥' if curve.higher_is_better else '≤'} {target.quality:g}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(x)
    ax.set_xticklabels([str(s) for s in x], rotation=30)
    ax.minorticks_off()
    ax.set_xlabel("dense base training steps (log scale)")
    ax.set_ylabel(f"{curve.metric} {'↑' if curve.higher_is_better else '↓'}")
    dataset = curve.dataset if len(curve.dataset) <= 70 else curve.dataset[:67] + "..."
    title = f"{curve.task}: dense base learning curve\n{dataset}"  # the dataset actually used
    ax.set_title(title + (f"\n{curve.setting}" if curve.setting else ""), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    save_figure(fig, path)
    plt.close(fig)
    return path


def training_list(runs: list[Training]) -> str:
    """The time target's detail: every training's minutes when there are several, each with its processor
    when they ran on different ones (the verdict is the longest's, whichever processor it ran on)."""
    devices = {t.device for t in runs}
    if len(devices) > 1:
        return (f" (the longest of {len(runs)} trainings: "
                + ", ".join(f"{t.minutes:.1f} min on {t.device or 'an unrecorded device'}" for t in runs) + ")")
    on = f"on {runs[0].device}" if runs and runs[0].device else ""
    if len(runs) > 1:
        return (f" (the longest of {len(runs)} trainings: {', '.join(f'{t.minutes:.1f}' for t in runs)} min"
                + (f", {on})" if on else ")"))
    return f" ({on})" if on else ""


def control_check(curve: Curve, default: Point | None) -> list[str]:
    """Whether the equal-budget control gains less over the default base than the base's seed spread (see
    the module docstring): Δ = control − base, the mean over the seeds both have, with its paired CI over
    test examples and each seed's own Δ; the spread is max − min over the base's seeds (two or more)."""
    control = control_steps(curve)
    name = "the equal-budget control gains less than the base's seed spread"
    if default is None or control is None:
        return [name, "n/a", "not run"]
    name = f"{name} ({control} steps)"
    gain = step_gain(curve, curve.default_steps, control, None) if control in curve.steps else None
    if gain is None:
        return [name, "n/a", f"not run ({control} steps, a seed the base has)"]
    spread = max(default.seed_values) - min(default.seed_values)
    value = (f"Δ = {quality_ci_text(gain.gain, gain.low, gain.high, curve.metric)}"
             f" ({', '.join(f's{s}: {quality_text(g, curve.metric)}' for s, g in gain.seed_gains.items())}); "
             f"base seed spread {quality_text(spread, curve.metric)} over {len(default.seeds)} seed(s)")
    if len(default.seeds) < 2:
        return [name, value, "inconclusive: the spread needs two seeds of the base"]
    # below the spread is above its negation: the claims' verdict and seed rule on −Δ against −spread
    result, why = seed_check(verdict(-gain.high, -gain.low, -spread), {s: -g for s, g in gain.seed_gains.items()},
                             -spread)
    return [name, value, AS_TARGET.get(result, UNSURE) + (f" ({why})" if why else "")]


def _points_table(curve: Curve, pts: list[Point]) -> str:
    """A line per step count: its seed mean with the 95% CI, each seed's value and the longest training."""
    table = []
    for p in pts:
        label = {curve.default_steps: " (default)" if curve.is_default else " (the default's steps)",
                 control_steps(curve): " (equal-budget control)"}.get(p.steps, "")
        table.append([str(p.steps) + label, quality_ci_text(p.quality, p.low, p.high, curve.metric),
                      ", ".join(f"s{s}: {quality_text(v, curve.metric)}" for s, v in zip(p.seeds, p.seed_values)),
                      f"{p.train_minutes:.1f}" if math.isfinite(p.train_minutes) else "n/a"])
    return markdown_table(["base steps", f"{curve.metric} [95% CI]", "per seed", "training minutes (longest)"], table)


def _gains_lines(curve: Curve, doubles: list[Doubling], gain_threshold: float | None) -> list[str]:
    """The gain from more steps, a line per pair of step counts (judged where a doubling has a target)."""
    if not doubles:
        return []
    rows = [[f"{d.steps} → {d.to_steps}", quality_ci_text(d.gain, d.low, d.high, curve.metric),
             ", ".join(f"s{s}: {quality_text(g, curve.metric)}" for s, g in d.seed_gains.items())]
            + ([f"< {gain_threshold:g}" if d.is_doubling else "— (not a doubling)", d.verdict or "—"]
               if gain_threshold is not None else [])
            for d in doubles]
    header = ["steps", "gain Δ [95% CI]", "per seed"] + (["target", "verdict"] if gain_threshold is not None else [])
    return ["Gain from more steps (Δ = quality at the larger − quality at the smaller step count, the "
            "metric's direction applied; over the seeds both step counts have, so it can differ from the difference "
            "of the table's seed means above; paired over test examples; the target judges doublings, N → 2N):",
            "", markdown_table(header, rows), ""]


def _doubling_check(curve: Curve, target, default: Point | None, doubles: list[Doubling]) -> list[str]:
    """The target's doubling gain at the default steps: the doubling's verdict, or why it was not run."""
    d = next((d for d in doubles if d.steps == curve.default_steps and d.is_doubling), None)
    value = quality_ci_text(d.gain, d.low, d.high, curve.metric) if d else "n/a"
    if d:
        judged = d.verdict
    elif not curve.default_steps:
        judged = "not run"
    elif default and target.minutes and 2 * default.train_minutes > target.minutes:
        judged = (f"out of reach: {2 * curve.default_steps} steps would take about "
                  f"{2 * default.train_minutes:.0f} min (twice the default's), over the "
                  f"{target.minutes:g}-min limit; the gains up to the default are in the task's 'Gain from more "
                  "steps' table")
    else:
        judged = f"not run ({2 * curve.default_steps} steps)"
    return [f"doubling the default gains < {target.doubling_gain:g}", value, judged]


def _target_checks(curve: Curve, target, default: Point | None, doubles: list[Doubling]) -> list[list[str]]:
    """The default configuration against its task's target: (target, value [95% CI], verdict) for its
    quality, doubling gain, equal-budget control and training time, those the target declares."""
    checks = []
    if target.quality is not None:
        sign = "≥" if curve.higher_is_better else "≤"
        judged = quality_verdict(curve, default, target.quality) if default else "not run"
        value = quality_ci_text(default.quality, default.low, default.high, curve.metric) if default else "n/a"
        checks.append([f"{curve.metric} {sign} {target.quality:g} at the default", value, judged])
    if target.doubling_gain is not None:
        checks.append(_doubling_check(curve, target, default, doubles))
    if target.equal_budget_control:
        checks.append(control_check(curve, default))
    if target.minutes:
        minutes = default.train_minutes if default else math.nan
        known = math.isfinite(minutes)
        runs = default.trainings if default else []
        value = f"{minutes:.1f} min" + training_list(runs)
        checks.append([f"base trains in ≤ {target.minutes:g} min", value if known else "n/a",
                       (MET if minutes <= target.minutes else MISSED) if known else
                       UNSURE if default else "not run"])
    return checks


def curve_section(curve: Curve, slug: str, target) -> tuple[list[str], dict]:
    """A curve's section of the page (its figure, points, gains and, for the default configuration, its
    target) and its summary: the target's checks and the curve's points."""
    pts = points(curve)
    gain_threshold = None if target is None or not curve.is_default else target.doubling_gain
    doubles = step_gains(curve, gain_threshold)
    arrow = "↑" if curve.higher_is_better else "↓"
    # the processors or GPUs of every training of the curve's points (the rows' ``device``); a device the rows
    # do not name (a bare ``cpu``) is listed as such beside named ones, and alone names none
    named = {t.device for runs in curve.train_minutes.values() for t in runs}
    devices = [] if not named - {""} else sorted(d or "an unrecorded device" for d in named)
    lines = [f"## {md_escape(curve.task)}" + (f" — {md_escape(curve.setting)}" if curve.setting else ""), "",
             f"Dataset: {md_escape(curve.dataset)}. Metric: {curve.metric} {arrow}."
             + (f" Curve setting: {md_escape(curve.setting)}." if curve.setting else "")
             + (f" Trained on: {md_escape(', '.join(devices))}." if devices else ""), "",
             f"![{curve.task} learning curve](curves_{slug}.png)", ""]
    lines += [_points_table(curve, pts), ""]
    lines += _gains_lines(curve, doubles, gain_threshold)
    summary = {"task": curve.task, "default": curve.default_steps, "checks": []}
    default = next((p for p in pts if p.steps == curve.default_steps), None)
    if target is not None and not curve.is_default:
        lines += ["Not the task's default configuration: the default's targets are not judged here.", ""]
    if target is not None and curve.is_default:
        checks = _target_checks(curve, target, default, doubles)
        lines += [f"Target ({md_escape(target.source)}):", "",
                  markdown_table(["target", "value [95% CI]", "verdict"], checks), ""]
        summary["checks"] = checks
    return lines, {**summary, "points": pts}


def _settings_lines(comparisons: list[Comparison]) -> list[str]:
    """The section on every other setting against the default configuration ([] without one)."""
    if not comparisons:
        return []
    return ["## Settings against the default", "",
            "Δ = quality of the setting − quality of the task's default configuration at the same base "
            "steps (the metric's direction applied: Δ > 0 is better), over the seeds both have, paired "
            "over test examples; **better** / **worse** when the 95% CI excludes 0, **inconclusive** "
            "otherwise.", "",
            markdown_table(["task", "setting", "base steps", "Δ [95% CI]", "per seed", "verdict"],
                           [[c.task, c.setting, str(c.steps) if c.steps else "—",
                             f"{c.delta:+.4g} [{c.low:+.4g}, {c.high:+.4g}]" if c.steps else "—",
                             ", ".join(f"s{s}: {d:+.4g}" for s, d in sorted(c.seed_deltas.items())),
                             c.verdict] for c in comparisons]), ""]


def write(results_dir: Path | str, reports_dir: Path | str,
          budget: tuple[list[str], list[str]] | None = None) -> list[str]:
    """Write reports/curves.{md,html} and one figure per curve; ``budget``: the method-budget curves' section
    and its figures (``bench.report.method_budget.section``), placed after the dense curves, then the
    curves of methods trained from scratch (:mod:`bench.report.scratch_curves`).  [] when there is nothing."""
    curves = load_curves(results_dir)
    budget_lines, budget_figures = budget or ([], [])
    scratch_lines = report_scratch_curves.section(results_dir)
    if not curves and not budget_lines and not scratch_lines:
        return []
    out = Path(reports_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Learning curves of the dense base models", "",
             f"Generated by `python -m bench report` from the rows under `{results_dir}/{CURVES_DIR}/`: dense "
             "base models of one task configuration trained for different `<task>.train_steps`; and from the "
             f"leaderboard's dense base rows of each task's default configuration (`{results_dir}/<task>/dense`, "
             f"training protocol {results.PROTOCOL_VERSION}), the models every method starts from. Re-create a "
             "point with the row's `command`; e.g. `python -m bench run method=dense task=imagenet "
             "imagenet.train_steps=37520 results_dir=results/curves timing=false threads=2`. Method rows under "
             f"`{results_dir}/{CURVES_DIR}/` (other `<task>.method_steps`) are the method-budget curves at the "
             "end of the page.", "",
             f"Uncertainty: two-level bootstrap of the seed mean ({stats.N_RESAMPLES} resamples, percentile, "
             "paired within a curve; `scipy.stats.bootstrap`): the seeds, then the test examples; with fewer than "
             f"{stats.MIN_SEEDS} seeds it covers the test set only (docs/measurement.md, \"Statistics\"). "
             "A target is **met** when the whole 95% CI is on its side, **missed** when the whole CI is on the "
             "other side, **inconclusive** otherwise. Training minutes: the row's `train_time_s`, the wall "
             "clock the run that trained the base recorded in its checkpoint. A seed trained more than once (e.g. "
             "a calibration run and the leaderboard's base) shows the latest training's quality; for time, "
             "every training of a point counts, the longest decides (a worst case: the machine is shared, so "
             "the same training takes different times in different sessions), and the time target lists "
             "them all, with the processor they ran on (the row's `device`; sessions do not always get the same "
             "processor model, and the same training's time depends on it). Only rows of today's training "
             "protocol count.", ""]
    summary_rows, sections, written, slugs = [], [], [], set()
    for curve in curves:
        slug = _slug(curve, slugs)
        slugs.add(slug)
        target = base_target(curve.task)
        section, summary = curve_section(curve, slug, target)
        sections += section
        written.append(str(plot_curve(curve, summary["points"], target, out / f"curves_{slug}.png")))
        for check in summary["checks"]:
            summary_rows.append([curve.task + (f" ({curve.setting})" if curve.setting else ""),
                                 str(curve.default_steps), *check])
    if summary_rows:
        lines += ["## Summary", "", markdown_table(["task", "default steps", "target", "value [95% CI]",
                                                    "verdict"], summary_rows), ""]
    lines += _settings_lines(compare_settings(curves, results_dir))
    lines += sections + budget_lines + scratch_lines
    return written + budget_figures + write_page(out, "curves", "\n".join(lines).rstrip() + "\n",
                                "Learning curves of the dense base models")
