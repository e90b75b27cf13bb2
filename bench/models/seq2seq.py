"""The encoder–decoder member of the shared transformer skeleton (translation).

Built from the encoder's modules and names (bench/models/transformer.py), so methods written against
the skeleton find the same Linears:

    EncoderDecoder.encoder               a skeleton ``Encoder`` (TokenEmbed → Blocks → norm; no head)
    EncoderDecoder.decoder.embed         TokenEmbed (token embedding · √d + learned positions)
    EncoderDecoder.decoder.blocks[i]     DecoderBlock (a skeleton ``Block``): norm1 → attn (causal
                                         self-attention, q/k/v/o) → norm_c → cross (q/k/v/o over the
                                         encoder output) → norm2 → mlp (fc1, act, fc2); pre-norm residuals
                                         (or post-norm: ``norm_first=False``, see below)
    EncoderDecoder.decoder.norm, .head   final LayerNorm (Identity for post-norm models) and the output
                                         projection d → V

Options for pretrained checkpoints (loaded by tasks/iwslt/marian.py and fairseq.py; every default keeps the model as it was):
- ``norm_first=False``: post-norm blocks (Marian, fairseq's default): x ← norm1(x + attn(x)),
  x ← norm_c(x + cross(x)), x ← norm2(x + mlp(x)); no final LayerNorm (``final_norm=False``).
- ``dec_d_model``/``dec_heads``/``dec_mlp``: a decoder narrower than the encoder (the Depth-Adaptive
  Transformer's IWSLT model: encoder 512, decoder 256).  Cross-attention then maps between widths as
  fairseq's ``MultiheadAttention(embed_dim=d_dec, kdim=vdim=d_enc)`` does: q and o are d_dec → d_dec,
  k and v project the d_enc-wide encoder output to d_dec (the DAT paper's cost model charges
  4·|x|·d_dec·d_enc for those source keys/values, Elbayad et al. 2020, App. A).
- ``src_vocab``: a source vocabulary of its own (fairseq's separate dict.de.txt/dict.en.txt).
- ``pad``/``bos``/``eos``: the checkpoint's special ids (Marian: decoder start = pad; fairseq: decoder
  start = eos).  ``never_emit``: ids whose log-probability is −inf while decoding (Marian and fairseq
  never generate pad).  ``head_bias``: an output bias (Marian's ``final_logits_bias``).
- Positions: learned by default; ``fixed_positions``: a loader fills ``embed.pos`` with a sinusoidal
  table (Marian, fairseq) that is not trained (``requires_grad`` off in every model built from the config).
- ``tie_output``: the output projection is the decoder's token embedding; ``share_embeddings``: the encoder
  and decoder token embeddings are one matrix (Marian).  Ties are made in ``__init__`` so that every model
  built from the config (methods copy the base model this way) keeps them.

Input convention (``Batch.x``): int64 ``[B, 2, L]``; row 0 the source ids, row 1 the decoder input
(BOS y_1 … y_n), both right-padded with PAD.  ``model(x)`` is the teacher-forced forward (logits
``[B, T, V]``, used by every training loss); ``model.generate(src)`` decodes (greedy = beam 1).

Decoding keeps a KV cache: each step runs only the new token through every block (self-attention over
the cached keys/values, cross-attention over the source keys/values computed once per block), so the
dispatch-level counter sees exactly what a step executes.  Beam search keeps at most ``beam`` live
hypotheses per sentence; a hypothesis that emits EOS becomes finished and stops computing; a sentence
stops when its ``beam`` best candidates (finished ones compete with the expansions on the summed
log-probability) are all finished, or at its length cap ``len_a·|x| + len_b``.  Finished sentences leave
the batch, so a sentence's output and cost do not depend on the other sentences in the batch.  The
final hypothesis is the finished one with the best score / length**``len_penalty``.  Beam 1 is greedy.

Per-sentence cost (``last_sample_macs``) is accumulated while decoding from each executed module's own
MAC formula (Linears: tokens·in·out; attention cores: 2·n_q·n_k·d; replaced modules such as ACM or
MoEfication MLPs report their per-row MACs of the last call through ``row_macs()``), charged to the
sentence that owns each row.  Encoder + every decoder step of every hypothesis + output projections are
included (all beam hypotheses; source padding of the batch included: evaluation batches are sorted by
length to keep it small).  ``last_decoder_macs`` is the decoder part.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.models.transformer import Attention, Block, Encoder, EncoderConfig, dropout_p

PAD, BOS, EOS = 0, 1, 2


@dataclass
class Seq2SeqConfig:
    vocab: int = 1000
    d_model: int = 64
    enc_layers: int = 2
    dec_layers: int = 2
    n_heads: int = 4
    d_mlp: int = 256
    activation: str = "gelu"
    dropout: float = 0.0
    norm_eps: float = 1e-6
    max_positions: int = 128  # source and target positions (decode width W = max_positions - 1)
    # Options for pretrained checkpoints (see the module docstring); the defaults are the original model.
    norm_first: bool = True
    final_norm: bool = True
    dec_d_model: int = 0  # decoder width (0 = d_model)
    dec_heads: int = 0  # decoder heads (0 = n_heads)
    dec_mlp: int = 0  # decoder MLP width (0 = d_mlp)
    src_vocab: int = 0  # source vocabulary (0 = vocab, shared)
    pad: int = PAD
    bos: int = BOS
    eos: int = EOS
    never_emit: tuple[int, ...] = ()
    head_bias: bool = False
    scale_embed: bool = True  # token embeddings · √d (Marian: scale_embedding; fairseq: not no_scale_embedding)
    fixed_positions: bool = False
    tie_output: bool = False
    share_embeddings: bool = False

    @property
    def d_dec(self) -> int:
        return self.dec_d_model or self.d_model

    @property
    def heads_dec(self) -> int:
        return self.dec_heads or self.n_heads

    @property
    def mlp_dec(self) -> int:
        return self.dec_mlp or self.d_mlp

    def encoder_config(self, layers: int | None = None) -> EncoderConfig:
        return EncoderConfig(d_model=self.d_model, n_layers=self.enc_layers if layers is None else layers,
                             n_heads=self.n_heads, d_mlp=self.d_mlp, activation=self.activation,
                             dropout=self.dropout, norm_eps=self.norm_eps, pool="mean",
                             norm_first=self.norm_first, final_norm=self.final_norm)

    def decoder_config(self) -> EncoderConfig:
        return EncoderConfig(d_model=self.d_dec, n_layers=self.dec_layers, n_heads=self.heads_dec,
                             d_mlp=self.mlp_dec, activation=self.activation, dropout=self.dropout,
                             norm_eps=self.norm_eps, pool="mean", norm_first=self.norm_first,
                             final_norm=self.final_norm)


class TokenEmbed(nn.Module):
    """ids [B, T] → (embedding·√d + position embedding [B, T, d], key padding mask [B, T])."""

    def __init__(self, vocab: int, d_model: int, max_positions: int, dropout: float = 0.0, pad: int = PAD,
                 scale: bool = True):
        super().__init__()
        self.pad = pad
        self.tok = nn.Embedding(vocab, d_model, padding_idx=pad)
        self.pos = nn.Embedding(max_positions, d_model)
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.drop = nn.Dropout(dropout)
        nn.init.normal_(self.tok.weight, std=d_model ** -0.5)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, ids: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        pos = torch.arange(offset, offset + ids.shape[1], device=ids.device)
        x = self.tok(ids) * self.scale + self.pos(pos)
        return self.drop(x), ids.eq(self.pad)


def _split(x: Tensor, heads: int) -> Tensor:
    b, t, _ = x.shape
    return x.view(b, t, heads, -1).transpose(1, 2)  # [B, H, T, dh]


def _merge(x: Tensor) -> Tensor:
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, drop: nn.Module, causal: bool = False) -> Tensor:
    """Attention through ``F.scaled_dot_product_attention``; ``mask`` broadcastable to the scores, True = not
    attended; ``causal`` (queries and keys the same positions): SDPA's own causal mask (no mask tensor)."""
    keep = None if mask is None else ~mask
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout_p(drop), is_causal=causal)


