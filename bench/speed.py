"""``python -m bench speed``: does a method's saving become wall-clock time at a paper's model size?

    python -m bench speed method=acm,moefication task=imagenet arch=b16 fraction=0.25,0.5,0.75,1 batch=1 threads=1

What runs (the ACM paper's Fig. 9 protocol carried to whole models):

1. The task builds its backbone at a named paper size with random weights (the task's ``speed`` module,
   ``tasks/<t>/speed.py`` or the one its ``TaskSpec.speed`` names: an ``ARCHS`` table of :class:`SpeedArch`
   and ``build(arch) -> SpeedBackbone``).  Only time and cost
   are measured, never quality.
2. Each method converts a copy of that backbone and FORCES its own decisions to a target executed
   fraction with random draws of the right mean (the method's forcer: ``FORCER``, a :class:`Forcer`, in
   ``methods/<m>/speed.py``, or the ``module:Class`` its ``MethodSpec.speed`` names): learners per token (ACM), experts per token
   (MoEfication), tokens kept per layer (A-ViT), exit block per sample (early exit), gates (CCT).  The
   method's gates/routers still run on the real input (their cost counts); only their choices are
   replaced, once per point, before timing.
3. Cost, before any timing: MACs per sample from the method's decision log (``Forcer.sample_macs``) and
   from the dispatch-level counter (:mod:`bench.cost`) on the same forced call; a disagreement over 1%
   stops the run (one line, nothing written).  The dense backbone's MACs come from the counter.
4. Timing: the dense backbone and every (method, fraction) point are timed in ONE process, in ``rounds``
   rounds of a fresh random order (interleaved against drift), with the timer of the kernel benchmark
   (:func:`bench.kernels.timer.device_timer`: ``torch.utils.benchmark`` blocked_autorange on CPU with an
   explicit thread count; ``triton.testing.do_bench`` on CUDA).  ``os.getloadavg()`` is read after every
   timing and stored beside it, and so are the CPUs other processes kept busy during it
   (:class:`bench.timing.OtherCpus`, which neither lags behind nor counts the timing's own threads).  On
   CUDA each point is also captured as a CUDA graph (batches up to ``graph_max_batch``) and timed as a
   replay; a path that synchronises with the host fails capture and the failure is recorded in that row's
   ``status``.
5. Rows: one file per point under ``results/speed/<run_id>/`` (atomic writes), with ``time_ratio`` = the
   median over rounds of (point median / dense median of the same round), ``macs_ratio`` = method MACs /
   dense MACs and ``speed_efficiency`` = macs_ratio / time_ratio = (dense time / method time) / (dense
   MACs / method MACs): 1 = the saving in MACs becomes the same saving in time.  ``time_ratio_min`` (the
   fastest call of the point over the fastest dense call) is a secondary estimate that a loaded machine
   disturbs less; ``loadavg_1m`` lists the load average after each round's timing of the point,
   ``other_cpus`` the CPUs other processes kept busy during it (``other_cpus_mean``: their mean).

Layering: this module knows no method or task; it finds both through the registry's specs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import random
import shlex
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bench import paths, provenance, registry
from bench.errors import UserError
from bench.params import param
from bench.kernels.graphs import capture
from bench.kernels.timer import device_timer, median_iqr, versions
from bench.results import atomic_write_frame

# ------------------------------------------------------------------------------------------ the interfaces


@dataclass(frozen=True)
class Stack:
    """One transformer stack: width, depth, heads, MLP size."""

    d_model: int
    layers: int
    heads: int
    mlp: int


@dataclass(frozen=True)
class SpeedArch:
    """A named model size of a task.  ``decoder`` is the decoder stack of an encoder-decoder task (None:
    encoder only); ``length`` the input length the task times (image side in px, audio seconds, source
    tokens: the task says which in ``note``)."""

    name: str
    encoder: Stack
    decoder: Stack | None = None
    length: float = 0.0
    note: str = ""


@dataclass
class SpeedBackbone:
    """A task's backbone at a speed arch, with random weights, and how to make its input."""

    model: Any  # nn.Module: the dense backbone (a skeleton Encoder or EncoderDecoder)
    example: Callable[[int, Any], Any]  # (batch, torch.Generator) -> the model's input
    tokens: int  # tokens per sample entering the (encoder) blocks
    capabilities: tuple[str, ...] = ("encoder",)  # e.g. "encoder", "encoder-decoder", "token-outputs"
    classes: int = 0  # output classes of a pooled head (0: per-token or seq2seq outputs)


