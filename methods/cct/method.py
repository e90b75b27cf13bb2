"""Method ``cct``: convert the task's dense base model to a CCT and train one model for every budget.

Training (paper §2.2, §3): start from the cached dense base model (the dense MLP is split into the M
slices; new LayerNorms calibrated on the stage's first batch, gates initialised on), then one stage on the
core's method budget (bench/protocol.py) with the task's optimiser policy.  Each sample
draws a budget uniformly from ``cct.budgets`` (repeats weight a value); its symbol's embedding is added
to every token; the loss is task loss + λ·Σ_i |C_budget,i − C_util,i| / C_budget,i over the budget groups
of the batch.  Gate noise α rises linearly from 0 to ``alpha_max`` over the steps.  Dropout at
``cct.dropout`` (the paper: 0.1 everywhere) is active while training (input, attention probabilities and
every gated unit's normalised output).  Budget draws and gate noise come from the core's per-step
generator (seed, stage, step), dropout from torch's generator the core seeds per step, so an interrupted
run resumes exactly.

Evaluation: one model, every distinct budget is one point (eval-time knob); the real path runs a unit
iff its gate is ≥ 0.5; the cost is the realised usage (never the nominal p), control networks included.

Encoder–decoder tasks (translation, methods/cct/seq2seq.py): one control symbol per (encoder budget,
decoder budget) pair, its embedding added to every source and target token (§2.2, §4); each training
sentence draws its encoder budget and its decoder budget independently from ``cct.budgets`` (the paper's
cross product), and the budget loss is summed over (pair symbol, sub-network) (Eq. 9).  Evaluation
points are (encoder, decoder) pairs chosen by ``cct.pairs``; the knob value reads ``e<p_enc>-d<p_dec>``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


from bench.api import Batch, Method
from bench.errors import UserError
from bench.protocol import Stage, StepContext, base_policy
from bench.run import plain
from methods.cct import model as M
from methods.cct import seq2seq as S2S


class CCT(Method):
    name = "cct"
    # 2: dropout in training (cct.dropout), one control symbol per (encoder, decoder) budget pair with the
    #    budget loss grouped by pair, control networks 64 wide by default
    version = 2

    def __init__(self, cfg, task, run):
        super().__init__(cfg, task, run)
        self.train_budgets = [float(p) for p in cfg.budgets]
        if not self.train_budgets:
            raise UserError("cct.budgets is empty; give at least one budget in (0, 1], e.g. [1.0,0.5]")
        self.points = sorted(set(self.train_budgets), reverse=True)

    # --- model and stages ---------------------------------------------------------------------------
    def _budgets_per_sample(self) -> int:
        return 2 if self._seq2seq() else 1  # encoder and decoder budget symbols on an encoder-decoder

    def convert(self, base: nn.Module | None) -> nn.Module:
        convert = S2S.CCTSeq2Seq if self._seq2seq() else M.CCTModel
        c = self.cfg
        try:
            return convert(base, len(self.points), int(c.slices), int(c.gate_hidden), float(c.gate_bias_init),
                           dropout=float(c.dropout))
        except ValueError as err:
            raise UserError(f"cct.slices={c.slices}: {err}") from None

    def stages(self) -> list[Stage]:
        c = self.cfg
        lr = float(c.lr) or float(self.task.base_budget()["lr"])
        config = {k: v for k, v in plain(c).items() if k != "pairs"}
        name = "cct-seq2seq" if self._seq2seq() else "cct"
        return [Stage(name, self._loss, lr=lr, config=config, policy=base_policy(self.task),
                      prepare=lambda model, ctx: model.calibrate(ctx.first_batch().x), finish=self._finish)]

    def _loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        symbol_of = torch.tensor([self.points.index(p) for p in self.train_budgets])
        values = torch.tensor(self.points, dtype=torch.float64)
        draws = torch.randint(len(self.train_budgets), (self._budgets_per_sample(), len(batch)),
                              generator=ctx.generator, device=ctx.generator.device)
        symbols = [symbol_of.to(batch.x.device)[d.to(batch.x.device)] for d in draws]  # per sub-network: [B]
        model.alpha = float(self.cfg.alpha_max) * ctx.progress
        model.generator = ctx.generator
        logits, budget = model(batch.x, *symbols, budgets=values)
        return self.task.loss(logits, batch) + float(self.cfg.budget_weight) * budget

    @staticmethod
    def _finish(model: nn.Module) -> None:
        model.alpha, model.generator = 0.0, None
        model.real_path = True

    # --- knob ---------------------------------------------------------------------------------------
    def _seq2seq(self) -> bool:
        return "encoder-decoder" in self.capabilities()

    def knob_values(self) -> list[Any]:
        if not self._seq2seq():
            return list(self.points)
        if self.cfg.pairs == "diagonal":
            pairs = [(p, p) for p in self.points]
        elif self.cfg.pairs == "decoder":
            pairs = [(max(self.points), p) for p in self.points]
        else:
            pairs = [(e, d) for e in self.points for d in self.points]
        return [f"e{e:g}-d{d:g}" for e, d in pairs]

    def set_knob(self, model: nn.Module, value: Any) -> None:
        if isinstance(model, S2S.CCTSeq2Seq):
            enc, dec = str(value)[1:].split("-d")
            model.enc_budget_index = self.points.index(float(enc))
            model.dec_budget_index = self.points.index(float(dec))
            return
        model.budget_index = self.points.index(float(value))

    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        if isinstance(model, S2S.CCTSeq2Seq):
            return model.last_sample_macs.double()
        return model.sample_macs()

    def sample_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        """Realised share of the gated cost, and per (layer, unit) the share of tokens that ran it."""
        if isinstance(model, S2S.CCTSeq2Seq):
            return {k: v.float() for k, v in model.usage_fractions().items()}
        columns = {"gated_fraction": model.gated_fraction().float()}
        for i, block in enumerate(model.blocks):
            d = block.last
            columns[f"use_l{i}_kv"] = d.kv.float().mean(1)
            columns[f"use_l{i}_att"] = d.q.float().mean(1)
            for j in range(block.slices):
                columns[f"use_l{i}_ffn{j}"] = d.ffn[..., j].float().mean(1)
        return columns

    def variant(self) -> str:
        c = self.cfg
        return (f"M={c.slices};h={c.gate_hidden};drop={c.dropout:g};alpha=0->{c.alpha_max:g};"
                f"lambda={c.budget_weight:g};"
                f"budgets={','.join(f'{p:g}' for p in self.train_budgets)}")
