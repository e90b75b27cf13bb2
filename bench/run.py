"""RunContext: what a task or method needs from the harness during one run (cache, seeds, training).

Cached artefacts live under ``<cache_dir>/<task>/<owner>/<name>-<key>.pt`` where the key hashes the
configuration that determines them and the source code that produced them (a code change retrains).

Concurrent jobs (a joblib or SLURM sweep) share the cache safely: a stage is trained under an exclusive
file lock ``<name>-<key>.pt.lock`` beside its checkpoint, so when two jobs need the same stage one trains
it and the other waits, then loads the finished checkpoint (a stage is never trained twice).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

from bench import train
from bench.api import Batch, Task, plain  # noqa: F401  (plain: re-exported for methods)

log = logging.getLogger("bench")


def stable_hash(obj: Any, length: int = 12) -> str:
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


# Files of a method/task package that cannot change trained weights (drawing figures from results, timing
# randomly initialised models with forced decisions for `bench speed`).
NOT_TRAINING_CODE = {"figures.py", "speed.py"}


def code_version(*objects: Any) -> str:
    """Hash of the source defining ``objects`` (modules, classes or functions).

    An object defined in a package's ``__init__`` or in a module of a method/task package counts the
    whole package directory (its model, data and training code), so editing any of it retrains; only
    ``NOT_TRAINING_CODE`` files (figures) are left out.
    """
    files: set[Path] = set()
    for obj in objects:
        path = Path(inspect.getsourcefile(obj)).resolve()
        if path.parent.parent.name in ("methods", "tasks"):
            files.update(p for p in path.parent.glob("*.py") if p.name not in NOT_TRAINING_CODE)
        else:
            files.add(path)
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:12]


class RunContext:
    def __init__(self, cfg: Any, method: str, task: str, command: str = ""):
        self.cfg = cfg
        self.method = method
        self.task_name = task
        self.command = command
        self.seed = int(cfg.seed)
        self.device = str(cfg.device)
        self.cache_dir = Path(cfg.cache_dir)
        self.train_time_s = 0.0  # training time spent by this run's stages (cached stages count theirs)
        self._charged: set[Path] = set()

    def stage_path(self, owner: str, name: str, key: Any) -> Path:
        return self.cache_dir / self.task_name / owner / f"{name}-{stable_hash(key)}.pt"

    def fit(self, model: nn.Module, batch_fn: Callable[[int], Batch], loss_fn, *, owner: str, name: str,
            key: Any, **kwargs) -> train.FitResult:
        """Train one stage (cached by ``key``; resumes after an interruption; one trainer at a time)."""
        ckpt = self.stage_path(owner, name, key)
        with stage_lock(ckpt):
            torch.manual_seed(self.seed)
            model.to(self.device)
            result = train.fit(model, batch_fn, loss_fn, ckpt=ckpt, desc=f"{owner}:{name}", device=self.device,
                               **kwargs)
        if ckpt not in self._charged:  # a stage loaded again (e.g. the dense base for timing) counts once
            self._charged.add(ckpt)
            self.train_time_s += result.time_s
        model.eval()
        return result

    def base_model(self, task: Task, width: float = 1.0, depth: float = 1.0) -> nn.Module:
        """The task's dense model at a given size, trained once with the task's budget and cached."""
        import bench.models.transformer as skeleton

        torch.manual_seed(self.seed)
        model = task.build_backbone(width=width, depth=depth)
        budget = task.base_budget()
        key = {"task": self.task_name, "cfg": task.base_config(), "width": width, "depth": depth,
               "seed": self.seed, "code": code_version(type(task), skeleton, train, type(model))}
        self.fit(model, lambda step: task.train_batch(step, budget["batch_size"]), task_loss(task),
                 owner="dense", name=f"w{width}-d{depth}", key=key, steps=budget["steps"], lr=budget["lr"],
                 **budget.get("fit", {}))
        return model


@contextlib.contextmanager
def stage_lock(ckpt: Path) -> Iterator[None]:
    """Hold the exclusive lock of one cached stage (blocks while another process trains it)."""
    from filelock import FileLock, Timeout

    ckpt.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(f"{ckpt}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("%s is being trained by another job; waiting for it", ckpt.name)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def task_loss(task: Task) -> Callable[[nn.Module, Batch], torch.Tensor]:
    return lambda model, batch: task.loss(model(batch.x), batch)
