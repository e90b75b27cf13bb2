"""scripts/train_throughput.py: a stage's rate comes from two trainings of the plan (N1 and N2 steps per
stage), rows record the load and the tree, and the page is drawn from the rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import load_script


def test_rates_per_stage_rows_and_page(tmp_path):
    tp = load_script("train_throughput")
    results_dir, reports_dir = tmp_path / "results", tmp_path / "reports"
    assert tp.main(["--task", "parity", "--methods", "dense,act", "--threads", "1", "--steps", "5,45",
                    "--precision", "fp32,bf16", "--results-dir", str(results_dir),
                    "--reports-dir", str(reports_dir)]) == 0
    rows = pd.concat([pd.read_csv(f) for f in sorted((results_dir / "throughput").glob("*.csv"))])
    assert set(rows["stage"]) == {"dense:base", "act:tau0.001"}  # ACT trains from scratch: no base stage of its own
    assert sorted(rows.groupby("stage")["precision"].apply(sorted).iloc[0]) == ["bf16", "fp32"]
    assert (rows["steps_timed"] == 40).all() and (rows["steps_per_s"] > 0).all()
    assert list(rows["samples_per_s"]) == pytest.approx(list(rows["steps_per_s"] * rows["batch"]), rel=1e-3)
    assert rows["cpus"].gt(0).all() and rows["load_before"].notna().all() and rows["git_sha"].notna().all()
    assert rows["other_cpus"].ge(0).all()  # the CPUs other processes kept busy during the trainings
    page = (reports_dir / "throughput.md").read_text()
    assert (rows["dataset"].str.startswith("parity-vector n=32")).all()  # the data each stage trained on
    for precision in ("fp32", "bf16"):
        assert f"| parity (parity-vector n=32) | act:tau0.001 | 1 | 1 | {precision} | 128 |" in page
    assert "quiet (" in page or "loaded (" in page


def test_two_processes_time_their_global_steps_beside_one_process(tmp_path):
    """--processes 2 starts two data-parallel ranks (torchrun) that train each stage on halves of its batch: rank 0
    writes the rows (processes 2, the global batch), the page shows them beside one process's, and the rates
    that estimates read stay one process's."""
    tp = load_script("train_throughput")
    from bench import throughput

    results_dir, reports_dir = tmp_path / "results", tmp_path / "reports"
    common = ["--task", "parity", "--methods", "dense", "--threads", "1", "--steps", "5,45",
              "--results-dir", str(results_dir), "--reports-dir", str(reports_dir)]
    assert tp.main([*common, "--processes", "2"]) == 0
    two = throughput.read_rows(results_dir / "throughput")
    assert list(two["processes"]) == [2] and list(two["stage"]) == ["dense:base"] and two["steps_per_s"].gt(0).all()
    assert throughput.measured_rates(results_dir / "throughput") == {}  # no one-process row yet
    assert tp.main(common) == 0
    rows = throughput.read_rows(results_dir / "throughput")
    assert sorted(rows["processes"]) == [1, 2] and rows["batch"].nunique() == 1  # the same global batch
    assert throughput.measured_rates(results_dir / "throughput") == {
        ("parity", "dense:base", 1): float(rows.loc[rows["processes"] == 1, "steps_per_s"].iloc[0])}
    page = (reports_dir / "throughput.md").read_text()
    assert "| dense:base | 1 | 1 | fp32 |" in page and "| dense:base | 2 | 1 | fp32 |" in page
    with pytest.raises(SystemExit):
        tp.main([*common, "--processes", "0"])


