"""AdaTape model on the shared skeleton: embed → block 1 → ATR (tape tokens) → blocks 2..L on [input; tape].

    embed       the task's input tokens [B, n_in, d] (imagenet: the ViT's PatchEmbed, class token first;
                parity: ONE input token.  ``ParityToken``, the paper's parity setup (§3.1), is a single
                trainable token that is the same for every input, so the tape is the only way to the input;
                ``ParityInput`` adds a linear map of the whole one-hot sequence to it, an ablation in which
                the query already sees the input)
    bank        input-driven: h2(h1(x_fine) + pos) (paper A.2; imagenet: a Conv2d with a finer patch as h1;
                parity: the sequence elements' embedding as h1), or a learnable [C, d] table; ``None``
                reads no tape (a control: with ``ParityToken`` no part of the input reaches the output)
    block 1     runs on the input tokens only; its class-token output is the ATR query
    ATR         methods/adatape/atr.py: each sample reads its own number n ∈ [1, T] of tape tokens
                (none without a bank)
    blocks 2..L run on [input; tape] (n_in + n tokens), then final norm, class-token pooling, head

Two execution paths with the same outputs:
- masked (training): the tape is padded to T slots and padded slots are excluded as attention keys
  (key-padding mask), so every real token sees exactly the sequence it would see alone;
- real (evaluation, counting, timing): samples are grouped by tape length and each group runs blocks
  2..L at its exact length; no padded slot is computed.  Per-sample MACs follow from n alone
  (:meth:`AdaTapeModel.sample_macs`).

Not implemented (the released ImageNet config has them off): the separate FFN for tape tokens and the
GLU MLP on tape tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.models.transformer import Block, EncoderConfig, linear_macs
from methods.adatape.atr import ATRResult, atr


class ParityToken(nn.Module):
    """Parity (sequence), the paper's input: one trainable token, the same for every input (it only makes
    the initial query; the input reaches the model through the tape alone)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))

    def forward(self, tokens: Tensor) -> tuple[Tensor, None]:
        # a copy, not a view of the Parameter: torch's FlopCounterMode's module tracker (which the counter's
        # tests compare with) fails on a bare Parameter
        # passed between modules under inference mode
        return self.cls.expand(tokens.shape[0], -1, -1).clone(), None

    def macs(self, tokens: int = 1) -> int:
        return 0


class ParityInput(nn.Module):
    """Parity (sequence), an ablation of the paper's input: one input token = class token + Linear(one-hot of
    the n elements, flattened), so the query (and every later layer) sees the whole input without the tape."""

    def __init__(self, n: int, d_model: int, symbols: int = 3):
        super().__init__()
        self.symbols = symbols
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.proj = nn.Linear(n * symbols, d_model)

    def forward(self, tokens: Tensor) -> tuple[Tensor, None]:
        flat = F.one_hot(tokens, self.symbols).flatten(1).to(self.cls.dtype)
        return self.cls + self.proj(flat).unsqueeze(1), None

    def macs(self, tokens: int = 1) -> int:
        return linear_macs(self.proj, 1)


class ParityBank(nn.Module):
    """Input-driven bank of the parity sequence: h2(embedding(element) + position), one token per element."""

    def __init__(self, n: int, d_model: int, symbols: int = 3):
        super().__init__()
        self.embed = nn.Embedding(symbols, d_model)
        self.pos = nn.Parameter(torch.randn(1, n, d_model) * 0.02)
        self.h2 = nn.Linear(d_model, d_model)
        self.size = n

    def forward(self, tokens: Tensor) -> Tensor:
        return self.h2(self.embed(tokens) + self.pos)

    def macs(self) -> int:
        return linear_macs(self.h2, self.size)


