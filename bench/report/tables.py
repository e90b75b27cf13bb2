"""The leaderboard's tables of one section (:class:`bench.report.views.TaskView`): one line per method
(:func:`summarize`, :func:`summary_table`), per point (:func:`points_table`) and per row
(:func:`rows_table`), with the constants they are read at (budgets, the "reaches dense" tolerance, the
hypervolume's reference point)."""

from __future__ import annotations

import math

import numpy as np

from bench import stats
from bench.report.frontier import (cost_to_reach, hull_draws, hypervolume, normalized_auc, pareto_mask,
                                   quality_at_budget, selection_quality)
from bench.report.page import NA
from bench.report.views import TaskView, knob_label, load_class, number as _number, point_draws, row_fractions

BUDGETS = (0.25, 0.50, 0.75, 1.00)  # fractions of the dense base model's cost
# "Reaches dense quality" tolerance δ, in the metric's units: half a point on the metric's own scale, that is
# 0.005 for rates in [0, 1] (0.5 percentage point of accuracy or WER) and 0.5 for sacreBLEU's 0-100 scale.
DELTA = 0.005
DELTA_BY_METRIC = {"bleu": 0.5}
REFERENCE_COST = 1.5  # hypervolume reference cost, as a fraction of the dense base model's cost
# Hypervolume reference quality per metric: worse than any real result.  Metrics not listed get
# 0.0 if higher is better, 1.0 if lower is better (right for rates in [0, 1], such as error or WER).
REFERENCE_POINTS = {"accuracy": 0.0, "top1": 0.0, "top5": 0.0, "f1": 0.0, "bleu": 0.0,
                    "wer": 1.0, "cer": 1.0, "error": 1.0}
FRONT_SURE = 0.95  # a point counts as surely on the front when it is in this share of the resamples


def reach_delta(metric: str) -> float:
    """δ of "cost to reach dense − δ" for a metric (:data:`DELTA_BY_METRIC`, else :data:`DELTA`)."""
    return DELTA_BY_METRIC.get(metric.lower(), DELTA)


def reference_quality(metric: str, higher_is_better: bool) -> float:
    return REFERENCE_POINTS.get(metric.lower(), 0.0 if higher_is_better else 1.0)


def macs_unit(macs: float) -> tuple[str, float]:
    """(unit name, divisor) for a MACs magnitude: GMACs, MMACs, KMACs or MACs."""
    for name, scale in (("GMACs", 1e9), ("MMACs", 1e6), ("KMACs", 1e3)):
        if math.isfinite(macs) and abs(macs) >= scale:
            return name, scale
    return "MACs", 1.0


def summarize(view: TaskView):
    """One line per curve: counts, Pareto flag, quality at budgets, cost to reach dense, AUC, hypervolume.

    Costs are fractions of the dense base model's cost; qualities are in the metric's units.  "Reaches
    dense" means within the metric's :func:`reach_delta`.
    """
    import pandas as pd

    delta = reach_delta(view.metric)

    hib, points = view.higher_is_better, view.points
    on_front = pareto_mask(points["frac"], points["quality"], hib)
    target = math.nan
    if view.dense is not None:
        target = view.dense["quality"] - delta if hib else view.dense["quality"] + delta
    ref_q = reference_quality(view.metric, hib)
    lines = []
    for curve, idx in points.groupby("curve", sort=False).groups.items():
        pts = points.loc[idx]
        c, q, v = pts["frac"].to_numpy(), pts["quality"].to_numpy(), pts["val_quality"].to_numpy()
        curve_front = on_front[points.index.get_indexer(idx)]
        line = {
            "method": curve, "knob": pts["knob_name"].iloc[0], "kind": pts["knob_kind"].iloc[0],
            "points": len(pts), "seeds": view.rows.loc[view.rows["curve"] == curve, "seed"].nunique(),
            "pareto": int(curve_front.sum()),
            # points on the front in at least 95% of the bootstrap resamples (None: no draws)
            "pareto_sure": (int((curve_front & (pts["front_share"] >= FRONT_SURE)).sum())
                            if "front_share" in pts and pts["front_share"].notna().any() else None),
        }
        draws = [point_draws(view, keys) for keys in pts["keys"]] if "keys" in pts else []
        for budget in BUDGETS:
            line[f"q@{budget:.0%}"] = quality_at_budget(c, q, budget, hib, v)
            line[f"ci@{budget:.0%}"] = (math.nan, math.nan)
            if draws and all(d is not None for d in draws) and math.isfinite(line[f"q@{budget:.0%}"]):
                line[f"ci@{budget:.0%}"] = stats.interval(hull_draws(c, q, np.stack(draws), budget, hib, v))
        line["reach"] = cost_to_reach(c, q, target, hib, v)
        line["auc"] = normalized_auc(c, q, *view.common, hib, v) if view.common else math.nan
        line["chosen_on"] = "validation" if selection_quality(q, v) is not q else "test"
        line["hv"] = hypervolume(c, q, REFERENCE_COST, ref_q, hib)
        lines.append(line)
    return pd.DataFrame(lines)


def _num(x, spec: str = ".4f", suffix: str = "") -> str:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return NA
    return format(x, spec) + suffix if math.isfinite(x) else NA


def _with_ci(value, ci, spec: str = ".4f") -> str:
    """"0.8612 [0.8550, 0.8671]": a value and its 95% CI (the value alone where there is no CI)."""
    text = _num(value, spec)
    lo, hi = ci
    if text == NA or not (math.isfinite(lo) and math.isfinite(hi)):
        return text
    return f"{text} [{lo:{spec}}, {hi:{spec}}]"