class Forcer:
    """A method's decision forcer (``FORCER`` in ``methods/<m>/speed.py``, or named by ``MethodSpec.speed``).

    ``cfg`` is the method's config with its defaults (its dataclass instance).  A forcer converts a copy of
    the dense backbone (random weights for whatever the method adds), draws decisions with a given mean
    executed fraction, installs them (cheap, host-side: called inside every timed call), and turns the
    method's own decision log of the last forward into MACs per sample."""

    decisions: str = ""  # what is forced, for the rows (e.g. "learners per token")

    def __init__(self, cfg: Any):
        self.cfg = cfg

    def supports(self, backbone: SpeedBackbone) -> str | None:
        """None when the forcer handles this backbone, else the reason it does not."""
        return None

    def convert(self, dense: Any, backbone: SpeedBackbone) -> Any:
        raise NotImplementedError

    def draw(self, model: Any, fraction: float, batch: int, backbone: SpeedBackbone, generator) -> Any:
        """Decisions for one input batch with mean executed fraction ``fraction``."""
        raise NotImplementedError

    def apply(self, model: Any, decisions: Any) -> None:
        raise NotImplementedError

    def executed_fraction(self, model: Any, decisions: Any) -> float:
        """The method's own executed fraction of the drawn decisions (what its knob controls)."""
        return math.nan

    def sample_macs(self, model: Any, inputs: Any) -> Any:
        """MACs per sample ([B] tensor) of the last forward, from the method's decision log."""
        raise NotImplementedError


def counts(shape: tuple[int, ...], n: int, fraction: float, minimum: int, generator) -> Any:
    """Random integer counts in [minimum, n] with mean count / n = ``fraction`` (int64 tensor of ``shape``).

    minimum 0: Binomial(n, fraction) (each unit on with probability f; ACM Fig. 9's random k).  minimum
    m >= 1: m + Binomial(n - m, (f·n - m)/(n - m)) (f·n >= m; below that every entry is m: the method cannot
    go lower, e.g. an ACM projection always runs one learner, a token always runs its first block)."""
    import torch

    numel = math.prod(shape)
    if n <= minimum:
        return torch.full(shape, n, dtype=torch.long)
    p = min(1.0, max(0.0, (fraction * n - minimum) / (n - minimum)))
    draws = torch.bernoulli(torch.full((numel, n - minimum), p, dtype=torch.float64), generator=generator)
    return (minimum + draws.sum(dim=1).long()).view(shape)


def teacher_forced_macs(model: Any, inputs: Any) -> Any:
    """MACs per sample of one teacher-forced forward of a skeleton EncoderDecoder, from its own cost ledger
    (bench/models/seq2seq.py: every executed Linear and attention core charged to its sentence, replaced
    modules through their ``row_macs``, i.e. the method's decision log).  Runs the forward again with the
    decisions in place (counting phase only, never timed)."""
    import torch

    batch = inputs.shape[0]
    model._phase, model._owner = "encoder", torch.arange(batch, device=inputs.device)
    with model._cost_ledger(batch, inputs.device):
        model(inputs)
    return model.last_sample_macs


# ------------------------------------------------------------------------------------------ configuration


