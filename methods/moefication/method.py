"""MoEfication (Zhang et al. 2021) with ACM's baseline recipe (Wójcik et al., §5 "MoEfication").

Stages (each cached and resumable through ``run.fit``; budget = ``total_steps`` on top of the base model,
split ``relu_fraction`` : rest as ACM's 80 : 20 epochs):
1. Relufication: the task's dense base model with every MLP activation swapped GELU → ReLU, fine-tuned
   whole with the task loss at lr ``relu_lr`` (ACM: Adam 1e-4) with the task's own optimiser extras
   (weight decay, gradient clipping; its warm-up capped at 10% of the stage).  Skipped when the MLPs
   already use ReLU (MoEfication only relufies GELU models); those steps are then not spent.
2. Expert construction (no training): per MLP, balanced k-means over the L2-normalised fc1 rows
   (clustering.py), then the neurons are permuted so expert e is the contiguous slice e (layers.py).
3. Routers: the model frozen (eval mode, no gradients), one router per MLP (acm-code's shape, width from
   ``router_width``) trained with BCE-with-logits against per-token normalised expert activation sums
   (layers.router_targets), Adam ``router_lr``.
Data continue the task's training stream after the base model's steps (stage 1 uses steps
base_steps + i, stage 2 base_steps + relu_steps + i), i.e. the epochs that follow the base model's.

Evaluation: binary top-k experts per token on the grouped real path; k is the eval-time knob, and k = E
(all experts: the relufied dense MLP, plus the routers' cost) is always one of the points so the ReLU
dense accuracy appears as a row (the GELU dense accuracy is the ``dense`` method's row).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import bench.models.transformer as skeleton
from bench import train
from bench.api import Batch, Method
from bench.errors import UserError
from bench.models.transformer import Block
from bench.run import code_version, plain, task_loss
from methods.moefication import clustering, layers
from methods.moefication.layers import MoEMLP

OWNER = "moefication"


def router_width(d_model: int, experts: int, requested: int) -> int:
    """Router hidden width: ``requested``, or (0) acm-code's 128-of-768 ratio applied to ``d_model``.

    acm-code's router for ViT-B (d = 768) is d → 128 → E, about 2.4% of an MLP's MACs.  A fixed 128 on a
    d = 64 model would cost 28% of an MLP (k = E would cost 118% of dense), so by default the width keeps
    acm-code's ratio, never below E (the official MoEfication router's hidden width).
    """
    return requested if requested > 0 else max(experts, round(128 * d_model / 768))


def moe_layers(model: nn.Module) -> list[MoEMLP]:
    return [m for m in model.modules() if isinstance(m, MoEMLP)]


def set_mode(model: nn.Module, mode: str) -> None:
    for layer in moe_layers(model):
        layer.mode = mode


@torch.no_grad()
def expert_order(fc1_weight: Tensor, experts: int, *, seed: int, iters: int) -> Tensor:
    """Neuron permutation that makes each balanced k-means cluster of L2-normalised fc1 rows contiguous."""
    rows = F.normalize(fc1_weight.detach().double().cpu(), dim=1).numpy()
    labels = clustering.balanced_kmeans(rows, experts, seed=seed, iters=iters)
    return torch.as_tensor(labels).argsort(stable=True)


def moefy(model: nn.Module, experts: int, router_hidden: int, *, seed: int, iters: int,
          cluster: bool = True) -> list[MoEMLP]:
    """Replace every Block's (relufied) MLP by an MoEMLP; ``cluster=False`` keeps the neuron order
    (used when the weights are about to be loaded from a checkpoint that is already permuted)."""
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    if not blocks:
        raise UserError("moefication: the model has no transformer Block with an MLP to split")
    torch.manual_seed(seed)  # router initialisation
    for i, block in enumerate(blocks):
        if cluster:
            layers.permute_mlp(block.mlp, expert_order(block.mlp.fc1.weight, experts, seed=seed + i,
                                                       iters=iters))
        block.mlp = MoEMLP(block.mlp, experts, router_hidden).to(block.mlp.fc1.weight.device)
    return moe_layers(model)


def router_loss(model: nn.Module) -> Callable[[nn.Module, Batch], Tensor]:
    """Loss of one router-training step: the frozen model's dense forward records every MLP's input and
    targets; each router's BCE-with-logits against them, averaged over layers."""
    moes = moe_layers(model)

    def loss_fn(_: nn.Module, batch: Batch) -> Tensor:
        model.eval()  # frozen backbone: no dropout, no gradients
        with torch.no_grad():
            model(batch.x)
        losses = []
        for layer in moes:
            inputs, targets = layer.recorded
            losses.append(F.binary_cross_entropy_with_logits(layer.router(inputs), targets))
        return torch.stack(losses).mean()

    return loss_fn


