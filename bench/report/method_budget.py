"""Method-budget curves: does a method's loss against the dense base come from a short method budget?

The core's protocol gives every method one budget on top of the dense base, the task's ``method_steps``
(bench/protocol.py).  A method trained with more of it may gain, as an undertrained base would; then a
"loss against dense" at the default budget says as much about the budget as about the method.  This
module reads the method rows under ``<results_dir>/curves/`` (``bench run method=<m> task=<t>
<t>.method_steps=N results_dir=results/curves``), adds the leaderboard's rows of the same point (same
method config, same task config but ``method_steps``, today's protocol) as the default budget's point, and
writes the "Method budgets" section of ``reports/curves.md`` and one figure per curve,
``reports/curves_budget_<task>_<method>_<hash>.png``.

Per curve (task, dataset, method, knob value and every other config key fixed; only ``method_steps``
varies), per method budget: the seed mean quality with its bootstrap 95% CI over test examples, the mean
cost (% of dense MACs: it moves with training for methods that learn their own cost, e.g. ACM's gates),
and Δ against the dense base the points start from (dense rows, leaderboard or curves, of today's protocol
whose task config, but ``method_steps``, and result-changing run keys are the method rows'; the seeds both
have; paired over test examples; **above** / **below** when the CI excludes 0 and no seed's own Δ
contradicts it, **inconclusive** otherwise: the claims' rule, :func:`bench.report.verdicts.seed_check`).
Each doubling of the budget (N → 2N) has its gain with a paired CI, judged against the task's
``BASE_TARGET.doubling_gain``, the yardstick the dense base's own budget is calibrated with, by the same
rule (:func:`bench.report.curve_stats.step_gain`): **met** (saturated) when the whole CI is below it and no seed
reaches it, **missed** (still gaining) when it is wholly above it, inconclusive otherwise.  The gain is in
quality at each budget's own cost: a budget that also lowers the cost is not credited for that here.
The paired CIs are bootstraps over test examples for every metric (sacreBLEU's paired test, which the
claims add for BLEU, is not run here).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench import metrics, results, stats
from bench.figures import save_figure
from bench.report.curve_data import CURVES_DIR, Curve, Point, base_target, config_defaults, points
from bench.report.curve_stats import UNSURE, step_gains
from bench.report.curves import quality_ci_text, quality_text
from bench.report.page import markdown_table, md_escape
from bench.report.verdicts import FAILS, HOLDS, seed_check, verdict
from bench.report.views import latest_rows, protocol_versions

ABOVE, BELOW = "above", "below"


def method_budget(budget: str) -> int | None:
    """The method budget of a row's ``train_budget`` ("... on top of the dense base model (method budget
    2345 steps)"), None for a row without one (a dense base, a method trained from scratch)."""
    match = re.search(r"method budget (\d+) steps", str(budget))
    return int(match.group(1)) if match else None


def _task_section(config: dict, task: str) -> dict[str, str]:
    """The row's task section, a key the row lacks read at its default (options are added with the earlier
    behaviour as default; the curves page reads rows so)."""
    stored = {**config_defaults(task), **(config.get(task) or {})}
    return {f"{task}.{k}": str(v) for k, v in stored.items()}


def _run_keys(config: dict) -> dict[str, str]:
    """The run-level keys that change a row's numbers (threads, paths and timing change none)."""
    return {k: str(config.get(k, d)) for k, d in {**results.IMPLICIT_DEFAULTS, "eval_limit": 0}.items()}


def _setting(config: dict, method: str, task: str) -> dict[str, str]:
    """What decides a method row beside ``method_steps``: the method's section, the task's section
    (``train_steps`` included: the base the method starts from) and the run keys that change results."""
    section = {k: v for k, v in _task_section(config, task).items() if k != f"{task}.method_steps"}
    own = {f"{method}.{k}": str(v) for k, v in (config.get(method) or {}).items()}
    return {**section, **own, **_run_keys(config)}


def _base_setting(config: dict, task: str) -> dict[str, str]:
    """The dense base a method row starts from, as a dense row's setting: the method row's task section
    (``method_steps`` is not the base's), the full-size dense model, the same run keys."""
    section = {k: v for k, v in _task_section(config, task).items() if k != f"{task}.method_steps"}
    return {**section, "dense.width": "1.0", "dense.depth": "1.0", **_run_keys(config)}


def _dense_setting(config: dict, task: str) -> dict[str, str]:
    section = {k: v for k, v in _task_section(config, task).items() if k != f"{task}.method_steps"}
    size = {f"dense.{k}": str(float(v)) for k, v in (config.get("dense") or {}).items() if k in ("width", "depth")}
    return {**section, "dense.width": "1.0", "dense.depth": "1.0", **size, **_run_keys(config)}