@dataclass
class SpeedConfig:
    """The keys of ``python -m bench speed`` (a Hydra scenario beside ``run``'s; ranges and choices checked
    by :func:`bench.params.check_ranges`)."""

    method: list[str] = param(["acm"], help="methods to time (comma list; each must define a speed forcer)")
    task: str = param("imagenet", help="the task whose backbone is built")
    arch: str = param("b16", help="the task's named speed size (see the error message for the list)")
    fraction: list[float] = param([0.25, 0.5, 0.75, 1.0], min=0.0, max=1.0,
                                  help="target executed fractions in [0, 1] (comma list)")
    batch: int = param(1, min=1, help="batch size of every timed call (1 = latency; e.g. 32 = throughput)")
    threads: int = param(1, min=1, help="CPU threads (torch.set_num_threads and the timer)")
    device: str = param("cpu", choices=("cpu", "cuda"), help="cpu or cuda")
    dtype: str = param("fp32", choices=("fp32", "fp16", "bf16"), help="fp32, fp16 or bf16 (bf16 is meant for cuda)")
    rounds: int = param(3, min=1, help="interleaved timing rounds (each times every point once, in a fresh "
                                       "random order)")
    min_run_s: float = param(0.0, min=0.0, help="seconds per timing of one point in one round (0: cpu 1.0, "
                                                "cuda 0.1)")
    cuda_graphs: bool = param(True, help="cuda: also time every point as a CUDA-graph replay (batch <= "
                                         "graph_max_batch)")
    graph_max_batch: int = param(32, min=1, help="largest batch captured in CUDA graphs")
    seed: int = param(0, min=0, help="seed of the random weights, inputs and decisions")
    results_dir: str = param("results", help="rows go to <results_dir>/speed/<run_id>/")
    max_load: float = param(0.0, min=0.0, help="CPU timing starts only when the 1-minute load average is at "
                                               "most this (0: the CPU count)")
    wait_s: float = param(300.0, min=0.0, help="seconds to wait for the load to fall to max_load before "
                                               "refusing (0: refuse at once)")
    narrow: bool = param(True, help="also time the aligned narrow dense ideal: the dense model with every MLP "
                                    "narrowed to each fraction (widths rounded to 64)")
    short: bool = param(True, help="also time the fewer-tokens dense ideal: the dense model on the first "
                                   "round(f·T) of its T tokens (every weight read, fewer rows; encoders only)")


NARROW = "narrow_dense"  # the method name of the aligned narrow dense ideal's rows
SHORT = "short_dense"  # the method name of the fewer-tokens dense ideal's rows
IDEALS = (NARROW, SHORT)  # the yardsticks timed beside the methods (no decisions of their own)
ALIGN = 64  # hidden widths of the narrow dense ideal are multiples of this (GEMM tiles)


def aligned_width(fraction: float, hidden: int, align: int = ALIGN) -> int:
    """Hidden width of a narrow MLP at fraction f: f·hidden rounded (half up) to a multiple of ``align`` and
    clipped to [0, hidden] (a hidden width that is not a multiple of ``align`` keeps its full width at
    f = 1)."""
    if fraction >= 1.0:
        return hidden
    return max(0, min(hidden, int(math.floor(fraction * hidden / align + 0.5)) * align))


def narrowed(arch: SpeedArch, fraction: float) -> SpeedArch:
    """``arch`` with every stack's MLP at :func:`aligned_width` (at least one tile): the static model whose
    MLPs compute what a conditional MLP executing fraction f of its width would, with no gathers."""
    def narrow(stack: Stack | None) -> Stack | None:
        if stack is None:
            return None
        return dataclasses.replace(stack, mlp=max(min(ALIGN, stack.mlp), aligned_width(fraction, stack.mlp)))
    return dataclasses.replace(arch, encoder=narrow(arch.encoder), decoder=narrow(arch.decoder))


def parse(args: list[str]) -> SpeedConfig:
    """key=value arguments -> SpeedConfig, composed by Hydra like ``bench run``'s config
    (:func:`bench.config.compose_scenario`); a bad one raises UserError with one line."""
    from bench.config import compose_scenario

    return _check(compose_scenario("speed", SpeedConfig, args))


