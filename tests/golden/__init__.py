"""Golden digests of tiny trainings: a behaviour change without a version bump fails a test.

Every registered (method, task, variant) of the matrix is trained for a few steps on its tiny test config;
its digest records the model's structure (parameter names, shapes, dtypes), a random projection and the norm
of each module's state (the tensors of ``blocks.0``, of ``head``, ...), and the same of its outputs and per-sample MACs on the first evaluation batch.
Stored beside the digest are the behaviour versions (:mod:`bench.versions`) of the code that trained it.

- Same versions, digest different: behaviour changed without a bump; bump the version of the code you
  changed (docs/architecture.md) and re-record.
- Versions different: a bump was made; re-record the digest in the same commit:
  ``python -m tests.golden --update`` (all cases) or ``--update acm-imagenet`` (case ids).

Values are compared with a relative tolerance of 1e-4 of each module's norm (outputs: 1e-2, see
:data:`OUTPUT_RTOL`), so that the last bits of float arithmetic (thread counts, processors) do not fail the
test while any change in training does; it was checked against a re-computation at one thread.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

PATH = Path(__file__).resolve().parent / "digests.json"
RTOL = 1e-4
# Outputs pass through discrete decisions (a learner count, an exit, a halting step): a token near a tie can
# flip under another summation order (another thread count or processor) and move its outputs by far more
# than rounding, while the weights that training produced agree.  Outputs are compared more loosely.
OUTPUT_RTOL = 1e-2
# Attention key biases are left out of the module projections: softmax is invariant to them, so their
# gradient is rounding noise that Adam turns into full-size steps differing between summation orders.
NOISE_ONLY = (".k.bias",)


def case_id(method: str, task: str, variant: tuple[str, ...]) -> str:
    return f"{method}-{task}" + ("-" + "-".join(variant) if variant else "")


def _projection(tensor: torch.Tensor) -> list[float]:
    """[⟨v, r⟩, ‖v‖] for the flattened tensor v and a fixed standard-normal vector r of its length."""
    values = tensor.detach().reshape(-1).to(torch.float64).cpu()
    r = torch.randn(values.numel(), generator=torch.Generator().manual_seed(values.numel()), dtype=torch.float64)
    return [float(f"{float(values @ r):.9g}"), float(f"{float(values.norm()):.9g}")]


def _module(name: str) -> str:
    """The part of the model a state entry belongs to, for the digest's groups: ``blocks.0`` of
    ``blocks.0.mlp.fc1.weight``, ``head`` of ``head.weight``."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 and parts[1].isdigit() else parts[0]


def digest(model: torch.nn.Module, outputs: torch.Tensor, macs: torch.Tensor) -> dict[str, Any]:
    """The structure, each module group's projected state, the outputs and the per-sample MACs."""
    state = model.state_dict()
    structure = "\n".join(f"{name}:{tuple(t.shape)}:{t.dtype}" for name, t in sorted(state.items()))
    groups: dict[str, list[torch.Tensor]] = {}
    for name, tensor in sorted(state.items()):
        if name.endswith(NOISE_ONLY):
            continue
        groups.setdefault(_module(name), []).append(tensor.detach().reshape(-1).to(torch.float64).cpu())
    out = _projection(outputs) if outputs.is_floating_point() else \
        hashlib.sha256(str(outputs.tolist()).encode()).hexdigest()[:16]
    return {"structure": hashlib.sha256(structure.encode()).hexdigest()[:16],
            "modules": {name: _projection(torch.cat(parts)) for name, parts in groups.items()},
            "outputs": out, "macs": _projection(macs)}


def _close(a: list[float], b: list[float], rtol: float = RTOL) -> bool:
    scale = max(abs(b[1]), 1e-6)
    return all(abs(x - y) <= rtol * scale for x, y in zip(a, b))


def differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two digests, named (empty when they agree within the tolerance)."""
    if stored["structure"] != current["structure"]:
        return ["the parameter names, shapes or dtypes"]
    found = [f"module {name}" for name, value in current["modules"].items() if not _close(value, stored["modules"][name])]
    if isinstance(current["outputs"], str) or isinstance(stored["outputs"], str):
        if current["outputs"] != stored["outputs"]:
            found.append("the decoded outputs")
    elif not _close(current["outputs"], stored["outputs"], OUTPUT_RTOL):
        found.append("the outputs")
    if not _close(current["macs"], stored["macs"]):
        found.append("the per-sample MACs")
    return found


def load() -> dict[str, Any]:
    return json.loads(PATH.read_text()) if PATH.exists() else {}


def save(records: dict[str, Any]) -> None:
    lines = [f" {json.dumps(name)}: {json.dumps(records[name], sort_keys=True)}" for name in sorted(records)]
    PATH.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # one case a line
