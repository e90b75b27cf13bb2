"""How the campaign (scripts/campaign.py) runs one command and stops it: its launch (one process, or torchrun
ranks), the foreground loop that forwards a stop or a pause to it, and the clock times of ``--until`` and
``--pause-at``."""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _terminated(signum: int, frame) -> None:
    raise KeyboardInterrupt


def stoppable() -> None:
    """Make SIGINT and SIGTERM stop the campaign as Ctrl-C does (its commands get SIGINT, save their
    checkpoints and stop).  A campaign started in the background by a script (``nohup ... &``) starts with
    SIGINT ignored, and its commands would inherit that; SIGTERM (``kill``) would end it without stopping them."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminated)


def launch(line: list[str], nproc: int = 1) -> list[str]:
    """The argv that runs a ``python -m bench run ...`` line: this interpreter, or with ``nproc`` > 1 torchrun
    starting that many data-parallel ranks of it on this machine (a row does not depend on how many
    processes trained its model; it records the number as ``world_size``)."""
    if nproc <= 1:
        return [sys.executable, *line[1:]]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *line[1:]]


def run_in_foreground(line: list[str], seed: int, point: Any, shipper: Any, nproc: int = 1,
                      pause_at: float | None = None) -> int:
    """Run one command of the one-at-a-time campaign, its output on the campaign's, and return its exit code.
    The command runs in its own session, so a Ctrl-C (or SIGINT to the campaign) reaches it once, forwarded:
    the training saves its checkpoint and stops (130; under torchrun SIGTERM, to every rank).
    With ``shipper`` (campaign.BaseShipper), its base ships once trained.  ``nproc``: ranks (:func:`launch`).
    At ``pause_at`` (a time.time()) the command is stopped as by a Ctrl-C (130)."""
    process = subprocess.Popen(launch(line, nproc), cwd=ROOT, start_new_session=True)
    try:
        while process.poll() is None:
            time.sleep(1)
            if pause_at is not None and time.time() >= pause_at:
                raise KeyboardInterrupt
            if shipper is not None:
                shipper.poll([(seed, point, line)], time.time())
    except KeyboardInterrupt:
        # one process gets SIGINT (Ctrl-C); torchrun passes on the signal it gets to every rank, and SIGTERM
        # is the one a rank treats as a stop of them all (bench/signals.py: a collective failing after it)
        process.send_signal(signal.SIGINT if nproc <= 1 else signal.SIGTERM)
        process.wait()
        return 130
    return process.returncode


def clock_time(text: str) -> str:
    """argparse type of ``--until`` and ``--pause-at``: ``HH:MM``, 24-hour UTC."""
    try:
        hour, minute = (int(x) for x in text.split(":"))
    except ValueError:
        hour = minute = -1
    if not (0 <= hour < 24 and 0 <= minute < 60):
        raise argparse.ArgumentTypeError(f"{text!r} is not a UTC time HH:MM (e.g. 08:20)")
    return text


def utc_clock(text: str) -> dt.datetime:
    """The next UTC time ``HH:MM`` (a time already past today means tomorrow)."""
    hour, minute = (int(x) for x in text.split(":"))
    now = dt.datetime.now(dt.timezone.utc)
    when = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return when + dt.timedelta(days=1) if when <= now else when
