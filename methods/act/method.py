"""Method ``act``: trains an ACT model on the task (from scratch, as Graves 2016) and evaluates it.

Loss (Graves eq. 14): task loss + τ·mean ρ, with ρ = N + R per sample (vector) or per token (sequence;
the mean over tokens keeps τ on the same scale for any length).  Only R is differentiable.  The model is
trained with the task's base budget (same steps, batch and learning rate as the dense base model) and
evaluated on the real path (only running samples/tokens are computed).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bench.api import Batch, Method
from bench.run import code_version, plain
from methods.act import model as act_model


class ACT(Method):
    name = "act"

    def _make_model(self) -> nn.Module:
        task_cfg, cfg = self.task.cfg, self.cfg
        common = dict(epsilon=float(cfg.epsilon), max_steps=int(cfg.max_steps),
                      halt_bias_init=float(cfg.halt_bias_init))
        if "rnn" in self._backbones():
            return act_model.ACTRNN(task_cfg.n, task_cfg.hidden, **common)
        # The task's own embedding and head around one shared block (Universal Transformer + ACT).
        backbone = self.task.build_backbone()
        return act_model.ACTEncoder(self.task.encoder_config(), backbone.embed, backbone.head, **common)

    def _backbones(self) -> tuple[str, ...]:
        from bench import registry

        return registry.task_spec(self.task.name).backbones(self.task.cfg)

    def build(self) -> nn.Module:
        torch.manual_seed(self.run.seed)
        model = self._make_model()
        budget = self.task.base_budget()
        tau = float(self.cfg.tau)

        def loss_fn(m: nn.Module, batch: Batch) -> Tensor:
            logits = m(batch.x)
            return self.task.loss(logits, batch) + tau * m.last.ponder.mean()

        key = {"task": self.task.name, "task_cfg": plain(self.task.cfg), "act": plain(self.cfg),
               "seed": self.run.seed,
               "code": code_version(act_model, ACT, type(self.task), act_model.RNNCell)}
        self.run.fit(model, lambda step: self.task.train_batch(step, budget["batch_size"]), loss_fn,
                     owner="act", name=f"tau{tau:g}", key=key, steps=budget["steps"], lr=budget["lr"])
        model.real_path = True
        self._budget = budget
        return model

    def knob_values(self) -> list[float]:
        return [float(self.cfg.tau)]

    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        steps = model.last.steps.double()
        if isinstance(model, act_model.ACTRNN):
            return steps * model.step_macs() + model.fixed_macs()
        tokens = steps.shape[1]
        return steps.sum(dim=1) * model.token_step_macs(tokens) + model.fixed_macs(tokens)

    def sample_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        steps = model.last.steps
        return {"ponder_steps": steps if steps.dim() == 1 else steps.mean(dim=1)}

    def variant(self) -> str:
        return f"eps={self.cfg.epsilon:g};M={self.cfg.max_steps};from-scratch;mean-field"

    def train_budget(self) -> str:
        budget = self.task.base_budget()
        return f"{budget['steps']} steps x batch {budget['batch_size']} from scratch (the task's base budget)"
