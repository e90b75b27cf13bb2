"""``bench speed`` forcer of MoEfication: experts per token, k = round(f·E) experts drawn uniformly at random
(without replacement) for every token, replacing the router's top-k (the router still runs).

Conversion: every MLP's activation becomes ReLU (relufication) and the MLP is split into E contiguous
experts (``moefication.experts``, or the method's expert-size rule: 128 of 24 neurons at ViT-B) with a router of the method's width (``router_width``: 128 at ViT-B's d = 768).  No k-means: on
random weights the neuron order has no meaning, and clustering does not change the cost or the path.
MACs per sample: the fixed part (everything but the MoE MLPs, plus the routers on every token) and the
logged (token, expert) pairs × one pair's MACs (the formula of ``Moefication.sample_macs``); on an
encoder-decoder, its cost ledger over the teacher-forced forward (``MoEMLP.row_macs``).
"""

from __future__ import annotations

import torch
from torch import nn

from bench.models.transformer import Block
from bench.speed import Forcer, SpeedBackbone, teacher_forced_macs
from methods.moefication.layers import MoEMLP
from methods.moefication.method import auto_experts, moe_layers, moefy, router_width


class MoeficationForcer(Forcer):
    decisions = "experts per token (k = round(f*E) random experts)"

    def convert(self, dense, backbone: SpeedBackbone):
        for module in dense.modules():
            if hasattr(module, "fc1") and hasattr(module, "act") and hasattr(module, "fc2"):
                module.act = nn.ReLU()
        mlp = next(m for m in dense.modules() if isinstance(m, Block)).mlp
        d_model = mlp.fc1.in_features
        experts = int(self.cfg.experts) or auto_experts(mlp.fc1.out_features, int(self.cfg.expert_size))
        moefy(dense, experts, router_width(d_model, experts, int(self.cfg.router_hidden)), seed=0, iters=1,
              cluster=False)
        return dense

    def draw(self, model, fraction: float, batch: int, backbone: SpeedBackbone, generator):
        layers = moe_layers(model)
        experts = layers[0].experts
        k = min(experts, max(1, round(fraction * experts)))
        device = next(model.parameters()).device
        return [torch.rand(batch * backbone.tokens, experts, generator=generator).argsort(dim=1)[:, :k].to(device)
                for _ in layers]

    def apply(self, model, decisions) -> None:
        for layer, selected in zip(moe_layers(model), decisions):
            layer.force_selected = selected

    def executed_fraction(self, model, decisions) -> float:
        return decisions[0].shape[1] / moe_layers(model)[0].experts

    def sample_macs(self, model, inputs):
        if hasattr(model, "_cost_ledger"):  # an encoder-decoder: its ledger charges every MoE MLP's row_macs
            return teacher_forced_macs(model, inputs)
        moes: list[MoEMLP] = moe_layers(model)
        tokens = moes[0].last_tokens
        fixed = model.macs(tokens) - sum(m.macs(tokens) for m in moes) + sum(m.fixed_macs(tokens) for m in moes)
        return sum(m.last_pairs.double().cpu() * m.pair_macs() for m in moes) + float(fixed)


FORCER = MoeficationForcer