@dataclass
class BudgetCurve:
    curve: Curve  # ``steps`` = the method budget; ``default_steps`` = the task's method_steps default
    method: str
    knob: str  # "<knob_name>=<knob_value>"
    cost_pct: dict[int, float]  # method budget -> mean cost, % of the dense MACs
    base: pd.DataFrame  # the dense base the points start from (same task config and run keys), one row per seed


def _today(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[protocol_versions(rows) == results.PROTOCOL_VERSION] if not rows.empty else rows


def _latest_per_seed(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per ``keys`` and seed, the latest (a re-run replaces an earlier one), with ``row_key``."""
    rows = latest_rows(rows.reset_index(drop=True))
    return rows.sort_values("timestamp", kind="stable").drop_duplicates([*keys, "seed"], keep="last")


def load_budget_curves(results_dir: Path | str) -> list[BudgetCurve]:
    """The method-budget curves: method rows under ``<results_dir>/curves`` grouped by (task, dataset,
    method, knob value, setting), with the leaderboard's rows of the same setting at other budgets (the
    default's); each with the dense base it starts from (dense rows, leaderboard or curves, whose task
    config, but ``method_steps``, and run keys are the method rows'); only today's protocol.  A curve
    needs a row under ``curves`` (the leaderboard alone draws none)."""
    all_curves = results.load(Path(results_dir) / CURVES_DIR)
    if all_curves.empty:
        return []
    curve_rows = _today(all_curves[all_curves["method"] != "dense"])
    curve_rows = curve_rows.assign(method_steps=curve_rows["train_budget"].map(method_budget))
    curve_rows = curve_rows[curve_rows["method_steps"].notna()]
    if curve_rows.empty:
        return []
    board = _today(results.load(results_dir))
    wanted = set(zip(curve_rows["task"], curve_rows["dataset"], curve_rows["method"]))
    on_board = board[pd.Series([k in wanted for k in zip(board["task"], board["dataset"], board["method"])],
                               index=board.index, dtype=bool)] if not board.empty else board
    on_board = on_board.assign(method_steps=on_board["train_budget"].map(method_budget))
    frame = pd.concat([curve_rows.assign(on_curve=True), on_board.assign(on_curve=False)], ignore_index=True)
    frame = frame[frame["method_steps"].notna()].reset_index(drop=True)
    configs = [results.row_config(row["row_file"]) for row in frame.to_dict("records")]
    frame["setting_key"] = [results.stable_hash(_setting(c, str(m), str(t)))
                            for c, m, t in zip(configs, frame["method"], frame["task"])]
    frame["base_key"] = [results.stable_hash(_base_setting(c, str(t))) for c, t in zip(configs, frame["task"])]
    frame["steps"] = frame["method_steps"].astype(int)
    frame = _latest_per_seed(frame, ["task", "dataset", "method", "knob_value", "setting_key", "steps"])

    tasks = set(zip(frame["task"], frame["dataset"]))
    dense = _today(pd.concat([all_curves[all_curves["method"] == "dense"],
                              board[board["method"] == "dense"] if not board.empty else board], ignore_index=True))
    dense = dense[pd.Series([k in tasks for k in zip(dense["task"], dense["dataset"])], index=dense.index,
                            dtype=bool)] if not dense.empty else dense
    if not dense.empty:
        dense = dense.assign(base_key=[results.stable_hash(_dense_setting(results.row_config(row["row_file"]), str(row["task"])))
                                       for row in dense.to_dict("records")])
        dense = _latest_per_seed(dense, ["task", "dataset", "base_key"])

    out = []
    for (task, dataset, method, knob_value, key), rows in frame.groupby(
            ["task", "dataset", "method", "knob_value", "setting_key"], sort=True):
        if not rows["on_curve"].any():
            continue  # leaderboard rows only: no curve
        rows = rows.reset_index(drop=True)
        first = rows.iloc[0]
        default_budget = config_defaults(str(task)).get("method_steps")
        curve = Curve(task=str(task), dataset=str(dataset), metric=str(first["metric"]),
                      higher_is_better=bool(first["higher_is_better"]), setting="", rows=rows,
                      default_steps=None if default_budget is None else int(default_budget), setting_key=str(key))
        curve.unc = stats.rows_uncertainty(rows, results_dir)
        base = (dense[(dense["task"] == task) & (dense["dataset"] == dataset) & (dense["base_key"] == first["base_key"])]
                if not dense.empty else pd.DataFrame(columns=["seed", "quality", "row_key"]))
        cost = {int(n): float(g["cost_pct_dense"].mean()) for n, g in rows.groupby("steps")}
        out.append(BudgetCurve(curve, str(method), f"{first['knob_name']}={knob_value}", cost,
                               base.reset_index(drop=True)))
    return out


@dataclass
class AgainstBase:
    steps: int
    delta: float  # mean over paired seeds of method − dense base, the metric's direction applied
    low: float
    high: float
    verdict: str  # above / below the base, or inconclusive
    seed_deltas: dict[int, float]


def against_base(budget: BudgetCurve, results_dir: Path | str) -> list[AgainstBase]:
    """Δ = method − dense base at each method budget, over the seeds both have, with one paired bootstrap
    over the test examples of those rows; above / below by the claims' rule (the CI excludes 0 and no
    seed contradicts it), inconclusive otherwise."""
    curve, out = budget.curve, []
    base = budget.base.set_index("seed") if not budget.base.empty else None
    if base is None:
        return out
    for n in curve.steps:
        at = curve.rows[curve.rows["steps"] == n].set_index("seed")
        seeds = sorted(set(at.index) & set(base.index))
        if not seeds:
            continue
        both = pd.concat([at.loc[seeds].reset_index(), base.loc[seeds].reset_index()], ignore_index=True)
        unc = stats.rows_uncertainty(both, results_dir)
        keys = [[frame.loc[s, "row_key"] for s in seeds] for frame in (at, base)]
        a, b = unc.mean_draws(keys[0]), unc.mean_draws(keys[1])
        same_set = a is not None and b is not None and unc.test_set[keys[0][0]] == unc.test_set[keys[1][0]]
        low, high = stats.interval(curve.sign() * (a - b)) if same_set else (math.nan, math.nan)
        per_seed = {int(s): curve.sign() * (float(at.loc[s, "quality"]) - float(base.loc[s, "quality"]))
                    for s in seeds}
        result, why = seed_check(verdict(low, high, 0.0), per_seed, 0.0)
        if not same_set:  # a row without a usable per-sample file, or two test sets: no paired CI
            notes = sorted({unc.notes[k] for k in keys[0] + keys[1] if k in unc.notes})
            why = "no paired CI" + (f": {'; '.join(notes)}" if notes else ": different test sets")
        word = {HOLDS: ABOVE, FAILS: BELOW}.get(result, UNSURE)
        out.append(AgainstBase(int(n), float(np.mean(list(per_seed.values()))), low, high,
                               word + (f" ({why})" if why else ""), per_seed))
    return out


def _signed(value: float, metric: str) -> str:
    return metrics.text(value, metric, signed=True)


def _slug(budget: BudgetCurve) -> str:
    c = budget.curve
    return f"budget_{c.task}_{budget.method}_{results.stable_hash([c.dataset, budget.knob, c.setting_key], 8)}"


def plot_budget(budget: BudgetCurve, pts: list[Point], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = budget.curve
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    x = [p.steps for p in pts]
    err = np.array([[p.quality - p.low if math.isfinite(p.low) else 0.0 for p in pts],
                    [p.high - p.quality if math.isfinite(p.high) else 0.0 for p in pts]])
    ax.errorbar(x, [p.quality for p in pts], yerr=err, marker="o", color="#2ca02c", capsize=3,
                label=f"{budget.method} {budget.knob}: seed mean, 95% CI")
    for p in pts:
        if len(p.seed_values) > 1:
            ax.scatter([p.steps] * len(p.seed_values), p.seed_values, s=10, color="#2ca02c", alpha=0.4, zorder=1)
        ax.annotate(f"{budget.cost_pct[p.steps]:.0f}% of dense", (p.steps, p.quality), textcoords="offset points",
                    xytext=(4, -12), fontsize=7)
    if curve.default_steps in x:
        i = x.index(curve.default_steps)
        ax.scatter([x[i]], [pts[i].quality], s=140, facecolors="none", edgecolors="black", zorder=3,
                   label=f"default method budget ({curve.default_steps} steps)")
    if not budget.base.empty:
        seeds = sorted({s for p in pts for s in p.seeds} & set(budget.base["seed"]))
        level = float(budget.base.set_index("seed").loc[seeds, "quality"].mean()) if seeds else math.nan
        if math.isfinite(level):
            ax.axhline(level, color="black", linestyle="--", linewidth=1,
                       label=f"dense base (seed{'s' if len(seeds) > 1 else ''} {', '.join(str(s) for s in seeds)})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(x)
    ax.set_xticklabels([str(s) for s in x], rotation=30)
    ax.minorticks_off()
    ax.set_xlabel("method budget: steps on top of the dense base (log scale)")
    ax.set_ylabel(f"{curve.metric} {'↑' if curve.higher_is_better else '↓'}")
    ax.set_title(f"{curve.task}: {budget.method} ({budget.knob}) against its method budget", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    save_figure(fig, path)
    plt.close(fig)
    return path


def section(results_dir: Path | str, reports_dir: Path | str) -> tuple[list[str], list[str]]:
    """The page section's lines and the figures written ([], [] without method-budget curves)."""
    budgets = load_budget_curves(results_dir)
    if not budgets:
        return [], []
    lines = ["## Method budgets", "",
             "A method's quality against its method budget (the task's `method_steps`, the steps every method "
             "gets on top of the dense base under the core's protocol), with the leaderboard's row as the "
             "default budget's point. Δ against the dense base: method − base over the seeds both have, "
             "paired over test examples (**above** / **below** when the 95% CI excludes 0 and no seed "
             "disagrees). A doubling's gain is judged against the task's doubling yardstick for the dense "
             "base: **met** (saturated) when the whole CI is below it and no seed's own gain reaches it, "
             "**missed** (still gaining) when it is wholly above it. A gain is in quality alone, each budget at its own cost: the cost moves with the "
             "budget for methods that learn it (e.g. ACM's gates), and a budget that also lowers the cost gets no "
             "credit for that here. Points with different seeds are means over different seeds (the per-seed "
             "columns say which). The dense base is the one the points start from: the dense rows (leaderboard "
             "or curves) of the same task configuration, but `method_steps`.", ""]
    figures = []
    Path(reports_dir).mkdir(parents=True, exist_ok=True)
    for budget in budgets:
        curve = budget.curve
        target = base_target(curve.task)
        threshold = None if target is None else target.doubling_gain
        pts, base = points(curve), against_base(budget, results_dir)
        gains = step_gains(curve, threshold)
        slug = _slug(budget)
        figures.append(str(plot_budget(budget, pts, Path(reports_dir) / f"curves_{slug}.png")))
        by_steps = {b.steps: b for b in base}
        metric = curve.metric
        no_base = ("n/a: no dense base of this configuration" if budget.base.empty
                   else "n/a: no seed of the dense base")
        table = []
        if curve.default_steps is not None and curve.default_steps not in curve.steps:
            table.append([f"{curve.default_steps} (default)", "—", "not run under today's protocol", "—", "—", "—"])
        for p in pts:
            b = by_steps.get(p.steps)
            table.append([str(p.steps) + (" (default)" if p.steps == curve.default_steps else ""),
                          f"{budget.cost_pct[p.steps]:.1f}",
                          quality_ci_text(p.quality, p.low, p.high, metric),
                          ", ".join(f"s{s}: {quality_text(v, metric)}" for s, v in zip(p.seeds, p.seed_values)),
                          f"{_signed(b.delta, metric)} [{_signed(b.low, metric)}, {_signed(b.high, metric)}] "
                          f"{b.verdict}" if b else no_base,
                          ", ".join(f"s{s}: {_signed(d, metric)}" for s, d in sorted(b.seed_deltas.items()))
                          if b else "—"])
        lines += [f"### {md_escape(curve.task)}: {md_escape(budget.method)} ({md_escape(budget.knob)})", "",
                  f"Dataset: {md_escape(curve.dataset)}.", "",
                  f"![{curve.task} {budget.method} method budget](curves_{slug}.png)", "",
                  markdown_table(["method budget (steps)", "cost (% of dense)", f"{metric} [95% CI]", "per seed",
                                  "Δ vs dense base [95% CI]", "Δ per seed"], table), ""]
        if gains:
            rows = [[f"{d.steps} → {d.to_steps}",
                     quality_ci_text(d.gain, d.low, d.high, metric),
                     ", ".join(f"s{s}: {quality_text(g, metric)}" for s, g in d.seed_gains.items())]
                    + ([f"< {threshold:g}" if d.is_doubling else "— (not a doubling)", d.verdict or "—"]
                       if threshold is not None else [])
                    for d in gains]
            header = ["method budget", "gain Δ [95% CI]", "per seed"] + (
                ["yardstick", "verdict"] if threshold is not None else [])
            lines += ["Gain from a larger method budget (paired over test examples):", "",
                      markdown_table(header, rows), ""]
    return lines, figures