def _check(cfg: SpeedConfig) -> SpeedConfig:
    """What the declared ranges cannot say: both lists need a value."""
    for key in ("method", "fraction"):
        if not getattr(cfg, key):
            raise UserError(f"speed: {key}= is empty; give at least one value")
    return cfg


def wait_until_quiet(max_load: float, wait_s: float, log: Callable[[str], None] = print,
                     loadavg: Callable[[], float] = lambda: os.getloadavg()[0],
                     sleep: Callable[[float], None] = time.sleep, poll_s: float = 10.0) -> float:
    """Wait until the 1-minute load average is at most ``max_load`` (0: the CPU count), at most ``wait_s``
    seconds; returns the load then, or raises a one-line UserError (timing on a loaded machine is noise)."""
    limit = max_load or float(os.cpu_count() or 1)
    load, waited = loadavg(), 0.0
    if load > limit and wait_s > 0:
        log(f"load {load:.2f} > {limit:g}: waiting up to {wait_s:g} s for a quiet machine")
    while load > limit and waited < wait_s:
        sleep(poll_s)
        waited += poll_s
        load = loadavg()
    if load > limit:
        raise UserError(f"speed: the 1-minute load average is {load:.2f}, above max_load={limit:g} (the machine "
                        f"is busy; timings would be noise); stop the other work, or set max_load / wait_s")
    return load


def speed_module(spec: Any) -> str:
    """The module of a method's forcer / a task's speed sizes, as its spec declares it (``speed=``); "" for
    none."""
    return str(getattr(spec, "speed", "") or "").split(":")[0]


def _import(name: str):
    """The module ``name``, or None when it does not exist (an error inside it propagates)."""
    import importlib
    import importlib.util

    if not name:
        return None
    try:
        if importlib.util.find_spec(name) is None:
            return None
    except ModuleNotFoundError:
        return None
    return importlib.import_module(name)


def resolve(cfg: SpeedConfig):
    """(task spec, speed module, arch, [(method name, forcer class, method config class)]) or UserError."""
    task = registry.task_spec(cfg.task)
    module = _import(speed_module(task))
    if module is None or not hasattr(module, "ARCHS"):
        have = [t for t, s in registry.tasks().items() if _import(speed_module(s)) is not None]
        raise UserError(f"speed: task {cfg.task} defines no speed backbones; tasks that do: {', '.join(have)}")
    if cfg.arch not in module.ARCHS:
        raise UserError(f"speed: {cfg.task} has no arch '{cfg.arch}'; choose one of {', '.join(module.ARCHS)}")
    forcers = []
    for name in cfg.method:
        spec = registry.method_spec(name)
        forcer = _import(speed_module(spec))
        attr = spec.speed.split(":")[1] if ":" in getattr(spec, "speed", "") else "FORCER"
        if forcer is None or not hasattr(forcer, attr):
            have = [m for m, s in registry.methods().items() if _import(speed_module(s)) is not None]
            raise UserError(f"speed: method {name} defines no speed forcer; methods that do: {', '.join(have)}")
        reason = registry.support_reason(spec, task)
        if reason:
            raise UserError(f"speed: method {name} does not apply to task {cfg.task}: {reason}")
        forcers.append((name, getattr(forcer, attr), spec.config))
    return task, module, module.ARCHS[cfg.arch], forcers


# ------------------------------------------------------------------------------------------ the benchmark

COLUMNS = ["run_id", "task", "arch", "tokens", "method", "decisions", "fraction", "executed_fraction",
           "device", "device_name", "dtype", "threads", "batch", "cuda_graph", "macs_per_sample",
           "macs_counted_per_sample", "macs_dense_per_sample", "macs_ratio", "uncounted_ops", "median_ms",
           "iqr_ms", "min_ms", "n_samples", "dense_median_ms", "time_ratio", "time_ratio_rounds", "time_ratio_min",
           "speed_efficiency", "throughput_per_s", "loadavg_1m", "loadavg_1m_mean", "other_cpus", "other_cpus_mean",
           "rounds", "min_run_s",
           "status", "torch_version", "triton_version", "cpus", "load_before", "load_after", "git_sha", "git_dirty",
           "command", "timestamp"]


