"""Checks on where a run writes, made before any work starts (no torch here).

A run writes rows under ``results_dir`` and checkpoints under ``cache_dir``.  An unwritable place would
otherwise be found only when the first row is written, after all the training.  The check writes nothing
that stays: an existing directory gets a temporary file (removed at once); a missing one is checked by
creating and removing a temporary directory in its nearest existing ancestor.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench import devices
from bench.errors import UserError


def check_writable(key: str, path: str | os.PathLike) -> None:
    """Raise :class:`UserError` (one line, naming ``key``) unless a run can create files under ``path``."""
    target = Path(path).expanduser().absolute()
    probe = target
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise UserError(f"{key}={path}: {probe} is a file, not a directory; give a writable directory")
    try:
        if probe == target:
            fd, tmp = tempfile.mkstemp(dir=probe, prefix=".bench-write-check-")
            os.close(fd)
            os.unlink(tmp)
        else:
            os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".bench-write-check-"))
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise UserError(f"{key}={path}: cannot write there ({reason} in {probe}); "
                        f"give a writable directory, e.g. {key}=/tmp/bench-{key.split('_')[0]}") from None


def check_run_outputs(cfg) -> None:
    """What a composed config needs before any work: writable output directories (results_dir,
    cache_dir) and a device that this machine has (:func:`bench.devices.check_available`)."""
    for key in ("results_dir", "cache_dir"):
        check_writable(key, str(cfg[key]))
    devices.check_available(str(cfg.device))
