"""Per-block exit thresholds of DAT, tuned on the task's validation split (paper §3.2).

The paper tunes the thresholds τ = (τ_1, …, τ_{N−1}) "on the valid set": it samples threshold vectors
τ ~ U(0, 1)^{N−1}, decodes the valid set with each, measures BLEU and cost, and keeps the τ with the
highest BLEU in each cost segment; results are reported on the test set.  Here:

* candidates: the paper's default exit rule τ = 0.5 at every block, then ``samples`` vectors drawn
  uniformly from [0, 1]^{N−1} with a generator seeded by the run's seed (deterministic);
* each candidate decodes the first ``sentences`` sentences of the validation split (a copy of the task
  whose ``eval_split`` is ``validation``) with the task's own search, giving its corpus BLEU and its
  average exit (AE: the mean exit block over the final hypotheses' tokens, the paper's cost axis);
* a knob value ``ae<a>`` takes the candidate of highest validation BLEU among those with AE ≤ a (ties:
  the lower AE, then the earlier candidate); when no candidate is that cheap, the lowest-AE one.

The test split is never read here: the chosen thresholds depend on the trained model, the validation
split and the seed only.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bench.api import Task
from bench.errors import UserError

DEFAULT_THRESHOLD = 0.5  # the paper's default exit rule: exit when χ_n > 0.5


@dataclass(frozen=True)
class Candidate:
    """One threshold vector and what it achieved on the validation split."""

    thresholds: tuple[float, ...]  # τ_1 … τ_{N−1}
    bleu: float
    avg_exit: float


def budget_label(budget: float) -> str:
    """The knob value of an average-exit budget: ``ae2``, ``ae1.5``."""
    return f"ae{budget:g}"


def parse_budget(value: Any) -> float | None:
    """The average-exit budget of a knob value ``ae<a>``, or None for another value."""
    text = str(value)
    return float(text[2:]) if text.startswith("ae") else None


def draw_candidates(n_thresholds: int, samples: int, seed: int) -> list[tuple[float, ...]]:
    """τ = 0.5 at every block, then ``samples`` vectors from U(0, 1)^{n_thresholds} (seeded)."""
    generator = torch.Generator().manual_seed(int(seed))
    draws = torch.rand(int(samples), n_thresholds, generator=generator, dtype=torch.float64)
    rows = [tuple(float(f"{v:.4f}") for v in row.tolist()) for row in draws]
    return [(DEFAULT_THRESHOLD,) * n_thresholds, *rows]


def validation_task(task: Task, sentences: int) -> Task:
    """The task again, evaluating its validation split (its first ``sentences``; 0 = all of it)."""
    cfg = copy.deepcopy(task.cfg)
    if "eval_split" not in cfg:
        raise UserError(f"dat tunes its exit thresholds on the validation split; the task's config has no "
                        f"eval_split key to select it ({type(task).__name__})")
    cfg.eval_split = "validation"
    if "eval_samples" in cfg:
        cfg.eval_samples = int(sentences)
    if "streaming" in cfg:
        cfg.streaming = False
    return type(task)(cfg, task.run)


@torch.inference_mode()
def measure(model: nn.Module, task: Task, thresholds: tuple[float, ...]) -> Candidate:
    """Decode the task's evaluation split with ``thresholds``: corpus score and average exit."""
    model.fixed_exit = None
    model.thresholds = list(thresholds)
    device = next(model.parameters()).device
    predictions, targets = [], []
    exit_sum, tokens = 0.0, 0
    for batch in task.eval_batches():
        batch = batch.to(device)
        predictions.append(task.predict(task.infer(model, batch.x)).cpu())
        targets.append(batch.y.cpu())
        trace = model.last_trace
        exit_sum += float(trace.double().sum())  # trace: exit block of each token, 0 past the end
        tokens += int(trace.gt(0).sum())
    quality = task.score(torch.cat(predictions), torch.cat(targets))
    return Candidate(tuple(thresholds), float(quality.value), exit_sum / max(tokens, 1))


def tune(model: nn.Module, task: Task, samples: int, sentences: int, seed: int) -> list[Candidate]:
    """Every candidate's validation BLEU and average exit (the first is τ = 0.5 at every block)."""
    valid = validation_task(task, sentences)
    n = int(model.n_blocks) - 1
    return [measure(model, valid, t) for t in draw_candidates(n, samples, seed)]


def choose(candidates: list[Candidate], budget: float) -> Candidate:
    """The candidate of highest validation BLEU with average exit ≤ ``budget`` (ties: lower AE, then the
    earlier one); the lowest-AE candidate when none is that cheap."""
    order = {id(c): i for i, c in enumerate(candidates)}
    within = [c for c in candidates if c.avg_exit <= budget]
    if not within:
        return min(candidates, key=lambda c: (c.avg_exit, -c.bleu, order[id(c)]))
    return min(within, key=lambda c: (-c.bleu, c.avg_exit, order[id(c)]))
