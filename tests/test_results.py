"""Result rows: schema round-trip, atomic writes under two concurrent writers, nothing half-written."""

import multiprocessing as mp
from pathlib import Path

import pandas as pd
import pytest
from helpers import blank_row

from bench import results


def make_row(i: int, method: str = "dense") -> results.ResultRow:
    return blank_row(method=method, task="parity", knob_value=str(i), quality=i / 100, seed=0, macs_mean=float(i))


def _writer(args):
    root, writer, count = args
    for i in range(count):
        results.append(root, make_row(i, method=f"m{writer % 2}"), f"w{writer}-{i}",
                       samples=pd.DataFrame({"macs": [float(i)] * 50, "score": [1.0] * 50}))


def test_roundtrip(tmp_path):
    path = results.append(tmp_path, make_row(3), "row3", samples=pd.DataFrame({"macs": [1.0, 2.0]}))
    assert path.exists() and path.with_name("row3.samples.csv.gz").exists()
    frame = results.load(tmp_path)
    assert list(frame.columns) == results.COLUMNS + ["row_file"]  # row_file: where each row was read from
    assert frame.loc[0, "knob_value"] == "3" and frame.loc[0, "quality"] == pytest.approx(0.03)
    assert list(results.load_samples(tmp_path, "parity", "dense", "row3")["macs"]) == [1.0, 2.0]


def test_two_concurrent_writers_lose_nothing(tmp_path):
    pool = mp.get_context("spawn").Pool(2)
    try:
        pool.map(_writer, [(tmp_path, 0, 40), (tmp_path, 1, 40)])
    finally:
        pool.close()  # the workers end on their own (terminate() needs SIGTERM to reach them)
        pool.join()
    frame = results.load(tmp_path)
    assert len(frame) == 80
    assert not list(Path(tmp_path).rglob("*.tmp")), "temporary files left behind"


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", boom)
    with pytest.raises(KeyboardInterrupt):
        results.append(tmp_path, make_row(1), "row1")
    assert not [p for p in Path(tmp_path).rglob("*") if p.is_file()]


def test_load_empty_has_schema(tmp_path):
    assert list(results.load(tmp_path).columns) == results.COLUMNS + ["row_file"]


def test_the_console_timing_line_says_when_the_ratios_are_noise():
    from bench.runner import timing_text
    from bench.timing import Timing

    quiet = Timing(1.0, 0.1, 100.0, 32, latency_b1_ratio=0.8, throughput_ratio=1.2, rounds=3)
    assert timing_text(quiet, 0.5, 2) == "batch-1 latency 0.80x dense, throughput 1.20x dense"
    loaded = timing_text(quiet, 3.9, 2)
    assert loaded.endswith("(NOISY: timed at load 3.9 on 2 CPUs; re-time on a quiet machine before reading it)")
    wide = Timing(1.0, 0.77, 100.0, 32, latency_b1_ratio=0.23, throughput_ratio=1.0, rounds=3)
    assert "latency IQR 77% of its median" in timing_text(wide, 0.5, 2)
    # measured, the CPUs other processes kept busy decide, not the lagging load average
    assert timing_text(quiet, 3.9, 2, other_cpus=0.05) == "batch-1 latency 0.80x dense, throughput 1.20x dense"
    assert "(NOISY: other processes kept 0.96 CPUs busy while it was timed;" in timing_text(quiet, 0.5, 2, 0.96)


