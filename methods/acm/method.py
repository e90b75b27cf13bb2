"""Method ``acm``: convert the task's dense base model into an ACMized model and train it in 3 stages.

Recipe (paper §"ACM weight initialization" and §"End-to-end training"; reference/methods.md §1.3):

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
   comes from a generator seeded by (seed, s), so an interrupted stage resumes exactly.

Budget: the task's ``method_steps`` (the training budget every method gets on top of the base model;
tasks without it: the base model's own step count) split 2/1/97 as the paper's 2/1/97 epochs, with floors
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
Stages use Adam without weight decay, gradient clipping at 1.0 and a cosine schedule (bench/train.py).

Evaluation runs the real path (gate argmax → grouped GEMMs on sliced weights); per-sample MACs come from
the logged k of every ACM (:func:`methods.acm.modules.sample_macs`).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import bench.models.transformer as skeleton
from bench import train
from bench.api import Batch, Method
from bench.errors import UserError
from bench.run import code_version, plain
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

    def __init__(self, cfg, task, run):
        super().__init__(cfg, task, run)
        self.fit_extra: dict[str, Any] = {}  # extra bench.train.fit arguments (tests: stop_after)
        self.stage_keys: dict[str, Any] = {}

    # --- configuration ------------------------------------------------------------------------------
    def settings(self) -> M.ACMSettings:
        c = self.cfg
        return M.ACMSettings(n_learners=int(c.n_learners), modules=str(c.modules), gate_hidden=int(c.gate_hidden),
                             gate_activation=str(c.gate_activation), keep_output_bias=bool(c.keep_output_bias))

    def total_steps(self) -> int:
        return self.task_method_steps()

    def plan(self) -> dict[str, int]:
        """Steps of each stage: 2/1/97 of the budget; stages 1–2 get at least ``min_distill_steps`` /
        ``min_gate_steps`` (but at most 20% / 5% of the budget through those floors); stage 3 the rest."""
        total = self.total_steps()
        # the floors are capped at 20% / 5% of the budget, so the three stages always add up to the budget
        distill = max(1, round(total * SPLIT[0] / 100), min(int(self.cfg.min_distill_steps), total // 5))
        gates = max(1, round(total * SPLIT[1] / 100), min(int(self.cfg.min_gate_steps), total // 20))
        return {"distill": distill, "gates": gates, "e2e": max(1, total - distill - gates)}

    def batch_size(self) -> int:
        return int(self.task.base_budget()["batch_size"])

    # --- build ----------------------------------------------------------------------------------------
    def build(self) -> nn.Module:
        base = self.run.base_model(self.task)
        if not isinstance(base, skeleton.Encoder) and not hasattr(base, "encoder"):
            raise UserError(f"acm needs a skeleton Encoder or encoder-decoder backbone; task {self.task.name} "
                            f"built {type(base).__name__}")
        dense = copy.deepcopy(base).eval()
        for p in dense.parameters():
            p.requires_grad_(False)
        torch.manual_seed(self.run.seed)
        model = copy.deepcopy(base)
        layers = M.acmize(model, self.settings())
        M.configure(model, temperature=float(self.cfg.temperature), gate_grad=str(self.cfg.gate_grad))
        plan = self.plan()
        key = {"base": self._base_key(), "arch": plain(vars(self.settings())), "batch": self.batch_size(),
               "code": code_version(M, ACMMethod)}
        key = self.distill(model, dense, layers, plan["distill"], key)
        key = self.pretrain_gates(model, dense, layers, plan["gates"], plan["distill"], key)
        self.finetune(model, plan["e2e"], plan["distill"] + plan["gates"], key)
        M.configure(model, path="auto", force_k=None, generator=None)
        model.eval()
        model.acm_meta = {"beta_target": float(self.cfg.beta_target), "variant": self.variant()}
        return model

    def _base_key(self) -> dict[str, Any]:
        """What determines the cached dense base model (the same ingredients as RunContext.base_model)."""
        return {"task": self.task.name, "cfg": plain(self.task.cfg), "seed": self.run.seed,
                "code": code_version(type(self.task), skeleton, train)}

    def _fit(self, model: nn.Module, batch_fn, loss_fn, *, name: str, key: Any, steps: int, lr: float,
             params) -> None:
        self.stage_keys[name] = key
        self.run.fit(model, batch_fn, loss_fn, owner="acm", name=name, key=key, steps=steps, lr=lr,
                     params=params, grad_clip=1.0, **self.fit_extra)

    def _batches(self, offset: int, state: dict[str, int] | None = None):
        """Training batches of the stage starting at global step ``offset`` (stages see successive data)."""
        size = self.batch_size()

        def batch_fn(step: int) -> Batch:
            if state is not None:
                state["step"] = step
            return self.task.train_batch(offset + step, size)

        return batch_fn

    # --- stage 1 --------------------------------------------------------------------------------------
    def distill(self, model: nn.Module, dense: nn.Module, layers: dict[str, M.ACM], steps: int,
                upstream: dict[str, Any]) -> dict[str, Any]:
        detach = self.cfg.distill_mode == "detach"

        def loss_fn(_model: nn.Module, batch: Batch) -> Tensor:
            losses = []
            for layer, z, o in dense_module_io(dense, layers, batch):
                outs = layer.cumulative_outputs(z, detach_earlier=detach)  # [T, N, d]
                losses.append(F.mse_loss(outs, o.unsqueeze(1).expand_as(outs)))
            return torch.stack(losses).mean()

        params = [p for layer in layers.values() for n, p in layer.named_parameters() if not n.startswith("gate.")]
        key = {**upstream, "stage": "distill", "mode": self.cfg.distill_mode, "steps": steps,
               "lr": float(self.cfg.lr_distill)}
        self._fit(model, self._batches(0), loss_fn, name="distill", key=key, steps=steps,
                  lr=float(self.cfg.lr_distill), params=params)
        return key

    # --- stage 2 --------------------------------------------------------------------------------------
    def pretrain_gates(self, model: nn.Module, dense: nn.Module, layers: dict[str, M.ACM], steps: int,
                       offset: int, upstream: dict[str, Any]) -> dict[str, Any]:
        tau = float(self.cfg.gate_tau)

        def loss_fn(_model: nn.Module, batch: Batch) -> Tensor:
            losses = []
            for layer, z, o in dense_module_io(dense, layers, batch):
                with torch.no_grad():
                    labels = gate_labels(layer.cumulative_outputs(z), layer.zero_output(z), o, tau)
                losses.append(F.cross_entropy(layer.gate(z), labels - layer.min_k))
            return torch.stack(losses).mean()

        params = [p for layer in layers.values() for p in layer.gate.parameters()]
        key = {"upstream": upstream, "stage": "gates", "tau": tau, "steps": steps, "lr": float(self.cfg.lr_gate)}
        self._fit(model, self._batches(offset), loss_fn, name="gates", key=key, steps=steps,
                  lr=float(self.cfg.lr_gate), params=params)
        return key

    # --- stage 3 --------------------------------------------------------------------------------------
    def finetune(self, model: nn.Module, steps: int, offset: int, upstream: dict[str, Any]) -> dict[str, Any]:
        c = self.cfg
        beta = float(c.beta_target)
        alphas = (float(c.alpha_b), float(c.alpha_e), float(c.alpha_d))
        layers = M.acm_layers(model)
        state = {"step": 0}

        def loss_fn(m: nn.Module, batch: Batch) -> Tensor:
            generator = torch.Generator(device=batch.x.device)
            generator.manual_seed(self.run.seed * 1_000_003 + state["step"])
            M.configure(m, generator=generator)
            task_loss = self.task.loss(m(batch.x), batch)
            aux = M.auxiliary_losses(layers, beta)
            return task_loss + alphas[0] * aux["budget"] + alphas[1] * aux["entropy"] + alphas[2] * aux["diversity"]

        key = {"upstream": upstream, "stage": "e2e", "beta": beta, "alphas": alphas,
               "temperature": float(c.temperature), "gate_grad": str(c.gate_grad), "steps": steps,
               "lr": float(c.lr_e2e)}
        self._fit(model, self._batches(offset, state), loss_fn, name=f"e2e-b{beta:g}", key=key, steps=steps,
                  lr=float(c.lr_e2e), params=list(model.parameters()))
        M.configure(model, generator=None)
        return key

    # --- evaluation -----------------------------------------------------------------------------------
    def knob_values(self) -> list[float]:
        return [float(self.cfg.beta_target)]

    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        logged = getattr(model, "last_sample_macs", None)  # a decoding model's per-sentence ledger
        return logged.double() if logged is not None else M.sample_macs(model)

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

    def train_budget(self) -> str:
        plan, total = self.plan(), self.total_steps()
        return (f"{plan['distill']} distill + {plan['gates']} gate + {plan['e2e']} e2e steps x batch "
                f"{self.batch_size()} on the base model (budget {total} steps split 2/1/97, stages 1-2 >= "
                f"min({self.cfg.min_distill_steps}/{self.cfg.min_gate_steps}, 20%/5% of budget); "
                f"lr {self.cfg.lr_distill:g}/{self.cfg.lr_gate:g}/{self.cfg.lr_e2e:g})")
