"""wav2vec 2.0 / XLS-R (HuggingFace ``Wav2Vec2ForCTC``) on the shared skeleton.

The model is a skeleton ``Encoder`` whose ``embed`` is the wav2vec 2.0 front end (Baevski et al. 2020):

    waveform [B, S] at 16 kHz
    → (optional) zero-mean unit-variance per utterance, as ``Wav2Vec2FeatureExtractor(do_normalize=True)``
    → feature encoder: 7 Conv1d layers (512 channels, kernels 10,3,3,3,3,2,2, strides 5,2,2,2,2,2,2; one
      frame per 20 ms), each followed by GELU; normalisation "group" (GroupNorm with one group per
      channel after the first conv only; base) or "layer" (LayerNorm over channels after every conv;
      large / XLS-R)
    → feature projection: LayerNorm(512) → Linear(512, d)
    → convolutional relative position embedding: x + GELU(Conv1d(d, d, kernel 128, padding 64, groups 16)
      with the last output frame dropped for an even kernel); the conv's weight norm (g·v/‖v‖ over the
      channel dimensions) is folded into one plain weight at load time: the same forward, but fine-tuning
      then updates the folded weight rather than g and v
    → post-norm ("base", ``do_stable_layer_norm=False``): LayerNorm here, then post-norm blocks, no final
      norm; pre-norm ("stable layer norm": large, XLS-R): pre-norm blocks, then a final LayerNorm
      (``Encoder.norm``)

Blocks are the skeleton's (q/k/v/o, GELU MLP); HF scales q by dh^-1/2 after its projection and we scale
QKᵀ by dh^-1/2: the same function.  Not represented: training-time SpecAugment masking with
``masked_spec_embed`` (skipped: it never runs in evaluation), LayerDrop, adapters (refused) and the
pretraining heads (``quantizer``, ``project_q``/``project_hid``; ignored).  A pretraining checkpoint
without ``lm_head`` (e.g. XLS-R-300M itself) loads with a freshly initialised CTC head, to be fine-tuned.

No attention mask: the task feeds fixed-length clips (utterance + silence) and every frame is input,
as HF's base models expect (they are trained without ``attention_mask``).

Cost: the convolutions count L_out·(C_in/groups)·k·C_out MACs each (the position conv runs T + 1 output
frames for an even kernel: the dropped frame is computed), the projection T·512·d; norms and GELU are not
counted (the skeleton's convention).  ``Wav2Vec2FrontEnd.macs`` is that formula for the input length of
its last forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from bench.errors import UserError
from bench.models.pretrained import hf
from bench.models.transformer import EncoderConfig



@dataclass(frozen=True)
class Wav2Vec2Shape:
    conv_dim: tuple[int, ...] = (512,) * 7
    conv_kernel: tuple[int, ...] = (10, 3, 3, 3, 3, 2, 2)
    conv_stride: tuple[int, ...] = (5, 2, 2, 2, 2, 2, 2)
    conv_bias: bool = False
    feat_norm: str = "group"  # "group" (base) or "layer" (large, XLS-R)
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    mlp: int = 3072
    pos_kernel: int = 128
    pos_groups: int = 16
    stable: bool = False  # pre-norm ("stable layer norm") blocks
    norm_eps: float = 1e-5
    vocab: int = 32
    pad: int = 0  # CTC blank
    normalize: bool = True  # per-utterance zero mean, unit variance of the waveform

    def encoder_config(self) -> EncoderConfig:
        return EncoderConfig(d_model=self.hidden, n_layers=self.layers, n_heads=self.heads, d_mlp=self.mlp,
                             activation="gelu", dropout=0.0, norm_eps=self.norm_eps, pool="mean",
                             norm_first=self.stable, final_norm=self.stable)

    def frames(self, samples: int) -> int:
        """Output frames of the feature encoder for ``samples`` input samples."""
        for k, s in zip(self.conv_kernel, self.conv_stride):
            samples = (samples - k) // s + 1
        return samples


# Named sizes of the papers' checkpoints (HF configs of facebook/wav2vec2-base and wav2vec2-xls-r-300m).
BASE = Wav2Vec2Shape()
XLSR_300M = Wav2Vec2Shape(conv_bias=True, feat_norm="layer", hidden=1024, layers=24, heads=16, mlp=4096, stable=True)


def shape_from_config(config: dict[str, Any], key: str) -> Wav2Vec2Shape:
    """A ``Wav2Vec2Config`` dict (config.json) → shape; refuses what the skeleton cannot represent."""
    if config.get("model_type", "wav2vec2") != "wav2vec2":
        raise UserError(f"{key}: model_type {config.get('model_type')!r}; only wav2vec2 (incl. XLS-R) checkpoints "
                        "load here")
    for flag, why in (("add_adapter", "adapter layers"), ("use_weighted_layer_sum", "a weighted layer sum")):
        if config.get(flag):
            raise UserError(f"{key}: the checkpoint uses {why} ({flag}=true), which the skeleton does not have")
    for act_key in ("hidden_act", "feat_extract_activation"):
        if config.get(act_key, "gelu") != "gelu":
            raise UserError(f"{key}: {act_key}={config[act_key]!r}; only 'gelu' is supported")
    norm = config.get("feat_extract_norm", "group")
    if norm not in ("group", "layer"):
        raise UserError(f"{key}: feat_extract_norm={norm!r}; expected 'group' or 'layer'")
    return Wav2Vec2Shape(
        conv_dim=tuple(config.get("conv_dim", BASE.conv_dim)),
        conv_kernel=tuple(config.get("conv_kernel", BASE.conv_kernel)),
        conv_stride=tuple(config.get("conv_stride", BASE.conv_stride)), conv_bias=bool(config.get("conv_bias", False)),
        feat_norm=norm, hidden=int(config.get("hidden_size", 768)), layers=int(config.get("num_hidden_layers", 12)),
        heads=int(config.get("num_attention_heads", 12)), mlp=int(config.get("intermediate_size", 3072)),
        pos_kernel=int(config.get("num_conv_pos_embeddings", 128)),
        pos_groups=int(config.get("num_conv_pos_embedding_groups", 16)),
        stable=bool(config.get("do_stable_layer_norm", False)), norm_eps=float(config.get("layer_norm_eps", 1e-5)),
        vocab=int(config.get("vocab_size", 32)), pad=int(config.get("pad_token_id", 0) or 0))


class ConvLayer(nn.Module):
    """Conv1d → (GroupNorm | LayerNorm over channels | nothing) → GELU."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, bias: bool, norm: str):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel, stride=stride, bias=bias)
        self.kind = norm
        if norm == "group":
            self.norm: nn.Module = nn.GroupNorm(c_out, c_out, affine=True)
        elif norm == "layer":
            self.norm = nn.LayerNorm(c_out)
        else:
            self.norm = nn.Identity()
        self.act = nn.GELU()

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        if self.kind == "layer":
            x = self.norm(x.transpose(1, 2)).transpose(1, 2)
        else:
            x = self.norm(x)
        return self.act(x)


