"""Pure PyTorch forward paths of an ACM (Adaptive Computation Module) with prefix-ordered learners.

An ACM with N learners of width ``w`` is one MLP whose hidden width varies per token: token t, running
k_t ∈ {0..N} learners, computes

    y_t = W2[:, :k_t·w] · act(W1[:k_t·w, :] · x_t + b1[:k_t·w])        (no output bias; k_t = 0 → y_t = 0)

with nn.Linear conventions: ``w1`` [N·w, d], ``b1`` [N·w] (or None), ``w2`` [d, N·w]; learner n owns hidden
units [n·w, (n+1)·w).  ``activation`` is "gelu" (exact erf GELU, as ``nn.GELU()``), "relu" or "none"
(low-rank projection learners d→r→d).

All paths share the signature ``f(x [T, d], k [T] long, w1, b1, w2, width, activation="gelu") -> [T, d]``:

- :func:`acm_masked`: every token computes all N·w hidden units; units ≥ k_t·w are zeroed (training path,
  dense cost T·N·w·d·2 MACs).
- :func:`acm_naive`: loop over learners, gather the tokens with k > n, compute that learner's slice,
  ``index_add_`` back (Σ_t k_t·w·d·2 MACs, N small GEMM pairs).
- :func:`acm_sorted`: the inference path.  Tokens are sorted by k (descending, stable); each group of
  equal k is a contiguous block of rows and runs ONE dense GEMM pair with the weights sliced to k·w hidden
  units (Σ_t k_t·w·d·2 MACs, at most N GEMM pairs, no work for k = 0 tokens); outputs are written back in
  the original token order.  A token's output depends only on its own row (batch-invariant up to the
  rounding of a GEMM run on a different number of rows).
  **Host syncs**: the group sizes come back to the host (``bincount(...).tolist()``) to slice the rows and
  size the GEMMs; that is one device→host synchronisation per call.  The Triton kernel
  (:mod:`methods.acm.kernels.acm_triton`) avoids it: grouping happens on device and the grid is sized from
  host-known worst cases.
- :func:`acm_prefix`: tokens sorted by k; learner n runs on the contiguous prefix of tokens with k > n
  (N GEMM pairs with many rows, accumulated in place): the same work as the sorted path in shapes a CPU
  runs faster when the groups are small.  :func:`acm_cpu` picks one of the two from the group sizes.
- :func:`acm_reference_fp64`: a per-token float64 reference for tests.

:func:`random_k` draws learner counts with a given mean executed fraction (for benchmarks and tests).
"""

from __future__ import annotations

import importlib.util
import os

import torch
import torch.nn.functional as F
from torch import Tensor

ACTIVATIONS = ("gelu", "relu", "none")


def triton_available() -> bool:
    """True when Triton is installed and can run here: on a CUDA device, or on CPU through the
    interpreter (``TRITON_INTERPRET=1``).  Does not import triton."""
    if importlib.util.find_spec("triton") is None:
        return False
    return torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") == "1"


def _act(h: Tensor, activation: str) -> Tensor:
    if activation == "gelu":
        return F.gelu(h)
    if activation == "relu":
        return F.relu(h)
    if activation == "none":
        return h
    raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")


def check_shapes(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int) -> int:
    """Validate shapes; return the number of learners N."""
    if x.dim() != 2 or k.dim() != 1 or k.shape[0] != x.shape[0]:
        raise ValueError(f"expected x [T, d] and k [T]; got {tuple(x.shape)} and {tuple(k.shape)}")
    hidden, d = w1.shape
    if width <= 0 or hidden % width:
        raise ValueError(f"w1 has {hidden} hidden units, not a multiple of width {width}")
    if x.shape[1] != d or tuple(w2.shape) != (d, hidden):
        raise ValueError(f"shape mismatch: x {tuple(x.shape)}, w1 {tuple(w1.shape)}, w2 {tuple(w2.shape)}")
    if b1 is not None and tuple(b1.shape) != (hidden,):
        raise ValueError(f"b1 must have shape ({hidden},); got {tuple(b1.shape)}")
    return hidden // width


def acm_masked(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int,
               activation: str = "gelu") -> Tensor:
    """All N·w hidden units for every token, units ≥ k_t·w zeroed after the activation (dense cost)."""
    n = check_shapes(x, k, w1, b1, w2, width)
    h = _act(F.linear(x, w1, b1), activation)
    keep = torch.arange(n * width, device=x.device) < (k.to(x.device) * width).unsqueeze(1)
    return F.linear(h * keep.to(h.dtype), w2)


