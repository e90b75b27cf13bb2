"""The training-throughput rows (``<results_dir>/throughput``, written by ``scripts/train_throughput.py``): the
optimizer steps per second of every task's dense base and every method's stages, per thread count, read for
the throughput page, the campaign's estimates and ``bench run``'s plan line."""

from __future__ import annotations

from pathlib import Path

DIR = "throughput"
BASE = "dense:base"  # the dense base's stage label in the rows; a method's stage is "<method>:<stage name>"

Rates = dict[tuple[str, str, int], float]  # (task, stage label, threads) -> optimizer steps per second


def read_rows(folder: Path):
    """Every throughput row in ``folder`` (``<results_dir>/throughput``), oldest first, in the current schema
    (rows written before the ``precision`` column trained in fp32, before ``processes`` on one process); None
    when there are none."""
    import pandas as pd

    files = sorted(Path(folder).glob("*.csv"))
    if not files:
        return None
    rows = pd.concat([pd.read_csv(f) for f in files], ignore_index=True).sort_values("timestamp")
    return rows.assign(precision=rows.reindex(columns=["precision"])["precision"].astype(object).fillna("fp32"),
                       processes=rows.reindex(columns=["processes"])["processes"].fillna(1).astype(int))


def one_process_fp32(rows):
    """The rows of trainings as a run trains on the CPU by default, fp32 in one process, that measured a rate
    (a stage whose longer training took no longer than its shorter one has none: NaN)."""
    return rows[(rows["precision"] == "fp32") & (rows["processes"] == 1) & (rows["steps_per_s"] > 0)]


def measured_rates(folder: Path) -> Rates:
    """The latest measured steps per second of every (task, stage, threads) in the rows of ``folder``, of
    one-process fp32 trainings (:func:`one_process_fp32`)."""
    return rates(folder)[0]


def rates(folder: Path) -> tuple[Rates, Rates]:
    """The rows of ``folder`` read once: (:func:`measured_rates`, :func:`quiet_base_rates`)."""
    rows = read_rows(folder)
    if rows is None:
        return {}, {}
    rows = one_process_fp32(rows)
    latest = rows.groupby(["task", "stage", "threads"]).tail(1)
    quiet = rows[(rows["stage"] == BASE) & is_quiet(rows)]
    medians = quiet.groupby(["task", "threads"])["steps_per_s"].median()
    return ({(str(r.task), str(r.stage), int(r.threads)): float(r.steps_per_s) for r in latest.itertuples()},
            {(str(task), BASE, int(threads)): float(v) for (task, threads), v in medians.items()})


def stage_rate(rates: Rates, task: str, stage: str, threads: int) -> float | None:
    """Steps per second of ``stage`` ("<method>:<name>"): its own measurement, else the slowest measured stage
    of the same method and kind (the name up to its first "-": ``e2e-b0.4`` is timed by ``e2e-b0.6``), else
    None."""
    if (task, stage, threads) in rates:
        return rates[(task, stage, threads)]
    kind = stage.split("-")[0]
    near = [v for (t, s, th), v in rates.items() if t == task and th == threads and s.split("-")[0] == kind]
    return min(near) if near else None


def is_quiet(rows):
    """Per row, whether it was measured on a quiet machine: a one-process row holding ``other_cpus`` when other
    processes kept at most :data:`bench.results.BUSY_OTHER_CPUS` CPUs busy on average during its trainings;
    any other row (a data-parallel one, whose other ranks count as other processes, or one written before the
    column) when the 1-minute load average before and after was at most the CPU count."""
    from bench.results import BUSY_OTHER_CPUS

    load = rows.reindex(columns=["load_before", "load_after", "cpus", "other_cpus"]).astype(float)  # NaN: none
    others = load["other_cpus"]
    by_load = (load["load_before"] <= load["cpus"]) & (load["load_after"] <= load["cpus"])
    measured = others.notna() & (rows["processes"] == 1)
    return (measured & (others <= BUSY_OTHER_CPUS)) | (~measured & by_load)


def quiet_base_rates(folder: Path) -> Rates:
    """The median steps per second of every task's dense base per thread count, over the one-process fp32 rows
    measured quietly (:func:`is_quiet`): the base trains in every method's throughput run, so there are many."""
    return rates(folder)[1]


def cost_relative_to_base(rates: Rates, base_rates: Rates, task: str, stage: str, threads: int) -> float | None:
    """How many dense-base steps one step of ``stage`` costs, from rates measured on one machine: the base's
    quiet median (``base_rates``, :func:`quiet_base_rates`) over the stage's (:func:`stage_rate` of ``rates``,
    :func:`measured_rates`); None where either was not measured at ``threads``."""
    base = base_rates.get((task, BASE, threads))
    rate = stage_rate(rates, task, stage, threads)
    return base / rate if base and rate else None