class SelfAttention(Attention):
    """Causal self-attention (the skeleton's q/k/v/o) with an optional KV cache ``[R, H, t, dh]``.

    ``last_core_macs``: per-row MACs of QKᵀ and AV of the last call (for the cost ledger)."""

    last_core_macs: Tensor | None = None

    def forward(self, x: Tensor, cache: dict[str, Tensor] | None = None) -> Tensor:  # type: ignore[override]
        q, k, v = _split(self.q(x), self.n_heads), _split(self.k(x), self.n_heads), _split(self.v(x), self.n_heads)
        if cache is not None and "k" in cache:
            k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
        if cache is not None:
            cache["k"], cache["v"] = k, v
        t_q, t_k = q.shape[2], k.shape[2]
        mask = None
        if 1 < t_q < t_k:  # causal (queries are the last t_q positions); t_q == t_k: SDPA's is_causal
            mask = torch.ones(t_q, t_k, dtype=torch.bool, device=x.device).triu(t_k - t_q + 1)
        self.last_core_macs = torch.full((x.shape[0],), 2.0 * t_q * t_k * self.d_model, dtype=torch.float64,
                                         device=x.device)
        return self.o(_merge(attend(q, k, v, mask, self.drop, causal=1 < t_q == t_k)))

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """This layer's keys/values of ``x`` (used for states copied up from a lower exit)."""
        return _split(self.k(x), self.n_heads), _split(self.v(x), self.n_heads)


