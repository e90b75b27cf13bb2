"""Figure helpers shared by every producer of figures (the report, the kernel benchmark, task and method
figures): no dependency on the report, so a producer of rows can draw without importing it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

FILE_MODE = 0o644  # mkstemp creates 0600; figures are meant to be read by everyone (as result files)


def save_figure(fig, path: Path) -> None:
    """Save a PNG atomically (temporary file in the same directory, then os.replace).

    The PNG carries no timestamp, so redrawing the same data gives the same bytes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, FILE_MODE)
    try:
        fig.savefig(tmp, format="png", dpi=130, bbox_inches="tight")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
