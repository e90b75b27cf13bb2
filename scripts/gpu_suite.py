"""The GPU suite: one device call that checks and measures what only a GPU can, and brings the rows back.

1. Here (network for the wheels; writes the git-ignored ``.device/``)::

       .venv/bin/python scripts/device_pack.py --suite

2. The device tool's ``run``, once, with ``carry: [".device"]`` and ``timeout_s: 540``::

       source .device/setup.sh && python3 scripts/gpu_suite.py run --out $OUT

   (``--steps`` runs some of the steps only, e.g. a step that ran out of time, again in a second call with
   what is left of the device time: ``run --out $OUT --steps speed-throughput --budget-s 200``.)

3. Back here, with that call's ``files_at`` folder (adds the rows to ``results/``, never overwrites)::

       .venv/bin/python scripts/gpu_suite.py unpack <files_at>

then ``.venv/bin/python -m bench report``.

``run`` runs five steps in order, each in a process of its own with its own time limit, and goes on after
a step that fails or runs past its limit (stopped, recorded as timed out).  The order puts correctness first
and the step that needs the most time last, where it also gets what the earlier steps left unused:

1. ``tests``: the tests that run the Triton kernel and the CUDA paths (:data:`TEST_NODES`) with
   ``TRITON_INTERPRET=0``, the dtype-parametrized ones in fp16 and bf16 (``-k "not fp32"``);
2. ``kernels``: ``python -m bench kernels`` on the ViT-B ACM layer, bf16, batches 1 8 32 128, k iid and
   equal, acm_triton against dense eager, torch.compile dense and the aligned narrow dense MLP (and their
   CUDA-graph replays), every variant at every batch (``full_breakdown=true``), fractions 0 .25 .5 .75 1,
   its own timing (``do_bench``, L2 flushed, 3 interleaved rounds) at 40 ms per point and round;
3. ``speed-latency``: ``python -m bench speed`` of the seven methods at ViT-B/16, bf16, batch 1, eager and as
   CUDA-graph replays;
4. ``energy`` (``scripts/gpu_energy.py``): the seven methods at f = 0.25 and 1, batch 128, eager: joules per
   sample against dense from the GPU's total-energy counter (NVML, through pynvml): idle power measured first
   and subtracted, windows
   of at least 1 s, every method window between two dense windows, a window shorter than the counter's
   update period flagged; rows to ``results/energy/<run_id>.csv`` (``bench report`` does not read them);
5. ``speed-throughput``: the same as speed-latency at batch 128, eager, in 2 rounds (:data:`THROUGHPUT_ROUNDS`).

The budget (``--budget-s``, default 510 s) is split by :data:`SHARES`, sized from the suite's first run on an
H200 (kernels 118 s, speed-latency 71 s, energy 71 s; the tests and speed-throughput ran out of 72 s and
122 s): at 510 s tests 92 s, kernels 112 s, speed-latency 77 s, energy 77 s, speed-throughput 128 s, and 26 s
(:data:`RESERVE`) left for packing and slack; a step may use what the steps before it left unused, never the
later steps' shares.  A step past its limit is stopped with everything it started (SIGINT, so that pytest
prints the failures it has seen, then SIGTERM and SIGKILL) and its rows are lost (``bench kernels`` and
``bench speed`` write at the end).

Rows are written under a staging ``results/`` folder (``--stage``, default a new folder in /tmp) in the
layout of this repository's ``results/``, and after every step packed into ``$OUT/results.tgz`` (paths
``results/...``): the device tool returns at most 8 files, none more than 2 folders down, and ``bench
speed`` writes one file per point 3 folders down.  ``$OUT`` also gets ``suite.json`` (one line per step:
status ok / failed / timed out / skipped, seconds, limit, rows written, detail), ``suite.log`` (every
step's output) and ``tests.xml`` (JUnit).  The table printed last says the same as ``suite.json``.

``--dry-run`` runs the same orchestration on this CPU at tiny sizes (one interpreted kernel test, ``bench
kernels quick=true``, ``bench speed arch=tiny``; the energy step finds no NVML and is recorded as skipped).

``unpack`` copies the rows of ``<files_at>/results.tgz`` (or a ``results/`` folder there) into this
repository's ``results/``; it writes nothing when any file would be overwritten.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):  # bench, and the energy step beside this script (scripts are no package)
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench import provenance  # noqa: E402  (no torch at import)
from bench.errors import UserError  # noqa: E402
import gpu_energy  # noqa: E402

SCRIPT = Path(__file__).resolve()
METHODS = "acm,moefication,avit,early_exit,cct,adatape,act"
SPEED_FRACTIONS = "0.25,0.5,0.75,1"
KERNEL_FRACTIONS = ["0", "0.25", "0.5", "0.75", "1"]
KERNEL_TIMING = ["rounds=3", "min_run_s=0.04"]  # do_bench for 40 ms per point and round (default 100)
THROUGHPUT_ROUNDS = 2  # one round of 33 points at batch 128 took 25 s on an H200 (now 37: the fewer-tokens
# ideal adds 4, about 12%)
ENERGY_FRACTIONS = "0.25,1"
# share of the budget per step, in order; RESERVE is left for packing the rows and slack
SHARES = {"tests": 0.18, "kernels": 0.22, "speed-latency": 0.15, "energy": 0.15, "speed-throughput": 0.25}
RESERVE = 0.05
DEFAULT_BUDGET_S = 510.0
MIN_STEP_S = 1.0  # a step left less than this is skipped
# The tests that run the Triton kernel or a CUDA path (grep -rln "cuda\|triton" tests/).  Left out: the
# device-string spelling tests (tests/test_cli.py, tests/test_failures.py: the same on any machine) and
# tests/test_speed.py::test_acm_triton_path_under_forced_learners (its model stays on the CPU: it runs the
# kernel only under the interpreter).
TEST_NODES = [
    "tests/test_kernels.py::test_triton_matches_fp64_cases",
    "tests/test_kernels.py::test_triton_dtypes_activations",  # fp16 and bf16: -k "not fp32"
    "tests/test_kernels.py::test_triton_odd_shapes",
    "tests/test_kernels.py::test_benchmark_quick",  # bench kernels quick=true on cuda: CUDA graphs, peak, report
    "tests/test_acm_ops.py",  # grouping, gather modes, the operators, the counter, opcheck, compile, autotuning
    "tests/test_kernel_bench_gpu_rows.py::test_quick_run_ideal_rows_use_aligned_widths",  # cuda on a GPU
    "tests/test_failures.py::test_absent_device_stops_the_cli_before_any_work",  # cuda:99 on a CUDA machine
    "tests/test_failures.py::test_absent_device_stops_runner_before_any_work",
]
DRY_TEST_NODES = ["tests/test_kernels.py::test_triton_matches_fp64_cases[single]"]


def fail(message: str) -> UserError:
    return UserError(f"gpu_suite: error: {message}")


# ------------------------------------------------------------------------------------------ the steps


@dataclass
class Step:
    """One step: a command run in the repository root, its share of the budget, its extra environment."""
    name: str
    share: float
    argv: list[str]
    env: dict = field(default_factory=dict)
    junit: Path | None = None  # the tests step's JUnit report


@dataclass
class Outcome:
    step: str
    status: str  # ok, failed, timed out, skipped
    seconds: float
    limit_s: float
    rows: int
    files: int
    detail: str


def tests_step(out: Path, dry_run: bool) -> Step:
    junit = out / "tests.xml"
    workers = ["-n", "8"] if find_spec("xdist") and not dry_run else []  # compiles in parallel
    argv = [sys.executable, "-m", "pytest", "-q", "-k", "not fp32", "--junitxml", str(junit), *workers,
            "-rfE", "--tb=short", "--durations=10",  # the failures and the slowest tests, named in the log
            *(DRY_TEST_NODES if dry_run else TEST_NODES)]
    return Step("tests", SHARES["tests"], argv, {"TRITON_INTERPRET": "1" if dry_run else "0"}, junit)


def kernels_step(results: Path, dry_run: bool) -> Step:
    argv = [sys.executable, "-m", "bench", "kernels", "k_mode=iid,equal", "plot=false", f"results_dir={results}"]
    if dry_run:
        argv += ["quick=true", "device=cpu", "threads=1"]
    else:
        argv += ["device=cuda", "dtype=bf16", "batch=1,8,32,128", "full_breakdown=true",
                 "variants=dense_eager,dense_compile,ideal_narrow,acm_triton",
                 f"fractions={','.join(KERNEL_FRACTIONS)}", *KERNEL_TIMING]
    return Step("kernels", SHARES["kernels"], argv)


def speed_step(name: str, results: Path, batch: int, graphs: bool, dry_run: bool, rounds: int | None = None
               ) -> Step:
    argv = [sys.executable, "-m", "bench", "speed", f"method={METHODS}", "task=imagenet",
            f"cuda_graphs={str(graphs).lower()}", f"results_dir={results}"]
    if dry_run:
        argv += ["arch=tiny", "device=cpu", "dtype=fp32", f"batch={min(batch, 2)}", "fraction=0.5,1",
                 "rounds=1", "min_run_s=0.01", "threads=1", "max_load=1000", "wait_s=0"]
    else:
        argv += ["arch=b16", "device=cuda", "dtype=bf16", f"batch={batch}", f"fraction={SPEED_FRACTIONS}"]
        argv += [f"rounds={rounds}"] if rounds else []  # else bench speed's default
    return Step(name, SHARES[name], argv)


def energy_step(results: Path, dry_run: bool) -> Step:
    argv = [sys.executable, str(SCRIPT), "energy", "--results-dir", str(results), "--methods", METHODS,
            "--fractions", ENERGY_FRACTIONS]
    argv += (["--device", "cpu", "--dtype", "fp32", "--arch", "tiny", "--batch", "2"] if dry_run else
             ["--device", "cuda", "--dtype", "bf16", "--arch", "b16", "--batch", "128"])
    return Step("energy", SHARES["energy"], argv)


def chosen_steps(text: str | None) -> list[str] | None:
    """``--steps``: the named steps (None: all of them); an unknown name is one line."""
    if not text:
        return None
    names = text.split(",")
    unknown = [name for name in names if name not in SHARES]
    if unknown:
        raise fail(f"--steps: unknown step {unknown[0]!r}; expected some of {','.join(SHARES)}")
    return names


def plan(out: Path, results: Path, dry_run: bool, only: list[str] | None = None) -> list[Step]:
    """The suite's steps, in the order they run (``only``: these of them, their shares scaled up to the same
    total)."""
    steps = [tests_step(out, dry_run), kernels_step(results, dry_run),
             speed_step("speed-latency", results, 1, True, dry_run), energy_step(results, dry_run),
             speed_step("speed-throughput", results, 128, False, dry_run, THROUGHPUT_ROUNDS)]
    if not only:
        return steps
    kept = [step for step in steps if step.name in only]
    scale = (1.0 - RESERVE) / sum(step.share for step in kept)
    for step in kept:
        step.share *= scale
    return kept


# ------------------------------------------------------------------------------------------ running a step


def step_limit(steps: list[Step], index: int, budget_s: float, elapsed_s: float) -> float:
    """Seconds step ``index`` may run: what is left of the budget once the reserve and the later steps'
    shares are set aside (so a step also gets what the earlier ones left unused)."""
    later = sum(step.share for step in steps[index + 1:])
    return budget_s * (1.0 - RESERVE - later) - elapsed_s


def _stop(proc: subprocess.Popen) -> None:
    """Stop the step's process group (its own session: the step and whatever it started): INT (pytest then
    prints what failed so far), TERM, then KILL."""
    for sig, grace in ((signal.SIGINT, 4), (signal.SIGTERM, 3), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_command(step: Step, limit_s: float, log: Path) -> tuple[int | None, float]:
    """Run the step with its output appended to ``log``: (exit code, or None when stopped at the limit;
    seconds)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BENCH_QUIET": "1", "OMP_WAIT_POLICY": "PASSIVE",
           "TRITON_INTERPRET": "0", **step.env}
    start = time.monotonic()
    with open(log, "a") as sink:
        sink.write(f"\n===== {step.name} (limit {limit_s:.0f} s): {shlex.join(step.argv)}\n")
        sink.flush()
        proc = subprocess.Popen(step.argv, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            rc = None
    return rc, time.monotonic() - start


def tail_lines(log: Path, offset: int, n: int) -> list[str]:
    """The last ``n`` non-empty lines the log gained after byte ``offset``."""
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines() if line.strip()][-n:]


