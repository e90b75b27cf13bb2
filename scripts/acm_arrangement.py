"""ACM's real path at a fraction with its drawn learner counts (``bench speed``'s decisions) against a
reference with the same mean: every token running k = f·N learners (one GEMM pair per ACM on every row,
weights sliced to k learners: no sort, no gather, no small group, only the first k learners' weights read).

    .venv/bin/python scripts/acm_arrangement.py fraction=0.5 batch=1 threads=1 rounds=15

The arguments are ``bench speed`` keys (method=acm is implied; task=imagenet arch=b16 by default; the narrow
dense points are not timed).  Dense, the drawn point and the equal point are timed in one process, in
``rounds`` rounds of a fresh random order, with ``bench speed``'s timer; efficiency = MACs ratio / median over
rounds of the time ratio to dense of the same round, with the 95% bootstrap interval of that median (as on the
speed page).  Both points' MACs come from their decision logs, checked against the counter as ``bench speed``
does.  f·N must be a whole number of learners (f in {0.25, 0.5, 0.75, 1} at N = 4).

Both points run the same model (gates, the projections' low-rank learners, attention, norms), so the gap
between their efficiencies indicates what the ragged execution of the drawn counts costs (sorting, gathers,
groups of few rows, every learner's weights read for a few tokens), and the equal point's efficiency shows
where the method's structure leaves it on the machine without that cost.  Nothing is written; the 1-minute
load average and the CPU count are printed with the table.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def equal_decisions(model, fraction: float, batch: int, tokens: int):
    """Every ACM's learner count k = f·N on every token (UserError when f·N is not a whole number >= 1)."""
    import torch

    from methods.acm import modules as M

    decisions = []
    for layer in M.acm_layers(model):
        check_fractions([fraction], layer.n_learners)
        decisions.append(torch.full((batch, tokens), round(fraction * layer.n_learners), dtype=torch.long))
    return decisions


def check_fractions(fractions: list[float], n_learners: int) -> None:
    """UserError unless every f·N is a whole number of learners, at least one (a projection ACM's minimum)."""
    from bench.errors import UserError

    for fraction in fractions:
        k = fraction * n_learners
        if abs(k - round(k)) > 1e-9 or round(k) < 1:
            raise UserError(f"fraction={fraction:g} is not a whole number of learners (N = {n_learners}, at "
                            "least 1); use f in steps of 1/N")


def equal_point(point, batch: int, tokens: int):
    """(callable, MACs per sample from the decision log) of a drawn ACM point's equal-k reference; UserError
    when the counter and the log disagree by more than 1% (as in ``bench speed``)."""
    from bench import cost
    from bench.errors import UserError

    forcer, model, x = point.forced
    decisions = equal_decisions(model, point.fraction, batch, tokens)

    def equal():
        forcer.apply(model, decisions)
        return model(x)

    with cost.count_macs() as counter:
        equal()
    counted = counter.report.macs / batch
    logged = float(forcer.sample_macs(model, x).double().mean())
    if abs(counted - logged) > 0.01 * max(counted, 1.0):
        raise UserError(f"equal k, f={point.fraction:g}: counter {counted:.6g} vs decision log {logged:.6g} MACs "
                        "per sample disagree by >1%")
    return equal, logged


def run(argv: list[str]) -> list[str]:
    import torch

    from bench import speed
    from bench.kernels.timer import device_timer
    from bench.report.speed import round_ci

    keys = ["method=acm", "narrow=false", "short=false", *argv]
    cfg = speed.parse(keys)
    if cfg.device != "cpu" or list(cfg.method) != ["acm"]:
        raise speed.UserError("times ACM on the CPU (method=acm device=cpu)")
    check_fractions(list(cfg.fraction), int(speed.resolve(cfg)[3][0][2]().n_learners))
    points, base, dense_macs = speed.prepare(cfg, keys, log=lambda line: None)
    timed = [points[0]]
    with torch.inference_mode():
        for point in (p for p in points[1:] if p.forced):  # the method's points (not the ideals)
            equal, macs = equal_point(point, cfg.batch, int(base["tokens"]))
            timed += [point, speed.Point("acm (equal k)", point.fraction, equal, {
                "method": "acm (equal k)", "fraction": point.fraction, "macs_per_sample": macs})]
        base["load_before"] = speed.wait_until_quiet(cfg.max_load, cfg.wait_s, log=lambda line: None)
        for point in timed:  # warm-up
            point.fn()
        speed.time_rounds(timed, cfg, device_timer(cfg.device, base["min_run_s"], cfg.threads), log=lambda line: None)
    lines = [f"# python scripts/acm_arrangement.py {' '.join(argv)}", "",
             f"{base['device_name']}, {cfg.threads} thread(s), batch {cfg.batch}, {cfg.task}/{cfg.arch}, "
             f"{cfg.rounds} rounds, {os.cpu_count()} CPUs, load average {base['load_before']:.2f} before, "
             f"{os.getloadavg()[0]:.2f} after, commit {base['git_sha'][:7]}{' (dirty)' if base['git_dirty'] else ''}",
             "", "| point | MACs / dense | time / dense | efficiency | 95% CI |", "|---|---|---|---|---|"]
    for row in speed.point_rows(timed, base, dense_macs)[1:]:
        low, high = round_ci(row["time_ratio_rounds"])
        name = f"{'equal' if row['method'] != 'acm' else 'drawn'} k, f={row['fraction']:g}"
        lines.append(f"| {name} | {row['macs_ratio']:.3f} | {row['time_ratio']:.3f} | {row['speed_efficiency']:.3f} | "
                     f"[{row['macs_ratio'] / high:.3f}, {row['macs_ratio'] / low:.3f}] |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _, keys = parser.parse_known_args(argv)
    from bench.errors import UserError

    try:
        print("\n".join(run(keys)))
    except UserError as e:
        print(f"acm_arrangement: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
