"""Worker of tests/test_scale.py: one data-parallel rank (gloo, CPU) started by torch.multiprocessing.spawn.

Each rank trains the tiny early-exit model on ``imagenet`` (dense base stage + the heads stage, whose loss
calls ``all_exits`` through ``forward``) twice: uninterrupted (cache ``a``), and interrupted after 2 steps of
its first stage then resumed (cache ``b``); and MoEfication (relufication, then router training, whose loss
calls no ``forward`` with gradients: its gradients are averaged by the trainer's explicit all-reduce).
Rank 0 saves the final state dicts.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from bench import distributed, protocol
from bench.checkpoints import Interrupted


def trained(method: str, task: str, tmp: Path, cache: str, extra: tuple[str, ...], stop_after: int | None = None):
    from bench import runner
    from tests.helpers import compose_tiny

    cfg = compose_tiny(method, task, tmp / cache, *extra)  # cache and results under tmp/<cache>
    run, _, method_impl = runner.build(cfg, method, task)
    if stop_after is not None:
        run.fit_extra = {"stop_after": stop_after}
        try:
            protocol.train(method_impl)
        except Interrupted:
            pass
        else:
            raise AssertionError("the run was expected to be interrupted")
        run.fit_extra = {}
    return protocol.train(method_impl).state_dict()


def main(rank: int, world: int, tmp: str, port: int, extra: tuple[str, ...]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), BENCH_QUIET="1")
    torch.set_num_threads(1)
    out = Path(tmp)
    full = trained("early_exit", "imagenet", out, "a", extra)
    resumed = trained("early_exit", "imagenet", out, "b", extra, stop_after=2)
    routers = trained("moefication", "imagenet", out, "m", extra)  # router stage: explicit all-reduce
    if rank == 0:
        torch.save({"full": full, "resumed": resumed, "moefication": routers}, out / "ddp.pt")
    distributed.shutdown()
