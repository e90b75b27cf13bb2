"""Training throughput (samples/s) of the dense offline ViT (task imagenet, Fashion-MNIST) with N processes.

    .venv/bin/python scripts/ddp_throughput.py --nproc 2 --steps 40 --threads 1

Trains the dense base model for ``--steps`` steps at the task's global batch (default 128) in a temporary
cache, with ``--nproc`` data-parallel processes (gloo; torch.multiprocessing), and prints one JSON line:
samples/s from the trainer's own step time on rank 0 (data, forward, backward, all-reduce, optimizer; no
checkpoint writes), the 1-minute load average before and after, and the CPU count.  A measurement, not a
row: shared machines drift, so compare numbers taken back to back.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def worker(rank: int, world: int, port: int, args: argparse.Namespace, tmp: str, out: str) -> None:
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                          LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    os.environ["BENCH_QUIET"] = "1"
    torch.set_num_threads(args.threads)
    from bench import config, distributed, runner

    cfg = config.compose(["method=dense", "task=imagenet", f"imagenet.train_steps={args.steps}",
                          f"imagenet.batch_size={args.batch}", f"cache_dir={tmp}", f"threads={args.threads}",
                          f"precision={args.precision}", "imagenet.warmup=0"])
    run, task, _ = runner.build(cfg, "dense", "imagenet")
    run.base_model(task)
    if rank == 0:
        Path(out).write_text(json.dumps({"train_time_s": run.train_time_s}))
    distributed.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", default="fp32")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "out.json")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if args.nproc == 1:
            worker(0, 1, port, args, str(Path(tmp) / "cache"), out)
        else:
            mp.spawn(worker, args=(args.nproc, port, args, str(Path(tmp) / "cache"), out), nprocs=args.nproc)
        time_s = json.loads(Path(out).read_text())["train_time_s"]
    print(json.dumps({"nproc": args.nproc, "threads_per_proc": args.threads, "precision": args.precision,
                      "steps": args.steps, "global_batch": args.batch,
                      "samples_per_s": round(args.steps * args.batch / time_s, 1), "train_time_s": round(time_s, 2),
                      "load_avg_before": load_before, "load_avg_after": os.getloadavg()[0],
                      "cpus": os.cpu_count(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