def junit_counts(path: Path | None) -> dict[str, int] | None:
    """tests, failures, errors and skipped of a JUnit report (None when there is none)."""
    try:
        root = ET.parse(path).getroot() if path else None
    except (OSError, ET.ParseError):
        return None
    if root is None:
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    return {key: sum(int(s.get(key, 0)) for s in suites) for key in ("tests", "failures", "errors", "skipped")}


def judge(step: Step, rc: int | None, limit_s: float, last: list[str], wrote: str) -> tuple[str, str]:
    """(status, detail) of a finished step (``wrote``: where its new row files are)."""
    if rc is None:
        return "timed out", f"stopped at its limit of {limit_s:.0f} s"
    counts = junit_counts(step.junit)
    if counts is not None:
        passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
        said = (f"passed {passed}, failed {counts['failures']}, errors {counts['errors']}, "
                f"skipped {counts['skipped']}")
        if rc == 0 and passed == 0:
            return "skipped", f"nothing ran: {said}"
        return ("ok" if rc == 0 else "failed"), said
    said = last[-1][:200] if last else "no output"
    if rc == 0:
        return "ok", wrote or said
    if rc == gpu_energy.SKIPPED_RC:
        return "skipped", said
    return "failed", f"exit {rc}: {said}"


def csv_files(results: Path) -> set[Path]:
    return {p for p in results.rglob("*.csv")} if results.is_dir() else set()


