"""MoEfication layers: an MLP split into E contiguous neuron slices ("experts") with a learned router.

Conventions (methods.md §2; Zhang et al. 2021; ACM's reimplementation):
- Expert e = neurons [e·m, (e+1)·m) of the (permuted) MLP, m = d_mlp / E: rows of fc1.weight/bias and
  the matching columns of fc2.weight.  The output bias b2 is shared and always added.
- Router (acm-code variant): Linear(d, h, no bias) → tanh → Linear(h, E, no bias) on the MLP input (the
  normed token), no input normalisation; h is chosen by the method (method.router_width).  The official repo's variant (L2-normalised inputs, E-wide
  hidden layer initialised from centroids) is not implemented.
- Inference: binary top-k experts per token, selected experts summed WITHOUT router-score scaling.
- Router targets: per-token, per-expert sums of ReLU activations, divided by that token's max over
  experts (→ [0, 1]).  The official code divides by the max over the whole batch, which makes a token's
  label depend on the rest of the batch; the per-token max keeps the same ordering of experts within a
  token (which is all top-k uses) and is batch-independent.

Modes of :class:`MoEMLP` (``mode``):
- "dense": the relufied MLP on every neuron, no router (router training and tests);
- "masked": router, all neurons computed, unselected experts zeroed (tests only: the reference);
- "real": router, (token, expert) pairs sorted by expert, one GEMM pair per expert over its gathered
  tokens, results index-added back.  Used for evaluation, counting and timing.
Every forward logs ``last_selected`` ([B, T, k] expert ids, routed modes), ``last_pairs`` ([B]:
executed (token, expert) pairs per sample) and ``last_tokens`` (T) for per-sample MACs.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from bench.models.transformer import MLP

MODES = ("dense", "masked", "real")


class Router(nn.Module):
    """acm-code's MoEfication router: Linear(d, h) → tanh → Linear(h, E), no biases."""

    def __init__(self, d_model: int, hidden: int, experts: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, experts, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))

    def macs(self, tokens: int) -> int:
        return tokens * (self.fc1.in_features * self.fc1.out_features
                         + self.fc2.in_features * self.fc2.out_features)


def router_targets(hidden: Tensor, experts: int) -> Tensor:
    """Per-expert sums of ReLU activations ``hidden`` [..., d_mlp] normalised by each token's max → [..., E]."""
    sums = hidden.reshape(*hidden.shape[:-1], experts, -1).sum(dim=-1)
    return sums / sums.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(sums.dtype).tiny)


def permute_mlp(mlp: MLP, order: Tensor) -> None:
    """Reorder the hidden neurons of ``mlp`` in place (fc1 rows/bias, fc2 columns): same function."""
    with torch.no_grad():
        mlp.fc1.weight.copy_(mlp.fc1.weight[order])
        if mlp.fc1.bias is not None:
            mlp.fc1.bias.copy_(mlp.fc1.bias[order])
        mlp.fc2.weight.copy_(mlp.fc2.weight[:, order])


