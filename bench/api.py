"""The two plug-in interfaces: :class:`Task` and :class:`Method` (implementations import torch).

A task owns data, the dense backbone, the loss and the metric.  A method turns the task's dense base
model (or its own model) into an adaptive model, trains its stages through ``run`` (cached, resumable),
exposes its knob, and converts the decisions its model logged during the last forward into per-sample
MACs.  The runner (bench/runner.py) drives both with the same protocol for every method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import torch
from torch import Tensor, nn

from bench import registry

if TYPE_CHECKING:
    from bench.run import RunContext


def plain(cfg: Any) -> Any:
    """A config section as plain Python containers (resolved), for hashing and printing."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg


@dataclass
class Batch:
    x: Tensor  # model input
    y: Tensor  # target
    meta: dict[str, Tensor] = field(default_factory=dict)  # per-sample extras, e.g. difficulty, index

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def to(self, device: str | torch.device, non_blocking: bool = False) -> "Batch":
        return Batch(self.x.to(device, non_blocking=non_blocking), self.y.to(device, non_blocking=non_blocking),
                     {k: v.to(device, non_blocking=non_blocking) for k, v in self.meta.items()})

    def rows(self, start: int, stop: int) -> "Batch":
        """Samples ``start`` … ``stop - 1`` (every tensor is batch-first)."""
        return Batch(self.x[start:stop], self.y[start:stop], {k: v[start:stop] for k, v in self.meta.items()})

    def shard(self, rank: int, world: int) -> "Batch":
        """Rank ``rank``'s contiguous share of the rows (``world`` equal shares when it divides the batch)."""
        n = len(self)
        return self if world == 1 else self.rows(rank * n // world, (rank + 1) * n // world)

    def split(self, parts: int) -> list["Batch"]:
        """``parts`` consecutive micro-batches (gradient accumulation); sizes differ by at most one."""
        n = len(self)
        return [self] if parts == 1 else [self.rows(i * n // parts, (i + 1) * n // parts) for i in range(parts)]

    def pin_memory(self) -> "Batch":
        """Page-locked copy (the DataLoader's ``pin_memory=True`` calls this)."""
        return Batch(self.x.pin_memory(), self.y.pin_memory(), {k: v.pin_memory() for k, v in self.meta.items()})


@dataclass
class Inference:
    """What one evaluation forward of an adaptive model returns to the runner: the task outputs, each
    sample's MACs from the decisions the method took, and further per-sample columns (decisions such as
    learners per token, exit blocks, tape lengths; the task's own, e.g. decoder MACs per token).  The
    runner reads nothing else: no state left on modules."""

    outputs: Tensor
    macs: Tensor  # [B] float64
    columns: dict[str, Tensor] = field(default_factory=dict)  # each [B]
    # [B, T]: the share of its possible compute each input token received (learners run, blocks run, ...)
    # for methods whose decisions are per token; the run keeps it for the first samples, for figures
    token_compute: Tensor | None = None

    def __post_init__(self) -> None:
        n = int(self.macs.shape[0])
        bad = [k for k, v in self.columns.items() if int(v.shape[0]) != n]
        if bad:
            raise ValueError(f"per-sample columns {bad} do not have one value per sample ({n})")


@dataclass
class Quality:
    value: float  # the metric, e.g. top-1 accuracy in [0, 1]
    per_sample: Tensor  # per-sample score (1/0 correctness for accuracy)
    extra: dict[str, float] = field(default_factory=dict)  # further corpus-level metrics (e.g. CER)
    columns: dict[str, Any] = field(default_factory=dict)  # further per-sample columns (e.g. texts)


def encode_image(image: Tensor) -> str:
    """[C, H, W] image (any range) → "CxHxW:" + base64 of its min-max scaled uint8 pixels (a per-sample field
    figures decode with :func:`decode_image`)."""
    import base64

    img = image.detach().float().cpu()
    img = (img - img.min()) / (img.max() - img.min()).clamp_min(1e-8)
    pixels = (img * 255).round().to(torch.uint8).numpy().tobytes()
    c, h, w = img.shape
    return f"{c}x{h}x{w}:" + base64.b64encode(pixels).decode()


def decode_image(text: str):
    """The inverse of :func:`encode_image`: an [H, W] (gray) or [H, W, C] float array in [0, 1]."""
    import base64

    import numpy as np

    shape, data = text.split(":", 1)
    c, h, w = (int(v) for v in shape.split("x"))
    img = np.frombuffer(base64.b64decode(data), dtype=np.uint8).reshape(c, h, w).astype(np.float32) / 255.0
    return img[0] if c == 1 else img.transpose(1, 2, 0)


class Task:
    """Base class of a task implementation.  ``cfg`` is the task's config section."""

    name: str = ""
    # Behaviour version of the task's training data and base-model code: bump it when a change can alter a
    # trained base model (docs/architecture.md); it enters every cache key of the task.
    version: int = 1
    metric: str = "accuracy"
    higher_is_better: bool = True
    # Config keys that cannot change the dense base model (evaluation, the methods' budget): left out
    # of its cache key, so changing them does not retrain it.
    not_base_keys: tuple[str, ...] = ()

    def __init__(self, cfg: Any, run: "RunContext"):
        self.cfg = cfg
        self.run = run

    def base_config(self) -> dict[str, Any]:
        """The task config that determines the dense base model (its cache key)."""
        return {k: v for k, v in plain(self.cfg).items() if k not in self.not_base_keys}

    # --- data -------------------------------------------------------------------------------
    @property
    def dataset(self) -> str:
        """The dataset actually used (named in every row, figure title and leaderboard section)."""
        raise NotImplementedError

    @property
    def metric_signature(self) -> str:
        return self.metric

    def train_batch(self, step: int, batch_size: int) -> Batch:
        """The training batch of a given step (deterministic in seed and step, so runs resume exactly)."""
        raise NotImplementedError

    def train_shard(self, step: int, batch_size: int, rank: int, world: int) -> Batch:
        """Rank ``rank``'s rows of the global batch of ``step`` (data-parallel training, bench/data.py).

        Default: the rows of :meth:`train_batch` (every rank builds the whole batch, so the shard is the same
        rows, augmentation included, as in a single process).  A task whose batches are costly to decode
        overrides this to build only its rows, keeping the same per-sample result."""
        return self.train_batch(step, batch_size).shard(rank, world)

    def eval_batches(self) -> Iterable[Batch]:
        """The evaluation split in a fixed order, one batch at a time (a generator: the runner holds one
        batch at a time, so the split is never materialised)."""
        raise NotImplementedError

    def example_input(self, batch_size: int) -> Tensor:
        """A real input batch for timing (taken from the evaluation split)."""
        raise NotImplementedError

    def validation_task(self) -> "Task | None":
        """This task evaluating its validation split instead of its evaluation split (held out from training
        and from the evaluation split; same metric), or None when the task has none.  Whatever is tuned or
        selected -- a method's thresholds, which points form a front in the report -- is chosen on it and
        reported on the evaluation split.  Built once per run (the runner keeps it)."""
        return None

    # --- model ------------------------------------------------------------------------------
    def build_backbone(self, width: float = 1.0, depth: float = 1.0) -> nn.Module:
        raise NotImplementedError

    def base_budget(self) -> dict[str, Any]:
        """Training budget of the dense base model: steps, batch_size, lr (methods get the same)."""
        return {"steps": self.cfg.train_steps, "batch_size": self.cfg.batch_size, "lr": self.cfg.lr}

    def method_budget(self) -> int:
        """The training budget, in steps at the base model's batch size, that every method starting from
        the dense base model gets on top of it: the task's ``method_steps``, or the base model's own step
        count for a task that defines none (bench/protocol.py)."""
        steps = getattr(self.cfg, "method_steps", None)
        return int(steps) if steps is not None else int(self.base_budget()["steps"])

    def loss(self, outputs: Tensor, batch: Batch) -> Tensor:
        return nn.functional.cross_entropy(outputs, batch.y)

    # --- inference --------------------------------------------------------------------------
    def infer(self, model: nn.Module, x: Tensor) -> Tensor:
        """The evaluation forward: what evaluation, cost counting and timing execute on ``x``.

        ``model(x)`` by default; a task that decodes (translation) runs its search here."""
        return model(x)

    def reference_model(self) -> nn.Module:
        """The dense reference whose counted MACs are the row's ``macs_dense`` (default: the untrained
        dense backbone, whose cost does not depend on its weights; tasks whose cost depends on the
        outputs, e.g. decoding length, return the trained dense base model)."""
        return self.build_backbone()

    def extra_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        """Per-sample columns of the last ``infer`` on ``batch`` kept beside the row (e.g. decoder MACs
        per generated token)."""
        return {}

    # --- metric -----------------------------------------------------------------------------
    def predict(self, outputs: Tensor) -> Tensor:
        return outputs.argmax(dim=-1)

    def score(self, predictions: Tensor, targets: Tensor) -> Quality:
        correct = (predictions == targets).float()
        return Quality(float(correct.mean()), correct)

    def preview(self, x: Tensor) -> list[str] | None:
        """A compact text form of each input that figures can show (images: see :func:`encode_image`);
        None for inputs with no picture.  The run keeps it for the first samples only."""
        return None

    def sample_table(self, predictions: Tensor, targets: Tensor) -> dict[str, Any]:
        """Per-sample ``target``/``prediction`` columns of the samples file (one value per sample; tasks
        whose predictions are sequences turn them into text)."""
        return {"target": targets.numpy(), "prediction": predictions.numpy()}


class Method:
    """Base class of a method implementation.  ``cfg`` is the method's config section.

    A method owns its mathematics, the core owns the protocol (bench/protocol.py): the method says where
    it starts (:meth:`starts_from`), builds its model from the dense base model (:meth:`convert`) and
    declares its training stages (:meth:`stages`); the core trains them (budget, data order, per-step
    seeds, optimiser policy, caching, resume) and hands the trained model to the runner."""

    name: str = ""
    # Behaviour version of the method's conversion and stages: bump it when a change can alter a trained
    # stage (docs/architecture.md); it enters the cache key of every stage of the method.
    version: int = 1

    def __init__(self, cfg: Any, task: Task, run: "RunContext"):
        self.cfg = cfg
        self.task = task
        self.run = run
        self.training_plan = None  # set by the core (bench.protocol.Plan) when the model is trained

    def capabilities(self) -> tuple[str, ...]:
        """What the task provides (its registry spec's capabilities for this config: backbone family, output
        kind, readable input elements); methods branch on these, never on task names."""
        return tuple(registry.task_spec(self.run.task_name).backbones(self.task.cfg))

    def starts_from(self) -> str:
        """"base": converts the task's trained dense base model and trains on the method budget, continuing
        the data after the base model's steps; "scratch": builds its own model and trains it like the
        dense base (the base budget, data from step 0)."""
        return "base"

    def convert(self, base: nn.Module | None) -> nn.Module:
        """The adaptive model, built from the dense base model (``None`` when starting from scratch)."""
        raise NotImplementedError

    def stages(self) -> list[Any]:
        """The training stages (:class:`bench.protocol.Stage`), in order; none by default.  Called before
        :meth:`convert`, so the stages' config and code (their cache keys) can be computed without
        building a model; their callables run after it."""
        return []

    def infer(self, model: nn.Module, batch: Batch,
              forward: Callable[[nn.Module, Tensor], Tensor] | None = None) -> Inference:
        """One evaluation forward on ``batch`` as a typed result: the task's inference (``forward``, default
        ``task.infer``: what the runner also counts and times) followed by the per-sample MACs and columns
        of the decisions that forward took.  The decision log a method keeps on its own modules is read
        here, by the method, and by nothing else."""
        outputs = (forward or self.task.infer)(model, batch.x)
        columns = {**self.sample_columns(model, batch), **self.task.extra_columns(model, batch)}
        return Inference(outputs, self.sample_macs(model, batch).double(), columns,
                         self.token_compute(model, batch))

    def token_compute(self, model: nn.Module, batch: Batch) -> Tensor | None:
        """[B, T] share of the possible compute each token of the forward :meth:`infer` just ran received
        (None: the method's decisions are not per token)."""
        return None

    def knob_values(self) -> list[Any]:
        """Points of this run: several for an eval-time knob, one for a training-time or static knob."""
        raise NotImplementedError

    def set_knob(self, model: nn.Module, value: Any) -> None:
        pass

    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        """Per-sample MACs of the forward that :meth:`infer` just ran, from its logged decisions."""
        raise NotImplementedError

    def sample_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        """Extra per-sample columns of the forward :meth:`infer` just ran (e.g. ponder steps), kept beside
        the row."""
        return {}

    def variant(self) -> str:
        """Variant notes that change results (recorded in every row)."""
        return ""

    def train_budget(self) -> str:
        """The training budget this method spends, stated for the row (the core's plan: the one
        ``bench.protocol.train`` followed, or the run's plan before training)."""
        return (self.training_plan or self.run.plan(self)).describe()
