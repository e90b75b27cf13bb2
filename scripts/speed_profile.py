"""Where a ``bench speed`` point's time goes: dense and each forced (method, fraction) point under
``torch.profiler``, their operators' self time grouped by kind (matrix products, attention, convolution,
norms, activations, data movement, the rest) beside the MACs the counter gives each kind.

    .venv/bin/python scripts/speed_profile.py method=early_exit fraction=0.5 batch=1 threads=1

The arguments are ``bench speed`` keys (the same models, decisions and inputs; nothing is written).  For each
method point the table splits its shortfall from a perfect saving, ``time − dense time × MACs ratio``, by
kind: a kind's *excess* is its time minus its dense time × the point's MACs ratio (so the excesses add up
to the shortfall, and efficiency = 1 / (1 + shortfall / (dense time × MACs ratio))).  A kind with no MACs
(data movement, norms, the rest) shows what the method adds around its products; a matrix-product excess
with its MACs at the dense share shows products running below the dense ones' rate (small or narrow
products, or products that read more weight bytes per MAC, e.g. a one-token head at batch 1).

Profiler times are self CPU times summed over ``--calls`` calls per point, after one warm-up call; the
profiler's own overhead lengthens every point a little, so read ratios, not absolute times (``bench speed``
gives those).  Beside the table: the point's unprofiled wall time (median of ``--calls`` calls) against
the operators' self time (the rest is Python and dispatch between operators) and its number of aten
operator calls, against dense's: at small sizes that count, not the MACs, sets the time.  The 1-minute load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

KINDS = (  # (kind, operator base names or their prefixes); the first kind that matches wins
    # the skeleton's attention is sdpa, or bmm + softmax where a method runs attention itself
    ("attention", ("_scaled_dot_product", "scaled_dot_product", "_efficient_attention", "_flash_attention",
                   "bmm", "baddbmm", "_softmax", "softmax")),
    ("matmul", ("addmm", "mm", "matmul", "linear", "mkldnn_linear", "_addmm_activation", "addmv", "mv")),
    ("convolution", ("convolution", "_convolution", "mkldnn_convolution", "conv")),
    ("norm", ("native_layer_norm", "layer_norm", "batch_norm", "group_norm")),
    ("activation", ("gelu", "relu", "silu", "sigmoid", "tanh")),
    ("data movement", ("index", "gather", "scatter", "copy", "_to_copy", "cat", "sort", "argsort", "masked",
                       "nonzero", "where", "clone", "contiguous", "stack", "select", "slice", "zero", "fill",
                       "empty", "bincount")),
)


def base_name(op_name: str) -> str:
    """``aten::addmm_`` (profiler) or ``aten.addmm_.default`` (dispatch) → ``addmm_``."""
    name = op_name.split("::", 1)[-1] if "::" in op_name else op_name.split(".", 1)[-1]
    return name.split(".", 1)[0].lower()


def kind_of(op_name: str) -> str:
    """The kind of an operator from its profiler or dispatch name (``mm`` and ``mm_*`` match ``mm``, not
    ``mmap``: a name matches a listed name exactly or followed by ``_``)."""
    name = base_name(op_name)
    for kind, names in KINDS:
        if any(name == n or name.startswith(n + "_") or (n.startswith("_") and name.startswith(n))
               for n in names):
            return kind
    return "rest"


def by_kind(amounts: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in amounts.items():
        out[kind_of(name)] = out.get(kind_of(name), 0.0) + value
    return out


def profile_point(fn, calls: int) -> tuple[dict[str, float], float, float]:
    """(self CPU milliseconds per call of every aten operator of ``fn``, aten operator calls per call (nested
    ones included), median unprofiled wall milliseconds per call)."""
    import time

    import torch
    from torch.profiler import ProfilerActivity

    fn()
    walls = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        walls.append((time.perf_counter() - start) * 1e3)
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    return ({e.key: e.self_cpu_time_total / 1e3 / calls for e in events}, sum(e.count for e in events) / calls,
            sorted(walls)[len(walls) // 2])


def macs_by_op(fn) -> dict[str, float]:
    from bench import cost

    with cost.count_macs() as counter:
        fn()
    return {name: float(v) for name, v in counter.report.by_op.items()}


def table(dense: tuple[dict, dict], point: tuple[dict, dict], label: str) -> list[str]:
    """Markdown lines comparing a point's time and MACs by kind with dense's."""
    (d_ms, d_macs), (m_ms, m_macs) = (tuple(by_kind(x) for x in pair) for pair in (dense, point))
    macs_ratio = sum(m_macs.values()) / sum(d_macs.values())
    d_total, m_total = sum(d_ms.values()), sum(m_ms.values())
    ideal = d_total * macs_ratio
    lines = [f"### {label}: MACs {macs_ratio:.3f} x dense, profiled time {m_total / d_total:.3f} x dense, "
             f"efficiency {ideal / m_total:.2f}", "",
             "| kind | dense ms | dense MMAC | method ms | method MMAC | excess ms | share of shortfall |",
             "|---|---|---|---|---|---|---|"]
    shortfall = m_total - ideal
    for kind in sorted(set(d_ms) | set(m_ms), key=lambda k: -(m_ms.get(k, 0.0) - d_ms.get(k, 0.0) * macs_ratio)):
        excess = m_ms.get(kind, 0.0) - d_ms.get(kind, 0.0) * macs_ratio
        share = f"{excess / shortfall:.0%}" if abs(shortfall) > 1e-9 else "-"
        lines.append(f"| {kind} | {d_ms.get(kind, 0.0):.2f} | {d_macs.get(kind, 0.0) / 1e6:.2f} | "
                     f"{m_ms.get(kind, 0.0):.2f} | {m_macs.get(kind, 0.0) / 1e6:.2f} | {excess:+.2f} | {share} |")
    lines.append(f"| total | {d_total:.2f} | {sum(d_macs.values()) / 1e6:.2f} | {m_total:.2f} | "
                 f"{sum(m_macs.values()) / 1e6:.2f} | {shortfall:+.2f} | 100% |")
    return lines


def run(argv: list[str], calls: int, top: int) -> list[str]:
    import torch

    from bench import speed

    cfg = speed.parse(argv)
    if cfg.device != "cpu":
        raise speed.UserError("speed_profile: profiles CPU points (device=cpu)")
    load_before = os.getloadavg()[0]
    points, base, _ = speed.prepare(cfg, argv, log=lambda line: None)
    out = [f"# speed profile: python scripts/speed_profile.py {' '.join(argv)}", "",
           f"{base['device_name']}, {cfg.threads} thread(s), batch {cfg.batch}, {calls} profiled calls per point, "
           f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {load_before:.2f} before"]
    with torch.inference_mode():
        measured = [(p, *profile_point(p.fn, calls), macs_by_op(p.fn)) for p in points]
    _, dense_ms, dense_ops, dense_wall, dense_macs = measured[0]
    for point, ms, ops, wall, macs in measured[1:]:
        out += ["", *table((dense_ms, dense_macs), (ms, macs), f"{point.method} f={point.fraction:g}"), "",
                f"unprofiled wall time per call: {wall:.2f} ms ({wall / dense_wall:.3f} x dense's {dense_wall:.2f} ms); "
                f"operators' self time {sum(ms.values()):.2f} ms (dense {sum(dense_ms.values()):.2f}); "
                f"aten operator calls per call: {ops:.0f} (dense {dense_ops:.0f})", "",
                f"heaviest operators of {point.method} f={point.fraction:g} (self ms per call; dense beside):"]
        for name, value in sorted(ms.items(), key=lambda kv: -kv[1])[:top]:
            out.append(f"- {name}: {value:.2f} (dense {dense_ms.get(name, 0.0):.2f})")
    out += ["", f"load average {os.getloadavg()[0]:.2f} after"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3, help="profiled calls per point (default 3)")
    parser.add_argument("--top", type=int, default=8, help="operators listed per point (default 8)")
    args, keys = parser.parse_known_args(argv)
    from bench.errors import UserError

    try:
        print("\n".join(run(keys, args.calls, args.top)))
    except UserError as e:
        print(f"speed_profile: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