def where(paths: set[Path], stage: Path) -> str:
    """The folders holding ``paths``, relative to the stage (``results/speed/<run_id>``)."""
    return ", ".join(sorted({p.parent.relative_to(stage).as_posix() for p in paths}))


def count_rows(paths: set[Path]) -> int:
    """Records in the row files (fit tables, derived from the rows, aside)."""
    total = 0
    for path in paths:
        if not path.name.endswith(".fit.csv"):
            with open(path, newline="") as f:
                total += max(0, sum(1 for _ in csv.reader(f)) - 1)
    return total


def run_step(steps: list[Step], index: int, budget_s: float, elapsed_s: float, out: Path, results: Path
             ) -> Outcome:
    step = steps[index]
    limit_s = step_limit(steps, index, budget_s, elapsed_s)
    if limit_s < MIN_STEP_S:
        return Outcome(step.name, "skipped", 0.0, max(limit_s, 0.0), 0, 0, "no budget left")
    log = out / "suite.log"
    log.touch()
    offset, before = log.stat().st_size, csv_files(results)
    rc, seconds = run_command(step, limit_s, log)
    last = tail_lines(log, offset, 15)
    new = csv_files(results) - before
    status, detail = judge(step, rc, limit_s, last, where(new, results.parent))
    print(f"[gpu_suite] {step.name}: {status} in {seconds:.0f} s ({detail})", *(f"  | {line}" for line in last),
          sep="\n", flush=True)
    return Outcome(step.name, status, round(seconds, 1), round(limit_s, 1), count_rows(new), len(new), detail)


