"""The re-run campaign (scripts/campaign.py): every planned command is a valid `bench run` command line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from bench import config

ROOT = Path(__file__).resolve().parents[1]


def _campaign():
    spec = importlib.util.spec_from_file_location("campaign", ROOT / "scripts" / "campaign.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["campaign"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_every_planned_command_composes_and_passes_the_checks():
    campaign = _campaign()
    todo = campaign.commands(seeds=(0,), settled=campaign.TASK_ORDER)
    assert len(todo) == sum(len(points) for points in campaign.PLAN.values()) + len(campaign.CALIBRATION)
    for command in todo:
        assert command[:4] == ["python", "-m", "bench", "run"]
        assert config.validate(command[4:]) == 1, command  # one job each: no accidental sweep


def test_seed_major_order_and_one_seed_points():
    campaign = _campaign()
    order = campaign.planned(seeds=(0, 1, 2), settled=campaign.TASK_ORDER)
    calibration = order[:len(campaign.CALIBRATION)]
    assert [p for _, p in calibration] == campaign.CALIBRATION and {s for s, _ in calibration} == {0}
    order = order[len(campaign.CALIBRATION):]
    seeds = [seed for seed, _ in order]
    assert seeds == sorted(seeds)  # every point's seed 0 runs before any seed 1
    assert campaign.ONE_SEED and all(any(p == q for plan in campaign.PLAN.values() for q in plan)
                                     for p in campaign.ONE_SEED)  # ONE_SEED names planned points
    for seed, point in order:
        assert seed == 0 or point not in campaign.ONE_SEED
    per_point = {point: [s for s, p in order if p == point] for _, point in order}
    assert all(s == [0, 1, 2] for p, s in per_point.items() if p not in campaign.ONE_SEED)


def test_unsettled_tasks_run_only_their_calibration():
    campaign = _campaign()
    order = campaign.planned(settled=("parity",))
    assert {p.task for _, p in order if p not in campaign.CALIBRATION} == {"parity"}
    assert all("results_dir=results/curves" in p.overrides for p in campaign.CALIBRATION)


def test_status_finds_a_commands_rows_and_estimates_its_other_seeds(tmp_path):
    """--status counts a command as done exactly when `bench run` would skip it (a row of its config hash
    at its seed), and estimates the seeds still to run from that point's measured training time."""
    from bench import results, runner
    from tests.helpers import compose_tiny, tiny_overrides

    campaign = _campaign()
    overrides = tuple(o for o in tiny_overrides("dense", "parity", tmp_path, "timing=false")
                      if not o.startswith("task="))
    point = campaign.Point("parity", overrides)
    cfg = compose_tiny("dense", "parity", tmp_path, "timing=false", "threads=2", "seed=0")
    runner.run(cfg, "dense", "parity", "test")
    written = sorted(p.name for p in (tmp_path / "results" / "parity" / "dense").glob("*.csv"))
    assert [p.name for p in campaign.row_files(0, point)] == written and written
    assert campaign.row_files(1, point) == []
    other = campaign.Point("parity", (*overrides, "dense.depth=2"))  # another config: not done
    assert campaign.row_files(0, other) == []
    seconds = float(results.load(tmp_path / "results")["train_time_s"].iloc[0])
    seed0, seed1 = campaign.progress([(0, point), (1, point), (0, other)])
    assert (seed0.seed, seed0.commands, seed0.done, seed0.left_unmeasured) == (0, 2, 1, 1)
    assert seed0.done_s == seconds > 0 and seed0.left_estimate_s == 0
    assert (seed1.seed, seed1.commands, seed1.done, seed1.left_unmeasured) == (1, 1, 0, 0)
    assert seed1.left_estimate_s == seconds  # seed 1 of the point is estimated by seed 0's training
    lines = campaign.status([(0, point), (1, point), (0, other)])
    assert lines[0].startswith("parity seed 0: 1/2 commands have rows") and lines[-1].startswith("total: 1/3")