class PatchBank(nn.Module):
    """Input-driven bank of an image: h2(Conv2d(patch=p_fine)(image) + position) (paper A.2)."""

    def __init__(self, image_size: int, patch: int, channels: int, d_model: int):
        super().__init__()
        if image_size % patch:
            raise ValueError(f"image_size={image_size} is not a multiple of the bank patch {patch}")
        self.size = (image_size // patch) ** 2
        self.patch, self.channels = patch, channels
        self.h1 = nn.Conv2d(channels, d_model, kernel_size=patch, stride=patch)
        self.pos = nn.Parameter(torch.randn(1, self.size, d_model) * 0.02)
        self.h2 = nn.Linear(d_model, d_model)

    def forward(self, images: Tensor) -> Tensor:
        return self.h2(self.h1(images).flatten(2).transpose(1, 2) + self.pos)

    def macs(self) -> int:
        return self.size * self.channels * self.patch ** 2 * self.h1.out_channels + linear_macs(self.h2, self.size)


class LearnableBank(nn.Module):
    """A learnable bank of C vectors (the same for every input)."""

    def __init__(self, size: int, d_model: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(size, d_model) * 0.02)
        self.size = size

    def forward(self, inputs: Tensor) -> Tensor:
        # a copy, not the Parameter itself: torch's FlopCounterMode's module tracker (which the counter's tests
        # compare with) fails on a bare Parameter
        # passed between modules under inference mode
        return self.weight.clone()

    def macs(self) -> int:
        return 0


@dataclass
class TapeSettings:
    max_tape: int  # T
    tau: float
    k: int  # K = T/τ
    key_dim: int  # h = d / heads
    complex_query: bool = True
    query_noise: float = 0.0  # training only (learnable bank)
    bank_drop: float = 0.0  # training only (learnable bank)


class AdaTapeModel(nn.Module):
    def __init__(self, cfg: EncoderConfig, embed: nn.Module, bank: nn.Module | None, blocks: nn.ModuleList,
                 norm: nn.Module, head: nn.Module, settings: TapeSettings):
        super().__init__()
        if cfg.pool != "cls":
            raise ValueError("AdaTape here pools the class token (pool='cls')")
        if len(blocks) < 2:
            raise ValueError("AdaTape needs at least 2 layers (the tape is appended after layer 1)")
        self.cfg, self.settings = cfg, settings
        self.embed, self.bank, self.blocks, self.norm, self.head = embed, bank, blocks, norm, head
        # shared by query and bank; none without a bank (the no-tape control reads nothing)
        self.bank_norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if bank is not None else None
        self.real_path = False
        self.cap: int | None = None  # evaluation-time cap on T (harness extension)
        self.force_length: Tensor | None = None  # [B] tape lengths that replace halting (bench speed)
        self.last: ATRResult | None = None
        self.last_inputs = 0  # n_in of the last forward

    def read_tape(self, inputs: Tensor) -> tuple[Tensor, ATRResult]:
        """Input tokens after block 1 [B, n_in, d] and the ATR result."""
        s = self.settings
        x, mask = self.embed(inputs)
        if mask is not None:
            raise NotImplementedError("AdaTape does not support padded inputs")
        x = self.blocks[0](x)
        if self.bank is None:
            return x, self._no_tape(x)
        values = self.bank(inputs)
        keys = self.bank_norm(values)[..., : s.key_dim]
        query = x[:, 0]
        used = None
        if self.training and isinstance(self.bank, LearnableBank):
            if s.query_noise:
                query = query + s.query_noise * torch.randn_like(query)
            if s.bank_drop:
                used = torch.rand(query.shape[0], values.shape[0], device=x.device) < s.bank_drop
        result = atr(query, keys, values, self.bank_norm, max_tape=s.max_tape, tau=s.tau, k=s.k,
                     key_dim=s.key_dim, complex_query=s.complex_query, used=used,
                     cap=None if self.training else self.cap,
                     force=None if self.training else self.force_length)
        return x, result

    def _no_tape(self, x: Tensor) -> ATRResult:
        """The ATR result of a model without a bank: every sample reads no tape token."""
        b = x.shape[0]
        return ATRResult(tape=x.new_zeros(b, 0, x.shape[-1]), length=torch.zeros(b, dtype=torch.long, device=x.device),
                         loss=x.new_zeros(b), max_weight=x.new_zeros(b, 0))

    def forward(self, inputs: Tensor) -> Tensor:
        x, result = self.read_tape(inputs)
        self.last, self.last_inputs = result, x.shape[1]
        if self.real_path and not self.training:
            return self._real(x, result)
        return self._masked(x, result)

    def _finish(self, seq: Tensor) -> Tensor:
        return self.head(self.norm(seq[:, 0]))

    def _masked(self, x: Tensor, result: ATRResult) -> Tensor:
        b, n_in, _ = x.shape
        slots = result.tape.shape[1]
        pad = torch.arange(slots, device=x.device).unsqueeze(0) >= result.length.unsqueeze(1)
        mask = torch.cat([torch.zeros(b, n_in, dtype=torch.bool, device=x.device), pad], dim=1)
        seq = torch.cat([x, result.tape], dim=1)
        for block in self.blocks[1:]:
            seq = block(seq, mask)
        return self._finish(seq)

    def _real(self, x: Tensor, result: ATRResult) -> Tensor:
        out: Tensor | None = None
        for n in torch.unique(result.length).tolist():
            rows = torch.nonzero(result.length == n).squeeze(1)
            seq = torch.cat([x.index_select(0, rows), result.tape.index_select(0, rows)[:, :n]], dim=1)
            for block in self.blocks[1:]:
                seq = block(seq)
            logits = self._finish(seq)
            if out is None:
                out = logits.new_zeros(x.shape[0], logits.shape[-1])
            out.index_copy_(0, rows, logits)
        assert out is not None
        return out

    # --- cost --------------------------------------------------------------------------------------
    def fixed_macs(self, n_in: int) -> int:
        """Always executed: input embedding, bank construction, block 1 on the inputs, head."""
        embed = int(self.embed.macs(n_in)) if hasattr(self.embed, "macs") else 0
        head = linear_macs(self.head, 1) if isinstance(self.head, nn.Linear) else 0
        bank = int(self.bank.macs()) if self.bank is not None else 0
        return embed + bank + self.blocks[0].macs(n_in) + head

    def step_macs(self) -> int:
        """One ATR step of one sample: scores over the bank (C·h) and the merge of K tokens (K·d)."""
        s = self.settings
        if self.bank is None:
            return 0
        return self.bank.size * s.key_dim + s.k * self.cfg.d_model

    def sample_macs(self, length: Tensor, n_in: int) -> Tensor:
        """Per-sample MACs given each sample's tape length (float64 [B])."""
        per_len = {}
        for n in torch.unique(length).tolist():
            per_len[n] = (self.fixed_macs(n_in) + n * self.step_macs()
                          + sum(block.macs(n_in + n) for block in self.blocks[1:]))
        return torch.tensor([float(per_len[int(n)]) for n in length.tolist()], dtype=torch.float64)