class Wav2Vec2FrontEnd(nn.Module):
    """Waveform [B, S] → tokens [B, T, d] (feature encoder, projection, conv positions); no padding mask."""

    def __init__(self, shape: Wav2Vec2Shape):
        super().__init__()
        self.shape = shape
        dims = (1, *shape.conv_dim)
        norms = ["group" if i == 0 else "none" for i in range(len(shape.conv_dim))] if shape.feat_norm == "group" \
            else ["layer"] * len(shape.conv_dim)
        self.convs = nn.ModuleList(ConvLayer(dims[i], dims[i + 1], k, s, shape.conv_bias, norms[i])
                                   for i, (k, s) in enumerate(zip(shape.conv_kernel, shape.conv_stride)))
        self.proj_norm = nn.LayerNorm(shape.conv_dim[-1], eps=shape.norm_eps)
        self.proj = nn.Linear(shape.conv_dim[-1], shape.hidden)
        self.pos_conv = nn.Conv1d(shape.hidden, shape.hidden, shape.pos_kernel, padding=shape.pos_kernel // 2,
                                  groups=shape.pos_groups)
        self.pos_act = nn.GELU()
        self.norm = nn.Identity() if shape.stable else nn.LayerNorm(shape.hidden, eps=shape.norm_eps)
        self.last_samples = 0

    def forward(self, wave: Tensor) -> tuple[Tensor, None]:
        self.last_samples = wave.shape[-1]
        if self.shape.normalize:
            mean = wave.mean(dim=-1, keepdim=True)
            var = wave.var(dim=-1, keepdim=True, unbiased=False)
            wave = (wave - mean) / torch.sqrt(var + 1e-7)
        x = wave[:, None]
        for layer in self.convs:
            x = layer(x)
        x = self.proj(self.proj_norm(x.transpose(1, 2)))  # [B, T, d]
        pos = self.pos_conv(x.transpose(1, 2))
        if self.shape.pos_kernel % 2 == 0:
            pos = pos[:, :, :-1]
        x = x + self.pos_act(pos).transpose(1, 2)
        return self.norm(x), None

    def macs(self, tokens: int) -> int:
        """MACs per sample of the last forward's input length (``tokens`` must be its frame count)."""
        if not self.last_samples:
            raise RuntimeError("Wav2Vec2FrontEnd.macs: run a forward first (the cost depends on the clip length)")
        return front_end_macs(self.shape, self.last_samples, tokens)


