"""Learning curves of methods trained from scratch: the "Methods trained from scratch" section of
``reports/curves.md``.

A method whose recipe trains it from scratch (``recipe=paper`` of ACT, AdaTape, CCT and DAT: its budget is
the task's ``train_steps``, not a fine-tune on the dense base) converges, or not, with its training steps.
Its rows under ``<results_dir>/curves/`` (``bench run method=<m> task=<t> <t>.train_steps=N recipe=paper
results_dir=results/curves timing=false``) and the leaderboard's rows of the same point make one curve per
(task, dataset, method, knob value and every other config key but ``<task>.train_steps``).  Per step count:
the seed mean with its 95% CI (two-level bootstrap, :func:`bench.stats.rows_uncertainty` and
:func:`bench.stats.seed_level`, as the dense curves), the seeds, and the cost.  Whether a recipe has
converged is read off the table: the quality still rising with the steps, or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench import metrics, registry, results, stats
from bench.report.curve_data import CURVES_DIR
from bench.report.page import markdown_table, md_escape
from bench.report.views import protocol_versions


@dataclass
class ScratchCurve:
    task: str
    dataset: str
    method: str
    knob: str  # "<knob>=<value>"
    setting: str  # the config keys, beside the steps, that set this curve apart from the method's defaults
    rows: pd.DataFrame  # latest row per (steps, seed)


def _steps_and_setting(row: dict) -> tuple[int | None, str]:
    """A row's training steps (its task's ``train_steps``) and what else in its task and method sections
    differs from their defaults, as "key=value" text."""
    config, task, method = results.row_config(row["row_file"]), str(row["task"]), str(row["method"])
    section = dict(config.get(task) or {})
    steps = section.pop("train_steps", None)
    changed = []
    for name, values, spec_config in ((task, section, registry.task_spec(task).config),
                                      (method, dict(config.get(method) or {}), registry.method_spec(method).config)):
        defaults = spec_config()
        changed += [f"{name}.{k}={v}" for k, v in sorted(values.items())
                    if hasattr(defaults, k) and getattr(defaults, k) != v and k != registry.method_spec(method).knob]
    return (int(steps) if steps is not None else None), ", ".join(changed)


def _from_scratch(method: str, task: str, capabilities: tuple[str, ...], base_steps: int) -> bool:
    recipe = registry.method_spec(method).paper_recipe(capabilities, base_steps)
    return recipe is not None and recipe.starts_from == "scratch"


def load(results_dir: Path | str) -> list[ScratchCurve]:
    """The from-scratch curves: ``recipe=paper`` method rows of today's protocol under the curves folder and
    on the leaderboard (a setting trained at one step count only is a curve of one point)."""
    curve_rows = results.load(Path(results_dir) / CURVES_DIR)
    board = results.load(results_dir)
    frame = pd.concat([curve_rows, board], ignore_index=True)
    if frame.empty:
        return []
    frame = frame[(frame["method"] != "dense") & (frame["recipe"] == "paper")
                  & (protocol_versions(frame) == results.PROTOCOL_VERSION)]
    out = []
    records = []
    for row in frame.to_dict("records"):
        steps, setting = _steps_and_setting(row)
        task_spec = registry.task_spec(str(row["task"]))
        capabilities = tuple(task_spec.backbones(task_spec.config()))
        if steps is None or not _from_scratch(str(row["method"]), str(row["task"]), capabilities, steps):
            continue
        records.append({**row, "steps": steps, "setting": setting,
                        "knob": f"{row['knob_name']}={row['knob_value']}"})
    if not records:
        return []
    rows = pd.DataFrame(records).sort_values("timestamp", kind="stable")
    rows = rows.drop_duplicates(["task", "dataset", "method", "knob", "setting", "steps", "seed"], keep="last")
    for key, group in rows.groupby(["task", "dataset", "method", "knob", "setting"], sort=True):
        out.append(ScratchCurve(*key, rows=group.reset_index(drop=True)))
    return out


def _point_lines(curve: ScratchCurve, results_dir: Path | str) -> list[list[str]]:
    metric = str(curve.rows["metric"].iloc[0])
    unc = stats.rows_uncertainty(curve.rows.assign(row_key=curve.rows["row_file"]), results_dir)
    table = []
    for steps, group in curve.rows.groupby("steps", sort=True):
        group = group.sort_values("seed")
        keys = list(group["row_file"])
        low, high = unc.ci(keys)
        quality = float(group["quality"].mean())
        table.append([f"{int(steps):,}", ", ".join(str(int(s)) for s in group["seed"]),
                      f"{metrics.text(quality, metric)} [{metrics.text(low, metric)}, {metrics.text(high, metric)}]",
                      f"{float(np.mean(group['macs_mean'] / group['macs_dense'])):.1%}",
                      f"{float(group['train_time_s'].max()) / 60:.1f}"])
    return table


def section(results_dir: Path | str) -> list[str]:
    """The page section (Markdown lines); [] without a from-scratch curve."""
    curves = load(results_dir)
    if not curves:
        return []
    lines = ["## Methods trained from scratch", "",
             "Methods whose paper recipe trains them from scratch (`recipe=paper`), at several `<task>.train_steps`: "
             "whether the recipe converges within the steps this machine can give it. Rows under "
             f"`{results_dir}/{CURVES_DIR}/` and the leaderboard's rows of the same point; the seed mean with its "
             "95% CI (two-level bootstrap as above; test set only with fewer than "
             f"{stats.MIN_SEEDS} seeds), the mean cost as a share of the dense model's MACs, and the longest "
             "training in minutes.", ""]
    for curve in curves:
        title = f"{curve.task}: {curve.method} ({curve.knob}" + (f"; {curve.setting}" if curve.setting else "") + ")"
        lines += [f"### {md_escape(title)}", "", f"Dataset: {md_escape(curve.dataset)}.", "",
                  markdown_table(["steps", "seeds", f"{curve.rows['metric'].iloc[0]} [95% CI]", "cost / dense",
                                  "training (min)"], _point_lines(curve, results_dir)), ""]
    return lines
