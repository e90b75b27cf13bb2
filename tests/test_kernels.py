"""ACM kernels: the PyTorch paths and the Triton kernel (under TRITON_INTERPRET=1 on CPU) against a
per-token fp64 reference; batch invariance, exact zeros for k = 0, executed-MAC counts; the benchmark's
smoke configuration.

Tolerances (outputs of magnitude ~1-5): fp32 atol = rtol = 1e-4 (observed ≤ 1e-6); fp16 atol = rtol = 1e-2
(observed ≤ 2e-3, fp16 rounding of inputs, H and Y); bf16 (interpreter: tiles upcast to fp32, H stored
by truncation) atol = 3% of max|y|, rtol = 3e-2.
"""

import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernel module is imported (read at @triton.jit)

import pytest  # noqa: E402
import torch  # noqa: E402

from methods.acm.kernels.acm_torch import (  # noqa: E402
    ACTIVATIONS, acm_cpu, acm_masked, acm_naive, acm_prefix, acm_reference_fp64, acm_sorted, random_k,
)

D, N, W = 32, 4, 16
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2)}


def layer(d=D, n=N, w=W, dtype=torch.float32, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(n * w, d, generator=g) / d ** 0.5).to(dtype)
    b1 = (0.5 * torch.randn(n * w, generator=g)).to(dtype) if bias else None
    w2 = (torch.randn(d, n * w, generator=g) / (n * w) ** 0.5).to(dtype)
    return w1, b1, w2


def tokens(t, d=D, dtype=torch.float32, seed=1):
    return torch.randn(t, d, generator=torch.Generator().manual_seed(seed)).to(dtype)


def ragged_k():
    """Group sizes 17, 1, 16, 15, 3 for k = 4, 3, 2, 1, 0 (none a multiple of the 16-row tile but one),
    interleaved so the sort has work to do."""
    k = torch.tensor([4] * 17 + [3] * 1 + [2] * 16 + [1] * 15 + [0] * 3)
    return k[torch.randperm(len(k), generator=torch.Generator().manual_seed(2))]


K_CASES = {
    "zeros": lambda: torch.zeros(24, dtype=torch.long),
    "all_n": lambda: torch.full((24,), N, dtype=torch.long),
    "random": lambda: random_k(40, N, 0.5, torch.Generator().manual_seed(3)),
    "ragged": ragged_k,
    # every token active with mixed k (a projection ACM, min_k = 1): the prefix path's no-k=0 branch
    "no_zeros": lambda: 1 + random_k(40, N - 1, 0.5, torch.Generator().manual_seed(4)),
    "single": lambda: torch.tensor([3]),
}


# ---------------------------------------------------------------- PyTorch paths


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", list(K_CASES))
def test_torch_paths_match_fp64(activation, bias, case):
    k = K_CASES[case]()
    x = tokens(len(k))
    w1, b1, w2 = layer(bias=bias)
    ref = acm_reference_fp64(x, k, w1, b1, w2, W, activation)
    for fn in (acm_masked, acm_naive, acm_sorted, acm_prefix, acm_cpu):
        out = fn(x, k, w1, b1, w2, W, activation)
        assert out.dtype == x.dtype and out.shape == x.shape
        torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4, msg=fn.__name__)


def test_sorted_fp16_matches_fp64():
    k = ragged_k()
    x = tokens(len(k), dtype=torch.float16)
    w1, b1, w2 = layer(dtype=torch.float16)
    ref = acm_reference_fp64(x, k, w1, b1, w2, W)
    torch.testing.assert_close(acm_sorted(x, k, w1, b1, w2, W).double(), ref, atol=1e-2, rtol=1e-2)


def test_sorted_is_batch_invariant():
    w1, b1, w2 = layer()
    big_k = random_k(64, N, 0.5, torch.Generator().manual_seed(5))
    big_x = tokens(64, seed=6)
    big = acm_sorted(big_x, big_k, w1, b1, w2, W)
    for t in (0, 7, 33, 63):
        alone = acm_sorted(big_x[t:t + 1], big_k[t:t + 1], w1, b1, w2, W)
        torch.testing.assert_close(alone[0], big[t], atol=1e-6, rtol=1e-5)
    # the same token set in another order and with other companions gives the same rows
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(7))
    other = torch.cat([big_x[perm[:32]], tokens(20, seed=8)])
    other_k = torch.cat([big_k[perm[:32]], random_k(20, N, 0.9, torch.Generator().manual_seed(9))])
    out = acm_sorted(other, other_k, w1, b1, w2, W)
    torch.testing.assert_close(out[:32], big[perm[:32]], atol=1e-6, rtol=1e-5)


