"""Training data through a torch ``DataLoader``: one item per step, sharded across data-parallel ranks.

The contract of today's trainer is kept: the *global* batch of step ``s`` depends only on (seed, s)
(``Task.train_batch``).  :class:`StepShards` is a map-style dataset whose item ``s`` is this rank's rows of
that batch (``Task.train_shard``), and :class:`StepSampler` yields the steps ``start, start + 1, …`` in
order, so the sampler's position is the step a checkpoint records, and a resumed or re-sharded run
(another world size) sees the same global batches.  ``num_workers`` processes build upcoming steps while
the current one trains (``prefetch_factor`` steps each); ``pin_memory`` page-locks them for asynchronous
host-to-GPU copies.  With ``num_workers=0`` the item of step ``s`` is built in the training process right
after the step's seeds are set, exactly as before.  Tasks draw their randomness from generators seeded by
(seed, step) (never from torch's global generator), so a batch built in a worker is the same batch.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from bench.api import Batch

ShardFn = Callable[[int, int, int], Batch]  # (step, rank, world) -> this rank's rows of the step's batch


class StepShards(Dataset):
    """Item ``s``: this rank's rows of the global batch of step ``s``."""

    def __init__(self, shard_fn: ShardFn, rank: int, world: int):
        self.shard_fn, self.rank, self.world = shard_fn, rank, world

    def __getitem__(self, step: int) -> Batch:
        return self.shard_fn(int(step), self.rank, self.world)


class StepSampler(Sampler[int]):
    """The steps ``start`` … ``steps - 1`` in order; its state is the next step (saved in checkpoints)."""

    def __init__(self, start: int, steps: int):
        self.start, self.steps = int(start), int(steps)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.steps))

    def __len__(self) -> int:
        return max(0, self.steps - self.start)

    def state_dict(self) -> dict[str, int]:
        return {"step": self.start}


def step_loader(shard_fn: ShardFn, *, start: int, steps: int, rank: int = 0, world: int = 1,
                num_workers: int = 0, pin_memory: bool = False) -> DataLoader:
    """A DataLoader over the steps ``start`` … ``steps - 1`` of one stage (items are ready-made batches)."""
    return DataLoader(StepShards(shard_fn, rank, world), sampler=StepSampler(start, steps), batch_size=None,
                      num_workers=num_workers, pin_memory=pin_memory,
                      prefetch_factor=2 if num_workers else None,
                      generator=torch.Generator())  # its base-seed draw never touches the global generator
