"""Method ``adatape``: build, train and evaluate an AdaTape model (methods/adatape/model.py).

Training: task loss + λ·mean(l_atr) (λ = ``adatape.atr_weight``), on the masked path.
- parity (sequence): trained from scratch with the task's base budget (same steps, batch and learning
  rate as the dense Transformer and the UT/ACT baseline on that task), since its input is a single
  query token and its layers see a different sequence; T = n/2 and K = 2 is the paper's setting
  (τ = T/K).  ``adatape.input``: ``token`` (the paper's single trainable token; the input reaches the
  model through the tape only), ``projection`` (an ablation: the token plus a linear map of the whole
  sequence) or ``none`` (a control: the token and no tape, so the output cannot depend on the input).
- imagenet: starts from the task's cached dense ViT (embedding, blocks, norm and head are copied; the
  bank and the shared LayerNorm are new) and trains on the core's method budget with the task's
  optimiser policy, like the other methods, continuing the data after the base model's steps.  (The paper
  trains from scratch.)
Which of the two applies comes from the task's capabilities (``sequence-bits`` or
``image-patches``), never from its name.

Knob: (T, τ) at training time, one run per point (knob value ``T<T>-tau<τ>``).  ``adatape.eval_caps``
adds points evaluated on the same model with T capped (``…-cap<c>``), a harness extension named in the
row's variant.  Evaluation runs the real path (exact tape length per sample, grouped by length).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torch import Tensor, nn

import bench.models.transformer as skeleton
from bench.api import Batch, Method
from bench.errors import UserError
from bench.protocol import Stage, StepContext, base_policy
from bench.run import plain
from methods.adatape import atr as atr_module
from methods.adatape import model as M

PAPER_PARITY_LR = 3e-5  # the paper's parity optimiser (§3.1), applied under recipe=paper
PAPER_PARITY_WARMUP = 1000  # linear warm-up steps (§3.1)


class AdaTape(Method):
    name = "adatape"
    # 2: parity's input is the paper's single trainable token (adatape.input=token)
    # 3: under recipe=paper on parity, Adam at the paper's lr 3e-5 after 1,000 linear warm-up steps
    version = 3

    def __init__(self, cfg, task, run):
        super().__init__(cfg, task, run)
        self._cap: int | None = None
        try:
            self.k = atr_module.k_per_step(int(cfg.max_tape), float(cfg.tau))
        except ValueError as err:
            raise UserError(f"adatape.tau={cfg.tau:g} with adatape.max_tape={cfg.max_tape}: {err}; pick tau "
                            f"so that T/tau is a whole number (e.g. tau={int(cfg.max_tape) / 2:g})") from None
        if str(cfg.input) != "token" and "sequence-bits" not in self.capabilities():
            raise UserError(f"adatape.input={cfg.input} applies to parity's sequence form only (this task's input "
                            f"tokens are its own); leave adatape.input=token")
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

    def _from_scratch(self) -> bool:
        return "sequence-bits" in self.capabilities()

    def starts_from(self) -> str:
        return "scratch" if self._from_scratch() else "base"

    def convert(self, base: nn.Module | None) -> nn.Module:
        """The untrained model over a sequence of input bits (the paper's parity setting, from scratch), or the
        task's dense ViT with a bank of image patches (its embedding, blocks, norm and head are copied)."""
        if base is None:
            cfg = self.task.encoder_config()
            if cfg.n_layers < 2:  # the tape is appended after layer 1: at least one layer must read it
                cfg = replace(cfg, n_layers=2)
            n = int(self.task.example_input(1).shape[-1])  # the number of input bits
            kind = str(self.cfg.input)
            bank = None if kind == "none" else self._bank(cfg.d_model, M.ParityBank(n, cfg.d_model))
            embed = M.ParityInput(n, cfg.d_model) if kind == "projection" else M.ParityToken(cfg.d_model)
            model = M.AdaTapeModel(cfg, embed, bank,
                                   nn.ModuleList(skeleton.Block(cfg) for _ in range(cfg.n_layers)),
                                   nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps), nn.Linear(cfg.d_model, 2),
                                   self._settings(cfg.d_model, cfg.n_heads))
        else:
            vit, cfg = base.vit, base.cfg
            try:
                input_bank = M.PatchBank(vit.image_size, int(self.cfg.bank_patch), vit.channels, cfg.d_model)
            except ValueError as err:
                raise UserError(f"adatape.bank_patch={self.cfg.bank_patch}: {err}") from None
            model = M.AdaTapeModel(cfg, base.embed, self._bank(cfg.d_model, input_bank), base.blocks, base.norm,
                                   base.head, self._settings(cfg.d_model, cfg.n_heads))
        if model.bank is not None:
            self._check_bank(model.bank.size)
        return model

    def _paper_parity(self) -> bool:
        """The paper's parity setting: trained from scratch on sequence bits under ``recipe=paper``."""
        return self._from_scratch() and getattr(self.run, "recipe", "matched") == "paper"

    def stages(self) -> list[Stage]:
        c = self.cfg
        policy = base_policy(self.task)
        if self._paper_parity():  # §3.1: "The learning rate is set as 3e-5, and we use a linear warm-up for 1000 steps"
            lr = float(c.lr) or PAPER_PARITY_LR
            policy = replace(policy, warmup=float(PAPER_PARITY_WARMUP))
        else:
            lr = float(c.lr) or float(self.task.base_budget()["lr"])
        config = {k: v for k, v in plain(c).items() if k != "eval_caps"}
        return [Stage(f"{c.bank}-T{c.max_tape}-tau{float(c.tau):g}", self._loss, lr=lr, config=config,
                      policy=policy, finish=self._finish)]

    def _loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        logits = model(batch.x)
        return self.task.loss(logits, batch) + float(self.cfg.atr_weight) * model.last.loss.mean()

    @staticmethod
    def _finish(model: nn.Module) -> None:
        model.real_path = True

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
        if c.bank == "input" and not self._from_scratch():
            text += f";bank_patch={c.bank_patch}"
        if self._from_scratch():
            text += {"token": ";input=token", "projection": ";input=projection (ablation)",
                     "none": ";input=none (control: no tape)"}[str(c.input)]
        if self._from_scratch() and self.task.encoder_config().n_layers < 2:
            text += ";layers=2 (task: 1)"
        if c.bank == "learnable":
            text += f";C={c.bank_size};noise={c.query_noise:g};drop={c.bank_drop:g}"
        if self._cap is not None:
            text += f";eval-cap T={self._cap} (harness extension)"
        return text
