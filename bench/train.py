"""One resumable training loop for every stage of every method (Adam, cosine schedule, tqdm).

A stage writes ``<ckpt>.partial.pt`` every ``save_every_s`` seconds and on Ctrl-C, and the final weights
to ``<ckpt>`` when done.  Calling :func:`fit` again with the same checkpoint path resumes from the last
partial state (model, optimizer, sampler position = step, loss scaler, elapsed time); a finished stage just
loads its weights.  Data comes from ``batch_fn(step)`` (or ``shard_fn(step, rank, world)``), deterministic in
the step, read through a DataLoader (bench/data.py), so a resumed run sees the same batches it would have
seen without the interruption.

Scale:

* **Data parallel.**  Under ``torch.distributed`` (bench/distributed.py) the model is wrapped in
  ``DistributedDataParallel`` and each rank trains on its rows of the step's global batch; DDP averages the
  gradients, so N processes at global batch B follow one process at batch B (up to fp32 rounding).  The
  loss sees a replica whose calls go through DDP's ``forward`` and whose attributes are the model's; a
  loss that never calls ``forward`` with gradients (a stage that distils modules on recorded inputs) gets
  its gradients averaged by one explicit all-reduce instead.  Rank 0 alone writes checkpoints; every rank
  loads them (after rank 0 has checked them) to resume.
* **Precision.**  ``precision=bf16|fp16`` runs the loss under autocast; fp16 scales it (GradScaler) and
  steps a fused Adam that skips a step with inf/NaN gradients on the device.
* **Accumulation.**  ``accumulate=k`` splits each rank's rows into k micro-batches, weights each loss by
  its share of the rows and syncs gradients once per step.
* **No per-step host sync.**  Step losses stay on the device and are read every ``log_every`` steps (and
  before a checkpoint), when the loss average shown by tqdm is updated; fp16's loss scaling stays on the
  device too (tests/test_scale.py counts the host reads).

With one process, fp32, ``accumulate=1`` and ``num_workers=0`` the loop executes the same operations in
the same order as before, so trained weights are bit-identical (tests/test_scale.py).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch import Tensor, nn

from bench import distributed, precision as amp, signals
from bench.api import Batch
from bench.checkpoints import Interrupted, atomic_save, load_final, load_partial, partial_path, read
from bench.data import ShardFn, step_loader
from bench.progress import progress as show_progress

# Behaviour version of the trainer and the core's protocol (this loop, its optimiser and schedule, and
# bench/protocol.py's budget split, data offsets and per-step seeds): bump it when a change can alter a
# trained model (docs/architecture.md).  It enters every cache key.
VERSION = 1


@dataclass
class FitResult:
    steps: int
    time_s: float
    final_loss: float
    resumed_from: int


def is_done(ckpt: Path) -> bool:
    return read(Path(ckpt), ("model",)) is not None  # an unusable checkpoint is moved aside: not done


class _Replica:
    """What a loss sees under DDP: calls run through DDP's ``forward`` (gradient sync), attributes read and
    set are the wrapped model's.  ``forwards`` counts the calls made with gradients enabled."""

    def __init__(self, ddp: nn.Module):
        object.__setattr__(self, "_ddp", ddp)
        object.__setattr__(self, "forwards", 0)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            object.__setattr__(self, "forwards", self.forwards + 1)
        return self._ddp(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ddp.module, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._ddp.module, name, value)


def _load_final_everywhere(ckpt: Path, model: nn.Module, device: str) -> dict | None:
    """Rank 0 checks (and moves aside) the final checkpoint first, then the other ranks load what is left."""
    state = load_final(ckpt, model, device) if distributed.is_main() else None
    if distributed.world() > 1:
        distributed.barrier()
        if not distributed.is_main():
            state = load_final(ckpt, model, device)
        if distributed.broadcast(state is not None) != (state is not None):
            raise RuntimeError(f"ranks disagree on whether {ckpt} is a finished stage")
    return state


def _freeze_all_but(model: nn.Module, params: list[nn.Parameter]) -> list[nn.Parameter]:
    """Stop gradients to the parameters a stage does not train (returned, to unfreeze after the stage).

    Their gradients were never used (the optimizer, clipping and the all-reduce see ``params`` only), and
    data-parallel training then syncs exactly the trained parameters, without searching for unused ones."""
    chosen = {id(p) for p in params}
    frozen = [p for p in model.parameters() if p.requires_grad and id(p) not in chosen]
    for p in frozen:
        p.requires_grad_(False)
    return frozen


def _unfreeze(frozen: list[nn.Parameter]) -> None:
    for p in frozen:
        p.requires_grad_(True)


