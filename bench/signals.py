"""Termination requests: SIGTERM (``kill``, ``timeout``, a SLURM time limit) ends a run as Ctrl-C does.

The command line installs :func:`handle_sigterm`; the signal then raises ``KeyboardInterrupt`` where the
process is, so the training loop saves its partial checkpoint and every lock is released on the way out,
and :data:`requested` names the signal so the one closing line and the exit code (143) can say which it
was.  No torch here: the command line imports this before any heavy module.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

requested: list[str] = []  # the termination signals received, in order


def _on_sigterm(signum: int, frame: Any) -> None:
    requested.append("SIGTERM")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise KeyboardInterrupt


def handle_sigterm() -> None:
    signal.signal(signal.SIGTERM, _on_sigterm)


def ignore_sigterm() -> None:
    """Once a process is ending with its own exit code, a SIGTERM (torchrun stopping the other ranks after one
    exited) must not replace it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def stop_requested() -> bool:
    """True once a termination signal arrived (a collective that failed since is a consequence of it)."""
    return bool(requested)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the block runs (an optimizer update and the step count after it): one
    that arrives meanwhile is noted, and raised again as the block ends (its own handler then runs), so a
    stop never saves weights that are half-way between two steps.  Python runs signal handlers in the main
    thread only; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    handlers = {signum: signal.signal(signum, lambda number, frame: held.append(number))
                for signum in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(signum) is not None}
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)
