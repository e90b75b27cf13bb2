"""The ACM forward paths as PyTorch operators: ``torch.ops.bench.acm_triton`` and ``torch.ops.bench.acm_sorted``.

Why operators (``torch.library.custom_op``):

- **The MAC counter sees them.**  The dispatch-level counter (:mod:`bench.cost`) counts aten ops; a Triton
  launch is invisible to it.  An operator is dispatched like an aten op, and importing this module
  registers a formula for both operators with :func:`bench.cost.register_op`: it receives the actual
  arguments and returns 2·w·d MACs per executed learner, from the executed k (clamped to [0, N] exactly
  as the kernels clamp).  ``k.sum()`` is read back to the host *inside the counting phase only*: the
  formula runs only while a counter is active, never on a timed call.  The counter therefore matches the
  decision log (Σ k·(2·w·d) per layer) on both paths; tests check it.
- **torch.compile** traces each operator as one opaque node through its fake (meta) implementation
  (output: a new tensor of x's shape and dtype), so neither the sorted path's host sync nor the Triton
  launch breaks the graph.  ``torch.library.opcheck`` checks the registrations.
- **CUDA graphs**: ``acm_triton`` has no host sync by construction (see :mod:`methods.acm.kernels.acm_triton`);
  ``acm_sorted`` reads group sizes back to the host and cannot be captured.

Neither operator has an autograd formula: both are inference paths (the ACM layer trains through the
masked or ``acm_naive`` paths).  Weights of ``acm_triton`` are [K, N] operands (``w_up`` = W1ᵀ,
``w_down`` = W2ᵀ, any strides); ``acm_sorted`` takes nn.Linear weights as the PyTorch paths do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
from torch import Tensor

from bench.cost import register_op
from methods.acm.kernels.acm_torch import acm_sorted

if TYPE_CHECKING:
    from methods.acm.kernels.acm_triton import ACMWeights


@torch.library.custom_op("bench::acm_triton", mutates_args=())
def acm_triton_op(x: Tensor, k: Tensor, w_up: Tensor, b1: Optional[Tensor], w_down: Tensor, width: int,
                  activation: str, gather_x: bool) -> Tensor:
    """Triton ACM forward; weights as [K, N] operands (w_up [d, N·w], w_down [N·w, d])."""
    from methods.acm.kernels.acm_triton import acm_triton_forward

    return acm_triton_forward(x, k, w_up, b1, w_down, width, activation, gather_x)


@acm_triton_op.register_fake
def _acm_triton_fake(x, k, w_up, b1, w_down, width, activation, gather_x):
    return x.new_empty(x.shape)


@torch.library.custom_op("bench::acm_sorted", mutates_args=())
def acm_sorted_op(x: Tensor, k: Tensor, w1: Tensor, b1: Optional[Tensor], w2: Tensor, width: int,
                  activation: str) -> Tensor:
    """The sorted PyTorch ACM forward (nn.Linear weights) as one operator."""
    return acm_sorted(x, k, w1, b1, w2, width, activation)


@acm_sorted_op.register_fake
def _acm_sorted_fake(x, k, w1, b1, w2, width, activation):
    return x.new_empty(x.shape)


def executed_macs(k: Tensor, width: int, d: int, n_learners: int) -> int:
    """MACs of one ACM forward: Σ_t k_t (clamped to [0, N]) × 2·w·d (up and down GEMMs).  Host sync."""
    return int(k.clamp(0, n_learners).sum()) * 2 * width * d


def _acm_triton_macs(x, k, w_up, b1, w_down, width, activation, gather_x) -> int:
    return executed_macs(k, width, x.shape[1], w_up.shape[1] // width)


def _acm_sorted_macs(x, k, w1, b1, w2, width, activation) -> int:
    return executed_macs(k, width, x.shape[1], w1.shape[0] // width)


register_op(torch.ops.bench.acm_triton, _acm_triton_macs)
register_op(torch.ops.bench.acm_sorted, _acm_sorted_macs)


# --- the Triton path's entry points (the operator above, on nn.Linear weights or prepared ones) ---------
def acm_triton(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int,
               activation: str = "gelu") -> Tensor:
    """ACM forward with the Triton kernels (CUDA tensors, or CPU tensors under TRITON_INTERPRET=1), through
    the ``bench::acm_triton`` operator (counted by the MAC counter, opaque to torch.compile).

    Same signature as the PyTorch paths (nn.Linear weights: w1 [N·w, d], w2 [d, N·w]; passed as
    transposed views, no copy).  ``k`` is clamped to [0, N] on device (no validation: a host sync)."""
    return acm_triton_op(x, k, w1.t(), b1, w2.t(), width, activation, True)


def acm_triton_prepared(x: Tensor, k: Tensor, weights: ACMWeights, width: int, activation: str = "gelu",
                        gather_x: bool = True) -> Tensor:
    """ACM forward on weights laid out once by :func:`prepare_weights` (through the operator)."""
    return acm_triton_op(x, k, weights.w_up, weights.b1, weights.w_down, width, activation, gather_x)
