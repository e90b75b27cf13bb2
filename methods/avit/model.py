"""A-ViT: per-token adaptive halting on the shared encoder, with real token removal.

Halting (ACT per token): after block l every active token k gets
h_k^l = sigmoid(gamma * e_{k,0}^l - beta) from dimension 0 of its block output e^l (the residual stream,
before the final norm); h = 1 at the last block.  c_k accumulates h; the token halts at the first block
where c_k + h_k^l >= 1 - eps, with weight R_k = 1 - c_k (the remainder); earlier blocks weigh h.  The
token's representation is the mean field sum_l p_k^l e_k^l (weights sum to 1); the encoder's final norm,
pooling and head read it (class token, mean over tokens, or every token for a per-token head, e.g. CTC
frames: every token has a mean-field output whether it halted early or not).  Ponder rho_k = N_k + R_k
(N = blocks run; only R carries gradient).  The class token halts like any other token.

Two paths, the same function (tests check they agree):

* masked (training): every token is computed, halted tokens are excluded as attention keys (key padding
  mask) and their block outputs are discarded (``torch.where``), so they receive no update at all — the
  fix of NVlabs/A-ViT#13 (the original leaves attention/MLP outputs of halted tokens unmasked and masks
  via ``.data``, hidden from autograd).
* real (evaluation, counting, timing): at every block only active tokens run.  The active tokens of the
  whole batch are gathered into one [N, d] matrix: norms, projections and MLP run once on it (one GEMM
  per Linear for the batch), attention per sample over that sample's active tokens (``ragged_block``;
  halted tokens are neither queries nor keys/values), and the rows are scattered back.  (A block that is
  not the plain skeleton Block falls back to grouping samples by active count and calling the block on
  each group.)  Cost per block per sample = block.macs(n_l) (the n_l² attention term uses that
  sample's own count), and a sample's result never depends on the other samples of the batch.

Distribution prior (§3.3, with NVlabs/A-ViT#4 fixed): H^l = mean of h^l over the batch's valid tokens
that were active at block l, excluding the class token when the encoder pools it (the original drops the
batch's first *sample* instead); H is normalised over blocks and clamped to [0.01, 0.99]; the prior is a
Gaussian over block index 1..L (mean = target depth, std 1) normalised to sum 1 (the original rescales it
so it is not a distribution); loss = KL(prior || H).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bench.models import transformer as skeleton
from bench.models.transformer import Encoder


@dataclass
class HaltLog:
    """What the last forward decided, per sample and token."""

    steps: Tensor  # [B, T] N: blocks each token ran (0 for padding)
    remainder: Tensor  # [B, T] R (differentiable in training)
    kept: Tensor  # [B, L] active tokens per sample entering each block
    layer_scores: list[Tensor]  # per block, [B, T] h of tokens active at that block (0 elsewhere)
    valid: Tensor  # [B, T] bool, not padding

    @property
    def ponder(self) -> Tensor:
        return self.steps + self.remainder


class AViTEncoder(nn.Module):
    """The task's encoder (blocks unchanged) with A-ViT halting."""

    def __init__(self, encoder: Encoder, gate_scale: float, gate_center: float, epsilon: float):
        super().__init__()
        self.encoder = encoder
        self.gate_scale, self.gate_center = gate_scale, gate_center
        self.epsilon = epsilon
        self.real_path = False
        self.last: HaltLog | None = None
        self.force_depth: Tensor | None = None  # [B, T] blocks each token runs, replacing the halting (bench speed)
        self.last_positions = 1
        # True when the task's head reads every token although the encoder's pool would reduce them
        # (an encoder whose forward skips pooling, e.g. a CTC encoder); set by the method from a probe.
        self.per_token = False

    def scores(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.gate_scale * x[..., 0] - self.gate_center)

    def forward(self, inputs: Tensor) -> Tensor:
        enc = self.encoder
        x, mask = enc.embed(inputs)
        valid = ~mask if mask is not None else torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        if self.real_path and not self.training:
            acc, log = self._real(x, valid)
        else:
            acc, log = self._masked(x, valid)
        self.last = log
        normed = enc.norm(acc)
        pooled = normed if self.per_token else enc.pool(normed, mask)
        self.last_positions = pooled.shape[1] if pooled.dim() == 3 else 1
        return enc.head(pooled)

    def _halt(self, x: Tensor, active: Tensor, c: Tensor, last: bool, layer: int = 0):
        """One block of the halting rule on [B, T] tensors; returns (h, p, halting_now, new c).
        With ``force_depth`` the scores are computed and replaced by 1 at a token's forced last block."""
        h = torch.ones_like(c) if last else self.scores(x)
        if self.force_depth is not None and not last:
            h = (self.force_depth <= layer + 1).to(h.dtype)
        h = torch.where(active, h, torch.zeros_like(h))
        halting = active & ((c + h >= 1.0 - self.epsilon) | last)
        p = torch.where(halting, 1.0 - c, h)
        c_new = torch.where(active & ~halting, c + h, c)
        return h, p, halting, c_new

    def _masked(self, x: Tensor, valid: Tensor) -> tuple[Tensor, HaltLog]:
        blocks = self.encoder.blocks
        b, t, _ = x.shape
        active = valid.clone()
        c = x.new_zeros(b, t)
        acc = torch.zeros_like(x)
        steps, remainder = x.new_zeros(b, t), x.new_zeros(b, t)
        kept = torch.zeros(b, len(blocks), dtype=torch.long, device=x.device)
        layer_scores = []
        for l, block in enumerate(blocks):
            kept[:, l] = active.sum(dim=1)
            # halted keys excluded; a sample with no active token keeps all keys (its rows are discarded)
            key_mask = ~active & active.any(dim=1, keepdim=True)
            x = torch.where(active.unsqueeze(-1), block(x, key_mask), x)
            h, p, halting, c_new = self._halt(x, active, c, l == len(blocks) - 1, l)
            acc = acc + p.unsqueeze(-1) * x
            steps = steps + active.to(x.dtype)
            remainder = torch.where(halting, 1.0 - c, remainder)
            layer_scores.append(h)
            c, active = c_new, active & ~halting
        return acc, HaltLog(steps, remainder, kept, layer_scores, valid)

    @torch.no_grad()
    def _real(self, x: Tensor, valid: Tensor) -> tuple[Tensor, HaltLog]:
        blocks = self.encoder.blocks
        b, t, d = x.shape
        x = x.contiguous().clone()
        flat_x = x.view(b * t, d)
        active = valid.clone()
        c = x.new_zeros(b, t)
        acc = torch.zeros_like(x)
        steps, remainder = x.new_zeros(b, t), x.new_zeros(b, t)
        kept = torch.zeros(b, len(blocks), dtype=torch.long, device=x.device)
        layer_scores = []
        for l, block in enumerate(blocks):
            counts = active.sum(dim=1)
            kept[:, l] = counts
            if _plain_block(block):
                # every active token of the batch in one [N, d] matrix (sample-major): one GEMM per Linear for
                # the whole batch; attention per sample over its own active tokens
                rows = active.reshape(-1).nonzero().squeeze(1)
                tokens = flat_x.index_select(0, rows)
                flat_x.index_copy_(0, rows, ragged_block(block, tokens, counts.tolist()))
            else:
                self._grouped(block, flat_x, active, counts)
            h, p, halting, c_new = self._halt(x, active, c, l == len(blocks) - 1, l)
            acc = acc + p.unsqueeze(-1) * x
            steps = steps + active.to(x.dtype)
            remainder = torch.where(halting, 1.0 - c, remainder)
            layer_scores.append(h)
            c, active = c_new, active & ~halting
            if not bool(active.any()):
                break
        return acc, HaltLog(steps, remainder, kept, layer_scores, valid)

    @staticmethod
    def _grouped(block: nn.Module, flat_x: Tensor, active: Tensor, counts: Tensor) -> None:
        """Any block: samples grouped by active count n, each group's tokens as a dense [G, n, d] batch."""
        t, d = active.shape[1], flat_x.shape[1]
        for n in torch.unique(counts).tolist():
            if n == 0:
                continue
            group = (counts == n).nonzero().squeeze(1)
            # positions of each sample's active tokens, in order (stable sort puts active first)
            order = torch.sort((~active.index_select(0, group)).to(torch.uint8), dim=1, stable=True)[1][:, :n]
            flat = (group.unsqueeze(1) * t + order).reshape(-1)
            tokens = flat_x.index_select(0, flat).view(len(group), n, d)
            flat_x.index_copy_(0, flat, block(tokens).reshape(-1, d))

    # --- cost -----------------------------------------------------------------------------------------
    def sample_macs(self) -> Tensor:
        """Per-sample MACs of the last forward: embedding + sum_l block.macs(n_l) + head."""
        enc, log = self.encoder, self.last
        tokens = log.valid.shape[1]
        fixed = skeleton._module_macs(enc.embed, tokens) + skeleton._module_macs(enc.head, self.last_positions)
        kept = log.kept.to(torch.float64)
        total = torch.full((kept.shape[0],), float(fixed), dtype=torch.float64, device=kept.device)
        for l, block in enumerate(enc.blocks):
            n = kept[:, l]
            total = total + block.macs(n)  # 4nd² + 2n·d·d_mlp + 2n²d: the formula holds for tensors
        return total.cpu()


