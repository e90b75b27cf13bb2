"""The energy step of the GPU suite (``scripts/gpu_suite.py energy``): joules per sample of each method against
dense, from the GPU's total-energy counter (NVML, through pynvml).

The points are ``bench speed``'s (:func:`bench.speed.prepare`: the dense backbone and each method's forced
decisions at a fraction), eager.  Idle power is measured first, in a window where the GPU does nothing and the
counter is polled (which also gives the counter's update period), and subtracted; every window lasts at least
:data:`MIN_WINDOW_S`, and every method window lies between two dense windows, against whose mean it is
compared.  A window shorter than the counter's update period is flagged.  Rows go to
``results/energy/<run_id>.csv`` (:data:`ENERGY_COLUMNS`; ``bench report`` does not read them).  Without NVML
the step is skipped (exit :data:`SKIPPED_RC`), not failed.
"""

from __future__ import annotations

import argparse
import math
import shlex
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bench import speed
from bench.errors import UserError
from bench.results import atomic_write_frame

SKIPPED_RC = 3  # a step's exit code for "nothing to measure here" (the energy step without NVML)
MIN_WINDOW_S = 1.0  # energy windows last at least this long
ENERGY_COLUMNS = ["run_id", "device", "device_name", "dtype", "task", "arch", "batch", "method", "fraction",
                  "executed_fraction", "macs_ratio", "joules_per_sample", "dense_joules_per_sample", "ratio",
                  "window_s", "calls", "dense_window_s", "idle_w", "counter_period_s", "min_window_s", "flags",
                  "energy_source", "torch_version", "git_sha", "git_dirty", "command", "timestamp"]


class NoNVML(Exception):
    """The GPU's energy counter cannot be read here (the step is skipped, not failed)."""


@dataclass
class Window:
    joules: float
    seconds: float
    calls: int


def nvml_counter(torch) -> Callable[[], float]:
    """The current GPU's total-energy counter in joules (NVML through pynvml, from nvidia-ml-py)."""
    try:
        import pynvml
    except ImportError:
        raise NoNVML("pynvml is not installed (package nvidia-ml-py)") from None
    index = torch.cuda.current_device()
    try:
        index = torch.cuda._get_nvml_device_index(index)  # CUDA_VISIBLE_DEVICES may reorder the GPUs
    except Exception:  # a private helper: the CUDA index is right on a one-GPU machine
        pass
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except pynvml.NVMLError as err:
        raise NoNVML(f"NVML cannot read the energy counter ({err})") from None
    return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3  # mJ -> J


def baseline(read: Callable[[], float], sync, clock: Callable[[], float], sleep: Callable[[float], None],
             idle_s: float, poll_s: float = 0.0005) -> tuple[float, Window]:
    """(the counter's update period, an idle window), from one window in which the GPU does nothing and the
    counter is polled: the period is the median gap between the changes seen (inf: it changed at most once)."""
    sync()
    e0, t0 = read(), clock()
    last, changes = e0, []
    while clock() - t0 < idle_s:
        sleep(poll_s)
        value = read()
        if value != last:
            changes.append(clock())
            last = value
    t1, e1 = clock(), read()
    gaps = [b - a for a, b in zip(changes, changes[1:])]
    return (statistics.median(gaps) if gaps else math.inf), Window(e1 - e0, t1 - t0, 0)


def busy_window(fn, read, sync, clock, min_s: float) -> Window:
    """Call ``fn`` (synchronised after each call) until at least ``min_s`` seconds have passed."""
    sync()
    e0, t0, calls = read(), clock(), 0
    while calls == 0 or clock() - t0 < min_s:
        fn()
        sync()
        calls += 1
    t1, e1 = clock(), read()
    return Window(e1 - e0, t1 - t0, calls)


def interleaved(points: list, measure: Callable[[Callable], Window]) -> tuple[list[Window], list[Window]]:
    """Windows dense, P1, dense, P2, ..., Pn, dense (``points[0]`` is dense): every method window lies
    between two dense ones.  Returns (dense windows, method windows)."""
    dense, method = [measure(points[0].fn)], []
    for point in points[1:]:
        method.append(measure(point.fn))
        dense.append(measure(points[0].fn))
    return dense, method


def joules_per_sample(window: Window, idle_w: float, batch: int) -> float:
    return (window.joules - idle_w * window.seconds) / (window.calls * batch)


def window_flags(window: Window, period_s: float) -> list[str]:
    flags = []
    if window.seconds < period_s:
        flags.append("shorter_than_counter_period")
    if window.joules <= 0:
        flags.append("counter_static")
    return flags


