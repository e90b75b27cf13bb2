"""Conditional Computation Transformer on the shared skeleton (Bapna et al., §2-3; reference notes §6).

Per block, with x the residual stream, y = norm1(x) and M FFN slices (fc1/fc2 of the dense MLP split
into M column/row blocks of d_mlp/M):

    g_kv = σ(G_kv(y) + αε)      K = g_kv·LN_k(y W_k),  V = g_kv·LN_v(y W_v)       (per attended token)
    g_q  = σ(G_q(y) + αε)       x ← x + g_q · W_o Drop(LN_o(MultiHead(y W_q, K, V)))     (per query token)
    g_F  = σ(G_F(norm2(x)) + αε) ∈ (0,1)^M
                                x ← x + Σ_i g_Fi · Drop(LN_out,i(fc2_i(act(fc1_i(LN_in,i(x))))))

G(x) = ReLU(x W1 + b) W2 (one hidden layer, ``gate_hidden`` units), ε ~ N(0, 1) in training only.  A
learned embedding of the budget symbol is added to every token after the task's embedding.

Dropout (training only, ``dropout``; the paper sets every dropout probability to 0.1, Eq. 13 has
Dropout(LN(a))): on the input tokens after the budget embedding is added, on the attention
probabilities, and on every gated unit's normalised output (Drop above: LN_o(a) before W_o, Eq. 13, and
each FFN slice's LN_out,i(·) by the same rule).

Inference: no noise; a unit runs iff g ≥ 0.5 (G ≥ 0) and then contributes with weight 1 (the hard
decision of the paper's eq. 2).  Two paths with the same outputs:
- masked (training; also hard-gated for tests): every unit computed, multiplied by its gate;
- real: K/V computed only for the gathered tokens whose g_kv is on and scattered into ZERO rows (an
  inactive position is a zero key and value that still takes softmax mass, exactly as in training);
  q projection, attention over the sample's T keys and output projection only for tokens with g_q on
  (scatter-add into the residual); each FFN slice only for its own gathered tokens.

Cost per token and layer (MACs): control networks always (3 × (d·h) + h·(2 + M)); K/V 2·d² if on;
attention sublayer 2·d² + 2·T·d if on; slice i 2·d·d_mlp/M if on.  The budget loss uses the same unit
costs (control networks are overhead, not budgeted); rows report the realised total.

Choices where the paper is silent: the slices split the dense MLP (fc2's bias is shared equally among
them); the new LayerNorms are calibrated on one training batch so that, with every gate on, the model
starts close to the dense base model (LN_in,i copies norm2; the others get scale = mean token std and
shift = mean token mean of the quantity they normalise); the FFN gates read norm2(x).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.models.transformer import Block, Encoder, linear_macs, make_activation


class ControlNet(nn.Module):
    """G(x) = ReLU(x W1 + b) W2 + b2: gate logits [.., outputs]."""

    def __init__(self, d_model: int, hidden: int, outputs: int, bias_init: float):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden)
        self.fc2 = nn.Linear(hidden, outputs)
        nn.init.constant_(self.fc2.bias, bias_init)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.relu(self.fc1(x)))

    def macs(self) -> int:
        return linear_macs(self.fc1, 1) + linear_macs(self.fc2, 1)


@dataclass
class Decisions:
    """Hard decisions of one block for a batch: kv [B, T], q [B, T], ffn [B, T, M] (bool)."""

    kv: Tensor
    q: Tensor
    ffn: Tensor


def _calibrate(norm: nn.LayerNorm, values: Tensor) -> None:
    """Set a new LayerNorm so that LN(z) ≈ z on typical inputs: scale = mean token std, shift = mean."""
    flat = values.reshape(-1, values.shape[-1])
    std = flat.std(dim=-1, unbiased=False).mean()
    mean = flat.mean(dim=-1).mean()
    with torch.no_grad():
        norm.weight.fill_(float(std))
        norm.bias.fill_(float(mean))


class SlicedFFN(nn.Module):
    """The dense MLP split into M slices (fc1 rows / fc2 columns), each with its own input and output
    LayerNorm; fc2's bias is shared equally among the slices."""

    def __init__(self, mlp: nn.Module, norm2: nn.LayerNorm, slices: int, activation: str, eps: float):
        super().__init__()
        d, d_mlp = mlp.fc1.in_features, mlp.fc1.out_features
        if d_mlp % slices:
            raise ValueError(f"MLP width {d_mlp} is not divisible by {slices} slices")
        self.slices, self.width = slices, d_mlp // slices
        self.fc1, self.fc2 = nn.ModuleList(), nn.ModuleList()
        for i in range(slices):
            rows = slice(i * self.width, (i + 1) * self.width)
            fc1, fc2 = nn.Linear(d, self.width), nn.Linear(self.width, d)
            with torch.no_grad():
                fc1.weight.copy_(mlp.fc1.weight[rows])
                fc1.bias.copy_(mlp.fc1.bias[rows])
                fc2.weight.copy_(mlp.fc2.weight[:, rows])
                fc2.bias.copy_(mlp.fc2.bias / slices)
            self.fc1.append(fc1)
            self.fc2.append(fc2)
        self.act = make_activation(activation)
        self.ln_in = nn.ModuleList(nn.LayerNorm(d, eps=eps) for _ in range(slices))
        self.ln_out = nn.ModuleList(nn.LayerNorm(d, eps=eps) for _ in range(slices))
        for ln in self.ln_in:
            ln.load_state_dict(norm2.state_dict())

    def part(self, i: int, x: Tensor) -> Tensor:
        return self.fc2[i](self.act(self.fc1[i](self.ln_in[i](x))))

    def forward_slice(self, i: int, x: Tensor) -> Tensor:
        return self.ln_out[i](self.part(i, x))


