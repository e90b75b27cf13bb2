"""Numeric precision of training, evaluation, counting and timing: ``precision=fp32|bf16|fp16``.

fp32 runs as before (no autocast, no casts).

* **Training** with bf16 or fp16 runs the loss under ``torch.autocast`` on the run's device type (CUDA or
  CPU): matmuls, convolutions and attention in the low-precision dtype, norms and softmax in fp32, master
  weights and optimizer state in fp32 (mixed precision).  fp16 scales the loss with
  ``torch.amp.GradScaler`` (bf16 has fp32's exponent range and needs none), with a fused Adam that takes the
  scaler's inf check on the device (bench/train.py), so no step waits for the host.
* **Evaluation, the MAC counter and the timer** run the trained model *cast* to the dtype (weights and
  activations in bf16/fp16, floating-point inputs cast on entry), as a model is deployed: the methods' real
  paths scatter results into buffers of their inputs' dtype, which autocast's mixed dtypes would break.
  Rows record the precision and the dtype of the counter and the timer (MACs do not depend on the dtype;
  latency does).
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


def cast_model(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """``model`` with its floating-point parameters and buffers in the dtype (in place; fp32: unchanged)."""
    return model if precision == "fp32" else model.to(DTYPES[precision])


def cast_input(x: torch.Tensor, precision: str) -> torch.Tensor:
    """A floating-point input in the dtype (token ids and masks are left as they are)."""
    return x.to(DTYPES[precision]) if precision != "fp32" and x.is_floating_point() else x


def needs_scaler(precision: str) -> bool:
    """fp16 alone needs loss scaling (bf16 has fp32's exponent range)."""
    return precision == "fp16"


def grad_scaler(precision: str, device: str) -> torch.amp.GradScaler:
    """A GradScaler that is enabled only for fp16 (disabled, it passes losses and steps through)."""
    return torch.amp.GradScaler(torch.device(device).type, enabled=needs_scaler(precision))
