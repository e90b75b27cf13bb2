"""Early-exit encoder: SDN internal classifiers (ICs) with Zero Time Waste cascading and ensembling.

Conventions:

* An IC after block b reads the block's output *without* the final encoder LayerNorm, pooled the way the
  encoder pools (``Encoder.pool``: the class token, or the mean over valid tokens).  If a task's pooling
  keeps every token (a per-token head, e.g. CTC frames), the pooled tensor is [B, T, d] and every IC emits
  per-token outputs [B, T, C]: the heads are MLPs on the last dimension, so nothing else changes.
* IC i = Linear(d, h) -> GELU -> Linear(h, h) -> GELU -> [features ; LayerNorm(detach(logits of IC i-1))]
  -> Linear(h + C, C) (ZTW "cascading 3-layer head"; IC 0 and ``standard`` heads have no cascade input).
  The cascade input is detached (§4.7), so later heads never train earlier ones.
* Ensemble i (ZTW stage 2) = (1 / (i + 1)) * sum_{j <= i} exp(w_ij) * log_softmax(logits_j) + b_i: a
  weighted geometric ensemble of ICs 0..i.  The backbone's final head is not ensembled.
* Exit rule: after IC i the sample stops if its confidence (max softmax of the exit's output; for
  per-token outputs the mean over valid tokens of the per-token max softmax) is strictly greater than
  the threshold; samples that never exit take the final head (final norm + the task's head).
* Real path (``forward``, evaluation): exited samples leave the batch (the hidden state, padding mask and
  the cascade/ensemble state are indexed by the still-running samples), so at batch 1 a sample stops at
  its exit.  ``all_exits`` runs every head on every sample (training).
* Per-sample MACs from the logged exit index: embedding + blocks up to the exit block + every IC evaluated
  so far (+ the final head when no IC fired).  The ensembles and the LayerNorm of the cascade input are
  elementwise (no multiply-accumulates in the vision convention).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.models import transformer as skeleton
from bench.models.transformer import Encoder, linear_macs


class ExitHead(nn.Module):
    """One internal classifier: a 3-Linear MLP; the last Linear also reads the previous IC's logits."""

    def __init__(self, d_model: int, hidden: int, classes: int, cascade: bool):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.cascade = cascade
        self.prev_norm = nn.LayerNorm(classes) if cascade else None
        self.out = nn.Linear(hidden + (classes if cascade else 0), classes)

    def forward(self, z: Tensor, prev_logits: Tensor | None) -> Tensor:
        feats = F.gelu(self.fc2(F.gelu(self.fc1(z))))
        if self.cascade:
            feats = torch.cat([feats, self.prev_norm(prev_logits.detach())], dim=-1)
        return self.out(feats)

    def macs(self, positions: int = 1) -> int:
        return sum(linear_macs(m, positions) for m in (self.fc1, self.fc2, self.out))


def head_macs(d_model: int, hidden: int, classes: int, cascade: bool) -> int:
    return d_model * hidden + hidden * hidden + (hidden + (classes if cascade else 0)) * classes


def auto_hidden(d_model: int, classes: int, budget_macs: float, floor: int = 8) -> int:
    """The largest width h (>= ``floor``) whose cascading head costs at most ``budget_macs``."""
    h = floor
    while head_macs(d_model, h + 1, classes, True) <= budget_macs:
        h += 1
    return h


class Ensembles(nn.Module):
    """ZTW ensembles: one per IC, ensemble i combines ICs 0..i with weights exp(w_ij) and a class bias."""

    def __init__(self, n_exits: int, classes: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(n_exits, n_exits))  # exp(0) = 1: the plain geometric mean
        self.bias = nn.Parameter(torch.zeros(n_exits, classes))

    def forward(self, i: int, log_probs: list[Tensor]) -> Tensor:
        scale = torch.exp(self.weights[i, : i + 1])
        total = sum(scale[j] * log_probs[j] for j in range(i + 1))
        return total / (i + 1) + self.bias[i]


def confidence(outputs: Tensor, mask: Tensor | None) -> Tensor:
    """Per-sample confidence: max softmax; per-token outputs [B, T, C]: mean over valid tokens."""
    conf = torch.softmax(outputs, dim=-1).amax(dim=-1)
    if conf.dim() == 1:
        return conf
    if mask is None:
        return conf.mean(dim=1)
    keep = (~mask).to(conf.dtype)
    return (conf * keep).sum(dim=1) / keep.sum(dim=1).clamp_min(1.0)