def test_the_cpus_other_processes_keep_busy_are_measured_without_the_runs_own(monkeypatch):
    """OtherCpus: the machine's busy CPU seconds less this process's, over the wall time (fake clock and CPU
    times); a process spinning beside the run counts about one CPU, the run's own spinning none."""
    import subprocess
    import sys
    import time

    from bench import timing

    import math
    from collections import namedtuple

    import psutil

    cpu = namedtuple("cpu", "user nice system idle iowait irq softirq steal guest guest_nice")
    own = namedtuple("own", "user system")
    ticks = iter([(10.0, [cpu(50, 0, 5, 90, 1, 0, 0, 0, 7, 0), cpu(40, 1, 4, 80, 0, 0, 0, 0, 0, 0)], own(4, 1)),
                  # CPU 0: +2.5 busy s (+1 of it a guest's, inside user: not counted twice); CPU 1: +1.5, 0.5 stolen
                  (12.0, [cpu(52.5, 0, 5, 91, 1, 0, 0, 0, 8, 0), cpu(41, 1, 4, 81, 0, 0, 0, 0.5, 0, 0)], own(5, 1.5))])
    clock = {}

    def cpu_times(percpu):
        clock["t"], per_cpu, clock["own"] = next(ticks)
        return per_cpu

    monkeypatch.setattr(psutil, "cpu_times", cpu_times)
    monkeypatch.setattr(psutil, "Process", lambda: type("P", (), {"cpu_times": lambda self: clock["own"]})())
    monkeypatch.setattr(timing.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(timing.os, "sched_getaffinity", lambda pid: {0, 1})
    assert timing.OtherCpus().stop() == pytest.approx((2.5 + 1.5 - 1.5) / 2)  # 4 busy s, 1.5 the run's, in 2 s
    ticks = iter([(10.0, [cpu(50, 0, 5, 90, 1, 0, 0, 0, 7, 0), cpu(40, 1, 4, 80, 0, 0, 0, 0, 0, 0)], own(4, 1)),
                  (12.0, [cpu(52.5, 0, 5, 91, 1, 0, 0, 0, 8, 0), cpu(41, 1, 4, 81, 0, 0, 0, 0.5, 0, 0)], own(5, 1.5))])
    monkeypatch.setattr(timing.os, "sched_getaffinity", lambda pid: {1})  # kept off CPU 0 (taskset)
    assert timing.OtherCpus().stop() == pytest.approx(0.0)  # CPU 1's 1.5 busy s are all but the run's own
    kids = namedtuple("kids", "user system children_user children_system")
    ticks = iter([(10.0, [cpu(50, 0, 5, 90, 1, 0, 0, 0, 7, 0), cpu(40, 1, 4, 80, 0, 0, 0, 0, 0, 0)], kids(4, 1, 2, 0)),
                  (12.0, [cpu(52.5, 0, 5, 91, 1, 0, 0, 0, 8, 0), cpu(41, 1, 4, 81, 0, 0, 0, 0.5, 0, 0)],
                   kids(5, 1.5, 2.8, 0.2))])  # + 1 s of its children that ended (a corpus tool, data workers)
    monkeypatch.setattr(timing.os, "sched_getaffinity", lambda pid: {0, 1})
    assert timing.OtherCpus(children_own=True).stop() == pytest.approx((4 - 1.5 - 1) / 2)
    monkeypatch.setattr(timing, "_cpu_sample", lambda children_own=False: None)  # psutil cannot read them
    assert math.isnan(timing.OtherCpus().stop())
    monkeypatch.undo()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # (its start-up)
        others = timing.OtherCpus()
        time.sleep(1.0)
        assert others.stop() > 0.6
    finally:
        spinner.kill()
        spinner.wait()


def test_the_report_tells_loaded_from_quiet_by_the_other_cpus_where_rows_have_them():
    import pandas as pd

    from bench.report.views import load_class

    rows = pd.DataFrame({"timing_load_avg": [2.4, 0.5, 2.4, float("nan")], "timing_cpus": [2, 2, 2, 0],
                         "timing_other_cpus": [0.04, 0.9, float("nan"), float("nan")]})
    assert load_class(rows) == ["quiet", "loaded", "loaded", "load unknown"]
    assert load_class(rows.drop(columns="timing_other_cpus")) == ["loaded", "quiet", "loaded", "load unknown"]


def test_a_rows_training_time_is_its_own_stages_and_the_base_has_its_column(tmp_path):
    import math

    import pandas as pd
    import torch

    from bench import runner
    from tests.helpers import compose_tiny

    def stage_seconds(folder):
        return sum(torch.load(p, weights_only=False)["time_s"] for p in folder.glob("*.pt")
                   if ".partial" not in p.name)

    cfg = compose_tiny("acm", "parity", tmp_path, "timing=false", "parity.variant=sequence")
    [path] = runner.run(cfg, "acm", "parity", "test")
    row = pd.read_csv(path).iloc[0]
    cache = tmp_path / "cache" / "parity"
    assert row["base_train_time_s"] == pytest.approx(stage_seconds(cache / "dense"), rel=1e-6)
    assert row["train_time_s"] == pytest.approx(stage_seconds(cache / "acm"), rel=1e-6)
    [dense] = runner.run(compose_tiny("dense", "parity", tmp_path, "timing=false"), "dense", "parity", "test")
    dense_row = pd.read_csv(dense).iloc[0]  # the base's own row: its model is the base
    assert dense_row["train_time_s"] == pytest.approx(dense_row["base_train_time_s"]) and dense_row["train_time_s"] > 0
    [scratch] = runner.run(compose_tiny("act", "parity", tmp_path, "timing=false"), "act", "parity", "test")
    assert math.isnan(pd.read_csv(scratch).iloc[0]["base_train_time_s"])