@dataclass
class Point:
    method: str
    fraction: float
    fn: Callable[[], object]
    fields: dict
    graph: bool = False
    samples: list = field(default_factory=list)  # per round: list of per-call seconds
    load: list = field(default_factory=list)  # per round: 1-minute load average after the timing
    others: list = field(default_factory=list)  # per round: CPUs other processes kept busy during the timing
    forced: tuple = ()  # a method point's (forcer, model, inputs): what ``fn`` calls (not written to rows)


def _dtype(torch, name: str):
    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def prepare(cfg: SpeedConfig, argv: list[str], log: Callable[[str], None] = print
            ) -> tuple[list[Point], dict, float]:
    """Build the dense backbone and every forced (method, fraction) point and count their MACs (never timed):
    (points, the fields every row shares, dense MACs per sample).  The dense point comes first; the points'
    callables must run under ``torch.inference_mode()``.  Errors: UserError (one line)."""
    import copy

    import torch

    from bench import cost  # imports torch: not at the module's import (``bench speed --help``)

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise UserError("speed: device=cuda but no CUDA device is available; use device=cpu")
    _, module, arch, forcer_specs = resolve(cfg)
    device, dtype = torch.device(cfg.device), _dtype(torch, cfg.dtype)
    gpu = cfg.device == "cuda"
    if not gpu:
        torch.set_num_threads(cfg.threads)
    min_run_s = cfg.min_run_s or (0.1 if gpu else 1.0)
    torch.manual_seed(cfg.seed)
    backbone: SpeedBackbone = module.build(arch)
    dense = backbone.model.eval()
    forcers = []
    for name, cls, config in forcer_specs:
        forcer = cls(config())
        reason = forcer.supports(backbone)
        if reason:
            raise UserError(f"speed: method {name} cannot force its decisions on {cfg.task}/{cfg.arch}: {reason}")
        torch.manual_seed(cfg.seed + 1)
        model = forcer.convert(copy.deepcopy(dense), backbone).eval().to(device, dtype)
        forcers.append((name, forcer, model))
    dense = dense.to(device, dtype)
    gen = torch.Generator().manual_seed(cfg.seed)
    x = backbone.example(cfg.batch, gen)
    x = x.to(device, dtype) if x.is_floating_point() else x.to(device)
    run_id = (dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
              + f"-{cfg.device}-{cfg.dtype}-{cfg.task}-{cfg.arch}-b{cfg.batch}"
              + (f"-t{cfg.threads}" if not gpu else ""))
    torch_version, triton_version = versions()
    base = {"run_id": run_id, "task": cfg.task, "arch": cfg.arch, "tokens": backbone.tokens,
            "device": cfg.device, "device_name": provenance.device_name(cfg.device), "dtype": cfg.dtype,
            "threads": cfg.threads if not gpu else math.nan, "batch": cfg.batch, "rounds": cfg.rounds,
            "min_run_s": min_run_s, "torch_version": torch_version, "triton_version": triton_version,
            "cpus": os.cpu_count() or 0, "load_before": math.nan, "load_after": math.nan,
            "git_sha": provenance.git_sha(), "git_dirty": provenance.git_dirty(),
            "command": "python -m bench speed " + shlex.join(argv), "timestamp": provenance.timestamp()}

    with torch.inference_mode():
        points = [_ideal_point("dense", 1.0, dense, x, cfg.batch, "", 1.0)]  # counted like the static ideals
        dense_macs = points[0].fields["macs_per_sample"]
        for name, forcer, model in forcers:
            for fraction in cfg.fraction:
                decisions = forcer.draw(model, fraction, cfg.batch, backbone, gen)

                def call(forcer=forcer, model=model, decisions=decisions):
                    forcer.apply(model, decisions)  # host-side only: the gates run, their choices are replaced
                    return model(x)

                with cost.count_macs() as counter:  # counting phase: never timed
                    call()
                counted = counter.report.macs / cfg.batch
                logged = float(forcer.sample_macs(model, x).double().mean())
                if abs(counted - logged) > 0.01 * max(counted, 1.0):
                    raise UserError(f"speed: {name} f={fraction:g}: counter {counted:.6g} MACs vs decision log "
                                    f"{logged:.6g} MACs per sample disagree by >1%; nothing written")
                points.append(Point(name, fraction, call, {
                    "method": name, "decisions": forcer.decisions, "fraction": fraction,
                    "executed_fraction": forcer.executed_fraction(model, decisions), "macs_per_sample": logged,
                    "macs_counted_per_sample": counted, "uncounted_ops": ";".join(counter.report.uncounted)},
                    forced=(forcer, model, x)))
                log(f"{name} f={fraction:g}: {logged / dense_macs:.3f} of dense MACs (counter {counted / dense_macs:.3f})")
        if cfg.narrow:
            points += _narrow_points(cfg, module, arch, x, dense_macs, log)
        if cfg.short:
            points += _short_points(cfg, backbone, x, dense_macs, log)
    return points, base, dense_macs


