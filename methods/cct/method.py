"""Method ``cct``: convert the task's dense base model to a CCT and train one model for every budget.

Training (paper §2.2, §3): start from the cached dense base model (the dense MLP is split into the M
slices; new LayerNorms calibrated on one batch, gates initialised on), then ``method_steps`` steps
(the budget every method gets on top of the base model) with the task's optimiser settings.  Each sample
draws a budget uniformly from ``cct.budgets`` (repeats weight a value); its symbol's embedding is added
to every token; the loss is task loss + λ·Σ_i |C_budget,i − C_util,i| / C_budget,i over the budget groups
of the batch.  Gate noise α rises linearly from 0 to ``alpha_max`` over the steps.  Budget draws and gate
noise come from generators seeded by (seed, step), so an interrupted run resumes exactly.

Evaluation: one model, every distinct budget is one point (eval-time knob); the real path runs a unit
iff its gate is ≥ 0.5; the cost is the realised usage (never the nominal p), control networks included.

Encoder–decoder tasks (translation, methods/cct/seq2seq.py): the encoder and the decoder have their own
budget symbols; each training sentence draws its encoder budget and its decoder budget independently
from ``cct.budgets`` (the paper's cross product), and the budget loss is summed over (sub-network,
budget group).  Evaluation points are (encoder, decoder) pairs chosen by ``cct.pairs``; the knob value
reads ``e<p_enc>-d<p_dec>``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

import bench.models.transformer as skeleton
from bench import registry, train
from bench.api import Batch, Method
from bench.errors import UserError
from bench.run import code_version, plain
from bench.models.seq2seq import EncoderDecoder
from methods.cct import model as M
from methods.cct import seq2seq as S2S


class CCT(Method):
    name = "cct"

    def __init__(self, cfg, task, run):
        super().__init__(cfg, task, run)
        self.train_budgets = [float(p) for p in cfg.budgets]
        if not self.train_budgets:
            raise UserError("cct.budgets is empty; give at least one budget in (0, 1], e.g. [1.0,0.5]")
        self.points = sorted(set(self.train_budgets), reverse=True)

    def budget(self) -> dict[str, Any]:
        base = self.task.base_budget()
        steps = int(getattr(self.task.cfg, "method_steps", 0) or 0) or int(base["steps"])
        return {"steps": steps, "batch_size": int(base["batch_size"]),
                "lr": float(self.cfg.lr) or float(base["lr"]), "fit": dict(base.get("fit", {}))}

    def build(self) -> nn.Module:
        base = self.run.base_model(self.task)
        if isinstance(base, EncoderDecoder):
            convert, budgets_per_sample, name = S2S.CCTSeq2Seq, 2, "cct-seq2seq"  # encoder and decoder symbols
        elif isinstance(base, skeleton.Encoder):
            convert, budgets_per_sample, name = M.CCTModel, 1, "cct"
        else:
            raise UserError(f"cct needs a skeleton Encoder or EncoderDecoder backbone; task {self.task.name} "
                            f"built {type(base).__name__}")
        torch.manual_seed(self.run.seed)
        c = self.cfg
        try:
            model = convert(base, len(self.points), int(c.slices), int(c.gate_hidden), float(c.gate_bias_init))
        except ValueError as err:
            raise UserError(f"cct.slices={c.slices}: {err}") from None
        budget = self.budget()
        model.calibrate(self.task.train_batch(0, budget["batch_size"]).x)
        symbol_of = torch.tensor([self.points.index(p) for p in self.train_budgets])
        values = torch.tensor(self.points, dtype=torch.float64)
        state = {"step": 0}
        steps, alpha_max, weight = budget["steps"], float(c.alpha_max), float(c.budget_weight)

        def batch_fn(step: int) -> Batch:
            state["step"] = step
            return self.task.train_batch(step, budget["batch_size"])

        def loss_fn(m: nn.Module, batch: Batch) -> Tensor:
            generator = torch.Generator(device=batch.x.device)
            generator.manual_seed(self.run.seed * 1_000_003 + state["step"])
            draws = torch.randint(len(self.train_budgets), (budgets_per_sample, len(batch)), generator=generator)
            symbols = [symbol_of[d].to(batch.x.device) for d in draws]  # per sub-network: [B] symbol indices
            m.alpha = alpha_max * state["step"] / max(1, steps - 1)
            m.generator = generator
            logits = m(batch.x, *symbols)
            return self.task.loss(logits, batch) + weight * m.budget_loss(*symbols, values)

        key = {"base": {"task": self.task.name, "cfg": plain(self.task.cfg), "seed": self.run.seed,
                        "code": code_version(type(self.task), skeleton, train, type(base))},
               "cct": {k: v for k, v in plain(c).items() if k != "pairs"}, "budget": budget,
               "code": code_version(M, S2S, CCT)}
        self.run.fit(model, batch_fn, loss_fn, owner="cct", name=name, key=key, steps=steps, lr=budget["lr"],
                     **budget["fit"])
        model.alpha, model.generator = 0.0, None
        model.real_path = True
        model.eval()
        return model

    # --- knob ---------------------------------------------------------------------------------------
    def _seq2seq(self) -> bool:
        spec = registry.task_spec(self.run.task_name)
        return "encoder-decoder" in spec.backbones(self.task.cfg)

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
        return (f"M={c.slices};h={c.gate_hidden};alpha=0->{c.alpha_max:g};lambda={c.budget_weight:g};"
                f"budgets={','.join(f'{p:g}' for p in self.train_budgets)}")

    def train_budget(self) -> str:
        b = self.budget()
        return f"{b['steps']} steps x batch {b['batch_size']} on the dense base model (lr {b['lr']:g})"
