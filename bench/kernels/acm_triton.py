"""Triton inference forward of an ACM layer (prefix-ordered learners = one MLP with per-token width).

    y_t = W2[:, :k_t·w] · act(W1[:k_t·w, :] · x_t + b1[:k_t·w])          (k_t = 0 → y_t = 0)

Layout and semantics as in :mod:`bench.kernels.acm_torch` (same signature as its paths).

How it runs (no host synchronisation anywhere on this path):

1. Grouping, on device: ``counts[j]`` = number of tokens with k = j (a ``scatter_add_``; ``torch.bincount``
   is avoided because on CUDA it reads ``max(k)`` back to the host), and ``order`` = a stable argsort of k,
   descending.  Sorted position p holds token ``order[p]``; group k = N comes first, k = 0 last.
2. Row tiles never mix groups.  Each group is split into ``ceil(count/BLOCK_M)`` row tiles of its own (the
   last one partial, masked); tile starts are NOT padded in memory (rows stay compact), only in tile
   numbering.  A program finds its tile's group by scanning the N + 1 counts (N is a compile-time
   constant; a few scalar ops).  The number of tiles is at most ``cdiv(T, BLOCK_M) + N``: the grid is
   that worst case, known on the host from T and N only; programs with no tile exit at once.
3. Kernel 1 (``_acm_up_kernel``), grid (row tiles, hidden tiles):
   ``H[p, h] = act(X[order[p]] · W1[h] + b1[h])`` for hidden tiles below the tile's group width k·w
   (programs above it exit), bias and activation fused, X rows gathered through ``order`` in the load.
   H is stored in sorted row order, in the input dtype.
4. Kernel 2 (``_acm_down_kernel``), grid (row tiles, output tiles):
   ``Y[order[p], :] = H[p, :k·w] · W2[:, :k·w]ᵀ``, the reduction loop stops at the tile's k·w; the store
   scatters rows back to the ORIGINAL token order.  Tiles of the k = 0 group run an empty loop and store
   zeros, so the output needs no separate zero fill.

Accumulation is fp32 for fp32/fp16/bf16 inputs.  fp32 inputs use exact ("ieee") dot products unless
``torch.backends.cuda.matmul.allow_tf32`` is set (matching what torch's fp32 matmul does).

Interpreter (``TRITON_INTERPRET=1``, read when this module is imported): one fixed launch configuration
(16×16×16 tiles, the minimum that also compiles for a GPU) and no autotuning; bf16 tiles are upcast to fp32
before ``tl.dot`` because the interpreter's bf16 dot is wrong (its fp32→bf16 store also truncates rather
than rounds).  On a GPU a few configurations are autotuned per (T, d, hidden, dtype).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

from bench.kernels.acm_torch import _check

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

_ACT_CODES = {"none": 0, "relu": 1, "gelu": 2}

# Interpreter / fallback launch configuration (tile sizes ≥ 16 so it compiles for a GPU too).
_INTERP_UP = {"BLOCK_M": 16, "BLOCK_H": 16, "BLOCK_K": 16}
_INTERP_DOWN = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}


@triton.jit
def _tile_of(pid_m, counts_ptr, N_LEARNERS: tl.constexpr, BLOCK_M: tl.constexpr):
    """(k, first sorted row, end of the group's rows) of row tile ``pid_m``; k = -1 for no tile.

    Groups are in descending k (as the argsort lays them out); group j spans ceil(count_j/BLOCK_M) tiles.
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
                   stride_xm, stride_xk, stride_w1h, stride_w1k, stride_hm, stride_hh,
                   T, HID,  # autotune keys only
                   N_LEARNERS: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                   UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_h = tl.program_id(1)
    tile_k, row_start, row_end = _tile_of(pid_m, counts_ptr, N_LEARNERS, BLOCK_M)
    limit = tile_k * WIDTH
    h0 = pid_h * BLOCK_H
    if h0 >= limit:  # above this group's width, a k = 0 tile, or no tile at all
        return
    rows = row_start + tl.arange(0, BLOCK_M)
    row_mask = rows < row_end
    tok = tl.load(order_ptr + rows, mask=row_mask, other=0).to(tl.int64)
    offs_h = h0 + tl.arange(0, BLOCK_H)
    h_mask = offs_h < limit
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_H), dtype=tl.float32)
    for k0 in range(0, D, BLOCK_K):
        kk = k0 + offs_k
        k_mask = kk < D
        a = tl.load(x_ptr + tok[:, None] * stride_xm + kk[None, :] * stride_xk,
                    mask=row_mask[:, None] & k_mask[None, :], other=0.0)
        b = tl.load(w1_ptr + offs_h[None, :] * stride_w1h + kk[:, None] * stride_w1k,
                    mask=h_mask[None, :] & k_mask[:, None], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    if HAS_BIAS:
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
                     stride_hm, stride_hh, stride_w2n, stride_w2h, stride_ym, stride_yn,
                     T, HID,  # autotune keys only
                     N_LEARNERS: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
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
        b = tl.load(w2_ptr + offs_n[None, :] * stride_w2n + hh[:, None] * stride_w2h,
                    mask=n_mask[None, :] & hmask[:, None], other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    tl.store(y_ptr + tok[:, None] * stride_ym + offs_n[None, :] * stride_yn,
             acc.to(y_ptr.dtype.element_ty), mask=row_mask[:, None] & n_mask[None, :])


def _configs(names: tuple[str, str, str], shapes) -> list:
    return [triton.Config(dict(zip(names, s[:3])), num_warps=s[3], num_stages=s[4]) for s in shapes]


# GPU autotuning: a few standard GEMM tilings (M, N-or-H, K, warps, stages).
_GPU_SHAPES = [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
               (64, 64, 32, 4, 4)]

if INTERPRET:
    _up_launch = _acm_up_kernel
    _down_launch = _acm_down_kernel
else:  # pragma: no cover - needs a GPU
    _up_launch = triton.autotune(_configs(("BLOCK_M", "BLOCK_H", "BLOCK_K"), _GPU_SHAPES),
                                 key=["T", "D", "HID"])(_acm_up_kernel)
    _down_launch = triton.autotune(_configs(("BLOCK_M", "BLOCK_N", "BLOCK_K"), _GPU_SHAPES),
                                   key=["T", "D", "HID"])(_acm_down_kernel)


def group_tokens(k: Tensor, n_learners: int) -> tuple[Tensor, Tensor]:
    """(order, counts) on k's device without a host sync: stable descending-k permutation and
    ``counts[j]`` = number of tokens with k = j."""
    counts = torch.zeros(n_learners + 1, dtype=torch.int64, device=k.device)
    counts.scatter_add_(0, k, torch.ones_like(k))
    order = torch.argsort(k, descending=True, stable=True)
    return order, counts


def acm_triton(x: Tensor, k: Tensor, w1: Tensor, b1: Tensor | None, w2: Tensor, width: int,
               activation: str = "gelu") -> Tensor:
    """ACM forward with the Triton kernels (CUDA tensors, or CPU tensors under TRITON_INTERPRET=1).

    ``k`` is clamped to [0, N] on device (no validation, which would need a host sync)."""
    n_learners = _check(x, k, w1, b1, w2, width)
    if activation not in _ACT_CODES:
        raise ValueError(f"unknown activation {activation!r}; expected one of {tuple(_ACT_CODES)}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"unsupported dtype {x.dtype}")
    if w1.dtype != x.dtype or w2.dtype != x.dtype or (b1 is not None and b1.dtype != x.dtype):
        raise TypeError("x, w1, b1 and w2 must share one dtype")
    T, d = x.shape
    hid = n_learners * width
    y = torch.empty_like(x)
    if T == 0:
        return y
    k = k.to(device=x.device, dtype=torch.int64).clamp(0, n_learners)
    order, counts = group_tokens(k, n_learners)
    h = torch.empty((T, hid), dtype=x.dtype, device=x.device)
    upcast = INTERPRET and x.dtype == torch.bfloat16
    precision = "tf32" if (x.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32) else "ieee"
    b1_arg = b1 if b1 is not None else w1  # dummy pointer, never read

    def up_grid(meta):
        return (triton.cdiv(T, meta["BLOCK_M"]) + n_learners, triton.cdiv(hid, meta["BLOCK_H"]))

    def down_grid(meta):
        return (triton.cdiv(T, meta["BLOCK_M"]) + n_learners, triton.cdiv(d, meta["BLOCK_N"]))

    up_meta = _INTERP_UP if INTERPRET else {}
    down_meta = _INTERP_DOWN if INTERPRET else {}
    _up_launch[up_grid](x, order, counts, w1, b1_arg, h, d, width,
                        x.stride(0), x.stride(1), w1.stride(0), w1.stride(1), h.stride(0), h.stride(1),
                        T, hid,
                        N_LEARNERS=n_learners, HAS_BIAS=b1 is not None, ACT=_ACT_CODES[activation],
                        UPCAST=upcast, DOT_PRECISION=precision, **up_meta)
    _down_launch[down_grid](h, order, counts, w2, y, d, width,
                            h.stride(0), h.stride(1), w2.stride(0), w2.stride(1), y.stride(0), y.stride(1),
                            T, hid,
                            N_LEARNERS=n_learners, UPCAST=upcast, DOT_PRECISION=precision, **down_meta)
    return y