def acm_naive(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int,
              activation: str = "gelu") -> Tensor:
    """Loop over learners: gather tokens with k > n, run learner n's slice, ``index_add_`` back."""
    n_learners = check_shapes(x, k, w1, b1, w2, width)
    y = torch.zeros_like(x)
    k = k.to(x.device)
    for n in range(n_learners):
        idx = torch.nonzero(k > n).squeeze(1)
        lo, hi = n * width, (n + 1) * width
        h = _act(F.linear(x.index_select(0, idx), w1[lo:hi], None if b1 is None else b1[lo:hi]), activation)
        y.index_add_(0, idx, F.linear(h, w2[:, lo:hi]))
    return y


def acm_sorted(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int,
               activation: str = "gelu") -> Tensor:
    """Sort tokens by k; one GEMM pair per group of equal k with weights sliced to k·w hidden units.

    One host sync: the group sizes (``bincount``) are brought to the host to slice rows.  Tokens with
    k = 0 are never gathered nor computed: their output rows are zero-filled.  When every token has the
    same k the sort, gather and scatter are skipped (one GEMM pair on x as it is).
    """
    n_learners = check_shapes(x, k, w1, b1, w2, width)
    k = k.to(x.device)
    sizes = torch.bincount(k, minlength=n_learners + 1).tolist()  # host sync (the Triton path avoids it)
    return _sorted(x, k, w1, b1, w2, width, activation, sizes)


def _sorted(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int, activation: str,
            sizes: list[int]) -> Tensor:
    n_learners = len(sizes) - 1
    T = len(k)
    if sizes[0] == T:  # nothing runs
        return torch.zeros_like(x)
    if max(sizes) == T:  # one group holds every token: no gather/scatter needed
        hidden = sizes.index(T) * width
        h = _act(F.linear(x, w1[:hidden], None if b1 is None else b1[:hidden]), activation)
        return F.linear(h, w2[:, :hidden])
    active = T - sizes[0]
    order = torch.argsort(k, descending=True, stable=True)
    xs = x.index_select(0, order[:active])  # descending k: the k = 0 tokens come last, never gathered
    ys = x.new_empty(x.shape)  # rows in sorted order; rows [active:] are the k = 0 tokens' zeros
    ys[active:] = 0
    start = 0
    for kk in range(n_learners, 0, -1):
        size = sizes[kk]
        if size == 0:
            continue
        hidden = kk * width
        rows = slice(start, start + size)
        h = _act(F.linear(xs[rows], w1[:hidden], None if b1 is None else b1[:hidden]), activation)
        torch.mm(h, w2[:, :hidden].t(), out=ys[rows])
        start += size
    return _unsort(ys, order)


def acm_prefix(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int,
               activation: str = "gelu") -> Tensor:
    """Sort tokens by k (descending); learner n runs on the row PREFIX of the tokens with k > n: one GEMM
    pair per learner on weights sliced to its w hidden units, accumulated in place (``addmm_``).

    Same work as :func:`acm_sorted` (Σ_t k_t·w·d·2 MACs, nothing for k = 0 tokens) arranged the other way:
    a group GEMM of :func:`acm_sorted` has as many rows as tokens with exactly that k (at a fraction of
    0.5, N = 4 and 197 tokens: 12 to 74 rows) and k·w columns, while learner n's GEMM has every token
    with k > n as rows (185, 135, 61 and 12 rows there) and w columns; small-row GEMMs run far below peak
    on a CPU, which made the sorted path lose to this one at batch 1 (measured on one ViT-B MLP ACM,
    one thread, k ~ Binomial(4, 0.5): 0.65 of the dense MLP's time here vs 0.88 sorted).  No gather per
    learner: a prefix of the sorted rows is a contiguous view.  One host sync (the group sizes), like the
    sorted path; every token computing the same k takes the sorted path's single-GEMM shortcut.
    """
    n_learners = check_shapes(x, k, w1, b1, w2, width)
    k = k.to(x.device)
    sizes = torch.bincount(k, minlength=n_learners + 1).tolist()  # host sync
    return _prefix(x, k, w1, b1, w2, width, activation, sizes)


