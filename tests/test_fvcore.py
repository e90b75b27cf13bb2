"""Independent cross-check of the cost counter (bench/cost.py) against fvcore's FlopCountAnalysis.

fvcore traces the model with ``torch.jit.trace`` and counts one multiply-add as one "flop", i.e. MACs, the
counter's unit.  The two tools agree exactly on every multiply-accumulate op; they differ by design on
the ops explained in ``FVCORE_ONLY`` (fvcore counts them, the vision convention the counter follows does
not) and ``NO_MACS`` (neither counts them).  Any other difference fails the test.

The skeleton's attention core is ``F.scaled_dot_product_attention``, which fvcore's tracer cannot
count; fvcore therefore traces the same model with SDPA replaced by its explicit-matmul definition
(:func:`explicit_sdpa`), and the counter's fused-attention MACs must equal fvcore's matmul MACs.
"""

from __future__ import annotations

import math
import warnings
from unittest import mock

import pytest
import torch
from torch import nn

fvcore_nn = pytest.importorskip("fvcore.nn")

from bench.cost import count  # noqa: E402
from bench.models.rnn import StaticRNN  # noqa: E402
from bench.models.transformer import Block, Encoder, EncoderConfig  # noqa: E402

# fvcore's operator names -> the aten ops the counter attributes the same MACs to.
MAC_OPS = {
    "conv": {"aten.convolution"},
    "linear": {"aten.addmm", "aten.mm"},  # nn.Linear: x·Wᵀ + b (a batched input is flattened to 2-D)
    "matmul": {"aten.bmm", "aten.mm"},  # attention's QKᵀ and AV, written as explicit matmuls
}
SDPA_OP = "aten._scaled_dot_product_flash_attention_for_cpu"  # the counter's fused attention (QKᵀ and AV)
# Ops fvcore counts and the counter deliberately does not, with why and how many fvcore counts.
FVCORE_ONLY = {
    "layer_norm": "fvcore counts 5 per element (mean, variance, normalize, scale, shift) of every "
                  "LayerNorm input; the counter follows the vision convention (torchvision's GFLOPS, the "
                  "ViT/ACM papers), which counts only matmul/conv multiply-accumulates, so norms count 0",
}
# Ops fvcore reports as unsupported (so counts 0) and the counter also counts 0: no multiply-accumulates.
NO_MACS = {
    **dict.fromkeys(["aten::add", "aten::div", "aten::mul", "aten::sub", "aten::softmax", "aten::gelu",
                     "aten::tanh", "aten::relu", "aten::sigmoid", "aten::dropout"],
                    "pointwise (bias adds, attention scaling, residuals, activations, softmax)"),
    "aten::embedding": "a table lookup (the parity sequence task's token embedding)",
}


def explicit_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
    """SDPA's definition as explicit matmuls (what fvcore can trace); boolean masks only, no dropout."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if is_causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def fvcore_count(model: nn.Module, x: torch.Tensor):
    with warnings.catch_warnings(), mock.patch("torch.nn.functional.scaled_dot_product_attention", explicit_sdpa):
        warnings.simplefilter("ignore")  # torch.jit.trace deprecation and tracer warnings
        analysis = fvcore_nn.FlopCountAnalysis(model, x)
        analysis.unsupported_ops_warnings(False)
        analysis.uncalled_modules_warnings(False)
        return int(analysis.total()), dict(analysis.by_operator()), dict(analysis.unsupported_ops())


def layer_norm_elements(model: nn.Module, x: torch.Tensor) -> int:
    """Total number of elements entering LayerNorms in one forward (fvcore's layer_norm count / 5)."""
    seen = []
    hooks = [m.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].numel()))
             for m in model.modules() if isinstance(m, nn.LayerNorm)]
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    return sum(seen)


def _vit(name: str):
    from tasks.imagenet.vit import build_vit, vit_config

    return build_vit(vit_config(name))


CASES = {
    "skeleton block": (lambda: Block(EncoderConfig(d_model=32, n_heads=4, d_mlp=80)), (3, 11, 32)),
    "skeleton encoder (parity sequence)": (
        lambda: Encoder(EncoderConfig(d_model=32, n_layers=2, n_heads=4, d_mlp=64, pool="cls"),
                        nn.Sequential(), nn.Linear(32, 2)), None),
    "ViT small (Fashion-MNIST default)": (lambda: _vit("small"), (2, 1, 28, 28)),
    "ViT-Ti/16 at 224 px": (lambda: _vit("ti16"), (1, 3, 224, 224)),
    "parity RNN, 3 static steps": (lambda: StaticRNN(16, 32, steps=3), (5, 16)),
}


def _model_and_input(name: str):
    build, shape = CASES[name]
    torch.manual_seed(0)
    model = build().eval()
    if shape is None:  # the encoder with the parity task's own sequence embedding
        from tasks.parity.task import SequenceEmbed

        model.embed = SequenceEmbed(9, 32)
        return model, torch.randint(0, 3, (3, 9))
    return model, torch.randn(*shape)


@pytest.mark.parametrize("name", list(CASES))
def test_counter_matches_fvcore_op_by_op(name):
    model, x = _model_and_input(name)
    total, by_op, unsupported = fvcore_count(model, x)
    report = count(model, x)
    assert report.uncounted == []

    # 1. every multiply-accumulate op: the same MACs in both tools
    fv_macs = {op: n for op, n in by_op.items() if op in MAC_OPS}
    unexplained = set(by_op) - set(MAC_OPS) - set(FVCORE_ONLY)
    assert not unexplained, f"fvcore counts ops this test does not explain: {unexplained}"
    assert set(report.by_op) <= set().union(*MAC_OPS.values(), {SDPA_OP}), report.by_op
    assert sum(fv_macs.values()) == report.macs, (fv_macs, report.by_op)
    if "conv" in fv_macs:
        assert fv_macs["conv"] == report.by_op.get("aten.convolution", 0)
    assert fv_macs.get("matmul", 0) == report.by_op.get("aten.bmm", 0) + report.by_op.get(SDPA_OP, 0) + (
        report.by_op.get("aten.mm", 0) if "linear" not in fv_macs else 0)

    # 2. the explained differences, each exactly as explained
    if "layer_norm" in by_op:
        assert by_op["layer_norm"] == 5 * layer_norm_elements(model, x)
    assert total - report.macs == by_op.get("layer_norm", 0)

    # 3. what fvcore cannot count carries no multiply-accumulates, and the counter counts 0 for it too
    assert set(unsupported) <= set(NO_MACS), set(unsupported) - set(NO_MACS)


def test_counter_gives_published_vit_b16_macs():
    """ViT-B/16 at 224 px: 17.56 GMACs in torchvision's table ("GFLOPS"); counted on the meta device."""
    from tasks.imagenet.vit import build_vit, vit_config

    cfg = vit_config("b16")
    t, d, mlp = cfg.n_patches + 1, cfg.d_model, cfg.mlp
    analytic = (cfg.n_patches * d * 3 * 16 * 16 + cfg.layers * (4 * t * d * d + 2 * t * t * d + 2 * t * d * mlp)
                + d * cfg.classes)
    with torch.device("meta"):
        model = build_vit(cfg).eval()
        x = torch.empty(1, 3, 224, 224)
    assert count(model, x).macs == analytic
    assert analytic / 1e9 == pytest.approx(17.56, abs=0.01)
