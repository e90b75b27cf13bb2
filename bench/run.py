"""RunContext: what a task or method needs from the harness during one run (cache, seeds, training).

Cached artefacts live under ``<cache_dir>/<task>/<owner>/<name>-<key>.pt`` where the key hashes the
configuration that determines them and the explicit behaviour versions of the code that produced them
(:mod:`bench.versions`): a version bump retrains, a refactor does not.

Concurrent jobs (a joblib or SLURM sweep) share the cache safely: a stage is trained under an exclusive
file lock ``<name>-<key>.pt.lock`` beside its checkpoint, so when two jobs need the same stage one trains
it and the other waits, then loads the finished checkpoint (a stage is never trained twice).  The lock is
the ``filelock`` package's native lock (``flock``): the kernel drops it when its process ends, however it
ends, so a lock file left by a killed process never blocks a later run (that run takes it at once).  The
holder removes the lock file before it releases the lock, when the stage finishes, fails or is
interrupted; filelock's acquire loop expects this (a waiter that locked a file no longer linked at the
path starts over), so removing it keeps mutual exclusion.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

from bench import artifacts, checkpoints, distributed, protocol, train, versions
from bench.api import Batch, Task, plain  # noqa: F401  (plain: re-exported for methods)
from bench.errors import UserError
from bench.protocol import PlannedStage, Stage, StepContext, base_policy, base_stage_name, step_seed, task_loss
from bench.results import stable_hash  # the one hash of keys and identities

log = logging.getLogger("bench")


class RunContext:
    def __init__(self, cfg: Any, method: str, task: str, command: str = ""):
        self.cfg = cfg
        self.method = method
        self.task_name = task
        self.command = command
        self.seed = int(cfg.seed)
        self.device = distributed.setup(str(cfg.device))  # joins the process group under torchrun / SLURM
        self.cache_dir = Path(cfg.cache_dir)
        self.shipped = bool(getattr(cfg, "shipped", True))  # install finished stages from artifacts/
        self.train_threads = int(getattr(cfg, "train_threads", 0)) or int(getattr(cfg, "threads", 1))
        # How stages train at scale (run-level keys, defaults for configs that predate them).
        self.precision = str(getattr(cfg, "precision", "fp32"))
        self.accumulate = int(getattr(cfg, "accumulate", 1))
        self.recipe = str(getattr(cfg, "recipe", "matched"))
        self.train_options = {"precision": self.precision, "accumulate": self.accumulate,
                              "log_every": int(getattr(cfg, "log_every", 50)),
                              "num_workers": int(getattr(cfg, "num_workers", 0)),
                              "pin_memory": bool(getattr(cfg, "pin_memory", True)),
                              "save_every_s": float(getattr(cfg, "save_every_s", 60.0))}
        self.train_time_s = 0.0  # training time spent by this run's stages (cached stages count theirs)
        self.base_time_s = float("nan")  # the dense base's share of it (the full-size base, once trained or loaded)
        self._charged: set[Path] = set()
        self.fit_extra: dict[str, Any] = {}  # extra bench.train.fit arguments (tests: stop_after)

    def plan(self, method: Any) -> Any:
        """The core's training plan of ``method`` in this run (:func:`bench.protocol.plan`)."""
        return protocol.plan(method)

    def stage_path(self, owner: str, name: str, key: Any) -> Path:
        return self.cache_dir / self.task_name / owner / f"{name}-{stable_hash(key)}.pt"

    def is_cached(self, owner: str, name: str, key: Any) -> bool:
        return train.is_done(self.stage_path(owner, name, key))

    def scale_key(self) -> dict[str, Any]:
        """What the scale options change in a trained model, for the base model's cache key (and through
        the chained keys every stage's): precision and accumulation when not the defaults.  The world size
        is left out: N processes train on the same global batches as one (up to fp32 rounding)."""
        key: dict[str, Any] = {}
        if self.precision != "fp32":
            key["precision"] = self.precision
        if self.accumulate != 1:
            key["accumulate"] = self.accumulate
        return key

    def check_batch(self, batch_size: int) -> None:
        """The global batch must split into equal rows per rank (DDP averages ranks with equal weight), and
        each rank's rows into at least ``accumulate`` micro-batches."""
        world = distributed.world()
        if batch_size % world:
            raise UserError(f"the training batch size {batch_size} does not divide into {world} processes; "
                            "set the task's batch_size to a multiple of the number of processes")
        if batch_size // world < self.accumulate:
            raise UserError(f"accumulate={self.accumulate} exceeds the {batch_size // world} training samples each "
                            f"of {world} process(es) gets per step; use accumulate <= {batch_size // world}")

    def fit(self, model: nn.Module, batch_fn: Callable[[int], Batch], loss_fn, *, owner: str, name: str,
            key: Any, **kwargs) -> train.FitResult:
        """Train one stage (cached by ``key``; resumes after an interruption; one trainer at a time).

        Under data parallelism rank 0 holds the stage lock while every rank trains (the others wait for it
        at a barrier)."""
        ckpt = self.stage_path(owner, name, key)
        with stage_lock(ckpt) if distributed.is_main() else contextlib.nullcontext():
            shipped = artifacts.find(ckpt) if distributed.is_main() and self.shipped else None
            if shipped is not None and not train.is_done(ckpt):  # a file check first: no load without one
                artifacts.install(shipped, ckpt)
            elif distributed.is_main() and self.shipped and not ckpt.exists():
                self._resume_shipped(ckpt)
            distributed.barrier()
            torch.manual_seed(self.seed)
            model.to(self.device)
            with cpu_threads(self.train_threads):
                result = train.fit(model, batch_fn, loss_fn, ckpt=ckpt, desc=f"{owner}:{name}", device=self.device,
                                   **{**self.train_options, **kwargs, **self.fit_extra})
        if ckpt not in self._charged:  # a stage loaded again (e.g. the dense base for timing) counts once
            self._charged.add(ckpt)
            self.train_time_s += result.time_s
        model.eval()
        return result

    @staticmethod
    def _resume_shipped(ckpt: Path) -> None:
        """A stage this cache has not finished and cannot resume, whose checkpoint ships: copy it in."""
        partial = checkpoints.partial_path(ckpt)
        shipped = artifacts.find_partial(ckpt)
        if shipped is not None and not partial.exists():
            artifacts.install_partial(shipped, ckpt, partial)

    def fit_stage(self, model: nn.Module, planned: PlannedStage, *, owner: str,
                  batch_fn: Callable[[int], Batch], seed: int,
                  shard_fn: Callable[[int, int, int], Batch] | None = None) -> train.FitResult:
        """Run one declared stage under the core's protocol (per-step seeds, declared policy, cache)."""
        stage, steps = planned.stage, planned.steps
        ctx = StepContext(stage.name, 0, steps, torch.Generator(device=self.device))

        # Data-parallel ranks draw their own noise (dropout, Gumbel, budgets) for their rows: seeded by
        # (seed, stage, step, rank), so a resumed run with the same processes draws the same; one process
        # keeps the single-process seeds.
        stream = stage.name if distributed.world() == 1 else f"{stage.name}/rank{distributed.rank()}"

        def before_step(step: int) -> None:
            ctx.step = step
            value = step_seed(seed, stream, step)
            torch.manual_seed(value)
            ctx.generator.manual_seed(value)

        params = list(stage.params(model)) if stage.params is not None else None
        policy = stage.policy
        return self.fit(model, batch_fn, lambda m, batch: stage.loss(m, batch, ctx), owner=owner, name=stage.name,
                        key=planned.key, steps=steps, lr=stage.lr, params=params, grad_clip=policy.grad_clip,
                        weight_decay=policy.weight_decay, warmup=policy.warmup_steps(steps),
                        before_step=before_step, shard_fn=shard_fn)

    def base_key(self, task: Task, width: float = 1.0, depth: float = 1.0) -> dict[str, Any]:
        """What determines the task's dense base model at a size: the task's training config, the seed, and
        the behaviour versions of the skeleton, the trainer and the task (:func:`bench.versions.of`)."""
        return {"task": self.task_name, "cfg": task.base_config(), "width": width, "depth": depth,
                "seed": self.seed, "versions": versions.of(task), **self.scale_key()}

    def base_model(self, task: Task, width: float = 1.0, depth: float = 1.0) -> nn.Module:
        """The task's dense model at a given size, trained once with the task's budget and cached: one
        stage ``base`` run by the same protocol as every method stage (data from step 0)."""
        torch.manual_seed(self.seed)
        model = task.build_backbone(width=width, depth=depth)
        budget = task.base_budget()
        stage = Stage(base_stage_name(width, depth), task_loss(task), lr=float(budget["lr"]), policy=base_policy(task))
        planned = PlannedStage(stage, int(budget["steps"]), 0, self.base_key(task, width, depth))
        size = int(budget["batch_size"])
        self.check_batch(size)
        charged = self.train_time_s
        result = self.fit_stage(model, planned, owner="dense", batch_fn=lambda step: task.train_batch(step, size),
                                seed=self.seed, shard_fn=lambda step, rank, world: task.train_shard(step, size, rank, world))
        if (width, depth) == (1.0, 1.0) and self.train_time_s > charged:  # charged now: its first use in this run
            self.base_time_s = result.time_s
        return model


@contextlib.contextmanager
def cpu_threads(count: int) -> Iterator[None]:
    """torch's CPU thread count set to ``count`` inside the block, the previous count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def stage_lock(ckpt: Path) -> Iterator[None]:
    """Hold the exclusive lock of one cached stage (blocks while another process trains it)."""
    from filelock import FileLock, Timeout, UnixFileLock

    ckpt.parent.mkdir(parents=True, exist_ok=True)
    path = f"{ckpt}.lock"
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("%s is being trained by another job; waiting for it", ckpt.name)
        lock.acquire()
    held = None  # the file this process locked (filelock checked that the path still names it)
    with contextlib.suppress(OSError):
        held = os.stat(path)
    try:
        yield
    finally:
        # Native Unix locks leave their file on release (Windows and soft locks remove their own): remove
        # it while still holding the lock, and only if the path still names the file this process locked.
        if held is not None and isinstance(lock, UnixFileLock):
            with contextlib.suppress(OSError):
                if os.path.samestat(os.lstat(path), held):
                    os.unlink(path)
        lock.release()
