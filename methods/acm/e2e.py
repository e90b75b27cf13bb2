"""End-to-end ACM latency: an ACM ViT (random gates held at fixed fractions) against the dense ViT.

    python -m methods.acm.e2e --device cuda --dtype bf16            # ViT-B/16, batch 1 and 128
    python -m methods.acm.e2e --device cpu --arch tiny --batch 1 4   # a seconds-long CPU smoke run

What is timed: a randomly initialised ViT (:mod:`bench.models.vit`, B/16 by default: 197 tokens, d 768,
12 blocks) and its ACM conversion (``methods.acm.modules.acmize``: every MLP and q/k/v/o projection,
N = 4 learners, gates of the auto 1% width).  Weights are random: only time and cost are measured, not
quality.  At each fraction f every ACM's gate runs for real on its input and its choices are replaced by
random k held fixed for the run (``ACM.force_k``): MLP ACMs k ~ Binomial(N, f); projection ACMs, which
always run one learner, k = 1 + Binomial(N − 1, (f·N − 1)/(N − 1)) (f·N ≥ 1; below that every token runs one
learner).  The row's ``executed_fraction`` is the cost-weighted learner fraction actually drawn.

Protocol (reference/measurement.md): dense and every ACM fraction are timed in the same process, in
``--rounds`` rounds of a fresh random order (interleaved against drift), per batch size; median and IQR of
the pooled per-call times; ``rel_to_dense`` divides by the dense model of the same batch and the same
mode.  CPU: ``torch.utils.benchmark`` with ``--threads``; CUDA: ``triton.testing.do_bench`` (L2 flushed),
and, unless ``--no-cuda-graphs``, each model is also captured in a CUDA graph after warm-up and timed as a
replay (``cuda_graph`` = True): on CUDA the ACM layers run the Triton path, which has no host sync.

Cost, in a counting phase before any timing: MACs per sample from the decision log
(``methods.acm.modules.sample_macs``) at every point, and from the dispatch-level counter
(:mod:`bench.cost`) at the smallest batch.  A disagreement over 1% stops the run (one line, exit 1,
nothing written).  Rows go to ``results/e2e/<run_id>.csv``; ``bench report`` renders them
(``reports/e2e.md``, a GPU section when CUDA rows exist).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import math
import random
import shlex
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from bench.kernels.acm_torch import random_k
from bench.models.vit import SHAPES, build_vit
from methods.acm import modules as M

COLUMNS = ["run_id", "device", "device_name", "dtype", "arch", "tokens", "batch", "variant", "cuda_graph",
           "fraction", "executed_fraction", "macs_per_sample", "macs_counted_per_sample", "macs_dense_per_sample",
           "median_ms", "iqr_ms", "min_ms", "n_samples", "throughput_per_s", "rel_to_dense", "sync_check",
           "threads", "rounds", "min_run_s", "status", "torch_version", "triton_version", "git_sha", "git_dirty",
           "command", "timestamp"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m methods.acm.e2e", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda if available")
    p.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default=None, help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--arch", choices=sorted(SHAPES), default="b16")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 128])
    p.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 0.75, 1.0])
    p.add_argument("--n-learners", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--min-run-s", type=float, default=None, help="per point and round (default cpu 0.2, cuda 0.1)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (torch.set_num_threads and the timer)")
    p.add_argument("--no-cuda-graphs", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results-dir", default="results")
    return p


def draw_k(shape: tuple[int, ...], n_learners: int, fraction: float, min_k: int, generator: torch.Generator):
    """Random learner counts with mean k/N = ``fraction`` (projection ACMs: at least one learner)."""
    numel = math.prod(shape)
    if min_k == 0:
        return random_k(numel, n_learners, fraction, generator).view(shape)
    if n_learners == 1:
        return torch.ones(shape, dtype=torch.long)
    p = min(1.0, max(0.0, (fraction * n_learners - 1) / (n_learners - 1)))
    return (1 + random_k(numel, n_learners - 1, p, generator)).view(shape)


def _models(opts, shape, dtype, device):
    torch.manual_seed(opts.seed)
    dense = build_vit(shape).eval()
    acm = copy.deepcopy(dense)
    M.acmize(acm, M.ACMSettings(n_learners=opts.n_learners))
    return dense.to(device, dtype), acm.eval().to(device, dtype)


def _check(opts) -> str | None:
    if opts.device == "cuda" and not torch.cuda.is_available():
        return "--device cuda: no CUDA device is available; use --device cpu"
    bad = [f for f in opts.fractions if not 0.0 <= f <= 1.0]
    if bad:
        return f"--fractions must lie in [0, 1]; got {bad}"
    if min(opts.batch) < 1 or opts.rounds < 1:
        return "--batch values and --rounds must be >= 1"
    return None


def run(opts) -> tuple[list[dict], str | None]:
    """Measure every point; returns (rows, error line or None)."""
    from bench import cost, provenance
    from bench.kernels import bench as kernel_bench

    device = torch.device(opts.device)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[opts.dtype]
    gpu = opts.device == "cuda"
    graphs = gpu and not opts.no_cuda_graphs
    if not gpu:
        torch.set_num_threads(opts.threads)
    shape = SHAPES[opts.arch]
    dense, acm = _models(opts, shape, dtype, device)
    layers = M.acm_layers(acm)
    timer = kernel_bench._timer(SimpleNamespace(device=opts.device, min_run_s=opts.min_run_s, threads=opts.threads,
                                                quick=False), torch)
    torch_version, triton_version = kernel_bench._versions()
    run_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{opts.device}-{opts.dtype}-{opts.arch}"
    base = {"run_id": run_id, "device": opts.device, "device_name": provenance.device_name(opts.device),
            "dtype": opts.dtype, "arch": opts.arch, "tokens": shape.tokens, "threads": opts.threads if not gpu
            else math.nan, "rounds": opts.rounds, "min_run_s": opts.min_run_s, "torch_version": torch_version,
            "triton_version": triton_version, "git_sha": provenance.git_sha(), "git_dirty": provenance.git_dirty(),
            "command": "python -m methods.acm.e2e " + shlex.join(opts.argv), "timestamp": provenance.timestamp()}
    rng = random.Random(opts.seed)
    gen = torch.Generator().manual_seed(opts.seed)
    rows: list[dict] = []
    smallest = min(opts.batch)
    with torch.inference_mode():  # dense MACs per sample do not depend on the batch
        one = torch.randn(1, shape.channels, shape.image_size, shape.image_size).to(device, dtype)
        macs_dense = float(cost.count(dense, one).macs)
    for batch in opts.batch:
        x = torch.randn(batch, shape.channels, shape.image_size, shape.image_size,
                        generator=torch.Generator().manual_seed(opts.seed + batch)).to(device, dtype)
        points: dict[tuple, tuple] = {}  # key -> (callable, fields)
        points[("dense",)] = (lambda: dense(x), {"variant": "dense", "fraction": 1.0, "executed_fraction": 1.0})
        for f in opts.fractions:
            ks = [draw_k((batch, shape.tokens), layer.n_learners, f, layer.min_k, gen).to(device) for layer in layers]

            def forward(ks=ks):
                for layer, k in zip(layers, ks):
                    layer.force_k = k  # host-side attribute only: the gate still runs, its choice is replaced
                return acm(x)

            fraction = float(M.compute_fraction(layers, [k.cpu() for k in ks]).double().mean())
            points[("acm", f)] = (forward, {"variant": "acm", "fraction": f, "executed_fraction": fraction})
        # counting phase (no timing): decision log at every point, the counter at the smallest batch
        with torch.inference_mode():
            for key, (fn, fields) in points.items():
                fields.update(macs_dense_per_sample=macs_dense, macs_counted_per_sample=math.nan)
                if key[0] == "dense":
                    fields["macs_per_sample"] = macs_dense
                    continue
                if batch == smallest:
                    with cost.count_macs() as counter:
                        fn()
                    counted = counter.report.macs / batch
                    logged = float(M.sample_macs(acm).double().mean())
                    fields["macs_counted_per_sample"] = counted
                    if abs(counted - logged) > 0.01 * max(counted, 1.0):
                        return rows, (f"counter {counted:.4g} MACs vs decision log {logged:.4g} MACs per sample "
                                      f"disagree by >1% (acm, f={key[1]}, batch {batch}); nothing written")
                else:
                    fn()
                fields["macs_per_sample"] = float(M.sample_macs(acm).double().mean())
        sync = ""
        with torch.inference_mode():
            for fn, _ in points.values():  # warm-up (allocator, autotuning, lazy init)
                fn()
            if gpu:  # pragma: no cover - needs CUDA
                from bench.kernels.graphs import capture, host_sync_free

                torch.cuda.synchronize()
                sync = host_sync_free(points[("acm", opts.fractions[0])][0])
                if graphs:
                    for key, (fn, fields) in list(points.items()):
                        try:
                            points[(key, "graph")] = (capture(fn), {**fields, "cuda_graph": True})
                        except Exception as err:  # recorded, not raised
                            rows.append({**base, "batch": batch, **fields, "cuda_graph": True,
                                         "status": f"capture failed: {type(err).__name__}: "
                                                   f"{str(err).splitlines()[0][:200]}"})
            samples: dict[tuple, list[float]] = {key: [] for key in points}
            order = list(points)
            for r in range(opts.rounds):
                schedule = order[:]
                rng.shuffle(schedule)
                start = time.perf_counter()
                for key in schedule:
                    samples[key].extend(timer(points[key][0]))
                print(f"batch {batch}: round {r + 1}/{opts.rounds}, {len(schedule)} points, "
                      f"{time.perf_counter() - start:.1f} s", flush=True)
        for key, (_, fields) in points.items():
            med, iqr = kernel_bench._median_iqr(samples[key])
            rows.append({**base, "batch": batch, "cuda_graph": False, **fields, "median_ms": med * 1e3,
                         "iqr_ms": iqr * 1e3, "min_ms": min(samples[key]) * 1e3, "n_samples": len(samples[key]),
                         "throughput_per_s": batch / med, "sync_check": sync if fields["variant"] == "acm" else "",
                         "status": "ok"})
        for layer in layers:
            layer.force_k = None
    return rows, None


def finish(rows: list[dict]):
    """Rows as a frame with ``rel_to_dense`` (same batch, same mode: eager or CUDA graph)."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    for column in COLUMNS:
        if column not in frame:
            frame[column] = math.nan
    frame = frame[COLUMNS]
    for _, idx in frame.groupby(["batch", "cuda_graph"]).groups.items():
        sub = frame.loc[idx]
        dense = sub.loc[(sub["variant"] == "dense") & (sub["status"] == "ok"), "median_ms"]
        frame.loc[idx, "rel_to_dense"] = sub["median_ms"] / dense.iloc[0] if len(dense) else math.nan
    return frame