# ------------------------------------------------------------------------------------------ the suite


def pack_rows(results: Path, out: Path) -> int:
    """Every file under ``results`` into ``out/results.tgz`` as ``results/...`` (written aside, then renamed);
    returns the number of files."""
    files = sorted(p for p in results.rglob("*") if p.is_file()) if results.is_dir() else []
    files = [p for p in files if not any(part.startswith(".") for part in p.relative_to(results).parts)]
    partial = out / "results.tgz.partial"
    with tarfile.open(partial, "w:gz") as tar:
        for path in files:
            tar.add(path, arcname=f"results/{path.relative_to(results).as_posix()}")
    partial.replace(out / "results.tgz")
    return len(files)


def write_summary(out: Path, meta: dict, outcomes: list[Outcome]) -> None:
    """``out/suite.json``: the run's facts, then one line per step."""
    steps = ",\n".join("  " + json.dumps(vars(o)) for o in outcomes)
    text = "{\"suite\": " + json.dumps(meta) + ",\n\"steps\": [\n" + steps + "\n]}\n"
    partial = out / "suite.json.partial"
    partial.write_text(text)
    partial.replace(out / "suite.json")


def table(outcomes: list[Outcome]) -> str:
    lines = [f"{'step':<17} {'status':<9} {'seconds':>7} {'limit':>6} {'rows':>5}  detail"]
    for o in outcomes:
        lines.append(f"{o.step:<17} {o.status:<9} {o.seconds:>7.1f} {o.limit_s:>6.0f} {o.rows:>5}  {o.detail[:90]}")
    return "\n".join(lines)


