"""The ACM forward as PyTorch operators (``torch.ops.bench.acm_triton`` / ``acm_sorted``) and the Triton
path's device-side pieces, on CPU under TRITON_INTERPRET=1: the counting-sort grouping against a stable
argsort, X gathered once vs in the loads, weights laid out once, the MAC counter against the decision log
(layer and whole model, both paths), ``torch.library.opcheck`` and ``torch.compile(fullgraph=True)``."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (read at @triton.jit)

import pytest  # noqa: E402
import torch  # noqa: E402

from bench import cost  # noqa: E402
from methods.acm.kernels.acm_torch import acm_reference_fp64, acm_sorted, random_k  # noqa: E402

pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
    pytest.skip("Triton needs a GPU or TRITON_INTERPRET=1", allow_module_level=True)

from methods.acm.kernels import acm_ops  # noqa: E402
from methods.acm.kernels.acm_ops import acm_triton, acm_triton_prepared  # noqa: E402
from methods.acm.kernels.acm_triton import group_tokens, group_tokens_reference, prepare_weights  # noqa: E402

DEV = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
D, N, W = 32, 4, 16


def layer(seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(N * W, D, generator=g) / D ** 0.5).to(dtype)
    b1 = (0.5 * torch.randn(N * W, generator=g)).to(dtype)
    w2 = (torch.randn(D, N * W, generator=g) / (N * W) ** 0.5).to(dtype)
    return w1.to(DEV), b1.to(DEV), w2.to(DEV)


def tokens(t, seed=1, dtype=torch.float32):
    return torch.randn(t, D, generator=torch.Generator().manual_seed(seed)).to(dtype).to(DEV)


# ---------------------------------------------------------------- grouping


@pytest.mark.parametrize("case", ["random", "ragged_long", "all_zero", "all_n", "one", "out_of_range", "int32"])
def test_counting_sort_equals_a_stable_argsort(case):
    g = torch.Generator().manual_seed(4)
    k = {
        "random": lambda: random_k(77, N, 0.4, g),
        "ragged_long": lambda: random_k(2500, N, 0.55, g),  # > one 1024-token block: ranks carry over
        "all_zero": lambda: torch.zeros(33, dtype=torch.long),
        "all_n": lambda: torch.full((33,), N, dtype=torch.long),
        "one": lambda: torch.tensor([2]),
        "out_of_range": lambda: torch.tensor([7, -1, 2, 4, 0, 9, 1, 3]),  # clamped to [0, N]
        "int32": lambda: random_k(50, N, 0.5, g).to(torch.int32),
    }[case]().to(DEV)
    x = torch.randn(len(k), 5, generator=torch.Generator().manual_seed(6)).to(DEV)
    order, counts, xs = group_tokens(k, N, x)
    ref_order, ref_counts = group_tokens_reference(k, N)
    assert order.dtype == torch.int32 and counts.dtype == torch.int32
    assert torch.equal(counts.long().cpu(), ref_counts.cpu())
    assert torch.equal(order.long().cpu(), ref_order.cpu())
    assert torch.equal(xs, x[ref_order])  # X gathered once into sorted order, in the same pass
    assert group_tokens(k, N)[2] is None


def test_grouping_of_a_strided_k():
    k = random_k(40, N, 0.5, torch.Generator().manual_seed(5)).to(DEV)
    wide = torch.stack([k, torch.zeros_like(k)], dim=1)[:, 0]  # stride 2
    x = torch.randn(60, 2 * 70, generator=torch.Generator().manual_seed(7))[:40, ::2].to(DEV)  # strided rows
    order, counts, xs = group_tokens(wide, N, x)
    ref_order, ref_counts = group_tokens_reference(k, N)
    assert torch.equal(order.long().cpu(), ref_order.cpu()) and torch.equal(counts.long().cpu(), ref_counts.cpu())
    assert torch.equal(xs, x[ref_order])


# ---------------------------------------------------------------- forward variants


@pytest.mark.parametrize("gather_x", [True, False])
@pytest.mark.parametrize("prepared", [True, False])
def test_gather_modes_and_weight_layouts_match_fp64(gather_x, prepared):
    k = random_k(45, N, 0.5, torch.Generator().manual_seed(6)).to(DEV)
    x = tokens(45)
    w1, b1, w2 = layer()
    ref = acm_reference_fp64(x.cpu(), k.cpu(), w1.cpu(), b1.cpu(), w2.cpu(), W)
    if prepared:
        weights = prepare_weights(w1, b1, w2)
        assert weights.w_up.is_contiguous() and weights.w_up.shape == (D, N * W)
        assert weights.w_down.is_contiguous() and weights.w_down.shape == (N * W, D)
        out = acm_triton_prepared(x, k, weights, W, gather_x=gather_x)
    else:
        out = acm_ops.acm_triton_op(x, k, w1.t(), b1, w2.t(), W, "gelu", gather_x)
    torch.testing.assert_close(out.cpu().double(), ref, atol=1e-4, rtol=1e-4)
    assert torch.equal(out[k == 0], torch.zeros_like(out[k == 0]))


def test_sorted_operator_matches_the_function():
    k = random_k(30, N, 0.6, torch.Generator().manual_seed(7))
    x = tokens(30).cpu()
    w1, b1, w2 = (t.cpu() for t in layer())
    torch.testing.assert_close(torch.ops.bench.acm_sorted(x, k, w1, b1, w2, W, "gelu"),
                               acm_sorted(x, k, w1, b1, w2, W, "gelu"))


# ---------------------------------------------------------------- the counter sees the operators


def _count(fn) -> cost.CostReport:
    with torch.inference_mode(), cost.count_macs() as counter:
        fn()
    return counter.report


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_counter_sees_the_triton_operator(fraction):
    k = random_k(40, N, fraction, torch.Generator().manual_seed(8)).to(DEV)
    x = tokens(40)
    w1, b1, w2 = layer()
    logged = int(k.sum()) * 2 * W * D  # the decision log: k learners of 2·w·d MACs per token
    report = _count(lambda: acm_triton(x, k, w1, b1, w2, W))
    assert report.macs == logged
    assert report.by_op == {"bench.acm_triton": logged}
    assert report.uncounted == []


def test_sorted_operator_formula_equals_what_the_dispatch_counter_sees_inside_it():
    """The operator's formula is checked against the counter on the unwrapped function (its real GEMMs)."""
    k = random_k(40, N, 0.45, torch.Generator().manual_seed(9))
    x = tokens(40).cpu()
    w1, b1, w2 = (t.cpu() for t in layer())
    plain = _count(lambda: acm_sorted(x, k, w1, b1, w2, W))
    op = _count(lambda: torch.ops.bench.acm_sorted(x, k, w1, b1, w2, W, "gelu"))
    assert plain.macs == op.macs == int(k.sum()) * 2 * W * D
    assert op.by_op == {"bench.acm_sorted": op.macs} and op.uncounted == []


