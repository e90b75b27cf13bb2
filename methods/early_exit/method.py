"""Method ``early_exit``: SDN internal classifiers + Zero Time Waste cascading/ensembling (model.py).

Recipe (acm-code's ViT-B script scaled to the task's budget):

1. ``heads`` — ICs after ``exit_blocks`` on the task's cached dense base model.  ``backbone=frozen``
   (ZTW / acm-code "without_backbone", default): only the heads train, loss = mean over ICs of the task
   loss (the final head's term has no trainable parameter then and is left out).  ``backbone=joint``
   (SDN's joint variant): backbone, final head and ICs train on the mean over all exits, final included.
   Adam, lr ``lr`` (acm-code 1e-3; no weight decay, gradient clipping 1.0, cosine schedule).
2. ``ensembles`` — only the ensemble weights and biases train (everything else frozen), loss = mean over
   ensembles of the task loss, Adam ``lr_ensemble``.  Skipped with ``ensemble=false``.
Budget: the core's method budget, split (1 - ensemble_fraction) : ensemble_fraction as acm-code's 95 : 5
epochs, at the task's batch size; the data continue the task's training stream after the base model's
steps (bench/protocol.py).  The head width defaults to the largest h whose head costs <= ``head_fraction`` of
the dense model (ZTW's ViT-B ratio, 0.47%), since acm-code's fixed 8192 would cost far more than the
whole small ViT.

Knob: the confidence threshold, swept at evaluation time on the one trained model; 1.0 is always
evaluated (strict ">" never fires: the full-depth model, plus every head's cost).  The thresholds are
swept over the evaluation split and reported as a curve; none is tuned on it.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from bench.api import Batch, Method
from bench.errors import UserError
from bench.protocol import PrepareContext, Stage, StepContext
from methods.early_exit import model as M

OWNER = "early_exit"


class EarlyExit(Method):
    name = "early_exit"

    # --- configuration ------------------------------------------------------------------------------
    def exit_blocks(self, n_layers: int) -> list[int]:
        blocks = sorted({int(b) for b in self.cfg.exit_blocks})
        if not blocks:
            return list(range(n_layers - 1)) if n_layers > 1 else [0]
        bad = [b for b in blocks if b >= n_layers]
        if bad:
            raise UserError(f"early_exit.exit_blocks={list(self.cfg.exit_blocks)}: the encoder has {n_layers} "
                            f"blocks (0..{n_layers - 1}); bad: {bad}")
        return blocks

    # --- model and stages -----------------------------------------------------------------------------
    def convert(self, base: nn.Module | None) -> nn.Module:
        # the head width is set from a training input: evaluation settings never change the trained model
        probe = self.task.train_batch(0, 1).x.to(self.run.device)
        with torch.no_grad():
            base.eval()
            dense_out = base(probe)
            classes = int(dense_out.shape[-1])
            tokens = int(base.embed(probe)[0].shape[1])
        dense_macs = base.macs(tokens)
        blocks = self.exit_blocks(len(base.blocks))
        d = base.cfg.d_model
        hidden = int(self.cfg.head_hidden) or M.auto_hidden(d, classes, float(self.cfg.head_fraction) * dense_macs)
        self._hidden, self._blocks = hidden, blocks
        torch.manual_seed(self.run.seed)
        model = M.EarlyExitEncoder(copy.deepcopy(base), blocks, classes, hidden,
                                   cascade=self.cfg.head == "cascading").to(self.run.device)
        model.per_token = "token-outputs" in self.capabilities()  # a head on every token (e.g. CTC)
        model.use_ensemble = False
        return model

    def stages(self) -> list[Stage]:
        """heads, then ensembles (skipped with ``ensemble=false``), sharing the method budget
        (1 - ensemble_fraction) : ensemble_fraction."""
        c = self.cfg
        ens_share = float(c.ensemble_fraction) if c.ensemble else 0.0
        heads_cfg = {"blocks": list(c.exit_blocks), "head_hidden": int(c.head_hidden),
                     "head_fraction": float(c.head_fraction), "head": str(c.head), "backbone": str(c.backbone)}
        return [
            Stage("heads", self._heads_loss, lr=float(c.lr), share=1.0 - ens_share, params=self._heads_params,
                  config=heads_cfg),
            Stage("ensembles", self._ensemble_loss, lr=float(c.lr_ensemble), share=ens_share,
                  params=lambda m: list(m.ensembles.parameters()),
                  prepare=self._use_ensembles, skip=not c.ensemble, finish=self._finish),
        ]

    def _heads_params(self, model: nn.Module) -> list[nn.Parameter]:
        return list(model.parameters()) if self.cfg.backbone == "joint" else list(model.heads.parameters())

    def _heads_loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        joint = self.cfg.backbone == "joint"
        outputs, final = model(batch.x, mode="all_exits", grad_backbone=joint)
        if joint:
            outputs = [*outputs, final]
        return torch.stack([self.task.loss(out, batch) for out in outputs]).mean()

    def _ensemble_loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        outputs, _ = model(batch.x, mode="all_exits", grad_backbone=False, grad_heads=False)
        return torch.stack([self.task.loss(out, batch) for out in outputs]).mean()

    @staticmethod
    def _use_ensembles(model: nn.Module, ctx: PrepareContext) -> None:
        model.use_ensemble = True

    def _finish(self, model: nn.Module) -> None:
        model.use_ensemble = bool(self.cfg.ensemble)

    # --- knob ---------------------------------------------------------------------------------------
    def knob_values(self) -> list[float]:
        return sorted({float(t) for t in self.cfg.thresholds} | {1.0})

    def set_knob(self, model: nn.Module, value: Any) -> None:
        model.threshold = float(value)

    # --- cost ---------------------------------------------------------------------------------------
    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        return model.sample_macs()

    def sample_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        exits = model.last_exit.cpu()
        blocks = torch.tensor([*model.exit_blocks, len(model.encoder.blocks) - 1])
        return {"exit_index": exits, "exit_block": blocks[exits]}

    # --- notes --------------------------------------------------------------------------------------
    def variant(self) -> str:
        c = self.cfg
        blocks = getattr(self, "_blocks", None)
        where = ",".join(map(str, blocks)) if blocks is not None else "auto"
        return (f"exits=after blocks {where}+final;head={c.head}-3l-h{getattr(self, '_hidden', c.head_hidden)};"
                f"ensemble={'ztw' if c.ensemble else 'none'};backbone={c.backbone};confidence=max-softmax")