def _energy_row(point, joules: float, windows: list[Window], dense_j: float, dense: list[Window],
                period_s: float) -> dict:
    flags = [f for w in windows for f in window_flags(w, period_s)]
    if dense is not windows:
        flags += [f"dense_{f}" for w in dense for f in window_flags(w, period_s)]
    if joules <= 0 or dense_j <= 0:
        flags.append("at_or_below_idle")
    if not math.isfinite(period_s):
        flags.append("counter_period_unknown")
    return {**point.fields, "joules_per_sample": joules, "dense_joules_per_sample": dense_j,
            "ratio": joules / dense_j if dense_j > 0 else math.nan,
            "window_s": statistics.fmean(w.seconds for w in windows), "calls": sum(w.calls for w in windows),
            "dense_window_s": statistics.fmean(w.seconds for w in dense), "flags": ";".join(dict.fromkeys(flags))}


def energy_rows(points: list, dense: list[Window], method: list[Window], idle: Window, period_s: float,
                base: dict) -> list[dict]:
    """One row per point (``points[0]`` is dense): joules per sample above idle power, against the mean of
    the two dense windows around the point's window (the dense row: all dense windows)."""
    idle_w = idle.joules / idle.seconds

    def per_sample(windows: list[Window]) -> float:
        return statistics.fmean(joules_per_sample(w, idle_w, base["batch"]) for w in windows)

    dense_j = per_sample(dense)
    rows = [_energy_row(points[0], dense_j, dense, dense_j, dense, period_s)]
    for i, (point, window) in enumerate(zip(points[1:], method)):
        near = dense[i:i + 2]
        rows.append(_energy_row(point, per_sample([window]), [window], per_sample(near), near, period_s))
    dense_macs = points[0].fields["macs_per_sample"]
    return [{**base, "idle_w": idle_w, "counter_period_s": period_s, "min_window_s": MIN_WINDOW_S,
             "macs_ratio": row["macs_per_sample"] / dense_macs, **row} for row in rows]


def _speed_args(args: argparse.Namespace) -> list[str]:
    return [f"method={args.methods}", "task=imagenet", f"arch={args.arch}", f"fraction={args.fractions}",
            f"batch={args.batch}", f"device={args.device}", f"dtype={args.dtype}", "cuda_graphs=false",
            "narrow=false", "short=false"]  # the methods' energy against dense; the speed step times the ideals


def open_counter(device: str):
    """(torch, the energy counter, sync), or NoNVML."""
    if device != "cuda":
        raise NoNVML(f"device={device} has no NVML energy counter")
    import torch

    if not torch.cuda.is_available():
        raise NoNVML("no CUDA device is available")
    torch.zeros(1, device="cuda")  # the CUDA context exists before the idle window
    return torch, nvml_counter(torch), torch.cuda.synchronize


def write_energy(rows: list[dict], results_dir: str) -> Path:
    import pandas as pd

    path = Path(results_dir) / "energy" / f"{rows[0]['run_id']}.csv"
    atomic_write_frame(path, pd.DataFrame([{c: r.get(c, math.nan) for c in ENERGY_COLUMNS} for r in rows],
                                          columns=ENERGY_COLUMNS))
    return path


def cmd_energy(args: argparse.Namespace, counter=None) -> int:
    """The energy step.  ``counter``: (torch, read joules, sync), for tests; default NVML on the GPU."""
    if args.window_s < MIN_WINDOW_S or args.idle_s < MIN_WINDOW_S:
        raise UserError(f"--window-s and --idle-s must be at least {MIN_WINDOW_S:g} s")
    cfg = speed.parse(_speed_args(args))  # bad input stops here, before anything is measured
    try:
        torch, read, sync = counter or open_counter(args.device)
    except NoNVML as err:
        print(f"gpu_suite: energy skipped: no NVML ({err})")
        return SKIPPED_RC
    clock, sleep = time.perf_counter, time.sleep
    period, idle = baseline(read, sync, clock, sleep, args.idle_s)  # first: before anything runs
    points, base, _ = speed.prepare(cfg, _speed_args(args))
    with torch.inference_mode():
        for point in points:  # warm-up (allocator, lazy init, autotuning)
            point.fn()
        dense, method = interleaved(points, lambda fn: busy_window(fn, read, sync, clock, args.window_s))
    base = {**base, "run_id": base["run_id"] + "-energy",
            "energy_source": "given counter" if counter else "nvml total energy",
            "command": "python scripts/gpu_suite.py energy " + shlex.join(args.argv)}
    rows = energy_rows(points, dense, method, idle, period, base)
    for r in rows:
        print(f"{r['method']:<12} f={r['fraction']:<5g} {r['joules_per_sample']:.4g} J/sample, "
              f"{r['ratio']:.3f} x dense {r['flags']}")
    print(write_energy(rows, args.results_dir))
    return 0
