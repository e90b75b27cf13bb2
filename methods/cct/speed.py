"""``bench speed`` forcer of CCT: every gate of every block (K/V per token, attention sublayer per query
token, each of the M FFN slices per token) is on with probability f, independently (the control networks
still run; ``CCTBlock.force`` replaces their decisions on the real path).  MACs per sample from the logged
decisions (``CCTModel.sample_macs``); executed fraction = the executed share of the gated units' cost
(``gated_fraction``, what CCT's budget constrains).
"""

from __future__ import annotations

import torch

from bench.speed import Forcer, SpeedBackbone
from methods.cct import model as M


class CCTForcer(Forcer):
    decisions = "gates: K/V and attention per token, FFN slices per token (each on with prob. f)"

    def supports(self, backbone: SpeedBackbone) -> str | None:
        if "encoder-decoder" in backbone.capabilities or "token-outputs" in backbone.capabilities:
            return "the forcer handles CCT's class-token encoder (CCTModel) only"
        return None

    def convert(self, dense, backbone: SpeedBackbone):
        c = self.cfg
        model = M.CCTModel(dense, len(set(float(p) for p in c.budgets)), int(c.slices), int(c.gate_hidden),
                           float(c.gate_bias_init))
        model.real_path = True
        return model

    def draw(self, model, fraction: float, batch: int, backbone: SpeedBackbone, generator):
        device = next(model.parameters()).device
        t = backbone.tokens

        def on(*shape):
            return (torch.rand(*shape, generator=generator) < fraction).to(device)

        return [M.Decisions(on(batch, t), on(batch, t), on(batch, t, block.slices)) for block in model.blocks]

    def apply(self, model, decisions) -> None:
        for block, d in zip(model.blocks, decisions):
            block.force = d

    def executed_fraction(self, model, decisions) -> float:
        return float(model.gated_fraction().double().mean())

    def sample_macs(self, model, inputs):
        return model.sample_macs()


FORCER = CCTForcer