def _ideal_point(name: str, fraction: float, model, x, batch: int, decisions: str, executed: float) -> Point:
    """A static model's point (dense or an ideal): its MACs per sample are the counter's on one call (no
    decision log)."""
    from bench import cost

    with cost.count_macs() as counter:
        model(x)
    macs = counter.report.macs / batch
    return Point(name, fraction, lambda: model(x), {
        "method": name, "decisions": decisions, "fraction": fraction, "executed_fraction": executed,
        "macs_per_sample": macs, "macs_counted_per_sample": macs, "uncounted_ops": ";".join(counter.report.uncounted)})


def _narrow_points(cfg: SpeedConfig, module, arch: SpeedArch, x, dense_macs: float,
                   log: Callable[[str], None]) -> list[Point]:
    """The aligned narrow dense ideal at every fraction (:func:`narrowed`; random weights, seeded like
    dense): the time a static model takes for the MACs a conditional MLP would execute.  Its MACs are the
    counter's (no decisions to log); its executed fraction is the encoder MLP's width over the dense one's."""
    import torch

    device, dtype = torch.device(cfg.device), _dtype(torch, cfg.dtype)
    points = []
    for fraction in cfg.fraction:
        small = narrowed(arch, fraction)
        torch.manual_seed(cfg.seed)
        model = module.build(small).model.eval().to(device, dtype)
        point = _ideal_point(NARROW, fraction, model, x, cfg.batch, f"MLP width (multiple of {ALIGN})",
                             small.encoder.mlp / arch.encoder.mlp)
        points.append(point)
        log(f"{NARROW} f={fraction:g}: MLP {small.encoder.mlp} of {arch.encoder.mlp}, "
            f"{point.fields['macs_per_sample'] / dense_macs:.3f} of dense MACs")
    return points


def kept_tokens(fraction: float, tokens: int) -> int:
    """Tokens the fewer-tokens ideal keeps at fraction f: round(f·T) (half up), at least one."""
    return max(1, min(tokens, int(math.floor(fraction * tokens + 0.5))))


def short_model(dense, keep: int):
    """The dense model on its first ``keep`` tokens: a shallow copy of ``dense`` that shares every module (the
    same weights, nothing copied) except ``embed``, whose output is cut (:class:`FirstTokens`).  The dense
    model is left as it was; moving or casting the copy (``.to``, ``.half``) would move dense's weights too."""
    import copy

    from bench.models.transformer import FirstTokens

    model = copy.copy(dense)  # a new __dict__ holding dense's own module objects
    model._modules = {**dense._modules, "embed": FirstTokens(dense.embed, keep)}
    return model


