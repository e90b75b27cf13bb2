"""The training protocol, owned by the core and the same for every method.

A method declares what it trains as :class:`Stage` objects (name, trainable parameters, loss on a batch,
share of the budget, optimiser policy); the core runs them here:

* **Start and budget.**  A method starts either from the task's dense base model (``starts_from =
  "base"``) or from scratch (``"scratch"``).  From the base, its stages share the *method budget*: the
  task's ``method_steps`` (tasks without that key: the base model's own step count) at the base model's
  batch size.  From scratch, a model is trained like the dense base itself: its stages share the base
  model's budget (``train_steps``).  There is no other meaning of a method budget.
* **Data order.**  Training batches come from ``task.train_batch(step)``, deterministic in (seed, step).
  A method that starts from the base continues the stream after the base model's steps (its first batch
  is ``base_steps``); a model trained from scratch starts at step 0, like the dense base.  Consecutive
  stages see consecutive data.
* **Scale**.  Every stage trains with the run's precision (autocast), gradient accumulation and
  data parallelism (DDP: each rank trains on its rows of the step's global batch, ``Task.train_shard``);
  nothing in a method changes.  Precision and accumulation enter the base model's key when not the
  defaults; the number of processes does not (the same global batches).  Under data parallelism each rank
  seeds its step's noise with its rank as well (below), so noisy stages (dropout, Gumbel noise, sampled
  budgets) match a single process in distribution, not bitwise; noise-free stages match it up to rounding.
* **Per-step randomness.**  Before every step the core seeds torch's global generator and a
  ``StepContext.generator`` from (seed, stage, step), so dropout, Gumbel noise and budget draws are the
  same whether or not a run was interrupted and resumed.
* **Optimiser policy.**  Adam (AdamW when weight decay > 0), a cosine schedule, gradient clipping at 1.0 and
  no warm-up (:data:`DEFAULT_POLICY`); a stage that needs anything else declares its own :class:`Policy`.
* **Cache keys** are chained: a stage's key hashes its parent artifact's key (the base model's, or the
  previous stage's), its declared config, its step count and optimiser policy, its data offset and the
  method's behaviour version (bench/versions.py).  Evaluation-only keys never enter a key, so changing one
  retrains nothing; a skeleton, trainer or task version bump changes the base model's key and so every key
  downstream.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal

import torch
from torch import Tensor, nn

from bench import artifacts, checkpoints, registry
from bench.api import Batch
from bench.errors import UserError
from bench.recipes import Recipe

if TYPE_CHECKING:
    from bench.api import Method, Task
    from bench.run import RunContext

StartsFrom = Literal["base", "scratch"]


@dataclass(frozen=True)
class Policy:
    """Optimiser policy of a stage: learning-rate warm-up, gradient clipping and weight decay.

    ``warmup`` < 1 is a fraction of the stage's steps (rounded, at least one step), >= 1 a number of steps;
    ``warmup_cap`` (optional, a fraction of the stage's steps, rounded down) bounds it.  The schedule after
    warm-up is always cosine to zero."""

    warmup: float = 0.0
    warmup_cap: float | None = None
    grad_clip: float | None = 1.0
    weight_decay: float = 0.0

    def warmup_steps(self, steps: int) -> int:
        if self.warmup <= 0:
            return 0
        n = max(1, round(self.warmup * steps)) if self.warmup < 1 else int(self.warmup)
        return min(n, int(steps * self.warmup_cap)) if self.warmup_cap is not None else n

    def describe(self) -> dict[str, Any]:
        return {"warmup": self.warmup, "warmup_cap": self.warmup_cap, "grad_clip": self.grad_clip,
                "weight_decay": self.weight_decay}


DEFAULT_POLICY = Policy()


@dataclass
class StepContext:
    """What a stage's loss may use besides the model and the batch: the step within the stage, the
    stage's length, and a generator seeded by (seed, stage, step)."""

    stage: str
    step: int
    steps: int
    generator: torch.Generator

    @property
    def progress(self) -> float:
        """0 at the first step, 1 at the last."""
        return self.step / max(1, self.steps - 1)


@dataclass
class PrepareContext:
    cached: bool  # the stage's checkpoint exists: its weights are loaded right after ``prepare``
    first_batch: Callable[[], Batch]  # the stage's first training batch (on the run's device)


@dataclass
class Stage:
    """One training stage of a method, declared as data.

    ``loss(model, batch, ctx)`` returns the scalar loss of one step.  ``params(model)`` selects what trains
    (default: every parameter that requires grad).  ``share`` is this stage's part of the budget (shares
    are normalised over the stages; the last stage takes what the others leave, so the steps add up to the
    budget); ``min_steps`` raises a stage's steps (taken from the last stage).  ``config`` holds what,
    besides the code, determines the trained result (it enters the cache key; never put evaluation-only
    keys here); the code is named by the method's ``version`` (bench/versions.py).  ``prepare(model, ctx)`` runs
    before the stage (e.g. a conversion between stages, an initialisation calibrated on data) with a
    :class:`PrepareContext`: whether the stage's checkpoint exists and is about to be loaded (expensive
    initialisation can then be skipped) and the stage's first training batch.
    ``finish(model)`` runs after it.  ``lr`` is the Adam learning rate; ``policy`` overrides
    :data:`DEFAULT_POLICY` (the override is declared here, never hidden in the loss)."""

    name: str
    loss: Callable[[nn.Module, Batch, StepContext], Tensor]
    lr: float
    share: float = 1.0
    min_steps: int = 0
    params: Callable[[nn.Module], Iterable[nn.Parameter]] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    policy: Policy = DEFAULT_POLICY
    prepare: Callable[[nn.Module, "PrepareContext"], None] | None = None
    finish: Callable[[nn.Module], None] | None = None
    skip: bool = False  # a declared stage that spends no steps (e.g. relufication of a ReLU model)


def base_policy(task: "Task") -> Policy:
    """The optimiser policy of the task's dense base model (the task's declared warm-up, clipping and weight
    decay), used by every stage that trains a dense model with the task's loss."""
    fit = dict(task.base_budget().get("fit", {}))
    return Policy(warmup=float(fit.get("warmup", 0)), grad_clip=fit.get("grad_clip", 1.0),
                  weight_decay=float(fit.get("weight_decay", 0.0)))


def short_stage_policy(task: "Task") -> Policy:
    """The task's base policy with its warm-up capped at 10% of the stage (a fine-tuning stage is much
    shorter than the base model's training, whose warm-up would otherwise take most of it)."""
    base = base_policy(task)
    return Policy(warmup=base.warmup, warmup_cap=0.1, grad_clip=base.grad_clip, weight_decay=base.weight_decay)


def task_loss(task: "Task") -> Callable[[nn.Module, Batch, StepContext], Tensor]:
    """The task's own loss on the model's output (a dense model's training loss)."""
    return lambda model, batch, ctx: task.loss(model(batch.x), batch)


def step_seed(seed: int, stage: str, step: int) -> int:
    """The seed of one training step: a hash of (run seed, stage name, step), stable across processes."""
    digest = hashlib.sha256(f"{seed}/{stage}/{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def allocate(stages: list[Stage], budget: int) -> list[int]:
    """Steps of each stage: ``round(share × budget)`` (shares normalised over the stages that run), raised to
    ``min_steps`` but leaving every later stage at least one step; the last running stage gets the rest, so
    the steps add up to the budget (whenever it has at least one step per stage).  Skipped stages get 0."""
    running = [i for i, s in enumerate(stages) if not s.skip]
    steps = [0] * len(stages)
    if not running:
        return steps
    total_share = sum(stages[i].share for i in running) or 1.0
    for n, i in enumerate(running[:-1]):
        wanted = max(1, round(budget * stages[i].share / total_share), int(stages[i].min_steps))
        later = len(running) - 1 - n  # every later stage keeps at least one step
        steps[i] = max(1, min(wanted, budget - sum(steps) - later))
    steps[running[-1]] = max(1, budget - sum(steps))
    return steps


@dataclass(frozen=True)
class PlannedStage:
    stage: Stage
    steps: int
    offset: int  # the global training step of the stage's first batch
    key: dict[str, Any]


@dataclass(frozen=True)
class Plan:
    """The stages of one method on one task, with steps, data offsets and chained cache keys."""

    starts_from: StartsFrom
    parent_key: dict[str, Any]
    budget: int
    batch_size: int
    stages: tuple[PlannedStage, ...]

    def describe(self) -> str:
        """The training budget as a row states it."""
        if not self.stages:
            return "none (evaluates the cached dense base model)" if self.starts_from == "base" else "none"
        parts = " + ".join(f"{p.stage.name} {p.steps}" for p in self.stages if p.steps)
        start = ("on top of the dense base model (method budget" if self.starts_from == "base"
                 else "from scratch (the base model's budget")
        return f"{parts} steps x batch {self.batch_size} {start} {self.budget} steps)"


def chain(parent: dict[str, Any], stage: Stage, steps: int, offset: int, batch_size: int,
          version: int) -> dict[str, Any]:
    """The cache key of a stage: its parent's key + what determines the stage (its config, budget and policy,
    and ``version``, the method's behaviour version)."""
    return {"parent": parent, "stage": stage.name, "config": stage.config, "steps": steps, "offset": offset,
            "batch": batch_size, "lr": stage.lr, "policy": stage.policy.describe(), "version": version}


def paper_recipe(method: "Method") -> Recipe:
    """The method's paper recipe, or one line saying that it declares none."""
    task = registry.task_spec(method.run.task_name)
    recipe = registry.method_spec(method.run.method).paper_recipe(task.backbones(method.task.cfg),
                                                                   int(method.task.base_budget()["steps"]))
    if recipe is None:
        raise UserError(f"recipe=paper: method {method.name} declares no paper recipe (its README says how it "
                        "is trained); run it with recipe=matched")
    return recipe


def plan(method: "Method") -> Plan:
    """Steps, data offsets and cache keys of a method's stages (nothing is built or trained)."""
    task, run = method.task, method.run
    base = task.base_budget()
    base_steps, batch_size = int(base["steps"]), int(base["batch_size"])
    recipe = paper_recipe(method) if getattr(run, "recipe", "matched") == "paper" else None
    starts_from = recipe.starts_from if recipe is not None and recipe.starts_from else method.starts_from()
    if starts_from == "base":
        parent, budget, offset = run.base_key(task), task.method_budget(), base_steps
    else:
        # what a model trained from scratch shares with the dense base: task config, seed, skeleton, trainer
        parent = {"from": "scratch", **run.base_key(task)}
        budget, offset = base_steps, 0
    stages = method.stages()
    if recipe is not None:
        budget = max(1, round(recipe.budget * base_steps))
        stages = [replace(s, share=recipe.share_of(s.name, s.share)) for s in stages]
    planned, key = [], parent
    for stage, steps in zip(stages, allocate(stages, budget)):
        if stage.skip:
            planned.append(PlannedStage(stage, 0, offset, key))
            continue
        key = chain(key, stage, steps, offset, batch_size, int(type(method).version))
        planned.append(PlannedStage(stage, steps, offset, key))
        offset += steps
    return Plan(starts_from, parent, budget, batch_size, tuple(planned))


def base_stage_name(width: float = 1.0, depth: float = 1.0) -> str:
    """The cached stage name of the task's dense model at a size (``w1.0-d1.0``: the dense base)."""
    return f"w{width}-d{depth}"


def stage_state(run: "RunContext", owner: str, name: str, key: Any) -> str:
    return _stage_status(run, owner, name, key)[0]


def _stage_status(run: "RunContext", owner: str, name: str, key: Any) -> tuple[str, int]:
    """"cached" (a checkpoint is there; it is checked when loaded), "shipped" (installed from artifacts/ when
    needed), "to train from step N" of the cache's own resumable checkpoint or of a shipped one, or "to train";
    with the step training resumes at.  Looks for files; of a resumable checkpoint it reads the step alone
    (memory-mapped: the weights are not read)."""
    ckpt = run.stage_path(owner, name, key)
    if ckpt.exists():
        return "cached", 0
    if run.shipped and artifacts.find(ckpt) is not None:
        return "shipped", 0
    own = checkpoints.partial_path(ckpt)
    if own.exists():
        step = saved_step(own)
        return (f"to train from step {step} of its checkpoint in the cache", step) if step else ("to train", 0)
    # a paused command's shipped checkpoint, installed when this cache has none of its own to resume
    shipped = artifacts.find_partial(ckpt) if run.shipped else None
    if shipped is None:
        return "to train", 0
    if shipped.meta.get("finished"):
        return "shipped", 0
    step = int(shipped.meta["step"])
    return f"to train from step {step} of a shipped checkpoint", step


def saved_step(partial: Path) -> int:
    """The step a resumable checkpoint resumes at (0 when it cannot be read: the trainer then says why)."""
    try:
        return int(torch.load(partial, map_location="cpu", weights_only=True, mmap=True)["step"])
    except Exception:  # a checkpoint cut short or of another format: the plan does not fail on it
        return 0


@dataclass(frozen=True)
class StageStatus:
    """One stage a plan trains (the dense base first when the plan starts from it) and its state in the run's
    cache (:func:`stage_state`)."""
    base: bool  # the task's dense base, not one of the method's stages
    name: str
    steps: int
    state: str
    done: int  # the step training resumes at
    path: Path  # its checkpoint in the run's cache (``RunContext.stage_path``), which may not exist yet

    @property
    def steps_left(self) -> int:
        return self.steps - self.done if self.state.startswith("to train") else 0


def plan_status(method: "Method", the_plan: Plan, reference: bool = False) -> list[StageStatus]:
    """The dense base (first when ``the_plan`` starts from it; last when the run loads it after training only
    as the reference it times or counts the model against, ``reference``) and every stage of it with steps,
    each with its state."""
    run, task = method.run, method.task

    def base(key: Any) -> StageStatus:
        return StageStatus(True, base_stage_name(), int(task.base_budget()["steps"]),
                           *_stage_status(run, "dense", base_stage_name(), key),
                           run.stage_path("dense", base_stage_name(), key))

    out = [base(the_plan.parent_key)] if the_plan.starts_from == "base" else []
    for planned in the_plan.stages:
        if planned.steps:
            status = _stage_status(run, run.method, planned.stage.name, planned.key)
            out.append(StageStatus(False, planned.stage.name, int(planned.steps), *status,
                                   run.stage_path(run.method, planned.stage.name, planned.key)))
    if reference and the_plan.starts_from != "base":
        out.append(base(run.base_key(task)))
    return out


def describe_plan(method: "Method", the_plan: Plan, reference: bool = False) -> tuple[str, int]:
    """One line naming what the run loads and trains (the base and each stage: cached, shipped or its steps;
    ``reference``: :func:`plan_status`), and the number of optimizer steps still to train."""
    return describe_stages(plan_status(method, the_plan, reference), the_plan)


def describe_stages(stages: list[StageStatus], the_plan: Plan) -> tuple[str, int]:
    """:func:`describe_plan` of the stages :func:`plan_status` gave for ``the_plan``."""
    base = ("dense base" if the_plan.starts_from == "base"
            else "dense base (the reference it is timed or counted against)")
    parts = [f"{base if s.base else s.name} {s.steps} steps ({s.state})" for s in stages]
    return ", then ".join(parts) or "nothing to train", sum(s.steps_left for s in stages)


def train(method: "Method") -> nn.Module:
    """Build and train a method's model: its parent (the dense base model, or nothing), its conversion,
    then every declared stage through the cached, resumable trainer.  Returns the model in eval mode."""
    run, task = method.run, method.task
    the_plan = plan(method)
    base = run.base_model(task) if the_plan.starts_from == "base" else None
    torch.manual_seed(run.seed)
    if base is None and method.starts_from() == "base":  # a paper recipe from scratch: an untrained dense model
        base = task.build_backbone()
    model = method.convert(base)
    method.training_plan = the_plan
    run.check_batch(the_plan.batch_size)
    for planned in the_plan.stages:
        stage = planned.stage
        batch_fn = _batches(task, planned, the_plan.batch_size)
        if stage.prepare is not None:
            stage.prepare(model, PrepareContext(run.is_cached(run.method, stage.name, planned.key),
                                                lambda: batch_fn(0).to(run.device)))
        if not planned.stage.skip:
            run.fit_stage(model, planned, owner=run.method, batch_fn=batch_fn, seed=run.seed,
                          shard_fn=_shards(task, planned, the_plan.batch_size))
        if stage.finish is not None:
            stage.finish(model)
    return model.eval()


def _batches(task: "Task", planned: PlannedStage, batch_size: int) -> Callable[[int], Batch]:
    offset = planned.offset
    return lambda step: task.train_batch(offset + step, batch_size)


def _shards(task: "Task", planned: PlannedStage, batch_size: int) -> Callable[[int, int, int], Batch]:
    """This rank's rows of each step's global batch (data-parallel training; bench/data.py)."""
    offset = planned.offset
    return lambda step, rank, world: task.train_shard(offset + step, batch_size, rank, world)
