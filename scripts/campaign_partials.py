"""Unfinished commands that outlive a machine (``scripts/campaign.py --pause-at``).

A command paused by the campaign saves its running stage's resumable checkpoint in the cache; :func:`ship`
copies it under ``artifacts/`` with the stages of the command's plan finished before it, in this launch or an
earlier one (bench/artifacts.py: ``export_partial``), so that the same command on a later session's fresh
machine resumes from that step instead of starting over.  Once its stages are finished, :func:`drop_unneeded`
removes what it shipped, but what a pending command still needs.  What ships stays within the repository's
limit on shipped files (:data:`SHIPPED_LIMIT`); every shipped version also stays in git history (a pause adds
about three times its model's size).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "bench"  # the cache_dir of the campaign's commands (bench's default)
ARTIFACTS = ROOT / "artifacts"  # where the campaign's shipped bases are (bench.artifacts.ROOT of this checkout)
SHIPPED_LIMIT = 64 * 2 ** 20  # bytes of shipped files (weights and resumable checkpoints) artifacts/ holds at most


def shipped_bytes(artifacts_root: Path | None = None) -> int:
    """Bytes of the shipped weights and paused commands' checkpoints under artifacts/."""
    from bench import artifacts

    root = artifacts_root or artifacts.ROOT
    return sum(p.stat().st_size for pattern in ("*.safetensors", "*.partial.pt") for p in root.rglob(pattern))


def ship(stages: list[Path], command: str, artifacts_root: Path | None = None) -> list[Path]:
    """Ship what a command that did not finish saved of its stages (``stages``: their checkpoints in the cache,
    ``<cache>/<task>/<owner>/<name>-<key>.pt``, in the order it trains them): each finished stage, then each
    resumable checkpoint.  A stage is passed over when nothing of it is saved, when it ships already (as
    trained weights, or as this same finished stage or step), when another process holds its stage lock
    (training it now), or when it would take the shipped files past :data:`SHIPPED_LIMIT`.  The paths written."""
    from bench import artifacts, provenance
    from bench.errors import UserError

    written = []
    machine = f"{provenance.device_name('cpu')}, {os.cpu_count()} CPUs"
    for path in _saved(stages, artifacts_root):
        old = artifacts.shipped_partial_path(artifacts.stage_of(path), artifacts_root)
        grows = path.stat().st_size - (old.stat().st_size if old.exists() else 0)
        if shipped_bytes(artifacts_root) + grows > SHIPPED_LIMIT:
            start = f"step {_step(old)} (shipped before)" if old.exists() else "step 0"
            print(f"[campaign] not shipping {path.name} ({_saved_at(path)}, {path.stat().st_size / 2 ** 20:.1f} MB): "
                  f"the shipped files would pass {SHIPPED_LIMIT >> 20} MB; only this machine's cache holds it, and "
                  f"a fresh machine trains its stage from {start}", flush=True)
            continue
        try:
            written.append(artifacts.export_partial(path, command=command, git_sha=provenance.git_sha(),
                                                    machine=machine, root=artifacts_root))
        except UserError as err:  # one unreadable file: the others still ship
            print(f"[campaign] not shipping {path.name}: {err}", flush=True)
            continue
        print(f"[campaign] shipped {path.name} (step {_step(written[-1])}): {written[-1]}", flush=True)
    return written


def _saved(stages: list[Path], artifacts_root: Path | None) -> list[Path]:
    """The files to ship of ``stages``: the finished checkpoint where there is one, else the resumable one;
    the finished ones first.  Left out: stages with neither, stages shipped as trained weights, stages whose
    shipped checkpoint holds what the cache does (finished, or the same step), and stages another process
    is training."""
    from bench import artifacts, checkpoints, protocol

    finished, resumable = [], []
    for ckpt in stages:
        partial = checkpoints.partial_path(ckpt)
        if artifacts.find(ckpt, artifacts_root) is not None or _locked(ckpt):
            continue
        shipped = artifacts.find_partial(ckpt, artifacts_root)
        if ckpt.exists():
            if not (shipped and shipped.meta.get("finished")):
                finished.append(ckpt)
        elif partial.exists():
            if not (shipped and not shipped.meta.get("finished")
                    and int(shipped.meta["step"]) == protocol.saved_step(partial)):
                resumable.append(partial)
    return finished + resumable


