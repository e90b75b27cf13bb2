"""CCT on the encoder–decoder (translation; Bapna et al. §2-3, reference notes §6): gated self-attention,
cross-attention and FFN slices in the encoder and the decoder, with separate encoder and decoder budgets.

Per encoder block (pre-norm, y = norm1(x)), as in methods/cct/model.py:
    g_kv = σ(G_kv(y) + αε), g_q = σ(G_q(y) + αε)
    K = g_kv·LN_k(y W_k), V = g_kv·LN_v(y W_v);  x ← x + g_q · W_o Drop(LN_o(MultiHead(y W_q, K, V)))
    g_F = σ(G_F(norm2(x)) + αε) ∈ (0,1)^M;       x ← x + Σ_i g_Fi · Drop(LN_out,i(FFN_i(LN_in,i(x))))
Per decoder block: the same causal self-attention unit, then a gated cross-attention unit whose K/V gate
reads the encoder output (one decision per source token and block) and whose query gate reads
norm_c(x), then the FFN slices.  One control symbol per (encoder budget, decoder budget) pair (§2.2,
§4): its embedding is added to every source token and to every target token, so each side knows both
budgets.  The budget loss (Eq. 9) is Σ over the symbols i of the batch and the sub-networks j of
|C_budget,ij − C_util,ij| / C_budget,ij, the group B_i being the sentences fed symbol i.

Dropout (training only, ``dropout``; the paper: 0.1 for every dropout, Eq. 13's Dropout(LN(a))): on
the input (token + position + control embeddings), on the attention probabilities, and on every gated
unit's normalised output before it is gated (Drop above: the attention sublayers' LN_o(a) before W_o as
in Eq. 13, and each FFN slice's LN_out,i(·)).  The task's own embedding dropout is replaced by it.

Inference (``generate``, the task's beam search): no noise, a unit runs iff G ≥ 0 on a real gathered
path: the encoder runs only the non-padding tokens whose gate is on; a source token's cross K/V are
computed once per block if its gate is on (zero rows otherwise); each decoding step computes a row's
self K/V only if its gate is on and appends a ZERO row to the cache otherwise (an inactive key still
takes softmax mass exp(0), as in training); the attention sublayers and each FFN slice run only for
their gathered rows.

Cost (MACs per sentence, from the logged decisions; the dispatch-level counter must agree): per
encoder token and block the control networks + [kv]·2d² + [q]·(2d² + 2Sd) + Σ[F_i]·2d·m/M; per source
token and decoder block the cross K/V control network + [kv]·2d²; per decoding step, hypothesis and
block the three control networks + [kv]·2d² + [q]·(2d² + 2(t+1)d) + [xq]·(2d² + 2Sd) + Σ[F_i]·2dm/M;
the output projection d·V per step and hypothesis.  S = the batch's padded source length (padding keys
are masked, but their scores are computed, as in the dense model's ledger).

Choices where the paper is silent: the budget loss's attention core cost uses the real key counts (S
for the encoder and cross-attention, t+1 for decoder position t); padding tokens carry no gate and no
cost.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import torch
from torch import Tensor, nn

from bench.errors import UserError
from bench.models.seq2seq import DecodeState, EncoderDecoder
from methods.cct.model import ControlNet, SlicedFFN, _calibrate


class AttnGates(nn.Module):
    """Control networks and the extra LayerNorms of one gated attention sublayer."""

    def __init__(self, d: int, hidden: int, bias: float, eps: float):
        super().__init__()
        self.gate_kv = ControlNet(d, hidden, 1, bias)
        self.gate_q = ControlNet(d, hidden, 1, bias)
        self.ln_k, self.ln_v, self.ln_o = (nn.LayerNorm(d, eps=eps) for _ in range(3))


def core(q: Tensor, k: Tensor, v: Tensor, heads: int, mask: Tensor | None, drop: nn.Module | None = None) -> Tensor:
    """Multi-head attention core, explicit matmuls: q [N, Tq, d], k/v [N, Tk, d], mask broadcastable to
    [N, Tq, Tk] (True = not attended) → [N, Tq, d]; ``drop`` (training): dropout on the attention
    probabilities."""
    n, tq, d = q.shape
    dh = d // heads
    qh = q.view(n, tq, heads, dh).transpose(1, 2)
    kh = k.view(n, -1, heads, dh).transpose(1, 2)
    vh = v.view(n, -1, heads, dh).transpose(1, 2)
    scores = torch.matmul(qh, kh.transpose(-2, -1)) / math.sqrt(dh)
    if mask is not None:
        scores = scores.masked_fill(mask[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if drop is not None:
        probs = drop(probs)
    return torch.matmul(probs, vh).transpose(1, 2).reshape(n, tq, d)


def _gate(logits: Tensor, alpha: float, generator: torch.Generator | None, hard: bool) -> Tensor:
    if hard:
        return (logits >= 0).to(logits.dtype)
    if alpha > 0:
        noise = torch.randn(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
        logits = logits + alpha * noise
    return torch.sigmoid(logits)


class CCTSeq2Seq(EncoderDecoder):
    """The task's encoder–decoder with CCT units; ``model(x, symbols)`` is the teacher-forced (masked)
    forward, ``generate`` decodes on the real path at the budgets ``enc_budget_index``/``dec_budget_index``.

    ``control``: one embedding per (encoder budget, decoder budget) pair, row ``enc · n_budgets + dec``
    (:meth:`pair_symbols`); ``dropout``: the probability of every dropout in training."""

    def __init__(self, base: EncoderDecoder, n_budgets: int, slices: int, gate_hidden: int, gate_bias: float,
                 dropout: float = 0.0):
        cfg = base.cfg
        if not cfg.norm_first or (cfg.d_dec, cfg.mlp_dec, cfg.heads_dec) != (cfg.d_model, cfg.d_mlp, cfg.n_heads):
            raise UserError("cct: its gated blocks are written for pre-norm encoder-decoders with one width; this "
                            "model is post-norm (e.g. Marian, fairseq's default) or has a narrower decoder")
        super().__init__(base.cfg)
        self.load_state_dict(base.state_dict())
        if base.decoder.head.weight is base.decoder.embed.tok.weight:
            self.decoder.head.weight = self.decoder.embed.tok.weight
        for name in ("beam", "len_a", "len_b", "len_penalty"):
            setattr(self, name, getattr(base, name))
        cfg = self.cfg
        d, eps, h = cfg.d_model, cfg.norm_eps, gate_hidden
        self.slices = slices
        for block in list(self.encoder.blocks) + list(self.decoder.blocks):
            block.mlp = SlicedFFN(block.mlp, block.norm2, slices, cfg.activation, eps)
            block.self_gates = AttnGates(d, h, gate_bias, eps)
            block.ffn_gate = ControlNet(d, h, slices, gate_bias)
        for block in self.decoder.blocks:
            block.cross_gates = AttnGates(d, h, gate_bias, eps)
        self.n_budgets = n_budgets
        self.control = nn.Embedding(n_budgets * n_budgets, d)
        nn.init.normal_(self.control.weight, std=0.02)
        self.drop = nn.Dropout(dropout)
        for embed in (self.encoder.embed, self.decoder.embed):  # input dropout follows the control embedding
            embed.drop = nn.Identity()
        self.enc_budget_index = 0
        self.dec_budget_index = 0
        self.alpha = 0.0
        self.generator: torch.Generator | None = None
        self.gates: dict[str, list] = {}  # soft gates of the last teacher-forced forward (budget loss)
        self.usage: dict[str, Tensor] = {}  # per sentence: runs of every (block, unit) in the last decode
        self._tokens: dict[str, Tensor] = {}

    # --- shared pieces ------------------------------------------------------------------------------
    @property
    def heads(self) -> int:
        return self.cfg.n_heads

    def _symbols(self, batch: int, device: torch.device, index: int, given: Tensor | None) -> Tensor:
        if given is not None:
            return given
        return torch.full((batch,), index, dtype=torch.long, device=device)

    def pair_symbols(self, enc_symbols: Tensor, dec_symbols: Tensor) -> Tensor:
        """The control symbol of each (encoder budget, decoder budget) pair: enc · n_budgets + dec."""
        return enc_symbols * self.n_budgets + dec_symbols

    def control_embedding(self, batch: int, device: torch.device, enc_symbols: Tensor | None = None,
                          dec_symbols: Tensor | None = None) -> Tensor:
        """[batch, d]: the embedding of each sample's pair symbol (the model's own budget indices where
        no symbols are given), added to every source and every target token."""
        enc = self._symbols(batch, device, self.enc_budget_index, enc_symbols)
        dec = self._symbols(batch, device, self.dec_budget_index, dec_symbols)
        return self.control(self.pair_symbols(enc, dec))

    def _ffn_masked(self, block: nn.Module, x: Tensor, hard: bool, keep: Tensor) -> tuple[Tensor, Tensor]:
        g_f = _gate(block.ffn_gate(block.norm2(x)), self.alpha, self.generator, hard) * keep
        update = sum(g_f[..., i:i + 1] * self.drop(block.mlp.forward_slice(i, x)) for i in range(self.slices))
        return x + update, g_f

    # --- teacher-forced (training) path ---------------------------------------------------------------
    def _encode_masked(self, src: Tensor, control: Tensor, hard: bool) -> tuple[Tensor, Tensor]:
        x, pad = self.encoder.embed(src)
        x = self.drop(x + control[:, None])
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        gates = []
        for block in self.encoder.blocks:
            y = block.norm1(x)
            g = block.self_gates
            g_kv = _gate(g.gate_kv(y), self.alpha, self.generator, hard) * keep
            g_q = _gate(g.gate_q(y), self.alpha, self.generator, hard) * keep
            attn = block.attn
            k, v = g_kv * g.ln_k(attn.k(y)), g_kv * g.ln_v(attn.v(y))
            x = x + g_q * attn.o(self.drop(g.ln_o(core(attn.q(y), k, v, self.heads, pad[:, None, :], self.drop))))
            x, g_f = self._ffn_masked(block, x, hard, keep)
            gates.append((g_kv[..., 0], g_q[..., 0], g_f))
        self.gates["encoder"] = gates
        return self.encoder.norm(x), pad

    def _decode_masked(self, tgt: Tensor, memory: Tensor, pad: Tensor, control: Tensor, hard: bool) -> Tensor:
        h, tpad = self.decoder.embed(tgt)
        h = self.drop(h + control[:, None])
        keep = (~tpad).unsqueeze(-1).to(h.dtype)
        src_keep = (~pad).unsqueeze(-1).to(h.dtype)
        t = tgt.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).triu(1)[None]
        gates = []
        for block in self.decoder.blocks:
            g, c = block.self_gates, block.cross_gates
            y = block.norm1(h)
            g_kv = _gate(g.gate_kv(y), self.alpha, self.generator, hard) * keep
            g_q = _gate(g.gate_q(y), self.alpha, self.generator, hard) * keep
            attn = block.attn
            k, v = g_kv * g.ln_k(attn.k(y)), g_kv * g.ln_v(attn.v(y))
            h = h + g_q * attn.o(self.drop(g.ln_o(core(attn.q(y), k, v, self.heads, causal, self.drop))))
            yc = block.norm_c(h)
            x_kv = _gate(c.gate_kv(memory), self.alpha, self.generator, hard) * src_keep
            x_q = _gate(c.gate_q(yc), self.alpha, self.generator, hard) * keep
            cross = block.cross
            ck, cv = x_kv * c.ln_k(cross.k(memory)), x_kv * c.ln_v(cross.v(memory))
            h = h + x_q * cross.o(self.drop(c.ln_o(core(cross.q(yc), ck, cv, self.heads, pad[:, None, :], self.drop))))
            h, g_f = self._ffn_masked(block, h, hard, keep)
            gates.append((g_kv[..., 0], g_q[..., 0], x_kv[..., 0], x_q[..., 0], g_f))
        self.gates["decoder"] = gates
        return self.decoder.head(self.decoder.norm(h))

    def forward(self, x: Tensor, enc_symbols: Tensor | None = None,  # type: ignore[override]
                dec_symbols: Tensor | None = None, budgets: Tensor | None = None):
        """Teacher-forced logits; with ``budgets`` (training) also :meth:`budget_loss` of this forward."""
        if budgets is not None:
            return self.forward(x, enc_symbols, dec_symbols), self.budget_loss(enc_symbols, dec_symbols, budgets)
        src, tgt = self.unpack(x)
        hard = not self.training
        control = self.control_embedding(len(src), src.device, enc_symbols, dec_symbols)
        memory, pad = self._encode_masked(src, control, hard)
        self._tokens = {"src": (~pad).to(memory.dtype), "tgt": tgt.ne(self.cfg.pad).to(memory.dtype)}
        return self._decode_masked(tgt, memory, pad, control, hard)

    # --- budget loss ----------------------------------------------------------------------------------
    def unit_costs(self, s: int, t: int, device: torch.device) -> dict[str, Tensor | float]:
        """Per-token MACs of the gated units (encoder keys = S, decoder position j attends j+1 keys)."""
        d, w = self.cfg.d_model, self.cfg.d_mlp // self.slices
        pos = torch.arange(1, t + 1, device=device, dtype=torch.float64)
        return {"kv": 2.0 * d * d, "enc_att": 2.0 * d * d + 2.0 * s * d, "dec_att": 2.0 * d * d + 2.0 * pos * d,
                "x_att": 2.0 * d * d + 2.0 * s * d, "ffn": 2.0 * d * w}

    def utilisation(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(used, full) gated MACs per sample for the encoder and the decoder, from the soft gates of the
        last teacher-forced forward: (enc_used, enc_full, dec_used, dec_full), each [B]."""
        src_keep, tgt_keep = self._tokens["src"].double(), self._tokens["tgt"].double()
        s, t = src_keep.shape[1], tgt_keep.shape[1]
        c = self.unit_costs(s, t, src_keep.device)
        enc_used = src_keep.new_zeros(src_keep.shape[0])
        enc_full = enc_used.clone()
        n_src, n_tgt = src_keep.sum(1), tgt_keep.sum(1)
        for g_kv, g_q, g_f in self.gates["encoder"]:
            enc_used = enc_used + g_kv.sum(1) * c["kv"] + g_q.sum(1) * c["enc_att"] + g_f.sum((1, 2)) * c["ffn"]
            enc_full = enc_full + n_src * (c["kv"] + c["enc_att"] + self.slices * c["ffn"])
        dec_used = torch.zeros_like(enc_used)
        dec_full = torch.zeros_like(enc_used)
        dec_att = c["dec_att"]
        for g_kv, g_q, x_kv, x_q, g_f in self.gates["decoder"]:
            dec_used = (dec_used + g_kv.sum(1) * c["kv"] + (g_q * dec_att).sum(1) + x_kv.sum(1) * c["kv"]
                        + x_q.sum(1) * c["x_att"] + g_f.sum((1, 2)) * c["ffn"])
            dec_full = (dec_full + n_tgt * (c["kv"] + c["x_att"] + self.slices * c["ffn"])
                        + (tgt_keep * dec_att).sum(1) + n_src * c["kv"])
        return enc_used, enc_full, dec_used, dec_full

    def budget_loss(self, enc_symbols: Tensor, dec_symbols: Tensor, budgets: Tensor) -> Tensor:
        """Eq. 9: Σ over the pair symbols i of the batch and the sub-networks j (encoder, decoder) of
        |C_budget,ij − C_util,ij| / C_budget,ij (soft gates), B_i = the sentences fed pair symbol i and
        C_budget,ij = p_ij · the full cost of sub-network j on B_i."""
        enc_used, enc_full, dec_used, dec_full = self.utilisation()
        pairs = self.pair_symbols(enc_symbols, dec_symbols)
        loss = enc_used.new_zeros(())
        for i in torch.unique(pairs).tolist():
            members = pairs == i
            for p, used, full in ((budgets[i // self.n_budgets], enc_used, enc_full),
                                  (budgets[i % self.n_budgets], dec_used, dec_full)):
                c_budget = float(p) * full[members].sum()
                loss = loss + (c_budget - used[members].sum()).abs() / c_budget
        return loss.float()

    # --- real path (decoding) ---------------------------------------------------------------------------
    def _control(self, net: ControlNet) -> float:
        return float(net.macs())

    def _add(self, key: str, owner: Tensor, values: Tensor) -> None:
        self.usage[key].index_add_(0, owner, values.double())

    @contextmanager
    def _cost_ledger(self, batch: int, device: torch.device) -> Iterator[None]:
        """Per-sentence MACs from the logged gate decisions (replaces the hook ledger of the dense model)."""
        self._macs = {k: torch.zeros(batch, dtype=torch.float64, device=device) for k in ("encoder", "decoder")}
        self.usage = {}
        self._batch = batch
        try:
            yield
        finally:
            self.last_decoder_macs = self._macs["decoder"].cpu()
            self.last_sample_macs = (self._macs["encoder"] + self._macs["decoder"]).cpu()

    def _usage_slot(self, key: str, device: torch.device) -> None:
        if key not in self.usage:
            self.usage[key] = torch.zeros(self._batch, dtype=torch.float64, device=device)

    def init_state(self, src: Tensor) -> DecodeState:
        b, s = src.shape
        d = self.cfg.d_model
        device = src.device
        x, pad = self.encoder.embed(src)
        x = x + self.control_embedding(b, device)[:, None]
        flat = x.reshape(b * s, d)
        rows = torch.nonzero(~pad.reshape(-1)).squeeze(1)
        owner = torch.div(rows, s, rounding_mode="floor")
        macs = self._macs["encoder"]
        kv_cost, att_cost = 2.0 * d * d, 2.0 * d * d + 2.0 * s * d
        ones = torch.ones(len(rows), dtype=torch.float64, device=device)
        for i, block in enumerate(self.encoder.blocks):
            g, attn = block.self_gates, block.attn
            y = block.norm1(flat.index_select(0, rows))
            on_kv = (g.gate_kv(y) >= 0).squeeze(-1)
            on_q = (g.gate_q(y) >= 0).squeeze(-1)
            kv_rows = rows[on_kv]
            keys = flat.new_zeros(b * s, d).index_copy_(0, kv_rows, g.ln_k(attn.k(y[on_kv])))
            values = flat.new_zeros(b * s, d).index_copy_(0, kv_rows, g.ln_v(attn.v(y[on_kv])))
            q_rows = rows[on_q]
            if q_rows.numel():
                sample = owner[on_q]
                mixed = core(attn.q(y[on_q]).unsqueeze(1), keys.view(b, s, d).index_select(0, sample),
                             values.view(b, s, d).index_select(0, sample), self.heads,
                             pad.index_select(0, sample)[:, None, :])
                flat = flat.index_add(0, q_rows, attn.o(g.ln_o(mixed.squeeze(1))))
            mid = flat.index_select(0, rows)
            on_f = block.ffn_gate(block.norm2(mid)) >= 0  # [N, M]
            for j in range(self.slices):
                sel = on_f[:, j]
                if sel.any():
                    flat = flat.index_add(0, rows[sel], block.mlp.forward_slice(j, mid[sel]))
            control = self._control(g.gate_kv) + self._control(g.gate_q) + self._control(block.ffn_gate)
            per_token = control + on_kv.double() * kv_cost + on_q.double() * att_cost
            per_token = per_token + on_f.double().sum(1) * 2.0 * d * block.mlp.width
            macs.index_add_(0, owner, per_token)
            for key, flags in ((f"e{i}_kv", on_kv), (f"e{i}_att", on_q),
                               *((f"e{i}_ffn{j}", on_f[:, j]) for j in range(self.slices))):
                self._usage_slot(key, device)
                self._add(key, owner, flags)
        self._usage_slot("src_tokens", device)
        self._add("src_tokens", owner, ones)
        memory = self.encoder.norm(flat).view(b, s, d)
        # cross K/V of every decoder block, once per source token (zero rows where the gate is off)
        mem_kv: list[tuple[Tensor, Tensor] | None] = []
        mem_rows = memory.reshape(b * s, d).index_select(0, rows)
        for i, block in enumerate(self.decoder.blocks):
            c, cross = block.cross_gates, block.cross
            on = (c.gate_kv(mem_rows) >= 0).squeeze(-1)
            ck = memory.new_zeros(b * s, d).index_copy_(0, rows[on], c.ln_k(cross.k(mem_rows[on])))
            cv = memory.new_zeros(b * s, d).index_copy_(0, rows[on], c.ln_v(cross.v(mem_rows[on])))
            mem_kv.append((ck.view(b, s, d), cv.view(b, s, d)))
            self._macs["decoder"].index_add_(0, owner, self._control(c.gate_kv) + on.double() * kv_cost)
            self._usage_slot(f"d{i}_xkv", device)
            self._add(f"d{i}_xkv", owner, on)
        self._src_len = s
        state = DecodeState(torch.arange(b, device=device), [{} for _ in self.decoder.blocks], memory, pad,
                            mem_kv, {})
        return state

    def step(self, state: DecodeState, tokens: Tensor, t: int) -> Tensor:
        r, d, device = tokens.shape[0], self.cfg.d_model, tokens.device
        owner = state.row_sample
        h, _ = self.decoder.embed(tokens[:, None], offset=t)
        h = h[:, 0] + self.control_embedding(r, device)
        s = self._src_len
        kv_cost, self_att, x_att = 2.0 * d * d, 2.0 * d * d + 2.0 * (t + 1) * d, 2.0 * d * d + 2.0 * s * d
        cost = torch.zeros(r, dtype=torch.float64, device=device)
        for i, block in enumerate(self.decoder.blocks):
            g, c, attn, cross = block.self_gates, block.cross_gates, block.attn, block.cross
            cache = state.caches[i]
            y = block.norm1(h)
            on_kv = (g.gate_kv(y) >= 0).squeeze(-1)
            on_q = (g.gate_q(y) >= 0).squeeze(-1)
            kv_rows = on_kv.nonzero().squeeze(1)
            k_new = h.new_zeros(r, d).index_copy_(0, kv_rows, g.ln_k(attn.k(y[on_kv])))
            v_new = h.new_zeros(r, d).index_copy_(0, kv_rows, g.ln_v(attn.v(y[on_kv])))
            cache["k"] = k_new[:, None] if "k" not in cache else torch.cat([cache["k"], k_new[:, None]], dim=1)
            cache["v"] = v_new[:, None] if "v" not in cache else torch.cat([cache["v"], v_new[:, None]], dim=1)
            q_rows = on_q.nonzero().squeeze(1)
            if q_rows.numel():
                mixed = core(attn.q(y[on_q]).unsqueeze(1), cache["k"].index_select(0, q_rows),
                             cache["v"].index_select(0, q_rows), self.heads, None)
                h = h.index_add(0, q_rows, attn.o(g.ln_o(mixed.squeeze(1))))
            yc = block.norm_c(h)
            on_xq = (c.gate_q(yc) >= 0).squeeze(-1)
            x_rows = on_xq.nonzero().squeeze(1)
            if x_rows.numel():
                sample = owner.index_select(0, x_rows)
                ck, cv = state.mem_kv[i]
                mixed = core(cross.q(yc[on_xq]).unsqueeze(1), ck.index_select(0, sample), cv.index_select(0, sample),
                             self.heads, state.mem_mask.index_select(0, sample)[:, None, :])
                h = h.index_add(0, x_rows, cross.o(c.ln_o(mixed.squeeze(1))))
            mid = h
            on_f = block.ffn_gate(block.norm2(mid)) >= 0
            for j in range(self.slices):
                sel = on_f[:, j]
                if sel.any():
                    h = h.index_add(0, sel.nonzero().squeeze(1), block.mlp.forward_slice(j, mid[sel]))
            control = self._control(g.gate_kv) + self._control(g.gate_q) + self._control(c.gate_q)
            control += self._control(block.ffn_gate)
            cost = cost + control + on_kv.double() * kv_cost + on_q.double() * self_att + on_xq.double() * x_att
            cost = cost + on_f.double().sum(1) * 2.0 * d * block.mlp.width
            for key, flags in ((f"d{i}_kv", on_kv), (f"d{i}_att", on_q), (f"d{i}_xatt", on_xq),
                               *((f"d{i}_ffn{j}", on_f[:, j]) for j in range(self.slices))):
                self._usage_slot(key, device)
                self._add(key, owner, flags)
        cost = cost + float(d * self.decoder.head.out_features)
        self._macs["decoder"].index_add_(0, owner, cost)
        self._usage_slot("dec_tokens", device)
        self._add("dec_tokens", owner, torch.ones(r, device=device))
        return torch.log_softmax(self.decoder.head(self.decoder.norm(h)), dim=-1)

    def usage_fractions(self) -> dict[str, Tensor]:
        """Per sentence and (block, unit): the share of tokens (encoder: source tokens; decoder: decoding
        steps of all hypotheses; cross K/V: source tokens) that ran the unit in the last decode."""
        src, dec = self.usage["src_tokens"].clamp(min=1), self.usage["dec_tokens"].clamp(min=1)
        out = {}
        for key, value in self.usage.items():
            if key in ("src_tokens", "dec_tokens"):
                continue
            per = src if key.startswith("e") or key.endswith("_xkv") else dec
            out[f"use_{key}"] = (value / per).cpu()
        return out

    # --- calibration ----------------------------------------------------------------------------------
    @torch.no_grad()
    def calibrate(self, x: Tensor) -> None:
        """Set the new LayerNorms from the dense model's quantities on one teacher-forced batch (every gate
        on, the model starts close to the dense base model)."""
        src, tgt = self.unpack(x)
        h, pad = self.encoder.embed(src)
        real = ~pad
        for block in self.encoder.blocks:
            h = self._calibrate_block(block, h, real, pad[:, None, :], None, None)
        memory = self.encoder.norm(h)
        h, tpad = self.decoder.embed(tgt)
        t = tgt.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool, device=tgt.device).triu(1)[None]
        for block in self.decoder.blocks:
            h = self._calibrate_block(block, h, ~tpad, causal, memory, (real, pad))

    def _calibrate_block(self, block: nn.Module, x: Tensor, real: Tensor, mask: Tensor,
                         memory: Tensor | None, source: tuple[Tensor, Tensor] | None) -> Tensor:
        g, attn = block.self_gates, block.attn
        y = block.norm1(x)
        k, v = attn.k(y), attn.v(y)
        _calibrate(g.ln_k, k[real])
        _calibrate(g.ln_v, v[real])
        mixed = core(attn.q(y), k, v, self.heads, mask)
        _calibrate(g.ln_o, mixed[real])
        x = x + attn.o(mixed)
        if memory is not None and source is not None:
            c, cross = block.cross_gates, block.cross
            src_real, pad = source
            yc = block.norm_c(x)
            ck, cv = cross.k(memory), cross.v(memory)
            _calibrate(c.ln_k, ck[src_real])
            _calibrate(c.ln_v, cv[src_real])
            mixed = core(cross.q(yc), ck, cv, self.heads, pad[:, None, :])
            _calibrate(c.ln_o, mixed[real])
            x = x + cross.o(mixed)
        update = 0
        for j in range(self.slices):
            part = block.mlp.part(j, x)  # LN_in,j is a copy of norm2
            _calibrate(block.mlp.ln_out[j], part[real])
            update = update + part
        return x + update