class CCTBlock(nn.Module):
    def __init__(self, block: Block, slices: int, gate_hidden: int, gate_bias: float, eps: float,
                 activation: str, dropout: float = 0.0):
        super().__init__()
        attn, d = block.attn, block.attn.d_model
        self.d, self.heads, self.slices = d, attn.n_heads, slices
        self.norm1, self.norm2 = block.norm1, block.norm2
        self.q, self.k, self.v, self.o = attn.q, attn.k, attn.v, attn.o
        self.ln_k, self.ln_v, self.ln_o = (nn.LayerNorm(d, eps=eps) for _ in range(3))
        self.gate_kv = ControlNet(d, gate_hidden, 1, gate_bias)
        self.gate_q = ControlNet(d, gate_hidden, 1, gate_bias)
        self.gate_f = ControlNet(d, gate_hidden, slices, gate_bias)
        self.ffn = SlicedFFN(block.mlp, self.norm2, slices, activation, eps)  # after the gates: same init order
        self.width = self.ffn.width
        self.drop = nn.Dropout(dropout)  # training only: attention probabilities and gated unit outputs
        self.last: Decisions | None = None
        self.force: Decisions | None = None  # replaces the real path's gate decisions (bench speed)
        self.last_gates: list[Tensor] = []  # soft gates of the last training forward: kv, q, ffn

    # --- pieces ----------------------------------------------------------------------------------------
    def _slice(self, i: int, x: Tensor) -> Tensor:
        return self.ffn.forward_slice(i, x)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, drop: nn.Module | None = None) -> Tensor:
        """q [N, Tq, d], k/v [N, Tk, d] → [N, Tq, d] (multi-head, explicit matmuls; ``drop``: dropout on the
        attention probabilities)."""
        n, tq, d = q.shape
        dh = d // self.heads
        qh, kh, vh = self._heads(q), self._heads(k), self._heads(v)
        scores = torch.matmul(qh, kh.transpose(-2, -1)) / math.sqrt(dh)
        probs = torch.softmax(scores, dim=-1)
        if drop is not None:
            probs = drop(probs)
        return torch.matmul(probs, vh).transpose(1, 2).reshape(n, tq, d)

    def _heads(self, z: Tensor) -> Tensor:
        """[N, T, d] → [N, heads, T, d/heads] (a view)."""
        n, t, d = z.shape
        return z.view(n, t, self.heads, d // self.heads).transpose(1, 2)

    def _attend_fused(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """One sample's on-queries q [nq, d] over its keys/values k, v [1, heads, T, d/heads] → [nq, d]:
        the attention of :meth:`_attend` (scale 1/√(d/heads), no dropout) in torch's fused kernel, the one
        the dense model runs; the same MACs as :meth:`_attend`'s two products."""
        out = F.scaled_dot_product_attention(self._heads(q.unsqueeze(0)), k, v)
        return out.transpose(1, 2).reshape(q.shape[0], self.d)

    @staticmethod
    def _gate(logits: Tensor, alpha: float, generator: torch.Generator | None, hard: bool) -> Tensor:
        if hard:
            return (logits >= 0).to(logits.dtype)
        if alpha > 0:
            noise = torch.randn(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
            logits = logits + alpha * noise
        return torch.sigmoid(logits)

    # --- masked path -----------------------------------------------------------------------------------
    def forward_masked(self, x: Tensor, alpha: float, generator: torch.Generator | None, hard: bool) -> Tensor:
        y = self.norm1(x)
        g_kv = self._gate(self.gate_kv(y), alpha, generator, hard)
        g_q = self._gate(self.gate_q(y), alpha, generator, hard)
        k = g_kv * self.ln_k(self.k(y))
        v = g_kv * self.ln_v(self.v(y))
        x = x + g_q * self.o(self.drop(self.ln_o(self._attend(self.q(y), k, v, self.drop))))
        g_f = self._gate(self.gate_f(self.norm2(x)), alpha, generator, hard)
        update = sum(g_f[..., i:i + 1] * self.drop(self._slice(i, x)) for i in range(self.slices))
        self.last_gates = [g_kv.squeeze(-1), g_q.squeeze(-1), g_f]
        if hard:
            self.last = Decisions(g_kv.squeeze(-1) > 0.5, g_q.squeeze(-1) > 0.5, g_f > 0.5)
        return x + update

    # --- real path -------------------------------------------------------------------------------------
    def forward_real(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        flat = x.reshape(b * t, d)
        y = self.norm1(flat)
        on_kv = (self.gate_kv(y) >= 0).squeeze(-1)
        on_q = (self.gate_q(y) >= 0).squeeze(-1)
        if self.force is not None:  # the control networks ran; their decisions are replaced
            on_kv, on_q = self.force.kv.reshape(-1), self.force.q.reshape(-1)
        kv_rows = torch.nonzero(on_kv).squeeze(1)
        y_kv = y.index_select(0, kv_rows)
        keys = flat.new_zeros(b * t, d).index_copy_(0, kv_rows, self.ln_k(self.k(y_kv)))
        values = flat.new_zeros(b * t, d).index_copy_(0, kv_rows, self.ln_v(self.v(y_kv)))
        q_rows = torch.nonzero(on_q).squeeze(1)
        out = flat.clone()
        if q_rows.numel():
            # the on-queries of sample s are a contiguous run of q_rows (ascending): one attention per sample
            # over that sample's own T keys (no per-query copy of the keys and values)
            q = self.q(y.index_select(0, q_rows))  # [nq, d]
            keys, values = self._heads(keys.view(b, t, d)), self._heads(values.view(b, t, d))
            if b == 1:
                mixed = self._attend_fused(q, keys, values)
            else:
                per_sample = torch.bincount(torch.div(q_rows, t, rounding_mode="floor"), minlength=b).tolist()
                mixed = torch.cat([self._attend_fused(chunk, keys[s:s + 1], values[s:s + 1])
                                   for s, chunk in enumerate(q.split(per_sample)) if chunk.shape[0]])
            out.index_add_(0, q_rows, self.o(self.ln_o(mixed)))
        on_f = self.gate_f(self.norm2(out)) >= 0  # [B·T, M]
        if self.force is not None:
            on_f = self.force.ffn.reshape(-1, self.slices)
        # every slice reads the stream as it is before any slice adds to it: gather every slice's rows first
        # (they are held together: up to M·B·T·d values when every slice is on, in place of a copy of the stream)
        active = []
        for i in range(self.slices):
            rows = torch.nonzero(on_f[:, i]).squeeze(1)
            if rows.numel():
                active.append((i, rows, out.index_select(0, rows)))
        for i, rows, part in active:
            out.index_add_(0, rows, self._slice(i, part))
        self.last = Decisions(on_kv.view(b, t), on_q.view(b, t), on_f.view(b, t, self.slices))
        return out.view(b, t, d)

    # --- cost ------------------------------------------------------------------------------------------
    def unit_macs(self, tokens: int) -> tuple[int, int, int]:
        """Per-token MACs of (K/V, attention sublayer at ``tokens`` keys, one FFN slice)."""
        d = self.d
        return 2 * d * d, 2 * d * d + 2 * tokens * d, 2 * d * self.width

    def control_macs(self) -> int:
        return self.gate_kv.macs() + self.gate_q.macs() + self.gate_f.macs()

    @torch.no_grad()
    def calibrate(self, x: Tensor) -> Tensor:
        """Set the new LayerNorms from the dense block's quantities on ``x``; returns the dense output."""
        y = self.norm1(x)
        k, v = self.k(y), self.v(y)
        _calibrate(self.ln_k, k)
        _calibrate(self.ln_v, v)
        mixed = self._attend(self.q(y), k, v)
        _calibrate(self.ln_o, mixed)
        x = x + self.o(mixed)
        update = 0
        for i in range(self.slices):
            part = self.ffn.part(i, x)  # LN_in,i is a copy of norm2
            _calibrate(self.ffn.ln_out[i], part)
            update = update + part
        return x + update


class CCTModel(nn.Module):
    """embed + budget embedding → input dropout → CCT blocks → norm → class-token pool → head."""

    def __init__(self, base: Encoder, n_budgets: int, slices: int, gate_hidden: int, gate_bias: float,
                 dropout: float = 0.0):
        super().__init__()
        cfg = base.cfg
        if cfg.pool != "cls":
            raise ValueError("CCT here pools the class token (pool='cls')")
        self.cfg = cfg
        self.embed, self.norm, self.head = base.embed, base.norm, base.head
        self.blocks = nn.ModuleList(CCTBlock(b, slices, gate_hidden, gate_bias, cfg.norm_eps, cfg.activation,
                                             dropout) for b in base.blocks)
        self.drop = nn.Dropout(dropout)
        self.budget_embed = nn.Embedding(n_budgets, cfg.d_model)
        nn.init.normal_(self.budget_embed.weight, std=0.02)
        self.budget_index = 0  # the symbol used when ``forward`` gets no per-sample symbols
        self.alpha = 0.0
        self.generator: torch.Generator | None = None
        self.real_path = False
        self.last_tokens = 0

    def tokens(self, inputs: Tensor, symbols: Tensor | None) -> Tensor:
        x, mask = self.embed(inputs)
        if mask is not None:
            raise NotImplementedError("CCT does not support padded inputs")
        if symbols is None:
            symbols = torch.full((x.shape[0],), self.budget_index, dtype=torch.long, device=x.device)
        return self.drop(x + self.budget_embed(symbols).unsqueeze(1))

    def forward(self, inputs: Tensor, symbols: Tensor | None = None, budgets: Tensor | None = None):
        """Logits; with ``budgets`` (training) also :meth:`budget_loss` of this forward's soft gates, so the
        loss reaches every gate through ``forward`` (data-parallel training syncs it)."""
        if budgets is not None:
            return self.forward(inputs, symbols), self.budget_loss(symbols, budgets)
        x = self.tokens(inputs, symbols)
        self.last_tokens = x.shape[1]
        hard = not self.training
        for block in self.blocks:
            if self.real_path and hard:
                x = block.forward_real(x)
            else:
                x = block.forward_masked(x, self.alpha, self.generator, hard)
        return self.head(self.norm(x[:, 0]))

    @torch.no_grad()
    def calibrate(self, inputs: Tensor) -> None:
        x, _ = self.embed(inputs)
        for block in self.blocks:
            x = block.calibrate(x)

    # --- cost ------------------------------------------------------------------------------------------
    def fixed_macs(self, tokens: int) -> int:
        embed = int(self.embed.macs(tokens)) if hasattr(self.embed, "macs") else 0
        head = linear_macs(self.head, 1) if isinstance(self.head, nn.Linear) else 0
        return embed + head + tokens * sum(b.control_macs() for b in self.blocks)

    def sample_macs(self) -> Tensor:
        """Per-sample MACs of the last (hard-gated) forward, from the logged decisions (float64 [B])."""
        t = self.last_tokens
        total = None
        for block in self.blocks:
            kv, att, ffn = block.unit_macs(t)
            d = block.last
            part = (d.kv.sum(1).double() * kv + d.q.sum(1).double() * att
                    + d.ffn.sum(dim=(1, 2)).double() * ffn)
            total = part if total is None else total + part
        assert total is not None
        return total + float(self.fixed_macs(t))

    def gated_fraction(self) -> Tensor:
        """Per sample: executed share of the gated units' cost (the quantity the budget p constrains)."""
        t = self.last_tokens
        used, full = None, 0.0
        for block in self.blocks:
            kv, att, ffn = block.unit_macs(t)
            d = block.last
            part = d.kv.sum(1).double() * kv + d.q.sum(1).double() * att + d.ffn.sum(dim=(1, 2)).double() * ffn
            used = part if used is None else used + part
            full += t * (kv + att + block.slices * ffn)
        assert used is not None
        return used / full

    def budget_loss(self, symbols: Tensor, budgets: Tensor) -> Tensor:
        """Σ over budget groups i of |C_budget,i − C_util,i| / C_budget,i with the soft gates of the last
        training forward (``symbols`` [B] index into ``budgets``)."""
        t = self.last_tokens
        util = None
        full = 0.0
        for block in self.blocks:
            kv, att, ffn = block.unit_macs(t)
            g_kv, g_q, g_f = block.last_gates
            part = g_kv.sum(1) * kv + g_q.sum(1) * att + g_f.sum(dim=(1, 2)) * ffn  # [B]
            util = part if util is None else util + part
            full += t * (kv + att + block.slices * ffn)
        assert util is not None
        loss = util.new_zeros(())
        for i in torch.unique(symbols).tolist():
            members = symbols == i
            c_budget = float(budgets[i]) * full * members.sum()
            loss = loss + (c_budget - util[members].sum()).abs() / c_budget
        return loss