class CrossAttention(Attention):
    """Attention of decoder states over the encoder output (keys/values from ``memory_kv``).

    ``kv_dim``: the encoder width when it differs from the decoder's (k, v: kv_dim → d_model)."""

    last_core_macs: Tensor | None = None

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, kv_dim: int | None = None):
        super().__init__(d_model, n_heads, dropout)
        if kv_dim is not None and kv_dim != d_model:
            self.k = nn.Linear(kv_dim, d_model)
            self.v = nn.Linear(kv_dim, d_model)

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        return _split(self.k(memory), self.n_heads), _split(self.v(memory), self.n_heads)

    def forward(self, x: Tensor, kv: tuple[Tensor, Tensor], mem_mask: Tensor) -> Tensor:  # type: ignore[override]
        q = _split(self.q(x), self.n_heads)
        k, v = kv
        self.last_core_macs = torch.full((x.shape[0],), 2.0 * q.shape[2] * k.shape[2] * self.d_model,
                                         dtype=torch.float64, device=x.device)
        return self.o(_merge(attend(q, k, v, mem_mask[:, None, None, :], self.drop)))


class DecoderBlock(Block):
    """Pre-norm decoder block: x + attn(norm1 x) (causal); x + cross(norm_c x, source); x + mlp(norm2 x).
    Post-norm (``norm_first=False``): norm1(x + attn x); norm_c(x + cross(x, source)); norm2(x + mlp x)."""

    def __init__(self, cfg: EncoderConfig, kv_dim: int | None = None):
        super().__init__(cfg)
        self.attn = SelfAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.norm_c = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.cross = CrossAttention(cfg.d_model, cfg.n_heads, cfg.dropout, kv_dim=kv_dim)

    def forward(self, x: Tensor, kv: tuple[Tensor, Tensor], mem_mask: Tensor,  # type: ignore[override]
                cache: dict[str, Tensor] | None = None) -> Tensor:
        if not self.norm_first:
            x = self.norm1(x + self.attn(x, cache))
            x = self.norm_c(x + self.cross(x, kv, mem_mask))
            return self.norm2(x + self.mlp(x))
        x = x + self.attn(self.norm1(x), cache)
        x = x + self.cross(self.norm_c(x), kv, mem_mask)
        return x + self.mlp(self.norm2(x))

    def self_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The keys/values this block's self-attention would cache for input state ``x``."""
        return self.attn.project_kv(self.norm1(x) if self.norm_first else x)


class Decoder(nn.Module):
    def __init__(self, cfg: Seq2SeqConfig, layers: int):
        super().__init__()
        dcfg = cfg.decoder_config()
        d = dcfg.d_model
        self.embed = TokenEmbed(cfg.vocab, d, cfg.max_positions, cfg.dropout, pad=cfg.pad, scale=cfg.scale_embed)
        self.blocks = nn.ModuleList(DecoderBlock(dcfg, kv_dim=cfg.d_model) for _ in range(layers))
        self.norm = nn.LayerNorm(d, eps=cfg.norm_eps) if cfg.final_norm else nn.Identity()
        self.head = nn.Linear(d, cfg.vocab, bias=cfg.head_bias)