class MoEMLP(nn.Module):
    """A relufied MLP whose hidden neurons are E contiguous experts, with a router and top-k selection."""

    def __init__(self, mlp: MLP, experts: int, router_hidden: int):
        super().__init__()
        d_model, d_mlp = mlp.fc1.in_features, mlp.fc1.out_features
        if d_mlp % experts:
            raise ValueError(f"moefication.experts={experts} does not divide the MLP width d_mlp={d_mlp}")
        self.fc1, self.fc2, self.drop = mlp.fc1, mlp.fc2, mlp.drop
        self.act = nn.ReLU()
        self.experts, self.expert_size = experts, d_mlp // experts
        self.router = Router(d_model, router_hidden, experts)
        self.k = experts
        self.mode = "real"
        self.record = False  # dense mode: keep (input, router targets) for router training
        self.recorded: tuple[Tensor, Tensor] | None = None
        self.force_selected: Tensor | None = None  # [tokens, k] expert ids replacing the router's (bench speed)
        self.last_selected: Tensor | None = None
        self.last_pairs: Tensor | None = None
        self.last_tokens = 0

    # --- forward ------------------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        if self.mode not in MODES:
            raise ValueError(f"unknown MoEMLP mode {self.mode!r}; choose one of {MODES}")
        lead = x.shape[:-1]  # [B, T]
        flat = x.reshape(-1, x.shape[-1])
        self.last_tokens = lead[1:].numel()  # tokens per sample
        if self.mode == "dense":
            hidden = self.act(self.fc1(flat))
            if self.record:
                self.recorded = (flat.detach(), router_targets(hidden.detach(), self.experts))
            self.last_selected = None
            self.last_pairs = torch.full(lead[:1], lead[1:].numel() * self.experts, device=x.device)
            return self.drop(self.fc2(hidden)).view(*lead, -1)
        selected = torch.topk(self.router(flat), self.k, dim=-1).indices  # [N, k], binary routing
        if self.force_selected is not None:  # the router ran; its choice is replaced
            selected = self.force_selected
        self.last_selected = selected.view(*lead, selected.shape[-1])
        self.last_pairs = (self.last_selected >= 0).reshape(lead[0], -1).sum(dim=1)  # k per token
        out = self._real(flat, selected) if self.mode == "real" else self._masked(flat, selected)
        return self.drop(out).view(*lead, -1)

    def _masked(self, x: Tensor, selected: Tensor) -> Tensor:
        """Reference path: every neuron computed, unselected experts zeroed (no savings; tests only)."""
        keep = torch.zeros(x.shape[0], self.experts, dtype=x.dtype, device=x.device)
        keep.scatter_(1, selected, 1.0)
        hidden = self.act(self.fc1(x)) * keep.repeat_interleave(self.expert_size, dim=1)
        return self.fc2(hidden)

    def _real(self, x: Tensor, selected: Tensor) -> Tensor:
        """Grouped path: per expert, one GEMM pair over the tokens that selected it; nothing else runs.  The
        per-expert weights, biases and token groups are views made in one call each (``unbind``,
        ``split``), so an expert costs five operator calls: its gather, two GEMMs, the ReLU and its
        index-add (at ViT-B's 128 experts per MLP the calls, not the MACs, set the time at batch 1)."""
        n, k = selected.shape
        experts, m = self.experts, self.expert_size
        expert_of_pair = selected.reshape(-1)
        order = torch.argsort(expert_of_pair, stable=True)
        token_sorted = torch.div(order, k, rounding_mode="floor")  # pair p belongs to token p // k
        counts = torch.bincount(expert_of_pair, minlength=experts).tolist()
        w1 = self.fc1.weight.view(experts, m, -1).transpose(1, 2).unbind(0)  # [d, m] per expert
        b1 = self.fc1.bias.view(experts, m).unbind(0) if self.fc1.bias is not None else [None] * experts
        w2 = self.fc2.weight.view(-1, experts, m).permute(1, 2, 0).unbind(0)  # [m, d] per expert
        out = x.new_zeros(n, self.fc2.out_features)
        for e, tokens in enumerate(token_sorted.split(counts)):
            if counts[e] == 0:
                continue
            rows = x.index_select(0, tokens)
            hidden = torch.mm(rows, w1[e]) if b1[e] is None else torch.addmm(b1[e], rows, w1[e])
            out.index_add_(0, tokens, torch.mm(self.act(hidden), w2[e]))
        return out if self.fc2.bias is None else out + self.fc2.bias

    # --- cost ---------------------------------------------------------------------------------
    def pair_macs(self) -> int:
        """MACs of one (token, expert) pair: d·m (fc1 slice) + m·d (fc2 slice)."""
        return self.expert_size * (self.fc1.in_features + self.fc2.out_features)

    def row_macs(self) -> Tensor:
        """Per-row MACs of the last forward (rows = the input's leading dimension): the router on every
        token plus one pair's MACs per (token, expert) executed (a decoding model's cost ledger)."""
        return self.last_pairs.double() * self.pair_macs() + float(self.fixed_macs(self.last_tokens))

    def fixed_macs(self, tokens: int) -> int:
        """MACs that run whatever the routing: the router on every token (routed modes only)."""
        return 0 if self.mode == "dense" else self.router.macs(tokens)

    def macs(self, tokens: int) -> int:
        """Analytic MACs of ``tokens`` tokens at the current mode and k (every token executes k experts)."""
        per_token = self.experts if self.mode == "dense" else self.k
        return self.fixed_macs(tokens) + tokens * per_token * self.pair_macs()
