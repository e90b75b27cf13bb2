"""Translation data at WMT scale: the offline default unchanged, the Arrow-backed training table of
``source=hf``, and the streamed evaluation split (``<task>.streaming=true``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from bench import config, registry, runner

# Small enough for the tiny config to keep 1,280 training pairs (20 batches of 64: steps 30 and 95 are in
# later epochs) and a full trans-de-en test split of 1,000 sentences.
SMALL = ("max_tokens=40", "vocab=300")


def _task(tmp_path: Path, *overrides: str, task: str = "iwslt"):
    spec = registry.task_spec(task)
    cfg = config.compose([f"task={task}", "method=dense", *spec.test_overrides, *overrides,
                          f"cache_dir={tmp_path / 'cache'}", f"results_dir={tmp_path / 'results'}"])
    config.check_config(cfg, "dense", task)
    return runner.build(cfg, "dense", task)[1]


def _digest(task) -> str:
    """sha256 of the training batches of a few steps (batch 64) and of every evaluation batch."""
    h = hashlib.sha256()
    batches = [task.train_batch(step, 64) for step in (0, 1, 7, 30, 95)] + list(task.eval_batches())
    for batch in batches:
        for t in (batch.x, batch.y, batch.meta["index"]):
            h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def test_offline_default_batches_are_unchanged(tmp_path):
    """trans-de-en keeps its token ids, batches and evaluation order (so trained models stay bit-identical).
    The digests were recorded from the code before the Arrow-backed training table and streamed evaluation
    of source=hf were added (commit 7d36dc4)."""
    small = tuple(f"iwslt.{o}" for o in SMALL)
    assert _digest(_task(tmp_path, *small)) == "42f9c93aa059014dfed137912adfa61f46543b54187361073ba0c581890df06c"
    full = _task(tmp_path, *small, "iwslt.bucket=2", "iwslt.eval_samples=0", "iwslt.eval_batch=100")
    assert _digest(full) == "cfeffa47ad4850780aab49821cb436bce32e0e26a698a30ee150c87b6e36aa7a"
    wmt = _task(tmp_path, *(f"wmt.{o}" for o in SMALL), task="wmt")
    assert _digest(wmt) == "42f9c93aa059014dfed137912adfa61f46543b54187361073ba0c581890df06c"
