"""Data-parallel runs on torch.distributed: ranks from torchrun or SLURM (submitit), one process group.

Launch:

* ``torchrun --nproc_per_node=N -m bench run ...``: torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``MASTER_ADDR``/``MASTER_PORT``; every rank composes its config with Hydra's compose API (bench/cli.py;
  ``@hydra.main`` under torchrun is hydra#2038).
* SLURM through hydra-submitit-launcher with ``hydra.launcher.tasks_per_node`` = GPUs per node: each task
  runs the job; :func:`setup` takes rank and world size from submitit's job environment
  (``submitit.helpers.TorchDistributedEnvironment``, which exports the same variables).

Division of work (stated in docs/scale.md): every rank trains (DistributedDataParallel; each rank takes its
shard of the global batch of each step, bench/data.py); **rank 0 alone** writes checkpoints, takes the stage
locks, logs, evaluates, counts MACs, times, and writes rows.  Evaluation, counting and timing are not
sharded: they measure one process on one device, as a single-process run does, so a row does not depend on
how many processes trained its model.  Other ranks return once training is done.

The backend is NCCL for CUDA devices and gloo on CPU (CI runs two gloo processes).  A world of one never
creates a process group, so single-process runs execute exactly the code they always did.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist


def _from_submitit() -> None:
    """Export torchrun-style variables from a multi-task submitit job (SLURM, or its local twin), if this is one."""
    if os.environ.get("SUBMITIT_EXECUTOR") not in ("slurm", "local") or "WORLD_SIZE" in os.environ:
        return
    from submitit import JobEnvironment
    from submitit.helpers import TorchDistributedEnvironment

    if JobEnvironment().num_tasks > 1:
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def launched_world() -> int:
    """The number of processes this run was launched with (1 without torchrun / multi-task SLURM)."""
    _from_submitit()
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def setup(device: str) -> str:
    """Join the process group when launched with several processes; returns this rank's device
    (``cuda`` → ``cuda:<LOCAL_RANK>``; an explicit ``cuda:N`` or ``cpu`` is kept)."""
    if launched_world() <= 1:
        return device
    if device == "cuda":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    if not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=30))
    return device


def barrier() -> None:
    if world() > 1:
        dist.barrier()


def broadcast(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (a picklable object)."""
    if world() <= 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_grads(params: list[torch.nn.Parameter]) -> None:
    """Average the gradients of ``params`` over the ranks (one flat all-reduce).

    Used for losses that never call the model's ``forward`` with gradients (e.g. a stage that distils
    modules on their recorded inputs), which DistributedDataParallel's hooks cannot see; a parameter
    without a gradient on this rank contributes zeros.  Every rank must call it with the same list."""
    if world() <= 1 or not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world()
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