def _prefix(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int, activation: str,
            sizes: list[int]) -> Tensor:
    n_learners = len(sizes) - 1
    T = len(k)
    if sizes[0] == T or max(sizes) == T:  # nothing runs, or one group: the sorted path's shortcuts
        return _sorted(x, k, w1, b1, w2, width, activation, sizes)
    active = T - sizes[0]
    order = torch.argsort(k, descending=True, stable=True)
    xs = x.index_select(0, order if active == T else order[:active])
    ys = x.new_empty(x.shape)  # sorted order
    if active < T:
        ys[active:] = 0  # the k = 0 tokens
    # every learner's weights as views made in one call per tensor (not three slices per learner: at small
    # sizes the operator calls, not the MACs, set the time)
    up = w1.view(n_learners, width, -1).unbind(0)  # [w, d] each
    bias = [None] * n_learners if b1 is None else b1.view(n_learners, width).unbind(0)
    down = w2.t().view(n_learners, width, -1).unbind(0)  # [w, d] each: learner n's columns of w2, transposed
    rows = active
    for n in range(n_learners):
        if rows == 0:
            break
        part = xs if rows == T else xs[:rows]
        h = _act(F.linear(part, up[n], bias[n]), activation)
        if n == 0:  # every active token runs learner 0: it initialises the rows (no zero fill)
            torch.mm(h, down[n], out=ys if rows == T else ys[:rows])
        else:
            (ys if rows == T else ys[:rows]).addmm_(h, down[n])
        rows -= sizes[n + 1]  # tokens with k = n + 1 stop after learner n
    return _unsort(ys, order)


def _unsort(ys: Tensor, order: Tensor) -> Tensor:
    """Rows in sorted order (``ys[i]`` belongs to token ``order[i]``) back in token order, by a gather with the
    inverse permutation: a row gather is much faster on a CPU than the scatter ``index_copy_`` (0.08 vs 0.39 ms
    per ViT-B ACM call at batch 1; at batch 32, two threads, the scatter took 205 of 4,214 ms per forward), and
    it moves the same values."""
    return ys.index_select(0, torch.argsort(order))


SMALL_GROUP = 128  # rows: a group GEMM below this runs far below a CPU's GEMM peak


def acm_cpu(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int,
            activation: str = "gelu") -> Tensor:
    """The CPU inference path: :func:`acm_prefix` when some group of equal k >= 1 has fewer than
    ``SMALL_GROUP`` tokens (a batch of one ViT-B image: every group), else :func:`acm_sorted` (large
    batches: every group GEMM is large; measured there the two are within noise of each other, the sorted
    path ahead at low fractions).  Same work either way; one host sync (the group sizes)."""
    n_learners = check_shapes(x, k, w1, b1, w2, width)
    k = k.to(x.device)
    sizes = torch.bincount(k, minlength=n_learners + 1).tolist()  # host sync
    small = any(0 < size < SMALL_GROUP for size in sizes[1:])
    return (_prefix if small else _sorted)(x, k, w1, b1, w2, width, activation, sizes)


def acm_reference_fp64(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int,
                       activation: str = "gelu") -> Tensor:
    """Per-token float64 reference (slow; tests only).  Returns float64 on x's device."""
    check_shapes(x, k, w1, b1, w2, width)
    xd, w1d, w2d = x.double(), w1.double(), w2.double()
    b1d = None if b1 is None else b1.double()
    y = torch.zeros_like(xd)
    for t, kt in enumerate(k.tolist()):
        if kt == 0:
            continue
        hidden = kt * width
        h = w1d[:hidden] @ xd[t]
        if b1d is not None:
            h = h + b1d[:hidden]
        y[t] = w2d[:, :hidden] @ _act(h, activation)
    return y


def random_k(T: int, N: int, fraction: float, generator: torch.Generator | None = None,
             mode: str = "iid", device: torch.device | str = "cpu") -> Tensor:
    """Learner counts k [T] (int64) in {0..N} with mean k/N ≈ ``fraction``.

    - ``"iid"``: each learner of each token runs independently with probability ``fraction``, i.e.
      k_t ~ Binomial(N, fraction): E[k]/N = fraction exactly, and every group size 0..N occurs (the
      sorted path and the kernel see ragged groups, as with a real gate).
    - ``"equal"``: (almost) all tokens get the same k.  When fraction·N is an integer every token gets
      it; otherwise the two adjacent values floor/ceil are mixed deterministically and evenly over the
      tokens (Bresenham) so that Σk = round(fraction·N·T) exactly.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1]; got {fraction}")
    if mode == "iid":
        probs = torch.full((T, N), float(fraction), dtype=torch.float64)
        k = torch.bernoulli(probs, generator=generator).sum(dim=1).long()
    elif mode == "equal":
        total = round(fraction * N * T)
        t = torch.arange(T + 1, dtype=torch.int64)
        cum = (t * total) // max(T, 1)
        k = cum[1:] - cum[:-1]
    else:
        raise ValueError(f"unknown k mode {mode!r}; expected 'iid' or 'equal'")
    return k.to(device)
