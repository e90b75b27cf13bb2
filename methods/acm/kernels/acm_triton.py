"""Triton inference forward of an ACM layer (prefix-ordered learners = one MLP with per-token width).

    y_t = W2[:, :k_t·w] · act(W1[:k_t·w, :] · x_t + b1[:k_t·w])          (k_t = 0 → y_t = 0)

Layout and semantics as in :mod:`methods.acm.kernels.acm_torch` (same signature as its paths).

How it runs (no host synchronisation anywhere on this path once a shape has been tuned):

1. Grouping, on device, by a counting sort (:func:`group_tokens`): one program per 128 tokens writes its
   block's histogram of k (clamped to [0, N] in the kernel); ``torch.cumsum`` over the blocks gives every
   block the number of earlier tokens of each k and the totals ``counts[j]`` = number of tokens with
   k = j; a second kernel gives every token its position = start of its group (groups in descending k)
   + earlier tokens of its k in earlier blocks + its rank within its block (a cumulative sum of one-hot
   rows), and writes ``order[position] = token`` (int32).  Stable and deterministic; no argsort, no int64
   keys, no ``bincount`` (which reads ``max(k)`` back to the host on CUDA).  Sorted position p holds
   token ``order[p]``; group k = N comes first, k = 0 last.
2. X gathered once into sorted order (``gather_x=True``, the default): the position kernel also copies
   each token's row of X to its sorted position, so kernel 1 reads compact row tiles; ``gather_x=False``
   gathers the rows through ``order`` inside kernel 1's loads instead (every hidden tile re-gathers).
3. Row tiles never mix groups.  Each group is split into ``ceil(count/BLOCK_M)`` row tiles of its own (the
   last one partial, masked); tile starts are NOT padded in memory (rows stay compact), only in tile
   numbering.  A program finds its tile's group by scanning the N + 1 counts (N is a compile-time
   constant; a few scalar ops).  The number of tiles is at most ``cdiv(T, BLOCK_M) + N``: the grid is
   that worst case, known on the host from T and N only; programs with no tile exit at once.
4. Kernel 1 (``_acm_up_kernel``), grid (row tiles, hidden tiles):
   ``H[p, h] = act(X[order[p]] · W1[h] + b1[h])`` for hidden tiles below the tile's group width k·w
   (programs above it exit), bias and activation fused in the epilogue.  H is stored in sorted row
   order, in the input dtype.
5. Kernel 2 (``_acm_down_kernel``), grid (row tiles, output tiles):
   ``Y[order[p], :] = H[p, :k·w] · W2[:, :k·w]ᵀ``, the reduction loop stops at the tile's k·w; the store
   scatters rows back to the ORIGINAL token order.  Tiles of the k = 0 group run an empty loop and store
   zeros, so the output needs no separate zero fill.

Weights: the kernels take the B operands as [K, N] matrices of any strides: ``w_up`` = W1ᵀ [d, N·w] and
``w_down`` = W2ᵀ [N·w, d].  :func:`acm_triton` passes transposed *views* of nn.Linear weights (no copy);
:func:`prepare_weights` lays them out once, contiguous row-major [K, N] (the layout of Triton's GEMM
tutorial and the one a TMA descriptor needs: unit stride on the last dimension), for callers that hold a
prepared model (the kernel benchmark).  Which layout is faster on Hopper has not been measured.

Operator: the forward is registered as ``torch.ops.bench.acm_triton`` (``torch.library.custom_op``) with a
fake (meta) implementation, so ``torch.compile`` traces it as one opaque node (no graph break), and with a
MAC formula registered with :func:`bench.cost.register_op` (:mod:`methods.acm.kernels.acm_ops`): the
dispatch-level counter of :mod:`bench.cost` sees the launch and counts 2·w·d MACs per executed learner, from
the executed k.

CUDA graphs: no host syncs by construction (grid from T and N only, grouping on device, output
allocated by shape), so a warmed-up forward can be captured.  The autotuner benchmarks configurations
(host syncs) on the first call for a new (T, d, N·w, dtype): that first call must happen before capture
(:func:`acm_triton` raises a clear error if it would happen during capture).  Tuning runs on the
full-width workload (every token at k = N, see :func:`_ensure_tuned`), never on whatever k the first call
happens to have: tuning on an f = 0 call, where every tile exits at once, picks the smallest tiles.

Accumulation is fp32 for fp32/fp16/bf16 inputs.  fp32 inputs use exact ("ieee") dot products unless
``torch.backends.cuda.matmul.allow_tf32`` is set (matching what torch's fp32 matmul does).

Interpreter (``TRITON_INTERPRET=1``, read when this module is imported): one fixed launch configuration
(16×16×16 tiles, the minimum that also compiles for a GPU) and no autotuning; bf16 tiles are upcast to fp32
before ``tl.dot`` because the interpreter's bf16 dot is wrong (its fp32→bf16 store also truncates rather
than rounds).  On a GPU, configurations fit for Hopper (H100/H200: 128–256-wide tiles, 64-deep K steps,
3–4 pipeline stages within 228 KB of shared memory, plus smaller tiles for small batches) are autotuned
per (T, d, hidden, dtype); :func:`chosen_configs` reports the choice.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl
from torch import Tensor

from methods.acm.kernels.acm_torch import check_shapes

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

_ACT_CODES = {"none": 0, "relu": 1, "gelu": 2}

# Interpreter / fallback launch configuration (tile sizes ≥ 16 so it compiles for a GPU too).
_INTERP_UP = {"BLOCK_M": 16, "BLOCK_H": 16, "BLOCK_K": 16}
_INTERP_DOWN = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}
_GROUP_BLOCK = 128  # tokens per program of the counting sort
_GATHER_BLOCK_D = 64  # columns per step of the fused X gather


@triton.jit
def _clamped_k(k_ptr, offs, T, stride_k, N_LEARNERS: tl.constexpr):
    """k of tokens ``offs`` clamped to [0, N]; -1 for offsets beyond T."""
    valid = offs < T
    kv = tl.load(k_ptr + offs * stride_k, mask=valid, other=0).to(tl.int32)
    kv = tl.minimum(tl.maximum(kv, 0), N_LEARNERS)
    return tl.where(valid, kv, -1)


@triton.jit
def _block_hist_kernel(k_ptr, hist_ptr, T, stride_k,
                       N_LEARNERS: tl.constexpr, BINS: tl.constexpr, BLOCK: tl.constexpr):
    """hist[b, j] = number of tokens with k = j among tokens [b·BLOCK, (b+1)·BLOCK)."""
    pid = tl.program_id(0)
    bins = tl.arange(0, BINS)
    kv = _clamped_k(k_ptr, pid * BLOCK + tl.arange(0, BLOCK), T, stride_k, N_LEARNERS)
    onehot = (kv[:, None] == bins[None, :]).to(tl.int32)
    tl.store(hist_ptr + pid * BINS + bins, tl.sum(onehot, axis=0))


@triton.jit
def _block_scatter_kernel(k_ptr, hist_ptr, cum_ptr, order_ptr, counts_ptr, x_ptr, xs_ptr,
                          T, D, N_BLOCKS, stride_k, stride_xm, stride_xk, stride_sm, stride_sk,
                          N_LEARNERS: tl.constexpr, BINS: tl.constexpr, BLOCK: tl.constexpr,
                          GATHER: tl.constexpr, BLOCK_D: tl.constexpr):
    """Sorted position of every token of block b, ``order[position] = token``; with ``GATHER`` also
    ``xs[position] = x[token]`` (X gathered once, in the same pass).  ``cum`` = inclusive prefix sums of the
    block histograms over blocks: group j starts at Σ_{j' > j} total[j'] (descending k), and the tokens of
    block b with k = j follow the cum[b−1, j] earlier ones."""
    pid = tl.program_id(0)
    bins = tl.arange(0, BINS)
    total = tl.load(cum_ptr + (N_BLOCKS - 1) * BINS + bins)
    before = tl.load(cum_ptr + pid * BINS + bins) - tl.load(hist_ptr + pid * BINS + bins)
    group_start = tl.sum(total, axis=0) - tl.cumsum(total, axis=0)
    if pid == 0:
        tl.store(counts_ptr + bins, total, mask=bins <= N_LEARNERS)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    valid = offs < T
    kv = _clamped_k(k_ptr, offs, T, stride_k, N_LEARNERS)
    onehot = (kv[:, None] == bins[None, :]).to(tl.int32)
    rank = tl.cumsum(onehot, axis=0) - 1  # rank among this block's tokens of the same k
    pos = tl.sum(onehot * (rank + (group_start + before)[None, :]), axis=1)
    tl.store(order_ptr + pos, offs, mask=valid)
    if GATHER:
        src = offs.to(tl.int64)
        dst = pos.to(tl.int64)
        for d0 in range(0, D, BLOCK_D):
            cols = d0 + tl.arange(0, BLOCK_D)
            m = valid[:, None] & (cols < D)[None, :]
            rows = tl.load(x_ptr + src[:, None] * stride_xm + cols[None, :] * stride_xk, mask=m)
            tl.store(xs_ptr + dst[:, None] * stride_sm + cols[None, :] * stride_sk, rows, mask=m)


def group_tokens(k: Tensor, n_learners: int, x: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """Counting sort on device, no host sync: (order int32 [T], counts int32 [N + 1], xs or None).

    ``order`` = stable permutation of the tokens by descending k (clamped to [0, N]); ``counts[j]`` =
    number of tokens with k = j; with ``x`` [T, d], ``xs`` = x's rows in sorted order (gathered in the same
    pass).  Three launches: per-block histograms (one program per 128 tokens), their prefix sums over blocks
    (``torch.cumsum`` on a [blocks, bins] int32 table), positions and the scatter."""
    T = k.shape[0]
    order = torch.empty(T, dtype=torch.int32, device=k.device)
    counts = torch.empty(n_learners + 1, dtype=torch.int32, device=k.device)
    xs = None if x is None else torch.empty((T, x.shape[1]), dtype=x.dtype, device=x.device)
    if T == 0:
        return order, counts.zero_(), xs
    bins = triton.next_power_of_2(n_learners + 1)
    n_blocks = triton.cdiv(T, _GROUP_BLOCK)
    hist = torch.empty((n_blocks, bins), dtype=torch.int32, device=k.device)
    _block_hist_kernel[(n_blocks,)](k, hist, T, k.stride(0), N_LEARNERS=n_learners, BINS=bins,
                                    BLOCK=_GROUP_BLOCK)
    cum = torch.cumsum(hist, dim=0, dtype=torch.int32)
    gather = x is not None
    x_arg = x if gather else k  # dummy pointers when not gathering, never read
    xs_arg = xs if gather else k
    _block_scatter_kernel[(n_blocks,)](
        k, hist, cum, order, counts, x_arg, xs_arg, T, x.shape[1] if gather else 0, n_blocks, k.stride(0),
        x.stride(0) if gather else 0, x.stride(1) if gather else 0,
        xs.stride(0) if gather else 0, xs.stride(1) if gather else 0,
        N_LEARNERS=n_learners, BINS=bins, BLOCK=_GROUP_BLOCK, GATHER=gather, BLOCK_D=_GATHER_BLOCK_D)
    return order, counts, xs


def group_tokens_reference(k: Tensor, n_learners: int) -> tuple[Tensor, Tensor]:
    """The same grouping with torch ops (a stable int64 argsort; tests compare the kernel with it)."""
    k = k.long().clamp(0, n_learners)
    counts = torch.zeros(n_learners + 1, dtype=torch.int64, device=k.device)
    counts.scatter_add_(0, k, torch.ones_like(k))
    return torch.argsort(k, descending=True, stable=True), counts


# ---------------------------------------------------------------- GEMM kernels


@triton.jit
def _tile_of(pid_m, counts_ptr, N_LEARNERS: tl.constexpr, BLOCK_M: tl.constexpr):
    """(k, first sorted row, end of the group's rows) of row tile ``pid_m``; k = -1 for no tile.

    Groups are in descending k (as the grouping lays them out); group j spans ceil(count_j/BLOCK_M) tiles.
    """
    tile_k = pid_m * 0 - 1
    row_start = pid_m * 0
    row_end = pid_m * 0
    tile_acc = pid_m * 0
    row_acc = pid_m * 0
    for j in tl.static_range(N_LEARNERS + 1):
        kk = N_LEARNERS - j
        c = tl.load(counts_ptr + kk).to(tl.int32)
        nt = (c + BLOCK_M - 1) // BLOCK_M
        found = (pid_m >= tile_acc) & (pid_m < tile_acc + nt)
        tile_k = tl.where(found, kk, tile_k)
        row_start = tl.where(found, row_acc + (pid_m - tile_acc) * BLOCK_M, row_start)
        row_end = tl.where(found, row_acc + c, row_end)
        tile_acc += nt
        row_acc += c
    return tile_k, row_start, row_end


@triton.jit
def _acm_up_kernel(x_ptr, order_ptr, counts_ptr, w1_ptr, b1_ptr, h_ptr,
                   D, WIDTH,
                   stride_xm, stride_xk, stride_w1k, stride_w1h, stride_hm, stride_hh,
                   T, HID,  # autotune keys only
                   N_LEARNERS: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                   GATHERED: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    """H[p, h] = act(X[order[p]] · w_up[:, h] + b1[h]); ``GATHERED``: x already holds the sorted rows."""
    pid_m = tl.program_id(0)
    pid_h = tl.program_id(1)
    tile_k, row_start, row_end = _tile_of(pid_m, counts_ptr, N_LEARNERS, BLOCK_M)
    limit = tile_k * WIDTH
    h0 = pid_h * BLOCK_H
    if h0 >= limit:  # above this group's width, a k = 0 tile, or no tile at all
        return
    rows = row_start + tl.arange(0, BLOCK_M)
    row_mask = rows < row_end
    if GATHERED:
        src = rows.to(tl.int64)
    else:
        src = tl.load(order_ptr + rows, mask=row_mask, other=0).to(tl.int64)
    offs_h = h0 + tl.arange(0, BLOCK_H)
    h_mask = offs_h < limit
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.float32)
    for k0 in range(0, D, BLOCK_K):
        kk = k0 + offs_k
        k_mask = kk < D
        a = tl.load(x_ptr + src[:, None] * stride_xm + kk[None, :] * stride_xk,
                    mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        b = tl.load(w1_ptr + kk[:, None] * stride_w1k + offs_h[None, :] * stride_w1h,
                    mask=k_mask[:, None] & h_mask[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    if HAS_BIAS:  # fused epilogue: bias and activation on the fp32 accumulator
        acc += tl.load(b1_ptr + offs_h, mask=h_mask, other=0.0).to(tl.float32)[None, :]
    if ACT == 2:
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    elif ACT == 1:
        acc = tl.maximum(acc, 0.0)
    tl.store(h_ptr + rows[:, None].to(tl.int64) * stride_hm + offs_h[None, :] * stride_hh,
             acc.to(h_ptr.dtype.element_ty), mask=row_mask[:, None] & h_mask[None, :])


@triton.jit
def _acm_down_kernel(h_ptr, order_ptr, counts_ptr, w2_ptr, y_ptr,
                     D, WIDTH,
                     stride_hm, stride_hh, stride_w2h, stride_w2n, stride_ym, stride_yn,
                     T, HID,  # autotune keys only
                     N_LEARNERS: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Y[order[p], n] = H[p, :k·w] · w_down[:k·w, n] (k = 0 tiles store zeros)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    tile_k, row_start, row_end = _tile_of(pid_m, counts_ptr, N_LEARNERS, BLOCK_M)
    if tile_k < 0:  # beyond the last tile
        return
    limit = tile_k * WIDTH
    rows = row_start + tl.arange(0, BLOCK_M)
    row_mask = rows < row_end
    tok = tl.load(order_ptr + rows, mask=row_mask, other=0).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < D
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for h0 in range(0, limit, BLOCK_K):  # empty for k = 0 tiles: they store zeros
        hh = h0 + offs_k
        hmask = hh < limit
        a = tl.load(h_ptr + rows[:, None].to(tl.int64) * stride_hm + hh[None, :] * stride_hh,
                    mask=row_mask[:, None] & hmask[None, :], other=0.0)
        b = tl.load(w2_ptr + hh[:, None] * stride_w2h + offs_n[None, :] * stride_w2n,
                    mask=hmask[:, None] & n_mask[None, :], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    tl.store(y_ptr + tok[:, None] * stride_ym + offs_n[None, :] * stride_yn,
             acc.to(y_ptr.dtype.element_ty), mask=row_mask[:, None] & n_mask[None, :])


def _configs(names: tuple[str, str, str], shapes) -> list:
    return [triton.Config(dict(zip(names, s[:3])), num_warps=s[3], num_stages=s[4]) for s in shapes]


# GPU autotuning set (BLOCK_M, BLOCK_N-or-H, BLOCK_K, warps, stages), chosen for Hopper (H100/H200, 228 KB
# of shared memory per SM, wgmma on 64-row warpgroups): large tiles with 64-deep K steps and 3–4 stages
# for big batches (128×256×64 × 3 stages = 144 KB of bf16 operands), 128×128 at 4–5 stages, and 64-row
# tiles for small batches, where a group's padding to whole row tiles and the number of programs matter.
_GPU_SHAPES = [
    (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 8, 4),
    (128, 128, 64, 4, 4), (128, 128, 64, 8, 5), (64, 256, 64, 4, 4), (64, 128, 64, 4, 4),
    (128, 64, 64, 4, 4), (64, 64, 64, 4, 4),
]
_TUNE_KEY = ["T", "D", "HID"]  # plus the tensors' dtypes, which triton adds to the key itself

if INTERPRET:
    _up_launch = _acm_up_kernel
    _down_launch = _acm_down_kernel
else:  # pragma: no cover - needs a GPU
    _up_launch = triton.autotune(_configs(("BLOCK_M", "BLOCK_H", "BLOCK_K"), _GPU_SHAPES), key=_TUNE_KEY)(
        _acm_up_kernel)
    _down_launch = triton.autotune(_configs(("BLOCK_M", "BLOCK_N", "BLOCK_K"), _GPU_SHAPES), key=_TUNE_KEY)(
        _acm_down_kernel)


class ACMWeights(NamedTuple):
    """Weights laid out for the kernels: ``w_up`` = W1ᵀ [d, N·w], ``w_down`` = W2ᵀ [N·w, d], ``b1`` [N·w]."""

    w_up: Tensor
    b1: Optional[Tensor]
    w_down: Tensor


def prepare_weights(w1: Tensor, b1: Tensor | None, w2: Tensor, dtype: torch.dtype | None = None) -> ACMWeights:
    """Lay nn.Linear-style weights (w1 [N·w, d], w2 [d, N·w]) out once as contiguous [K, N] operands."""
    dtype = dtype or w1.dtype
    return ACMWeights(w1.detach().t().to(dtype).contiguous(),
                      None if b1 is None else b1.detach().to(dtype).contiguous(),
                      w2.detach().t().to(dtype).contiguous())


# ---------------------------------------------------------------- forward


def _launch(x: Tensor, order: Tensor, counts: Tensor, w_up: Tensor, b1: Tensor | None, w_down: Tensor,
            width: int, activation: str, xs: Tensor | None, y: Tensor) -> None:
    """Run kernels 1 and 2 for a grouping (order, counts); writes y.  ``xs``: x's rows already in sorted
    order (kernel 1 reads them as they are), or None (kernel 1 gathers rows of x through ``order``)."""
    T, d = x.shape
    hid = w_up.shape[1]
    n_learners = hid // width
    h = torch.empty((T, hid), dtype=x.dtype, device=x.device)
    upcast = INTERPRET and x.dtype == torch.bfloat16
    precision = "tf32" if (x.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32) else "ieee"
    b1_arg = b1 if b1 is not None else w_up  # dummy pointer, never read
    gather_x = xs is not None
    xs = xs if gather_x else x

    def up_grid(meta):
        return (triton.cdiv(T, meta["BLOCK_M"]) + n_learners, triton.cdiv(hid, meta["BLOCK_H"]))

    def down_grid(meta):
        return (triton.cdiv(T, meta["BLOCK_M"]) + n_learners, triton.cdiv(d, meta["BLOCK_N"]))

    up_meta = _INTERP_UP if INTERPRET else {}
    down_meta = _INTERP_DOWN if INTERPRET else {}
    _up_launch[up_grid](xs, order, counts, w_up, b1_arg, h, d, width,
                        xs.stride(0), xs.stride(1), w_up.stride(0), w_up.stride(1), h.stride(0), h.stride(1),
                        T, hid,
                        N_LEARNERS=n_learners, HAS_BIAS=b1 is not None, ACT=_ACT_CODES[activation],
                        GATHERED=gather_x, UPCAST=upcast, DOT_PRECISION=precision, **up_meta)
    _down_launch[down_grid](h, order, counts, w_down, y, d, width,
                            h.stride(0), h.stride(1), w_down.stride(0), w_down.stride(1), y.stride(0),
                            y.stride(1), T, hid,
                            N_LEARNERS=n_learners, UPCAST=upcast, DOT_PRECISION=precision, **down_meta)


_TUNED: set[tuple] = set()


def _tune_key(x: Tensor, w_up: Tensor, b1: Tensor | None, w_down: Tensor, width: int, activation: str,
              gather_x: bool) -> tuple:
    return (x.shape[0], x.shape[1], w_up.shape[1], width, x.dtype, x.device, activation, b1 is not None,
            gather_x, w_up.stride(), w_down.stride())


def _ensure_tuned(x: Tensor, w_up: Tensor, b1: Tensor | None, w_down: Tensor, width: int, activation: str,
                  gather_x: bool) -> None:
    """Autotune this shape on the full-width workload (every token at k = N) before its first real call.

    triton's autotuner benchmarks its configurations on the first call for a key and keeps the winner for
    every later call with that key; left to itself it would tune on whatever k that first call has (an
    f = 0 sweep point makes every tile exit at once, and the smallest tiles win)."""
    if INTERPRET:
        return
    key = _tune_key(x, w_up, b1, w_down, width, activation, gather_x)
    if key in _TUNED:
        return
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("acm_triton: this shape was never run before CUDA-graph capture; call it once "
                           "outside the capture first (autotuning synchronizes the device)")
    T, n_learners = x.shape[0], w_up.shape[1] // width
    order = torch.arange(T, dtype=torch.int32, device=x.device)  # every token at k = N: identity order
    counts = torch.zeros(n_learners + 1, dtype=torch.int32, device=x.device)
    counts[n_learners] = T
    _launch(x, order, counts, w_up, b1, w_down, width, activation, x if gather_x else None, torch.empty_like(x))
    _TUNED.add(key)


def chosen_configs() -> dict[str, str]:  # pragma: no cover - needs a GPU
    """The autotuner's last chosen configuration of each kernel ("" when interpreting or not tuned)."""
    out = {}
    for name, launcher in (("up", _up_launch), ("down", _down_launch)):
        best = getattr(launcher, "best_config", None)
        out[name] = "" if best is None else (
            "x".join(str(v) for v in best.kwargs.values()) + f" w{best.num_warps} s{best.num_stages}")
    return out


def acm_triton_forward(x: Tensor, k: Tensor, w_up: Tensor, b1: Tensor | None, w_down: Tensor, width: int,
                       activation: str = "gelu", gather_x: bool = True) -> Tensor:
    """The raw forward (no operator dispatch): weights as [K, N] operands (``w_up`` [d, N·w],
    ``w_down`` [N·w, d], any strides).  ``k`` (any integer dtype) is clamped to [0, N] on device."""
    if w_up.dim() != 2 or w_down.dim() != 2:
        raise ValueError("w_up and w_down must be 2-D")
    check_shapes(x, k, w_up.t(), b1, w_down.t(), width)
    if activation not in _ACT_CODES:
        raise ValueError(f"unknown activation {activation!r}; expected one of {tuple(_ACT_CODES)}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"unsupported dtype {x.dtype}")
    if w_up.dtype != x.dtype or w_down.dtype != x.dtype or (b1 is not None and b1.dtype != x.dtype):
        raise TypeError("x, w1, b1 and w2 must share one dtype")
    n_learners = w_up.shape[1] // width
    y = x.new_empty(x.shape)
    if x.shape[0] == 0:
        return y
    _ensure_tuned(x, w_up, b1, w_down, width, activation, gather_x)
    order, counts, xs = group_tokens(k, n_learners, x if gather_x else None)
    _launch(x, order, counts, w_up, b1, w_down, width, activation, xs, y)
    return y