def _check_every_parameter_trained(model: nn.Module, params: list[nn.Parameter], desc: str) -> None:
    """After the first step's backward: a trained parameter without a gradient is a stage that declares
    more than it trains (data-parallel training would stop at the next step); name them."""
    idle = {id(p) for p in params if p.grad is None}
    if idle:
        names = [name for name, p in model.named_parameters() if id(p) in idle]
        raise RuntimeError(f"stage {desc}: {len(names)} trained parameters get no gradient ({', '.join(names[:4])}"
                           f"{', ...' if len(names) > 4 else ''}); leave them out with the Stage's params")


def fit(model: nn.Module, batch_fn: Callable[[int], Batch], loss_fn: Callable[[nn.Module, Batch], Tensor],
        *, steps: int, lr: float, ckpt: Path, desc: str, params: Iterable[nn.Parameter] | None = None,
        weight_decay: float = 0.0, grad_clip: float | None = 1.0, warmup: int = 0,
        device: str = "cpu", save_every_s: float = 60.0, stop_after: int | None = None,
        before_step: Callable[[int], None] | None = None, shard_fn: ShardFn | None = None,
        precision: str = "fp32", accumulate: int = 1, log_every: int = 50, num_workers: int = 0,
        pin_memory: bool = False) -> FitResult:
    """Train ``model`` for ``steps`` Adam steps on ``loss_fn(model, batch_fn(step))``; resumable.

    ``before_step(step)`` runs before each step's batch is drawn (the protocol seeds the step's randomness
    there, so a resumed run draws what an uninterrupted one would).  ``shard_fn(step, rank, world)``: this
    rank's rows of the step's batch (default: the rows of ``batch_fn(step)``).

    ``stop_after`` (tests): raise KeyboardInterrupt after that many steps of this call, as Ctrl-C would.
    """
    ckpt = Path(ckpt)
    rank, world, main = distributed.rank(), distributed.world(), distributed.is_main()
    state = _load_final_everywhere(ckpt, model, device)
    if state is not None:
        return FitResult(state["steps"], state["time_s"], state["final_loss"], state["steps"])
    params = [p for p in (params if params is not None else model.parameters()) if p.requires_grad]
    optimizer = _optimizer(params, lr, weight_decay, precision)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_schedule(warmup, steps))
    scaler = amp.grad_scaler(precision, device)
    partial = partial_path(ckpt)
    state = _resume(partial, model, optimizer, scheduler, device)
    start, elapsed, losses = 0, 0.0, _LossLog()
    if state is not None:
        start, elapsed, losses.ema = state["step"], state["time_s"], state["loss_ema"]
        if "scaler" in state:
            scaler.load_state_dict(state["scaler"])
    frozen = _freeze_all_but(model, params)  # before DDP, which syncs the parameters that require grad
    ddp, target = _data_parallel(model, device)

    def save_partial(step: int) -> None:
        losses.flush()
        if main:
            atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict(), "step": step, "time_s": elapsed,
                         "loss_ema": losses.ema, "sampler": {"step": step, "world": world, "accumulate": accumulate},
                         "scaler": scaler.state_dict()}, partial)

    if shard_fn is None:
        shard_fn = lambda s, r, w: batch_fn(s).shard(r, w)  # noqa: E731
    loader = iter(step_loader(shard_fn, start=start, steps=steps, rank=rank, world=world,
                              num_workers=num_workers, pin_memory=pin_memory and device.startswith("cuda")))
    model.train()
    step = start
    last_save = time.perf_counter()
    progress = show_progress(total=steps, initial=start, desc=desc, enabled=main)
    try:
        try:
            while step < steps:
                t0 = time.perf_counter()
                if before_step is not None:
                    before_step(step)
                shard = next(loader).to(device, non_blocking=pin_memory)
                optimizer.zero_grad(set_to_none=True)
                step_loss = _backward(target, ddp, loss_fn, shard, accumulate, scaler, precision, device)
                if step == start:
                    _check_every_parameter_trained(model, params, desc)
                _prepare_update(target, ddp, params, optimizer, scaler, grad_clip)
                with signals.deferred():  # a stop lands before or after the update, never inside it
                    _step(optimizer, scheduler, scaler)
                    step += 1
                elapsed += time.perf_counter() - t0
                losses.add(step_loss)
                progress.update(1)
                if step % log_every == 0:
                    losses.flush()
                    progress.set_postfix(loss=f"{losses.ema:.4f}")
                if time.perf_counter() - last_save > save_every_s:
                    save_partial(step)
                    last_save = time.perf_counter()
                if stop_after is not None and step - start >= stop_after and step < steps:
                    raise KeyboardInterrupt
        except RuntimeError:
            if not signals.stop_requested():
                raise
            # SIGTERM reached another rank first and a collective of this step failed: the weights are those
            # after ``step`` steps (this step's update never ran), so the partial checkpoint is exact.
            raise KeyboardInterrupt from None
    except KeyboardInterrupt:
        save_partial(step)
        progress.close()
        raise Interrupted(desc, step, steps, partial) from None
    finally:
        _unfreeze(frozen)
    progress.close()
    losses.flush()
    model.eval()
    if main:
        atomic_save({"model": model.state_dict(), "steps": steps, "time_s": elapsed, "final_loss": losses.ema}, ckpt)
        if partial.exists():
            partial.unlink()
    distributed.barrier()  # the other ranks go on once the stage is saved
    return FitResult(steps, elapsed, losses.ema, start)


