"""Method ``act``: trains an ACT model on the task (from scratch, as Graves 2016) and evaluates it.

Loss (Graves eq. 14): task loss + τ·mean ρ, with ρ = N + R per sample (vector) or per token (sequence;
the mean over tokens keeps τ on the same scale for any length).  Only R is differentiable.  The model is
trained from scratch with the task's base budget (the core's protocol: same steps, batch, optimiser
policy and data order as the dense base model) and evaluated on the real path (only running
samples/tokens are computed).

The recipe (``act.max_steps`` and ``act.lr`` at 0): on the RNN cell, Graves' paper setting, a ponder cap
M = 100 and Adam at learning rate 1e-4; on a shared transformer block (the Universal Transformer
baseline, which Graves does not train) M = 20 and the task's base learning rate.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bench.api import Batch, Method
from bench.protocol import Stage, StepContext, base_policy
from bench.run import plain
from methods.act import model as act_model


PAPER_MAX_STEPS = 100  # Graves 2016 §3: the ponder cap M of every experiment
PAPER_LR = 1e-4  # Graves 2016 §3: Adam's learning rate
ENCODER_MAX_STEPS = 20  # the Universal Transformer baseline's cap (a harness choice)


class ACT(Method):
    name = "act"
    version = 2  # 2: the RNN cell trains with Graves' cap M = 100 and Adam at lr 1e-4 (act.max_steps/lr = 0)

    def _rnn(self) -> bool:
        """Whether ACT ponders the task's recurrent cell (Graves' setting) rather than a shared block."""
        return "rnn" in self.capabilities()

    def max_steps(self) -> int:
        """The ponder cap M: ``act.max_steps``, or the recipe's when it is 0."""
        if int(self.cfg.max_steps):
            return int(self.cfg.max_steps)
        return PAPER_MAX_STEPS if self._rnn() else ENCODER_MAX_STEPS

    def lr(self) -> float:
        """Adam's learning rate: ``act.lr``, or the recipe's when it is 0."""
        if float(self.cfg.lr):
            return float(self.cfg.lr)
        return PAPER_LR if self._rnn() else float(self.task.base_budget()["lr"])

    def _make_model(self) -> nn.Module:
        cfg = self.cfg
        common = dict(epsilon=float(cfg.epsilon), max_steps=self.max_steps(),
                      halt_bias_init=float(cfg.halt_bias_init))
        if self._rnn():  # the task's recurrent cell's sizes, read from its dense backbone
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
        return [Stage(f"tau{tau:g}", self._loss, lr=self.lr(), config=plain(self.cfg),
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
        return f"eps={self.cfg.epsilon:g};M={self.max_steps()};lr={self.lr():g};from-scratch;mean-field"
