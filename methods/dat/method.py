"""Method ``dat``: train the Depth-Adaptive Transformer on top of the task's dense encoder–decoder.

Recipe (paper §2–3), two declared stages on the core's method budget
(bench/protocol.py), batches continuing the task's training stream:
1. ``aligned`` (``aligned_fraction`` of the budget; α = 0): the classifiers C_1..C_N (C_N = the dense
   head, the others initialised from it) on every block's teacher-forced state, loss = the mean of the N
   label-smoothed token NLLs (uniform weights: the paper's best, Appendix A).  One forward per step.
2. ``exit`` (the rest): L_dec + α·L_exit, L_exit = cross-entropy between the halting distribution q_t
   and the oracle q*_t = δ(argmax_n score_t^n − λ·n) (ties → lowest n), scores from the detached
   classifier outputs: correctness 1[y_t = argmax C_n] or likelihood log p_n(y_t), RBF-smoothed over
   time steps when σ > 0 (weights exp(−(t−t')²/σ), Eq. 15, over the target's positions).  Sequence halting:
   q* = δ(argmax_n Σ_t score_t^n − λ·n).  The exit loss back-propagates into the whole model (paper).
   ``halting=confidence`` has no halting unit: the whole budget is aligned training.
The paper does not give α; 1 is our default.  Both stages: Adam, the method's ``lr``, cosine schedule,
the task's warm-up capped at 10% of the stage, gradient clipping from the task.  Under ``recipe=paper`` the
aligned stage trains from scratch as the dense baseline does (the task's base learning rate and warm-up),
and both stages renormalise gradients above the paper's g_clip = 3 (§4.1).

Evaluation: geometric and confidence halting exit at block n when χ_n (or the max probability of C_n)
exceeds τ_n, one threshold per block, tuned on the validation split (paper §3.2,
methods/dat/tuning.py): the knob value ``ae<a>`` applies the thresholds of best validation BLEU whose
validation average exit is ≤ a; the test split is only decoded with thresholds fixed before it is
read.  Multinomial and sequence halting take the argmax exit (knob value ``argmax``).
``fixed_exits`` adds points where every token exits at block n (the aligned model cut at depth n; the
paper's "aligned, fixed exit" rows).  Per-sentence MACs come from the decision log
(:func:`methods.dat.model.sample_macs_from_log`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from bench.api import Batch, Method
from bench.errors import UserError
from bench.protocol import Policy, Stage, StepContext, base_policy, short_stage_policy
from methods.dat import model as M
from methods.dat import tuning as T

OWNER = "dat"
PAPER_GRAD_CLIP = 3.0  # §4.1: "we re-normalize the gradients if the norm exceeds g_clip = 3"


def rbf_smooth(scores: Tensor, valid: Tensor, sigma: float) -> Tensor:
    """Σ_t' κ(t, t') score_t'^n over the valid positions, κ = exp(−(t−t')²/σ) (Eq. 15); scores [B, T, N].
    σ = 0: no smoothing (the paper's σ → 0, the current token only)."""
    if sigma <= 0:
        return scores
    t = torch.arange(scores.shape[1], device=scores.device, dtype=scores.dtype)
    kernel = torch.exp(-((t[:, None] - t[None, :]) ** 2) / sigma)  # [T, T']
    weights = kernel[None] * valid[:, None, :].to(scores.dtype)  # [B, T, T']
    return torch.einsum("btu,bun->btn", weights, scores * valid[..., None].to(scores.dtype))


def oracle(logits: list[Tensor], y: Tensor, valid: Tensor, *, kind: str, lam: float, sigma: float,
           sequence: bool = False) -> Tensor:
    """Oracle exit (0-based) per token [B, T] (sequence: per sentence [B, 1]) from detached classifier
    outputs: argmax_n (score_n − λ·(n+1)), first maximum on ties (the lowest block)."""
    with torch.no_grad():
        if kind == "correctness":
            scores = torch.stack([(lg.argmax(dim=-1) == y).to(torch.float64) for lg in logits], dim=-1)
        else:
            scores = torch.stack([torch.log_softmax(lg.double(), dim=-1).gather(-1, y.clamp_min(0)[..., None])[..., 0]
                                  for lg in logits], dim=-1)
        scores = rbf_smooth(scores, valid, sigma)
        penalty = lam * torch.arange(1, len(logits) + 1, device=y.device, dtype=torch.float64)
        if sequence:
            total = (scores * valid[..., None].to(scores.dtype)).sum(dim=1, keepdim=True)
            return (total - penalty).argmax(dim=-1)
        return (scores - penalty).argmax(dim=-1)


class DAT(Method):
    name = "dat"
    # 2: the RBF kernel of Eq. 15, exp(−(t−t')²/σ); per-block thresholds tuned on the validation split
    # 3: one geometric halting unit shared by every block; recipe=paper: the aligned stage at the base's
    #    learning rate and warm-up, gradients clipped at 3 in both stages
    version = 3

    # --- losses ---------------------------------------------------------------------------------
    def _aligned(self, logits: list[Tensor], batch: Batch) -> Tensor:
        return torch.stack([self.task.loss(lg, batch) for lg in logits]).mean()

    def _exit_loss(self, model: M.DATModel, logits, states, memory, mem_mask, batch: Batch,
                   log_q: Tensor | None = None) -> Tensor:
        c = self.cfg
        y = batch.y[:, : logits[0].shape[1]]
        valid = y.ne(0)
        sequence = model.halting == "sequence"
        target = oracle(logits, y, valid, kind=str(c.oracle), lam=float(c.lam), sigma=float(c.sigma),
                        sequence=sequence)
        if log_q is None:
            log_q = model.halting_log_q(states, memory, mem_mask)  # [B, T or 1, N]
        nll = -log_q.gather(-1, target[..., None])[..., 0]
        if sequence:
            return nll.mean()
        return (nll * valid).sum() / valid.sum().clamp_min(1)

    # --- model and stages -----------------------------------------------------------------------
    def convert(self, base: nn.Module | None) -> nn.Module:
        model = M.DATModel(base, str(self.cfg.halting))
        bad = [int(k) for k in self.cfg.fixed_exits if not 1 <= int(k) <= model.n_blocks]
        if bad:
            raise UserError(f"dat.fixed_exits={list(self.cfg.fixed_exits)}: the decoder has {model.n_blocks} "
                            f"blocks (exits 1..{model.n_blocks}); bad: {bad}")
        return model

    def stages(self) -> list[Stage]:
        """aligned (``aligned_fraction`` of the method budget; all of it for confidence halting), then exit."""
        c = self.cfg
        confidence = c.halting == "confidence"
        aligned_share = 1.0 if confidence else float(c.aligned_fraction)
        aligned_lr, aligned_policy, policy = self._optimiser()
        exit_cfg = {"oracle": str(c.oracle), "lam": float(c.lam), "sigma": float(c.sigma), "alpha": float(c.alpha)}
        return [
            Stage("aligned", self._aligned_stage_loss, lr=aligned_lr, share=aligned_share,
                  config={"halting": str(c.halting)}, policy=aligned_policy, skip=aligned_share == 0.0,
                  params=_all_but_halting, finish=self.task.configure),
            Stage(f"exit-{c.halting}-{c.oracle}-l{c.lam:g}-s{c.sigma:g}-a{c.alpha:g}", self._exit_stage_loss,
                  lr=float(c.lr), share=1.0 - aligned_share, config=exit_cfg, policy=policy,
                  skip=confidence or aligned_share == 1.0, finish=self.task.configure),
        ]

    def _optimiser(self) -> tuple[float, Policy, Policy]:
        """(aligned stage's learning rate, aligned stage's policy, exit stage's policy).  ``recipe=matched``
        fine-tunes the dense base: both stages at ``lr`` with the task's short-stage policy.  ``recipe=paper``
        trains the aligned model from scratch as the baseline is trained (the base's rate and warm-up) and
        clips at the paper's g_clip in both stages."""
        short = short_stage_policy(self.task)
        if getattr(self.run, "recipe", "matched") != "paper":
            return float(self.cfg.lr), short, short
        from_scratch = replace(base_policy(self.task), grad_clip=PAPER_GRAD_CLIP)
        return (float(self.task.base_budget()["lr"]), from_scratch, replace(short, grad_clip=PAPER_GRAD_CLIP))

    def _aligned_stage_loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        logits, _, _, _ = model(batch.x, mode="all_logits")
        return self._aligned(logits, batch)

    def _exit_stage_loss(self, model: nn.Module, batch: Batch, ctx: StepContext) -> Tensor:
        logits, states, memory, mem_mask, log_q = model(batch.x, mode="halting")
        return self._aligned(logits, batch) + float(self.cfg.alpha) * self._exit_loss(model, logits, states, memory,
                                                                                      mem_mask, batch, log_q)

    # --- knob -----------------------------------------------------------------------------------
    def knob_values(self) -> list[Any]:
        if self.cfg.halting in ("geometric", "confidence"):
            values: list[Any] = [T.budget_label(float(a)) for a in self.cfg.exit_budgets]
        else:
            values = ["argmax"]
        values += [f"exit{int(k)}" for k in self.cfg.fixed_exits]  # checked against the decoder in convert
        return values

    def set_knob(self, model: nn.Module, value: Any) -> None:
        if isinstance(value, str) and value.startswith("exit"):
            model.fixed_exit = int(value[4:])
            return
        model.fixed_exit = None
        budget = T.parse_budget(value)
        if budget is not None:
            chosen = T.choose(self.tuned(model), budget)
            model.thresholds = list(chosen.thresholds)
            model.tuned_choice = chosen

    def tuned(self, model: nn.Module) -> list[T.Candidate]:
        """The threshold candidates of this trained model with their validation BLEU and average exit
        (tuned once per model, on the validation split only: :mod:`methods.dat.tuning`)."""
        if getattr(model, "tuned_candidates", None) is None:
            c = self.cfg
            model.tuned_candidates = T.tune(model, self.task, int(c.tune_samples), int(c.tune_sentences),
                                            int(self.run.seed))
        return model.tuned_candidates

    # --- cost -----------------------------------------------------------------------------------
    def sample_macs(self, model: nn.Module, batch: Batch) -> Tensor:
        total, _ = M.sample_macs_from_log(model, model.log)
        return total

    def sample_columns(self, model: nn.Module, batch: Batch) -> dict[str, Tensor]:
        """avg_exit: mean exit block over the final hypothesis's tokens (the paper's AE); avg_exit_all: over
        every decoded token of every hypothesis; exit_p<i>: the exit of the final hypothesis's token at
        position i (0 = no token)."""
        trace = model.last_trace  # [B, W]
        tokens = trace.gt(0)
        avg = (trace.double() * tokens).sum(1) / tokens.sum(1).clamp_min(1)
        log = model.log
        rows, exits = torch.cat(log.rows), torch.cat(log.exits).double()
        count = torch.zeros(log.batch, dtype=torch.float64).index_add_(0, rows, torch.ones_like(exits))
        total = torch.zeros(log.batch, dtype=torch.float64).index_add_(0, rows, exits)
        columns = {"avg_exit": avg, "avg_exit_all": total / count.clamp_min(1)}
        columns.update({f"exit_p{i}": trace[:, i] for i in range(trace.shape[1])})
        chosen = getattr(model, "tuned_choice", None)
        if chosen is not None and model.fixed_exit is None:  # the thresholds in use and their validation scores
            same = torch.ones(log.batch, dtype=torch.float64)
            columns.update({f"tau_{n + 1}": same * t for n, t in enumerate(model.thresholds)})
            columns.update({"valid_bleu": same * chosen.bleu, "valid_avg_exit": same * chosen.avg_exit})
        return columns

    def variant(self) -> str:
        c = self.cfg
        if c.halting == "confidence":
            return "halting=confidence;aligned-uniform"
        return (f"halting={c.halting};oracle={c.oracle};lam={c.lam:g};sigma={c.sigma:g};alpha={c.alpha:g};"
                "aligned-uniform")


def _all_but_halting(model: nn.Module) -> list[nn.Parameter]:
    """What the aligned stage trains: the decoder and its classifiers (the halting units wait for the exit stage)."""
    return [p for name, p in model.named_parameters() if not name.startswith("halt.")]