def run_suite(steps: list[Step], out: Path, results: Path, budget_s: float, meta: dict) -> list[Outcome]:
    """Run every step in order within the budget, recording each outcome as it comes and packing the rows
    after every step; prints the table last."""
    start, outcomes = time.monotonic(), []
    results.mkdir(parents=True, exist_ok=True)
    for index in range(len(steps)):
        outcomes.append(run_step(steps, index, budget_s, time.monotonic() - start, out, results))
        meta["files_returned"] = pack_rows(results, out)
        meta["seconds"] = round(time.monotonic() - start, 1)
        write_summary(out, meta, outcomes)
    print(f"[gpu_suite] {out}: results.tgz ({meta['files_returned']} files under results/), suite.json, "
          f"suite.log{', tests.xml' if (out / 'tests.xml').exists() else ''}")
    print(table(outcomes), flush=True)
    return outcomes


def cmd_run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    only = chosen_steps(args.steps)  # before anything is written
    if args.budget_s < 10:
        raise fail(f"--budget-s {args.budget_s:g} is too small; give at least 10 seconds "
                   f"(default {DEFAULT_BUDGET_S:g})")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise fail(f"--out {out} is not an empty folder; give the device call's $OUT (or a new folder)")
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(args.stage) if args.stage else Path(tempfile.mkdtemp(prefix="gpu_suite-"))
    results = stage / "results"
    if results.exists() and any(results.iterdir()):
        raise fail(f"--stage {stage} already holds rows in results/; give a new folder")
    meta = {"dry_run": args.dry_run, "budget_s": args.budget_s, "steps": only or list(SHARES),
            "git_sha": provenance.git_sha(),
            "git_dirty": provenance.git_dirty(), "started": provenance.timestamp(), "stage": str(stage)}
    outcomes = run_suite(plan(out, results, args.dry_run, only), out, results, args.budget_s, meta)
    return 0 if all(o.status in ("ok", "skipped") for o in outcomes) else 1


# ------------------------------------------------------------------------------------------ unpack


