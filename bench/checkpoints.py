"""Cached training checkpoints: atomic writes, checked reads, and an interrupted stage.

A stage's checkpoints live in the cache (``<stage>.pt`` when finished, ``<stage>.partial.pt`` while it can
be resumed; see :mod:`bench.train`).  Choices:

* **Writes are atomic and leave nothing half-written.**  A checkpoint is written under a temporary name in
  its directory and renamed into place (``os.replace`` is atomic on POSIX); if the write fails or is
  interrupted (Ctrl-C), the temporary file is removed.
* **An unusable checkpoint is never a traceback.**  A file that ``torch.load`` cannot read (truncated,
  empty, not a checkpoint), that lacks the entries a stage writes, or whose tensors do not fit the model
  (names or shapes) is named in one warning line and moved aside to ``<name>.corrupt-<UTC time>`` (kept for
  inspection, never read again); the caller then trains the stage again (from step 0 for a partial
  checkpoint).  Nothing is loaded into the model or the optimizer before the whole checkpoint has been
  checked, so the retraining starts from the same initial weights as a first run.  A checkpoint that
  cannot be moved aside, or that cannot be read at all (e.g. no permission), is a :class:`UserError` whose
  one line says what to do.
* **Ctrl-C during a stage** raises :class:`Interrupted` (a ``KeyboardInterrupt``), which carries the step
  reached and the partial checkpoint it saved, so the command line can say both in one line.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Iterable

import torch
from torch import nn

from bench.errors import UserError, disk_full, is_disk_full

log = logging.getLogger("bench")

FINAL_KEYS = ("model", "steps", "time_s", "final_loss")
PARTIAL_KEYS = ("model", "optimizer", "scheduler", "step", "time_s", "loss_ema")


PARTIAL_SUFFIX = ".partial.pt"  # a stage's resumable checkpoint beside its finished ``.pt``


def partial_path(path: Path) -> Path:
    """The resumable checkpoint of the stage whose finished checkpoint is ``path`` (``<stage>.partial.pt``)."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(".pt") + PARTIAL_SUFFIX)


def stage_of(path: Path) -> Path:
    """The finished checkpoint ``<stage>.pt`` that a ``<stage>.partial.pt`` belongs to, in the same folder (the
    inverse of :func:`partial_path`); a finished checkpoint is returned as it is."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(PARTIAL_SUFFIX) + ".pt") if path.name.endswith(PARTIAL_SUFFIX) \
        else path


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a training stage, after its partial checkpoint was saved."""

    def __init__(self, stage: str, step: int, steps: int, checkpoint: Path):
        super().__init__(f"{stage}: interrupted at step {step} of {steps}; saved {checkpoint}")
        self.stage, self.step, self.steps, self.checkpoint = stage, step, steps, Path(checkpoint)


def _tensor_bytes(obj: Any) -> int:
    """The bytes of the tensors in a (nested) checkpoint: about what ``torch.save`` writes."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` to ``path`` through a temporary file that never outlives a failed or interrupted write.

    A write that finds no space is a :class:`UserError` naming the file and the space needed; whatever was
    at ``path`` before (the previous checkpoint) is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        needed = _tensor_bytes(obj)
        if isinstance(err, (OSError, RuntimeError)) and is_disk_full(err, path, needed):
            raise disk_full(path, needed) from None
        raise


def _first_line(err: BaseException) -> str:
    text = " ".join(str(err).split()).split(". ")[0] or "no message"  # torch appends paragraphs of advice
    return f"{type(err).__name__}: {text[:160]}"


def move_aside(path: Path, reason: str) -> Path:
    """Rename an unusable checkpoint to ``<name>.corrupt-<UTC time>`` and say so in one warning line."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.corrupt-{stamp}-{n}"), n + 1
    try:
        os.replace(path, target)
    except FileNotFoundError:  # another job sharing the cache moved it aside first
        return target
    except OSError as err:
        raise UserError(f"checkpoint {path} is unusable ({reason}) and cannot be moved aside "
                        f"({err.strerror or type(err).__name__}); delete it (rm '{path}') and run the same "
                        "command again to retrain it") from None
    log.warning("checkpoint %s is unusable (%s); moved it to %s and training this stage again",
                path, reason, target.name)
    return target


def read(path: Path, keys: Iterable[str], device: str = "cpu") -> dict | None:
    """The checkpoint at ``path`` with (at least) ``keys``; None if there is none or it was unusable.

    An unreadable or incomplete file is moved aside (:func:`move_aside`) and None returned, so the caller
    trains again.  A file the process may not read at all is a :class:`UserError` (moving it would not help).
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location=device, weights_only=False)
    except FileNotFoundError:  # moved aside by another job sharing the cache since the check above
        return None
    except OSError as err:
        if isinstance(err, (PermissionError, IsADirectoryError)):
            raise UserError(f"cannot read checkpoint {path} ({err.strerror or type(err).__name__}); make it "
                            f"readable, or delete it (rm '{path}') to retrain that stage") from None
        move_aside(path, _first_line(err))
        return None
    except Exception as err:  # torch.load/unpickling raise many types for a truncated or foreign file
        move_aside(path, _first_line(err))
        return None
    missing = [k for k in keys if not isinstance(state, dict) or k not in state]
    if missing:
        move_aside(path, f"not a stage checkpoint: no {', '.join(missing)}")
        return None
    return state


def _misfit(model: nn.Module, weights: Any) -> str | None:
    """Why ``weights`` cannot be loaded into ``model`` (names, shapes), or None if they fit exactly."""
    if not isinstance(weights, dict):
        return "its weights are not a state dict"
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(weights)), sorted(set(weights) - set(own))
    if missing or unexpected:
        return (f"its weights do not fit this model (missing {', '.join(missing[:3]) or 'none'}; "
                f"unexpected {', '.join(unexpected[:3]) or 'none'})")
    for name, tensor in own.items():
        other = weights[name]
        if not isinstance(other, torch.Tensor) or other.shape != tensor.shape:
            shape = tuple(other.shape) if isinstance(other, torch.Tensor) else type(other).__name__
            return f"its weights do not fit this model ({name}: {shape}, expected {tuple(tensor.shape)})"
    return None


def load_final(path: Path, model: nn.Module, device: str = "cpu") -> dict | None:
    """Load a finished stage's weights into ``model``; returns the checkpoint, or None (train the stage)."""
    state = read(path, FINAL_KEYS, device)
    if state is None:
        return None
    problem = _misfit(model, state["model"])
    if problem:
        move_aside(Path(path), problem)
        return None
    model.load_state_dict(state["model"])
    return state


def load_partial(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                 device: str = "cpu") -> dict | None:
    """Restore an interrupted stage (model, optimizer, schedule); returns the checkpoint, or None (start at 0).

    The optimizer state is loaded first: ``Optimizer.load_state_dict`` checks the parameter groups before it
    changes anything, so a checkpoint that fails there leaves model and optimizer untouched.
    """
    state = read(path, PARTIAL_KEYS, device)
    if state is None:
        return None
    problem = _misfit(model, state["model"])
    if problem is None and not isinstance(state["step"], int):
        problem = f"its step is {state['step']!r}, not an integer"
    if problem is None:
        try:
            optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, TypeError) as err:
            problem = f"its optimizer state does not fit this stage ({_first_line(err)})"
    if problem:
        move_aside(Path(path), problem)
        return None
    model.load_state_dict(state["model"])
    scheduler.load_state_dict(state["scheduler"])
    log.info("resuming %s from step %d (%s)", Path(path).name, state["step"], path)
    return state
