"""Exact-count tests of the dispatch-level MAC counter."""

import pytest
import torch
from torch import nn

from bench.cost import count, count_macs, op_name, register_op
from bench.models.transformer import Block, Encoder, EncoderConfig


def test_linear_exact():
    layer = nn.Linear(12, 7)
    assert count(layer, torch.randn(5, 12)).macs == 5 * 12 * 7
    assert count(layer, torch.randn(2, 3, 12)).macs == 2 * 3 * 12 * 7


def test_matmul_and_bmm_exact():
    a, b = torch.randn(4, 6, 9), torch.randn(4, 9, 5)
    assert count(torch.bmm, a, b).macs == 4 * 6 * 9 * 5
    assert count(torch.matmul, torch.randn(6, 9), torch.randn(9, 5)).macs == 6 * 9 * 5
    assert count(torch.matmul, torch.randn(2, 3, 6, 9), torch.randn(2, 3, 9, 5)).macs == 2 * 3 * 6 * 9 * 5


def test_conv_exact():
    conv = nn.Conv2d(3, 8, kernel_size=4, stride=4)
    # 16x16 input, kernel=stride=4 -> 4x4 outputs; each output: 3*4*4 MACs per output channel
    assert count(conv, torch.randn(2, 3, 16, 16)).macs == 2 * (4 * 4) * 8 * (3 * 4 * 4)


def test_fused_cpu_attention_is_counted():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8)
    report = count(nn.functional.scaled_dot_product_attention, q, k, v)
    assert report.macs == 2 * 3 * 5 * 7 * 8 * 2
    assert report.uncounted == []


def test_skeleton_block_exact():
    cfg = EncoderConfig(d_model=32, n_heads=4, d_mlp=80)
    block = Block(cfg)
    b, t, d = 3, 11, 32
    expected_per_sample = 4 * t * d * d + 2 * t * t * d + 2 * t * d * 80
    assert block.macs(t) == expected_per_sample
    assert count(block, torch.randn(b, t, d)).macs == b * expected_per_sample


def test_encoder_analytic_equals_counter():
    class Embed(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(5, 32)

        def forward(self, x):
            return self.proj(x), None

    model = Encoder(EncoderConfig(d_model=32, n_layers=3, n_heads=4, d_mlp=64), Embed(), nn.Linear(32, 3))
    x = torch.randn(4, 9, 5)
    assert count(model, x).macs == 4 * model.macs(9)


def test_uncounted_ops_are_listed():
    class Opaque(nn.Module):
        def forward(self, x):
            # An op with multiply-accumulates but no formula in the counter: must be reported.
            return torch.linalg.solve(x @ x.transpose(-1, -2) + torch.eye(x.shape[-1]), x)

    report = count(Opaque(), torch.randn(4, 4))
    assert any("linalg" in op for op in report.uncounted)


@torch.library.custom_op("bench_test::rows_mm", mutates_args=())
def _rows_mm(x: torch.Tensor, w: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """x @ w on the first ``rows`` rows only (zeros elsewhere): work that depends on a tensor's value."""
    out = torch.zeros(x.shape[0], w.shape[1], dtype=x.dtype)
    n = int(rows)
    out[:n] = x[:n] @ w
    return out


def test_a_registered_operator_is_counted_through_its_formula():
    """register_op: a custom operator (opaque to torch's counter: unlisted and uncounted before registering)
    is counted by its formula, which reads the values of the call's arguments; the name forms agree."""
    x, w = torch.randn(6, 5), torch.randn(5, 3)
    before = count(_rows_mm, x, w, torch.tensor(4))
    assert before.macs == 0 and "bench_test.rows_mm" in before.uncounted
    register_op("bench_test::rows_mm", lambda x, w, rows: int(rows) * x.shape[1] * w.shape[1])
    report = count(_rows_mm, x, w, torch.tensor(4))
    assert report.macs == 4 * 5 * 3 and report.by_op == {"bench_test.rows_mm": 60} and report.uncounted == []
    assert op_name(torch.ops.bench_test.rows_mm) == op_name(torch.ops.bench_test.rows_mm.default) \
        == op_name("bench_test::rows_mm") == "bench_test.rows_mm"


def _torch_counts(fn) -> dict[str, int]:
    """MACs per op of ``fn()`` by torch's own FlopCounterMode (FLOPs halved)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as flops:
        fn()
    return {str(op): int(v) // 2 for op, v in flops.get_flop_counts().get("Global", {}).items()}


def _models():
    from bench.models.seq2seq import EncoderDecoder, Seq2SeqConfig
    from tasks.imagenet.vit import build_vit, vit_config

    torch.manual_seed(0)
    vit = build_vit(vit_config("small"))
    seq2seq = EncoderDecoder(Seq2SeqConfig(vocab=50, d_model=32, n_heads=4, d_mlp=64, max_positions=16))
    conv = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
    src = torch.randint(4, 50, (3, 7))
    return {"vit": (vit, lambda m: m(torch.randn(4, 1, 28, 28)).sum()),
            "seq2seq-forced": (seq2seq, lambda m: m(torch.stack([src, src], 1)).sum()),
            "seq2seq-beam": (seq2seq, lambda m: m.generate(src, beam=2).float().sum()),
            "conv": (conv, lambda m: m(torch.randn(2, 3, 8, 8)).sum())}


@pytest.mark.parametrize("mode", ["inference", "no_grad", "train"])
@pytest.mark.parametrize("name", ["vit", "seq2seq-forced", "seq2seq-beam", "conv"])
def test_counts_equal_torchs_flop_counter(name, mode):
    """The counter's one dispatch mode counts every op exactly as torch's FlopCounterMode does: the same
    ops, the same MACs, in inference mode (composite ops decompose), without grad, and for a training
    step's forward and backward."""
    model, run = _models()[name]
    if mode == "train" and name == "seq2seq-beam":
        pytest.skip("beam search is not differentiable")

    def step():
        if mode == "train":
            run(model.train()).backward()
        else:
            with torch.inference_mode() if mode == "inference" else torch.no_grad():
                run(model.eval())

    with count_macs() as ours:
        step()
    theirs = _torch_counts(step)
    assert ours.report.by_op == theirs and ours.report.macs > 0
