"""The timer of the kernel benchmarks and of ``bench speed``: per-call times of a callable, with no counters
attached.

- CPU: ``torch.utils.benchmark.Timer.blocked_autorange`` with an explicit thread count (``quick``: three
  fixed blocks of two calls, no block-size estimation, for smoke runs).
- GPU: ``triton.testing.do_bench`` (L2 flushed before every call, warm-up) with all per-call times kept;
  without Triton, CUDA events around each call with the L2 flushed before it.

Beside it: the median and interquartile range of the samples, the dense bf16 GEMM peak measured with the
same timer, and the torch and Triton versions a row records.  Importing this module imports no torch.
"""

from __future__ import annotations

from importlib import metadata
from typing import Callable

import numpy as np

Timer = Callable[[Callable[[], object]], list[float]]


def device_timer(device: str, min_run_s: float, threads: int, quick: bool = False) -> Timer:
    """A function returning per-call times (seconds) of ``fn``: several samples.  ``min_run_s``: CPU, the
    blocked_autorange minimum run time; GPU, do_bench's rep time.  ``threads``: the CPU timer's threads."""
    if device == "cuda":
        try:
            from triton.testing import do_bench
        except ImportError:  # pragma: no cover - GPU without triton
            do_bench = None
        rep_ms = max(1, int(min_run_s * 1e3))

        def gpu_times(fn):
            if do_bench is not None:
                return [t / 1e3 for t in do_bench(fn, warmup=25, rep=rep_ms, return_mode="all")]
            return cuda_event_times(fn, rep_ms)

        return gpu_times

    from torch.utils import benchmark

    def cpu_times(fn):
        timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
        if quick:  # smoke test: a few fixed-size blocks, no block-size estimation
            return [timer.timeit(number=2).median for _ in range(3)]
        return list(timer.blocked_autorange(min_run_time=min_run_s).times)

    return cpu_times


def cuda_event_times(fn: Callable[[], object], rep_ms: int) -> list[float]:  # pragma: no cover - needs a GPU
    """CUDA events around each call, L2 flushed (256 MB write) before each, after a warm-up."""
    import torch

    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times, spent = [], 0.0
    while spent < rep_ms / 1e3 or len(times) < 10:
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
        spent += times[-1]
    return times


def median_iqr(samples: list[float]) -> tuple[float, float]:
    """(median, interquartile range) of the samples."""
    arr = np.asarray(samples, dtype=float)
    q25, q50, q75 = np.percentile(arr, [25, 50, 75])
    return float(q50), float(q75 - q25)


def gemm_peak_tflops(timer: Timer) -> float:  # pragma: no cover - needs a GPU
    """TFLOP/s of a bf16 8192³ matmul on the current GPU, timed with ``timer`` (median)."""
    import torch

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    med, _ = median_iqr(timer(lambda: a @ b))
    return 2 * n ** 3 / med / 1e12


def versions() -> tuple[str, str]:
    """(torch version, triton version or "" when Triton is not installed)."""
    import torch

    try:
        triton_version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton_version = ""
    return torch.__version__, triton_version
