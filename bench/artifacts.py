"""Shipped trained artefacts: finished stages committed under ``artifacts/`` so a fresh clone starts from them.

A cached stage lives at ``<cache_dir>/<task>/<owner>/<name>-<key>.pt``; its shipped form is
``artifacts/<task>/<owner>/<name>-<key>.safetensors`` (the weights) beside ``<name>-<key>.json`` (the cache
key it was trained under and the ``bench run`` overrides that compute that key, its steps, training time and final loss, the command and git commit that made it,
and the sha256 of the weights file).  When the cache lacks a finished stage whose shipped form exists, the
stage is installed from it (the sha256 checked first) instead of being trained; ``shipped=false`` trains it.
Because the name holds the cache key, a version bump or another config names another file, and a shipped
artefact is never used for a stage it was not trained as.  ``scripts/export_base.py`` writes one from a
trained cache entry.

An unfinished stage can ship too: its resumable checkpoint (``<name>-<key>.partial.pt``: weights, optimizer,
schedule, step; read back with ``weights_only=True``, so it holds tensors and plain values only) beside
``<name>-<key>.partial.json`` (its step, training time, sha256 and the command that trained it).  When the
cache has neither the finished stage nor a checkpoint of its own to resume, the shipped one is copied in and the
stage resumes from its step, exactly as it would have on the machine that stopped it (a long training that
does not fit into one machine's time goes on on the next; ``scripts/campaign.py --pause-at``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.checkpoints import PARTIAL_SUFFIX, atomic_save, partial_path, stage_of
from bench.errors import UserError

log = logging.getLogger("bench")

ROOT = Path(__file__).resolve().parents[1] / "artifacts"


@dataclass(frozen=True)
class Shipped:
    weights: Path
    meta: dict[str, Any]

    @property
    def steps(self) -> int:
        return int(self.meta["steps"])


def shipped_path(ckpt: Path, root: Path | None = None) -> Path:
    """Where the shipped form of the cached stage ``ckpt`` (``.../<task>/<owner>/<name>-<key>.pt``) lives."""
    ckpt = Path(ckpt)
    return (root or ROOT) / ckpt.parent.parent.name / ckpt.parent.name / f"{ckpt.stem}.safetensors"


def find(ckpt: Path, root: Path | None = None) -> Shipped | None:
    """The shipped artefact of the cached stage ``ckpt``, or None."""
    weights = shipped_path(ckpt, root)
    meta = weights.with_suffix(".json")
    if not (weights.exists() and meta.exists()):
        return None
    return Shipped(weights, json.loads(meta.read_text()))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def install(shipped: Shipped, ckpt: Path) -> None:
    """Write the finished-stage checkpoint ``ckpt`` from a shipped artefact (its sha256 checked first)."""
    from safetensors.torch import load_file

    actual = sha256(shipped.weights)
    if actual != shipped.meta["sha256"]:
        raise UserError(f"shipped artefact {shipped.weights} does not match its sha256 in "
                        f"{shipped.weights.with_suffix('.json').name} ({actual[:12]} vs {shipped.meta['sha256'][:12]}); "
                        "restore it (git checkout -- artifacts) or run with shipped=false to train the stage")
    state = {"model": load_file(str(shipped.weights)), "steps": shipped.steps,
             "time_s": float(shipped.meta["time_s"]), "final_loss": float(shipped.meta["final_loss"])}
    atomic_save(state, ckpt)
    log.info("installed %s from the shipped artefact %s (trained %d steps by: %s)", Path(ckpt).name,
             shipped.weights.relative_to(shipped.weights.parents[2]), shipped.steps, shipped.meta["command"])


def export(ckpt: Path, key: Any, *, overrides: list[str], command: str, git_sha: str, machine: str,
           root: Path | None = None, source: Path | None = None) -> Path:
    """Write the shipped form of the finished stage ``ckpt`` (read from ``source`` if given) under ``root``."""
    import torch
    from safetensors.torch import save_file

    state = torch.load(source or ckpt, map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or "model" not in state or "steps" not in state:
        raise UserError(f"{source or ckpt} is not a finished stage checkpoint (no model or steps); train it first")
    weights = shipped_path(ckpt, root)
    weights.parent.mkdir(parents=True, exist_ok=True)
    tmp = weights.with_name(f".{weights.name}.{os.getpid()}.tmp")
    save_file({k: v.contiguous() for k, v in state["model"].items()}, str(tmp))
    os.chmod(tmp, 0o644)  # a committed file, readable by everyone
    os.replace(tmp, weights)
    meta = {"key": key, "overrides": list(overrides), "steps": int(state["steps"]), "time_s": round(float(state["time_s"]), 1),
            "final_loss": float(state["final_loss"]), "command": command, "git_sha": git_sha,
            "trained_on": machine, "sha256": sha256(weights)}
    weights.with_suffix(".json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str) + "\n")
    return weights


def shipped_partial_path(ckpt: Path, root: Path | None = None) -> Path:
    """Where the shipped checkpoint of the stage ``ckpt`` of an unfinished command lives (the stage itself
    may be unfinished, or finished on the way to a later stage that is not)."""
    return shipped_path(ckpt, root).with_name(partial_path(ckpt).name)


def partial_meta(path: Path) -> Path:
    """The metadata file (``.partial.json``) beside a shipped ``.partial.pt``."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(PARTIAL_SUFFIX) + ".partial.json")


