"""How far a trained ACM model's executed learner fraction lies from its β_target, and why: the fraction at
inference (the gate's argmax, what result rows count) beside the fraction the training forward draws
(Gumbel samples at the training temperature, what the budget loss L_b sees), on the validation split.

    .venv/bin/python scripts/acm_budget.py task=imagenet acm.alpha_b=1.0 acm.beta_target=0.2 recipe=paper

The arguments are ``bench run`` overrides (``method`` is acm); the model is the cached one: a point whose
stages are not all trained (or shipped) is refused in one line, train it with ``bench run`` first.  Prints
one line: β and both fractions (cost-weighted, as L_b weighs them).  Nothing is written.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def fractions(overrides: list[str], batches: int = 4, seed: int = 0) -> dict[str, float]:
    """β_target and the executed learner fraction (cost-weighted, as L_b) of the trained model under argmax
    and under Gumbel sampling, over the first ``batches`` validation batches."""
    import torch

    from bench import config, protocol, runner
    from bench.errors import UserError
    from methods.acm import modules as M

    cfg = config.compose(["method=acm", *overrides])
    _, task_name = config.selected(cfg)
    config.check_config(cfg, "acm", task_name)
    _, task, method = runner.build(cfg, "acm", task_name)
    text, steps_left = protocol.describe_plan(method, protocol.plan(method))
    if steps_left:
        raise UserError(f"acm_budget: this point is not trained here ({text}); run `python -m bench run "
                        f"method=acm {' '.join(overrides)}` first")
    model = protocol.train(method).eval()
    layers = M.acm_layers(model)
    held_out = task.validation_task() or task  # tasks without a validation split: their evaluation split
    data = [b for _, b in zip(range(batches), held_out.eval_batches())]

    def measure(sample: bool) -> float:
        for layer in layers:
            layer.training, layer.path = sample, "real"
            layer.generator = torch.Generator().manual_seed(seed) if sample else None
        shares = []
        with torch.no_grad():
            for batch in data:
                model(batch.x)
                shares.append(M.compute_fraction(layers, [layer.last_k.float() for layer in layers]).mean())
        return float(torch.stack(shares).mean())

    out = {"beta_target": float(cfg.acm.beta_target), "argmax": measure(False), "sampled": measure(True)}
    for layer in layers:
        layer.training, layer.path, layer.generator = False, "auto", None
    return out


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("BENCH_QUIET", "1")
    from bench.errors import UserError

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        got = fractions(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{' '.join(args)}: beta_target {got['beta_target']:g}; executed learner fraction at inference "
          f"(argmax) {got['argmax']:.3f}, under the training forward's Gumbel samples {got['sampled']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
