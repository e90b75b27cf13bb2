"""Method ``avit``: fine-tune the task's dense encoder into an A-ViT (model.py) and evaluate it for real.

Recipe (the public code's bugs fixed, see model.py):

* Start: a copy of the task's cached dense base model.  Halting-signal init (``halt_init``): the public
  A-ViT re-initialises the fc2 bias only in a branch that never runs, and acm-code's rule (-beta/(l+1) in
  the first half of the blocks, +10 beta/(l+1) in the second) halts every token by the third block of a
  4-block model at once.  Here, before fine-tuning, the output-dim-0 bias of fc2 of blocks 0..L-2 is
  shifted, block by block on the stage's first training batch, so that the median halting score of
  every block is ``halt_init`` (0.1: no token halts before block 10, every score still has gradient;
  sigmoid(gamma e_0 - beta) with beta = 30 on an untouched ViT is ~1e-13, where the ponder loss has no
  gradient at all).  ``halt_init=0`` keeps the base model unchanged.
* Loss = task loss + ponder_weight * mean_tokens(N + R) + distr_weight * KL(prior || H) on the masked
  path (every token computed, halted ones excluded as keys and never updated).  Adam at ``lr``, 5%
  linear warm-up then cosine, gradient clipping 1.0, no weight decay; no mixup (ACM: incompatible).
* Budget: one stage on the core's method budget (bench/protocol.py); the data continue the task's
  training stream after the base model's steps; 5% warm-up (declared in the stage's policy).

Knob ``halting`` (training-time, one run per value), two protocols (``sweep``):

* ``target`` (the ACM code's A-ViT protocol): the prior's target depth is the knob, given in blocks of a
  12-block ViT (``target``: 4, 6, 8, 10 there) and scaled to the model's depth L (mean target/12 * L),
  the ponder and prior weights fixed (the protocol's 5e-4 and 1.0 label the row ``ACM protocol``).
  Knob value ``target<t>of12``.
* ``ponder_weight`` (the default, a harness variant labelled in the row's variant; the committed rows'
  protocol): the ponder weight is the knob at a fixed target.  Knob value ``pw<weight>``.

``eval_epsilons`` adds eval-time points on the same model with another halting threshold 1 - eps; those
rows carry ``eval-eps=<eps>`` in their variant and ``<value>@eps<eps>`` as knob value, so they never mix
with the trained curve.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import Tensor, nn

from bench.api import Batch, Method
from bench.protocol import Policy, PrepareContext, Stage, StepContext
from bench.run import plain
from methods.avit import model as M

OWNER = "avit"


def calibrate_halting(model: M.AViTEncoder, x: Tensor, target: float) -> list[float]:
    """Shift fc2.bias[0] of blocks 0..L-2 so the median halting score at each block is ``target`` on the
    batch ``x`` (dense pass, block by block: a shift at block l moves e_0 at every later block too).
    Returns the shifts."""
    enc = model.encoder
    goal = (model.gate_center + math.log(target / (1.0 - target))) / model.gate_scale
    shifts = []
    with torch.no_grad():
        for l in range(len(enc.blocks) - 1):
            h, mask = enc.embed(x)
            for block in enc.blocks[: l + 1]:
                h = block(h, mask)
            e0 = h[..., 0] if mask is None else h[..., 0][~mask]
            shift = goal - float(e0.median())
            enc.blocks[l].mlp.fc2.bias[0] += shift
            shifts.append(shift)
    return shifts


REFERENCE_DEPTH = 12  # avit.target counts blocks of a 12-block ViT (the ACM code's ViT-B)
ACM_PONDER_WEIGHT, ACM_DISTR_WEIGHT = 5e-4, 1.0  # the ACM code's fixed weights of its target-depth sweep


def scaled_target(target: float, n_layers: int) -> float:
    """The prior's target depth on an ``n_layers``-block model for ``target`` blocks of a 12-block ViT."""
    return float(target) * n_layers / REFERENCE_DEPTH