def test_cpu_path_picks_prefix_for_small_groups(monkeypatch):
    """acm_cpu: the prefix arrangement when some group of equal k >= 1 is small, the sorted one otherwise."""
    from methods.acm.kernels import acm_torch

    calls = []
    monkeypatch.setattr(acm_torch, "_prefix", lambda *a: calls.append("prefix"))
    monkeypatch.setattr(acm_torch, "_sorted", lambda *a: calls.append("sorted"))
    w1, b1, w2 = layer()
    small = random_k(40, N, 0.5, torch.Generator().manual_seed(1))
    large = torch.arange(N + 1).repeat_interleave(acm_torch.SMALL_GROUP)
    acm_cpu(tokens(len(small)), small, w1, b1, w2, W)
    acm_cpu(tokens(len(large)), large, w1, b1, w2, W)
    assert calls == ["prefix", "sorted"]


def test_k0_tokens_give_exact_zeros():
    k = ragged_k()
    x = tokens(len(k))
    w1, b1, w2 = layer()
    for fn in (acm_masked, acm_naive, acm_sorted, acm_prefix):
        out = fn(x, k, w1, b1, w2, W)
        assert torch.equal(out[k == 0], torch.zeros_like(out[k == 0])), fn.__name__
        assert (out[k > 0].abs().sum(dim=1) > 0).all()


def test_executed_macs():
    from bench.cost import count_macs

    k = ragged_k()
    x = tokens(len(k))
    w1, b1, w2 = layer()
    expected_sparse = int(k.sum()) * W * D * 2  # GEMM1 + GEMM2, only the executed learners
    expected_dense = len(k) * N * W * D * 2
    for fn, expected in ((acm_sorted, expected_sparse), (acm_naive, expected_sparse),
                         (acm_prefix, expected_sparse), (acm_masked, expected_dense)):
        with torch.no_grad(), count_macs() as counter:
            fn(x, k, w1, b1, w2, W)
        assert counter.report.macs == expected, fn.__name__
        assert counter.report.uncounted == [], fn.__name__


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.25, 0.3, 0.5, 0.9, 1.0])
def test_random_k_mean(fraction):
    T = 4000
    iid = random_k(T, N, fraction, torch.Generator().manual_seed(0), mode="iid")
    equal = random_k(T, N, fraction, mode="equal")
    for k in (iid, equal):
        assert k.dtype == torch.long and k.shape == (T,)
        assert int(k.min()) >= 0 and int(k.max()) <= N
    assert abs(iid.double().mean().item() / N - fraction) < 0.02
    assert int(equal.sum()) == round(fraction * N * T)
    assert int(equal.max()) - int(equal.min()) <= 1
    assert torch.equal(equal, random_k(T, N, fraction, mode="equal"))


# ---------------------------------------------------------------- Triton kernel (interpreter on CPU)


def _triton_kernel():
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        pytest.skip("Triton needs a GPU or TRITON_INTERPRET=1")
    from methods.acm.kernels.acm_ops import acm_triton

    return acm_triton


def _device():
    return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"


@pytest.mark.parametrize("case", list(K_CASES))
def test_triton_matches_fp64_cases(case):
    acm_triton = _triton_kernel()
    k = K_CASES[case]()
    x = tokens(len(k))
    w1, b1, w2 = layer()
    ref = acm_reference_fp64(x, k, w1, b1, w2, W)
    dev = _device()
    out = acm_triton(x.to(dev), k.to(dev), w1.to(dev), b1.to(dev), w2.to(dev), W).cpu()
    torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)
    assert torch.equal(out[k == 0], torch.zeros_like(out[k == 0]))