class Moefication(Method):
    name = "moefication"

    # --- budget -------------------------------------------------------------------------------
    def _total_steps(self) -> int:
        if int(self.cfg.total_steps):
            return int(self.cfg.total_steps)
        method_steps = getattr(self.task.cfg, "method_steps", None)
        return int(method_steps) if method_steps else int(self.task.base_budget()["steps"])

    def _stage_steps(self) -> tuple[int, int]:
        total = self._total_steps()
        relu = int(round(total * float(self.cfg.relu_fraction)))
        return relu, total - relu

    # --- build --------------------------------------------------------------------------------
    def build(self) -> nn.Module:
        cfg = self.cfg
        experts = int(cfg.experts)
        self.knob_values()  # fail early on a bad k
        budget = self.task.base_budget()
        batch_size, base_steps = int(budget["batch_size"]), int(budget["steps"])
        relu_steps, router_steps = self._stage_steps()

        model = self.run.base_model(self.task)
        blocks = [m for m in model.modules() if isinstance(m, Block)]
        for block in blocks:
            if block.mlp.fc1.out_features % experts:
                raise UserError(f"moefication.experts={experts} does not divide the MLP width "
                                f"{block.mlp.fc1.out_features}; choose a divisor")
        self._relufied = any(not isinstance(b.mlp.act, nn.ReLU) for b in blocks)
        for block in blocks:
            block.mlp.act = nn.ReLU()

        upstream = {"task": self.task.name, "task_cfg": plain(self.task.cfg), "seed": self.run.seed,
                    "base_code": code_version(type(self.task), skeleton, train)}
        relu_key = {**upstream, "stage": "relu", "steps": relu_steps, "lr": float(cfg.relu_lr),
                    "relufied": self._relufied, "code": code_version(Moefication)}
        if self._relufied and relu_steps > 0:
            extras = dict(budget.get("fit", {}))
            if "warmup" in extras:  # the base recipe's warm-up, capped at 10% of this shorter stage
                extras["warmup"] = min(int(extras["warmup"]), relu_steps // 10)
            self.run.fit(model, lambda step: self.task.train_batch(base_steps + step, batch_size),
                         task_loss(self.task), owner=OWNER, name="relu", key=relu_key, steps=relu_steps,
                         lr=float(cfg.relu_lr), **extras)

        self._router_hidden = router_width(blocks[0].mlp.fc1.in_features, experts, int(cfg.router_hidden))
        router_key = {"relu": relu_key, "stage": "router", "experts": experts,
                      "router_hidden": self._router_hidden, "kmeans_iters": int(cfg.kmeans_iters),
                      "steps": router_steps, "lr": float(cfg.router_lr),
                      "code": code_version(Moefication, layers, clustering)}
        name = f"router-E{experts}"
        done = train.is_done(self.run.stage_path(OWNER, name, router_key))  # its weights are permuted
        moes = moefy(model, experts, self._router_hidden, seed=self.run.seed, iters=int(cfg.kmeans_iters),
                     cluster=not done)
        set_mode(model, "dense")
        for layer in moes:
            layer.record = True
        if router_steps > 0:
            offset = base_steps + relu_steps
            self.run.fit(model, lambda step: self.task.train_batch(offset + step, batch_size),
                         router_loss(model), owner=OWNER, name=name, key=router_key, steps=router_steps,
                         lr=float(cfg.router_lr), params=[p for m in moes for p in m.router.parameters()])
        for layer in moes:
            layer.record, layer.recorded = False, None
            layer.k = experts
        set_mode(model, "real")
        self._expert_size = moes[0].expert_size
        return model.eval()

    # --- knob ---------------------------------------------------------------------------------
    def knob_values(self) -> list[int]:
        experts = int(self.cfg.experts)
        values = sorted({int(k) for k in self.cfg.k_values} | {experts})
        bad = [k for k in values if not 1 <= k <= experts]
        if bad:
            raise UserError(f"moefication.k_values={list(self.cfg.k_values)}: every k must be in 1..experts "
                            f"({experts}); bad: {bad}")
        return values

    def set_knob(self, model: nn.Module, value: int) -> None:
        for layer in moe_layers(model):
            layer.k = int(value)

    # --- cost ---------------------------------------------------------------------------------
    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        """Fixed part (embed, attention + projections, head, routers on every token) + Σ_layers pairs·2dm.
        A decoding model (encoder–decoder) charges every executed module to its sentence while decoding,
        the MoE MLPs through their logged expert pairs (``MoEMLP.row_macs``)."""
        logged = getattr(model, "last_sample_macs", None)
        if logged is not None:
            return logged.double()
        moes = moe_layers(model)
        tokens = moes[0].last_tokens
        fixed = model.macs(tokens) - sum(m.macs(tokens) for m in moes) + sum(m.fixed_macs(tokens) for m in moes)
        per_sample = sum(m.last_pairs.double() * m.pair_macs() for m in moes)
        return per_sample + float(fixed)

    # --- notes ----------------------------------------------------------------------------------
    def variant(self) -> str:
        cfg = self.cfg
        size = getattr(self, "_expert_size", None)
        return (f"E={cfg.experts}" + (f"x{size}" if size else "") + ";balanced-kmeans(exact)"
                f";router=Linear(d,{getattr(self, '_router_hidden', cfg.router_hidden)})-tanh-Linear(,E),nobias"
                ";target=expert-relu-sum/token-max;BCE;binary-topk;real=grouped")

    def train_budget(self) -> str:
        budget = self.task.base_budget()
        relu_steps, router_steps = self._stage_steps()
        relu = (f"relufication {relu_steps} steps (lr {self.cfg.relu_lr:g})"
                if getattr(self, "_relufied", True) else f"no relufication (ReLU MLPs; {relu_steps} steps unspent)")
        return (f"{relu} + routers {router_steps} steps (Adam lr {self.cfg.router_lr:g}, model frozen), "
                f"batch {budget['batch_size']}, on top of the base model ({budget['steps']} steps)")