def _optimizer(params: list[nn.Parameter], lr: float, weight_decay: float, precision: str) -> torch.optim.Optimizer:
    """Adam (AdamW with weight decay).  fp16: the fused kernel takes the GradScaler's inf check as a device
    tensor and skips the update on device, so a step never waits for the host (the unfused step reads
    found_inf with .item()); fp32 and bf16 keep the unfused optimizer (the trained weights stay
    bit-identical to before)."""
    fused = {"fused": True} if amp.needs_scaler(precision) else {}
    if weight_decay:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **fused)
    return torch.optim.Adam(params, lr=lr, **fused)


def cosine_schedule(warmup: int, steps: int) -> Callable[[int], float]:
    """The learning-rate factor of a step: linear warm-up over ``warmup`` steps, then cosine to zero."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


class _LossLog:
    """Step losses kept on the device and read back in one transfer when shown or saved (``ema``: the
    exponential moving average of the steps read so far)."""

    def __init__(self) -> None:
        self.pending: list[Tensor] = []
        self.ema = float("nan")

    def add(self, loss: Tensor) -> None:
        self.pending.append(loss.float())

    def flush(self) -> None:
        if not self.pending:
            return
        for value in torch.stack(self.pending).tolist():
            self.ema = value if math.isnan(self.ema) else 0.98 * self.ema + 0.02 * value
        self.pending.clear()


def _resume(partial: Path, model: nn.Module, optimizer, scheduler, device: str) -> dict | None:
    """The partial state to resume from, or None: rank 0 checks it (or moves it aside), the others follow."""
    state = load_partial(partial, model, optimizer, scheduler, device) if distributed.is_main() else None
    if distributed.world() > 1:
        distributed.barrier()
        if distributed.broadcast(state is not None) and not distributed.is_main():
            state = load_partial(partial, model, optimizer, scheduler, device)
    return state


def _data_parallel(model: nn.Module, device: str) -> tuple[nn.Module | None, Any]:
    """(DDP wrapper or None, what the loss calls): under several processes the model runs through DDP."""
    if distributed.world() <= 1:
        return None, model
    from torch.nn.parallel import DistributedDataParallel

    index = [torch.device(device).index or 0] if device.startswith("cuda") else None
    ddp = DistributedDataParallel(model, device_ids=index)  # every trained parameter is used (checked)
    return ddp, _Replica(ddp)


def _backward(target: Any, ddp: nn.Module | None, loss_fn: Callable[[nn.Module, Batch], Tensor], shard: Batch,
              accumulate: int, scaler, precision: str, device: str) -> Tensor:
    """Forward and backward of one step's rows, in ``accumulate`` micro-batches (gradients synced once, at
    the last); the step's loss, on the device."""
    micro = shard.split(accumulate) if accumulate > 1 else [shard]
    step_loss = None
    for i, part in enumerate(micro):
        last = i == len(micro) - 1
        with ddp.no_sync() if ddp is not None and not last else contextlib.nullcontext():
            if ddp is not None:
                object.__setattr__(target, "forwards", 0)
            with amp.autocast(precision, device):
                loss = loss_fn(target, part)
            if len(micro) > 1:
                loss = loss * (len(part) / len(shard))  # the mean over the rank's rows
            scaler.scale(loss).backward()
        step_loss = loss.detach() if step_loss is None else step_loss + loss.detach()
    return step_loss


def _prepare_update(target: Any, ddp: nn.Module | None, params: list[nn.Parameter], optimizer, scaler,
                    grad_clip: float | None) -> None:
    """The gradients after the backward: averaged explicitly when no forward went through DDP, then
    unscaled and clipped (the weights are untouched: a stop here loses only this step's work)."""
    if ddp is not None and target.forwards == 0:  # no forward through DDP: average explicitly
        distributed.all_reduce_grads(params)
    if grad_clip:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, grad_clip)


def _step(optimizer, scheduler, scaler) -> None:
    """The update: the optimizer step (through the loss scaler), and the schedule advanced."""
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