def find_partial(ckpt: Path, root: Path | None = None) -> Shipped | None:
    """The shipped checkpoint of the stage ``ckpt`` of an unfinished command, or None.  ``meta["finished"]``:
    it is the finished stage (else its resumable state at ``meta["step"]``)."""
    state = shipped_partial_path(ckpt, root)
    meta = partial_meta(state)
    if not (state.exists() and meta.exists()):
        return None
    return Shipped(state, json.loads(meta.read_text()))


def install_partial(shipped: Shipped, ckpt: Path, partial: Path) -> None:
    """Copy a shipped checkpoint into the cache, its sha256 checked and its contents read with
    ``weights_only=True`` first: a finished stage to ``ckpt`` (loaded, not trained), an unfinished one to
    ``partial`` (the trainer resumes from its step)."""
    import torch

    actual = sha256(shipped.weights)
    if actual != shipped.meta["sha256"]:
        raise UserError(f"shipped checkpoint {shipped.weights} does not match its sha256 in "
                        f"{partial_meta(shipped.weights).name} ({actual[:12]} vs {shipped.meta['sha256'][:12]}); "
                        "restore it (git checkout -- artifacts) or run with shipped=false to train the stage")
    try:
        state = torch.load(shipped.weights, map_location="cpu", weights_only=True)
    except Exception as err:  # unpickling refuses anything but tensors and plain values
        raise UserError(f"shipped checkpoint {shipped.weights} holds more than tensors and plain values "
                        f"({str(err).splitlines()[0][:120]}); delete it or run with shipped=false") from None
    finished = bool(shipped.meta.get("finished"))
    atomic_save(state, ckpt if finished else partial)
    origin = shipped.weights.relative_to(shipped.weights.parents[2])
    if finished:
        log.info("installed %s from the shipped checkpoint %s (trained by: %s)", Path(ckpt).name, origin,
                 shipped.meta["command"])
        return
    log.info("resuming %s from the shipped checkpoint %s at step %d (trained by: %s)", Path(partial).name, origin,
             int(shipped.meta["step"]), shipped.meta["command"])
    from bench import distributed

    here, there = distributed.world(), int(shipped.meta.get("world", 1))
    if here != there:
        log.warning("%s: its %d steps ran on %d process(es), this run has %d: each rank draws its own noise, so "
                    "the rest does not follow an uninterrupted run of either", Path(partial).name,
                    int(shipped.meta["step"]), there, here)


def export_partial(path: Path, *, command: str, git_sha: str, machine: str, root: Path | None = None) -> Path:
    """Ship the stage checkpoint ``path`` of an unfinished command (``<cache>/<task>/<owner>/<name>-<key>.pt``,
    finished, or its resumable ``....partial.pt``) under ``root``; the path written.  It must load with
    ``weights_only=True`` (what :func:`install_partial` does); both files are written whole or not at all."""
    import torch

    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise UserError(f"cannot ship {path}: it does not load with weights_only=True "
                        f"({str(err).splitlines()[0][:120]})") from None
    finished = not path.name.endswith(PARTIAL_SUFFIX)
    needed = {"model", "steps", "time_s"} if finished else {"model", "optimizer", "step", "time_s"}
    if not isinstance(state, dict) or not needed <= set(state):
        raise UserError(f"cannot ship {path}: not a stage checkpoint (it lacks {', '.join(sorted(needed))})")
    ckpt = stage_of(path)
    target = shipped_partial_path(ckpt, root)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_save(state, target)
    os.chmod(target, 0o644)
    sampler = state.get("sampler") or {}
    meta = {"finished": finished, "step": int(state["steps"] if finished else state["step"]),
            "time_s": round(float(state["time_s"]), 1), "world": int(sampler.get("world", 1)),
            "command": command, "git_sha": git_sha, "trained_on": machine, "sha256": sha256(target)}
    meta_path = partial_meta(target)
    tmp = meta_path.with_name(f".{meta_path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, meta_path)
    return target


def drop_partial(ckpt: Path, root: Path | None = None) -> bool:
    """Remove the shipped checkpoint of the stage ``ckpt`` (once its command has its rows); whether there
    was one."""
    state = shipped_partial_path(ckpt, root)
    found = state.exists()
    for path in (state, partial_meta(state)):
        path.unlink(missing_ok=True)
    return found