def _short_points(cfg: SpeedConfig, backbone: SpeedBackbone, x, dense_macs: float,
                  log: Callable[[str], None]) -> list[Point]:
    """The fewer-tokens dense ideal at every fraction (:func:`short_model` at :func:`kept_tokens`): every block
    reads every weight and multiplies fewer rows.  A reference for per-token decisions at a small batch:
    when the tokens of a batch between them use every unit, a method reads every weight as dense does, and
    with about f·T rows per product in every layer (decisions spread evenly over the layers) it lands here
    at best.  Its MACs are the counter's (the embedding runs on every input position before the cut, while
    attention shrinks with the square of the tokens); its executed fraction is kept / T.  Encoders only
    ([] otherwise, with a log line).  ``backbone.model`` is the dense model, already on the timing device."""
    if "encoder" not in backbone.capabilities:
        log(f"{SHORT}: skipped (the backbone is not an encoder: {', '.join(backbone.capabilities)})")
        return []
    points = []
    for fraction in cfg.fraction:
        keep = kept_tokens(fraction, backbone.tokens)
        point = _ideal_point(SHORT, fraction, short_model(backbone.model, keep), x, cfg.batch,
                             "tokens kept (the first round(f·T))", keep / backbone.tokens)
        points.append(point)
        log(f"{SHORT} f={fraction:g}: {keep} of {backbone.tokens} tokens, "
            f"{point.fields['macs_per_sample'] / dense_macs:.3f} of dense MACs")
    return points


def run(cfg: SpeedConfig, argv: list[str], log: Callable[[str], None] = print) -> list[dict]:
    """Measure every point; returns the rows (nothing written).  Errors: UserError (one line)."""
    import torch

    points, base, dense_macs = prepare(cfg, argv, log)
    gpu = cfg.device == "cuda"
    timer = device_timer(cfg.device, base["min_run_s"], cfg.threads)
    with torch.inference_mode():
        rows: list[dict] = []
        if not gpu:
            base["load_before"] = wait_until_quiet(cfg.max_load, cfg.wait_s, log)
        for point in points:  # warm-up (allocator, lazy init, autotuning)
            point.fn()
        if gpu and cfg.cuda_graphs and cfg.batch <= cfg.graph_max_batch:  # pragma: no cover - needs CUDA
            rows += _add_graphs(points, base, torch)
        time_rounds(points, cfg, timer, log)
        base["load_after"] = os.getloadavg()[0]
    return rows + point_rows(points, base, dense_macs)


def time_rounds(points: list[Point], cfg: SpeedConfig, timer: Callable, log: Callable[[str], None] = print) -> None:
    """Time every point once per round, ``cfg.rounds`` rounds, each in a fresh random order (interleaved against
    drift): appends the timer's samples, the 1-minute load average after and the CPUs other processes kept
    busy during each timing (:class:`bench.timing.OtherCpus`) to each point."""
    from bench.timing import OtherCpus

    rng = random.Random(cfg.seed)
    for r in range(cfg.rounds):
        order = list(range(len(points)))
        rng.shuffle(order)
        start = time.perf_counter()
        for i in order:
            others = OtherCpus()
            points[i].samples.append(timer(points[i].fn))
            points[i].others.append(others.stop())
            points[i].load.append(os.getloadavg()[0])
        busy = statistics.fmean(points[i].others[-1] for i in order)
        log(f"round {r + 1}/{cfg.rounds}: {len(points)} points, {time.perf_counter() - start:.1f} s, "
            f"load {os.getloadavg()[0]:.2f}, other processes kept {busy:.2f} CPUs busy")


def _add_graphs(points: list[Point], base: dict, torch) -> list[dict]:  # pragma: no cover - needs CUDA
    """Capture every eager point as a CUDA graph (a point that syncs with the host fails: recorded)."""
    failed = []
    for point in list(points):
        try:
            points.append(Point(point.method, point.fraction, capture(point.fn), dict(point.fields), graph=True))
        except Exception as err:  # recorded in the row, not raised
            torch.cuda.synchronize()
            failed.append({**base, **point.fields, "cuda_graph": True,
                           "status": f"capture failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}"})
    return failed


