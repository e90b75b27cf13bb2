"""Method ``act``: trains an ACT model on the task (from scratch, as Graves 2016) and evaluates it.

Loss (Graves eq. 14): task loss + τ·mean ρ, with ρ = N + R per sample (vector) or per token (sequence;
the mean over tokens keeps τ on the same scale for any length).  Only R is differentiable.  The model is
trained from scratch with the task's base budget (the core's protocol: same steps, batch, learning rate,
optimiser policy and data order as the dense base model) and
evaluated on the real path (only running samples/tokens are computed).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bench.api import Batch, Method
from bench.protocol import Stage, StepContext, base_policy
from bench.run import plain
from methods.act import model as act_model


class ACT(Method):
    name = "act"

    def _make_model(self) -> nn.Module:
        cfg = self.cfg
        common = dict(epsilon=float(cfg.epsilon), max_steps=int(cfg.max_steps),
                      halt_bias_init=float(cfg.halt_bias_init))
        if "rnn" in self.capabilities():  # the task's recurrent cell's sizes, read from its dense backbone
            with torch.random.fork_rng():  # built aside: the ACT model's initialisation draws come first
                rnn = self.task.build_backbone()
            return act_model.ACTRNN(int(self.task.example_input(1).shape[-1]), int(rnn.cell.hidden), **common)
        # The task's own embedding and head around one shared block (Universal Transformer + ACT).
        backbone = self.task.build_backbone()
        return act_model.ACTEncoder(self.task.encoder_config(), backbone.embed, backbone.head, **common)

    def starts_from(self) -> str:
        return "scratch"  # Graves 2016: ACT models are trained from scratch

    def convert(self, base: nn.Module | None) -> nn.Module:
        model = self._make_model()
        model.real_path = False
        return model

    def stages(self) -> list[Stage]:
        tau = float(self.cfg.tau)
        return [Stage(f"tau{tau:g}", self._loss, lr=float(self.task.base_budget()["lr"]), config=plain(self.cfg),
                      policy=base_policy(self.task), finish=self._finish)]

    def _loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        logits = model(batch.x)
        return self.task.loss(logits, batch) + float(self.cfg.tau) * model.last.ponder.mean()

    @staticmethod
    def _finish(model: nn.Module) -> None:
        model.real_path = True

    def knob_values(self) -> list[float]:
        return [float(self.cfg.tau)]

    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        if isinstance(model, act_model.ACTRNN):
            return model.last.steps.double() * model.step_macs() + model.fixed_macs()
        return model.sample_macs()

    def sample_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        steps = model.last.steps
        return {"ponder_steps": steps if steps.dim() == 1 else steps.mean(dim=1)}

    def variant(self) -> str:
        return f"eps={self.cfg.epsilon:g};M={self.cfg.max_steps};from-scratch;mean-field"
