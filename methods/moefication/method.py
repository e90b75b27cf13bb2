"""MoEfication (Zhang et al. 2021) with ACM's baseline recipe (Wójcik et al., §5 "MoEfication").

Stages (declared; the core runs them on the method budget, split ``relu_fraction`` : rest as ACM's
80 : 20 epochs, bench/protocol.py):
1. Relufication: the task's dense base model with every MLP activation swapped GELU → ReLU, fine-tuned
   whole with the task loss at lr ``relu_lr`` (ACM: Adam 1e-4) with the task's own optimiser extras
   (weight decay, gradient clipping; its warm-up capped at 10% of the stage).  A model whose MLPs
   already use ReLU is fine-tuned the same way, so the budget is spent alike on every task.
2. Expert construction (no training): per MLP, balanced k-means over the L2-normalised fc1 rows
   (clustering.py), then the neurons are permuted so expert e is the contiguous slice e (layers.py).
3. Routers: the model frozen (eval mode, no gradients), one router per MLP (acm-code's shape, width from
   ``router_width``) trained with BCE-with-logits against per-token normalised expert activation sums
   (layers.router_targets), Adam ``router_lr``.
Data continue the task's training stream after the base model's steps (the core's data order).

Evaluation: binary top-k experts per token on the grouped real path; k is the eval-time knob, and k = E
(all experts: the relufied dense MLP, plus the routers' cost) is always one of the points so the ReLU
dense accuracy appears as a row (the GELU dense accuracy is the ``dense`` method's row).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.api import Batch, Method
from bench.errors import UserError
from bench.models.transformer import Block
from bench.protocol import PrepareContext, Stage, short_stage_policy, task_loss
from methods.moefication import clustering, layers
from methods.moefication.layers import MoEMLP

OWNER = "moefication"


def auto_experts(width: int, expert_size: int) -> int:
    """The expert-size rule: the divisor E of the MLP ``width`` nearest to ``width / expert_size`` (ties: fewer,
    larger experts), at least 2 where ``width`` has such a divisor.  3072 / 24 = 128 (the ACM code's ViT-B);
    256 -> 8 experts of 32 (10.7 lies between 8 and 16), 768 -> 32 of 24, 512 -> 16 of 32."""
    goal = width / expert_size
    divisors = [e for e in range(1, width + 1) if width % e == 0]
    candidates = [e for e in divisors if e >= 2] or divisors
    return min(candidates, key=lambda e: (abs(e - goal), e))


def default_k_values(experts: int) -> list[int]:
    """The default k grid: E/8, E/4, E/2 and 3E/4 (rounded, at least 1) and E ([1, 2, 4, 6, 8] at E = 8)."""
    return sorted({max(1, round(experts * share)) for share in (1 / 8, 1 / 4, 1 / 2, 3 / 4)} | {experts})


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


def router_loss(model: nn.Module, batch: Batch) -> Tensor:
    """Loss of one router-training step: the frozen model's dense forward records every MLP's input and
    targets; each router's BCE-with-logits against them, averaged over layers."""
    model.eval()  # frozen backbone: no dropout, no gradients
    with torch.no_grad():
        model(batch.x)
    losses = []
    for layer in moe_layers(model):
        inputs, targets = layer.recorded
        losses.append(F.binary_cross_entropy_with_logits(layer.router(inputs), targets))
    return torch.stack(losses).mean()


class Moefication(Method):
    name = "moefication"
    version = 2  # 2: experts=0 (the default) applies the expert-size rule (24 neurons), k_values=[] scales with E

    def _mlp_width(self) -> int:
        """The MLP width of the task's dense backbone (built aside, its random draws not taken from the run)."""
        if getattr(self, "_width", None) is None:
            with torch.random.fork_rng():
                backbone = self.task.build_backbone()
            blocks = [m for m in backbone.modules() if isinstance(m, Block)]
            if not blocks:
                raise UserError("moefication: the model has no transformer Block with an MLP to split")
            self._width = int(blocks[0].mlp.fc1.out_features)
        return self._width

    def experts(self) -> int:
        """E: ``moefication.experts``, or (0) the expert-size rule on the backbone's MLP width."""
        if int(self.cfg.experts):
            return int(self.cfg.experts)
        return auto_experts(self._mlp_width(), int(self.cfg.expert_size))

    # --- model and stages ---------------------------------------------------------------------------
    def convert(self, base: nn.Module | None) -> nn.Module:
        experts = self.experts()
        self.knob_values()  # fail early on a bad k
        blocks = [m for m in base.modules() if isinstance(m, Block)]
        if not blocks:
            raise UserError("moefication: the model has no transformer Block with an MLP to split")
        for block in blocks:
            if block.mlp.fc1.out_features % experts:
                raise UserError(f"moefication.experts={self.cfg.experts} (E = {experts}) does not divide the MLP "
                                f"width {block.mlp.fc1.out_features}; choose a divisor")
            block.mlp.act = nn.ReLU()  # relufication (a ReLU model is fine-tuned all the same)
        self._router_hidden = router_width(blocks[0].mlp.fc1.in_features, experts, int(self.cfg.router_hidden))
        return base

    def stages(self) -> list[Stage]:
        """relu (fine-tune the relufied model, task loss) then router (experts built, routers trained on the
        frozen model), sharing the method budget ``relu_fraction`` : rest."""
        c = self.cfg
        relu_share, experts = float(c.relu_fraction), self.experts()
        return [
            Stage("relu", task_loss(self.task), lr=float(c.relu_lr), share=relu_share,
                  config={"activation": "relu"}, policy=short_stage_policy(self.task),
                  skip=relu_share == 0.0),
            Stage(f"router-E{experts}", lambda m, batch, ctx: router_loss(m, batch), lr=float(c.router_lr),
                  share=1.0 - relu_share,
                  config={"experts": experts, "router_hidden": int(c.router_hidden),
                          "kmeans_iters": int(c.kmeans_iters)},
                  params=self._router_params,
                  prepare=self._make_experts, finish=self._to_real_path, skip=relu_share == 1.0),
        ]

    def _make_experts(self, model: nn.Module, ctx: PrepareContext) -> None:
        """Expert construction (no training): a cached router checkpoint already holds permuted weights."""
        moes = moefy(model, self.experts(), self._router_hidden, seed=self.run.seed,
                     iters=int(self.cfg.kmeans_iters), cluster=not ctx.cached)
        set_mode(model, "dense")
        for layer in moes:
            layer.record = True
        self._expert_size = moes[0].expert_size

    @staticmethod
    def _router_params(model: nn.Module) -> list[nn.Parameter]:
        return [p for m in moe_layers(model) for p in m.router.parameters()]

    def _to_real_path(self, model: nn.Module) -> None:
        for layer in moe_layers(model):
            layer.record, layer.recorded = False, None
            layer.k = self.experts()
        set_mode(model, "real")

    # --- knob ---------------------------------------------------------------------------------
    def knob_values(self) -> list[int]:
        experts = self.experts()
        chosen = [int(k) for k in self.cfg.k_values] or default_k_values(experts)
        values = sorted(set(chosen) | {experts})
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
        return (f"E={self.experts()}" + (f"x{size}" if size else "") + ";balanced-kmeans(exact)"
                f";router=Linear(d,{getattr(self, '_router_hidden', cfg.router_hidden)})-tanh-Linear(,E),nobias"
                ";target=expert-relu-sum/token-max;BCE;binary-topk;real=grouped")
