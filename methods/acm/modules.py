"""Adaptive Computation Modules (Wójcik et al., "Adaptive Computation Modules"): the layer, its gate,
conversion of a skeleton Encoder, the stage-3 auxiliary losses, and the per-sample cost from the log.

Layer (paper §"Adaptive Computation Module"): N learners s_1..s_N and a gate;
token z running k learners outputs h(z, k) = Σ_{n≤k} s_n(z).  Learner n is the slice [n·w, (n+1)·w) of
ONE MLP (the layout of methods/acm/kernels/acm_torch.py):

    fc1 = nn.Linear(d, N·w)              hidden bias: yes
    fc2 = nn.Linear(N·w, d, bias=False)  no output bias (the paper removes learners' output biases)

so "k learners" = "the first k·w hidden units".  MLP ACMs use the block's activation (GELU in a ViT),
width w = d_mlp/N, choices k ∈ {0..N} (the MLP sits under a residual, so k = 0 is allowed); q/k/v/o ACMs
are low-rank linear learners d→r→d (activation "none"), r = round((d²+d)/(2d+1)/N) (notes §1.1: N
learners ≈ the dense d×d projection; d = 768, N = 4 → r = 96), choices k ∈ {1..N}.

Output bias of the replaced module: dropped by default (paper: "we simply eliminate them"), so h(z, 0)
= 0 and learners absorb the offset in stage 1 (a projection's first learner always runs; an MLP's
constant offset is representable through the hidden bias).  ``keep_output_bias=True`` keeps the dense
module's output bias as one always-added bias (initialised from the dense module, trained with the
learners); bias adds are not MACs, so the cost accounting is the same either way.

Gate (notes §1.1): Linear(d, h) → [act] → Linear(h, h) → [act] → Linear(h, #choices).  Width: acm-code
uses h = 16 on ViT-B, where the 60 gates cost ~0.9% of the model — the paper's rule is "gating around 1%
of the model cost".  At the offline small ViT (d = 64) h = 16 costs ~13% of the dense model, so the
default (``gate_hidden=0``) solves the paper's 1% rule per block (:func:`auto_gate_hidden`: 18 on ViT-B,
2 at d = 64); measured there at β = 0.6 after 1000 end-to-end steps: h = 2 → 0.865 top-1 at 69.6% of
dense MACs, h = 16 → 0.864 at 79.9%.  ``gate_hidden=16`` gives the code's gate.  The public code has no
nonlinearity (the product is one factorised linear map); we default to GELU between
the layers, which makes it the "two-layer network" the paper describes at the same MACs; ``none`` gives
the code's gate.  It outputs logits; Gumbel-softmax on logits equals the paper's eq. (2) on log g(z) for
a softmax g.  Gate MACs per token: d·h + h·h + h·C, always executed (fixed part).

Execution paths:
- masked (training): all N·w hidden units are computed.  With ``gate_grad="straight_through"``
  (default; the paper's claim that task gradients reach the gate) the output is the mixture
  Σ_c ν̂_c·h(z, k_c) with ν̂ the straight-through Gumbel one-hot, computed as per-learner weights
  m_n = Σ_{c: k_c ≥ n} ν̂_c (exactly 1[n ≤ k] in the forward pass) on the hidden slices.  With
  ``gate_grad="none"`` (the public code's behaviour: the task loss sends no gradient to the gates) the
  output is ``acm_masked`` at the hard k; the gates learn from the auxiliary losses only.
- real (evaluation, counting, timing): gate argmax → k per token → ``acm_cpu`` (CPU: the sorted path,
  or its per-learner prefix arrangement when groups are small) or ``acm_triton`` (CUDA): tokens grouped
  by k, GEMMs on weights sliced to the learners each token runs, nothing for k = 0.  No loop bound depends on the batch maximum: the public code's gated loop stops one learner
  short for tokens whose choice is the batch maximum (notes §1.7), which made outputs batch-dependent;
  the kernels run exactly k learners for every token (tests check it).

Every forward logs ``last_k`` (learners per token, shape = the input's leading dims) for the cost log and
the figures; training forwards also log ``last_choice`` (the straight-through one-hot, for the losses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bench.models.transformer import MLP, Attention, Block, Encoder, _module_macs, attention_core_macs, linear_macs
from methods.acm.kernels.acm_ops import acm_triton
from methods.acm.kernels.acm_torch import acm_cpu, acm_masked, acm_naive

PROJECTIONS = ("q", "k", "v", "o")


@dataclass(frozen=True)
class ACMSettings:
    """How a model is ACMized (the architecture; everything here changes parameter shapes or values)."""

    n_learners: int = 4
    modules: str = "all"  # "all": every MLP and q/k/v/o projection; "mlp": MLPs only (the speech setting)
    gate_hidden: int = 0  # 0 = auto: gates ≈ 1% of the replaced modules' MACs (auto_gate_hidden)
    gate_activation: str = "gelu"  # "gelu" or "none" (the public code's purely linear gate)
    keep_output_bias: bool = False


def auto_gate_hidden(d: int, d_mlp: int, n_learners: int, modules: str = "all", share: float = 0.01) -> int:
    """Gate width h so that a block's gates cost ``share`` (1%) of the dense modules they replace, per
    token: Σ_gates (d·h + h² + h·C) = share·(d·d_mlp·2 [+ 4·d²]) (the paper: gating "around 1% of the
    overall model cost").  ViT-B (d 768, MLP 3072, N 4): 18 (acm-code: 16); d = 64, MLP 256: 2 (floor)."""
    gates = [n_learners + 1] + ([n_learners] * 4 if modules == "all" else [])
    dense = 2 * d * d_mlp + (4 * d * d if modules == "all" else 0)
    a, b = len(gates), sum(d + c for c in gates)  # a·h² + b·h = share·dense
    h = (-b + math.sqrt(b * b + 4 * a * share * dense)) / (2 * a)
    return max(2, round(h))


def projection_rank(d: int, n_learners: int) -> int:
    """r = round((d² + d)/(2d + 1)/N): N learners d→r→d (hidden bias, no output bias) ≈ one d×d Linear."""
    return max(1, round((d * d + d) / (2 * d + 1) / n_learners))


class Gate(nn.Module):
    """Linear(d, h) → act → Linear(h, h) → act → Linear(h, C): logits over the C choices of k."""

    def __init__(self, d: int, n_choices: int, hidden: int = 16, activation: str = "gelu"):
        super().__init__()
        if activation not in ("gelu", "none"):
            raise ValueError(f"gate activation must be 'gelu' or 'none', not {activation!r}")
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, n_choices)
        self.act = nn.GELU() if activation == "gelu" else nn.Identity()

    def forward(self, z: Tensor) -> Tensor:
        return self.out(self.act(self.fc2(self.act(self.fc1(z)))))

    def macs_per_token(self) -> int:
        return sum(m.in_features * m.out_features for m in (self.fc1, self.fc2, self.out))


