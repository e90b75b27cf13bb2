"""The ``device`` a run trains, evaluates and times on: its spelling and its availability (no torch at import).

Valid values are ``cpu``, ``cuda`` (the current CUDA device) and ``cuda:N`` (CUDA device N, counted from 0),
the torch device strings that this harness supports.  The spelling is checked with the rest of the config;
availability is checked before any work starts (the CLI checks every job of a sweep before Hydra runs
any; :func:`bench.paths.check_run_outputs` checks it again at the start of ``runner.run`` for launcher
jobs and Python callers), so a run on a machine without that device never trains first and fails later.
Only a CUDA device imports torch.
"""

from __future__ import annotations

import re

from bench.errors import UserError

VALID = "cpu, cuda (the current CUDA device) or cuda:N (CUDA device N, counted from 0)"
_PATTERN = re.compile(r"cpu|cuda(:[0-9]+)?")


def spelling_problem(device: object) -> str | None:
    """One line saying why ``device`` is not a valid device string, or None."""
    if isinstance(device, str) and _PATTERN.fullmatch(device):
        return None
    return f"device={device!r} is not a valid device; use {VALID}"


def check_available(device: str) -> None:
    """Raise :class:`UserError` (one line) unless ``device`` is valid and present on this machine."""
    problem = spelling_problem(device)
    if problem:
        raise UserError(problem)
    if device == "cpu":
        return
    import torch

    if not torch.cuda.is_available():
        why = "this torch build has no CUDA support" if torch.version.cuda is None \
            else "no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES)"
        raise UserError(f"device={device}: {why} (torch {torch.__version__}); use device=cpu")
    count = torch.cuda.device_count()
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= count:
        raise UserError(f"device={device}: this machine has {count} CUDA device(s), "
                        f"cuda:0 to cuda:{count - 1}; use one of those or device=cpu")