@pytest.mark.parametrize("path", ["triton", "sorted"])
def test_model_counter_equals_the_decision_log(path, monkeypatch):
    """A whole ACM model (MLP and q/k/v/o ACMs) on the Triton path or the sorted path: the dispatch-level
    counter equals the per-sample MACs from the logged k, in total and sample by sample."""
    from methods.acm import modules as M
    from tests.test_acm import inputs, tiny_encoder

    kernel = acm_triton if path == "triton" else acm_sorted
    monkeypatch.setattr(M, "real_kernel", lambda device, differentiable=False: kernel)
    model = tiny_encoder(layers=1)  # one block: 5 ACMs (q, k, v, o, MLP); the interpreter is slow
    torch.manual_seed(1)
    for acm in M.acmize(model, M.ACMSettings(gate_hidden=8)).values():
        with torch.no_grad():  # spread the gate logits so that every k occurs
            acm.gate.out.bias.normal_(std=1.0)
            acm.gate.out.weight.mul_(4.0)
    model = model.eval().to(DEV)
    x = inputs(2).to(DEV)
    with torch.inference_mode():
        report = cost.count(model, x)
        per_sample = M.sample_macs(model)
        ks = torch.cat([layer.last_k.flatten() for layer in M.acm_layers(model)])
    assert report.uncounted == []
    assert len(set(ks.tolist())) > 2  # several k occur
    assert report.macs == pytest.approx(float(per_sample.sum()), rel=1e-12)
    assert ("bench.acm_triton" in report.by_op) == (path == "triton")
    with torch.inference_mode():
        alone = cost.count(model, x[1:2]).macs
    assert alone == pytest.approx(float(per_sample[1]), rel=1e-12)


# ---------------------------------------------------------------- registrations: opcheck and compile