def gumbel_straight_through(logits: Tensor, temperature: float, generator: torch.Generator | None) -> Tensor:
    """Hard one-hot of argmax((logits + Gumbel noise)/T) forward, softmax gradient backward."""
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    noise = -torch.log(-torch.log(u.clamp(1e-10, 1.0 - 1e-7)))
    soft = torch.softmax((logits + noise) / temperature, dim=-1)
    hard = F.one_hot(soft.argmax(dim=-1), soft.shape[-1]).to(soft.dtype)
    return hard - soft.detach() + soft


def real_kernel(device: torch.device, differentiable: bool = False):
    """The inference forward: the Triton kernel on CUDA, elsewhere the sorted PyTorch path or, when some
    group of equal k is small, its per-learner prefix arrangement (``acm_cpu``; both inference-only); when autograd must see it, the gather/``index_add_`` path ``acm_naive`` (same work)."""
    if differentiable:
        return acm_naive
    if device.type == "cuda":
        return acm_triton
    return acm_cpu


class ACM(nn.Module):
    """One Adaptive Computation Module replacing a d→d module (an MLP or a q/k/v/o projection)."""

    def __init__(self, d: int, n_learners: int, width: int, activation: str, min_k: int, *,
                 gate_hidden: int = 16, gate_activation: str = "gelu", output_bias: bool = False):
        super().__init__()
        if min_k not in (0, 1):
            raise ValueError("min_k is 0 (module under a residual) or 1")
        self.d, self.n_learners, self.width, self.activation, self.min_k = d, n_learners, width, activation, min_k
        self.fc1 = nn.Linear(d, n_learners * width)
        self.fc2 = nn.Linear(n_learners * width, d, bias=False)
        self.out_bias = nn.Parameter(torch.zeros(d)) if output_bias else None
        self.gate = Gate(d, n_learners + 1 - min_k, gate_hidden, gate_activation)
        self.register_buffer("choices", torch.arange(min_k, n_learners + 1), persistent=False)
        # Run-time settings (not parameters):
        self.path = "auto"  # "auto" = masked while training, real in eval; or force "masked"/"real"
        self.temperature = 0.8  # Gumbel-softmax temperature (acm-code: 0.8)
        self.gate_grad = "straight_through"  # or "none" (public code: no task gradient to the gate)
        self.force_k: int | Tensor | None = None  # override the gate (stage checks, tests)
        self.generator: torch.Generator | None = None  # Gumbel noise source (seeded per step: exact resume)
        self.last_k: Tensor | None = None
        self.last_choice: Tensor | None = None

    @property
    def n_choices(self) -> int:
        return self.n_learners + 1 - self.min_k

    def learner_macs(self) -> int:
        """MACs of one learner on one token: d·w (up) + w·d (down)."""
        return 2 * self.d * self.width

    def row_macs(self) -> Tensor:
        """Per-row MACs of the last forward (rows = the input's leading dimension): the gate on every token
        plus k learners per token (the cost ledger of a decoding model charges these to sentences)."""
        k = self.last_k.reshape(self.last_k.shape[0], -1) if self.last_k.dim() else self.last_k.reshape(1, 1)
        return k.double().sum(dim=1) * self.learner_macs() + float(k.shape[1] * self.gate.macs_per_token())

    # --- forward ----------------------------------------------------------------------------------
    def forward(self, z: Tensor) -> Tensor:
        lead = z.shape[:-1]
        x = z.reshape(-1, self.d)
        logits = self.gate(x)
        choice = None
        if self.force_k is not None:
            k = torch.as_tensor(self.force_k, device=x.device).long().expand(lead).reshape(-1)
        elif self.training:
            choice = gumbel_straight_through(logits, self.temperature, self.generator)
            k = self.choices[choice.argmax(dim=-1)]
        else:
            k = self.choices[logits.argmax(dim=-1)]
        masked = self.path == "masked" or (self.path == "auto" and self.training)
        if not masked:
            differentiable = torch.is_grad_enabled() and (x.requires_grad or self.fc1.weight.requires_grad)
            kernel = real_kernel(x.device, differentiable)
            y = kernel(x, k, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.width, self.activation)
        elif choice is not None and self.gate_grad == "straight_through":
            y = self.mixture(x, choice)
        else:
            y = acm_masked(x, k, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.width, self.activation)
        if self.out_bias is not None:
            y = y + self.out_bias
        self.last_k = k.reshape(lead)
        self.last_choice = None if choice is None else choice.reshape(*lead, self.n_choices)
        return y.reshape(*lead, self.d)

    def mixture(self, x: Tensor, choice: Tensor) -> Tensor:
        """Σ_c ν̂_c·h(x, k_c) for a (straight-through) one-hot ν̂ [T, C], through per-learner weights
        m_n = Σ_{c: k_c ≥ n} ν̂_c on learner n's hidden slice (dense cost: the training path)."""
        at_least = choice.flip(-1).cumsum(-1).flip(-1)  # [T, C]: column c = Σ_{c' ≥ c} ν̂_c'
        idx = (torch.arange(1, self.n_learners + 1, device=x.device) - self.min_k).clamp_min(0)
        weights = at_least[:, idx]  # [T, N]; learners n ≤ min_k always run (column 0 sums to 1)
        h = self._hidden(x).view(-1, self.n_learners, self.width) * weights.unsqueeze(-1)
        return F.linear(h.reshape(x.shape[0], -1), self.fc2.weight)

    def _hidden(self, x: Tensor) -> Tensor:
        h = F.linear(x, self.fc1.weight, self.fc1.bias)
        if self.activation == "gelu":
            return F.gelu(h)
        return F.relu(h) if self.activation == "relu" else h

    def learner_outputs(self, x: Tensor) -> Tensor:
        """s_n(x) of every learner: [T, N, d] (distillation and gate labels; dense cost)."""
        h = self._hidden(x).view(-1, self.n_learners, self.width)
        return torch.einsum("tnw,dnw->tnd", h, self.fc2.weight.view(self.d, self.n_learners, self.width))

    def cumulative_outputs(self, x: Tensor, detach_earlier: bool = False) -> Tensor:
        """h(x, n) for n = 1..N: [T, N, d] (plus the kept output bias).  ``detach_earlier``: learner n gets
        gradient only from h(x, n) (earlier learners' outputs are constants there: greedy residual fit)."""
        s = self.learner_outputs(x)
        if detach_earlier:
            s_const = s.detach()
            out = s_const.cumsum(dim=1) - s_const + s
        else:
            out = s.cumsum(dim=1)
        return out if self.out_bias is None else out + self.out_bias

    def zero_output(self, x: Tensor) -> Tensor:
        """h(x, 0): zero (or the kept output bias) — the 'no learner' output."""
        out = x.new_zeros(x.shape[0], self.d)
        return out if self.out_bias is None else out + self.out_bias


