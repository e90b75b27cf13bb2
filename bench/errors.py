"""Errors whose message is meant for the user as one line (no traceback, exit code 2), and "did you mean"."""

from __future__ import annotations

from typing import Iterable


class UserError(Exception):
    """Bad input: a message for the user as one line (the CLI prints ``bench: error: <message>`` and exits 2).
    The config's and the registry's errors are kinds of it (:class:`bench.config.ConfigError`,
    :class:`bench.registry.RegistryError`); anything else that escapes is a bug and keeps its traceback."""


def near_matches(word: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The choices closest to ``word`` for a "did you mean" hint, ignoring case (``ACT`` finds ``act``).

    difflib's ratio is case-sensitive, so both sides are compared in lower case and the choices are
    returned as spelled.
    """
    import difflib

    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    if word.lower() in by_lower:  # the same name in another case: that is the one meant
        return [by_lower[word.lower()]]
    return [by_lower[m] for m in difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=cutoff)]


DISK_FULL_ERRNOS = (28, 122)  # ENOSPC, EDQUOT


def disk_full(path: object, needed: int | None = None) -> UserError:
    """The one line for a write that found no space: the file, the space free and needed, what to do."""
    import shutil
    from pathlib import Path

    folder = Path(str(path)).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    need = f", about {_size(needed)} needed" if needed else ""
    return UserError(f"no space left on the device writing {path} ({_size(free)} free{need}); nothing was "
                     "half-written: free space there (or point results_dir / cache_dir elsewhere) and run the "
                     "same command again")


def is_disk_full(err: BaseException, path: object, needed: int) -> bool:
    """Whether a failed write was for lack of space: ENOSPC/EDQUOT, or a writer's own error (torch.save's
    "unexpected pos") while the device has less free space than the write needs."""
    import shutil
    from pathlib import Path

    if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
        return True
    folder = Path(str(path)).parent
    return folder.exists() and shutil.disk_usage(folder).free < needed


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"