def test_opcheck_both_operators():
    k = random_k(12, N, 0.5, torch.Generator().manual_seed(10)).to(DEV)
    x = tokens(12)
    w1, b1, w2 = layer()
    for op, args in ((torch.ops.bench.acm_triton.default, (x, k, w1.t(), b1, w2.t(), W, "gelu", True)),
                     (torch.ops.bench.acm_sorted.default, (x.cpu(), k.cpu(), w1.cpu(), b1.cpu(), w2.cpu(), W,
                                                           "gelu"))):
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, result


def test_operators_compile_without_graph_breaks():
    """fullgraph=True fails on any graph break (the sorted path's host sync, an untraceable launch)."""
    k = random_k(20, N, 0.5, torch.Generator().manual_seed(11)).to(DEV)
    x = tokens(20)
    w1, b1, w2 = layer()

    def forward(x, k):
        h = x * 2.0
        return (torch.ops.bench.acm_triton(h, k, w1.t(), b1, w2.t(), W, "gelu", True)
                + torch.ops.bench.acm_sorted(h.cpu(), k.cpu(), w1.cpu(), b1.cpu(), w2.cpu(), W, "gelu").to(DEV))

    torch._dynamo.reset()
    compiled = torch.compile(forward, backend="aot_eager", fullgraph=True)
    out = compiled(x, k)
    ref = 2 * acm_reference_fp64(2 * x.cpu(), k.cpu(), w1.cpu(), b1.cpu(), w2.cpu(), W)
    torch.testing.assert_close(out.cpu().double(), ref, atol=1e-4, rtol=1e-4)


def test_autotuning_runs_once_per_shape_on_the_full_width_workload(monkeypatch):
    """On a GPU the first call of a shape tunes on every token at k = N (not on the call's own k, which
    at f = 0 would make every tile exit and the smallest tiles win); later calls do not re-tune."""
    from methods.acm.kernels import acm_triton as kt

    calls = []

    def record(x, order, counts, *args):  # x, order, counts, w_up, b1, w_down, width, activation, xs, y
        calls.append((order.clone(), counts.clone()))

    monkeypatch.setattr(kt, "INTERPRET", False)
    monkeypatch.setattr(kt, "_launch", record)
    monkeypatch.setattr(kt, "_TUNED", set())
    x = tokens(21)
    w1, b1, w2 = layer()
    for _ in range(2):
        kt._ensure_tuned(x, w1.t(), b1, w2.t(), W, "gelu", True)
    assert len(calls) == 1
    order, counts = calls[0]
    assert counts.tolist() == [0] * N + [21] and torch.equal(order.long().cpu(), torch.arange(21))
    kt._ensure_tuned(tokens(22), w1.t(), b1, w2.t(), W, "gelu", True)  # a new T is a new shape
    assert len(calls) == 2


def test_benchmark_triton_callable_runs_on_weights_laid_out_once():
    """``bench kernels`` times acm_triton on weights prepared once; the nn.Linear weights it is passed are
    ignored (so no per-call layout work), in both gather modes."""
    from methods.acm.kernels import bench as kernel_bench

    k = random_k(30, N, 0.5, torch.Generator().manual_seed(12)).to(DEV)
    x = tokens(30)
    w1, b1, w2 = layer()
    ref = acm_reference_fp64(x.cpu(), k.cpu(), w1.cpu(), b1.cpu(), w2.cpu(), W)
    for gather in ("once", "in_load"):
        fn = kernel_bench.acm_fn("acm_triton", prepare_weights(w1, b1, w2), gather)
        out = fn(x, k, None, None, None, W, "gelu")
        torch.testing.assert_close(out.cpu().double(), ref, atol=1e-4, rtol=1e-4)


def test_the_operator_formulas_count_in_a_counter_built_before_they_were_registered():
    """The ACM operators register their formulas with the counter when their module is imported (bench.cost
    knows no method); a counter looks formulas up at every call, so one built before the import counts them."""
    import subprocess
    import sys

    code = ("import torch\nfrom bench import cost\nimport sys\n"
            "counter = cost.count_macs()\n"
            "assert not any(m.startswith('methods') for m in sys.modules)\n"
            "from methods.acm.kernels import acm_ops\n"
            "x, k = torch.randn(3, 8), torch.tensor([0, 1, 2])\n"
            "w1, b1, w2 = torch.randn(2 * 4, 8), torch.randn(2 * 4), torch.randn(8, 2 * 4)\n"
            "with torch.inference_mode(), counter:\n"
            "    torch.ops.bench.acm_sorted(x, k, w1, b1, w2, 4, 'gelu')\n"
            "assert counter.report.by_op == {'bench.acm_sorted': 3 * 2 * 4 * 8}, counter.report\n")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