def test_the_plan_line_costs_each_stage_relative_to_the_base_from_the_rows(tmp_path):
    """``bench run``'s estimate: a stage measured at half the base's steps/s costs two base steps a step; a
    stage of the same kind with other knobs takes the slowest measured one; an unmeasured stage costs one
    base step, and the plan line names it."""
    from bench import config, protocol, runner
    from tests.helpers import tiny_overrides

    cfg = config.compose(["method=acm", *[o for o in tiny_overrides("acm", "parity", tmp_path)
                                          if not o.startswith("method=")], "acm.min_distill_steps=2",
                          "acm.min_gate_steps=2", "train_threads=1"])
    _, task, method = runner.build(cfg, "acm", "parity")
    stages = [s for s in protocol.plan_status(method, protocol.plan(method)) if s.steps_left]
    folder = tmp_path / "rows"
    folder.mkdir()
    columns = ["task", "stage", "threads", "steps_per_s", "timestamp", "load_before", "load_after", "cpus"]
    rows = [("parity", "dense:base", 1, 40.0, "2026-01-01", 0.5, 0.5, 2), ("parity", "acm:distill", 1, 20.0,
            "2026-01-01", 0.5, 0.5, 2), ("parity", "acm:distill", 2, 1.0, "2026-01-01", 0.5, 0.5, 2),
            ("parity", "acm:gates", 1, float("nan"), "2026-01-02", 0.5, 0.5, 2)]  # no rate measured
    e2e = next(s.name for s in stages if s.name.startswith("e2e-"))
    rows += [("parity", f"acm:e2e-x{v}", 1, v, "2026-01-01", 0.5, 0.5, 2) for v in (5.0, 8.0)]  # its kind
    pd.DataFrame(rows, columns=columns).to_csv(folder / "a.csv", index=False)
    assert stages[0].base and "distill" in [s.name for s in stages] and len(stages) > 2
    total, unmeasured = runner.training_seconds(method, stages, 0.01, folder)
    cost = {"distill": 2.0, e2e: 8.0}  # (the two-thread distill row is another thread count; e2e: the slowest)
    assert total == pytest.approx(sum(s.steps_left * 0.01 * (1.0 if s.base else cost.get(s.name, 1.0))
                                      for s in stages))
    assert unmeasured == [s.name for s in stages[1:] if s.name not in cost]
    assert runner.training_seconds(method, stages, 0.01, tmp_path / "none") == (
        pytest.approx(0.01 * sum(s.steps_left for s in stages)), [s.name for s in stages[1:]])
    line = runner.plan_line(method, task, cfg)
    assert "a method's steps may cost more" in line and "ms per base-model step on 1 thread(s)" in line
    measured = Path(cfg.results_dir) / "throughput"
    measured.mkdir(parents=True)
    pd.DataFrame(rows + [("parity", f"acm:{s.name}", 1, 10.0, "2026-01-01", 0.5, 0.5, 2) for s in stages[1:]],
                 columns=columns).to_csv(measured / "a.csv", index=False)
    assert f"the method's steps at their cost relative to it in {cfg.results_dir}/throughput" in \
        runner.plan_line(method, task, cfg)


def test_the_plan_line_of_a_data_parallel_run_times_the_base_on_one_rank_s_shard(tmp_path, monkeypatch):
    """Under torchrun every rank trains on its shard of each step's batch, so the base step is timed at that
    shard's size (rounded up), and the line says how many processes share a step."""
    from bench import config, distributed, protocol, runner
    from tests.helpers import tiny_overrides

    cfg = config.compose([*tiny_overrides("dense", "parity", tmp_path), "train_threads=1"])
    _, task, method = runner.build(cfg, "dense", "parity")
    batch = protocol.plan(method).batch_size
    timed = []
    monkeypatch.setattr(runner, "base_step_s", lambda task, size, device: timed.append(size) or 0.01)
    assert "processes" not in runner.plan_line(method, task, cfg) and timed == [batch]
    monkeypatch.setattr(distributed, "world", lambda: 2)
    line = runner.plan_line(method, task, cfg)
    assert timed[1] == (batch + 1) // 2 and "on 1 thread(s) in each of 2 processes on a 1/2 shard of the batch" in line


def test_a_row_is_quiet_by_the_other_processes_cpus_where_it_holds_them_else_by_the_load_average():
    """One-process rows with ``other_cpus`` are judged by it (the load average lags behind a training that just
    ended); data-parallel rows, whose other ranks are other processes, and older rows by the load average."""
    from bench import throughput

    columns = ["load_before", "load_after", "cpus", "processes", "other_cpus"]
    rows = pd.DataFrame([(3.0, 1.0, 2, 1, 0.05),  # a lagging load average, nothing else running: quiet
                         (0.5, 0.5, 2, 1, 0.90),  # another training beside it: loaded
                         (0.5, 0.5, 2, 2, 1.00),  # its other rank: the load average decides
                         (0.5, 2.5, 2, 1, float("nan")),  # written before the column: the load average decides
                         (0.5, 0.5, 2, 1, float("nan"))], columns=columns)
    assert list(throughput.is_quiet(rows)) == [True, False, True, False, True]
    assert list(throughput.is_quiet(rows.drop(columns="other_cpus"))) == [False, True, True, False, True]
