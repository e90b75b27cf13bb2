"""The campaign's wall-time records and the estimates it makes from them (scripts/campaign.py): the times file
(:data:`campaign.TIMES`, one line per started and per finished command) and, for a point it has not timed,
the training time in the point's committed rows."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # scripts are not a package: the plan is a sibling module
from campaign_plan import PLAN, Point, point_id, row_point  # noqa: E402


START = "start"  # the times file's marker of a command the campaign started (its finish line follows)


def read_times(path: Path, nproc: int = 1) -> dict[tuple[str, int], float]:
    """(point id, seed) -> wall seconds of the campaign command that made its rows, for commands that ran
    from start to finish in one campaign on ``nproc`` processes (``--nproc``; lines of other counts are
    another command's times): a command started more than once before it finished (it was interrupted and
    resumed) ran only part of its work in the last run, so it is left out.  Lines that do not parse (a line
    cut short) are skipped."""
    out: dict[tuple[str, int], float] = {}
    starts: dict[tuple[str, int], int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) not in (3, 4) or _processes(parts[3:]) != nproc:
                continue
            first, seed, point = parts[:3]
            try:
                key = (point, int(seed))
                if first == START:
                    starts[key] = starts.get(key, 0) + 1
                    continue
                seconds = float(first)
            except ValueError:
                continue
            if starts.pop(key, 0) <= 1:
                out[key] = seconds
            else:
                out.pop(key, None)
    return out


def _processes(extra: list[str]) -> int | None:
    """The process count of a times line's optional fourth column (``nproc=N``; none: 1); None if it does
    not parse."""
    if not extra:
        return 1
    name, _, value = extra[0].partition("=")
    return int(value) if name == "nproc" and value.isdigit() else None


def record(path: Path, seed: int, point: Point, first: str, nproc: int = 1) -> None:
    """Append one line to the times file: ``first`` (:data:`START`, or the finished command's wall seconds),
    the seed and the point id, tab-separated, and ``nproc=N`` for a command trained on N > 1 processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(f"{first}\t{seed}\t{point_id(point)}" + (f"\tnproc={nproc}" if nproc > 1 else "") + "\n")


def record_time(path: Path, seed: int, point: Point, seconds: float, nproc: int = 1) -> None:
    record(path, seed, point, f"{seconds:.1f}", nproc)


def estimates(times: dict[tuple[str, int], float]) -> dict[str, float]:
    """Point id -> the wall seconds a command of that point is expected to take: the longest recorded over
    the seeds (seeds of one point train the same steps on the same data)."""
    measured: dict[str, float] = {}
    for (point, _), seconds in times.items():
        measured[point] = max(seconds, measured.get(point, 0.0))
    return measured


# The commit from which a row's train_time_s leaves out the dense base a static size's run loads as its
# timing reference (bench/runner.py); rows made by earlier code count it.
OWN_TRAIN_TIME = "125457b6ed4fe8180106c22fe1d586ae295f3294"
# The row schema from which a method's train_time_s is its own stages' time (bench/results.py, schema 6:
# the base a method fine-tunes is in base_train_time_s); a method trained from scratch has no base to take off.
OWN_TIME_SCHEMA = 6


def descends(ancestor: str, sha: str, root: Path = ROOT) -> bool | None:
    """Whether commit ``sha`` has ``ancestor`` in its history; None when git cannot tell (a commit this
    clone lacks, no repository)."""
    rc = subprocess.call(["git", "merge-base", "--is-ancestor", ancestor, str(sha)], cwd=root,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {0: True, 1: False}.get(rc)


def _is_static_size(point: str) -> bool:
    return any(arg.startswith(("dense.width=", "dense.depth=")) for arg in shlex.split(point))


def row_train_times(results_dirs=(ROOT / "results", ROOT / "results" / "curves")) -> dict[str, float]:
    """Point id -> the training time of the committed rows its command made (the longest seed): the
    estimate of a point the times file has not timed (rows made before it existed, or by a command that was
    interrupted and resumed).  The training alone: the command adds the evaluation and the timing.

    A row's ``train_time_s`` counts the stages its model is made of, cached ones included, so a row
    estimates its point by what its own command trained:
    * a method's rows made before schema :data:`OWN_TIME_SCHEMA` count the base it fine-tunes, trained by an
      earlier command: the same seed's base time is taken off (no base row for the seed: skipped); later
      rows count the method's own stages only (and a method trained from scratch never had a base to take
      off), so their time is taken as it is.  A method point that only evaluates another
      point's trained stages differently (DAT's thresholds, CCT's pairs) shows that point's training time
      and is estimated by it: its command trains them when they are not cached (the point that trains them
      skipped by ``--fill``, or ``.cache`` gone with an earlier machine), an overestimate when they are;
    * a dense point that reuses its seed's base (another evaluation set) shows the base's time: skipped;
    * a static size's timed row made before :data:`OWN_TRAIN_TIME` also counted the base its run loaded as
      the timing's reference: the same seed's base time is taken off, and a row whose seed has no base row,
      or whose commit git cannot place, is skipped.  (An untimed run of a task whose counting reference is
      its trained base, iwslt, loaded it too: no campaign point is such a run.)
    A row whose command is not a campaign command line does not match."""
    import pandas as pd

    from bench import results

    bases = {point_id(PLAN[task][0]): task for task in PLAN}
    frame = pd.concat([results.load(directory) for directory in results_dirs], ignore_index=True)
    made = frame[frame["command"].notna() & frame["train_time_s"].notna()]
    split = made["command"].map(row_point)
    made = made.assign(point=split.str[0], seed_arg=split.str[1])
    made = (made[made["seed_arg"].str.startswith("seed=")].sort_values("timestamp", kind="stable")
            .drop_duplicates(["point", "seed_arg"], keep="last"))  # a point's latest row per seed
    dense = made[made["method"] == "dense"]
    base_time = {(bases[point], seed): t for point, seed, t in zip(dense["point"], dense["seed_arg"],
                                                                   dense["train_time_s"]) if point in bases}
    out: dict[str, float] = {}
    methods = made[made["method"] != "dense"]
    schema = methods["schema_version"].fillna(0) if "schema_version" in methods else pd.Series(0, methods.index)
    for point, task, seed, seconds, version in zip(*(methods[c] for c in ("point", "task", "seed_arg",
                                                                          "train_time_s")), schema):
        if version < OWN_TIME_SCHEMA:  # the row counts the base it fine-tunes
            base = base_time.get((task, seed))
            if base is None:
                continue
            seconds -= base
        if seconds > 0:
            out[point] = max(float(seconds), out.get(point, 0.0))
    since_own = {sha: descends(OWN_TRAIN_TIME, sha) for sha in set(dense["git_sha"])}
    columns = ("point", "task", "seed_arg", "train_time_s", "git_sha", "latency_b1_ms")
    for point, task, seed, seconds, sha, latency in zip(*(dense[c] for c in columns)):
        base = base_time.get((task, seed))
        if point in bases:
            pass
        elif not _is_static_size(point):
            if seconds == base:
                continue  # the seed's base, evaluated again
        elif latency != latency:  # not timed: the base was not loaded (the campaign times every static size)
            pass
        elif since_own[sha] is None or (not since_own[sha] and base is None):
            continue
        elif not since_own[sha]:
            seconds -= base
        if seconds > 0:
            out[point] = max(float(seconds), out.get(point, 0.0))
    return out