def main(argv: list[str] | None = None) -> int:
    from bench.results import atomic_write_frame

    argv = list(sys.argv[1:] if argv is None else argv)
    opts = _parser().parse_args(argv)
    opts.argv = argv
    opts.device = opts.device or ("cuda" if torch.cuda.is_available() else "cpu")
    opts.dtype = opts.dtype or ("bf16" if opts.device == "cuda" else "fp32")
    opts.min_run_s = opts.min_run_s or (0.1 if opts.device == "cuda" else 0.2)
    error = _check(opts)
    if error:
        print(f"error: {error}")
        return 2
    rows, error = run(opts)
    if error:
        print(f"error: {error}")
        return 1
    frame = finish(rows)
    path = Path(opts.results_dir) / "e2e" / f"{frame['run_id'].iloc[0]}.csv"
    atomic_write_frame(path, frame)
    print(path)
    for _, r in frame[frame["status"] == "ok"].iterrows():
        mode = "graph" if r["cuda_graph"] else "eager"
        print(f"batch {r['batch']:>4} {mode:<5} {r['variant']:<5} f={r['fraction']:.2f} "
              f"(executed {r['executed_fraction']:.3f}, {r['macs_per_sample'] / 1e6:.4g} MMACs/sample): "
              f"{r['median_ms']:.3f} ms, {r['throughput_per_s']:.1f} samples/s, {r['rel_to_dense']:.3f} x dense")
    return 0


if __name__ == "__main__":
    sys.exit(main())
