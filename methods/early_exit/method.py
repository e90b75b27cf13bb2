"""Method ``early_exit``: SDN internal classifiers + Zero Time Waste cascading/ensembling (model.py).

Recipe (reference/methods.md §4.3, acm-code's ViT-B script scaled to the task's budget):

1. ``heads`` — ICs after ``exit_blocks`` on the task's cached dense base model.  ``backbone=frozen``
   (ZTW / acm-code "without_backbone", default): only the heads train, loss = mean over ICs of the task
   loss (the final head's term has no trainable parameter then and is left out).  ``backbone=joint``
   (SDN's joint variant): backbone, final head and ICs train on the mean over all exits, final included.
   Adam, lr ``lr`` (acm-code 1e-3; no weight decay, gradient clipping 1.0, cosine schedule).
2. ``ensembles`` — only the ensemble weights and biases train (everything else frozen), loss = mean over
   ensembles of the task loss, Adam ``lr_ensemble``.  Skipped with ``ensemble=false``.
Budget: ``total_steps`` (0 = the task's ``method_steps``), split (1 - ensemble_fraction) : ensemble_fraction
as acm-code's 95 : 5 epochs, at the task's batch size; the data continue the task's training stream after
the base model's steps.  The head width defaults to the largest h whose head costs <= ``head_fraction`` of
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

import bench.models.transformer as skeleton
from bench import train
from bench.api import Batch, Method
from bench.errors import UserError
from bench.run import code_version, plain
from methods.early_exit import model as M

OWNER = "early_exit"


class EarlyExit(Method):
    name = "early_exit"

    # --- configuration ------------------------------------------------------------------------------
    def total_steps(self) -> int:
        return int(self.cfg.total_steps) or self.task_method_steps()

    def plan(self) -> dict[str, int]:
        total = self.total_steps()
        ens = max(1, round(total * float(self.cfg.ensemble_fraction))) if self.cfg.ensemble else 0
        ens = min(ens, total - 1)
        return {"heads": total - ens, "ensembles": ens}

    def exit_blocks(self, n_layers: int) -> list[int]:
        blocks = sorted({int(b) for b in self.cfg.exit_blocks})
        if not blocks:
            return list(range(n_layers - 1)) if n_layers > 1 else [0]
        bad = [b for b in blocks if b >= n_layers]
        if bad:
            raise UserError(f"early_exit.exit_blocks={list(self.cfg.exit_blocks)}: the encoder has {n_layers} "
                            f"blocks (0..{n_layers - 1}); bad: {bad}")
        return blocks

    # --- build ----------------------------------------------------------------------------------------
    def build(self) -> nn.Module:
        base = self.run.base_model(self.task)
        if not isinstance(base, skeleton.Encoder):
            raise UserError(f"early_exit needs a skeleton Encoder backbone; task {self.task.name} built "
                            f"{type(base).__name__}")
        budget = self.task.base_budget()
        self._batch_size = int(budget["batch_size"])
        probe = self.task.example_input(1).to(self.run.device)
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
        model.per_token = dense_out.dim() == 3
        plan = self.plan()
        offset = int(budget["steps"])
        key = {"base": {"task": self.task.name, "cfg": plain(self.task.base_config()), "seed": self.run.seed},
               "blocks": blocks, "hidden": hidden, "head": str(self.cfg.head), "backbone": str(self.cfg.backbone),
               "steps": plan["heads"], "lr": float(self.cfg.lr), "batch": self._batch_size,
               "code": code_version(M, EarlyExit, skeleton, train, type(self.task))}
        joint = self.cfg.backbone == "joint"

        def heads_loss(m: nn.Module, batch: Batch) -> Tensor:
            outputs, final = m.all_exits(batch.x, grad_backbone=joint)
            if joint:
                outputs = [*outputs, final]
            return torch.stack([self.task.loss(out, batch) for out in outputs]).mean()

        params = list(model.parameters()) if joint else list(model.heads.parameters())
        model.use_ensemble = False
        self.run.fit(model, self._batches(offset), heads_loss, owner=OWNER, name="heads", key=key,
                     steps=plan["heads"], lr=float(self.cfg.lr), params=params, grad_clip=1.0)
        if plan["ensembles"]:
            model.use_ensemble = True
            ens_key = {"heads": key, "stage": "ensembles", "steps": plan["ensembles"],
                       "lr": float(self.cfg.lr_ensemble)}

            def ensemble_loss(m: nn.Module, batch: Batch) -> Tensor:
                outputs, _ = m.all_exits(batch.x, grad_backbone=False, grad_heads=False)
                return torch.stack([self.task.loss(out, batch) for out in outputs]).mean()

            self.run.fit(model, self._batches(offset + plan["heads"]), ensemble_loss, owner=OWNER,
                         name="ensembles", key=ens_key, steps=plan["ensembles"], lr=float(self.cfg.lr_ensemble),
                         params=list(model.ensembles.parameters()), grad_clip=1.0)
        model.use_ensemble = bool(self.cfg.ensemble)
        return model.eval()

    def _batches(self, offset: int):
        size = self._batch_size
        return lambda step: self.task.train_batch(offset + step, size)

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

    def train_budget(self) -> str:
        plan = self.plan()
        base = self.task.base_budget()
        what = "heads" if self.cfg.backbone == "frozen" else "backbone + heads (joint)"
        return (f"{plan['heads']} steps {what} (Adam lr {self.cfg.lr:g}) + {plan['ensembles']} steps ensembles "
                f"(lr {self.cfg.lr_ensemble:g}), batch {base['batch_size']}, on top of the base model "
                f"({base['steps']} steps)")
