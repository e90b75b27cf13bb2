"""Training throughput: optimizer steps/s and samples/s of each offline default's dense base model and of
every method's training stages, at the thread counts asked for, from the trainer's own clock.

    .venv/bin/python scripts/train_throughput.py --task imagenet --threads 1,2
    .venv/bin/python scripts/train_throughput.py --task parity --methods act,dense --steps 100,400
    .venv/bin/python scripts/train_throughput.py --task commonvoice --methods dense --precision fp32,bf16

Each (task, method, threads) trains the method's plan twice in a fresh temporary cache, every stage (the
dense base included, when the method starts from it) given N1 and then N2 steps (``--steps``).  A stage's
rate is (N2 − N1) / (t2 − t1), t being the trainer time its checkpoint records (data, forward, backward and
optimizer; no evaluation), so start-up, compilation and warm-up cancel.  Nothing is evaluated or timed
against dense, and ``.cache`` and ``results/<task>`` are untouched.

``--processes N`` trains on N data-parallel processes (torchrun, ``--threads`` each; the script starts them):
each step's global batch is split over them, and a row's rate is rank 0's, in optimizer steps of that batch,
beside one process's rows of the same stage (column ``processes``).

Rows go to ``results/throughput/<run_id>.csv`` (one per stage and thread count) with the 1-minute load
average before and after, the CPUs other processes kept busy during the two trainings (``other_cpus``,
:class:`bench.timing.OtherCpus`; the script's own subprocesses, such as data workers or the tools that build a
corpus, do not count; under ``--processes`` the other ranks do), the CPU count and
model, and whether the tree was clean; ``reports/throughput.md`` is drawn from every row there (here, and by
``bench report``).  A stage measured on a busy machine (:func:`bench.throughput.is_quiet`) is marked loaded:
compare only quiet rows.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.throughput import DIR  # noqa: E402  (results/<DIR>: where the rows go and are read from)

COLUMNS = ["run_id", "task", "dataset", "method", "stage", "threads", "precision", "batch", "steps_timed", "seconds",
           "steps_per_s", "samples_per_s", "load_before", "load_after", "other_cpus", "cpus", "processes",
           "device_name", "git_sha", "git_dirty", "command", "timestamp"]


def stage_times(task: str, method: str, threads: int, steps: int,
                precision: str = "fp32") -> tuple[str, dict[str, tuple[int, float, int]]]:
    """Train ``method`` on ``task`` with every stage at ``steps`` steps in a temporary cache: the task's dataset
    and, per stage label, (steps, trainer seconds, batch size), the dense base as ``dense:base`` (on a rank
    other than 0, no stages)."""
    import torch

    from bench import checkpoints, config, distributed, protocol, runner

    torch.set_num_threads(threads)
    with shared_temporary_cache() as cache:
        cfg = config.compose([f"method={method}", f"task={task}", f"cache_dir={cache}", f"threads={threads}",
                              f"{task}.train_steps={steps}", "shipped=false", f"precision={precision}"])
        config.check_config(cfg, method, task)
        run, task_impl, method_impl = runner.build(cfg, method, task)
        allocate = protocol.allocate
        protocol.allocate = lambda stages, budget: [0 if s.skip else steps for s in stages]
        try:
            protocol.train(method_impl)
        finally:
            protocol.allocate = allocate
        plan, out = method_impl.training_plan, {}
        batch = plan.batch_size
        if not distributed.is_main():  # rank 0 alone writes the checkpoints, and the rows
            return task_impl.dataset, out
        if plan.starts_from == "base" or not plan.stages:
            base = run.stage_path("dense", protocol.base_stage_name(), run.base_key(task_impl))
            state = checkpoints.read(base, checkpoints.FINAL_KEYS)
            if state is not None:
                out["dense:base"] = (int(state["steps"]), float(state["time_s"]), batch)
        for planned in plan.stages:
            if planned.steps:
                state = checkpoints.read(run.stage_path(method, planned.stage.name, planned.key),
                                         checkpoints.FINAL_KEYS)
                out[f"{method}:{planned.stage.name}"] = (int(state["steps"]), float(state["time_s"]), batch)
        return task_impl.dataset, out


@contextlib.contextmanager
def shared_temporary_cache():
    """A temporary cache folder, the same one on every data-parallel rank (rank 0 makes it and removes it once
    every rank is done with it)."""
    from bench import distributed

    distributed.setup("cpu")  # joins the process group under torchrun (the run's own setup is then a no-op)
    cache = distributed.broadcast(tempfile.mkdtemp(prefix="bench-throughput-") if distributed.is_main() else None)
    try:
        yield cache
        distributed.barrier()  # (not after a failure: the other ranks may be in another collective)
    finally:
        if distributed.is_main():
            shutil.rmtree(cache, ignore_errors=True)


def measure(task: str, method: str, threads: int, n1: int, n2: int, precision: str = "fp32") -> list[dict]:
    """One row per stage: its rate between the two trainings."""
    from bench import distributed, provenance
    from bench.timing import OtherCpus

    load_before, others = os.getloadavg()[0], OtherCpus(children_own=True)  # (its data workers, corpus tools)
    (_, short), (dataset, long) = (stage_times(task, method, threads, n, precision) for n in (n1, n2))
    load_after, other_cpus = os.getloadavg()[0], others.stop()
    rows = []
    for stage, (steps2, t2, batch) in long.items():
        steps1, t1, _ = short.get(stage, (0, 0.0, batch))
        rate = (steps2 - steps1) / (t2 - t1) if t2 > t1 else float("nan")
        rows.append({"task": task, "dataset": dataset, "method": method, "stage": stage, "threads": threads,
                     "precision": precision, "batch": batch,
                     "steps_timed": steps2 - steps1, "seconds": round(t2 - t1, 4), "steps_per_s": round(rate, 3),
                     "samples_per_s": round(rate * batch, 1), "load_before": load_before, "load_after": load_after,
                     "other_cpus": round(other_cpus, 3),
                     "cpus": os.cpu_count() or 0, "processes": distributed.world(),
                     "device_name": provenance.device_name("cpu")})
    return rows


def methods_of(task: str) -> list[str]:
    """The methods that run on ``task`` at its defaults, the dense base first."""
    from bench import registry

    spec = registry.task_spec(task)
    names = [m.name for m in registry.methods().values() if not registry.support_reason(m, spec)]
    return ["dense"] + [n for n in names if n != "dense"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", action="append", required=True, help="task (repeatable)")
    parser.add_argument("--methods", default="", help="comma-separated methods (default: every one the task runs)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--steps", default="50,250", help="N1,N2 steps per stage (default 50,250)")
    parser.add_argument("--precision", default="fp32",
                        help="comma-separated training precisions (fp32, bf16, fp16; default fp32): bf16 autocast "
                             "pays on a CPU with bf16 instructions at sizes where the matrix products dominate")
    parser.add_argument("--processes", type=int, default=1,
                        help="data-parallel processes per training (torchrun, --threads each; default 1; as "
                             "scripts/campaign.py --nproc)")
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--reports-dir", default="reports")
    args = parser.parse_args(argv)
    os.environ.setdefault("BENCH_QUIET", "1")
    from bench import distributed

    if args.processes < 1:
        parser.error("--processes must be at least 1")
    if args.processes > 1 and distributed.launched_world() == 1:  # start the ranks, each running this script
        own_args = sys.argv[1:] if argv is None else argv
        return subprocess.call([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                f"--nproc_per_node={args.processes}", __file__, *own_args])
    if distributed.launched_world() != args.processes:
        parser.error(f"launched with {distributed.launched_world()} processes, but --processes is {args.processes}")
    try:
        return write_rows(args, argv)
    finally:
        distributed.shutdown()


def write_rows(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Measure every (task, method, threads, precision) asked for; rank 0 writes the rows and the page."""
    import pandas as pd

    from bench import distributed, provenance, results

    n1, n2 = (int(v) for v in args.steps.split(","))
    sha, dirty = provenance.git_sha(), provenance.git_dirty()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.results_dir) / DIR
    for task in args.task:
        for method in (args.methods.split(",") if args.methods else methods_of(task)):
            for threads, precision in ((int(t), p) for t in args.threads.split(",") for p in args.precision.split(",")):
                rows = measure(task, method, threads, n1, n2, precision)
                if not distributed.is_main():
                    continue
                run_id = (f"{stamp}-{task}-{method}-t{threads}" + ("" if precision == "fp32" else f"-{precision}")
                          + ("" if args.processes == 1 else f"-p{args.processes}"))
                frame = pd.DataFrame([{**r, "run_id": run_id, "git_sha": sha, "git_dirty": dirty,
                                       "command": "python scripts/train_throughput.py "
                                       + " ".join(argv or sys.argv[1:]),
                                       "timestamp": provenance.timestamp()} for r in rows], columns=COLUMNS)
                out.mkdir(parents=True, exist_ok=True)
                results.atomic_write_text(out / f"{run_id}.csv", frame.to_csv(index=False))
                for r in rows:
                    print(f"{task} {r['stage']} threads={threads} {precision}: {r['steps_per_s']:.1f} steps/s, "
                          f"{r['samples_per_s']:.0f} samples/s (load {r['load_before']:.2f} → {r['load_after']:.2f})",
                          flush=True)
    if distributed.is_main():
        from bench.report import throughput as report_throughput

        print(*report_throughput.write(Path(args.results_dir), Path(args.reports_dir)), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
