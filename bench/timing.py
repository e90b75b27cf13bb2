"""Wall-clock timing: batch-1 latency and large-batch throughput, with no counters attached.

CPU: ``torch.utils.benchmark.Timer(...).blocked_autorange`` with an explicit thread count (it warms up
and repeats blocks until ``min_run_time``); GPU: the same Timer synchronizes CUDA around each block.
Reported: median and interquartile range of per-call time.  Machines here are shared and noisy:
compare methods by ratios measured on the same machine, never across machines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils import benchmark


@dataclass
class Timing:
    latency_b1_ms: float
    latency_b1_iqr_ms: float
    throughput_per_s: float
    throughput_batch: int


def time_call(fn: Callable[[], object], *, threads: int, min_run_time: float) -> tuple[float, float]:
    """(median, IQR) seconds of one call of ``fn``."""
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    measurement = timer.blocked_autorange(min_run_time=min_run_time)
    return measurement.median, measurement.iqr


@torch.inference_mode()
def measure(model: torch.nn.Module, example: Callable[[int], torch.Tensor], *, batch: int, threads: int,
            min_run_time: float, forward: Callable[[torch.Tensor], object] | None = None) -> Timing:
    """Latency of one sample and throughput at ``batch`` samples per call.  ``forward`` is the evaluation
    forward (``Task.infer``; default ``model(x)``)."""
    model.eval()
    run = forward or model
    one, many = example(1), example(batch)
    run(one)  # warm-up (lazy init, allocator)
    lat, lat_iqr = time_call(lambda: run(one), threads=threads, min_run_time=min_run_time)
    big, _ = time_call(lambda: run(many), threads=threads, min_run_time=min_run_time)
    return Timing(lat * 1e3, lat_iqr * 1e3, many.shape[0] / big, int(many.shape[0]))