class AViT(Method):
    name = "avit"

    def target_depth(self, n_layers: int) -> float:
        """The prior's mean on an ``n_layers``-block encoder: ``avit.target`` twelfths of the depth."""
        return scaled_target(int(self.cfg.target), n_layers)

    def convert(self, base: nn.Module | None) -> nn.Module:
        c = self.cfg
        model = M.AViTEncoder(copy.deepcopy(base), float(c.gate_scale), float(c.gate_center), float(c.epsilon))
        model.to(self.run.device)
        model.per_token = "token-outputs" in self.capabilities()  # a head on every token (e.g. CTC)
        n_layers = len(base.blocks)
        self._prior = M.gaussian_prior(n_layers, self.target_depth(n_layers), device=self.run.device)
        self._skip_cls = base.cfg.pool == "cls"
        model.real_path = False
        return model

    def stages(self) -> list[Stage]:
        c = self.cfg
        pw = float(c.ponder_weight)
        config = {k: v for k, v in plain(c).items() if k != "eval_epsilons"}
        name = f"pw{pw:g}" if str(c.sweep) == "ponder_weight" else f"target{int(c.target)}-pw{pw:g}"
        return [Stage(name, self._loss, lr=float(c.lr), config=config,
                      policy=Policy(warmup=0.05), prepare=self._calibrate, finish=self._finish)]

    def _calibrate(self, model: nn.Module, ctx: PrepareContext) -> None:
        if float(self.cfg.halt_init) > 0:
            self._shifts = calibrate_halting(model, ctx.first_batch().x, float(self.cfg.halt_init))

    def _loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        out = model(batch.x)
        log = model.last
        return (self.task.loss(out, batch) + float(self.cfg.ponder_weight) * M.ponder_loss(log)
                + float(self.cfg.distr_weight) * M.distribution_loss(log, self._prior, self._skip_cls))

    def _finish(self, model: nn.Module) -> None:
        model.real_path = True
        self._eps = float(self.cfg.epsilon)

    # --- knob ---------------------------------------------------------------------------------------
    def _point(self) -> str:
        """The trained point: the target depth (sweep=target) or the ponder weight (sweep=ponder_weight)."""
        if str(self.cfg.sweep) == "target":
            return f"target{int(self.cfg.target)}of{REFERENCE_DEPTH}"
        return f"pw{float(self.cfg.ponder_weight):g}"

    def knob_values(self) -> list[str]:
        point, eps = self._point(), float(self.cfg.epsilon)
        extra = sorted({float(e) for e in self.cfg.eval_epsilons} - {eps})
        return [point] + [f"{point}@eps{e:g}" for e in extra]

    def set_knob(self, model: nn.Module, value: Any) -> None:
        text = str(value)
        self._eps = float(text.split("@eps")[1]) if "@eps" in text else float(self.cfg.epsilon)
        model.epsilon = self._eps

    # --- cost ---------------------------------------------------------------------------------------
    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        return model.sample_macs()

    def token_compute(self, model: nn.Module, batch: Batch) -> Tensor | None:
        """Blocks each token ran, as a share of the encoder's depth (padding: 0)."""
        return model.last.steps.float() / len(model.encoder.blocks)

    def sample_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        log = model.last
        valid = log.valid.to(log.steps.dtype)
        depth = (log.steps * valid).sum(dim=1) / valid.sum(dim=1).clamp_min(1.0)
        kept = log.kept.to(torch.float64) / valid.sum(dim=1, keepdim=True).to(torch.float64).clamp_min(1.0)
        cols = {"avit_mean_depth": depth.cpu(), "avit_cls_depth": log.steps[:, 0].cpu()}
        cols.update({f"avit_kept_l{l}": kept[:, l].cpu() for l in range(kept.shape[1])})
        return cols

    # --- notes --------------------------------------------------------------------------------------
    def variant(self) -> str:
        c = self.cfg
        eps = getattr(self, "_eps", float(c.epsilon))
        halting = f"eps={eps:g}" if eps == float(c.epsilon) else f"eval-eps={eps:g}(trained eps={c.epsilon:g})"
        if str(c.sweep) == "target":  # the target is the knob value
            acm = (float(c.ponder_weight), float(c.distr_weight)) == (ACM_PONDER_WEIGHT, ACM_DISTR_WEIGHT)
            sweep = (f"sweep=target{' (ACM protocol)' if acm else ''};pw={float(c.ponder_weight):g};"
                     f"prior=gauss(w={c.distr_weight:g})")
        else:  # the ponder weight is the knob value
            sweep = (f"sweep=ponder_weight (harness variant);prior=gauss(t={int(c.target)}/{REFERENCE_DEPTH}L,"
                     f"w={c.distr_weight:g})")
        return (f"{sweep};gamma={c.gate_scale:g};beta={c.gate_center:g};halt_init={c.halt_init:g};"
                f"{halting};real=gathered")