def returned_rows(files_at: Path) -> dict[str, bytes]:
    """``results/...`` path -> content, from ``files_at/results.tgz`` and a ``files_at/results/`` folder."""
    rows: dict[str, bytes] = {}
    tgz, folder = files_at / "results.tgz", files_at / "results"
    if not tgz.is_file() and not folder.is_dir():
        raise fail(f"{files_at} holds neither results.tgz nor results/; give the device call's files_at folder")
    if tgz.is_file():
        with tarfile.open(tgz) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    rows[_checked(member.name, tgz)] = tar.extractfile(member).read()
    if folder.is_dir():
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            rows[f"results/{path.relative_to(folder).as_posix()}"] = path.read_bytes()
    return rows


def _checked(name: str, source: Path) -> str:
    parts = PurePosixPath(name).parts
    if not parts or parts[0] != "results" or ".." in parts or PurePosixPath(name).is_absolute():
        raise fail(f"{source} holds {name!r}, outside results/; not unpacking it")
    return PurePosixPath(*parts).as_posix()


def unpack(files_at: Path, root: Path = ROOT) -> list[str]:
    """Copy the returned rows under ``root``; nothing is written when any of them already exists."""
    rows = returned_rows(files_at)
    clash = next((name for name in sorted(rows) if (root / name).exists()), None)
    if clash:
        raise fail(f"{clash} already exists; unpack writes nothing over existing files (move it aside first)")
    for name, data in sorted(rows.items()):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return sorted(rows)


def cmd_unpack(args: argparse.Namespace) -> int:
    files_at = Path(args.files_at)
    added = unpack(files_at, Path(args.root))
    summary = files_at / "suite.json"
    if summary.is_file():
        for step in json.loads(summary.read_text()).get("steps", []):
            print(f"[gpu_suite] {step['step']}: {step['status']} ({step['detail']})")
    print(f"[gpu_suite] added {len(added)} files under {Path(args.root) / 'results'}", *added, sep="\n  ")
    return 0


# ------------------------------------------------------------------------------------------ command line


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse would print the usage too)
        raise fail(message)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="gpu_suite", description=__doc__.split("\n\n")[0])
    verbs = p.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="run the suite (on the device machine; --dry-run here)")
    run.add_argument("--out", required=True, help="the device call's $OUT (empty)")
    run.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                     help=f"seconds for all the steps (default {DEFAULT_BUDGET_S:g})")
    run.add_argument("--steps", default=None,
                     help=f"comma-separated steps to run (default all, in order: {','.join(SHARES)})")
    run.add_argument("--stage", default=None, help="where the rows are written first (default: a new /tmp folder)")
    run.add_argument("--dry-run", action="store_true", help="the same orchestration on this CPU at tiny sizes")
    back = verbs.add_parser("unpack", help="here: add the returned rows to results/ (never overwrites)")
    back.add_argument("files_at", help="the device call's files_at folder")
    back.add_argument("--root", default=str(ROOT), help="the repository root (default: this one)")
    energy = verbs.add_parser("energy", help="the energy step (run by 'run')")
    energy.add_argument("--results-dir", default="results")
    energy.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    energy.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default="bf16")
    energy.add_argument("--arch", default="b16")
    energy.add_argument("--batch", type=int, default=128)
    energy.add_argument("--methods", default=METHODS)
    energy.add_argument("--fractions", default=ENERGY_FRACTIONS)
    energy.add_argument("--window-s", type=float, default=gpu_energy.MIN_WINDOW_S)
    energy.add_argument("--idle-s", type=float, default=2.0)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser().parse_args(argv)
        args.argv = argv[1:]
        return {"run": cmd_run, "unpack": cmd_unpack, "energy": gpu_energy.cmd_energy}[args.verb](args)
    except UserError as err:
        message = str(err)
        print(message if message.startswith("gpu_suite: error: ") else f"gpu_suite: error: {message}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
