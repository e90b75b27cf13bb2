"""Wall-clock timing: batch-1 latency and large-batch throughput, with no counters attached.

The timer is the one of ``bench speed`` and ``bench kernels`` (:mod:`bench.kernels.timer`): on CPU
``torch.utils.benchmark.Timer(...).blocked_autorange`` with an explicit thread count (it warms up and
repeats blocks until ``min_run_time``); on CUDA ``triton.testing.do_bench`` (L2 flushed before every
call).  Reported: median and interquartile range of per-call time.

Protocol (docs/measurement.md): absolute times on a shared machine drift by tens of percent between
runs, so every measurement of a method is paired with the task's dense base model measured in the same
process, in interleaved rounds (A B B A A B ...: the order alternates so neither model always runs
first).  The stored ratios are medians over rounds of the per-round ratio method / dense; compare
methods by these ratios, never by absolute numbers from different runs.
"""

from __future__ import annotations

import math
import os
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from bench.kernels.timer import device_timer, median_iqr


class OtherCpus:
    """How many CPUs processes other than this one kept busy, on average, from its creation to :meth:`stop`:
    the busy CPU time of the CPUs this process may run on (psutil, per CPU: user, nice, system, interrupts,
    and time the hypervisor stole) less this process's own (every thread of it), over the wall time.  About
    0 on a quiet machine, about 1 beside another one-thread training; unlike the 1-minute load average, it
    does not lag behind a training that just ended, and work on CPUs the process is kept off (``taskset``)
    does not count.  A child process of this one counts as another, unless ``children_own``: then the CPU
    time of its children that ended and were waited for counts as its own (a measurement whose work runs in
    subprocesses, such as data-loader workers or the tools that build a corpus).  NaN where psutil cannot read
    the CPU times (warned once)."""

    def __init__(self, children_own: bool = False) -> None:
        self.children_own = children_own
        self.start = _cpu_sample(children_own)

    def stop(self) -> float:
        end = _cpu_sample(self.children_own)
        if self.start is None or end is None or end[0] <= self.start[0]:
            return math.nan
        (t0, busy0, own0), (t1, busy1, own1) = self.start, end
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)


NOT_BUSY = ("idle", "iowait", "guest", "guest_nice")  # (user and nice already hold the guests' time)
_warned: list[str] = []


def _cpu_sample(children_own: bool = False) -> tuple[float, float, float] | None:
    """(monotonic seconds, busy CPU seconds of the CPUs this process may run on, this process's CPU seconds
    and, with ``children_own``, those of its children that ended), or None."""
    try:
        import psutil

        per_cpu, own = psutil.cpu_times(percpu=True), psutil.Process().cpu_times()
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(len(per_cpu))
    except Exception as err:  # psutil missing, or a platform where it cannot read them
        if not _warned:
            _warned.append(str(err))
            warnings.warn(f"the CPU time of other processes is not measured ({err}); timed rows fall back on "
                          "the load average to tell quiet from loaded", stacklevel=2)
        return None
    busy = sum(sum(cpu) - sum(getattr(cpu, name, 0.0) for name in NOT_BUSY)
               for index, cpu in enumerate(per_cpu) if index in allowed)
    children = own.children_user + own.children_system if children_own else 0.0
    return time.monotonic(), busy, own.user + own.system + children


# How a model is called on an input batch (a task may decode instead of a single forward).
Call = Callable[[nn.Module, torch.Tensor], Any]


def _forward(model: nn.Module, x: torch.Tensor) -> Any:
    return model(x)


@dataclass
class Timing:
    latency_b1_ms: float
    latency_b1_iqr_ms: float
    throughput_per_s: float
    throughput_batch: int
    # The dense base model measured in the same process, and the medians of the per-round ratios.
    dense_latency_b1_ms: float = math.nan
    dense_throughput_per_s: float = math.nan
    latency_b1_ratio: float = math.nan  # method latency / dense latency (< 1: faster than dense)
    throughput_ratio: float = math.nan  # method throughput / dense throughput (> 1: faster than dense)
    rounds: int = 0


def time_call(fn: Callable[[], object], *, threads: int, min_run_time: float,
              device: str = "cpu") -> tuple[float, float]:
    """(median, IQR) seconds of one call of ``fn`` on ``device`` ("cpu" or "cuda"), from the one timer of
    runs, ``bench speed`` and ``bench kernels`` (:func:`bench.kernels.timer.device_timer`)."""
    return median_iqr(device_timer(device, min_run_time, threads)(fn))


@torch.inference_mode()
def measure(model: nn.Module, example: Callable[[int], torch.Tensor], *, batch: int, threads: int,
            min_run_time: float, call: Call = _forward, device: str = "cpu") -> Timing:
    """Latency of one sample and throughput at ``batch`` samples per call (no dense reference), on the
    device type the model runs on (``device``: "cpu" or "cuda")."""
    model.eval()
    one, many = example(1), example(batch)
    call(model, one)  # warm-up (lazy init, allocator)
    lat, lat_iqr = time_call(lambda: call(model, one), threads=threads, min_run_time=min_run_time, device=device)
    big, _ = time_call(lambda: call(model, many), threads=threads, min_run_time=min_run_time, device=device)
    return Timing(lat * 1e3, lat_iqr * 1e3, many.shape[0] / big, int(many.shape[0]))


@torch.inference_mode()
def measure_against_dense(model: nn.Module, dense: nn.Module, example: Callable[[int], torch.Tensor], *,
                          batch: int, threads: int, min_run_time: float, rounds: int,
                          call: Call = _forward, device: str = "cpu") -> Timing:
    """Time ``model`` and the dense base model ``dense`` in ``rounds`` interleaved rounds, with the timer of
    the device type they run on (``device``: "cpu" or "cuda").

    Each round times batch-1 latency and throughput at ``batch`` of both models on the same inputs; the
    order of the two models alternates between rounds.  Absolute numbers are the medians over rounds
    (the IQR is that of the method's per-call times in its median round); ratios are medians of the
    per-round ratios, so a slow patch of the machine that hits one round moves both sides of it.
    """
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    model.eval()
    dense.eval()
    one, many = example(1), example(batch)
    for m in (model, dense):  # warm-up (lazy init, allocator)
        call(m, one)
        call(m, many)
    lat = {"m": [], "d": []}
    lat_iqr: list[float] = []
    big = {"m": [], "d": []}
    for r in range(rounds):
        order = (("m", model), ("d", dense)) if r % 2 == 0 else (("d", dense), ("m", model))
        for name, m in order:
            median, iqr = time_call(lambda: call(m, one), threads=threads, min_run_time=min_run_time,
                                    device=device)
            lat[name].append(median)
            if name == "m":
                lat_iqr.append(iqr)
        for name, m in order:
            big[name].append(time_call(lambda: call(m, many), threads=threads, min_run_time=min_run_time,
                                       device=device)[0])
    n = int(many.shape[0])
    median_round = sorted(range(rounds), key=lambda i: lat["m"][i])[(rounds - 1) // 2]
    return Timing(
        latency_b1_ms=statistics.median(lat["m"]) * 1e3, latency_b1_iqr_ms=lat_iqr[median_round] * 1e3,
        throughput_per_s=n / statistics.median(big["m"]), throughput_batch=n,
        dense_latency_b1_ms=statistics.median(lat["d"]) * 1e3,
        dense_throughput_per_s=n / statistics.median(big["d"]),
        latency_b1_ratio=statistics.median(a / b for a, b in zip(lat["m"], lat["d"])),
        throughput_ratio=statistics.median(b / a for a, b in zip(big["m"], big["d"])),
        rounds=rounds)
