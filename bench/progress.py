"""Progress of a long loop: a tqdm bar on a terminal, a plain log line now and then everywhere else.

Redirected to a file or a pipe (a batch job's log, ``nohup``), a bar's carriage-return redraws make
megabytes of one line; there the progress is a ``[bench]`` log line every :data:`LINE_EVERY_S` seconds (with
the time left at the rate since the loop started, as tqdm's bar shows it) and one at the end.
``BENCH_QUIET=1`` turns both off.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from tqdm import tqdm

log = logging.getLogger("bench")

LINE_EVERY_S = 60.0


class LineProgress:
    """The part of tqdm's interface the loops use, written as log lines."""

    def __init__(self, total: int | None, desc: str, initial: int = 0, unit: str = "steps"):
        self.total, self.desc, self.n, self.unit = total, desc, initial, unit
        self.postfix = ""
        self.start, self.start_n = time.perf_counter(), initial
        self.last = self.start

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.perf_counter() - self.last >= LINE_EVERY_S:
            self._line()

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def _line(self) -> None:
        self.last = time.perf_counter()
        rate = (self.n - self.start_n) / max(self.last - self.start, 1e-9)
        done = f"{self.n}/{self.total} {self.unit} ({self.n / self.total:.0%})" if self.total else f"{self.n} {self.unit}"
        left = f", {time_left((self.total - self.n) / rate)}" if self.total and rate > 0 and self.n < self.total else ""
        log.info("%s: %s, %.1f/s%s%s", self.desc, done, rate, f", {self.postfix}" if self.postfix else "", left)

    def close(self) -> None:
        if self.n > self.start_n:
            self._line()


def time_left(seconds: float) -> str:
    """``seconds`` still to run at the rate so far, as a log line says it ("about 3 h 05 min left")."""
    if seconds < 90:
        return f"about {seconds:.0f} s left"
    minutes = round(seconds / 60)
    return f"about {minutes // 60} h {minutes % 60:02d} min left" if minutes >= 60 else f"about {minutes} min left"


def progress(total: int | None = None, desc: str = "", initial: int = 0, enabled: bool = True,
             unit: str = "steps") -> Any:
    """A progress display for ``total`` steps: tqdm on a terminal, :class:`LineProgress` otherwise."""
    disabled = not enabled or os.environ.get("BENCH_QUIET") == "1"
    if disabled or sys.stderr.isatty():
        return tqdm(total=total, initial=initial, desc=desc, leave=False, dynamic_ncols=True, disable=disabled)
    return LineProgress(total, desc, initial, unit)