@pytest.mark.parametrize("activation,bias", [("gelu", True), ("relu", True), ("none", False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_triton_dtypes_activations(activation, bias, dtype):
    acm_triton = _triton_kernel()
    k = ragged_k()
    x = tokens(len(k), dtype=dtype)
    w1, b1, w2 = layer(dtype=dtype, bias=bias)
    ref = acm_reference_fp64(x, k, w1, b1, w2, W, activation)  # fp64 of the dtype-rounded inputs
    dev = _device()
    out = acm_triton(x.to(dev), k.to(dev), w1.to(dev), None if b1 is None else b1.to(dev), w2.to(dev), W,
                     activation).cpu()
    assert out.dtype == dtype
    atol, rtol = TOL.get(dtype, (3e-2 * ref.abs().max().item(), 3e-2))
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=rtol)


def test_triton_odd_shapes():
    """d and width not multiples of the 16-wide tiles, non-contiguous x."""
    acm_triton = _triton_kernel()
    d, n, w = 24, 3, 20
    k = torch.tensor([3, 0, 1, 2, 2, 3, 1, 1, 0, 3, 2])
    x = tokens(len(k), d=2 * d)[:, ::2]
    w1, b1, w2 = layer(d=d, n=n, w=w)
    ref = acm_reference_fp64(x, k, w1, b1, w2, w)
    dev = _device()
    out = acm_triton(x.to(dev), k.to(dev), w1.to(dev), b1.to(dev), w2.to(dev), w).cpu()
    torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------- benchmark smoke run


def test_benchmark_quick(tmp_path):
    import pandas as pd

    from methods.acm.kernels import bench as kernel_bench
    from methods.acm.kernels import bench_rows

    rc = kernel_bench.main(["quick=true", f"results_dir={tmp_path / 'results'}",
                            f"reports_dir={tmp_path / 'reports'}"])
    assert rc == 0
    rows = list((tmp_path / "results" / "kernels").glob("*.csv"))
    data = [p for p in rows if not p.name.endswith(".fit.csv")]
    fits = [p for p in rows if p.name.endswith(".fit.csv")]
    assert len(data) == 1 and len(fits) == 1
    frame = pd.read_csv(data[0])
    assert {"dense_eager", "ideal_narrow", "acm_naive", "acm_sorted"} <= set(frame["variant"])
    assert (frame.loc[frame["variant"] == "dense_eager", "rel_to_dense"].dropna() == 1.0).all()
    fit = pd.read_csv(fits[0])
    assert {"intercept", "slope", "r2", "max_residual", "t025_rel", "t1_rel"} <= set(fit.columns)
    png = tmp_path / "reports" / "kernel_latency.png"
    assert png.exists() and png.stat().st_size > 0
    assert set(fit["statistic"]) == {"median", "min"}
    # redrawable and refittable from the rows alone
    again = tmp_path / "again.png"
    bench_rows.plot_kernel_rows(bench_rows.load_kernel_rows(tmp_path / "results"), again)
    assert again.exists()
    _, refit = bench_rows.refit(data[0])
    pd.testing.assert_frame_equal(refit.reset_index(drop=True), pd.read_csv(fits[0]), check_dtype=False)
    # `bench report` draws the kernel figure and fit table even when no task rows exist yet
    from bench.report import build as report

    written = report.main(str(tmp_path / "results"), str(tmp_path / "board"))
    assert sorted(Path(p).name for p in written) == ["kernel_fit.md", "kernel_latency.png"]
    table = (tmp_path / "board" / "kernel_fit.md").read_text()
    # markdown tables escape underscores (rendered as acm_sorted)
    assert "acm\\_sorted" in table and "| batch | k\\_mode | variant |" in table
    assert "](kernel_latency.png)" in table  # the page shows the figure it comes with


def test_fit_line_exact():
    from methods.acm.kernels.bench_rows import fit_line

    x = [0.0, 0.1, 0.5, 1.0]
    fit = fit_line(x, [0.05 + 0.9 * v for v in x])
    assert fit["intercept"] == pytest.approx(0.05) and fit["slope"] == pytest.approx(0.9)
    assert fit["r2"] == pytest.approx(1.0) and fit["max_residual"] == pytest.approx(0.0, abs=1e-12)
    assert fit["t025_rel"] == pytest.approx(0.275) and fit["t1_rel"] == pytest.approx(0.95)


def test_kernel_page_draws_each_device_beside_the_cpu(tmp_path):
    """A GPU run's figure and table join the CPU's (the CPU keeps kernel_latency.png) instead of replacing them."""
    import pandas as pd

    from helpers import ROOT
    from methods.acm.kernels.page import kernel_page

    cpu_rows = sorted(p for p in (ROOT / "results" / "kernels").glob("*.csv") if not p.name.endswith(".fit.csv"))[-1]
    frame = pd.read_csv(cpu_rows)
    (tmp_path / "results" / "kernels").mkdir(parents=True)
    (tmp_path / "reports").mkdir()
    frame.to_csv(tmp_path / "results" / "kernels" / "cpu.csv", index=False)
    gpu = frame.assign(device="cuda", device_name="cuda: a GPU", run_id="20260101T000000Z-cuda-bf16",
                       timestamp="2026-01-01T00:00:00Z")  # older than the CPU run: still drawn
    gpu.to_csv(tmp_path / "results" / "kernels" / "gpu.csv", index=False)
    written = kernel_page(tmp_path / "results", tmp_path / "reports")
    assert [Path(p).name for p in written] == ["kernel_latency.png", "kernel_latency_cuda.png", "kernel_fit.md"]
    page = (tmp_path / "reports" / "kernel_fit.md").read_text()
    assert page.index("## cpu") < page.index("](kernel_latency.png)") < page.index("## cuda") \
        < page.index("](kernel_latency_cuda.png)") and "on cuda: a GPU" in page
    assert page.count("| batch | k\\_mode | variant |") == 2


def test_rows_go_back_to_token_order_exactly_as_a_scatter_puts_them():
    from methods.acm.kernels import acm_torch

    g = torch.Generator().manual_seed(0)
    ys, order = torch.randn(37, 5, generator=g), torch.randperm(37, generator=g)
    assert torch.equal(acm_torch._unsort(ys, order), torch.empty_like(ys).index_copy_(0, order, ys))
