"""How fast ACM's real path can be at a fraction: the drawn learner counts (``bench speed``'s decisions)
against the same work in its best arrangement, every token running the same k = f·N learners (one GEMM
pair per ACM on every row, weights sliced to k learners: no sort, no gather, no small group, and only the
first k learners' weights read).

    .venv/bin/python scripts/acm_arrangement.py fraction=0.5 batch=1 threads=1 --rounds 15

The arguments are ``bench speed`` keys (method=acm is implied; task=imagenet arch=b16 by default).  Dense,
the drawn point and the equal point are timed in one process, in rounds of a fresh random order, with
``bench speed``'s timer; efficiency = MACs ratio / median over rounds of the time ratio to dense of the same
round, with the 95% bootstrap interval of that median (as on the speed page).  The equal point executes the
same fraction of the learners' MACs (f·N must be a whole number of learners: f in {0.25, 0.5, 0.75, 1} at
N = 4).  Its efficiency bounds what any arrangement of the drawn work can reach with the same GEMMs: the
gates and the projections' low-rank learners are in both; what the drawn point loses beyond it is the
ragged execution (sorting, gathers, groups of few rows, every learner's weights read for a few tokens).
Nothing is written; the 1-minute load average and the CPU count are printed with the table.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def equal_decisions(model, fraction: float, batch: int, tokens: int):
    """Every ACM's learner count k = f·N on every token (an error when f·N is not whole)."""
    import torch

    from bench.errors import UserError
    from methods.acm import modules as M

    decisions = []
    for layer in M.acm_layers(model):
        k = fraction * layer.n_learners
        if abs(k - round(k)) > 1e-9 or round(k) < layer.min_k:
            raise UserError(f"fraction={fraction:g} is not a whole number of learners "
                             f"(N = {layer.n_learners}, at least {layer.min_k}); use f in steps of 1/N")
        decisions.append(torch.full((batch, tokens), round(k), dtype=torch.long))
    return decisions


def interval(ratios: list[float]) -> tuple[float, float]:
    """95% percentile bootstrap interval of the median of per-round ratios (scipy)."""
    import numpy as np
    from scipy.stats import bootstrap

    values = np.asarray(ratios)
    if len(values) < 2 or np.ptp(values) == 0:
        return float(np.median(values)), float(np.median(values))
    res = bootstrap((values,), np.median, confidence_level=0.95, n_resamples=2000, method="percentile",
                    random_state=np.random.default_rng(0))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def run(argv: list[str], rounds: int) -> list[str]:
    import torch

    from bench import cost, speed
    from bench.kernels.timer import device_timer

    keys = ["method=acm", "narrow=false", *argv]
    cfg = speed.parse(keys)
    if cfg.device != "cpu" or list(cfg.method) != ["acm"]:
        raise speed.UserError("times ACM on the CPU (method=acm device=cpu)")
    points, base, dense_macs = speed.prepare(cfg, keys, log=lambda line: None)
    timed = [("dense", points[0].fn, dense_macs)]
    with torch.inference_mode():
        for point in points[1:]:
            forcer, model, x = point.forced
            decisions = equal_decisions(model, point.fraction, cfg.batch, int(base["tokens"]))

            def equal(forcer=forcer, model=model, x=x, decisions=decisions):
                forcer.apply(model, decisions)
                return model(x)

            with cost.count_macs() as counter:
                equal()
            timed += [(f"drawn k, f={point.fraction:g}", point.fn, point.fields["macs_per_sample"]),
                      (f"equal k, f={point.fraction:g}", equal, counter.report.macs / cfg.batch)]
        load_before = speed.wait_until_quiet(cfg.max_load, cfg.wait_s, log=lambda line: None)
        timer = device_timer(cfg.device, base["min_run_s"], cfg.threads)
        for _, fn, _ in timed:  # warm-up
            fn()
        samples: dict[str, list[float]] = {name: [] for name, _, _ in timed}
        rng = random.Random(cfg.seed)
        for _ in range(rounds):
            order = list(range(len(timed)))
            rng.shuffle(order)
            for i in order:
                samples[timed[i][0]].append(statistics.median(timer(timed[i][1])))
    lines = [f"# python scripts/acm_arrangement.py {' '.join(argv)} --rounds {rounds}", "",
             f"{base['device_name']}, {cfg.threads} thread(s), batch {cfg.batch}, {cfg.task}/{cfg.arch}, "
             f"{rounds} rounds, {os.cpu_count()} CPUs, load average {load_before:.2f} before, "
             f"{os.getloadavg()[0]:.2f} after, commit {base['git_sha'][:7]}{' (dirty)' if base['git_dirty'] else ''}",
             "", "| point | MACs / dense | time / dense | efficiency | 95% CI |", "|---|---|---|---|---|"]
    for name, _, macs in timed[1:]:
        ratios = [t / d for t, d in zip(samples[name], samples["dense"])]
        low, high = interval(ratios)
        ratio, macs_ratio = statistics.median(ratios), macs / dense_macs
        lines.append(f"| {name} | {macs_ratio:.3f} | {ratio:.3f} | {macs_ratio / ratio:.3f} | "
                     f"[{macs_ratio / high:.3f}, {macs_ratio / low:.3f}] |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds (default 15)")
    args, keys = parser.parse_known_args(argv)
    from bench.errors import UserError

    try:
        print("\n".join(run(keys, args.rounds)))
    except UserError as e:
        print(f"acm_arrangement: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