def points_table(view: TaskView) -> tuple[list[str], list[list[str]]]:
    """One line per point (curve, knob value): cost, seed mean with its bootstrap 95% CI over test
    examples, the seed range, and the share of resamples in which the point is on the task's front."""
    header = ["method", "knob", "% dense", f"{view.metric} (seed mean) [95% CI]", "examples only [95% CI]", "seeds",
              "seed range", "on the front (share of resamples)"]
    table = []
    for r in view.points.to_dict("records"):
        spread = f"{r['q_min']:.4f} – {r['q_max']:.4f}" if r["n_seeds"] > 1 else NA
        share = r.get("front_share", math.nan)
        examples = view.unc.example_ci(r["keys"]) if view.unc is not None else (math.nan, math.nan)
        table.append([r["curve"], f"{r['knob_name']}={knob_label(r['knob_value'])}", _num(100 * r["frac"], ".1f", "%"),
                      _with_ci(r["quality"], (r.get("ci_lo", math.nan), r.get("ci_hi", math.nan))),
                      _with_ci(r["quality"], examples) if r["n_seeds"] >= stats.MIN_SEEDS else "(the same: "
                      f"{r['n_seeds']} seed{'s' if r['n_seeds'] > 1 else ''})",
                      str(r["n_seeds"]), spread, _num(100 * share, ".0f", "%")])
    return header, table


def summary_table(view: TaskView) -> tuple[list[str], list[list[str]]]:
    summary = summarize(view)
    header = ["method", "knob", "kind", "#points", "#seeds", "Pareto-optimal"]
    header += [f"{view.metric} @ {b:.0%} dense" for b in BUDGETS]
    header += [f"cost to reach dense {'−' if view.higher_is_better else '+'} δ", "normalized AUC", "hypervolume",
               "hull chosen on"]
    table = []
    for s in summary.to_dict("records"):
        sure = s.get("pareto_sure")
        flag = (f"yes ({s['pareto']}/{s['points']}" + (f"; {sure} in ≥ {FRONT_SURE:.0%} of resamples" if sure is not None
                                                        else "") + ")") if s["pareto"] else "no"
        table.append([s["method"], s["knob"], s["kind"], str(s["points"]), str(s["seeds"]), flag]
                     + [_with_ci(s[f"q@{b:.0%}"], s[f"ci@{b:.0%}"]) for b in BUDGETS]
                     + [_num(100 * s["reach"], ".1f", "%"), _num(s["auc"]), _num(s["hv"]), s["chosen_on"]])
    return header, table


def rows_table(view: TaskView) -> tuple[list[str], list[list[str]]]:
    unit, scale = macs_unit(view.macs_dense)
    header = ["method", "knob", f"{view.metric} [95% CI]", f"mean {unit}", "% dense", f"p10/p50/p90 {unit}",
              "latency b1 ms", "throughput/s", "latency b1 ×dense", "throughput ×dense", "threads", "timing load",
              "params", "seed", "variant", "git sha", "config hash"]
    table = []
    rows = view.rows.assign(_cost=view.rows["macs_mean"], _load=load_class(view.rows),
                            _frac=row_fractions(view.rows, view.macs_dense))
    # one knob value's seeds together, the knob values in order of their mean cost
    rows = rows.assign(_knob=rows["knob_value"].astype(str))
    rows = rows.assign(_point_cost=rows.groupby(["curve", "_knob"])["_cost"].transform("mean"))
    rows = rows.sort_values(["curve", "_point_cost", "_knob", "seed"], kind="stable")
    unc = view.unc
    for r in rows.to_dict("records"):
        # "*": tracked code differed from the commit; "?": git could not tell (an empty git_dirty)
        sha = str(r["git_sha"])[:7] + {"True": "*", "False": ""}.get(str(r["git_dirty"]), "?")
        key = r.get("row_key")
        ci = (unc.low.get(key, math.nan), unc.high.get(key, math.nan)) if unc is not None else (math.nan, math.nan)
        load = r["_load"] if r["_load"] != "loaded" else f"LOADED ({_load_reading(r)})"
        table.append([
            r["curve"], f"{r['knob_name']}={knob_label(r['knob_value'])}", _with_ci(r["quality"], ci),
            _num(r["macs_mean"] / scale, ".4g"), _num(100 * r["_frac"], ".1f", "%"),
            "/".join(_num(r[k] / scale, ".4g") for k in ("macs_p10", "macs_p50", "macs_p90")),
            _num(r["latency_b1_ms"], ".3g"), _num(r["throughput_per_s"], ".4g"),
            _num(r.get("latency_b1_ratio"), ".3g"), _num(r.get("throughput_ratio"), ".3g"),
            str(r["timing_threads"]), load, _num(r["params"], ",.0f"),
            str(r["seed"]), str(r["variant"]) if r["variant"] == r["variant"] else "", sha,
            str(r["config_hash"])[:10],
        ])
    return header, table


def _load_reading(row: dict) -> str:
    """What made a row's timing loaded: the CPUs other processes kept busy while it ran, or (rows before
    schema 8) the 1-minute load average against the CPU count (:func:`bench.report.views.load_class`)."""
    other = _number(row.get("timing_other_cpus"))
    if math.isfinite(other):
        return f"others kept {other:.2f} CPUs busy"
    return f"{float(row['timing_load_avg']):.1f} on {int(row['timing_cpus'])} CPUs"
