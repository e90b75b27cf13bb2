"""Adaptive Computation Time (Graves 2016) as two models: an RNN cell and a weight-shared transformer block.

Halting (Graves §2): after ponder step n the halting unit gives h^n = σ(W_h·s^n + b_h) (b_h initialised
to 1).  N = min{n : Σ_{m≤n} h^m ≥ 1 − ε}, capped at M.  p^n = h^n for n < N and p^N = R = 1 − Σ_{m<N} h^m,
so Σ_n p^n = 1 exactly.  The output state is the mean field Σ_n p^n·s^n (used in training and at
inference).  Ponder cost ρ = N + R; only R carries gradient (N is a step count).

Known bug avoided: one public implementation adds every ponder state both
unweighted and p-weighted and divides by the step count — not Graves' mean field; it also computes the
last weight as h − max(0, Σh − 1), so the weights can sum to less than 1.  Here the state is exactly
Σ p^n s^n and the weights sum to 1 (tests check both).

Two execution paths:
- masked (training): every sample runs until the slowest sample in the batch halts; halted samples get
  p = 0, so they do not change.
- real (evaluation, counting, timing): at each step only still-running samples (or tokens) are gathered
  and computed; a sample's cost is N × (cell + halting unit) plus the fixed part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bench.models.rnn import RNNCell
from bench.models.transformer import Block, EncoderConfig, attention_core_macs, linear_macs


@dataclass
class Halting:
    """Per-sample (or per-token) result of one ACT loop."""

    state: Tensor  # mean-field state
    steps: Tensor  # N, float
    remainder: Tensor  # R, differentiable

    @property
    def ponder(self) -> Tensor:  # ρ = N + R; gradient flows through R only
        return self.steps + self.remainder


class _HaltingUnit(nn.Module):
    def __init__(self, hidden: int, bias_init: float):
        super().__init__()
        self.linear = nn.Linear(hidden, 1)
        nn.init.constant_(self.linear.bias, bias_init)

    def forward(self, state: Tensor) -> Tensor:
        return torch.sigmoid(self.linear(state)).squeeze(-1)


def _halting_step(h: Tensor, halt_sum: Tensor, running: Tensor, last: bool, epsilon: float):
    """One step of Graves' halting rule; returns (p, halting_now, new halt_sum)."""
    reached = (halt_sum + h) >= 1.0 - epsilon
    halting_now = running & (reached | last)
    p = torch.where(halting_now, 1.0 - halt_sum, torch.where(running, h, torch.zeros_like(h)))
    new_sum = torch.where(running & ~halting_now, halt_sum + h, halt_sum)
    return p, halting_now, new_sum


class ACTRNN(nn.Module):
    """ACT on Graves' parity RNN: one input step, pondered up to ``max_steps`` times."""

    def __init__(self, n_in: int, hidden: int, *, epsilon: float, max_steps: int, halt_bias_init: float,
                 classes: int = 2):
        super().__init__()
        self.epsilon, self.max_steps = epsilon, max_steps
        self.cell = RNNCell(n_in, hidden)
        self.halt = _HaltingUnit(hidden, halt_bias_init)
        self.head = nn.Linear(hidden, classes)  # linear: head(Σ p s) = Σ p head(s) (Graves' mean-field y)
        self.real_path = False
        self.last: Halting | None = None

    def forward(self, x: Tensor) -> Tensor:
        result = self._real(x) if self.real_path else self._masked(x)
        self.last = result
        return self.head(result.state)

    def _masked(self, x: Tensor) -> Halting:
        b = x.shape[0]
        state = x.new_zeros(b, self.cell.hidden)
        acc = torch.zeros_like(state)
        halt_sum, steps, remainder = x.new_zeros(b), x.new_zeros(b), x.new_zeros(b)
        running = torch.ones(b, dtype=torch.bool, device=x.device)
        for n in range(self.max_steps):
            state = self.cell(x, n == 0, state)
            h = self.halt(state)
            p, halting_now, new_sum = _halting_step(h, halt_sum, running, n == self.max_steps - 1, self.epsilon)
            acc = acc + p.unsqueeze(-1) * state
            steps = steps + running.float()
            remainder = torch.where(halting_now, 1.0 - halt_sum, remainder)
            halt_sum, running = new_sum, running & ~halting_now
            if not bool(running.any()):
                break
        return Halting(acc, steps, remainder)

    @torch.no_grad()
    def _real(self, x: Tensor) -> Halting:
        """Evaluate only still-running samples at each step (gather, compute, scatter back)."""
        b = x.shape[0]
        acc = x.new_zeros(b, self.cell.hidden)
        steps, remainder = x.new_zeros(b), x.new_zeros(b)
        idx = torch.arange(b, device=x.device)  # indices of running samples
        state = x.new_zeros(b, self.cell.hidden)
        halt_sum = x.new_zeros(b)
        for n in range(self.max_steps):
            xs = x.index_select(0, idx)
            state = self.cell(xs, n == 0, state)
            h = self.halt(state)
            running = torch.ones_like(h, dtype=torch.bool)
            p, halting_now, new_sum = _halting_step(h, halt_sum, running, n == self.max_steps - 1, self.epsilon)
            acc.index_add_(0, idx, p.unsqueeze(-1) * state)
            steps.index_add_(0, idx, torch.ones_like(h))
            remainder.index_copy_(0, idx, torch.where(halting_now, 1.0 - halt_sum, remainder.index_select(0, idx)))
            keep = ~halting_now
            if not bool(keep.any()):
                break
            idx, state, halt_sum = idx[keep], state[keep], new_sum[keep]
        return Halting(acc, steps, remainder)

    def step_macs(self) -> int:
        return linear_macs(self.cell.cell, 1) + linear_macs(self.halt.linear, 1)

    def fixed_macs(self) -> int:
        return linear_macs(self.head, 1)