def _plain_block(block: nn.Module) -> bool:
    """A skeleton Block with the skeleton's attention and MLP (what :func:`ragged_block` re-implements)."""
    return (type(block) is skeleton.Block and type(block.attn) is skeleton.Attention
            and type(block.mlp) is skeleton.MLP)


def ragged_block(block: skeleton.Block, x: Tensor, counts: list[int]) -> Tensor:
    """``block`` on the active tokens of several samples stacked as one [N, d] matrix (sample s owns the
    next ``counts[s]`` rows): the same operations as ``Block.forward`` on each sample alone, with the
    norms, projections and MLP run once on all N rows and attention per sample (its own tokens only)."""
    attn = block.attn
    y = block.norm1(x)
    q, k, v = attn.q(y), attn.k(y), attn.v(y)
    mixed = torch.empty_like(q)
    heads, start = attn.n_heads, 0
    for n in counts:
        if n == 0:
            continue
        rows = slice(start, start + n)
        start += n
        qh, kh, vh = (z[rows].view(n, heads, -1).transpose(0, 1) for z in (q, k, v))  # [H, n, dh]
        scores = torch.matmul(qh, kh.transpose(-2, -1)) / math.sqrt(qh.shape[-1])
        mixed[rows] = torch.matmul(torch.softmax(scores, dim=-1), vh).transpose(0, 1).reshape(n, -1)
    x = x + attn.o(mixed)
    return x + block.mlp(block.norm2(x))