# --- conversion ---------------------------------------------------------------------------------------
def acmize(model: nn.Module, settings: ACMSettings) -> dict[str, ACM]:
    """Replace, in place, every skeleton Block's ``mlp`` and (``modules="all"``) its ``attn.{q,k,v,o}``
    (and, in a decoder block, its cross-attention ``cross.{q,k,v,o}``) by a freshly initialised ACM, in a
    skeleton Encoder or encoder–decoder; returns {module path: ACM} in forward order.  Attention matmuls,
    norms, embedding and head are untouched."""
    if settings.modules not in ("all", "mlp"):
        raise ValueError(f"modules must be 'all' or 'mlp', not {settings.modules!r}")
    n = settings.n_learners
    layers: dict[str, ACM] = {}
    blocks = [(path, m) for path, m in model.named_modules() if isinstance(m, Block)]
    if not blocks:
        raise TypeError("the model has no skeleton Block to ACMize")
    for path, block in blocks:
        attn = block.attn
        if not isinstance(attn, Attention) or not isinstance(block.mlp, MLP):
            raise TypeError(f"{path} is not a skeleton Block (attn/mlp already replaced?)")
        d = attn.d_model
        hidden = settings.gate_hidden or auto_gate_hidden(d, block.mlp.fc1.out_features, n, settings.modules)
        common = dict(gate_hidden=hidden, gate_activation=settings.gate_activation,
                      output_bias=settings.keep_output_bias)
        if settings.modules == "all":
            rank = projection_rank(d, n)
            attentions = [("attn", attn)] + ([("cross", block.cross)] if hasattr(block, "cross") else [])
            for attn_name, module in attentions:
                for name in PROJECTIONS:
                    dense: nn.Linear = getattr(module, name)
                    if dense.in_features != dense.out_features:
                        continue  # an ACM maps d → d; cross-attention k/v of a narrower decoder stay dense
                    acm = ACM(d, n, rank, "none", min_k=1, **common)
                    _copy_bias(acm, dense.bias)
                    setattr(module, name, acm)
                    layers[f"{path}.{attn_name}.{name}"] = acm
        mlp = block.mlp
        width = max(1, round(mlp.fc1.out_features / n))
        activation = "gelu" if isinstance(mlp.act, nn.GELU) else "relu"
        acm = ACM(d, n, width, activation, min_k=0, **common)
        _copy_bias(acm, mlp.fc2.bias)
        block.mlp = acm
        layers[f"{path}.mlp"] = acm
    # forward order within a block: q, k, v (same input), o, then the MLP
    return layers