class EarlyExitEncoder(nn.Module):
    """The task's dense encoder (unchanged) plus ICs after ``exit_blocks`` and their ensembles."""

    def __init__(self, encoder: Encoder, exit_blocks: list[int], classes: int, hidden: int, cascade: bool):
        super().__init__()
        self.encoder = encoder
        self.exit_blocks = list(exit_blocks)
        self.heads = nn.ModuleList(ExitHead(encoder.cfg.d_model, hidden, classes, cascade and i > 0)
                                   for i in range(len(exit_blocks)))
        self.ensembles = Ensembles(len(exit_blocks), classes)
        self.use_ensemble = False
        self.threshold = 1.0
        self.last_exit: Tensor | None = None  # [B] exit index; len(exit_blocks) = the final head
        self.force_exit: Tensor | None = None  # [B] exit index replacing the threshold rule (bench speed)
        self.last_tokens = 0
        self.last_positions = 1
        # True when the task's head reads every token although the encoder's pool would reduce them
        # (an encoder whose forward skips pooling, e.g. a CTC encoder); set by the method from a probe.
        self.per_token = False

    def pool(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return x if self.per_token else self.encoder.pool(x, mask)

    @property
    def n_exits(self) -> int:
        return len(self.exit_blocks) + 1

    def final_output(self, x: Tensor, mask: Tensor | None) -> Tensor:
        enc = self.encoder
        return enc.head(self.pool(enc.norm(x), mask))

    # --- training: every head on every sample -------------------------------------------------------
    def all_exits(self, inputs: Tensor, grad_backbone: bool = True,
                  grad_heads: bool = True) -> tuple[list[Tensor], Tensor]:
        """(outputs of every IC (ensembled when ``use_ensemble``), final head output), for all samples.
        ``grad_backbone``/``grad_heads`` = False run those parts without autograd (frozen stages)."""
        track = grad_backbone and torch.is_grad_enabled()
        track_heads = grad_heads and torch.is_grad_enabled()
        with torch.set_grad_enabled(track):
            x, mask = self.encoder.embed(inputs)
        outputs, log_probs, prev = [], [], None
        where = {b: i for i, b in enumerate(self.exit_blocks)}
        for b, block in enumerate(self.encoder.blocks):
            with torch.set_grad_enabled(track):
                x = block(x, mask)
            if b in where:
                i = where[b]
                with torch.set_grad_enabled(track_heads):
                    logits = self.heads[i](self.pool(x, mask), prev)
                prev = logits
                if self.use_ensemble:
                    log_probs.append(F.log_softmax(logits, dim=-1))
                    outputs.append(self.ensembles(i, log_probs))
                else:
                    outputs.append(logits)
        with torch.set_grad_enabled(track):
            final = self.final_output(x, mask)
        return outputs, final

    # --- evaluation: real early exit ------------------------------------------------------------------
    def forward(self, inputs: Tensor, mode: str | None = None, **kwargs) -> Tensor:
        """The real early-exit path (evaluation); ``mode="all_exits"`` returns :meth:`all_exits` (training
        losses call it through ``forward`` so that data-parallel training syncs their gradients)."""
        if mode == "all_exits":
            return self.all_exits(inputs, **kwargs)
        if self.training:
            return self.all_exits(inputs)[1]
        x, mask = self.encoder.embed(inputs)
        b_total = x.shape[0]
        self.last_tokens = x.shape[1]
        where = {b: i for i, b in enumerate(self.exit_blocks)}
        exit_idx = torch.full((b_total,), len(self.exit_blocks), dtype=torch.long, device=x.device)
        rows = torch.arange(b_total, device=x.device)  # original indices of the running samples
        result: Tensor | None = None
        prev: Tensor | None = None
        log_probs: list[Tensor] = []
        for b, block in enumerate(self.encoder.blocks):
            x = block(x, mask)
            if b not in where:
                continue
            i = where[b]
            z = self.pool(x, mask)
            self.last_positions = z.shape[1] if z.dim() == 3 else 1
            logits = self.heads[i](z, prev)
            prev = logits
            if self.use_ensemble:
                log_probs.append(F.log_softmax(logits, dim=-1))
                out = self.ensembles(i, log_probs)
            else:
                out = logits
            if result is None:
                result = out.new_zeros((b_total, *out.shape[1:]))
            done = confidence(out, mask) > self.threshold
            if self.force_exit is not None:  # the head ran; its decision is replaced
                done = self.force_exit.index_select(0, rows) == i
            if bool(done.any()):
                result.index_copy_(0, rows[done], out[done])
                exit_idx[rows[done]] = i
                keep = ~done
                if not bool(keep.any()):
                    self.last_exit = exit_idx
                    return result
                rows, x, prev = rows[keep], x[keep], prev[keep]
                mask = mask[keep] if mask is not None else None
                log_probs = [lp[keep] for lp in log_probs]
        final = self.final_output(x, mask)
        if result is None:
            result = final.new_zeros((b_total, *final.shape[1:]))
        result.index_copy_(0, rows, final)
        self.last_exit = exit_idx
        return result

    # --- cost ---------------------------------------------------------------------------------------
    def exit_macs(self, tokens: int, positions: int = 1) -> list[int]:
        """MACs of a sample that leaves at exit i (i = len(exit_blocks): the final head), for T tokens."""
        enc = self.encoder
        embed = skeleton._module_macs(enc.embed, tokens)
        blocks = [blk.macs(tokens) for blk in enc.blocks]
        heads = [h.macs(positions) for h in self.heads]
        costs = []
        for i, b in enumerate(self.exit_blocks):
            costs.append(embed + sum(blocks[: b + 1]) + sum(heads[: i + 1]))
        costs.append(embed + sum(blocks) + sum(heads) + skeleton._module_macs(enc.head, positions))
        return costs

    def sample_macs(self) -> Tensor:
        """Per-sample MACs of the last forward, from the logged exit indices."""
        table = torch.tensor(self.exit_macs(self.last_tokens, self.last_positions), dtype=torch.float64)
        return table[self.last_exit.cpu()]