class ACTEncoder(nn.Module):
    """Universal-Transformer-style ACT: one shared block applied per token until each token halts.

    State per token: s^0 = embedding; s^n = Block(s^{n−1}) for running tokens.  Halted tokens keep the
    intermediate state at which they halted and still serve as keys/values for running tokens.  Output
    per token = Σ_n p^n s^n; the class token's output feeds the head.  The real path computes queries,
    projections and MLP only for running tokens, and recomputes keys/values only for tokens that were
    just updated (cost per running token per step: q, k, v, o, MLP, halting unit, QKᵀ/AV over all keys;
    plus the initial K/V of every token).
    """

    def __init__(self, cfg: EncoderConfig, embed: nn.Module, head: nn.Module, *, epsilon: float,
                 max_steps: int, halt_bias_init: float):
        super().__init__()
        self.cfg, self.epsilon, self.max_steps = cfg, epsilon, max_steps
        self.embed = embed
        self.block = Block(cfg)
        self.halt = _HaltingUnit(cfg.d_model, halt_bias_init)
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.head = head
        self.real_path = False
        self.last: Halting | None = None  # per token: [B, T]
        # [B, T] ponder steps that replace the halting rule on the real path (bench speed's forced decisions)
        self.force_steps: Tensor | None = None

    def forward(self, inputs: Tensor) -> Tensor:
        x, mask = self.embed(inputs)
        if mask is not None:
            raise NotImplementedError("ACTEncoder does not support padded inputs yet")
        result = self._real(x) if self.real_path else self._masked(x)
        self.last = result
        return self.head(self.norm(result.state[:, 0]))

    def _masked(self, x: Tensor) -> Halting:
        b, t, _ = x.shape
        state, acc = x, torch.zeros_like(x)
        halt_sum, steps, remainder = x.new_zeros(b, t), x.new_zeros(b, t), x.new_zeros(b, t)
        running = torch.ones(b, t, dtype=torch.bool, device=x.device)
        for n in range(self.max_steps):
            new_state = self.block(state)
            state = torch.where(running.unsqueeze(-1), new_state, state)  # halted tokens stay frozen
            h = self.halt(state)
            p, halting_now, new_sum = _halting_step(h, halt_sum, running, n == self.max_steps - 1, self.epsilon)
            acc = acc + p.unsqueeze(-1) * state
            steps = steps + running.float()
            remainder = torch.where(halting_now, 1.0 - halt_sum, remainder)
            halt_sum, running = new_sum, running & ~halting_now
            if not bool(running.any()):
                break
        return Halting(acc, steps, remainder)

    @torch.no_grad()
    def _real(self, x: Tensor) -> Halting:
        b, t, d = x.shape
        blk, attn = self.block, self.block.attn
        heads, dh = attn.n_heads, d // attn.n_heads
        state, acc = x.clone(), torch.zeros_like(x)
        flat_state, flat_acc = state.view(b * t, d), acc.view(b * t, d)
        halt_sum, steps, remainder = x.new_zeros(b * t), x.new_zeros(b * t), x.new_zeros(b * t)
        normed_all = blk.norm1(flat_state)
        keys, values = attn.k(normed_all), attn.v(normed_all)  # K/V of every token's current state
        run_idx = torch.arange(b * t, device=x.device)  # flat (sample, token) indices still running
        for n in range(self.max_steps):
            cur = flat_state.index_select(0, run_idx)
            q = attn.q(blk.norm1(cur)).view(-1, heads, dh)
            # one attention per sample over its own keys/values (run_idx stays sorted, so a sample's running
            # tokens are contiguous); no per-token copy of the keys and values
            per_sample = torch.bincount(torch.div(run_idx, t, rounding_mode="floor"), minlength=b).tolist()
            mixed, start = torch.empty_like(cur), 0
            for s, count in enumerate(per_sample):
                if not count:
                    continue
                q_s = q[start:start + count].transpose(0, 1)  # [heads, n, dh]
                k_s = keys.view(b, t, heads, dh)[s].permute(1, 2, 0)  # [heads, dh, t]
                v_s = values.view(b, t, heads, dh)[s].transpose(0, 1)  # [heads, t, dh]
                weights = torch.softmax(torch.matmul(q_s, k_s) / math.sqrt(dh), dim=-1)
                mixed[start:start + count] = torch.matmul(weights, v_s).transpose(0, 1).reshape(count, d)
                start += count
            cur = cur + attn.o(mixed)
            cur = cur + blk.mlp(blk.norm2(cur))
            # All queries of this step are done: publish the updated tokens' states and their K/V.
            flat_state.index_copy_(0, run_idx, cur)
            normed = blk.norm1(cur)
            keys.index_copy_(0, run_idx, attn.k(normed))
            values.index_copy_(0, run_idx, attn.v(normed))
            h = self.halt(cur)
            running = torch.ones_like(h, dtype=torch.bool)
            hs = halt_sum.index_select(0, run_idx)
            p, halting_now, new_sum = _halting_step(h, hs, running, n == self.max_steps - 1, self.epsilon)
            if self.force_steps is not None:  # forced: halt exactly at the given step (weights as at a halt)
                halting_now = self.force_steps.reshape(-1).index_select(0, run_idx) <= n + 1
                p = torch.where(halting_now, 1.0 - hs, h)
                new_sum = torch.where(halting_now, hs, hs + h)
            flat_acc.index_add_(0, run_idx, p.unsqueeze(-1) * cur)
            steps.index_add_(0, run_idx, torch.ones_like(h))
            remainder.index_copy_(0, run_idx, torch.where(halting_now, 1.0 - hs, remainder.index_select(0, run_idx)))
            halt_sum.index_copy_(0, run_idx, new_sum)
            keep = ~halting_now
            if not bool(keep.any()):
                break
            run_idx = run_idx[keep]
        return Halting(acc, steps.view(b, t), remainder.view(b, t))

    def sample_macs(self) -> Tensor:
        """Per-sample MACs of the last forward, from its logged ponder steps per token (float64 [B])."""
        steps = self.last.steps.double()
        tokens = steps.shape[1]
        return steps.sum(dim=1) * self.token_step_macs(tokens) + self.fixed_macs(tokens)

    def token_step_macs(self, tokens: int) -> int:
        """MACs of one running token in one step: q/k/v/o, MLP, halting unit, and QKᵀ/AV over all keys."""
        attn = self.block.attn
        proj = sum(linear_macs(m, 1) for m in (attn.q, attn.k, attn.v, attn.o))
        return proj + self.block.mlp.macs(1) + linear_macs(self.halt.linear, 1) + \
            attention_core_macs(1, tokens, self.cfg.d_model)

    def fixed_macs(self, tokens: int) -> int:
        """Embedding, the initial K/V of every token, and the head."""
        attn = self.block.attn
        embed = self.embed.macs(tokens) if hasattr(self.embed, "macs") else 0
        return embed + tokens * (linear_macs(attn.k, 1) + linear_macs(attn.v, 1)) + linear_macs(self.head, 1)
