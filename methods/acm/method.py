"""Method ``acm``: convert the task's dense base model into an ACMized model and train it in 3 stages.

Recipe (paper §"ACM weight initialization" and §"End-to-end training"):

1. ``distill`` — module-wise representation distillation.  A frozen copy of the dense model runs on the
   training batch; hooks record every replaced module's input z and output o.  Each ACM is trained on its
   (z, o) pairs with MSE(h(z, n), o) averaged over n = 1..N, tokens, dimensions and modules (n = 0 is a
   constant and is left out).  ``acm.distill_mode``: ``no_detach`` (default; the paper's equation, and
   what acm-code intended — its flag is misspelled, so it actually ran ``detach``, the greedy residual
   fit, which we keep as the option).  Only learners (and a kept output bias) train.  Adam (paper: lr 1e-3;
   default here 3e-3, see below).
2. ``gates`` — gate pre-training, learners frozen.  Labels from the threshold rule on the dense model's
   (z, o): d(n) = ‖h(z, n) − o‖₂, t = min{n ∈ 2..N : d(n)/d(n−1) ≥ τ}, N if none (we do not copy
   acm-code's label quirk: a rule that holds at n = 2 gives 2, not N).  Labels 0 and 1 never occur (as in
   the paper); stage 3's budget loss pushes k lower.  Cross-entropy on the gate LOGITS (acm-code takes
   the log of a hard Gumbel sample + 1e-20: loss ~46 and gradients ~1e20 when wrong).  Adam, lr 1e-2.
3. ``e2e`` — end-to-end fine-tuning of all parameters: task loss + α_b·L_b + α_e·L_e + α_d·L_d (0.1 /
   0.05 / 0.05), Gumbel-softmax straight-through at T = 0.8, budget β_target (the knob; one stage-3 run
   per value; stages 1–2 are shared through their cache keys).  ``acm.gate_grad``: straight_through
   (default: the output is Σ_c ν̂_c·h(z, k_c), so the task loss trains the gates, as the paper states) or
   none (acm-code: hard path, the gates learn from the auxiliary losses only).  The Gumbel noise of step s
   comes from the core's per-step generator (seed, stage, step), so an interrupted stage resumes exactly.

Budget: the method budget of the core's protocol (bench/protocol.py) split 2/1/97 as the paper's 2/1/97
epochs, with floors
``acm.min_distill_steps`` = 400 and ``acm.min_gate_steps`` = 100 (capped at 20% / 5% of the budget) taken
from stage 3; the stages always add up to the budget (imagenet's 2345 → 400 / 100 / 1845).  Why: 2% of
2345 steps is 47, and distillation is far from converged that early.  Batch size = the task's.

Learning rates, tuned briefly on the offline small ViT (Fashion-MNIST, patch 7, base model 0.87 top-1, gate h = 16;
2000 test images): stage 1 at the paper's 1e-3 gives, with all learners, 0.37 top-1 after 100 steps,
0.81 after 400, 0.85 after 800; at 3e-3, 0.85 after 400 (k = 2 everywhere: 0.83) — default 3e-3, 400
steps (``detach`` mode at the same setting: 0.845).  Stage 2: the paper's 1e-2 (100 steps: gated 0.85
top-1 at 0.82 of learner compute).  Stage 3: the paper's 1e-4 (batch 512, 97 ImageNet epochs) barely
moves the gates in our ~2k steps (β = 0.4, 300 steps: fraction 0.81 → 0.77 at 1e-4, 0.70 at 3e-4, 0.63
at 1e-3); β = 0.25 over 1000 steps reaches 0.49 at 1e-3 and 0.34 at 3e-3; β = 0.6 at 3e-3: 0.61 with
0.86 top-1 — default 3e-3.  Use the paper's 1e-4 for a pretrained ViT-B on ImageNet.
Stages use the core's default policy: Adam without weight decay, gradient clipping at 1.0, a cosine schedule.

Evaluation runs the real path (gate argmax → grouped GEMMs on sliced weights); per-sample MACs come from
the logged k of every ACM (:func:`methods.acm.modules.sample_macs`).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.api import Batch, Method
from bench.protocol import Stage, StepContext
from bench.run import plain
from methods.acm import modules as M

SPLIT = (2, 1, 97)  # per cent of the budget: distill / gates / end-to-end (the paper's epochs)


@contextmanager
def captured(model: nn.Module, names: list[str]) -> Iterator[dict[str, tuple[Tensor, Tensor]]]:
    """Record (input, output) of the named submodules during forwards inside the block."""
    records: dict[str, tuple[Tensor, Tensor]] = {}
    handles = []
    for name in names:
        def hook(_module, inputs, output, name=name):
            records[name] = (inputs[0].detach(), output.detach())
        handles.append(model.get_submodule(name).register_forward_hook(hook))
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()


def dense_module_io(dense: nn.Module, layers: dict[str, "M.ACM"], batch: Batch):
    """(ACM layer, z, o) for every replaced module: the frozen dense model's input z and output o of that
    module on ``batch``, flattened to tokens [T, d] (the targets of stages 1 and 2)."""
    with torch.no_grad(), captured(dense, list(layers)) as records:
        dense(batch.x)
    for name, layer in layers.items():
        z, o = records[name]
        yield layer, z.reshape(-1, layer.d), o.reshape(-1, layer.d)


def gate_labels(outputs: Tensor, zero: Tensor, target: Tensor, tau: float) -> Tensor:
    """Stage-2 labels (learner counts): t = min{n ∈ 2..N : d(n)/d(n−1) ≥ τ}, else N.

    ``outputs`` [T, N, d] = h(z, n) for n = 1..N, ``zero`` [T, d] = h(z, 0), ``target`` [T, d] = o."""
    n_learners = outputs.shape[1]
    dist = torch.cat([zero.unsqueeze(1), outputs], dim=1).sub(target.unsqueeze(1)).norm(dim=-1)  # [T, N+1]
    ratio = dist[:, 2:] / dist[:, 1:-1].clamp_min(1e-12)  # column j ↔ n = j + 2
    stop = ratio >= tau
    first = torch.where(stop.any(dim=1), stop.float().argmax(dim=1) + 2, torch.full_like(stop[:, 0], n_learners,
                                                                                         dtype=torch.long))
    return first.long()


class ACMMethod(Method):
    name = "acm"

    # --- configuration ------------------------------------------------------------------------------
    def settings(self) -> M.ACMSettings:
        c = self.cfg
        return M.ACMSettings(n_learners=int(c.n_learners), modules=str(c.modules), gate_hidden=int(c.gate_hidden),
                             gate_activation=str(c.gate_activation), keep_output_bias=bool(c.keep_output_bias))

    # --- model and stages -------------------------------------------------------------------------------
    def convert(self, base: nn.Module | None) -> nn.Module:
        self._dense = copy.deepcopy(base).eval()
        for p in self._dense.parameters():
            p.requires_grad_(False)
        model = copy.deepcopy(base)
        self._layers = M.acmize(model, self.settings())
        M.configure(model, temperature=float(self.cfg.temperature), gate_grad=str(self.cfg.gate_grad))
        model.acm_meta = {"beta_target": float(self.cfg.beta_target), "variant": self.variant()}
        return model

    def stages(self) -> list[Stage]:
        """distill / gates / e2e at the paper's 2/1/97 split of the method budget; stages 1-2 get at least
        ``min_distill_steps`` / ``min_gate_steps``, capped at 20% / 5% of the budget (module docstring)."""
        c, budget = self.cfg, self.task.method_budget()
        beta = float(c.beta_target)
        return [
            Stage("distill", self._distill_loss, lr=float(c.lr_distill), share=SPLIT[0],
                  min_steps=min(int(c.min_distill_steps), budget // 5), params=self._learner_params,
                  config={"arch": plain(vars(self.settings())), "mode": str(c.distill_mode)}),
            Stage("gates", self._gate_loss, lr=float(c.lr_gate), share=SPLIT[1],
                  min_steps=min(int(c.min_gate_steps), budget // 20), params=self._gate_params,
                  config={"tau": float(c.gate_tau)}),
            Stage(f"e2e-b{beta:g}", self._e2e_loss, lr=float(c.lr_e2e), share=SPLIT[2],
                  config={"beta": beta, "alphas": [float(c.alpha_b), float(c.alpha_e), float(c.alpha_d)],
                          "temperature": float(c.temperature), "gate_grad": str(c.gate_grad)},
                  finish=self._finish),
        ]

    def _learner_params(self, model: nn.Module) -> list[nn.Parameter]:
        return [p for layer in self._layers.values() for n, p in layer.named_parameters() if not n.startswith("gate.")]

    def _gate_params(self, model: nn.Module) -> list[nn.Parameter]:
        return [p for layer in self._layers.values() for p in layer.gate.parameters()]

    # stage 1: module-wise distillation of every ACM on the frozen dense model's (z, o)
    def _distill_loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        detach = self.cfg.distill_mode == "detach"
        losses = []
        for layer, z, o in dense_module_io(self._dense, self._layers, batch):
            outs = layer.cumulative_outputs(z, detach_earlier=detach)  # [T, N, d]
            losses.append(F.mse_loss(outs, o.unsqueeze(1).expand_as(outs)))
        return torch.stack(losses).mean()

    # stage 2: gate pre-training on the threshold-rule labels, learners frozen
    def _gate_loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        tau = float(self.cfg.gate_tau)
        losses = []
        for layer, z, o in dense_module_io(self._dense, self._layers, batch):
            with torch.no_grad():
                labels = gate_labels(layer.cumulative_outputs(z), layer.zero_output(z), o, tau)
            losses.append(F.cross_entropy(layer.gate(z), labels - layer.min_k))
        return torch.stack(losses).mean()

    # stage 3: end-to-end with the auxiliary losses; Gumbel noise from the step's generator
    def _e2e_loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        c = self.cfg
        M.configure(model, generator=ctx.generator)
        task_loss = self.task.loss(model(batch.x), batch)
        aux = M.auxiliary_losses(M.acm_layers(model), float(c.beta_target))
        return (task_loss + float(c.alpha_b) * aux["budget"] + float(c.alpha_e) * aux["entropy"]
                + float(c.alpha_d) * aux["diversity"])

    @staticmethod
    def _finish(model: nn.Module) -> None:
        M.configure(model, path="auto", force_k=None, generator=None)

    # --- evaluation -----------------------------------------------------------------------------------
    def knob_values(self) -> list[float]:
        return [float(self.cfg.beta_target)]

    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        logged = getattr(model, "last_sample_macs", None)  # a decoding model's per-sentence ledger
        return logged.double() if logged is not None else M.sample_macs(model)

    def token_compute(self, model: nn.Module, batch: Batch) -> Tensor | None:
        if getattr(model, "last_sample_macs", None) is not None:
            return None  # decoding: the ACMs' last calls are the last step's, not per input token
        return M.token_load(model)

    def sample_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        if getattr(model, "last_sample_macs", None) is not None:
            return {}  # decoding: the ACMs' last calls are the last step's, not per sentence
        layers = M.acm_layers(model)
        ks = [layer.last_k for layer in layers]
        return {"acm_learners": M.mean_learners(ks), "acm_fraction": M.compute_fraction(layers, ks).float()}

    def variant(self) -> str:
        c = self.cfg
        bias = "kept" if c.keep_output_bias else "dropped"
        return (f"N={c.n_learners};modules={c.modules};gate={c.gate_hidden or 'auto1%'}h-{c.gate_activation};"
                f"gate_grad={c.gate_grad};distill={c.distill_mode};out_bias={bias};T={c.temperature:g};"
                f"tau={c.gate_tau:g};alpha={c.alpha_b:g}/{c.alpha_e:g}/{c.alpha_d:g}")
