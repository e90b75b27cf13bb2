"""The keys of ``python -m bench kernels`` (:mod:`methods.acm.kernels.bench`): the config composed by Hydra
like ``run``'s and ``speed``'s, the checks the verb makes before anything runs, and the defaults that depend on
the device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench import paths
from bench.errors import UserError
from bench.params import param
from bench.speed import ALIGN
from methods.acm.kernels.bench_rows import ACM_VARIANTS, COMPILE, DENSE, IDEAL

ALL_VARIANTS = (DENSE, COMPILE, IDEAL) + ACM_VARIANTS
DEFAULT_FRACTIONS = tuple(round(0.1 * i, 1) for i in range(11))
IDEAL_ALIGN = ALIGN  # hidden widths of the ideal narrow MLP are multiples of this (bench speed's too)


@dataclass
class KernelsConfig:
    """The keys of ``python -m bench kernels`` (a Hydra scenario beside ``run``'s and ``speed``'s; ranges and
    choices checked by :func:`bench.params.check_ranges`; ``auto``, 0 and empty values mean the defaults
    :func:`resolve` fills in)."""

    device: str = param("auto", choices=("auto", "cpu", "cuda"), help="cpu or cuda (auto: cuda if available)")
    dtype: str = param("fp32", choices=("fp32", "fp16", "bf16"), help="fp32, fp16 or bf16")
    batch: list[int] = param([], min=1, help="batch sizes, each swept over all fractions (default cpu: 1,2,4,8; "
                                             "cuda: 1,8,32,128)")
    main_batch: int = param(0, min=0, help="batch of the main panel (0: 8 on cpu, 128 on cuda, else the largest)")
    tokens: int = param(197, min=1, help="tokens per sample")
    d: int = param(768, min=1, help="model width")
    n_learners: int = param(4, min=1, help="learners per ACM layer")
    width: int = param(0, min=0, help="learner width (0: d)")
    activation: str = param("gelu", choices=("gelu", "relu", "none"), help="gelu, relu or none")
    fractions: list[float] = param(list(DEFAULT_FRACTIONS), min=0.0, max=1.0, help="executed fractions in [0, 1]")
    variants: list[str] = param([], choices=ALL_VARIANTS,
                                help="paths to time (empty: all but acm_masked; acm_triton only on cuda)")
    k_mode: list[str] = param(["iid"], choices=("iid", "equal"), help="learner-count draws: iid and/or equal")
    ideal_align: int = param(0, min=0, help=f"hidden widths of ideal_narrow are multiples of this (0: "
                                            f"{IDEAL_ALIGN}; quick: 16)")
    triton_gather: str = param("once", choices=("once", "in_load"),
                               help="acm_triton: gather X into sorted order once, or in_load (inside the GEMM loads)")
    cuda_graphs: bool = param(True, help="CUDA: also time the CUDA-graph-captured variants (<variant>@graph)")
    min_run_s: float = param(0.0, min=0.0, help="CPU: blocked_autorange min_run_time per point and round (0: "
                                                "0.3); GPU: do_bench rep time in s (0: 0.1)")
    rounds: int = param(3, min=1, help="interleaved measurement rounds")
    threads: int = param(2, min=1, help="CPU threads (torch.set_num_threads and the timer); on a shared, loaded "
                                        "machine use 1: with 2 OpenMP threads every parallel op waits at a "
                                        "barrier for a descheduled thread")
    seed: int = param(0, min=0, help="seed of the weights, inputs and learner counts")
    results_dir: str = param("results", help="rows go to <results_dir>/kernels/")
    reports_dir: str = param("reports", help="the figure goes to <reports_dir>/kernel_latency.png")
    full_breakdown: bool = param(False, help="measure every variant and k mode at every batch (default: batches "
                                             "other than the main one measure dense_eager and the fastest ACM "
                                             "variant, first k mode)")
    plot: bool = param(True, help="draw the figure")
    refit: str = param("", help="measure nothing: recompute this rows file's fit table and redraw the figure "
                                "from it")
    quick: bool = param(False, help="tiny smoke configuration (tokens 16, d 32, N 4x16, batches 1,2, f 0,0.5,1, "
                                    "1 round)")


def parse(args: list[str]) -> KernelsConfig:
    """key=value arguments -> KernelsConfig, composed by Hydra (:func:`bench.config.compose_scenario`), its
    choices checked; a bad one raises UserError with one line."""
    from bench.config import compose_scenario

    opts = compose_scenario("kernels", KernelsConfig, args)
    opts.argv = list(args)
    return opts


def check(opts: KernelsConfig) -> None:
    """What composing cannot check, before anything runs: UserError with one line."""
    if not opts.fractions:
        raise UserError("kernels: fractions= is empty; give at least one value")
    if opts.refit and not Path(opts.refit).is_file():
        raise UserError(f"kernels: refit={opts.refit}: no such rows file; give a results/kernels/<id>.csv")
    if opts.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("kernels: device=cuda but no CUDA device is available; use device=cpu")
    if not opts.refit:
        paths.check_writable("results_dir", opts.results_dir)
        if opts.plot:
            paths.check_writable("reports_dir", opts.reports_dir)


def resolve(opts: KernelsConfig, torch) -> KernelsConfig:
    """The defaults that depend on the device and on ``--quick``, filled in."""
    if opts.device == "auto":
        opts.device = "cuda" if torch.cuda.is_available() else "cpu"
    if opts.quick:
        opts.tokens, opts.d, opts.n_learners, opts.width = 16, 32, 4, 16
        opts.batch = opts.batch or [1, 2]
        opts.fractions = [0.0, 0.5, 1.0]
        opts.rounds = 1
        opts.min_run_s = opts.min_run_s or 0.01
        opts.ideal_align = opts.ideal_align or 16
        if not opts.variants:
            opts.variants = [DENSE, IDEAL, "acm_naive", "acm_sorted"]
    gpu = opts.device == "cuda"
    if not opts.batch:
        opts.batch = [1, 8, 32, 128] if gpu else [1, 2, 4, 8]
    if not opts.main_batch:
        preferred = 128 if gpu else 8
        opts.main_batch = preferred if preferred in opts.batch else max(opts.batch)
    if not opts.width:
        opts.width = opts.d
    if not opts.ideal_align:
        opts.ideal_align = IDEAL_ALIGN
    if not opts.min_run_s:
        opts.min_run_s = 0.1 if gpu else 0.3
    if not opts.variants:
        opts.variants = [v for v in ALL_VARIANTS if v != "acm_masked" and (gpu or v != "acm_triton")]
    if DENSE not in opts.variants:
        opts.variants = [DENSE] + list(opts.variants)  # the normaliser is always measured
    if "acm_triton" in opts.variants and not gpu:
        print("acm_triton needs CUDA: dropped (its interpreter on CPU is for correctness, not timing)")
        opts.variants = [v for v in opts.variants if v != "acm_triton"]
    return opts
