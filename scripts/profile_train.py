"""Where a dense base model's training time goes: the trainer under ``torch.profiler``, one JSON line and
the heaviest operators.

    .venv/bin/python scripts/profile_train.py task=iwslt iwslt.train_steps=200 device=cuda precision=bf16 \
        --out /tmp/profile

The arguments other than the script's own are ``bench run`` overrides (``method`` is dense); the base
model trains from scratch in a temporary cache (nothing is reused or written to ``.cache`` or
``results``).  The whole training is profiled, warm-up steps included, so profile enough steps for them
not to matter (a few hundred on a GPU).

The JSON line gives the trainer's own time per step (``train_time_s`` / steps: data, forward, backward,
optimizer), the profiled wall time, and on a GPU the time the device spent in kernels, copies and memsets
as a fraction of that wall time (``device_busy``: the union of their intervals; None when the profiler
saw no device events).  Far below 1, the training is bound by the host: Python, the data and kernel
launches, which is what CUDA graphs or ``torch.compile`` would shorten.  The profiler's own overhead
lengthens the wall time, so ``device_busy`` reads low: compare ``s_per_step`` with an unprofiled run's
(a row's ``train_time_s`` over its steps).  The table lists the operators by self device time
(on a GPU) or self CPU time; ``--out`` also writes the Chrome trace (``trace.json.gz``, for Perfetto) and
the table.  The 1-minute load average is recorded before and after: shared machines drift.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


MAX_STEPS = 2000  # more would record millions of profiler events


def covered_us(spans: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals: device time with kernels on several streams
    counted once."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def profile(overrides: list[str], rows: int = 25, out: Path | None = None) -> tuple[dict, str]:
    """Train the dense base of ``overrides`` under the profiler; (summary, operator table)."""
    import torch
    from torch.profiler import ProfilerActivity

    from bench import config, runner
    from bench.errors import UserError

    with tempfile.TemporaryDirectory(prefix="bench-profile-") as cache:
        cfg = config.compose(["method=dense", *overrides, f"cache_dir={cache}"])
        _, task_name = config.selected(cfg)
        config.check_config(cfg, "dense", task_name)
        run, task, _ = runner.build(cfg, "dense", task_name)
        steps = int(task.base_budget()["steps"])
        if steps > MAX_STEPS:
            raise UserError(f"{task_name}.train_steps={steps}: profiling records every operator of every step; "
                            f"set {task_name}.train_steps to at most {MAX_STEPS} (a few hundred suffice)")
        cuda = str(cfg.device).startswith("cuda")
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        load_before = os.getloadavg()[0]
        with torch.profiler.profile(activities=activities) as prof:
            start = time.perf_counter()
            run.base_model(task)
            if cuda:
                torch.cuda.synchronize()
            wall = time.perf_counter() - start
    events = prof.key_averages()
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    table = events.table(sort_by=sort, row_limit=rows)
    summary = {"task": task_name, "device": str(cfg.device), "precision": str(cfg.precision), "steps": steps,
               "train_time_s": round(run.train_time_s, 3), "s_per_step": round(run.train_time_s / max(steps, 1), 5),
               "profiled_wall_s": round(wall, 3), "torch": torch.__version__,
               "load_avg_before": load_before, "load_avg_after": os.getloadavg()[0], "cpus": os.cpu_count()}
    if cuda:
        from torch.autograd import DeviceType

        # the device's own events (kernels, copies, memsets); not the GPU copies of record_function ranges
        # (user annotations such as each Optimizer.step: they span the gaps between kernels)
        spans = [(e.time_range.start, e.time_range.end) for e in prof.events()
                 if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
        summary["device_busy"] = round(covered_us(spans) / 1e6 / wall, 4) if spans else None  # None: no CUPTI
        summary["device_name"] = torch.cuda.get_device_name()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(trace))
            with open(trace, "rb") as src, gzip.open(out / "trace.json.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
        (out / "operators.txt").write_text(table + "\n")
        (out / "summary.json").write_text(json.dumps(summary) + "\n")
    return summary, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=25, help="operators listed (default 25)")
    parser.add_argument("--out", default="", help="folder for trace.json.gz, operators.txt and summary.json")
    args, overrides = parser.parse_known_args(argv)
    from bench.config import ConfigError
    from bench.errors import UserError

    try:
        summary, table = profile(overrides, rows=args.rows, out=Path(args.out) if args.out else None)
    except (ConfigError, UserError) as e:
        print(f"profile_train: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
