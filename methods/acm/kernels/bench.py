"""``python -m bench kernels``: ACM layer latency vs linear scaling (the paper's Figure 9 protocol).

One ACM MLP layer (default: ViT-B, batch × 197 tokens, d = 768, N = 4 learners of width 768, GELU) is timed
against dense baselines while the executed fraction of learners f sweeps 0, 0.1, …, 1.0:

- The gate (Linear(d,16)→GELU→Linear(16,16)→GELU→Linear(16,N+1), as in the ACM method) runs for real on
  the input inside every timed ACM forward; its argmax choices are then REPLACED by pre-drawn random k with
  mean fraction f (``random_k``: "iid" = Binomial(N, f) per token, "equal" = the same k for all tokens).
- Variants: ``dense_eager`` (Linear→GELU→Linear, hidden N·w), ``dense_compile`` (torch.compile of it; a
  failure is recorded in the row's ``status``, not raised), ``ideal_narrow`` (a dense MLP of hidden width
  f·N·w rounded to a multiple of ``ideal_align`` = 64: widths such as round(0.9·3072) = 2765 are not
  multiples of 8 and cuBLAS runs them several times slower than dense, which is no physical reference;
  the row's x is the rounded fraction), ``acm_naive``, ``acm_sorted``, ``acm_masked`` (opt-in: the
  dense-cost training path), ``acm_triton`` (CUDA only; weights laid out once with ``prepare_weights``
  before timing, X gathered once into sorted order unless ``triton_gather=in_load``; autotuned on the
  full-width workload, the chosen tiles are in the rows' ``triton_config``).
- CUDA graphs (CUDA, unless ``cuda_graphs=false``): every capturable path (dense eager, dense compile,
  ideal narrow, acm_triton, acm_masked) is also captured after warm-up and timed as a replay, as variant
  ``<variant>@graph``; the PyTorch sorted/naive paths synchronize with the host and are not captured.
  The run also checks acm_triton under ``torch.cuda.set_sync_debug_mode("error")`` (``sync_check``).
- Timing (no counters attached): CPU ``torch.utils.benchmark.Timer.blocked_autorange`` with an explicit
  thread count; GPU ``triton.testing.do_bench`` (L2 flushed before every call, warm-up) with all per-call
  times kept.  Points are measured in ``rounds`` rounds, each in a fresh random order (A/B interleaving
  against drift; dense_eager is re-measured several times per round); median and IQR of the pooled
  per-call times.  Inputs are random normal, never zeros.
- CPU threads: set explicitly (``threads``, default 2).  On a loaded shared machine prefer 1 (or set
  ``OMP_WAIT_POLICY=PASSIVE``): with 2 threads each OpenMP parallel region can wait a scheduler quantum
  for a descheduled thread (a 139×768 copy measured 15 ms), a fixed cost per op that penalises the
  many-op ACM paths far more than the 3-op dense MLP.
- Times are normalised by the dense eager median of the same batch in the same run (and by dense_compile
  when it ran).  A least-squares line T(f)/T_dense = a + b·f is fitted per (batch, k mode, variant) over the
  measured executed fraction (mean k / N of the actual k): a, b, R², max |residual|, and the fitted
  T(0.25)/T_dense and T(1)/T_dense.  A secondary fit uses per-point minimum block times (statistic "min").
  ``refit=ROWS_CSV`` recomputes a fit table and the figure from stored rows without measuring.
- GPU: achieved TFLOP/s per point, the dense-GEMM peak measured in the same run (bf16 8192³ matmul) and
  the point's percentage of it (``pct_of_peak``).  ``rel_to_best_dense`` divides by the fastest dense
  variant of the batch (eager, compile, and their graph replays); the fit table has that baseline too
  (``dense_best``), which is the reference of the GPU targets.

Outputs: ``results/kernels/<id>.csv`` (one row per point, one file per invocation), ``<id>.fit.csv``,
and ``reports/kernel_latency.png`` (redrawable from the rows alone with
:func:`methods.acm.kernels.bench_rows.plot_kernel_rows`; the rows' columns, the fits and the figure are in
that module).  The timer is the harness's (:mod:`bench.kernels.timer`).  The verb finds this module through
the method's registration (``MethodSpec.kernels``).

Torch, the ACM paths and Triton are imported when the benchmark runs, not with this module (``bench kernels
--help`` waits for none of them; Triton is optional).  The keys (``key=value``, composed by Hydra like
``run``'s) are in :mod:`methods.acm.kernels.bench_args`.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import shlex
import time
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from bench import provenance
from bench.kernels.graphs import capture, host_sync_free
from bench.kernels.timer import device_timer, gemm_peak_tflops, median_iqr, versions
from bench.results import atomic_write_frame
from bench.speed import aligned_width
from methods.acm.kernels.bench_args import (IDEAL_ALIGN, KernelsConfig, check, parse,  # noqa: F401
                                            resolve)  # (KernelsConfig, check: the verb's)
from methods.acm.kernels.bench_rows import (ACM_VARIANTS, BEST_DENSE, COMPILE, DENSE, GRAPH, IDEAL, NO_K_MODE,
                                            base_variant, finish_rows, fit_rows, plot_kernel_rows, refit)

CAPTURABLE = ("dense_eager", "dense_compile", "ideal_narrow", "acm_triton", "acm_masked")
GATE_HIDDEN = 16


ideal_width = aligned_width  # the ideal narrow MLP's hidden width at fraction f: bench speed's rule

# CPU acceptance targets for the sorted PyTorch path (benchmark targets, reported, not asserted).
CPU_TARGET = {"variant": "acm_sorted", "batch": 8, "max_intercept": 0.10, "slope": (0.9, 1.1), "min_r2": 0.98}
# GPU targets (H100 bf16, ViT-B layer, batch 128, k iid, against the fastest dense variant; reported, not asserted).
GPU_TARGET = {"variant": "acm_triton", "batch": 128, "max_t1": 1.0, "max_t025": 0.35, "max_intercept": 0.05,
              "min_r2": 0.99}


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


def acm_fn(name: str, prepared=None, gather: str = "once"):
    """The ACM path ``name`` as f(x, k, w1, b1, w2, width, activation); acm_triton runs on the weights laid
    out once (``prepared``, from ``prepare_weights``) when given, ignoring the nn.Linear weights passed."""
    from methods.acm.kernels import acm_torch

    if name == "acm_triton":
        from methods.acm.kernels.acm_ops import acm_triton, acm_triton_prepared

        if prepared is None:
            return acm_triton

        def triton_prepared(x, k, w1, b1, w2, width, activation):
            return acm_triton_prepared(x, k, prepared, width, activation, gather_x=gather == "once")

        return triton_prepared
    return getattr(acm_torch, name)


# ---------------------------------------------------------------- the benchmark


def _gate_flop(opts, tokens: int) -> int:
    n = opts.n_learners + 1
    return 2 * tokens * (opts.d * GATE_HIDDEN + GATE_HIDDEN * GATE_HIDDEN + GATE_HIDDEN * n)


def run(opts: KernelsConfig) -> tuple[list[dict], dict]:
    """Measure every point; returns (rows, info)."""
    import torch

    device = torch.device(opts.device)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[opts.dtype]
    if opts.device == "cpu":
        torch.set_num_threads(opts.threads)
    gpu = opts.device == "cuda"
    timer = device_timer(opts.device, opts.min_run_s, opts.threads, opts.quick)
    dense, gate, weights = _build(opts, torch, dtype, device)
    rng = random.Random(opts.seed)
    run_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{opts.device}-{opts.dtype}"
    info = {"run_id": run_id, "compile_status": "not requested", "peak_tflops": math.nan, "sync_check": ""}
    info["peak_tflops"] = gemm_peak_tflops(timer) if gpu else math.nan
    compiled = _compiled_dense(opts, torch, dense, device, dtype, info) if COMPILE in opts.variants else None
    base = _base_fields(opts, run_id, info["peak_tflops"])
    all_acm = [v for v in opts.variants if v in ACM_VARIANTS]
    prepared = None
    if "acm_triton" in all_acm:
        from methods.acm.kernels.acm_triton import prepare_weights  # needs Triton

        prepared = prepare_weights(*weights)  # laid out once, before any timing
    rows: list[dict] = []
    for batch in opts.batch:
        x = torch.randn(batch * opts.tokens, opts.d,
                        generator=torch.Generator().manual_seed(opts.seed + batch)).to(device, dtype)
        points = _batch_points(opts, torch, batch, x, (dense, compiled, gate), weights, prepared, info, rows, base)
        triton_config = _warm_up(opts, torch, points, rows, base, batch, info)
        samples = _time_points(opts, points, timer, rng, batch)
        for key, (_, fields) in points.items():
            med, iqr = median_iqr(samples[key])
            config = triton_config if base_variant(fields["variant"]) == "acm_triton" else ""
            rows.append({**base, "batch": batch, **fields, "median_ms": med * 1e3, "iqr_ms": iqr * 1e3,
                         "min_ms": min(samples[key]) * 1e3, "n_samples": len(samples[key]),
                         "triton_config": config, "status": "ok"})
        del points, samples, x
    return rows, info


def _compiled_dense(opts, torch, dense, device, dtype, info: dict):
    """``torch.compile`` of the dense MLP, called once; None (and the reason in ``info``) if it fails."""
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
    return compiled


def _base_fields(opts, run_id: str, peak: float) -> dict:
    """The fields every row of this run shares (settings, versions, provenance)."""
    torch_version, triton_version = versions()
    return {"run_id": run_id, "device": opts.device, "device_name": provenance.device_name(opts.device),
            "dtype": opts.dtype, "tokens": opts.tokens, "d": opts.d, "n_learners": opts.n_learners,
            "width": opts.width, "activation": opts.activation, "main_batch": opts.main_batch,
            "threads": opts.threads if opts.device == "cpu" else math.nan, "rounds": opts.rounds,
            "min_run_s": opts.min_run_s, "ideal_align": opts.ideal_align, "torch_version": torch_version,
            "triton_version": triton_version, "git_sha": provenance.git_sha(), "git_dirty": provenance.git_dirty(),
            "command": "python -m bench kernels " + shlex.join(opts.argv),
            "timestamp": provenance.timestamp(), "peak_tflops": peak}


def _batch_points(opts, torch, batch: int, x, models, weights, prepared, info: dict, rows: list[dict],
                  base: dict) -> dict[tuple, tuple[Callable[[], object] | None, dict]]:
    """Point key -> (callable, row fields) for one batch: dense (and compiled dense), the ideal narrow
    layer per aligned width, every ACM variant per fraction and k mode (all of them at the main batch or
    with ``full_breakdown``, else the best ACM variant and the first k mode).  A compile that failed adds
    its row with the reason to ``rows``."""
    from methods.acm.kernels.acm_torch import random_k

    dense, compiled, gate = models
    w1, b1, w2 = weights
    hidden = opts.n_learners * opts.width
    full = batch == opts.main_batch or opts.full_breakdown
    all_acm = [v for v in opts.variants if v in ACM_VARIANTS]
    best_acm = [v for v in ("acm_triton", "acm_sorted", "acm_naive", "acm_masked") if v in all_acm][:1]
    acm_variants = all_acm if full else best_acm
    k_modes = opts.k_mode if full else opts.k_mode[:1]
    T = batch * opts.tokens
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
            k = random_k(T, opts.n_learners, f, gen, mode=mode, device=x.device)
            executed = float(k.double().mean()) / opts.n_learners
            flop = 2 * 2 * int(k.sum()) * opts.width * opts.d + _gate_flop(opts, T)
            for variant in acm_variants:
                impl = acm_fn(variant, prepared, getattr(opts, "triton_gather", "once"))
                flop_v = 2 * 2 * T * hidden * opts.d + _gate_flop(opts, T) if variant == "acm_masked" else flop

                def acm_forward(impl=impl, k=k):
                    gate(x).argmax(dim=-1)  # the gate runs for real; its choices are replaced by k
                    return impl(x, k, w1, b1, w2, opts.width, opts.activation)

                points[(variant, mode, f)] = (acm_forward, {
                    "variant": variant, "k_mode": mode, "fraction": f, "executed_fraction": executed,
                    "gflop": flop_v / 1e9})
    return points


def _warm_up(opts, torch, points: dict, rows: list[dict], base: dict, batch: int, info: dict) -> str:
    """Call every point once (allocator, autotuning, lazy init); on CUDA, check the Triton path for host
    syncs once and add the CUDA-graph points.  Returns the Triton configuration chosen ("" off CUDA)."""
    gpu = opts.device == "cuda"
    triton_config = ""
    with torch.inference_mode():
        for fn, _ in points.values():
            fn()
        if gpu:
            torch.cuda.synchronize()
            all_acm = [v for v in opts.variants if v in ACM_VARIANTS]
            triton_config = _triton_config(all_acm)
            if any(key[0] == "acm_triton" for key in points) and not info["sync_check"]:
                key = next(key for key in points if key[0] == "acm_triton")
                info["sync_check"] = host_sync_free(points[key][0])
        if gpu and opts.cuda_graphs:
            _add_graph_points(points, rows, base, batch)
    return triton_config


def _time_points(opts, points: dict, timer, rng: random.Random, batch: int) -> dict[tuple, list[float]]:
    """Interleaved rounds: each round times every point once (dense a few times more) in a fresh random
    order; returns every point's samples (seconds)."""
    import torch

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
    return samples