# --- losses ---------------------------------------------------------------------------------------------
def ponder_loss(log: HaltLog) -> Tensor:
    """Mean over valid tokens (and samples) of rho = N + R."""
    valid = log.valid.to(log.remainder.dtype)
    return (log.ponder * valid).sum() / valid.sum().clamp_min(1.0)


def gaussian_prior(n_layers: int, target_depth: float, device=None) -> Tensor:
    """Gaussian over block index 1..L with mean ``target_depth`` and std 1, normalised to sum 1."""
    idx = torch.arange(1, n_layers + 1, dtype=torch.float64, device=device)
    logp = -0.5 * (idx - target_depth) ** 2 - 0.5 * math.log(2 * math.pi)
    p = torch.exp(logp)
    return (p / p.sum()).float()


def halting_distribution(log: HaltLog, skip_first_token: bool) -> Tensor:
    """H^l: mean halting score of the valid tokens active at block l (class token left out when
    ``skip_first_token``), normalised over blocks and clamped to [0.01, 0.99]."""
    weights = log.valid.clone()
    if skip_first_token:
        weights[:, 0] = False
    denom = weights.sum().clamp_min(1).to(log.remainder.dtype)
    per_layer = torch.stack([(h * weights).sum() / denom for h in log.layer_scores])
    dist = per_layer / per_layer.sum().clamp_min(1e-12)
    return dist.clamp(0.01, 0.99)


def distribution_loss(log: HaltLog, prior: Tensor, skip_first_token: bool) -> Tensor:
    """KL(prior || H) = sum_l prior_l (log prior_l - log H_l)."""
    dist = halting_distribution(log, skip_first_token)
    return (prior * (prior.log() - dist.log())).sum()
