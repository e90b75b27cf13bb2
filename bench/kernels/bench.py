"""``python -m bench kernels``: ACM layer latency vs linear scaling (the paper's Figure 9 protocol).

One ACM MLP layer (default: ViT-B, batch × 197 tokens, d = 768, N = 4 learners of width 768, GELU) is timed
against dense baselines while the executed fraction of learners f sweeps 0, 0.1, …, 1.0:

- The gate (Linear(d,16)→GELU→Linear(16,16)→GELU→Linear(16,N+1), as in the ACM method) runs for real on
  the input inside every timed ACM forward; its argmax choices are then REPLACED by pre-drawn random k with
  mean fraction f (``random_k``: "iid" = Binomial(N, f) per token, "equal" = the same k for all tokens).
- Variants: ``dense_eager`` (Linear→GELU→Linear, hidden N·w), ``dense_compile`` (torch.compile of it; a
  failure is recorded in the row's ``status``, not raised), ``ideal_narrow`` (a dense MLP of hidden width
  f·N·w rounded to a multiple of ``--ideal-align`` = 64: widths such as round(0.9·3072) = 2765 are not
  multiples of 8 and cuBLAS runs them several times slower than dense, which is no physical reference;
  the row's x is the rounded fraction), ``acm_naive``, ``acm_sorted``, ``acm_masked`` (opt-in: the
  dense-cost training path), ``acm_triton`` (CUDA only; weights laid out once with ``prepare_weights``
  before timing, X gathered once into sorted order unless ``--triton-gather in_load``; autotuned on the
  full-width workload, the chosen tiles are in the rows' ``triton_config``).
- CUDA graphs (CUDA, unless ``--no-cuda-graphs``): every capturable path (dense eager, dense compile,
  ideal narrow, acm_triton, acm_masked) is also captured after warm-up and timed as a replay, as variant
  ``<variant>@graph``; the PyTorch sorted/naive paths synchronize with the host and are not captured.
  The run also checks acm_triton under ``torch.cuda.set_sync_debug_mode("error")`` (``sync_check``).
- Timing (no counters attached): CPU ``torch.utils.benchmark.Timer.blocked_autorange`` with an explicit
  thread count; GPU ``triton.testing.do_bench`` (L2 flushed before every call, warm-up) with all per-call
  times kept.  Points are measured in ``--rounds`` rounds, each in a fresh random order (A/B interleaving
  against drift; dense_eager is re-measured several times per round); median and IQR of the pooled
  per-call times.  Inputs are random normal, never zeros.
- CPU threads: set explicitly (``--threads``, default 2).  On a loaded shared machine prefer 1 (or set
  ``OMP_WAIT_POLICY=PASSIVE``): with 2 threads each OpenMP parallel region can wait a scheduler quantum
  for a descheduled thread (a 139×768 copy measured 15 ms), a fixed cost per op that penalises the
  many-op ACM paths far more than the 3-op dense MLP.
- Times are normalised by the dense eager median of the same batch in the same run (and by dense_compile
  when it ran).  A least-squares line T(f)/T_dense = a + b·f is fitted per (batch, k mode, variant) over the
  measured executed fraction (mean k / N of the actual k): a, b, R², max |residual|, and the fitted
  T(0.25)/T_dense and T(1)/T_dense.  A secondary fit uses per-point minimum block times (statistic "min").
  ``--refit ROWS_CSV`` recomputes a fit table and the figure from stored rows without measuring.
- GPU: achieved TFLOP/s per point, the dense-GEMM peak measured in the same run (bf16 8192³ matmul) and
  the point's percentage of it (``pct_of_peak``).  ``rel_to_best_dense`` divides by the fastest dense
  variant of the batch (eager, compile, and their graph replays); the fit table has that baseline too
  (``dense_best``), which is the reference of the GPU targets.

Outputs: ``results/kernels/<id>.csv`` (one row per point, one file per invocation), ``<id>.fit.csv``,
and ``reports/kernel_latency.png`` (redrawable from the rows alone with :func:`plot_kernel_rows`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import random
import shlex
import time
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from bench.kernels.timer import device_timer, gemm_peak_tflops, median_iqr, versions

DENSE = "dense_eager"
COMPILE = "dense_compile"
IDEAL = "ideal_narrow"
ACM_VARIANTS = ("acm_naive", "acm_sorted", "acm_masked", "acm_triton")
GRAPH = "@graph"  # suffix of a variant timed as a CUDA-graph replay
CAPTURABLE = ("dense_eager", "dense_compile", "ideal_narrow", "acm_triton", "acm_masked")
BEST_DENSE = "dense_best"  # fit baseline: the fastest dense variant of the batch
ALL_VARIANTS = (DENSE, COMPILE, IDEAL) + ACM_VARIANTS
DEFAULT_FRACTIONS = tuple(round(0.1 * i, 1) for i in range(11))
GATE_HIDDEN = 16
NO_K_MODE = "any"  # dense and ideal rows do not depend on the k distribution (not an NA token for pandas)
IDEAL_ALIGN = 64  # hidden widths of the ideal narrow MLP are multiples of this


def base_variant(variant: str) -> str:
    """``acm_triton@graph`` → ``acm_triton``."""
    return str(variant).split(GRAPH)[0]


def ideal_width(fraction: float, hidden: int, align: int = IDEAL_ALIGN) -> int:
    """Hidden width of the ideal narrow MLP at fraction f: f·hidden rounded (half up) to a multiple of
    ``align`` and clipped to [0, hidden] (a hidden width that is not a multiple of ``align`` keeps its full
    width at f = 1)."""
    if fraction >= 1.0:
        return hidden
    return max(0, min(hidden, int(math.floor(fraction * hidden / align + 0.5)) * align))

FIT_COLUMNS = ["run_id", "device_name", "dtype", "batch", "tokens", "d", "n_learners", "width", "activation",
               "k_mode", "variant", "baseline", "statistic", "n_points", "intercept", "slope", "r2", "max_residual",
               "t025_rel", "t1_rel"]

# CPU acceptance targets for the sorted PyTorch path (benchmark targets, reported, not asserted).
CPU_TARGET = {"variant": "acm_sorted", "batch": 8, "max_intercept": 0.10, "slope": (0.9, 1.1), "min_r2": 0.98}
# GPU targets (H100 bf16, ViT-B layer, batch 128, k iid, against the fastest dense variant; reported, not asserted).
GPU_TARGET = {"variant": "acm_triton", "batch": 128, "max_t1": 1.0, "max_t025": 0.35, "max_intercept": 0.05,
              "min_r2": 0.99}


# ---------------------------------------------------------------- arguments


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench kernels",
        description="ACM layer latency vs linear scaling (Figure 9 protocol); writes results/kernels/<id>.csv, "
                    "<id>.fit.csv and reports/kernel_latency.png.")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda if available")
    p.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default="fp32")
    p.add_argument("--batch", type=int, nargs="+", default=None,
                   help="batch sizes, each swept over all fractions (default cpu: 1 2 4 8; cuda: 1 8 32 128)")
    p.add_argument("--main-batch", type=int, default=None,
                   help="batch of the main panel (default: 8 on cpu, 128 on cuda, else the largest)")
    p.add_argument("--tokens", type=int, default=197)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--n-learners", type=int, default=4)
    p.add_argument("--width", type=int, default=None, help="learner width (default: d)")
    p.add_argument("--activation", choices=["gelu", "relu", "none"], default="gelu")
    p.add_argument("--fractions", type=float, nargs="+", default=list(DEFAULT_FRACTIONS))
    p.add_argument("--variants", nargs="+", choices=ALL_VARIANTS, default=None,
                   help="default: all but acm_masked (acm_triton only on cuda)")
    p.add_argument("--k-mode", nargs="+", choices=["iid", "equal"], default=["iid"])
    p.add_argument("--ideal-align", type=int, default=None,
                   help=f"hidden widths of ideal_narrow are multiples of this (default {IDEAL_ALIGN}; --quick: 16)")
    p.add_argument("--triton-gather", choices=["once", "in_load"], default="once",
                   help="acm_triton: gather X into sorted order once (default) or inside the GEMM loads")
    p.add_argument("--no-cuda-graphs", action="store_true",
                   help="CUDA: do not time the CUDA-graph-captured variants (<variant>@graph)")
    p.add_argument("--min-run-s", type=float, default=None,
                   help="CPU: blocked_autorange min_run_time per point and round (default 0.3); "
                        "GPU: do_bench rep time in s (default 0.1)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved measurement rounds (default 3)")
    p.add_argument("--threads", type=int, default=2,
                   help="CPU threads (torch.set_num_threads and Timer; default 2).  On a shared, loaded machine "
                        "use 1: with 2 OpenMP threads every parallel op waits at a barrier for a descheduled "
                        "thread, which penalises paths with many small ops")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results-dir", default="results")
    p.add_argument("--reports-dir", default="reports")
    p.add_argument("--full-breakdown", action="store_true",
                   help="measure every variant and k mode at every batch (default: batches other than the "
                        "main one measure only dense_eager and the fastest ACM variant, first k mode)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--refit", metavar="ROWS_CSV", default=None,
                   help="measure nothing: recompute ROWS_CSV's fit table and redraw the figure from it")
    p.add_argument("--quick", action="store_true",
                   help="tiny smoke configuration (tokens 16, d 32, N 4×16, batches 1 2, f 0 0.5 1, 1 round)")
    return p


def _resolve(opts: argparse.Namespace, torch) -> argparse.Namespace:
    if opts.device is None:
        opts.device = "cuda" if torch.cuda.is_available() else "cpu"
    if opts.quick:
        opts.tokens, opts.d, opts.n_learners, opts.width = 16, 32, 4, 16
        opts.batch = opts.batch or [1, 2]
        opts.fractions = [0.0, 0.5, 1.0]
        opts.rounds = 1
        opts.min_run_s = opts.min_run_s or 0.01
        opts.ideal_align = opts.ideal_align or 16
        if opts.variants is None:
            opts.variants = [DENSE, IDEAL, "acm_naive", "acm_sorted"]
    gpu = opts.device == "cuda"
    if opts.batch is None:
        opts.batch = [1, 8, 32, 128] if gpu else [1, 2, 4, 8]
    if opts.main_batch is None:
        preferred = 128 if gpu else 8
        opts.main_batch = preferred if preferred in opts.batch else max(opts.batch)
    if opts.width is None:
        opts.width = opts.d
    if opts.ideal_align is None:
        opts.ideal_align = IDEAL_ALIGN
    if opts.min_run_s is None:
        opts.min_run_s = 0.1 if gpu else 0.3
    if opts.variants is None:
        opts.variants = [v for v in ALL_VARIANTS if v != "acm_masked" and (gpu or v != "acm_triton")]
    if DENSE not in opts.variants:
        opts.variants = [DENSE] + list(opts.variants)  # the normaliser is always measured
    if "acm_triton" in opts.variants and not gpu:
        print("acm_triton needs CUDA: dropped (its interpreter on CPU is for correctness, not timing)")
        opts.variants = [v for v in opts.variants if v != "acm_triton"]
    return opts


# ---------------------------------------------------------------- layer and callables


def _build(opts, torch, dtype, device):
    """(dense MLP, gate, ACM weights (w1, b1, w2)) sharing one set of random weights."""
    nn = torch.nn
    gen = torch.Generator().manual_seed(opts.seed)
    hidden = opts.n_learners * opts.width
    act = {"gelu": nn.GELU(), "relu": nn.ReLU(), "none": nn.Identity()}[opts.activation]
    dense = nn.Sequential(nn.Linear(opts.d, hidden), act, nn.Linear(hidden, opts.d))
    gate = nn.Sequential(nn.Linear(opts.d, GATE_HIDDEN), nn.GELU(), nn.Linear(GATE_HIDDEN, GATE_HIDDEN), nn.GELU(),
                         nn.Linear(GATE_HIDDEN, opts.n_learners + 1))
    with torch.no_grad():
        for module in (dense, gate):
            for param in module.parameters():
                param.copy_(torch.randn(param.shape, generator=gen) / math.sqrt(param.shape[-1]))
    dense = dense.to(device=device, dtype=dtype).eval()
    gate = gate.to(device=device, dtype=dtype).eval()
    w1, b1, w2 = dense[0].weight.detach(), dense[0].bias.detach(), dense[2].weight.detach()
    return dense, gate, (w1, b1, w2)


def _narrow(opts, torch, dense, hidden: int):
    """A dense MLP of hidden width ``hidden`` (contiguous copies of the first units): the ideal L(f)."""
    nn = torch.nn
    act = {"gelu": nn.GELU(), "relu": nn.ReLU(), "none": nn.Identity()}[opts.activation]
    ref_dtype, device = dense[0].weight.dtype, dense[0].weight.device
    with warnings.catch_warnings():  # hidden = 0 at f = 0: "Initializing zero-element tensors is a no-op"
        warnings.simplefilter("ignore", UserWarning)
        narrow = nn.Sequential(nn.Linear(opts.d, hidden), act, nn.Linear(hidden, opts.d)).to(device, ref_dtype)
    with torch.no_grad():
        narrow[0].weight.copy_(dense[0].weight[:hidden])
        narrow[0].bias.copy_(dense[0].bias[:hidden])
        narrow[2].weight.copy_(dense[2].weight[:, :hidden])
        narrow[2].bias.copy_(dense[2].bias)
    return narrow.eval()


def _acm_fn(name: str, prepared=None, gather: str = "once"):
    """The ACM path ``name`` as f(x, k, w1, b1, w2, width, activation); acm_triton runs on the weights laid
    out once (``prepared``, from ``prepare_weights``) when given, ignoring the nn.Linear weights passed."""
    from bench.kernels import acm_torch

    if name == "acm_triton":
        from bench.kernels.acm_ops import acm_triton, acm_triton_prepared

        if prepared is None:
            return acm_triton

        def triton_prepared(x, k, w1, b1, w2, width, activation):
            return acm_triton_prepared(x, k, prepared, width, activation, gather_x=gather == "once")

        return triton_prepared
    return getattr(acm_torch, name)


# ---------------------------------------------------------------- timing


# ---------------------------------------------------------------- fitting


def fit_line(x, y) -> dict:
    """Least squares y = a + b·x: intercept, slope, R², max |residual|, fitted y(0.25) and y(1)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 2 or np.ptp(x) == 0:
        return {"n_points": int(len(x)), "intercept": math.nan, "slope": math.nan, "r2": math.nan,
                "max_residual": math.nan, "t025_rel": math.nan, "t1_rel": math.nan}
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (intercept + slope * x)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / ss_tot if ss_tot > 0 else math.nan
    return {"n_points": int(len(x)), "intercept": float(intercept), "slope": float(slope), "r2": r2,
            "max_residual": float(np.abs(resid).max()), "t025_rel": float(intercept + 0.25 * slope),
            "t1_rel": float(intercept + slope)}


