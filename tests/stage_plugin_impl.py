"""Implementation of the stages-only test method ``headtune`` (see tests/stage_plugin.py)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bench.api import Batch, Method
from bench.protocol import Stage, StepContext


class HeadTune(Method):
    def convert(self, base: nn.Module | None) -> nn.Module:
        return base

    def stages(self) -> list[Stage]:
        return [Stage("head", self._loss, lr=float(self.cfg.lr), params=lambda m: m.head.parameters(),
                      config={"noise": float(self.cfg.noise)})]

    def _loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        x = batch.x
        if x.is_floating_point():
            x = x + float(self.cfg.noise) * torch.randn(x.shape, generator=ctx.generator, device=x.device)
        else:  # token inputs: drop a random share of the batch instead (still the step's generator)
            keep = torch.rand(len(batch), generator=ctx.generator, device=x.device) >= float(self.cfg.noise)
            keep[0] = True
            batch = Batch(x[keep], batch.y[keep])
            x = batch.x
        return self.task.loss(model(x), batch)

    def knob_values(self) -> list[float]:
        return [float(self.cfg.lr)]

    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        tokens, _ = model.embed(batch.x)
        return torch.full((len(batch),), float(model.macs(tokens.shape[1])), dtype=torch.float64)
