"""The arguments of ``python -m bench kernels`` (:mod:`methods.acm.kernels.bench`): the parser, the checks
the verb makes before anything runs, and the defaults that depend on the device."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import paths
from bench.errors import UserError
from bench.speed import ALIGN
from methods.acm.kernels.bench_rows import ACM_VARIANTS, COMPILE, DENSE, IDEAL

ALL_VARIANTS = (DENSE, COMPILE, IDEAL) + ACM_VARIANTS
DEFAULT_FRACTIONS = tuple(round(0.1 * i, 1) for i in range(11))
IDEAL_ALIGN = ALIGN  # hidden widths of the ideal narrow MLP are multiples of this (bench speed's too)


def parser() -> argparse.ArgumentParser:
    """The verb's arguments (``bench kernels`` checks them with this parser before running)."""
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


def check(opts: argparse.Namespace) -> None:
    """What the parser cannot check, before anything runs: UserError with one line."""
    bad = [f for f in opts.fractions if not 0.0 <= f <= 1.0]
    if bad:
        raise UserError(f"kernels: --fractions must lie in [0, 1], got {', '.join(f'{f:g}' for f in bad)}")
    for flag, value in (("--rounds", opts.rounds), ("--threads", opts.threads), ("--tokens", opts.tokens),
                        ("--d", opts.d), ("--n-learners", opts.n_learners)):
        if value < 1:
            raise UserError(f"kernels: {flag} must be >= 1, got {value}")
    if any(b < 1 for b in opts.batch or []):
        raise UserError(f"kernels: --batch sizes must be >= 1, got {opts.batch}")
    if opts.refit and not Path(opts.refit).is_file():
        raise UserError(f"kernels: --refit {opts.refit}: no such rows file; give a results/kernels/<id>.csv")
    if opts.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("kernels: --device cuda but no CUDA device is available; use --device cpu")
    if not opts.refit:
        paths.check_writable("--results-dir", opts.results_dir)
        if not opts.no_plot:
            paths.check_writable("--reports-dir", opts.reports_dir)


def resolve(opts: argparse.Namespace, torch) -> argparse.Namespace:
    """The defaults that depend on the device and on ``--quick``, filled in."""
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
