"""CTC speech encoder on the shared skeleton: conv subsampling stem → pre-norm blocks → norm → per-frame head.

    embed   ConvStem: standardise log-mel [B, F, n_mels] with the training set's per-bin mean/std →
            Conv1d(n_mels, d, k=3, stride 2) → GELU → Conv1d(d, d, k=3, stride 2) → GELU → + sinusoidal
            positions.  T = frames after two stride-2 convolutions (no padding): 4× fewer tokens than
            10 ms frames (40 ms per token).  No key padding mask: a clip is speech followed by silence and
            every frame of it is input (tasks/commonvoice/task.py).
    blocks  the skeleton's pre-norm Blocks (GELU MLP, LayerNorm eps 1e-6)
    norm    final LayerNorm
    head    FrameHead: Linear(d, 29) on EVERY token (CTC logits per token), not on a pooled vector.

``CTCEncoder`` is a ``bench.models.transformer.Encoder`` (methods find ``embed``, ``blocks``, ``norm``,
``head`` by name) whose forward returns [B, T, vocab] logits.  Its analytic ``macs(tokens)`` counts the
head on every token.  The skeleton convention counts a head as one pooled vector (``_module_macs(head,
1)``); FrameHead.macs therefore reports the MACs of the tokens of its last forward whatever argument it
gets (it logs that count in forward, like a method logs its decisions), so formulas written for pooled
heads stay exact here.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bench.models.transformer import Encoder, EncoderConfig


def conv_out(length: int, kernel: int = 3, stride: int = 2) -> int:
    return (length - kernel) // stride + 1


def sinusoidal(tokens: int, d_model: int) -> Tensor:
    """[tokens, d] sinusoidal positions (Vaswani et al. 2017): sin on even, cos on odd dimensions."""
    position = torch.arange(tokens, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    out = torch.zeros(tokens, d_model)
    out[:, 0::2] = torch.sin(position * rate)
    out[:, 1::2] = torch.cos(position * rate[: d_model // 2])
    return out


class ConvStem(nn.Module):
    """Log-mel frames [B, F, n_mels] → tokens [B, T, d] (T = conv_out(conv_out(F))), no padding mask."""

    def __init__(self, n_mels: int, d_model: int):
        super().__init__()
        self.n_mels, self.d_model = n_mels, d_model
        self.register_buffer("mean", torch.zeros(n_mels))
        self.register_buffer("std", torch.ones(n_mels))
        self.conv1 = nn.Conv1d(n_mels, d_model, kernel_size=3, stride=2)
        self.conv2 = nn.Conv1d(d_model, d_model, kernel_size=3, stride=2)
        self.act = nn.GELU()
        self.last_frames = 0

    def forward(self, frames: Tensor) -> tuple[Tensor, None]:
        self.last_frames = frames.shape[1]
        x = ((frames - self.mean) / self.std).transpose(1, 2)  # [B, n_mels, F]
        x = self.act(self.conv2(self.act(self.conv1(x)))).transpose(1, 2)  # [B, T, d]
        return x + sinusoidal(x.shape[1], self.d_model).to(x), None

    def macs(self, tokens: int) -> int:
        """Both convolutions on the frames of the last forward (conv1 may produce one output more than
        conv2 reads; it runs, so it counts).  ``tokens`` must be what those frames give."""
        if not self.last_frames:
            raise RuntimeError("ConvStem.macs: run a forward first (the cost depends on the clip length)")
        t1 = conv_out(self.last_frames)
        if conv_out(t1) != tokens:
            raise ValueError(f"ConvStem.macs: {tokens} tokens, but the last forward's {self.last_frames} frames "
                             f"give {conv_out(t1)}")
        return t1 * self.n_mels * 3 * self.d_model + tokens * self.d_model * 3 * self.d_model


class FrameHead(nn.Module):
    """Linear(d, vocab) applied to every token; logs the token count of its last forward."""

    def __init__(self, d_model: int, vocab: int):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)
        self.last_tokens = 0

    def forward(self, x: Tensor) -> Tensor:
        self.last_tokens = x.shape[-2]
        return self.proj(x)

    def macs(self, tokens: int | None = None) -> int:
        """MACs per sample of the last forward (every token); ``tokens`` is ignored (see the module doc)."""
        if not self.last_tokens:
            raise RuntimeError("FrameHead.macs: run a forward first (the head's cost depends on the clip length)")
        return self.last_tokens * self.proj.in_features * self.proj.out_features


class CTCEncoder(Encoder):
    """The skeleton Encoder with a per-token head: forward → [B, T, vocab] CTC logits."""

    def forward(self, inputs: Tensor) -> Tensor:
        x, _ = self.features(inputs)
        return self.head(x)

    def macs(self, tokens: int) -> int:
        head = tokens * self.head.proj.in_features * self.head.proj.out_features
        return self.embed.macs(tokens) + sum(b.macs(tokens) for b in self.blocks) + head


def build_ctc_encoder(cfg: EncoderConfig, n_mels: int, vocab: int, mean: Tensor | None = None,
                      std: Tensor | None = None) -> CTCEncoder:
    model = CTCEncoder(cfg, ConvStem(n_mels, cfg.d_model), FrameHead(cfg.d_model, vocab))
    if mean is not None and std is not None:
        model.embed.mean.copy_(mean)
        model.embed.std.copy_(std)
    return model
