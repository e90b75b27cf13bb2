"""The shared transformer skeleton: embedding → blocks (attention + MLP) → final norm → head.

Every task builds its backbone from these modules and every method is written against their names:

    Encoder.embed            task-specific: tokens [B, T, d] from the raw input
    Encoder.blocks[i]        Block: norm1 → attn (q, k, v, o Linears; fused SDPA core) → norm2 → mlp (fc1, act, fc2)
    Encoder.norm             final LayerNorm (``nn.Identity`` when ``final_norm`` is off: post-norm models)
    Encoder.pool             "cls" (token 0) or "mean" over valid tokens
    Encoder.head             task-specific head on the pooled vector

The attention core is ``torch.nn.functional.scaled_dot_product_attention`` (fused flash / memory-efficient
kernels on GPU and CPU).  The dispatch-level counter still sees QKᵀ and AV: torch's FLOP counter
knows the CUDA SDPA kernels, and bench/cost.py registers the formula of the fused CPU kernel, so the counted
MACs are exactly those of the former explicit matmuls (tests/test_scale.py checks them against the numbers
counted before the change).  Analytic MAC formulas (``macs``) follow the torchvision convention:
matmul/conv multiply-accumulates only; LayerNorm, softmax, activations and bias adds are not counted.

Norm order (``EncoderConfig.norm_first``): pre-norm (the default; ViT, wav2vec 2.0 "stable layer norm"
large / XLS-R, fairseq ``--encoder-normalize-before``) computes ``x + f(norm(x))``; post-norm (the
original Transformer, Marian, fairseq's default, wav2vec 2.0 base) computes ``norm(x + f(x))`` with the
same parameter names (norm1 after attention, norm2 after the MLP).  Post-norm models have no final
LayerNorm after their last block (``final_norm=False`` → ``Encoder.norm`` is an ``nn.Identity``).  The
defaults leave every existing model, its parameter names, outputs and MACs unchanged
(tests/test_pretrained_skeleton.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn
from torch.nn import functional as F


@dataclass
class EncoderConfig:
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_mlp: int = 256
    activation: str = "gelu"  # "gelu", "relu" or "silu" (= "swish", Marian)
    dropout: float = 0.0
    norm_eps: float = 1e-6
    pool: str = "cls"  # "cls" or "mean"
    norm_first: bool = True  # pre-norm blocks (default); False: post-norm (norm after each residual add)
    final_norm: bool = True  # a LayerNorm after the last block; False: none (nn.Identity; post-norm models)


def linear_macs(layer: nn.Linear, tokens: int) -> int:
    return tokens * layer.in_features * layer.out_features


def attention_core_macs(n_q: int, n_k: int, d_model: int) -> int:
    """QKᵀ and AV over all heads: 2·n_q·n_k·d MACs."""
    return 2 * n_q * n_k * d_model


def dropout_p(drop: nn.Module) -> float:
    """The attention-dropout probability SDPA applies: the Dropout module's ``p`` in training, else 0."""
    return float(drop.p) if drop.training and isinstance(drop, nn.Dropout) else 0.0


def make_activation(name: str) -> nn.Module:
    return {"gelu": nn.GELU(), "relu": nn.ReLU(), "silu": nn.SiLU(), "swish": nn.SiLU()}[name]


class MLP(nn.Module):
    def __init__(self, d_model: int, d_mlp: int, activation: str = "gelu", dropout: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_mlp)
        self.act = make_activation(activation)
        self.fc2 = nn.Linear(d_mlp, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.act(self.fc1(x))))

    def macs(self, tokens: int) -> int:
        return linear_macs(self.fc1, tokens) + linear_macs(self.fc2, tokens)


class Attention(nn.Module):
    """Multi-head self-attention with separate q/k/v/o projections and a fused SDPA core (``drop`` holds the
    attention-dropout probability, applied by SDPA in training)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.d_model = d_model
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, -1).transpose(1, 2)  # [B, H, T, dh]

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """``key_padding_mask``: [B, T] bool, True where a key is padding (never attended to)."""
        b, t, d = x.shape
        q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        keep = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]  # SDPA: True = attend
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=dropout_p(self.drop))
        return self.o(out.transpose(1, 2).reshape(b, t, d))

    def macs(self, tokens: int) -> int:
        proj = sum(linear_macs(m, tokens) for m in (self.q, self.k, self.v, self.o))
        return proj + attention_core_macs(tokens, tokens, self.d_model)


class Block(nn.Module):
    """Transformer block.  Pre-norm (default): x + attn(norm1(x)); x + mlp(norm2(x)).
    Post-norm (``cfg.norm_first=False``): norm1(x + attn(x)); norm2(x + mlp(x))."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.norm_first = cfg.norm_first
        self.norm1 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = Attention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.norm2 = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = MLP(cfg.d_model, cfg.d_mlp, cfg.activation, cfg.dropout)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        if not self.norm_first:
            x = self.norm1(x + self.attn(x, key_padding_mask))
            return self.norm2(x + self.mlp(x))
        x = x + self.attn(self.norm1(x), key_padding_mask)
        return x + self.mlp(self.norm2(x))

    def macs(self, tokens: int) -> int:
        return self.attn.macs(tokens) + self.mlp.macs(tokens)


class FirstTokens(nn.Module):
    """An embedding whose (tokens, key_padding_mask) output is cut to its first ``keep`` tokens (the
    fewer-tokens dense ideal of ``bench speed``)."""

    def __init__(self, embed: nn.Module, keep: int):
        super().__init__()
        self.inner, self.keep = embed, keep

    def forward(self, inputs: Tensor) -> tuple[Tensor, Tensor | None]:
        tokens, mask = self.inner(inputs)
        return tokens[:, :self.keep], (None if mask is None else mask[:, :self.keep])


class Encoder(nn.Module):
    """embed → blocks → norm → pool → head.  ``embed`` returns (tokens, key_padding_mask or None)."""

    def __init__(self, cfg: EncoderConfig, embed: nn.Module, head: nn.Module):
        super().__init__()
        self.cfg = cfg
        self.embed = embed
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if cfg.final_norm else nn.Identity()
        self.head = head

    def pool(self, x: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        if self.cfg.pool == "cls":
            return x[:, 0]
        if key_padding_mask is None:
            return x.mean(dim=1)
        keep = (~key_padding_mask).unsqueeze(-1).to(x.dtype)
        return (x * keep).sum(dim=1) / keep.sum(dim=1).clamp_min(1.0)

    def features(self, inputs: Tensor) -> tuple[Tensor, Tensor | None]:
        x, mask = self.embed(inputs)
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x), mask

    def forward(self, inputs: Tensor) -> Tensor:
        x, mask = self.features(inputs)
        return self.head(self.pool(x, mask))

    def macs(self, tokens: int) -> int:
        """Analytic MACs per sample of ``tokens`` tokens (embed/head must define ``macs()`` too)."""
        return (_module_macs(self.embed, tokens) + sum(b.macs(tokens) for b in self.blocks)
                + _module_macs(self.head, 1))


def _module_macs(module: nn.Module, tokens: int) -> int:
    if hasattr(module, "macs"):
        return int(module.macs(tokens))
    if isinstance(module, nn.Linear):
        return linear_macs(module, tokens)
    total = 0
    for child in module.children():
        total += _module_macs(child, tokens)
    return total
