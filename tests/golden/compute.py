"""Train one matrix case on its tiny config and digest it (with the versions of the code that trained it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("BENCH_QUIET", "1")

import torch  # noqa: E402

from bench import versions  # noqa: E402
from tests import golden  # noqa: E402
from tests.helpers import build_tiny  # noqa: E402


def compute(method: str, task: str, variant: tuple[str, ...], workdir: Path) -> dict[str, Any]:
    torch.set_num_threads(2)
    task_impl, method_impl, model = build_tiny(method, task, workdir, *variant)
    batch = next(iter(task_impl.eval_batches()))
    method_impl.set_knob(model, method_impl.knob_values()[0])
    with torch.inference_mode():
        result = method_impl.infer(model, batch)
    return {"versions": versions.of(task_impl, method_impl),
            "digest": golden.digest(model, result.outputs, result.macs)}
