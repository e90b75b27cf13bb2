"""A method written only as stages gets the core's protocol: budget, data order, per-step seeds, caching,
exact resume and rows (bench/protocol.py)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from bench import protocol, registry, runner
from bench.protocol import Policy, Stage, allocate, step_seed

TASK = ("parity", ("parity.variant=sequence",))


@pytest.fixture(scope="module", autouse=True)
def plugin():
    registry.load_plugin("tests.stage_plugin")


def _build(tmp, *extra):
    from tests.helpers import compose_tiny

    cfg = compose_tiny("headtune", TASK[0], tmp, *TASK[1], *extra)
    return cfg, *runner.build(cfg, "headtune", TASK[0])


def _recording(task):
    """Wrap ``task.train_batch`` so the test sees which global steps were drawn."""
    seen: list[int] = []
    original = task.train_batch

    def train_batch(step, size):
        seen.append(step)
        return original(step, size)

    task.train_batch = train_batch
    return seen


def test_budget_data_order_caching_and_resume(tmp_path):
    cfg, run, task, method = _build(tmp_path / "a")
    seen = _recording(task)
    model = protocol.train(method)
    base_steps, budget = int(task.base_budget()["steps"]), task.method_budget()
    # the base model trains on steps 0..base-1, the method's stage continues after them
    assert seen == list(range(base_steps)) + list(range(base_steps, base_steps + budget))
    assert method.train_budget() == (f"head {budget} steps x batch {task.base_budget()['batch_size']} on top of "
                                     f"the dense base model (method budget {budget} steps)")
    cached = sorted(str(p.relative_to(tmp_path / "a" / "cache" / "parity")).split("-")[0]
                    for p in (tmp_path / "a" / "cache" / "parity").rglob("*.pt"))
    assert cached == ["dense/w1.0", "headtune/head"]  # the stage is cached under the registered method name

    # a second build loads both artifacts from the cache: nothing is drawn, nothing trains
    _, _, task2, method2 = _build(tmp_path / "a")
    seen2 = _recording(task2)
    again = protocol.train(method2)
    assert seen2 == []
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)

    # interrupted every 2 steps (base and stage) and resumed until done: the same weights, bit for bit,
    # although the loss draws noise at every step (the core seeds it from (seed, stage, step))
    _, run3, _, method3 = _build(tmp_path / "b")
    run3.fit_extra = {"stop_after": 2}
    interruptions = 0
    while True:
        try:
            resumed = protocol.train(method3)
            break
        except KeyboardInterrupt:
            interruptions += 1
    assert interruptions >= 2
    for (name, a), b in zip(model.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def test_a_stages_only_method_writes_rows(tmp_path):
    cfg, *_ = _build(tmp_path, "timing=false")
    written = runner.run(cfg, "headtune", TASK[0], command="test")
    assert len(written) == 1
    row = pd.read_csv(written[0]).iloc[0]
    assert row["method"] == "headtune" and "head " in row["train_budget"]
    assert 0.0 <= row["quality"] <= 1.0


def test_allocation_seeds_and_policy():
    noop = lambda m, b, c: None  # noqa: E731
    stages = [Stage("a", noop, lr=1.0, share=2, min_steps=5), Stage("b", noop, lr=1.0, share=1),
              Stage("c", noop, lr=1.0, share=97)]
    assert allocate(stages, 60) == [5, 1, 54]  # the floor raises a; c takes the rest
    assert allocate(stages, 2345) == [47, 23, 2275]
    assert sum(allocate(stages, 1000)) == 1000
    skipped = [Stage("a", noop, lr=1.0, share=0.8, skip=True), Stage("b", noop, lr=1.0, share=0.2)]
    assert allocate(skipped, 10) == [0, 10]
    heads_ensembles = [Stage("h", noop, lr=1.0, share=0.95), Stage("e", noop, lr=1.0, share=0.05)]
    assert allocate(heads_ensembles, 10) == [9, 1]  # round(9.5) = 10 would leave the ensembles nothing
    assert step_seed(0, "a", 1) == step_seed(0, "a", 1) != step_seed(0, "a", 2) != step_seed(0, "b", 1)
    assert Policy(warmup=0.05).warmup_steps(100) == 5 and Policy(warmup=0.05).warmup_steps(3) == 1
    assert Policy(warmup=200).warmup_steps(1000) == 200
    assert Policy(warmup=200, warmup_cap=0.1).warmup_steps(1876) == 187  # a short stage: 10% of it, rounded down
    assert Policy(warmup=200, warmup_cap=0.1).warmup_steps(5000) == 200
    assert Policy().warmup_steps(100) == 0


def test_every_registered_method_declares_its_protocol(tmp_path):
    """Every built-in method is stages + a start: none trains itself (the core's protocol.train does; a method
    has no build or train of its own), and its plan's steps add up to its budget."""
    from bench.api import Method
    from tests.helpers import compose_tiny, matrix_cases

    done = set()
    for name, task, variant in matrix_cases():
        if name in done or name == "headtune":
            continue
        done.add(name)
        impl = registry.load_impl(registry.method_spec(name).impl)
        assert not hasattr(impl, "build") and not hasattr(impl, "train"), f"{name} trains itself: the core owns training"
        assert issubclass(impl, Method)
        cfg = compose_tiny(name, task, tmp_path, *variant)
        _, task_impl, method = runner.build(cfg, name, task)
        plan = protocol.plan(method)
        if plan.stages:
            expected = task_impl.method_budget() if plan.starts_from == "base" else int(task_impl.base_budget()["steps"])
            assert sum(p.steps for p in plan.stages) == expected, name
            offsets = [p.offset for p in plan.stages if p.steps]
            first = int(task_impl.base_budget()["steps"]) if plan.starts_from == "base" else 0
            assert offsets[0] == first, name
    assert {"acm", "moefication", "avit", "early_exit", "dat", "cct", "adatape", "act", "dense"} <= done


def test_a_rows_training_time_is_its_models_stages_not_the_timing_reference(tmp_path):
    """A static size's run loads the dense base as its timing reference; its row's ``train_time_s`` is its
    own stage's time (the checkpoint's), not that plus the base's."""
    from helpers import compose_tiny

    from bench import checkpoints

    base_rows = runner.run(compose_tiny("dense", "parity", tmp_path), "dense", "parity", command="test")
    static_rows = runner.run(compose_tiny("dense", "parity", tmp_path, "dense.width=0.5"), "dense", "parity",
                             command="test")
    stage_time = {path.name.split("-")[0]: checkpoints.read(path, checkpoints.FINAL_KEYS)["time_s"]
                  for path in (tmp_path / "cache" / "parity" / "dense").glob("*.pt")}
    assert set(stage_time) == {"w1.0", "w0.5"}
    base, static = (pd.read_csv(rows[0]).iloc[0]["train_time_s"] for rows in (base_rows, static_rows))
    assert base == pytest.approx(stage_time["w1.0"]) and static == pytest.approx(stage_time["w0.5"])