class _EncoderHead(nn.Identity):
    """The encoder has no head (its output is the decoder's memory)."""


@dataclass
class DecodeState:
    """Rows (live hypotheses) of one decoding step and the per-block caches."""

    row_sample: Tensor  # [R] sentence of each row
    caches: list[dict[str, Tensor]]  # per block: self-attention "k"/"v" [R, H, t, dh]
    memory: Tensor  # [B, S, d] encoder output
    mem_mask: Tensor  # [B, S] True = padding
    mem_kv: list[tuple[Tensor, Tensor] | None]  # per block: source keys/values [B, H, S, dh] (lazy)
    extra: dict[str, Tensor]  # per-row tensors of subclasses, reordered with the rows
    kv_ready: dict[int, Tensor] = field(default_factory=dict)  # per block: [B] source K/V computed

    def select(self, parents: Tensor) -> None:
        self.row_sample = self.row_sample.index_select(0, parents)
        for cache in self.caches:
            for key in list(cache):
                cache[key] = cache[key].index_select(0, parents)
        for key in list(self.extra):
            self.extra[key] = self.extra[key].index_select(0, parents)


class EncoderDecoder(nn.Module):
    """Encoder–decoder transformer: ``model(x)`` teacher-forced logits; ``generate`` decodes."""

    # Decoding cost depends on the output lengths: the runner counts the dense reference on every
    # evaluation batch (not a few), so a row's cost as % of dense compares the same sentences.
    input_dependent_cost = True

    def __init__(self, cfg: Seq2SeqConfig, dec_layers: int | None = None):
        super().__init__()
        self.cfg = cfg
        dec_layers = cfg.dec_layers if dec_layers is None else dec_layers
        self.cfg = replace(cfg, dec_layers=dec_layers)
        ecfg = cfg.encoder_config()
        self.encoder = Encoder(ecfg, TokenEmbed(cfg.src_vocab or cfg.vocab, cfg.d_model, cfg.max_positions,
                                                cfg.dropout, pad=cfg.pad, scale=cfg.scale_embed), _EncoderHead())
        self.decoder = Decoder(cfg, dec_layers)
        if cfg.tie_output:
            self.decoder.head.weight = self.decoder.embed.tok.weight
        if cfg.share_embeddings:
            self.encoder.embed.tok.weight = self.decoder.embed.tok.weight
        if cfg.fixed_positions:
            self.encoder.embed.pos.weight.requires_grad_(False)
            self.decoder.embed.pos.weight.requires_grad_(False)
        # generation settings (set by the task)
        self.beam, self.len_a, self.len_b, self.len_penalty = 1, 1.5, 5, 1.0
        self._ledger: Tensor | None = None
        self._owner: Tensor | None = None
        self._phase = "encoder"
        self.last_sample_macs: Tensor | None = None
        self.last_decoder_macs: Tensor | None = None
        self.last_out_len: Tensor | None = None
        self.last_trace: Tensor | None = None  # [B, W] per-token record of the final hypotheses (subclasses)

    # --- teacher forcing --------------------------------------------------------------------------
    def unpack(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """[B, 2, L] → (source [B, S], decoder input [B, T]) trimmed to their longest non-pad length
        (when the decoder starts with the pad id, as Marian's does, column 0 always counts)."""
        src, tgt = x[:, 0], x[:, 1]
        pad = self.cfg.pad
        s = max(1, int(src.ne(pad).sum(1).max()))
        if self.cfg.bos == pad:
            t = 1 + int(tgt[:, 1:].ne(pad).sum(1).max()) if tgt.shape[1] > 1 else 1
        else:
            t = max(1, int(tgt.ne(pad).sum(1).max()))
        return src[:, :s], tgt[:, :t]

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.encoder.features(src)

    def decoder_states(self, x: Tensor) -> tuple[list[Tensor], Tensor]:
        """Teacher-forced decoder: the state after every block ([B, T, d] each) and the encoder mask."""
        src, tgt = self.unpack(x)
        memory, mem_mask = self.encode(src)
        h, _ = self.decoder.embed(tgt)
        states = []
        for block in self.decoder.blocks:
            h = block(h, block.cross.memory_kv(memory), mem_mask)
            states.append(h)
        return states, mem_mask

    def forward(self, x: Tensor) -> Tensor:
        states, _ = self.decoder_states(x)
        return self.decoder.head(self.decoder.norm(states[-1]))

    # --- decoding ---------------------------------------------------------------------------------
    def charge(self, macs: Tensor | float, owner: Tensor | None = None) -> None:
        """Add per-row MACs (a [rows] tensor or a scalar per row) to the owning sentences' ledger."""
        if self._ledger is None:
            return
        owner = self._owner if owner is None else owner
        if not torch.is_tensor(macs):
            macs = torch.full((owner.shape[0],), float(macs), dtype=torch.float64, device=owner.device)
        self._ledger[self._phase].index_add_(0, owner, macs.double())

    @contextmanager
    def _cost_ledger(self, batch: int, device: torch.device) -> Iterator[None]:
        """Charge every executed cost leaf to its sentence (forward hooks; removed on exit)."""
        leaves = _cost_leaves(self)
        handles = [m.register_forward_hook(self._leaf_hook) for m in leaves]
        self._ledger = {k: torch.zeros(batch, dtype=torch.float64, device=device) for k in ("encoder", "decoder")}
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            ledger, self._ledger = self._ledger, None
            self.last_decoder_macs = ledger["decoder"].cpu()
            self.last_sample_macs = (ledger["encoder"] + ledger["decoder"]).cpu()

    def _leaf_hook(self, module: nn.Module, inputs: tuple, output: Tensor) -> None:
        self.charge(leaf_row_macs(module, inputs))

    def init_state(self, src: Tensor) -> DecodeState:
        self._phase, self._owner = "encoder", torch.arange(src.shape[0], device=src.device)
        memory, mem_mask = self.encode(src)
        n = len(self.decoder.blocks)
        return DecodeState(self._owner.clone(), [{} for _ in range(n)], memory, mem_mask, [None] * n, {})

    def memory_kv(self, state: DecodeState, layer: int, rows: Tensor) -> tuple[Tensor, Tensor]:
        """Source keys/values of block ``layer`` for ``rows`` (computed once per sentence, when first
        needed: lazily)."""
        need = state.row_sample.index_select(0, rows)
        cross = self.decoder.blocks[layer].cross
        kv = state.mem_kv[layer]
        if kv is None:
            b, s, _ = state.memory.shape
            heads = cross.n_heads
            empty = state.memory.new_zeros(b, heads, s, cross.d_model // heads)
            kv = (empty, empty.clone())
            state.mem_kv[layer] = kv
        ready = state.kv_ready.setdefault(layer, torch.zeros(state.memory.shape[0], dtype=torch.bool,
                                                              device=need.device))
        missing = torch.unique(need[~ready.index_select(0, need)])
        if missing.numel():
            owner, phase = self._owner, self._phase
            self._owner, self._phase = missing, "decoder"
            k, v = cross.memory_kv(state.memory.index_select(0, missing))
            self._owner, self._phase = owner, phase
            kv[0].index_copy_(0, missing, k)
            kv[1].index_copy_(0, missing, v)
            ready[missing] = True
        return kv[0].index_select(0, need), kv[1].index_select(0, need)

    def step(self, state: DecodeState, tokens: Tensor, t: int) -> Tensor:
        """One decoding step for every row: log-probabilities [R, V] of the next token."""
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        h, _ = self.decoder.embed(tokens[:, None], offset=t)
        mem_mask = state.mem_mask.index_select(0, state.row_sample)
        for i, block in enumerate(self.decoder.blocks):
            h = block(h, self.memory_kv(state, i, rows), mem_mask, state.caches[i])
        return torch.log_softmax(self.decoder.head(self.decoder.norm(h[:, 0])), dim=-1)

    def finish_step(self, state: DecodeState, parents: Tensor, tokens: Tensor) -> None:
        """Hook for subclasses: called after ``state.select(parents)`` with the rows' new tokens."""

    @torch.no_grad()
    def generate(self, src: Tensor, beam: int | None = None) -> Tensor:
        """Decode a batch of sources [B, L] (PAD-padded) → token ids [B, max_positions - 1] (EOS dropped,
        PAD-padded).  Sets ``last_sample_macs``, ``last_decoder_macs``, ``last_out_len`` (tokens incl. EOS)."""
        beam = int(self.beam if beam is None else beam)
        device = src.device
        b = src.shape[0]
        width = self.cfg.max_positions - 1
        pad, bos, eos = self.cfg.pad, self.cfg.bos, self.cfg.eos
        src_len = src.ne(pad).sum(1)
        src = src[:, : max(1, int(src_len.max()))]
        cap = (self.len_a * src_len.double() + self.len_b).floor().long().clamp(1, width)
        with self._cost_ledger(b, device):
            state = self.init_state(src)
            self._phase = "decoder"
            hist = torch.full((b, 1), bos, dtype=torch.long, device=device)  # per row: BOS + tokens
            score = torch.zeros(b, dtype=torch.float64, device=device)
            fin_score = torch.full((b, beam), float("-inf"), dtype=torch.float64, device=device)
            fin_tok = torch.full((b, beam, width + 1), pad, dtype=torch.long, device=device)
            fin_len = torch.zeros(b, beam, dtype=torch.long, device=device)
            fin_trace = torch.zeros(b, beam, width + 1, dtype=torch.long, device=device)
            self.begin_generate(state, b, beam, width)
            vocab = self.cfg.vocab
            for t in range(width):
                if state.row_sample.numel() == 0:
                    break
                self._owner = state.row_sample
                logp = self.step(state, hist[:, -1], t).double()  # [R, V]
                if self.cfg.never_emit:
                    logp[:, list(self.cfg.never_emit)] = float("-inf")
                at_cap = (cap.index_select(0, state.row_sample) <= t + 1)
                logp[at_cap, :] = torch.where(torch.arange(vocab, device=device) == eos, logp[at_cap, :],
                                              torch.full_like(logp[at_cap, :], float("-inf")))
                cand = score[:, None] + logp  # [R, V]
                # slot layout per sentence: live rows in order, padded to beam
                samples, slot = _slots(state.row_sample, b)
                table = torch.full((b, beam, vocab), float("-inf"), dtype=torch.float64, device=device)
                table[samples, slot] = cand
                row_of = torch.full((b, beam), -1, dtype=torch.long, device=device)
                row_of[samples, slot] = torch.arange(len(samples), device=device)
                allc = torch.cat([table.view(b, beam * vocab), fin_score], dim=1)
                live = torch.unique(state.row_sample)
                top_s, top_i = allc.index_select(0, live).topk(beam, dim=1)  # [b_live, beam]
                valid = top_s > float("-inf")
                is_new = top_i < beam * vocab
                slot_i = torch.div(top_i, vocab, rounding_mode="floor")
                tok = torch.where(is_new, top_i - slot_i * vocab, torch.full_like(top_i, pad))
                parent = torch.where(is_new, row_of.index_select(0, live).gather(1, slot_i.clamp(max=beam - 1)),
                                     torch.full_like(top_i, -1))
                ends = valid & is_new & (tok == eos)
                cont = valid & is_new & (tok != eos)
                keep_old = valid & ~is_new
                # new finished set (old kept + new EOS ends), in rank order
                old_idx = (top_i - beam * vocab).clamp(min=0)
                nf_score = torch.full_like(top_s, float("-inf"))
                nf_tok = torch.full((len(live), beam, width + 1), pad, dtype=torch.long, device=device)
                nf_len = torch.zeros_like(top_i)
                old_tok = fin_tok.index_select(0, live).gather(1, old_idx[..., None].expand(-1, -1, width + 1))
                old_len = fin_len.index_select(0, live).gather(1, old_idx)
                nf_score = torch.where(keep_old | ends, top_s, nf_score)
                nf_tok = torch.where(keep_old[..., None], old_tok, nf_tok)
                nf_len = torch.where(keep_old, old_len, nf_len)
                if ends.any():
                    li, bi = ends.nonzero(as_tuple=True)
                    rows = parent[li, bi]
                    seq = torch.cat([hist.index_select(0, rows)[:, 1:], torch.full((len(rows), 1), eos, device=device,
                                                                                      dtype=torch.long)], dim=1)
                    nf_tok[li, bi, : seq.shape[1]] = seq
                    nf_len[li, bi] = seq.shape[1]
                if "trace" in state.extra:  # a per-token record of subclasses (e.g. exit depths)
                    old_trace = fin_trace.index_select(0, live).gather(1, old_idx[..., None].expand(-1, -1, width + 1))
                    nf_trace = torch.where(keep_old[..., None], old_trace, torch.zeros_like(old_trace))
                    if ends.any():
                        rec = state.extra["trace"].index_select(0, rows)
                        nf_trace[li, bi, : rec.shape[1]] = rec
                    fin_trace[live] = nf_trace
                fin_score[live], fin_tok[live], fin_len[live] = nf_score, nf_tok, nf_len
                # live rows of the next step: the continuing expansions, sentence by sentence
                li, bi = cont.nonzero(as_tuple=True)
                parents = parent[li, bi]
                hist = torch.cat([hist.index_select(0, parents), tok[li, bi][:, None]], dim=1)
                score = top_s[li, bi]
                state.select(parents)
                self.finish_step(state, parents, tok[li, bi])
        norm = fin_score / fin_len.clamp(min=1).double() ** self.len_penalty
        best = norm.argmax(dim=1)
        out = fin_tok[torch.arange(b, device=device), best][:, :width]
        length = fin_len[torch.arange(b, device=device), best]
        self.last_out_len = length.cpu()
        self.last_trace = fin_trace[torch.arange(b, device=device), best][:, :width].cpu()
        self.end_generate(best)
        return out.masked_fill(out == eos, pad)

    def begin_generate(self, state: DecodeState, batch: int, beam: int, width: int) -> None:
        """Hook for subclasses (decision logs)."""

    def end_generate(self, best: Tensor) -> None:
        """Hook for subclasses: ``best`` [B] = index of the chosen finished hypothesis."""


def _slots(row_sample: Tensor, batch: int) -> tuple[Tensor, Tensor]:
    """(sentence, rank among its rows) of every row; rows of a sentence are contiguous."""
    counts = torch.bincount(row_sample, minlength=batch)
    starts = torch.cumsum(counts, 0) - counts
    return row_sample, torch.arange(len(row_sample), device=row_sample.device) - starts.index_select(0, row_sample)


def _cost_leaves(model: nn.Module) -> list[nn.Module]:
    """Modules whose MACs the ledger charges: those reporting ``row_macs`` (replaced modules), plain
    Linears, and attention modules (their QKᵀ/AV cores), outermost first; nothing inside a reporting leaf."""
    leaves: list[nn.Module] = []
    skip: set[int] = set()
    for _, module in model.named_modules():
        if id(module) in skip:
            continue
        if hasattr(module, "row_macs") or isinstance(module, nn.Linear):
            leaves.append(module)
            skip.update(id(m) for m in module.modules())
        elif isinstance(module, Attention):
            leaves.append(module)
    return leaves


def leaf_row_macs(module: nn.Module, inputs: tuple) -> Tensor:
    """Per-row MACs of the last call of a cost leaf (rows = the input's leading dimension)."""
    x = inputs[0]
    if hasattr(module, "row_macs"):
        return module.row_macs()
    if isinstance(module, nn.Linear):
        tokens = x[0].numel() // x.shape[-1] if x.dim() > 1 else 1
        return torch.full((x.shape[0],), float(tokens * module.in_features * module.out_features),
                          dtype=torch.float64, device=x.device)
    core = getattr(module, "last_core_macs", None)
    if isinstance(module, (SelfAttention, CrossAttention)) and core is not None:
        return core
    t = x.shape[1]  # skeleton encoder attention over its own tokens
    return torch.full((x.shape[0],), 2.0 * t * t * module.d_model, dtype=torch.float64, device=x.device)
