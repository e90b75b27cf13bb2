"""The dense baseline: the task's backbone at one size, every input costs the same.

width = depth = 1 is the task's shared base model (trained once, cached; no stage of its own); other sizes
are static baseline points, trained from scratch like the base model (one stage with the task's loss,
budget, learning rate and optimiser policy).  Per-sample cost is the analytic cost of the backbone
(``macs_per_sample()`` or the skeleton's ``macs(tokens)``), which the counter test checks.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from bench import registry
from bench.api import Batch, Method
from bench.protocol import Stage, base_policy, task_loss

# Keys of a task's base training budget: a dense row trained with other values than the task's defaults
# is a different model (e.g. an equal-total-budget control), named in the row's variant so that reports
# never take it for the task's dense base.
BUDGET_KEYS = ("train_steps", "batch_size", "lr")


def analytic_macs(model: nn.Module, batch: Batch) -> Tensor:
    """Per-sample MACs of a dense backbone on ``batch`` (constant per sample for fixed-size inputs; a
    decoding model charges each sentence what its search executed: ``last_sample_macs``)."""
    logged = getattr(model, "last_sample_macs", None)
    if logged is not None:
        return logged.double()
    if hasattr(model, "macs_per_sample"):
        value = model.macs_per_sample()
    else:
        tokens, mask = model.embed(batch.x)
        if mask is not None:
            lengths = (~mask).sum(dim=1)
            raise NotImplementedError(f"padded inputs need per-sample lengths ({lengths.shape})")
        value = model.macs(tokens.shape[1])
    return torch.full((len(batch),), float(value), dtype=torch.float64)


class Dense(Method):
    name = "dense"

    def _size(self) -> tuple[float, float]:
        return float(self.cfg.width), float(self.cfg.depth)

    def starts_from(self) -> str:
        return "base" if self._size() == (1.0, 1.0) else "scratch"

    def convert(self, base: nn.Module | None) -> nn.Module:
        if base is not None:
            return base
        width, depth = self._size()
        return self.task.build_backbone(width=width, depth=depth)

    def stages(self) -> list[Stage]:
        if self.starts_from() == "base":
            return []
        width, depth = self._size()
        return [Stage(f"w{width:g}-d{depth:g}", task_loss(self.task), lr=float(self.task.base_budget()["lr"]),
                      policy=base_policy(self.task), config={"width": width, "depth": depth})]

    def knob_values(self) -> list[str]:
        return [f"w{self.cfg.width:g}-d{self.cfg.depth:g}"]

    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        return analytic_macs(model, batch)

    def variant(self) -> str:
        spec = registry.task_spec(self.run.task_name)
        changed = []
        for field in dataclasses.fields(spec.config):
            if field.name in BUDGET_KEYS and field.name in self.task.cfg:
                value = self.task.cfg[field.name]
                if value != field.default:
                    changed.append(f"{field.name}={value:g} (default {field.default:g})")
        return ";".join(changed)

    def train_budget(self) -> str:
        budget = self.task.base_budget()
        return f"{budget['steps']} steps x batch {budget['batch_size']} (the task's base budget)"