def point_rows(points: list[Point], base: dict, dense_macs: float) -> list[dict]:
    """One row per timed point: its fields, the shared ones (``base``) and its time ratio to the dense point of
    the same round (median over rounds), efficiency and load."""
    rows = []
    for point in points:
        dense = next(p for p in points if p.method == "dense" and p.graph == point.graph)
        per_round = [statistics.median(s) / statistics.median(d) for s, d in zip(point.samples, dense.samples)]
        pooled = [t for s in point.samples for t in s]
        med, iqr = median_iqr(pooled)
        dense_pooled = [t for s in dense.samples for t in s]
        dense_med, _ = median_iqr(dense_pooled)
        ratio = statistics.median(per_round)
        macs_ratio = point.fields["macs_per_sample"] / dense_macs
        rows.append({**base, **point.fields, "cuda_graph": point.graph, "macs_dense_per_sample": dense_macs,
                     "macs_ratio": macs_ratio, "median_ms": med * 1e3, "iqr_ms": iqr * 1e3,
                     "min_ms": min(pooled) * 1e3, "n_samples": len(pooled), "dense_median_ms": dense_med * 1e3,
                     "time_ratio": ratio, "time_ratio_rounds": ";".join(f"{v:.4f}" for v in per_round),
                     "time_ratio_min": min(pooled) / min(dense_pooled),
                     "speed_efficiency": macs_ratio / ratio, "throughput_per_s": base["batch"] / med,
                     "loadavg_1m": ";".join(f"{v:.2f}" for v in point.load),
                     "loadavg_1m_mean": statistics.fmean(point.load),
                     "other_cpus": ";".join(f"{v:.3f}" for v in point.others),
                     "other_cpus_mean": statistics.fmean(point.others), "status": "ok"})
    return rows


def write(rows: list[dict], results_dir: str | Path) -> list[Path]:
    """One file per point: ``<results_dir>/speed/<run_id>/<method>_f<fraction>[_graph].csv`` (atomic)."""
    import pandas as pd

    written = []
    for row in rows:
        frame = pd.DataFrame([{c: row.get(c, math.nan) for c in COLUMNS}], columns=COLUMNS)
        name = f"{row['method']}_f{row['fraction']:g}" + ("_graph" if row.get("cuda_graph") else "")
        path = Path(results_dir) / "speed" / row["run_id"] / f"{name}.csv"
        atomic_write_frame(path, frame)
        written.append(path)
    return written


def load_rows(results_dir: str | Path = "results"):
    """Every speed row under ``results_dir/speed`` (an empty frame when there are none)."""
    import pandas as pd

    files = sorted(p for p in (Path(results_dir) / "speed").glob("*/*.csv") if not p.name.startswith("."))
    if not files:
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.concat([pd.read_csv(p, keep_default_na=False, na_values=[""]) for p in files], ignore_index=True)
    return frame.reindex(columns=COLUMNS)  # rows of earlier versions lack later columns (NaN)


def main(args: list[str]) -> int:
    """The verb: parse, measure, write, print a summary.  UserError propagates (the CLI prints one line)."""
    cfg = parse(args)
    paths.check_writable("results_dir", cfg.results_dir)
    rows = run(cfg, args)
    written = write(rows, cfg.results_dir)
    print(written[0].parent if written else "no rows")
    for row in rows:
        if row.get("status") != "ok":
            print(f"{row['method']:<12} f={row['fraction']:<5g} graph={row['cuda_graph']}: {row['status']}")
            continue
        print(f"{row['method']:<12} f={row['fraction']:<5g}{' graph' if row['cuda_graph'] else ''} "
              f"MACs {row['macs_ratio']:.3f} x dense, time {row['time_ratio']:.3f} x dense, "
              f"efficiency {row['speed_efficiency']:.2f} ({row['median_ms']:.2f} ms, "
              f"load {row['loadavg_1m_mean']:.2f}, "
              f"other processes {row['other_cpus_mean']:.2f} CPUs)")
    return 0
