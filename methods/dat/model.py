"""The Depth-Adaptive Transformer's model: the skeleton encoder–decoder with a classifier C_n after every
decoder block, a halting unit, and exit-aware incremental decoding.

Classifiers: C_n = LayerNorm_n → Linear_n (d → V).  C_N is the dense model's own ``decoder.norm`` /
``decoder.head``; C_1..C_{N−1} (``exit_norms``, ``exit_heads``) start as copies of it and are untied
(IWSLT setting); with a tied dense head (WMT) they all share the token embedding.

Halting (``halting``):
  geometric    χ_n = σ(w·LN_n(h_n) + b) after blocks n < N, one unit shared by every block (``halt[0]``:
               d → 1; §4.1: "a single linear layer … the output dimension is … one for geometric-like");
               exit at the first n with χ_n > τ_n, else N.  Training distribution q(n) = χ_n Π_{m<n}(1 − χ_m), q(N) = Π(1 − χ_m).
  multinomial  one d → N softmax on LN_1(h_1) after block 1 (``halt[0]``) picks the exit of the token.
  sequence     one d → N softmax on the mean (over source tokens) of the encoder output picks the exit of
               every token of the sentence (``halt[0]``).
  confidence   exit at the first n whose classifier's max probability exceeds τ_n (no halting unit).
Thresholds: ``thresholds`` = (τ_1, …, τ_{N−1}), one per block below N (the paper's default exit rule:
0.5 everywhere; the method tunes them on the validation split, methods/dat/tuning.py).
Evaluation-time override ``fixed_exit = n``: every token exits at block n (the aligned model at depth n).

Decoding step t (all rows = live hypotheses of all sentences): block n runs on the rows still active
(hypotheses grouped by depth: one batched call per block).  A row exiting after block n emits from C_n;
its state h_n is *copied* to blocks n+1..N: each upper block's own norm1 + k/v projections are applied to
the copy and appended to that block's self-attention cache, so later tokens attend to it at every depth.
Source keys/values of a block are computed the first time any hypothesis of a sentence reaches the block
(lazy; ``EncoderDecoder.memory_kv``).

Decision log (``log``): per step, the rows' sentence, exit depth and position; per sentence the padded
source length; per (block, sentence) whether source K/V were computed.  :func:`sample_macs_from_log`
turns it into MACs per sentence (Appendix B of the paper, in MACs).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from bench.models.seq2seq import DecodeState, EncoderDecoder


@dataclass
class DecisionLog:
    rows: list[Tensor] = field(default_factory=list)  # per step: sentence of each row
    exits: list[Tensor] = field(default_factory=list)  # per step: exit block (1..N) of each row
    steps: list[int] = field(default_factory=list)  # per step: position t (0-based)
    src_len: int = 0  # padded source length S of the batch
    batch: int = 0
    kv_computed: Tensor | None = None  # [N, B] bool: source K/V of block n computed for sentence b


class DATModel(EncoderDecoder):
    """EncoderDecoder + per-block classifiers + halting unit; ``generate`` exits per token."""

    def __init__(self, base: EncoderDecoder, halting: str = "geometric"):
        super().__init__(base.cfg)
        self.load_state_dict(base.state_dict())
        if base.decoder.head.weight is base.decoder.embed.tok.weight:
            self.decoder.head.weight = self.decoder.embed.tok.weight
        for name in ("beam", "len_a", "len_b", "len_penalty"):
            setattr(self, name, getattr(base, name))
        n, d = len(self.decoder.blocks), self.cfg.d_dec  # decoder width (the encoder's may differ)
        self.n_blocks, self.halting = n, halting
        self.exit_norms = nn.ModuleList(copy.deepcopy(self.decoder.norm) for _ in range(n - 1))
        self.exit_heads = nn.ModuleList(copy.deepcopy(self.decoder.head) for _ in range(n - 1))
        if self.decoder.head.weight is self.decoder.embed.tok.weight:
            for head in self.exit_heads:
                head.weight = self.decoder.embed.tok.weight
        if halting == "geometric":
            self.halt = nn.ModuleList([nn.Linear(d, 1)])  # one unit, read after every block below N
        elif halting == "multinomial":
            self.halt = nn.ModuleList([nn.Linear(d, n)])
        elif halting == "sequence":  # reads the mean encoder output
            self.halt = nn.ModuleList([nn.Linear(self.cfg.d_model, n)])
        else:
            self.halt = nn.ModuleList()
        # zero-initialised (the paper gives no initialisation): geometric χ_n = 0.5 at every block, i.e. an exit
        # distribution q(n) = 2^-n (q(N) = 2^-(N-1)); multinomial and sequence: uniform over the N exits
        for unit in self.halt:
            nn.init.zeros_(unit.weight)
            nn.init.zeros_(unit.bias)
        self.thresholds: list[float] = [0.5] * (n - 1)  # τ_n of blocks 1..N−1
        self.tuned_candidates = None  # the method's validation-tuned threshold candidates (methods/dat/tuning.py)
        self.tuned_choice = None  # the candidate whose thresholds are in use
        self.fixed_exit: int | None = None
        self.log = DecisionLog()
        self.record_trace = True

    # --- classifiers ----------------------------------------------------------------------------
    def classifier(self, n: int) -> tuple[nn.Module, nn.Linear]:
        """C_{n+1} (0-based block index n): (norm, head)."""
        if n == self.n_blocks - 1:
            return self.decoder.norm, self.decoder.head
        return self.exit_norms[n], self.exit_heads[n]

    def logits(self, n: int, h: Tensor) -> Tensor:
        norm, head = self.classifier(n)
        return head(norm(h))

    def forward(self, x: Tensor, mode: str | None = None):
        """Teacher-forced logits of the last classifier (the dense model's output).  Training losses call
        ``mode="all_logits"`` (:meth:`all_logits`) and ``mode="halting"`` (:meth:`all_logits` plus
        :meth:`halting_log_q` of its states) through ``forward``, so data-parallel training syncs them."""
        if mode == "all_logits":
            return self.all_logits(x)
        if mode == "halting":
            logits, states, memory, mem_mask = self.all_logits(x)
            return logits, states, memory, mem_mask, self.halting_log_q(states, memory, mem_mask)
        states, _ = self.decoder_states(x)
        return self.logits(self.n_blocks - 1, states[-1])

    def all_logits(self, x: Tensor) -> tuple[list[Tensor], list[Tensor], Tensor, Tensor]:
        """Teacher-forced: (logits of every classifier, every block's state, encoder output, its mask)."""
        src, tgt = self.unpack(x)
        memory, mem_mask = self.encode(src)
        h, _ = self.decoder.embed(tgt)
        states = []
        for block in self.decoder.blocks:
            h = block(h, block.cross.memory_kv(memory), mem_mask)
            states.append(h)
        return [self.logits(n, s) for n, s in enumerate(states)], states, memory, mem_mask

    # --- halting distributions (training) -------------------------------------------------------
    def halting_log_q(self, states: list[Tensor], memory: Tensor, mem_mask: Tensor) -> Tensor:
        """log q(n) [B, T, N] of the halting unit (sequence: [B, 1, N])."""
        if self.halting == "geometric":
            chi = [torch.sigmoid(self.halt[0](self.exit_norms[n](states[n])).squeeze(-1))
                   for n in range(self.n_blocks - 1)]
            log_q, log_cont = [], torch.zeros_like(states[0][..., 0])
            for c in chi:
                log_q.append(log_cont + torch.log(c.clamp_min(1e-6)))
                log_cont = log_cont + torch.log((1 - c).clamp_min(1e-6))
            log_q.append(log_cont)
            return torch.stack(log_q, dim=-1)
        if self.halting == "multinomial":
            return torch.log_softmax(self.halt[0](self.exit_norms[0](states[0]) if self.n_blocks > 1
                                                  else self.decoder.norm(states[0])), dim=-1)
        if self.halting == "sequence":
            return torch.log_softmax(self.halt[0](self._source_summary(memory, mem_mask)), dim=-1)[:, None]
        raise ValueError(f"halting={self.halting} has no trainable halting distribution")

    @staticmethod
    def _source_summary(memory: Tensor, mem_mask: Tensor) -> Tensor:
        keep = (~mem_mask).unsqueeze(-1).to(memory.dtype)
        return (memory * keep).sum(dim=1) / keep.sum(dim=1).clamp_min(1.0)

    # --- decoding -------------------------------------------------------------------------------
    def begin_generate(self, state: DecodeState, batch: int, beam: int, width: int) -> None:
        self.log = DecisionLog(src_len=int(state.memory.shape[1]), batch=batch)
        if self.record_trace:
            state.extra["trace"] = torch.zeros(batch, 0, dtype=torch.long, device=state.memory.device)
        self._seq_exit = None
        if self.halting == "sequence" and self.fixed_exit is None:
            summary = self._source_summary(state.memory, state.mem_mask)
            self._seq_exit = self.halt[0](summary).argmax(dim=-1) + 1  # [B], 1..N

    def end_generate(self, best: Tensor) -> None:
        b, n = self.log.batch, self.n_blocks
        ready = torch.zeros(n, b, dtype=torch.bool)
        for layer, flags in self._kv_state.kv_ready.items():
            ready[layer] = flags.cpu()
        self.log.kv_computed = ready

    def init_state(self, src: Tensor) -> DecodeState:
        state = super().init_state(src)
        self._kv_state = state
        return state

    def _decide(self, n: int, h: Tensor, rows: Tensor, state: DecodeState, first: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """(exit now? [R_a] bool, logits of the exiting rows if already computed) after block n (0-based)."""
        last = n == self.n_blocks - 1
        if last:
            return torch.ones(len(rows), dtype=torch.bool, device=h.device), None
        if self.fixed_exit is not None:
            return torch.full((len(rows),), n + 1 == self.fixed_exit, dtype=torch.bool, device=h.device), None
        if self.halting == "geometric":
            chi = torch.sigmoid(self.halt[0](self.exit_norms[n](h)).squeeze(-1))
            return chi > self.thresholds[n], None
        if self.halting == "confidence":
            logits = self.logits(n, h)
            return torch.softmax(logits.float(), dim=-1).amax(dim=-1) > self.thresholds[n], logits
        if self.halting == "multinomial":
            assert first is not None
            return first == n + 1, None
        return self._seq_exit.index_select(0, state.row_sample.index_select(0, rows)) == n + 1, None

    def step(self, state: DecodeState, tokens: Tensor, t: int) -> Tensor:
        r, device = tokens.shape[0], tokens.device
        n_blocks = self.n_blocks
        h, _ = self.decoder.embed(tokens[:, None], offset=t)  # [R, 1, d]
        mem_mask = state.mem_mask.index_select(0, state.row_sample)
        active = torch.arange(r, device=device)
        exit_depth = torch.full((r,), n_blocks, dtype=torch.long, device=device)
        out = None
        new_kv: list[list[Tensor | None]] = [[None, None] for _ in range(n_blocks)]
        first_choice = None
        if self.fixed_exit is not None and self.fixed_exit > n_blocks:
            raise ValueError(f"fixed exit {self.fixed_exit} > N = {n_blocks}")
        for n, block in enumerate(self.decoder.blocks):
            if active.numel() == 0:
                break
            cache = state.caches[n]
            sub = {k: v.index_select(0, active) for k, v in cache.items()}
            self._owner = state.row_sample.index_select(0, active)  # the cost ledger's rows
            x = block(h.index_select(0, active), self.memory_kv(state, n, active), mem_mask.index_select(0, active), sub)
            self._store(new_kv, n, active, sub["k"][:, :, -1:], sub["v"][:, :, -1:], r)
            h = h.index_copy(0, active, x)
            if n == 0 and self.halting == "multinomial" and self.fixed_exit is None:
                norm = self.exit_norms[0] if n_blocks > 1 else self.decoder.norm
                first_choice = self.halt[0](norm(x[:, 0])).argmax(dim=-1) + 1
            done, logits = self._decide(n, x[:, 0], active, state, first_choice)
            if done.any():
                leaving = active[done]
                exit_depth[leaving] = n + 1
                self._owner = state.row_sample.index_select(0, leaving)
                emitted = logits[done] if logits is not None else self.logits(n, x[done][:, 0])
                if out is None:
                    out = emitted.new_empty(r, emitted.shape[-1])
                out[leaving] = emitted
                copied = x[done]
                for m in range(n + 1, n_blocks):  # copy the exited state up: each block's own K/V
                    k, v = self.decoder.blocks[m].self_kv(copied)
                    self._store(new_kv, m, leaving, k, v, r)
                active = active[~done]
                self._owner = state.row_sample.index_select(0, active)
                if first_choice is not None:
                    first_choice = first_choice[~done]
        self._owner = state.row_sample
        for n, cache in enumerate(state.caches):
            k, v = new_kv[n]
            cache["k"] = k if "k" not in cache else torch.cat([cache["k"], k], dim=2)
            cache["v"] = v if "v" not in cache else torch.cat([cache["v"], v], dim=2)
        self.log.rows.append(state.row_sample.cpu())
        self.log.exits.append(exit_depth.cpu())
        self.log.steps.append(t)
        if "trace" in state.extra:
            state.extra["trace"] = torch.cat([state.extra["trace"], exit_depth[:, None]], dim=1)
        return torch.log_softmax(out, dim=-1)

    @staticmethod
    def _store(new_kv: list[list[Tensor | None]], n: int, rows: Tensor, k: Tensor, v: Tensor, r: int) -> None:
        if new_kv[n][0] is None:
            new_kv[n][0] = k.new_zeros(r, *k.shape[1:])
            new_kv[n][1] = v.new_zeros(r, *v.shape[1:])
        new_kv[n][0][rows] = k
        new_kv[n][1][rows] = v


def sample_macs_from_log(model: DATModel, log: DecisionLog) -> tuple[Tensor, Tensor]:
    """(MACs per sentence, decoder MACs per sentence) from the decision log of the last ``generate``.

    Per row and step t with exit n (MACs; d = decoder width, m = decoder MLP width, e / m_e = encoder width
    / MLP width (equal to d / m unless the decoder is narrower), V = vocabulary, S = padded source length,
    N blocks):
      executed block:  4d² (self q,k,v,o) + 2(t+1)d (QKᵀ, AV) + 2d² (cross q, o) + 2Sd (cross core) + 2dm
      skipped block:   2d² (the upper block's k, v of the copied state)
      halting:         geometric d per evaluated unit (blocks 1..min(n, N−1)); multinomial d·N once;
                       confidence d·V per evaluated classifier below N (its logits are the output when it exits)
      output:          d·V (confidence: only when exiting at N)
    Per sentence: encoder S·(4e² + 2e·m_e) + 2S²e per encoder block; source K/V 2S·e·d per decoder block
    that computed them; sequence halting e·N.
    """
    cfg = model.cfg
    d, m, vocab, n_blocks = cfg.d_dec, cfg.mlp_dec, model.decoder.head.out_features, model.n_blocks
    e, m_e = cfg.d_model, cfg.d_mlp
    s, b = log.src_len, log.batch
    dec = torch.zeros(b, dtype=torch.float64)
    fixed = model.fixed_exit is not None
    for rows, exits, t in zip(log.rows, log.exits, log.steps):
        n = exits.double()
        block = 4 * d * d + 2 * (t + 1) * d + 2 * d * d + 2 * s * d + 2 * d * m
        cost = n * block + (n_blocks - n) * 2 * d * d
        if fixed:
            cost = cost + d * vocab
        elif model.halting == "geometric":
            cost = cost + torch.clamp(n, max=n_blocks - 1) * d + d * vocab
        elif model.halting == "confidence":
            cost = cost + torch.clamp(n, max=n_blocks - 1) * d * vocab + (n == n_blocks).double() * d * vocab
        elif model.halting == "multinomial":
            cost = cost + d * n_blocks + d * vocab
        else:
            cost = cost + d * vocab
        dec.index_add_(0, rows, cost)
    if log.kv_computed is not None:
        dec += log.kv_computed.double().sum(dim=0) * 2 * s * e * d
    if model.halting == "sequence" and not fixed:
        dec += e * n_blocks
    enc_blocks = len(model.encoder.blocks)
    enc = enc_blocks * (s * (4 * e * e + 2 * e * m_e) + 2 * s * s * e)
    return dec + enc, dec
