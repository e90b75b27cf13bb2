"""The keys of ``python -m bench kernels`` (:mod:`methods.acm.kernels.bench`): the config composed by Hydra
like ``run``'s and ``speed``'s, the checks the verb makes before anything runs, and the defaults that depend on
the device."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench import paths
from bench.errors import UserError
from bench.speed import ALIGN
from methods.acm.kernels.bench_rows import ACM_VARIANTS, COMPILE, DENSE, IDEAL

ALL_VARIANTS = (DENSE, COMPILE, IDEAL) + ACM_VARIANTS
DEFAULT_FRACTIONS = tuple(round(0.1 * i, 1) for i in range(11))
IDEAL_ALIGN = ALIGN  # hidden widths of the ideal narrow MLP are multiples of this (bench speed's too)


@dataclass
class KernelsConfig:
    """The keys of ``python -m bench kernels`` (a Hydra scenario beside ``run``'s and ``speed``'s; 0 and empty
    values mean the defaults :func:`resolve` fills in)."""

    device: str = ""
    dtype: str = "fp32"
    batch: list[int] = field(default_factory=list)
    main_batch: int = 0
    tokens: int = 197
    d: int = 768
    n_learners: int = 4
    width: int = 0
    activation: str = "gelu"
    fractions: list[float] = field(default_factory=lambda: list(DEFAULT_FRACTIONS))
    variants: list[str] = field(default_factory=list)
    k_mode: list[str] = field(default_factory=lambda: ["iid"])
    ideal_align: int = 0
    triton_gather: str = "once"
    cuda_graphs: bool = True
    min_run_s: float = 0.0
    rounds: int = 3
    threads: int = 2
    seed: int = 0
    results_dir: str = "results"
    reports_dir: str = "reports"
    full_breakdown: bool = False
    plot: bool = True
    refit: str = ""
    quick: bool = False


KEYS = {
    "device": "cpu or cuda (default: cuda if available)",
    "dtype": "fp32, fp16 or bf16",
    "batch": "batch sizes, each swept over all fractions (default cpu: 1,2,4,8; cuda: 1,8,32,128)",
    "main_batch": "batch of the main panel (0: 8 on cpu, 128 on cuda, else the largest)",
    "tokens": "tokens per sample",
    "d": "model width",
    "n_learners": "learners per ACM layer",
    "width": "learner width (0: d)",
    "activation": "gelu, relu or none",
    "fractions": "executed fractions in [0, 1]",
    "variants": f"paths to time, of {', '.join(ALL_VARIANTS)} (empty: all but acm_masked; acm_triton only on cuda)",
    "k_mode": "learner-count draws: iid and/or equal",
    "ideal_align": f"hidden widths of ideal_narrow are multiples of this (0: {IDEAL_ALIGN}; quick: 16)",
    "triton_gather": "acm_triton: gather X into sorted order once, or in_load (inside the GEMM loads)",
    "cuda_graphs": "CUDA: also time the CUDA-graph-captured variants (<variant>@graph)",
    "min_run_s": "CPU: blocked_autorange min_run_time per point and round (0: 0.3); GPU: do_bench rep time in s "
                 "(0: 0.1)",
    "rounds": "interleaved measurement rounds",
    "threads": "CPU threads (torch.set_num_threads and the timer); on a shared, loaded machine use 1: with 2 "
               "OpenMP threads every parallel op waits at a barrier for a descheduled thread",
    "seed": "seed of the weights, inputs and learner counts",
    "results_dir": "rows go to <results_dir>/kernels/",
    "reports_dir": "the figure goes to <reports_dir>/kernel_latency.png",
    "full_breakdown": "measure every variant and k mode at every batch (default: batches other than the main "
                      "one measure dense_eager and the fastest ACM variant, first k mode)",
    "plot": "draw the figure",
    "refit": "measure nothing: recompute this rows file's fit table and redraw the figure from it",
    "quick": "tiny smoke configuration (tokens 16, d 32, N 4x16, batches 1,2, f 0,0.5,1, 1 round)",
}
CHOICES = {"device": ("", "cpu", "cuda"), "dtype": ("fp32", "fp16", "bf16"), "activation": ("gelu", "relu", "none"),
           "triton_gather": ("once", "in_load")}
LIST_CHOICES = {"variants": ALL_VARIANTS, "k_mode": ("iid", "equal")}


def parse(args: list[str]) -> KernelsConfig:
    """key=value arguments -> KernelsConfig, composed by Hydra (:func:`bench.config.compose_scenario`), its
    choices checked; a bad one raises UserError with one line."""
    from bench.config import compose_scenario

    opts = compose_scenario("kernels", KernelsConfig, args)
    for key, allowed in CHOICES.items():
        if getattr(opts, key) not in allowed:
            raise UserError(f"kernels: {key}={getattr(opts, key)!r}; choose {', '.join(a for a in allowed if a)}")
    for key, allowed in LIST_CHOICES.items():
        bad = [v for v in getattr(opts, key) if v not in allowed]
        if bad:
            raise UserError(f"kernels: {key}: unknown {', '.join(bad)}; choose from {', '.join(allowed)}")
    opts.argv = list(args)
    return opts


def check(opts: KernelsConfig) -> None:
    """What composing cannot check, before anything runs: UserError with one line."""
    bad = [f for f in opts.fractions if not 0.0 <= f <= 1.0]
    if bad:
        raise UserError(f"kernels: fractions must lie in [0, 1], got {', '.join(f'{f:g}' for f in bad)}")
    for key in ("rounds", "threads", "tokens", "d", "n_learners"):
        if getattr(opts, key) < 1:
            raise UserError(f"kernels: {key} must be >= 1, got {getattr(opts, key)}")
    if any(b < 1 for b in opts.batch):
        raise UserError(f"kernels: batch sizes must be >= 1, got {opts.batch}")
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
    if not opts.device:
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
