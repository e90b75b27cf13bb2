"""Method ``adatape``: build, train and evaluate an AdaTape model (methods/adatape/model.py).

Training: task loss + λ·mean(l_atr) (λ = ``adatape.atr_weight``), on the masked path.
- parity (sequence): trained from scratch with the task's base budget (same steps, batch and learning
  rate as the dense Transformer and the UT/ACT baseline on that task), since its input is a single
  query token and its layers see a different sequence; T = n/2 and K = 2 is the paper's setting
  (τ = T/K).
- imagenet: starts from the task's cached dense ViT (embedding, blocks, norm and head are copied; the
  bank and the shared LayerNorm are new) and trains ``imagenet.method_steps`` steps with the task's
  optimiser settings, like the other methods.  (The paper trains from scratch.)

Knob: (T, τ) at training time, one run per point (knob value ``T<T>-tau<τ>``).  ``adatape.eval_caps``
adds points evaluated on the same model with T capped (``…-cap<c>``), a harness extension named in the
row's variant.  Evaluation runs the real path (exact tape length per sample, grouped by length).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

import bench.models.transformer as skeleton
from bench import train
from bench.api import Batch, Method
from bench.errors import UserError
from bench.run import code_version, plain
from methods.adatape import atr as atr_module
from methods.adatape import model as M


class AdaTape(Method):
    name = "adatape"

    def __init__(self, cfg, task, run):
        super().__init__(cfg, task, run)
        self._cap: int | None = None
        try:
            self.k = atr_module.k_per_step(int(cfg.max_tape), float(cfg.tau))
        except ValueError as err:
            raise UserError(f"adatape.tau={cfg.tau:g} with adatape.max_tape={cfg.max_tape}: {err}; pick tau "
                            f"so that T/tau is a whole number (e.g. tau={int(cfg.max_tape) / 2:g})") from None
        for cap in cfg.eval_caps:
            if not 1 <= int(cap) <= int(cfg.max_tape):
                raise UserError(f"adatape.eval_caps: {cap} is outside 1..max_tape={cfg.max_tape}")

    # --- build --------------------------------------------------------------------------------------
    def _settings(self, d_model: int, heads: int) -> M.TapeSettings:
        learnable = self.cfg.bank == "learnable"
        return M.TapeSettings(max_tape=int(self.cfg.max_tape), tau=float(self.cfg.tau), k=self.k,
                              key_dim=d_model // heads, complex_query=bool(self.cfg.complex_query),
                              query_noise=float(self.cfg.query_noise) if learnable else 0.0,
                              bank_drop=float(self.cfg.bank_drop) if learnable else 0.0)

    def _check_bank(self, size: int) -> None:
        need = int(self.cfg.max_tape) * self.k
        if need > size:
            raise UserError(f"adatape: T*K = {self.cfg.max_tape}*{self.k} = {need} tokens could be read but the "
                            f"bank has {size}; lower adatape.max_tape or raise adatape.tau")

    def _bank(self, d_model: int, input_bank: nn.Module) -> nn.Module:
        if self.cfg.bank == "learnable":
            return M.LearnableBank(int(self.cfg.bank_size), d_model)
        return input_bank

    def make_model(self) -> tuple[nn.Module, dict[str, Any]]:
        """The untrained (parity) or base-initialised (imagenet) model, and what determines its start."""
        torch.manual_seed(self.run.seed)
        if self.task.name == "parity":
            cfg = self.task.encoder_config()
            if cfg.n_layers < 2:  # the tape is appended after layer 1: at least one layer must read it
                cfg = replace(cfg, n_layers=2)
            n = int(self.task.cfg.n)
            bank = self._bank(cfg.d_model, M.ParityBank(n, cfg.d_model))
            model = M.AdaTapeModel(cfg, M.ParityInput(n, cfg.d_model), bank,
                                   nn.ModuleList(skeleton.Block(cfg) for _ in range(cfg.n_layers)),
                                   nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps), nn.Linear(cfg.d_model, 2),
                                   self._settings(cfg.d_model, cfg.n_heads))
            start = {"from": "scratch"}
        else:
            base = self.run.base_model(self.task)
            if not isinstance(base, skeleton.Encoder) or not hasattr(base, "vit"):
                raise UserError(f"adatape needs the task's ViT Encoder; {self.task.name} built {type(base).__name__}")
            vit, cfg = base.vit, base.cfg
            try:
                input_bank = M.PatchBank(vit.image_size, int(self.cfg.bank_patch), vit.channels, cfg.d_model)
            except ValueError as err:
                raise UserError(f"adatape.bank_patch={self.cfg.bank_patch}: {err}") from None
            torch.manual_seed(self.run.seed)
            model = M.AdaTapeModel(cfg, base.embed, self._bank(cfg.d_model, input_bank), base.blocks, base.norm,
                                   base.head, self._settings(cfg.d_model, cfg.n_heads))
            start = {"from": "dense-base", "task_cfg": plain(self.task.cfg),
                     "base_code": code_version(type(self.task), skeleton, train)}
        self._check_bank(model.bank.size)
        return model, start

    def budget(self) -> dict[str, Any]:
        base = self.task.base_budget()
        steps = int(getattr(self.task.cfg, "method_steps", 0) or 0) if self.task.name != "parity" else 0
        budget = {"steps": steps or int(base["steps"]), "batch_size": int(base["batch_size"]),
                  "lr": float(self.cfg.lr) or float(base["lr"]), "fit": dict(base.get("fit", {}))}
        return budget

    def build(self) -> nn.Module:
        model, start = self.make_model()
        budget = self.budget()
        weight = float(self.cfg.atr_weight)

        def loss_fn(m: nn.Module, batch: Batch) -> Tensor:
            logits = m(batch.x)
            return self.task.loss(logits, batch) + weight * m.last.loss.mean()

        train_cfg = {k: v for k, v in plain(self.cfg).items() if k != "eval_caps"}
        key = {"task": self.task.name, "task_cfg": plain(self.task.cfg), "adatape": train_cfg, "start": start,
               "seed": self.run.seed, "budget": budget, "code": code_version(M, atr_module, AdaTape)}
        name = f"{self.cfg.bank}-T{self.cfg.max_tape}-tau{float(self.cfg.tau):g}"
        self.run.fit(model, lambda step: self.task.train_batch(step, budget["batch_size"]), loss_fn,
                     owner="adatape", name=name, key=key, steps=budget["steps"], lr=budget["lr"], **budget["fit"])
        model.real_path = True
        model.eval()
        return model

    # --- knob ---------------------------------------------------------------------------------------
    def _point(self) -> str:
        return f"T{int(self.cfg.max_tape)}-tau{float(self.cfg.tau):g}"

    def knob_values(self) -> list[str]:
        caps = sorted({int(c) for c in self.cfg.eval_caps if int(c) < int(self.cfg.max_tape)}, reverse=True)
        return [self._point()] + [f"{self._point()}-cap{c}" for c in caps]

    def set_knob(self, model: nn.Module, value: Any) -> None:
        text = str(value)
        self._cap = int(text.rsplit("-cap", 1)[1]) if "-cap" in text else None
        model.cap = self._cap

    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        return model.sample_macs(model.last.length, model.last_inputs)

    def sample_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        return {"tape_len": model.last.length.float()}

    def variant(self) -> str:
        c = self.cfg
        text = (f"bank={c.bank};K={self.k};atr_weight={c.atr_weight:g};"
                f"query={'complex' if c.complex_query else 'replace'}")
        if c.bank == "input" and self.task.name == "imagenet":
            text += f";bank_patch={c.bank_patch}"
        if self.task.name == "parity" and int(self.task.cfg.layers) < 2:
            text += ";layers=2 (task: 1)"
        if c.bank == "learnable":
            text += f";C={c.bank_size};noise={c.query_noise:g};drop={c.bank_drop:g}"
        if self._cap is not None:
            text += f";eval-cap T={self._cap} (harness extension)"
        return text

    def train_budget(self) -> str:
        b = self.budget()
        start = "from scratch" if self.task.name == "parity" else "on the dense base model"
        return f"{b['steps']} steps x batch {b['batch_size']} {start} (lr {b['lr']:g})"
