"""One resumable training loop for every stage of every method (Adam, cosine schedule, tqdm).

A stage writes ``<ckpt>.partial.pt`` every ``save_every_s`` seconds and on Ctrl-C, and the final weights
to ``<ckpt>`` when done.  Calling :func:`fit` again with the same checkpoint path resumes from the last
partial state (model, optimizer, step, elapsed time); a finished stage just loads its weights.  Data
comes from ``batch_fn(step)``, which is deterministic in the step, so a resumed run sees the same
batches it would have seen without the interruption.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch
from torch import Tensor, nn
from tqdm import tqdm

from bench.api import Batch
from bench.checkpoints import Interrupted, atomic_save, load_final, load_partial, read


@dataclass
class FitResult:
    steps: int
    time_s: float
    final_loss: float
    resumed_from: int


def _partial(path: Path) -> Path:
    return path.with_name(path.name.replace(".pt", "") + ".partial.pt")


def is_done(ckpt: Path) -> bool:
    return read(Path(ckpt), ("model",)) is not None  # an unusable checkpoint is moved aside: not done


def fit(model: nn.Module, batch_fn: Callable[[int], Batch], loss_fn: Callable[[nn.Module, Batch], Tensor],
        *, steps: int, lr: float, ckpt: Path, desc: str, params: Iterable[nn.Parameter] | None = None,
        weight_decay: float = 0.0, grad_clip: float | None = 1.0, warmup: int = 0,
        device: str = "cpu", save_every_s: float = 60.0, stop_after: int | None = None,
        before_step: Callable[[int], None] | None = None) -> FitResult:
    """Train ``model`` for ``steps`` Adam steps on ``loss_fn(model, batch_fn(step))``; resumable.

    ``before_step(step)`` runs before each step's batch is drawn (the protocol seeds the step's randomness
    there, so a resumed run draws what an uninterrupted one would).

    ``stop_after`` (tests): raise KeyboardInterrupt after that many steps of this call, as Ctrl-C would.
    """
    ckpt = Path(ckpt)
    state = load_final(ckpt, model, device)
    if state is not None:
        return FitResult(state["steps"], state["time_s"], state["final_loss"], state["steps"])
    params = [p for p in (params if params is not None else model.parameters()) if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay) if weight_decay else \
        torch.optim.Adam(params, lr=lr)

    def factor(step: int) -> float:  # linear warm-up, then cosine to zero
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    start, elapsed, loss_ema = 0, 0.0, float("nan")
    partial = _partial(ckpt)
    state = load_partial(partial, model, optimizer, scheduler, device)
    if state is not None:
        start, elapsed, loss_ema = state["step"], state["time_s"], state["loss_ema"]

    def save_partial(step: int) -> None:
        atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "scheduler": scheduler.state_dict(), "step": step, "time_s": elapsed,
                     "loss_ema": loss_ema}, partial)

    model.train()
    step = start
    last_save = time.perf_counter()
    progress = tqdm(total=steps, initial=start, desc=desc, leave=False, dynamic_ncols=True,
                    disable=os.environ.get("BENCH_QUIET") == "1")
    try:
        while step < steps:
            t0 = time.perf_counter()
            if before_step is not None:
                before_step(step)
            batch = batch_fn(step).to(device)
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if grad_clip:
                torch.nn.utils.clip_grad_norm_(params, grad_clip)
            optimizer.step()
            scheduler.step()
            step += 1
            elapsed += time.perf_counter() - t0
            value = float(loss.detach())
            loss_ema = value if math.isnan(loss_ema) else 0.98 * loss_ema + 0.02 * value
            progress.update(1)
            if step % 50 == 0:
                progress.set_postfix(loss=f"{loss_ema:.4f}")
            if time.perf_counter() - last_save > save_every_s:
                save_partial(step)
                last_save = time.perf_counter()
            if stop_after is not None and step - start >= stop_after and step < steps:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        save_partial(step)
        progress.close()
        raise Interrupted(desc, step, steps, partial) from None
    progress.close()
    model.eval()
    atomic_save({"model": model.state_dict(), "steps": steps, "time_s": elapsed, "final_loss": loss_ema}, ckpt)
    if partial.exists():
        partial.unlink()
    return FitResult(steps, elapsed, loss_ema, start)
