"""The campaign's estimate of a command's training time from measured training throughput: the stages the
command still has to train on this machine (its plan, as ``bench run`` prints it), each at the optimizer
steps per second ``scripts/train_throughput.py`` measured for that stage at the command's thread count
(``results/throughput``).

A stage with no measurement of its own takes the slowest measured stage of the same method and kind (the
stage name up to its first "-": ``e2e-b0.4`` is timed by ``e2e-b0.6``), so the estimate errs long; a
stage with neither takes the step time of the task's dense base (the median of its quiet rows in
``results/throughput``, else measured now as ``bench run``'s plan line does: a method's steps may cost more), and
the estimate says so.  The estimate counts training only (not the
evaluation and timing after it) and assumes one training on the machine at a time.  The rates are those of
one-process fp32 trainings: a ``--nproc`` command's estimate errs long or short by its ranks' speed-up.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from campaign_plan import RUN, Point, command, is_base

ROOT = Path(__file__).resolve().parent.parent
THROUGHPUT = ROOT / "results" / "throughput"

Rates = dict[tuple[str, str, int], float]  # (task, "<method>:<stage>", threads) -> steps/s (bench.throughput)
MARGIN = 1.05  # fewer training threads than CPUs only where they train at least this much faster


def fastest_threads(rates: Rates, task: str, usable: int) -> int:
    """The thread count ``task``'s dense base trains on: the fastest measured one up to ``usable`` where it is
    at least :data:`MARGIN` times faster than ``usable`` threads, else ``usable`` (also when ``usable`` was not
    measured: nothing says fewer threads pay)."""
    measured = {th: v for (t, s, th), v in rates.items() if t == task and s == "dense:base" and th <= usable}
    if usable not in measured:
        return usable
    best = max(measured, key=lambda th: (measured[th], th))
    return best if measured[best] >= MARGIN * measured[usable] else usable


@dataclass
class Estimate:
    seconds: float  # training seconds left
    to_train: list[tuple[str, int]]  # ("<method>:<stage>", steps) still to train here
    at_base_rate: list[str]  # the stages of to_train timed at the dense base's step time (no measured rate)
    stage_seconds: list[float]  # per stage of to_train

    def without_base(self) -> "Estimate":
        """The estimate once another command has trained the dense base (commands of one seed share it)."""
        keep = [i for i, (stage, _) in enumerate(self.to_train) if stage != "dense:base"]
        return Estimate(sum(self.stage_seconds[i] for i in keep), [self.to_train[i] for i in keep],
                        [s for s in self.at_base_rate if s != "dense:base"], [self.stage_seconds[i] for i in keep])


def build_command(seed: int, point: Point, run_settings: tuple[str, ...] = tuple(RUN)):
    """(run context, task, method, method name) of a command of ``point`` at ``seed``, as ``bench run`` would
    build them here (this checkout's cache; nothing is loaded or trained)."""
    from bench import config, runner

    cfg = config.compose(command(seed, point, run_settings)[4:])
    cfg.cache_dir = str(ROOT / str(cfg.cache_dir))
    method_name, task_name = config.selected(cfg)
    return (*runner.build(cfg, method_name, task_name), method_name)


def stages_to_train(seed: int, point: Point, threads: int) -> list[tuple[str, int]]:
    """("<method>:<stage>", steps) of every stage a command of ``point`` would train on this machine (the
    dense base, where it is neither cached nor shipped, as :func:`command_stages` places it): the steps still
    to train, so a stage that resumes from a checkpoint (the cache's own or a shipped one) counts from the
    step it resumes at."""
    method_name, stages = command_stages(seed, point, threads)
    return [("dense:base" if s.base else f"{method_name}:{s.name}", s.steps_left)
            for s in stages if s.state.startswith("to train")]


def command_stages(seed: int, point: Point, threads: int) -> tuple[str, list]:
    """The method's name and :func:`bench.protocol.plan_status` of a command of ``point`` at ``seed``: its
    stages, with the dense base first where it starts from it, or last where it loads the base only to time
    or count against it (:func:`bench.runner.loads_dense_base`)."""
    from bench import protocol, runner

    run, task, method, method_name = build_command(seed, point, (f"threads={threads}",))
    return method_name, protocol.plan_status(method, protocol.plan(method), runner.loads_dense_base(task, run.cfg))


def stage_checkpoints(seed: int, point: Point) -> list[Path]:
    """The checkpoints in this checkout's cache of every stage a command of ``point`` at ``seed`` trains or
    loads (:func:`command_stages`; they may not exist yet).  A stage's key does not depend on the thread count."""
    return [stage.path for stage in command_stages(seed, point, 1)[1]]


def share_left(seed: int, point: Point, threads: int) -> float:
    """The share of its training a command has left when one of its stages resumes part-way (from the
    cache's checkpoint or a shipped one), else 1.0: the steps left over the steps of the stages it trains
    here.  A stage cached or shipped finished (e.g. one another command shared) counts in neither: exact
    where the recorded time did not train it either, long where it did.  A method's stages only: the dense
    base counts only for the base's own command (:func:`campaign_plan.is_base`)."""
    _, status = command_stages(seed, point, threads)
    stages = [s for s in status if s.state.startswith("to train") and (not s.base or is_base(point))]
    if not any(s.done > 0 for s in stages):  # a checkpoint may hold the last step (saved before a pause)
        return 1.0
    return sum(s.steps_left for s in stages) / sum(s.steps for s in stages)


def estimate(seed: int, point: Point, threads: int, rates: Rates, base_step_s) -> Estimate:
    """A command's training seconds left on this machine from measured throughput; ``base_step_s(task,
    threads)`` gives the dense base's seconds per step for stages without a measured rate."""
    from bench import throughput

    todo = stages_to_train(seed, point, threads)
    per_stage, at_base = [], []
    for stage, steps in todo:
        rate = throughput.stage_rate(rates, point.task, stage, threads)
        if rate is None:
            at_base.append(stage)
            per_stage.append(steps * base_step_s(point.task, threads))
        else:
            per_stage.append(steps / rate)
    return Estimate(sum(per_stage), todo, at_base, per_stage)


def recorded_base_step_s(rates: Rates, live=None):
    """A ``base_step_s`` from the dense base's quiet recorded rates (:func:`bench.throughput.quiet_base_rates`);
    a (task, threads) without one is measured now (``live``, by default :func:`live_base_step_s`), which on a
    busy machine takes minutes and slows the training it shares the CPUs with."""
    live = live or live_base_step_s()

    def step_s(task: str, threads: int) -> float:
        rate = rates.get((task, "dense:base", threads))
        return 1.0 / rate if rate else live(task, threads)

    return step_s


def live_base_step_s(warn=lambda line: print(line, file=sys.stderr, flush=True)):
    """A ``base_step_s`` that measures each (task, threads) once, now (``bench.runner.base_step_s``, at the
    task's base batch size).  A measurement that shared the CPUs with other work (the 1-minute load plus its
    threads above the CPU count) is ``warn``-ed in one line: it errs long, as do the estimates built on it."""
    measured: dict[tuple[str, int], float] = {}

    def step_s(task: str, threads: int) -> float:
        if (task, threads) not in measured:
            from bench import config, runner
            from bench.run import cpu_threads

            cfg = config.compose(["method=dense", f"task={task}", f"threads={threads}"])
            _, built, _ = runner.build(cfg, "dense", task)
            load = os.getloadavg()[0]
            with cpu_threads(threads):  # measured as the command will train, the caller's count kept
                measured[(task, threads)] = runner.base_step_s(built, int(built.base_budget()["batch_size"]), "cpu")
            cpus = os.cpu_count() or 1
            if load + threads > cpus + 0.5:
                warn(f"[campaign] {task}'s dense base step ({measured[(task, threads)] * 1000:.0f} ms on {threads} "
                     f"thread(s)) was measured now at a 1-minute load of {load:.2f} on {cpus} CPUs: the estimates "
                     "at the dense base's step time err long while other work runs (ask again on a quiet machine)")
        return measured[(task, threads)]

    return step_s
