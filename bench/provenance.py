"""Provenance of a result row: git state, package versions, device, time (no torch at import)."""

from __future__ import annotations

import datetime as dt
import functools
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ["torch", "numpy", "pandas", "hydra-core", "omegaconf", "datasets", "triton", "scikit-learn"]


ROOT = Path(__file__).resolve().parent.parent
# Tracked files that runs and reports write, not code: a change to them leaves the tree clean (the rows, the
# reports, and the campaign's log of its commands' wall times, which it appends to before each command).
NOT_CODE = ("results", "reports", "artifacts", "scripts/campaign_times.tsv")


def _git_output(*args: str, cwd: Path = ROOT) -> str | None:
    """git's stripped output, or None when git is missing, fails or hangs."""
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=cwd)
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def _git(*args: str, cwd: Path = ROOT) -> str:
    return _git_output(*args, cwd=cwd) or ""


def tree_dirty(root: Path) -> bool | None:
    """True when tracked files of the checkout at ``root`` differ from HEAD, :data:`NOT_CODE` aside; None when
    git cannot tell (not installed, not a checkout, or a tree it refuses, e.g. one owned by another user):
    such a row says neither clean nor dirty."""
    out = _git_output("status", "--porcelain", "--untracked-files=no", "--", ".",
                      *(f":!{path}" for path in NOT_CODE), cwd=root)
    return None if out is None else bool(out)


@functools.cache
def git_sha() -> str:
    """HEAD when first asked: a process's code is what was checked out when it started its first run."""
    return _git("rev-parse", "HEAD") or "unknown"


@functools.cache
def git_dirty() -> bool | None:
    """True when tracked code differs from HEAD (result, report and campaign-log files do not count); None
    when git cannot tell."""
    return tree_dirty(ROOT)


def versions() -> str:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return json.dumps(found, sort_keys=True)


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))  # cuda:N names device N
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine())


def timestamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