def fit_rows(rows_df):
    """The fit table of a frame of kernel rows: per (run, batch, k mode, variant), the line through the
    medians relative to dense_eager (and to dense_compile where it ran, and to the fastest dense variant
    of the batch, baseline ``dense_best``, where rows carry ``rel_to_best_dense``), and, as a
    contention-robust secondary estimate, through the per-point minimum block times relative to
    dense_eager's minimum (``statistic`` = "median" / "min").  CUDA-graph variants (``…@graph``) are
    fitted like the others."""
    import pandas as pd

    ok = rows_df[rows_df["status"] == "ok"]
    frame = ok[ok["variant"].map(base_variant).isin((IDEAL,) + ACM_VARIANTS)]
    dense_min = {}
    if "min_ms" in ok:
        for (run_id, batch), group in ok[ok["variant"] == DENSE].groupby(["run_id", "batch"]):
            dense_min[(run_id, batch)] = float(group["min_ms"].iloc[0])
    keys = ["run_id", "device_name", "dtype", "batch", "tokens", "d", "n_learners", "width", "activation",
            "k_mode", "variant"]
    out = []
    for key, group in frame.groupby(keys, sort=False, dropna=False):
        fields = dict(zip(keys, key))
        series = [(DENSE, "median", group.get("rel_to_dense")), (COMPILE, "median", group.get("rel_to_compile")),
                  (BEST_DENSE, "median", group.get("rel_to_best_dense"))]
        if (fields["run_id"], fields["batch"]) in dense_min:
            series.append((DENSE, "min", group["min_ms"] / dense_min[(fields["run_id"], fields["batch"])]))
        for baseline, statistic, values in series:
            if values is None or values.isna().all():
                continue
            fit = fit_line(group["executed_fraction"], values)
            out.append({**fields, "baseline": baseline, "statistic": statistic, **fit})
    return pd.DataFrame(out, columns=FIT_COLUMNS)