def _triton_config(variants: list[str]) -> str:  # pragma: no cover - needs a GPU
    if "acm_triton" not in variants:
        return ""
    from methods.acm.kernels.acm_triton import chosen_configs  # needs Triton

    chosen = chosen_configs()
    return f"up {chosen['up']}; down {chosen['down']}"


def _add_graph_points(points: dict, rows: list[dict], base: dict, batch: int) -> None:  # pragma: no cover - CUDA
    """Add a CUDA-graph replay point ``<variant>@graph`` for every capturable point (after warm-up)."""
    for key, (fn, fields) in list(points.items()):
        if fields["variant"] not in CAPTURABLE:
            continue
        graph_fields = {**fields, "variant": fields["variant"] + GRAPH}
        try:
            points[(key, GRAPH)] = (capture(fn), graph_fields)
        except Exception as err:  # recorded, not raised
            rows.append({**base, "batch": batch, **graph_fields,
                         "status": f"capture failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}"})


def main(argv: list[str]) -> int:
    opts = parse(argv)
    if opts.refit:
        frame, fits = refit(opts.refit, opts.reports_dir if opts.plot else None)
        _print_summary(frame, fits, {"compile_status": "see rows"}, 0.0)
        return 0
    import torch

    opts = resolve(opts, torch)
    started = time.perf_counter()
    rows, info = run(opts)
    frame = finish_rows(rows)
    fits = fit_rows(frame)
    out_dir = Path(opts.results_dir) / "kernels"
    rows_path = out_dir / f"{info['run_id']}.csv"
    fit_path = out_dir / f"{info['run_id']}.fit.csv"
    atomic_write_frame(rows_path, frame)
    atomic_write_frame(fit_path, fits)
    print(rows_path)
    print(fit_path)
    if opts.plot:
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


