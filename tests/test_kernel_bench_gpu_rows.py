"""The kernel benchmark's bookkeeping for GPU runs, checked on CPU: the 64-aligned ideal line, CUDA-graph
variants in the fit table, ratios to the fastest dense variant, the fraction of the measured GEMM peak."""

import math

import pandas as pd
import pytest

from methods.acm.kernels import bench as kb
from methods.acm.kernels import bench_rows


@pytest.mark.parametrize("fraction", [i / 20 for i in range(21)])
def test_ideal_width_is_a_multiple_of_64_near_the_fraction(fraction):
    h = kb.ideal_width(fraction, 3072)
    assert h % 64 == 0 and 0 <= h <= 3072
    assert abs(h / 3072 - fraction) <= 32 / 3072 + 1e-12


def test_ideal_width_examples():
    assert kb.ideal_width(0.9, 3072) == 2752  # not round(0.9 * 3072) = 2765
    assert kb.ideal_width(0.25, 3072) == 768 and kb.ideal_width(0.5, 3072) == 1536
    assert kb.ideal_width(0.0, 3072) == 0 and kb.ideal_width(1.0, 3072) == 3072
    assert kb.ideal_width(1.0, 100) == 100  # full width is kept even when not aligned
    assert kb.ideal_width(0.5, 64, align=16) == 32


def test_quick_run_ideal_rows_use_aligned_widths(tmp_path):
    rc = kb.main(["quick=true", "ideal_align=32", "fractions=0,0.3,0.6,1",
                  "variants=dense_eager,ideal_narrow", "batch=1", "plot=false", f"results_dir={tmp_path}"])
    assert rc == 0
    rows = bench_rows.load_kernel_rows(tmp_path)
    ideal = rows[rows["variant"] == "ideal_narrow"]
    widths = ideal["executed_fraction"] * 64  # quick: N·w = 4 × 16 = 64 hidden units
    # 0.3·64 = 19.2 and 0.6·64 = 38.4 both round to 32: one point (x = the rounded fraction 0.5)
    assert sorted(widths.round().astype(int)) == [0, 32, 64]
    assert (ideal["ideal_align"] == 32).all()


def _row(variant, batch, median, fraction=1.0, k_mode=bench_rows.NO_K_MODE, gflop=1.0):
    return {"run_id": "r", "device": "cuda", "device_name": "gpu", "dtype": "bf16", "batch": batch,
            "main_batch": 128, "tokens": 197, "d": 768, "n_learners": 4, "width": 768, "activation": "gelu",
            "k_mode": k_mode, "variant": variant, "fraction": fraction, "executed_fraction": fraction,
            "median_ms": median, "iqr_ms": 0.0, "min_ms": median, "n_samples": 10, "gflop": gflop,
            "peak_tflops": 500.0, "status": "ok"}


def test_graph_variants_best_dense_ratio_and_peak_fraction():
    rows = [_row("dense_eager", 128, 0.50), _row("dense_compile", 128, 0.45), _row("dense_eager@graph", 128, 0.40),
            _row("dense_compile@graph", 128, 0.42)]
    for f in (0.0, 0.25, 0.5, 1.0):  # exactly linear: a = 0.02 ms, b = 0.38 ms
        rows.append(_row("acm_triton", 128, 0.10 + 0.40 * f, f, "iid", gflop=200 * f))
        rows.append(_row("acm_triton@graph", 128, 0.02 + 0.38 * f, f, "iid", gflop=200 * f))
    rows.append({**_row("acm_sorted@graph", 128, math.nan), "status": "capture failed: x"})
    frame = bench_rows.finish_rows(rows)
    graph = frame[frame["variant"] == "acm_triton@graph"].set_index("fraction")
    assert graph.loc[1.0, "rel_to_best_dense"] == pytest.approx(0.40 / 0.40)
    assert graph.loc[0.5, "rel_to_dense"] == pytest.approx(0.21 / 0.50)
    eager = frame[frame["variant"] == "acm_triton"].set_index("fraction")
    assert eager.loc[1.0, "achieved_tflops"] == pytest.approx(200 / 0.50)
    assert eager.loc[1.0, "pct_of_peak"] == pytest.approx(100 * 400 / 500)
    fits = bench_rows.fit_rows(frame)
    best = fits[(fits["variant"] == "acm_triton@graph") & (fits["baseline"] == bench_rows.BEST_DENSE)].iloc[0]
    assert best["intercept"] == pytest.approx(0.02 / 0.40) and best["slope"] == pytest.approx(0.38 / 0.40)
    assert best["r2"] == pytest.approx(1.0)
    assert "acm_sorted@graph" not in set(fits["variant"])  # failed captures are rows, not fit points
    assert set(fits.loc[fits["variant"] == "acm_triton", "baseline"]) == {"dense_eager", "dense_compile",
                                                                            bench_rows.BEST_DENSE}
    assert isinstance(frame, pd.DataFrame)