def front_end_macs(shape: Wav2Vec2Shape, samples: int, tokens: int | None = None) -> int:
    """Analytic MACs of the front end on ``samples`` input samples (see the module docstring)."""
    total, length, c_in = 0, samples, 1
    for c_out, k, s in zip(shape.conv_dim, shape.conv_kernel, shape.conv_stride):
        length = (length - k) // s + 1
        total += length * c_in * k * c_out
        c_in = c_out
    if tokens is not None and tokens != length:
        raise ValueError(f"front end: {tokens} tokens, but {samples} samples give {length} frames")
    d = shape.hidden
    pos_out = length + 1 if shape.pos_kernel % 2 == 0 else length
    return total + length * c_in * d + pos_out * (d // shape.pos_groups) * shape.pos_kernel * d


# --- HuggingFace state dict ------------------------------------------------------------------------------
_IGNORED = ("masked_spec_embed", "quantizer.", "project_q.", "project_hid.")  # training/pretraining only
_LAYER = {"attention.q_proj": "attn.q", "attention.k_proj": "attn.k", "attention.v_proj": "attn.v",
          "attention.out_proj": "attn.o", "layer_norm": "norm1", "final_layer_norm": "norm2",
          "feed_forward.intermediate_dense": "mlp.fc1", "feed_forward.output_dense": "mlp.fc2"}


def _pos_conv_weight(sd: dict[str, Tensor], used: set[str]) -> Tensor:
    base = "encoder.pos_conv_embed.conv."
    pairs = ((base + "parametrizations.weight.original0", base + "parametrizations.weight.original1"),
             (base + "weight_g", base + "weight_v"))
    for g_key, v_key in pairs:
        if g_key in sd and v_key in sd:
            used.update((g_key, v_key))
            return torch._weight_norm(sd[v_key], sd[g_key], 2)  # g·v/‖v‖ over dims 0, 1 (dim=2 kept)
    if base + "weight" in sd:
        used.add(base + "weight")
        return sd[base + "weight"]
    raise KeyError(base + "weight (or its weight-norm parametrisation)")


def skeleton_state_dict(hf_sd: dict[str, Tensor], shape: Wav2Vec2Shape, head: str = "head.proj.") -> dict[str, Tensor]:
    """HF ``Wav2Vec2ForCTC`` (or ``Wav2Vec2ForPreTraining``) weights → skeleton names.  ``lm_head`` goes to
    ``<head>weight/bias`` when present.  KeyError for a missing key, ValueError for unknown ones."""
    sd = hf.strip_prefix(hf_sd, ("wav2vec2.",))
    out: dict[str, Tensor] = {}
    used: set[str] = set()

    def take(theirs: str, ours: str) -> None:
        out[ours] = sd[theirs]
        used.add(theirs)

    for i in range(len(shape.conv_dim)):
        take(f"feature_extractor.conv_layers.{i}.conv.weight", f"embed.convs.{i}.conv.weight")
        if shape.conv_bias:
            take(f"feature_extractor.conv_layers.{i}.conv.bias", f"embed.convs.{i}.conv.bias")
        if shape.feat_norm == "layer" or i == 0:
            for kind in ("weight", "bias"):
                take(f"feature_extractor.conv_layers.{i}.layer_norm.{kind}", f"embed.convs.{i}.norm.{kind}")
    for kind in ("weight", "bias"):
        take(f"feature_projection.layer_norm.{kind}", f"embed.proj_norm.{kind}")
        take(f"feature_projection.projection.{kind}", f"embed.proj.{kind}")
        take(f"encoder.layer_norm.{kind}", f"norm.{kind}" if shape.stable else f"embed.norm.{kind}")
    out["embed.pos_conv.weight"] = _pos_conv_weight(sd, used)
    take("encoder.pos_conv_embed.conv.bias", "embed.pos_conv.bias")
    for i in range(shape.layers):
        for theirs, ours in _LAYER.items():
            for kind in ("weight", "bias"):
                take(f"encoder.layers.{i}.{theirs}.{kind}", f"blocks.{i}.{ours}.{kind}")
    if "lm_head.weight" in sd:
        take("lm_head.weight", head + "weight")
        take("lm_head.bias", head + "bias")
    unknown = sorted(k for k in set(sd) - used if not k.startswith(_IGNORED))
    if unknown:
        raise ValueError(f"keys without a counterpart in the skeleton: {', '.join(unknown[:5])}")
    return out


@dataclass
class Wav2Vec2Checkpoint:
    """What a HF wav2vec 2.0 directory holds: its shape, its weights in skeleton names, its vocabulary."""

    shape: Wav2Vec2Shape
    state_dict: dict[str, Tensor]
    has_head: bool
    vocab: dict[str, int] = field(default_factory=dict)  # token → id (vocab.json), empty if none
    word_delimiter: str = "|"
    directory: str = ""


def read_checkpoint(directory: str | Path, key: str, head: str = "head.proj.") -> Wav2Vec2Checkpoint:
    """Read config.json, the weights, vocab.json/tokenizer_config.json and preprocessor_config.json of a
    HuggingFace ``Wav2Vec2ForCTC`` directory (``key`` names the config key in error messages)."""
    root = Path(directory)
    weights = hf.load_weights(root, key)
    config = hf.read_json(root / "config.json", "a Wav2Vec2Config (config.json)", key)
    shape = shape_from_config(config, f"{key}={directory}")
    pre = root / "preprocessor_config.json"
    if pre.exists():
        prep = hf.read_json(pre, "", key)
        if int(prep.get("sampling_rate", 16000)) != 16000:
            raise UserError(f"{key}={directory}: the feature extractor expects {prep['sampling_rate']} Hz; "
                            "this task feeds 16 kHz")
        shape = replace(shape, normalize=bool(prep.get("do_normalize", True)))
    try:
        sd = skeleton_state_dict(weights, shape, head)
    except (KeyError, ValueError) as err:
        raise UserError(f"{key}={directory}: the weights do not fit its config.json ({err})") from None
    vocab: dict[str, int] = {}
    delimiter = "|"
    if (root / "vocab.json").exists():
        vocab = hf.read_json(root / "vocab.json", "", key)
        if vocab and isinstance(next(iter(vocab.values())), dict):
            raise UserError(f"{key}={directory}: vocab.json has one vocabulary per language; save the tokenizer "
                            "of one language")
        if (root / "tokenizer_config.json").exists():
            delimiter = hf.read_json(root / "tokenizer_config.json", "", key).get("word_delimiter_token", "|") or "|"
    has_head = head + "weight" in sd
    if has_head and vocab and len(vocab) > sd[head + "weight"].shape[0]:
        raise UserError(f"{key}={directory}: vocab.json has {len(vocab)} tokens but the CTC head "
                        f"{sd[head + 'weight'].shape[0]} outputs")
    return Wav2Vec2Checkpoint(shape, sd, has_head, vocab, delimiter, str(directory))

