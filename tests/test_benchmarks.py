"""Microbenchmarks (pytest-benchmark): run them with ``pytest --benchmark-only``.

The normal test run skips them (``--benchmark-skip`` in pyproject's addopts; ``--benchmark-only``
overrides it), so the suite stays fast; timings on a shared machine are reported, not asserted.
Everything runs on one torch thread.

* ``counter-overhead``: one evaluation forward (batch 128) of the offline ViT with and without the dispatch-level
  MAC counter attached.  Target: counted / plain <= 1.3 (printed and stored as ``extra_info``).
* ``acm-kernel``: one ACM MLP layer (the kernel benchmark's PyTorch paths) against the dense MLP at two
  executed fractions, at a small shape (8 images x 17 tokens, d 64, N = 4 learners of 64).
* ``exit-head``: one early-exit head of ViT-B/16 size (ZTW's cascading head, 768 -> 8192 -> 8192 -> 1000, the
  width the method's ``head_fraction`` default is derived from) at batch 1 and 32, against one pass that reads
  as many bytes as the head's weights (a sum over a tensor of that size).  At batch 1 a head reads each weight
  once per sample, so its time is bounded below by that read (``extra_info``: the head's weight bytes over its
  median time, in GB/s, beside the read's); at batch 32 the read is shared by 32 samples.
* ``gemm-rows``: the ViT-B/16 projection GEMM (768 x 768, fp32) on 12, 98 and 197 rows (a unit that runs on
  a few tokens, on about half of them, on every token of one image), each call on another of 64 weight matrices
  (151 MB, so every weight is read from memory as in a forward).  A line through the three times (fitted when
  all three run in one session) gives the per-call part that does not shrink with the rows, with the time per
  row (printed, and ``extra_info``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bench.cost import count

OVERHEAD_TARGET = 1.3
_medians: dict[str, float] = {}


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: with two OpenMP threads on a shared machine, barrier waits dominate small ops."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def vit_batch():
    from tasks.imagenet.vit import build_vit, vit_config

    torch.manual_seed(0)
    return build_vit(vit_config("small")).eval(), torch.randn(128, 1, 28, 28)


def _median(benchmark) -> float:
    return float(benchmark.stats.stats.median)


@pytest.mark.benchmark(group="counter-overhead")
def test_bench_eval_plain(benchmark, vit_batch):
    model, x = vit_batch
    with torch.inference_mode():
        out = benchmark(model, x)
    assert out.shape == (128, 10)
    _medians["plain"] = _median(benchmark)


@pytest.mark.benchmark(group="counter-overhead")
def test_bench_eval_counted(benchmark, vit_batch):
    model, x = vit_batch
    with torch.inference_mode():
        report = benchmark(count, model, x)
    assert report.macs > 0 and report.uncounted == []
    if "plain" in _medians:
        ratio = _median(benchmark) / _medians["plain"]
        benchmark.extra_info["overhead_vs_plain"] = round(ratio, 3)
        benchmark.extra_info["target"] = OVERHEAD_TARGET
        print(f"\ncounter overhead: {ratio:.2f}x plain evaluation (target <= {OVERHEAD_TARGET}x)")


def _acm_layer():
    torch.manual_seed(0)
    tokens, d, n_learners, width = 8 * 17, 64, 4, 64
    dense = nn.Sequential(nn.Linear(d, n_learners * width), nn.GELU(), nn.Linear(n_learners * width, d)).eval()
    w1, b1, w2 = dense[0].weight.detach(), dense[0].bias.detach(), dense[2].weight.detach()
    return dense, (w1, b1, w2), torch.randn(tokens, d), n_learners, width


@pytest.mark.benchmark(group="acm-kernel")
def test_bench_dense_mlp(benchmark):
    dense, _, x, _, _ = _acm_layer()
    with torch.inference_mode():
        assert benchmark(dense, x).shape == x.shape


@pytest.mark.benchmark(group="acm-kernel")
@pytest.mark.parametrize("variant", ["acm_sorted", "acm_naive"])
@pytest.mark.parametrize("fraction", [0.25, 1.0])
def test_bench_acm_layer(benchmark, variant, fraction):
    from methods.acm.kernels import acm_torch

    dense, (w1, b1, w2), x, n_learners, width = _acm_layer()
    k = acm_torch.random_k(x.shape[0], n_learners, fraction, torch.Generator().manual_seed(0))
    impl = getattr(acm_torch, variant)
    with torch.inference_mode():
        out = benchmark(impl, x, k, w1, b1, w2, width, "gelu")
        if fraction == 1.0:  # every learner ran: the dense MLP's output (the ACM paths leave out fc2's bias)
            torch.testing.assert_close(out, dense(x) - dense[2].bias, rtol=1e-4, atol=1e-4)
    benchmark.extra_info["executed_fraction"] = float(k.double().mean()) / n_learners


HEAD_WIDTH = 8192  # ZTW's head on ViT-B (early_exit.head_fraction's help: 83M / 17.56G MACs)
_bandwidth: dict[str, float] = {}


def _exit_head():
    from methods.early_exit.model import ExitHead

    torch.manual_seed(0)
    head = ExitHead(768, HEAD_WIDTH, 1000, cascade=True).eval()
    return head, sum(p.numel() * p.element_size() for p in head.parameters())


@pytest.mark.benchmark(group="exit-head")
def test_bench_weight_bytes_read(benchmark):
    _, nbytes = _exit_head()
    weights = torch.randn(nbytes // 4)
    total = benchmark(torch.sum, weights)
    assert torch.isfinite(total)
    _bandwidth["read"] = nbytes / _median(benchmark) / 1e9
    benchmark.extra_info["gb_per_s"] = round(_bandwidth["read"], 2)


@pytest.mark.benchmark(group="exit-head")
@pytest.mark.parametrize("batch", [1, 32])
def test_bench_exit_head(benchmark, batch):
    head, nbytes = _exit_head()
    z, prev = torch.randn(batch, 768), torch.randn(batch, 1000)
    with torch.inference_mode():
        assert benchmark(head, z, prev).shape == (batch, 1000)
    rate = nbytes / _median(benchmark) / 1e9
    benchmark.extra_info["weight_gb_per_s"] = round(rate, 2)
    benchmark.extra_info["ms_per_sample"] = round(_median(benchmark) * 1e3 / batch, 3)
    if "read" in _bandwidth:
        print(f"\nexit head, batch {batch}: weights read at {rate:.1f} GB/s per call "
              f"({rate / _bandwidth['read']:.2f} x a plain read of the same bytes), "
              f"{_median(benchmark) * 1e3 / batch:.2f} ms per sample")


GEMM_ROWS = (12, 98, 197)
_gemm_ms: dict[int, float] = {}


@pytest.fixture(scope="module")
def cold_weights():
    torch.manual_seed(0)
    return [torch.randn(768, 768) for _ in range(64)]


@pytest.mark.benchmark(group="gemm-rows")
@pytest.mark.parametrize("rows", GEMM_ROWS)
def test_bench_gemm_rows(benchmark, cold_weights, rows):
    x = torch.randn(rows, 768)

    def every_weight():
        for w in cold_weights:
            out = torch.mm(x, w.t())
        return out

    with torch.inference_mode():
        assert benchmark(every_weight).shape == (rows, 768)
    _gemm_ms[rows] = _median(benchmark) * 1e3 / len(cold_weights)
    benchmark.extra_info["ms_per_gemm"] = round(_gemm_ms[rows], 4)
    if len(_gemm_ms) == len(GEMM_ROWS):
        import numpy as np

        slope, fixed = np.polyfit(list(_gemm_ms), list(_gemm_ms.values()), 1)
        benchmark.extra_info["fixed_ms_per_gemm"] = round(float(fixed), 4)
        print(f"\n768 x 768 GEMM, cold weights: {', '.join(f'{r} rows {t:.3f} ms' for r, t in _gemm_ms.items())}; "
              f"fixed {fixed:.3f} ms per call + {slope * 1e3:.2f} us per row "
              f"(the fixed part is {fixed / _gemm_ms[197]:.0%} of the 197-row call)")