def _copy_bias(acm: ACM, bias: Tensor | None) -> None:
    if acm.out_bias is not None and bias is not None:
        with torch.no_grad():
            acm.out_bias.copy_(bias)


def acm_layers(model: nn.Module) -> list[ACM]:
    return [m for m in model.modules() if isinstance(m, ACM)]


def configure(model: nn.Module, **settings) -> None:
    """Set run-time attributes (path, temperature, gate_grad, force_k, generator) on every ACM."""
    for layer in acm_layers(model):
        for key, value in settings.items():
            if not hasattr(layer, key):
                raise AttributeError(f"ACM has no setting {key!r}")
            setattr(layer, key, value)


# --- per-sample cost ----------------------------------------------------------------------------------
def fixed_macs(model: Encoder, tokens: int) -> int:
    """Per-sample MACs that do not depend on the gates: embedding, attention matmuls (QKᵀ, AV), any
    module left dense, every gate on every token, and the head (vision convention: matmul MACs only)."""
    total = _module_macs(model.embed, tokens) + _module_macs(model.head, 1)
    for block in model.blocks:
        attn = block.attn
        total += attention_core_macs(tokens, tokens, attn.d_model)
        for part in [getattr(attn, name) for name in PROJECTIONS] + [block.mlp]:
            if isinstance(part, ACM):
                total += tokens * part.gate.macs_per_token()
            elif isinstance(part, nn.Linear):
                total += linear_macs(part, tokens)
            else:
                total += part.macs(tokens)
    return total


