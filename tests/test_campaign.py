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