def _locked(ckpt: Path) -> bool:
    """Whether another process holds the stage lock of ``ckpt`` (bench/run.py's stage_lock) now."""
    from filelock import FileLock, Timeout

    if not Path(f"{ckpt}.lock").exists():
        return False
    lock = FileLock(f"{ckpt}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


def shipped_for(task: str, artifacts_root: Path | None = None) -> list[Path]:
    """The shipped checkpoints of ``task``'s paused commands."""
    from bench import artifacts

    return sorted(((artifacts_root or artifacts.ROOT) / task).glob(f"*/*{artifacts.PARTIAL_SUFFIX}"))


def drop_unneeded(task: str, needed: Callable[[int, str], frozenset[Path]], cache: Path = CACHE,
                  artifacts_root: Path | None = None) -> list[Path]:
    """Remove the shipped checkpoints of ``task``'s paused commands whose stage is finished in ``cache``,
    except those in ``needed(seed, owner)`` (the stages that the planned commands of the seed in the
    checkpoint's command without rows yet train or load, among those that could hold an ``owner``'s stage):
    a kept one shipped part-way is replaced by the finished stage.  The shipped files removed."""
    from bench import artifacts, train

    dropped = []
    for shipped in shipped_for(task, artifacts_root):
        ckpt = cache / task / shipped.parent.name / artifacts.stage_of(shipped).name
        found = artifacts.find_partial(ckpt, artifacts_root)
        if found is None or not train.is_done(ckpt):  # (a checkpoint without its metadata is not a shipped one)
            continue
        meta = found.meta
        seed = _seed_of(meta.get("command", ""))
        if seed is not None and ckpt in needed(seed, shipped.parent.name):
            if not meta.get("finished"):
                ship([ckpt], meta["command"], artifacts_root)
            continue
        artifacts.drop_partial(ckpt, artifacts_root)
        dropped.append(shipped)
        print(f"[campaign] {ckpt.name} is finished and no pending command needs it: its shipped checkpoint "
              f"{shipped.name} is removed", flush=True)
    return dropped


def seconds_saved(ckpt: Path) -> float:
    """The training seconds that the resumable checkpoint of the stage ``ckpt`` holds already: the cache's
    own, else a shipped one; 0 without either."""
    from bench import artifacts, checkpoints

    own = checkpoints.partial_path(ckpt)
    if own.exists():
        import torch

        try:
            return float(torch.load(own, map_location="cpu", weights_only=True, mmap=True)["time_s"])
        except Exception:  # unreadable: the trainer starts the stage over
            return 0.0
    shipped = artifacts.find_partial(ckpt)
    return float(shipped.meta.get("time_s", 0.0)) if shipped is not None else 0.0


def from_shipped(ckpt: Path, state: str) -> bool:
    """Whether a stage in ``state`` (its plan line's, :func:`bench.protocol.plan_status`) is installed from a
    paused command's shipped checkpoint: resumed from its step, or a finished stage shipped that way (not as
    trained weights)."""
    from bench import artifacts

    return state.endswith("of a shipped checkpoint") or (state == "shipped" and artifacts.find(ckpt) is None)


def _seed_of(command: str) -> int | None:
    import shlex

    seeds = [arg.removeprefix("seed=") for arg in shlex.split(command) if arg.startswith("seed=")]
    return int(seeds[-1]) if seeds and seeds[-1].isdigit() else None


def _saved_at(path: Path) -> str:
    """Where a stage checkpoint in the cache stands: "finished", or the step it resumes at."""
    from bench import protocol

    return f"step {protocol.saved_step(path)}" if path.name.endswith(".partial.pt") else "finished"


def _step(shipped: Path) -> int:
    import json

    from bench import artifacts

    return int(json.loads(artifacts.partial_meta(shipped).read_text())["step"])
