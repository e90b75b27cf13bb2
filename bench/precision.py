"""Numeric precision of training, evaluation, counting and timing: ``precision=fp32|bf16|fp16``.

fp32 runs as before (no autocast).  bf16 and fp16 run the forward passes under ``torch.autocast`` on the
run's device type (CUDA or CPU): matmuls, convolutions and attention in the low-precision dtype, weights
and optimizer state in fp32.  fp16 training scales the loss with ``torch.amp.GradScaler`` (bf16 has fp32's
exponent range and needs none).  Rows record the precision and the dtype under which evaluation, the MAC
counter and the timer ran (MACs do not depend on the dtype; latency does).
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
VALID = tuple(DTYPES)


def dtype_name(precision: str) -> str:
    """The compute dtype's name as a row states it, e.g. ``bfloat16``."""
    return str(DTYPES[precision]).replace("torch.", "")


def autocast(precision: str, device: str) -> ContextManager:
    """The autocast context of ``precision`` on ``device`` (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=DTYPES[precision])


def grad_scaler(precision: str, device: str) -> torch.amp.GradScaler:
    """A GradScaler that is enabled only for fp16 (disabled, it passes losses and steps through)."""
    return torch.amp.GradScaler(torch.device(device).type, enabled=precision == "fp16")