def refit(rows_csv: Path | str, reports_dir: Path | str | None = None):
    """Recompute ``<id>.fit.csv`` (and redraw the figure when ``reports_dir`` is given) from a rows file."""
    import pandas as pd

    from bench.results import atomic_write_frame

    rows_csv = Path(rows_csv)
    frame = pd.read_csv(rows_csv, keep_default_na=False, na_values=[""])
    fits = fit_rows(frame)
    atomic_write_frame(rows_csv.with_name(rows_csv.name[:-len(".csv")] + ".fit.csv"), fits)
    if reports_dir is not None:
        plot_kernel_rows(frame, Path(reports_dir) / "kernel_latency.png")
    return frame, fits


# ---------------------------------------------------------------- the benchmark


def _gate_flop(opts, tokens: int) -> int:
    n = opts.n_learners + 1
    return 2 * tokens * (opts.d * GATE_HIDDEN + GATE_HIDDEN * GATE_HIDDEN + GATE_HIDDEN * n)


def run(opts: argparse.Namespace) -> tuple[list[dict], dict]:
    """Measure every point; returns (rows, info)."""
    import torch

    from bench import provenance
    from bench.kernels.acm_torch import random_k

    device = torch.device(opts.device)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[opts.dtype]
    if opts.device == "cpu":
        torch.set_num_threads(opts.threads)
    gpu = opts.device == "cuda"
    graphs = gpu and not getattr(opts, "no_cuda_graphs", False)
    timer = device_timer(opts.device, opts.min_run_s, opts.threads, opts.quick)
    dense, gate, (w1, b1, w2) = _build(opts, torch, dtype, device)
    hidden = opts.n_learners * opts.width
    rng = random.Random(opts.seed)
    torch_version, triton_version = versions()
    run_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{opts.device}-{opts.dtype}"
    info = {"run_id": run_id, "compile_status": "not requested", "peak_tflops": math.nan, "sync_check": ""}
    peak = gemm_peak_tflops(timer) if gpu else math.nan
    info["peak_tflops"] = peak

    compiled = None
    if COMPILE in opts.variants:
        try:
            compiled = torch.compile(dense)
            start = time.perf_counter()
            with torch.inference_mode():
                compiled(torch.randn(opts.main_batch * opts.tokens, opts.d, device=device, dtype=dtype))
            info["compile_status"] = f"ok (first call {time.perf_counter() - start:.1f} s)"
        except Exception as err:  # recorded, not raised: compile is optional on CPU
            compiled = None
            info["compile_status"] = f"failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}"
        print(f"dense_compile: {info['compile_status']}", flush=True)

    base = {"run_id": run_id, "device": opts.device, "device_name": provenance.device_name(opts.device),
            "dtype": opts.dtype, "tokens": opts.tokens, "d": opts.d, "n_learners": opts.n_learners,
            "width": opts.width, "activation": opts.activation, "main_batch": opts.main_batch,
            "threads": opts.threads if opts.device == "cpu" else math.nan, "rounds": opts.rounds,
            "min_run_s": opts.min_run_s, "ideal_align": opts.ideal_align, "torch_version": torch_version,
            "triton_version": triton_version, "git_sha": provenance.git_sha(), "git_dirty": provenance.git_dirty(),
            "command": "python -m bench kernels " + shlex.join(opts.argv),
            "timestamp": provenance.timestamp(), "peak_tflops": peak}
    rows: list[dict] = []
    all_acm = [v for v in opts.variants if v in ACM_VARIANTS]
    best_acm = [v for v in ("acm_triton", "acm_sorted", "acm_naive", "acm_masked") if v in all_acm][:1]
    prepared = None
    if "acm_triton" in all_acm:
        from bench.kernels.acm_triton import prepare_weights

        prepared = prepare_weights(w1, b1, w2)  # laid out once, before any timing
    for batch in opts.batch:
        full = batch == opts.main_batch or opts.full_breakdown
        acm_variants = all_acm if full else best_acm
        k_modes = opts.k_mode if full else opts.k_mode[:1]
        T = batch * opts.tokens
        x = torch.randn(T, opts.d, generator=torch.Generator().manual_seed(opts.seed + batch)).to(device, dtype)
        # point key -> (callable, row fields)
        points: dict[tuple, tuple[Callable[[], object] | None, dict]] = {}
        dense_flop = 2 * T * 2 * opts.d * hidden
        points[(DENSE,)] = (lambda: dense(x), {"variant": DENSE, "k_mode": NO_K_MODE, "fraction": 1.0,
                                               "executed_fraction": 1.0, "gflop": dense_flop / 1e9})
        if COMPILE in opts.variants and full:
            fields = {"variant": COMPILE, "k_mode": NO_K_MODE, "fraction": 1.0, "executed_fraction": 1.0,
                      "gflop": dense_flop / 1e9}
            if compiled is not None:
                points[(COMPILE,)] = (lambda: compiled(x), fields)
            else:
                rows.append({**base, "batch": batch, **fields, "status": info["compile_status"]})
        for f in opts.fractions:
            if IDEAL in opts.variants and full:
                h = ideal_width(f, hidden, opts.ideal_align)
                if (IDEAL, h) not in points:  # fractions that round to the same width share one point
                    narrow = _narrow(opts, torch, dense, h)
                    points[(IDEAL, h)] = ((lambda m=narrow: m(x)),
                                          {"variant": IDEAL, "k_mode": NO_K_MODE, "fraction": f,
                                           "executed_fraction": h / hidden, "gflop": 2 * T * 2 * opts.d * h / 1e9})
            for mode in k_modes:
                gen = torch.Generator().manual_seed(opts.seed * 1000 + batch * 17 + int(round(f * 100)))
                k = random_k(T, opts.n_learners, f, gen, mode=mode, device=device)
                executed = float(k.double().mean()) / opts.n_learners
                flop = 2 * 2 * int(k.sum()) * opts.width * opts.d + _gate_flop(opts, T)
                for variant in acm_variants:
                    impl = _acm_fn(variant, prepared, getattr(opts, "triton_gather", "once"))
                    if variant == "acm_masked":
                        flop_v = 2 * 2 * T * hidden * opts.d + _gate_flop(opts, T)
                    else:
                        flop_v = flop

                    def acm_forward(impl=impl, k=k):
                        gate(x).argmax(dim=-1)  # the gate runs for real; its choices are replaced by k
                        return impl(x, k, w1, b1, w2, opts.width, opts.activation)

                    points[(variant, mode, f)] = (acm_forward, {
                        "variant": variant, "k_mode": mode, "fraction": f, "executed_fraction": executed,
                        "gflop": flop_v / 1e9})
        triton_config = ""
        with torch.inference_mode():
            for fn, _ in points.values():  # warm-up (allocator, autotuning, lazy init)
                fn()
            if gpu:
                torch.cuda.synchronize()
                triton_config = _triton_config(all_acm)
                if "acm_triton" in acm_variants and not info["sync_check"]:
                    from bench.kernels.graphs import host_sync_free

                    key = next(key for key in points if key[0] == "acm_triton")
                    info["sync_check"] = host_sync_free(points[key][0])
            if graphs:
                _add_graph_points(points, rows, base, batch)
        samples: dict[tuple, list[float]] = {key: [] for key in points}
        with torch.inference_mode():
            order = list(points)
            dense_repeats = max(1, len(order) // 8)
            for r in range(opts.rounds):
                schedule = order + [(DENSE,)] * (dense_repeats - 1)
                rng.shuffle(schedule)
                start = time.perf_counter()
                for key in schedule:
                    samples[key].extend(timer(points[key][0]))
                print(f"batch {batch}: round {r + 1}/{opts.rounds}, {len(schedule)} points, "
                      f"{time.perf_counter() - start:.1f} s", flush=True)
        for key, (_, fields) in points.items():
            med, iqr = median_iqr(samples[key])
            config = triton_config if base_variant(fields["variant"]) == "acm_triton" else ""
            rows.append({**base, "batch": batch, **fields, "median_ms": med * 1e3, "iqr_ms": iqr * 1e3,
                         "min_ms": min(samples[key]) * 1e3, "n_samples": len(samples[key]),
                         "triton_config": config, "status": "ok"})
        del points, samples, x
    return rows, info


def _triton_config(variants: list[str]) -> str:  # pragma: no cover - needs a GPU
    if "acm_triton" not in variants:
        return ""
    from bench.kernels.acm_triton import chosen_configs

    chosen = chosen_configs()
    return f"up {chosen['up']}; down {chosen['down']}"


def _add_graph_points(points: dict, rows: list[dict], base: dict, batch: int) -> None:  # pragma: no cover - CUDA
    """Add a CUDA-graph replay point ``<variant>@graph`` for every capturable point (after warm-up)."""
    from bench.kernels.graphs import capture

    for key, (fn, fields) in list(points.items()):
        if fields["variant"] not in CAPTURABLE:
            continue
        graph_fields = {**fields, "variant": fields["variant"] + GRAPH}
        try:
            points[(key, GRAPH)] = (capture(fn), graph_fields)
        except Exception as err:  # recorded, not raised
            rows.append({**base, "batch": batch, **graph_fields,
                         "status": f"capture failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}"})


def _finish_rows(rows: list[dict]):
    import pandas as pd

    columns = ["run_id", "device", "device_name", "dtype", "batch", "main_batch", "tokens", "d", "n_learners",
               "width", "activation", "k_mode", "variant", "fraction", "executed_fraction", "median_ms",
               "iqr_ms", "min_ms", "n_samples", "rel_to_dense", "rel_to_compile", "rel_to_best_dense", "gflop",
               "achieved_tflops", "peak_tflops", "pct_of_peak", "triton_config", "ideal_align", "threads",
               "rounds", "min_run_s", "status", "torch_version", "triton_version", "git_sha", "git_dirty",
               "command", "timestamp"]
    frame = pd.DataFrame(rows)
    for column in columns:
        if column not in frame:
            frame[column] = math.nan
    frame = frame[columns]
    for batch, idx in frame.groupby("batch").groups.items():
        sub = frame.loc[idx]
        ok = sub["status"] == "ok"
        dense = sub.loc[(sub["variant"] == DENSE) & ok, "median_ms"]
        comp = sub.loc[(sub["variant"] == COMPILE) & ok, "median_ms"]
        best = sub.loc[sub["variant"].map(base_variant).isin([DENSE, COMPILE]) & ok, "median_ms"]
        frame.loc[idx, "rel_to_dense"] = sub["median_ms"] / dense.iloc[0] if len(dense) else math.nan
        frame.loc[idx, "rel_to_compile"] = sub["median_ms"] / comp.iloc[0] if len(comp) else math.nan
        frame.loc[idx, "rel_to_best_dense"] = sub["median_ms"] / best.min() if len(best) else math.nan
    frame["achieved_tflops"] = frame["gflop"] / frame["median_ms"]  # GFLOP / ms = TFLOP/s
    frame["pct_of_peak"] = 100.0 * frame["achieved_tflops"] / frame["peak_tflops"]
    return frame


def main(argv: list[str]) -> int:
    opts = _parser().parse_args(argv)
    opts.argv = list(argv)
    if opts.refit:
        frame, fits = refit(opts.refit, None if opts.no_plot else opts.reports_dir)
        _print_summary(frame, fits, {"compile_status": "see rows"}, 0.0)
        return 0
    import torch

    from bench.results import atomic_write_frame

    opts = _resolve(opts, torch)
    if opts.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but no CUDA device is available")
        return 2
    bad = [f for f in opts.fractions if not 0.0 <= f <= 1.0]
    if bad:
        print(f"error: fractions must lie in [0, 1]: {bad}")
        return 2
    started = time.perf_counter()
    rows, info = run(opts)
    frame = _finish_rows(rows)
    fits = fit_rows(frame)
    out_dir = Path(opts.results_dir) / "kernels"
    rows_path = out_dir / f"{info['run_id']}.csv"
    fit_path = out_dir / f"{info['run_id']}.fit.csv"
    atomic_write_frame(rows_path, frame)
    atomic_write_frame(fit_path, fits)
    print(rows_path)
    print(fit_path)
    if not opts.no_plot:
        png = Path(opts.reports_dir) / "kernel_latency.png"
        plot_kernel_rows(frame, png)
        print(png)
    _print_summary(frame, fits, info, time.perf_counter() - started)
    return 0


def _print_summary(frame, fits, info, seconds: float) -> None:
    print(f"dense_compile: {info['compile_status']}")
    if np.isfinite(info.get("peak_tflops", math.nan)):
        print(f"dense GEMM peak (bf16 8192^3): {info['peak_tflops']:.0f} TFLOP/s")
    if info.get("sync_check"):
        print(f"acm_triton under torch.cuda.set_sync_debug_mode('error'): {info['sync_check']}")
    dense = frame[frame["variant"].map(base_variant).isin([DENSE, COMPILE]) & (frame["status"] == "ok")]
    for _, row in dense.iterrows():
        print(f"batch {row['batch']:>4} {row['variant']:<20} {row['median_ms']:9.3f} ms "
              f"(IQR {row['iqr_ms']:.3f})")
    if "triton_config" in frame:
        for batch, config in frame.loc[frame["triton_config"].fillna("") != "", ["batch", "triton_config"]] \
                .drop_duplicates().itertuples(index=False):
            print(f"batch {batch:>4} acm_triton tiles (M x N x K, warps, stages): {config}")
    peak = frame.get("pct_of_peak")
    if peak is not None and peak.notna().any():
        for _, row in frame[peak.notna() & frame["variant"].map(base_variant).isin(["acm_triton", DENSE])
                            & np.isclose(frame["fraction"], 1.0)].iterrows():
            print(f"batch {row['batch']:>4} {row['variant']:<20} f=1: {row['achieved_tflops']:.0f} TFLOP/s, "
                  f"{row['pct_of_peak']:.0f}% of the measured GEMM peak")
    print(f"{'batch':>5} {'k_mode':>6} {'variant':<19} {'vs':<13} {'stat':<6} {'a':>7} {'b':>6} {'R2':>6} "
          f"{'maxres':>7} {'T(.25)':>7} {'T(1)':>6}")
    for _, r in fits.iterrows():
        print(f"{r['batch']:>5} {r['k_mode']:>6} {r['variant']:<19} {r['baseline']:<13} {r['statistic']:<6} "
              f"{r['intercept']:7.3f} {r['slope']:6.3f} {r['r2']:6.3f} {r['max_residual']:7.3f} "
              f"{r['t025_rel']:7.3f} {r['t1_rel']:6.3f}")
    if (frame["device"] == "cpu").all():
        t = CPU_TARGET
        sel = fits[(fits["variant"] == t["variant"]) & (fits["batch"] == t["batch"]) & (fits["baseline"] == DENSE)
                   & (fits["statistic"] == "median")]
        for _, r in sel.iterrows():
            met = (r["intercept"] <= t["max_intercept"] and t["slope"][0] <= r["slope"] <= t["slope"][1]
                   and r["r2"] >= t["min_r2"])
            print(f"CPU target ({t['variant']}, batch {t['batch']}, {r['k_mode']}): a ≤ {t['max_intercept']}, "
                  f"b in {t['slope']}, R² ≥ {t['min_r2']}: {'MET' if met else 'NOT MET'}")
    if (frame["device"] == "cuda").all():
        t = GPU_TARGET
        sel = fits[(fits["variant"].map(base_variant) == t["variant"]) & (fits["batch"] == t["batch"])
                   & (fits["baseline"] == BEST_DENSE) & (fits["statistic"] == "median") & (fits["k_mode"] == "iid")]
        for _, r in sel.iterrows():
            met = (r["t1_rel"] <= t["max_t1"] and r["t025_rel"] <= t["max_t025"]
                   and r["intercept"] <= t["max_intercept"] and r["r2"] >= t["min_r2"])
            print(f"GPU target ({r['variant']}, batch {t['batch']}, k iid, vs the fastest dense): T(1) ≤ "
                  f"{t['max_t1']}, T(0.25) ≤ {t['max_t025']}, a ≤ {t['max_intercept']}, R² ≥ {t['min_r2']}: "
                  f"{'MET' if met else 'NOT MET'}")
    print(f"total {seconds:.0f} s")


# ---------------------------------------------------------------- plotting


def load_kernel_rows(results_dir: Path | str = "results"):
    """All kernel benchmark rows under ``results_dir/kernels`` (not the fit tables), or an empty frame."""
    import pandas as pd

    paths = sorted(p for p in (Path(results_dir) / "kernels").glob("*.csv")
                   if not p.name.endswith(".fit.csv") and not p.name.startswith("."))
    if not paths:
        return pd.DataFrame()
    return pd.concat([pd.read_csv(p, keep_default_na=False, na_values=[""]) for p in paths], ignore_index=True)


_COLOURS = {"acm_naive": "tab:orange", "acm_sorted": "tab:blue", "acm_triton": "tab:red",
            "acm_masked": "tab:gray", IDEAL: "tab:green", COMPILE: "tab:purple"}
_LABELS = {"acm_naive": "ACM (naive)", "acm_sorted": "ACM (sorted, PyTorch)", "acm_triton": "ACM (Triton)",
           "acm_masked": "ACM (masked)", IDEAL: "narrow dense MLP (ideal, aligned width)", COMPILE: "dense MLP (torch.compile)"}


def plot_kernel_rows(rows_df, path: Path | str) -> Path:
    """Draw the Figure-9-style plot from kernel rows alone (the latest run if several are present).

    Left: wall time relative to the dense eager MLP vs executed fraction of learners at the main batch:
    points per ACM variant (filled: iid k, hollow: equal k) with their least-squares lines, the ideal narrow
    MLP, y = 1 (dense) and y = x (linear scaling).  Right: the batch breakdown of the fastest ACM variant
    present (acm_triton, else acm_sorted, else acm_naive): relative time vs fraction for each batch.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    frame = rows_df
    if "run_id" in frame and frame["run_id"].nunique() > 1:
        frame = frame[frame["run_id"] == sorted(frame["run_id"].unique())[-1]]
    frame = frame[frame["status"] == "ok"]
    if frame.empty:
        raise ValueError("no successful kernel rows to plot")
    first = frame.iloc[0]
    main_batch = int(first["main_batch"]) if "main_batch" in frame and np.isfinite(first["main_batch"]) \
        else int(frame["batch"].max())
    if main_batch not in set(frame["batch"]):
        main_batch = int(frame["batch"].max())
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5.2))
    grid = np.linspace(0, 1, 50)
    main = frame[frame["batch"] == main_batch]
    ax.axhline(1.0, color="black", lw=1.2, label="dense MLP (eager)")
    ax.plot(grid, grid, color="black", ls=":", lw=1, label="linear scaling (y = x)")
    comp = main[main["variant"] == COMPILE]
    if len(comp):
        ax.axhline(float(comp["rel_to_dense"].iloc[0]), color=_COLOURS[COMPILE], lw=1, ls="-.",
                   label=_LABELS[COMPILE])
    ideal = main[main["variant"] == IDEAL].sort_values("executed_fraction")
    if len(ideal):
        ax.plot(ideal["executed_fraction"], ideal["rel_to_dense"], color=_COLOURS[IDEAL], lw=1.5, marker="s",
                ms=3, label=_LABELS[IDEAL])
    ideal_graph = main[main["variant"] == IDEAL + GRAPH].sort_values("executed_fraction")
    if len(ideal_graph):
        ax.plot(ideal_graph["executed_fraction"], ideal_graph["rel_to_dense"], color=_COLOURS[IDEAL], lw=1,
                ls=":", marker="s", ms=2, label=_LABELS[IDEAL] + " (CUDA graph)")
    for variant in list(ACM_VARIANTS) + [v + GRAPH for v in ACM_VARIANTS]:
        for mode, sub in main[main["variant"] == variant].groupby("k_mode"):
            colour = _COLOURS[base_variant(variant)]
            hollow = mode == "equal"
            graphed = variant.endswith(GRAPH)
            fit = fit_line(sub["executed_fraction"], sub["rel_to_dense"])
            several = main.loc[main["variant"].map(base_variant).isin(ACM_VARIANTS), "k_mode"].nunique() > 1
            label = f"{_LABELS[base_variant(variant)]}" + (" (CUDA graph)" if graphed else "") + \
                (f" [k {mode}]" if several else "")
            ax.scatter(sub["executed_fraction"], sub["rel_to_dense"], s=28, zorder=3, marker="D" if graphed else "o",
                       facecolors="none" if hollow else colour, edgecolors=colour,
                       label=f"{label}: a={fit['intercept']:.3f}, b={fit['slope']:.2f}, R²={fit['r2']:.3f}")
            dense_ms = main.loc[main["variant"] == DENSE, "median_ms"]
            if len(dense_ms) and "iqr_ms" in sub:  # the spread of the timings: half the IQR either side
                half = sub["iqr_ms"].astype(float) / 2 / float(dense_ms.iloc[0])
                ax.errorbar(sub["executed_fraction"], sub["rel_to_dense"], yerr=half, fmt="none", ecolor=colour,
                            elinewidth=0.8, capsize=2, zorder=2)
            if np.isfinite(fit["slope"]):
                ax.plot(grid, fit["intercept"] + fit["slope"] * grid, color=colour, lw=1,
                        ls=(0, (1, 2)) if hollow else ("-." if graphed else "--"))
    ax.set_xlabel("executed fraction of learners (FLOPs relative to dense MLP)")
    ax.set_ylabel("wall time relative to dense MLP (eager)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(bottom=0)
    ax.set_title(f"batch {main_batch} ({main_batch * int(first['tokens'])} tokens); bars: interquartile range "
                 "of the timings", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")

    present = [v for v in ("acm_triton", "acm_sorted", "acm_naive") if v in set(frame["variant"])]
    if present:
        variant = present[0]
        sub = frame[frame["variant"] == variant]
        modes = sub["k_mode"].unique()
        mode = "iid" if "iid" in modes else modes[0]
        sub = sub[sub["k_mode"] == mode]
        batches = sorted(sub["batch"].unique())
        cmap = plt.get_cmap("viridis")
        for i, batch in enumerate(batches):
            b = sub[sub["batch"] == batch].sort_values("executed_fraction")
            fit = fit_line(b["executed_fraction"], b["rel_to_dense"])
            dense_ms = frame[(frame["batch"] == batch) & (frame["variant"] == DENSE)]["median_ms"]
            dense_txt = f", dense {dense_ms.iloc[0]:.3g} ms" if len(dense_ms) else ""
            if len(dense_ms) and "iqr_ms" in b:  # half the interquartile range of the timings either side
                bx.errorbar(b["executed_fraction"], b["rel_to_dense"], fmt="none", elinewidth=0.8, capsize=2,
                            yerr=b["iqr_ms"].astype(float) / 2 / float(dense_ms.iloc[0]),
                            ecolor=cmap(i / max(1, len(batches) - 1)))
            bx.plot(b["executed_fraction"], b["rel_to_dense"], marker="o", ms=4,
                    color=cmap(i / max(1, len(batches) - 1)),
                    label=f"batch {batch}: a={fit['intercept']:.3f}, b={fit['slope']:.2f}{dense_txt}")
        bx.axhline(1.0, color="black", lw=1.2)
        bx.plot(grid, grid, color="black", ls=":", lw=1)
        bx.set_title(f"batch-size breakdown: {_LABELS[variant]}, k {mode}", fontsize=10)
        bx.set_xlabel("executed fraction of learners")
        bx.set_ylabel("wall time relative to dense MLP (same batch)")
        bx.set_xlim(-0.02, 1.02)
        bx.set_ylim(bottom=0)
        bx.grid(alpha=0.3)
        bx.legend(fontsize=7, loc="upper left")
    threads = first.get("threads")
    thread_txt = f", {int(threads)} threads" if threads is not None and np.isfinite(threads) else ""
    fig.suptitle(f"ACM layer latency vs executed learners — {first['device_name']}, {first['dtype']}{thread_txt}\n"
                 f"tokens/sample {int(first['tokens'])}, d {int(first['d'])}, N {int(first['n_learners'])} × "
                 f"{int(first['width'])}, {first['activation']}; gate included, k random", fontsize=10)
    fig.tight_layout()
    from bench.figures import save_figure

    save_figure(fig, path)
    plt.close(fig)
    return path