def sample_macs(model: Encoder) -> Tensor:
    """Per-sample MACs of the last forward: fixed part + Σ_ACM Σ_tokens k·(one learner's MACs)."""
    layers = acm_layers(model)
    if not layers or layers[0].last_k is None:
        raise RuntimeError("no ACM decisions logged: run a forward first")
    ks = [layer.last_k for layer in layers]
    tokens = ks[0].shape[-1]
    variable = sum(k.double().sum(dim=-1) * layer.learner_macs() for k, layer in zip(ks, layers))
    return variable + float(fixed_macs(model, tokens))


def compute_fraction(layers: list[ACM], ks: list[Tensor]) -> Tensor:
    """Per-sample cost-weighted fraction of learner compute: Σ_l Σ_j k·p^l / Σ_l Σ_j N·p^l ([B], float)."""
    used = sum(k.sum(dim=-1) * layer.learner_macs() for k, layer in zip(ks, layers))
    full = sum(k.shape[-1] * layer.n_learners * layer.learner_macs() for k, layer in zip(ks, layers))
    return used / full


def mean_learners(ks: list[Tensor]) -> Tensor:
    """Per-sample mean number of learners executed per token per ACM ([B])."""
    return torch.stack([k.float().mean(dim=-1) for k in ks]).mean(dim=0)


def token_load(model: nn.Module) -> Tensor:
    """Per-token fraction of learners executed, averaged over all ACMs and layers: [B, T] (figures)."""
    layers = acm_layers(model)
    return torch.stack([layer.last_k.float() / layer.n_learners for layer in layers]).mean(dim=0)


# --- stage-3 auxiliary losses -------------------------------------------------------------------------
def auxiliary_losses(layers: list[ACM], beta_target: float) -> dict[str, Tensor]:
    """The paper's L_b, L_e, L_d from the straight-through one-hots of the last training forward.

    k of token j in ACM l is Σ_c ν̂_c·k_c (the chosen k forward; softmax gradient backward).
    - L_b = |mean_i Σ_{l,j} k·p^l / Σ_{l,j} N·p^l − β_target|  (batch-mean, cost-weighted; p^l = MACs of
      one learner of ACM l).
    - L_e = −mean_{i,l} H(a_i^l)/log(C_l): a_i^l = histogram of choices over image i's tokens (ν̂ summed),
      normalised by log of the number of choices (the code's log(N+1) for MLPs, log N for projections).
      Minimising it maximises within-image diversity.
    - L_d = −(1/|B|²) Σ_i Σ_m |b_i − b_m|, b_i = Σ_{l,j} k / Σ_{l,j} N (raw learner counts).  The code's
      sign (maximise across-image diversity); the paper prints it without the minus.
    """
    choices = [layer.last_choice for layer in layers]
    if any(c is None for c in choices):
        raise RuntimeError("auxiliary losses need a training forward (straight-through choices)")
    soft_k = [c @ layer.choices.to(c.dtype) for c, layer in zip(choices, layers)]  # [B, T] each
    fraction = compute_fraction(layers, soft_k)
    budget = (fraction.mean() - beta_target).abs()
    entropies = []
    for c in choices:
        if c.shape[-1] < 2:  # one choice (N = 1 projection): no diversity to reward
            continue
        hist = c.sum(dim=1) / c.shape[1]  # [B, C]
        # p·log p with log clamped: finite gradient at empty bins (xlogy's gradient there is NaN)
        entropies.append(-(hist * hist.clamp_min(1e-6).log()).sum(dim=-1) / math.log(c.shape[-1]))
    entropy = -torch.stack(entropies).mean() if entropies else choices[0].new_zeros(())
    counts = sum(k.sum(dim=-1) for k in soft_k)
    full = sum(k.shape[-1] * layer.n_learners for k, layer in zip(soft_k, layers))
    b = counts / full
    diversity = -(b[:, None] - b[None, :]).abs().mean()
    return {"budget": budget, "entropy": entropy, "diversity": diversity, "fraction": fraction.mean().detach()}
