"""Re-run every committed point under the core's protocol and the offline defaults: the plan, in order,
one training at a time (the machine has 2 cores).

    python scripts/campaign.py --list                 # the commands, in the order they run
    python scripts/campaign.py --status               # per task and seed: commands with rows, time left
    nohup python scripts/campaign.py --until 06:50 > campaign.log 2>&1 &
    python scripts/campaign.py --until 06:50 --fill   # skip what does not fit, run what does
    python scripts/campaign.py --jobs 2 --match recipe=paper --seeds 0   # two one-thread trainings at once
    python scripts/campaign.py --nproc 2 --match "method=cct task=imagenet"  # one training on two ranks (DDP)
    python scripts/campaign.py --pause-at 08:20 --commit   # at 08:20 stop and ship what the command saved

The campaign is resumable: a command whose rows all exist is skipped (:func:`has_rows`, the test ``bench
run`` applies) and an interrupted training resumes from its checkpoint, so running the script again
continues where it stopped: on the same machine, exactly; on a later session's fresh machine, from what
was committed (the rows, and the recorded wall times in :data:`TIMES`), since ``.cache`` (checkpoints,
trained bases) does not outlive the machine.
The options (``--help``; docs/reproducing.md tells how to use them): ``--until`` and ``--fill`` fit the
commands into a session (its machine, and a training cut off at its end, do not outlive it); ``--seeds``,
``--task`` and ``--match`` restrict the plan; ``--jobs N`` runs N commands at once, each on its share of the
CPUs (:func:`run_parallel`); ``--nproc N`` trains each one-at-a-time command on N data-parallel ranks
(torchrun, one thread each: for one long training, which the ranks finish sooner than one process does);
``--pause-at HH:MM`` stops the running command (with ``--jobs``, each) at that time and ships its running
stage's resumable checkpoint and the stages of its plan it finished (scripts/campaign_partials.py), so the
same command on a later machine resumes from that step;
``--export-bases`` ships every dense base the campaign trains as soon as it is
trained (:class:`BaseShipper`), so that a later session's fresh machine starts from it; ``--commit`` commits
each finished command's rows, shipped base and wall time (:func:`commit_finished`).  SIGINT or SIGTERM stops
the campaign and its commands, which save their checkpoints (:func:`stoppable`).

Order: first the learning-curve points that settle the defaults (:data:`CALIBRATION`); then every seed of
the cheap :data:`TASK_MAJOR` tasks (parity); then the other tasks whose defaults are settled
(:data:`SETTLED`) seed-major (every point's seed 0, then seed 1, then seed 2), so that one complete seed
of their leaderboard exists first; within a seed, the tasks in :data:`TASK_ORDER`, each task's dense base
first (every method starts from it), then the methods (which fine-tune it in minutes), then the static
sizes and controls (which train from scratch with a base's whole budget, tens of minutes each), so that a
session's hours yield the most points.  Every point runs with three seeds: the claims in
``reports/claims.md`` compare almost all of them (static sizes included, as the baselines of CCT and
ACT), and :data:`ONE_SEED` lists the points no claim reads, which get seed 0 only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # scripts are not a package: the plan is a sibling module
# the plan, and the names the tests read through this module
from campaign_plan import (CALIBRATION, CONTROL, DEFERRED, EVALUATES, ONE_SEED, PLAN, RUN, SETTLED,  # noqa: E402,F401
                           TASK_MAJOR, TASK_ORDER, Point, command, commands, is_base, matching, planned, point_id,
                           row_point, starts_from_base)
import campaign_launch  # noqa: E402
import campaign_partials  # noqa: E402
from campaign_launch import clock_time, launch, run_in_foreground, stoppable, utc_clock  # noqa: E402,F401
from campaign_times import (START, estimates, read_times, record, record_time,  # noqa: E402,F401
                            row_train_times, descends)

# each finished command's wall time on the campaign's machine (2 cores; not a result).  Tracked in git, not in
# .cache: sessions run on fresh machines, and the estimates (--status, --until) need the earlier sessions' times.
TIMES = ROOT / "scripts" / "campaign_times.tsv"


def has_rows(seed: int, point: Point) -> bool | None:
    """Whether every knob value of the command has its row: exactly when ``bench run`` would skip it; None
    when the command cannot be judged here (a config or method error: ``bench run`` reports it).

    The method is built on stand-ins for the task and the run that carry only their configs: a method's knob
    values depend on its config and on the task's capabilities, which come from the task's config (building
    the real task would load, or even synthesise, its data).  A method whose knob values need the task's
    model (MoEfication's expert count follows the MLP width) gets the real task."""
    from types import SimpleNamespace

    from bench import config, registry, runner

    try:
        cfg = config.compose(command(seed, point)[4:])  # after "python -m bench run"
        method_name, task_name = config.selected(cfg)
        cfg.results_dir = str(ROOT / str(cfg.results_dir))  # the campaign runs bench in ROOT
        task = SimpleNamespace(cfg=cfg[task_name])
        run = SimpleNamespace(cfg=cfg, task_name=task_name, seed=seed)
        method = registry.load_impl(registry.method_spec(method_name).impl)(cfg[method_name], task, run)
        try:
            return not runner.pending_values(cfg, method, method_name, task_name)
        except AttributeError:  # the knob values need more of the task than its config (MoEfication: its MLP
            _, _, method = runner.build(cfg, method_name, task_name)  # width): the real task, data and all
            return not runner.pending_values(cfg, method, method_name, task_name)
    except Exception as err:  # noqa: BLE001  (any failure: leave the verdict to bench run)
        print(f"[campaign] cannot tell whether {shlex.join(command(seed, point))} has its rows: "
              f"{type(err).__name__}: {err}", flush=True)
        return None


@dataclass
class Progress:
    """One task's commands at one seed: how many have their rows, and the wall time the rest would take by
    the same points' recorded wall time (the longest over the seeds that have one; the times file)."""
    task: str
    seed: int
    commands: int
    done: int = 0
    left_estimate_s: float = 0.0
    left_trained_s: float = 0.0  # the rows' training time of points the times file has not timed
    left_trained: int = 0
    left_unmeasured: int = 0
    left_throughput_s: float = 0.0  # of the unmeasured: their training time by measured throughput
    left_base_rate: int = 0  # of those: commands with a stage timed at the dense base's step time
    unknown: int = 0  # commands has_rows cannot judge (bench run would report why)
    pending: list = field(default_factory=list)  # (command line, seconds or None, where the estimate is from)

    def line(self) -> str:
        left = self.commands - self.done - self.unknown
        return (f"{self.task} seed {self.seed}: {self.done}/{self.commands} commands have rows; left: {left}"
                + (f", {self.left_estimate_s / 3600:.1f} h estimated from the same points' recorded wall time"
                   if left > self.left_unmeasured + self.left_trained else "")
                + (f", {self.left_trained} of them training about {self.left_trained_s / 3600:.1f} h by the "
                   "same points' rows" if self.left_trained else "")
                + (f", {self.left_unmeasured} with no recorded time" if self.left_unmeasured else "")
                + (f" (training about {self.left_throughput_s / 3600:.1f} h by measured throughput"
                   + (f"; {self.left_base_rate} at the dense base's step time" if self.left_base_rate else "")
                   + ")" if self.left_throughput_s else "")
                + (f"; {self.unknown} cannot be judged (run them to see why)" if self.unknown else ""))


def expected_seconds(point: Point, measured: dict[str, float], trained: dict[str, float],
                     share: float = 1.0) -> float | None:
    """A pending command's expected seconds: its point's recorded wall time (else its rows' training time),
    with the training part scaled to the ``share`` it has left when it resumes (:func:`resumed_share`); the
    training part is the rows' training time where the rows have one, else the whole recorded time.  None
    when neither is known."""
    whole = measured.get(point_id(point), trained.get(point_id(point)))
    if whole is None or share >= 1.0:
        return whole
    training = min(whole, trained.get(point_id(point), whole))
    return whole - training * (1.0 - share)


def until_estimate(seed: int, point: Point, expected: dict[str, float], trained: dict[str, float], share,
                   stop: dt.datetime | None) -> tuple[float | None, float, float, float]:
    """What ``--until`` decides a command by: (its expected seconds, None when unknown; the share of its
    training left, :func:`resumed_share`; the seconds among them of its seed's dense base, where it would train
    that on its way, :func:`default_base_state`; and of the model it evaluates, where it would train that
    again first, :func:`evaluated_model_state`).  Without a stop time nothing is looked up."""
    left = share(seed, point) if stop is not None and share is not None else 1.0
    estimate = expected_seconds(point, expected, trained, left)
    if estimate is None or stop is None:
        return estimate, left, 0.0, 0.0
    base_s = (base_seconds(point.task, seed, expected, trained, share)
              if default_base_state(seed, point) is False else 0.0)
    model_s = (model_seconds(seed, point, expected, trained, share)
               if model_charged(seed, point, [], expected, evaluated_model_state) else 0.0)
    return estimate + base_s + model_s, left, base_s, model_s


def ends_in_time(now: dt.datetime, stop: dt.datetime | None, estimate_s: float | None) -> bool:
    """Whether a command may start at ``now`` under ``--until`` (``stop``): not after the stop time, and not
    when its estimated wall time would carry it past the stop time.  A command with no recorded time starts
    whenever the stop time has not come (nothing says how long it takes)."""
    if stop is None:
        return True
    return now < stop and (estimate_s is None or now + dt.timedelta(seconds=estimate_s) <= stop)


def progress(plan: list[tuple[int, Point]], times: dict[tuple[str, int], float],
             trained: dict[str, float] | None = None, throughput=None, share=None,
             base_state=None, model_state=None) -> list[Progress]:
    """Per task (in :data:`TASK_ORDER`) and seed, the progress of ``plan``; ``trained`` is
    :func:`row_train_times`, for the points the times file has not timed; ``throughput(seed, point)``
    (:func:`campaign_estimate.estimate`) estimates the rest from measured training throughput; ``share(seed,
    point)`` (:func:`resumed_share`) scales the training part of a resumed command's time
    (:func:`expected_seconds`).  Where ``base_state(seed, point)`` (:func:`default_base_state`) says a seed's
    dense base is neither cached nor shipped, and its own command has rows, the first pending command that
    loads it is charged the base's own time (:func:`base_seconds`), once per seed; where ``model_state(seed,
    point)`` (:func:`evaluated_model_state`) says the model an evaluation-only command evaluates is not here,
    the command is charged that model's command's time (:func:`model_seconds`) as :func:`model_charged` says."""
    measured = estimates(times)
    trained = trained or {}
    share = share or (lambda seed, point: 1.0)
    # a seed's base is trained by its own pending command, else by the first pending command that loads it
    base_counted = {(point.task, seed) for seed, point in plan if is_base(point) and has_rows(seed, point) is False}

    def base_charge(seed: int, point: Point) -> float:
        if base_state is None or (point.task, seed) in base_counted:
            return 0.0
        state = base_state(seed, point)
        if state is None:  # it loads no base, or another one than its task's default
            return 0.0
        base_counted.add((point.task, seed))
        return 0.0 if state else base_seconds(point.task, seed, measured, trained, share)
    out = []
    for task in [t for t in TASK_ORDER if any(point.task == t for _, point in plan)]:
        for seed in sorted({s for s, point in plan if point.task == task}):
            row = Progress(task, seed, sum(1 for s, p in plan if p.task == task and s == seed))
            for _, point in [(s, p) for s, p in plan if p.task == task and s == seed]:
                done = has_rows(seed, point)
                line = shlex.join(command(seed, point))
                if done:
                    row.done += 1
                elif done is None:
                    row.unknown += 1
                elif point_id(point) in measured or point_id(point) in trained:
                    left = share(seed, point)
                    base_s = base_charge(seed, point)
                    model_s = (model_seconds(seed, point, measured, trained, share) if model_state is not None
                               and model_charged(seed, point, plan, measured, model_state) else 0.0)
                    seconds = expected_seconds(point, measured, trained, left) + base_s + model_s
                    timed = point_id(point) in measured
                    if timed:
                        row.left_estimate_s += seconds
                    else:
                        row.left_trained_s += seconds
                        row.left_trained += 1
                    source = "recorded wall time" if timed else "its rows' training time"
                    row.pending.append((line, seconds, source + (
                        f", its training scaled to the {left:.1%} of its steps left (it resumes)" if left < 1
                        else "") + (f", and {base_s / 60:.0f} min for its seed's dense base, which it trains on "
                                    "its way (neither cached nor shipped)" if base_s else "")
                        + (f", and {model_s / 60:.0f} min to train again the model it evaluates (not in this "
                           "machine's cache)" if model_s else "")))
                else:
                    row.left_unmeasured += 1
                    guess = throughput(seed, point) if throughput is not None else None
                    if guess is None:
                        row.pending.append((line, None, "no estimate"))
                        continue
                    # its own dense:base stage is the seed's default base unless it loads another one
                    default = base_state is None or base_state(seed, point) is not None
                    if default and (task, seed) in base_counted:
                        guess = guess.without_base()
                    if default and any(stage == "dense:base" for stage, _ in guess.to_train):
                        base_counted.add((task, seed))
                    row.left_throughput_s += guess.seconds
                    row.left_base_rate += bool(guess.at_base_rate)
                    row.pending.append((line, guess.seconds, "training throughput" + (
                        f" ({', '.join(guess.at_base_rate)} at the dense base's step time)" if guess.at_base_rate
                        else "")))
            out.append(row)
    return out


def status(plan: list[tuple[int, Point]], times: dict[tuple[str, int], float],
           trained: dict[str, float] | None = None, throughput=None, share=None, base_state=None,
           model_state=None) -> list[str]:
    """The lines ``--status`` prints: :func:`progress` per task and seed, the totals, then every pending
    command with its estimate and where the estimate comes from."""
    rows = progress(plan, times, trained, throughput, share, base_state, model_state)
    lines = [r.line() for r in rows] + [
        f"total: {sum(r.done for r in rows)}/{len(plan)} commands have rows; left: "
        f"{sum(r.left_estimate_s for r in rows) / 3600:.1f} h estimated (wall time of the campaign's commands "
        f"that ran start to finish) + {sum(r.left_trained for r in rows)} commands training about "
        f"{sum(r.left_trained_s for r in rows) / 3600:.1f} h (their points' rows' training time) + "
        f"{sum(r.left_unmeasured for r in rows)} commands with no recorded time"
        + (f", training about {sum(r.left_throughput_s for r in rows) / 3600:.1f} h by measured throughput"
           if any(r.left_throughput_s for r in rows) else "")
        + (f"; {sum(r.unknown for r in rows)} cannot be judged" if any(r.unknown for r in rows) else "")]
    pending = [p for r in rows for p in r.pending]
    if pending:
        lines.append("pending commands (estimated time, from):")
        lines += [f"  {'?' if s is None else f'{s / 60:.0f} min'}  {line}  ({source})" for line, s, source in pending]
    return lines


@dataclass
class Job:
    """A command the parallel campaign started: its place in the plan, its process and its log."""
    index: int
    seed: int
    point: Point
    process: subprocess.Popen
    log: Path
    start: float
    line: list[str] = field(default_factory=list)  # the command line it runs
    started: "Started" = field(default_factory=lambda: Started())  # its plan when it started


def loaded_base(seed: int, point: Point):
    """(run context, cache key) of the dense base a command of ``point`` at ``seed`` would load, as the run
    computes them (this checkout's cache; nothing is loaded)."""
    import campaign_estimate

    run, built, _, _ = campaign_estimate.build_command(seed, point)
    return run, run.base_key(built)


def base_checkpoint(seed: int, task: str) -> Path:
    """Where this machine's cache keeps the dense base of ``task`` at ``seed`` (the key a run computes)."""
    from bench import protocol

    run, key = loaded_base(seed, PLAN[task][0])
    return run.stage_path("dense", protocol.base_stage_name(), key)


def base_seconds(task: str, seed: int, measured: dict[str, float], trained: dict[str, float], share=None) -> float:
    """The expected seconds of ``task``'s dense base at ``seed`` (its point's :func:`expected_seconds`, at its
    ``share(seed, point)`` left where it resumes); 0 where neither a recorded time nor a row says."""
    base = PLAN[task][0]
    return expected_seconds(base, measured, trained, share(seed, base) if share is not None else 1.0) or 0.0


@functools.lru_cache(maxsize=None)
def loads_default_base(seed: int, point: Point) -> bool:
    """Whether a command of ``point`` loads its task's default dense base (``PLAN[task][0]``'s at ``seed``),
    not another (a point that changes the task's base settings loads a base of its own)."""
    return starts_from_base(point) and loaded_base(seed, point)[1] == loaded_base(seed, PLAN[point.task][0])[1]


def default_base_state(seed: int, point: Point) -> bool | None:
    """None where a command of ``point`` does not load its task's default dense base
    (:func:`loads_default_base`); else whether that base is cached or shipped here (as the run's plan line
    reads it, :func:`bench.protocol.stage_state`), so that the command does not train it on its way."""
    from bench import protocol

    if not loads_default_base(seed, point):
        return None
    run, key = loaded_base(seed, PLAN[point.task][0])
    return protocol.stage_state(run, "dense", protocol.base_stage_name(), key) in ("cached", "shipped")


def evaluated_model_state(seed: int, point: Point) -> bool | None:
    """None where ``point`` is not an evaluation-only point (:data:`campaign_plan.EVALUATES`); else whether
    the model it evaluates is cached or shipped here, so that its command does not train it first."""
    if point not in EVALUATES:
        return None
    import campaign_estimate

    return all(stage == "dense:base" for stage, _ in campaign_estimate.stages_to_train(seed, point, 1))


def model_charged(seed: int, point: Point, plan: list[tuple[int, Point]], measured: dict[str, float],
                  model_state) -> bool:
    """Whether a pending command of ``point`` is charged the training of the model it evaluates: an
    evaluation-only point timed by a recorded wall time (its rows' training time holds the model's where it
    trained it), whose model ``model_state(seed, point)`` says is not here, and whose model's command is not
    pending in ``plan`` (that command, planned before it, trains it)."""
    if point not in EVALUATES or point_id(point) not in measured or model_state(seed, point) is not False:
        return False
    return not ((seed, EVALUATES[point]) in plan and has_rows(seed, EVALUATES[point]) is False)


def model_seconds(seed: int, point: Point, measured: dict[str, float], trained: dict[str, float],
                  share=None) -> float:
    """The seconds an evaluation-only command takes to train the model it evaluates first: that model's
    point's :func:`expected_seconds` (at the command's ``share(seed, point)`` left, where it resumes); it errs
    long, as that time includes its evaluation.  0 where neither a recorded time nor a row says."""
    left = share(seed, point) if share is not None else 1.0
    return expected_seconds(EVALUATES[point], measured, trained, left) or 0.0


def base_trained(seed: int, task: str) -> bool:
    """Whether the dense base of ``task`` at ``seed`` is in this machine's cache or shipped (artifacts/):
    what a command that loads it finds, instead of training it first."""
    from bench import artifacts, train

    ckpt = base_checkpoint(seed, task)
    return train.is_done(ckpt) or artifacts.find(ckpt) is not None


SHIPPED_LIMIT = campaign_partials.SHIPPED_LIMIT


def export_new_base(seed: int, task: str, trained_by: list[str] | None = None) -> Path | None:
    """Ship the dense base of ``task`` at ``seed`` that this machine trained (``--export-bases``): written
    under artifacts/ (scripts/export_base.py) unless it is shipped already, is not trained here, or would
    take the shipped weights past :data:`SHIPPED_LIMIT`; the path written, or None.  A later session's fresh
    machine then installs it instead of training it (commit it with the rows).  ``trained_by``: the command
    line that trained it, when that is not its seed's dense base command (a method's, on its way)."""
    from bench import artifacts, train
    from export_base import export

    ckpt = base_checkpoint(seed, task)
    if artifacts.find(ckpt) is not None or not train.is_done(ckpt):
        return None
    if campaign_partials.shipped_bytes(ROOT / "artifacts") + ckpt.stat().st_size > SHIPPED_LIMIT:
        print(f"[campaign] not exporting the {task} base of seed {seed}: the shipped weights would pass "
              f"{SHIPPED_LIMIT >> 20} MB", flush=True)
        return None
    here = os.getcwd()
    os.chdir(ROOT)  # the overrides' paths (the cache) are the repository's
    try:
        path = export([f"task={task}", f"seed={seed}"], source=None, git_sha="", root=None,
                      command=shlex.join(trained_by or command(seed, PLAN[task][0])))
    finally:
        os.chdir(here)
    print(f"[campaign] shipped the {task} base of seed {seed}: {path} (commit it)", flush=True)
    return path


COMMITTED = ("results", "artifacts")  # what a finished command writes that the repository keeps (with the times file)


def settle_bases(seed: int, point: Point, line: list[str], plan: list[tuple[int, Point]]) -> None:
    """``--export-bases`` after a finished command: ship the base it trained (:func:`export_new_base`), then
    remove the shipped bases of its task that ``plan`` needs no more (:func:`drop_finished_bases`)."""
    if is_base(point) or starts_from_base(point):
        export_new_base(seed, point.task, None if is_base(point) else line)
    drop_finished_bases(point.task, plan)


def drop_finished_bases(task: str, plan: list[tuple[int, Point]], root: Path | None = None) -> list[Path]:
    """Remove the shipped dense bases of ``task`` at the seeds other than 0 whose commands in ``plan`` (the
    campaign's, after ``--match``) all have rows (``--export-bases`` shipped them for the campaign's later
    machines, which need them no more): the shipped weights then keep room, within :data:`SHIPPED_LIMIT`, for
    the bases of the seeds still to run.  Seed 0's bases stay: a fresh clone's runs at the defaults install
    them.  A seed the plan does not hold is not looked at.  The weights files removed."""
    import json

    seeds = {seed for seed, point in plan if point.task == task and seed != 0}
    done = {seed for seed in seeds if all(has_rows(s, p) for s, p in plan if s == seed and p.task == task)}
    dropped = []
    for meta_path in sorted((root or campaign_partials.ARTIFACTS).glob(f"{task}/dense/*.json")):
        if meta_path.name.endswith(".partial.json"):
            continue
        seed = json.loads(meta_path.read_text()).get("key", {}).get("seed")
        if seed not in done:
            continue
        weights = meta_path.with_suffix(".safetensors")
        weights.unlink(missing_ok=True)
        meta_path.unlink()
        dropped.append(weights)
        print(f"[campaign] every {task} command of seed {seed} in this campaign has its rows: its shipped dense "
              f"base {weights.name} is removed", flush=True)
    return dropped


def commit_paths(paths: list[str], message: str, root: Path = ROOT) -> bool:
    """Commit every new or changed file under ``paths`` (relative to ``root``), and nothing else: other
    changes, staged or not, stay as they are.  False (and one line) when there is nothing to commit or git
    refuses."""
    git = ["git", "-C", str(root)]
    added = subprocess.run([*git, "add", "-A", "--", *paths], capture_output=True, text=True)
    if added.returncode != 0:
        print(f"[campaign] --commit: git add failed: {added.stderr.strip()[-300:]}", flush=True)
        return False
    if subprocess.run([*git, "diff", "--cached", "--quiet", "--", *paths]).returncode == 0:
        print(f"[campaign] --commit: nothing new under {', '.join(paths)}", flush=True)
        return False
    done = subprocess.run([*git, "commit", "-q", "-m", message, "--", *paths], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"[campaign] --commit: git commit failed: {done.stderr.strip()[-300:]}", flush=True)
        return False
    print(f"[campaign] committed: {message}", flush=True)
    return True


def commit_finished(seed: int, point: Point, times: Path, root: Path = ROOT) -> bool:
    """``--commit``: commit what a finished command left in the repository -- its rows (every new or changed
    file under results/), a base it shipped (artifacts/) and the times file -- with a message naming the
    command (:func:`commit_paths`)."""
    paths = [name for name in COMMITTED if (root / name).exists()]
    if times.resolve().is_relative_to(root.resolve()):
        paths.append(str(times.resolve().relative_to(root.resolve())))
    return commit_paths(paths, f"rows: {shlex.join(command(seed, point))} (scripts/campaign.py --commit)", root)


BASE_POLL_S = 60.0  # how often a campaign with --export-bases looks for a base that a running command has trained


class BaseShipper:
    """``--export-bases`` while commands run: a dense base that a running command trains on its way (a
    method's command whose seed has no base yet) ships as soon as its training ends, not when the command
    ends, and with ``--commit`` goes into its own commit; a machine lost during the method's stages then
    keeps the base.  :meth:`poll` looks at most every :data:`BASE_POLL_S` seconds."""

    def __init__(self, commit: bool, root: Path = ROOT):
        self.commit, self.root = commit, root
        self.settled: set[tuple[str, int]] = set()  # (task, seed) whose base is shipped, exported or not ours
        self.last = 0.0

    def poll(self, points: list[tuple[int, Point, list[str]]], now: float) -> None:
        """Look at the running commands: (seed, point, the command line it runs with)."""
        if now - self.last < BASE_POLL_S:
            return
        self.last = now
        for seed, point, line in points:
            key = (point.task, seed)
            if key in self.settled or not (is_base(point) or starts_from_base(point)):
                continue
            if not base_trained(seed, point.task):
                continue  # still training (or waiting for another command's training)
            self.settled.add(key)
            path = export_new_base(seed, point.task, None if is_base(point) else line)
            if path is not None and self.commit:
                commit_paths(["artifacts"], f"base: the {point.task} dense base of seed {seed} ships, trained on "
                                            f"the way to {shlex.join(command(seed, point))} (scripts/campaign.py "
                                            "--commit)", self.root)


def _ready(item: tuple[int, int, Point], waiting: list[tuple[int, int, Point]], running: list[Job],
           trained_bases: dict[tuple[str, int], bool]) -> bool:
    """Whether a pending command may start: its seed's dense base (when it loads it) is neither pending nor
    running, and, when that base is not trained here yet, no other command that loads it is running (the
    first one trains it, and the others would wait for its lock with a CPU share idle); an evaluation-only
    point (:data:`EVALUATES`) waits, the same way, for its seed's command that trains the model it evaluates."""
    _, seed, point = item
    busy = [(s, p) for _, s, p in waiting] + [(job.seed, job.point) for job in running]
    if point in EVALUATES and (seed, EVALUATES[point]) in busy:
        return False
    if not starts_from_base(point):
        return True
    if any(is_base(p) and p.task == point.task and s == seed for s, p in busy):
        return False
    if (point.task, seed) not in trained_bases:  # asked again after a command ends (:func:`run_parallel`)
        trained_bases[(point.task, seed)] = base_trained(seed, point.task)
    return trained_bases[(point.task, seed)] or not any(
        job.seed == seed and job.point.task == point.task and starts_from_base(job.point) for job in running)


def throughput_estimator(threads: dict[str, int]):
    """(seed, point) -> :class:`campaign_estimate.Estimate` at the thread count its task trains with
    (``threads``), from the measured training throughput (``results/throughput``) and, where a stage has
    none, the dense base's step time (its quiet recorded rate, else measured once per task and thread count)."""
    import campaign_estimate

    from bench import throughput

    rates, base_rates = throughput.rates(campaign_estimate.THROUGHPUT)
    base_step_s = campaign_estimate.recorded_base_step_s(base_rates)
    return lambda seed, point: campaign_estimate.estimate(seed, point, threads[point.task], rates, base_step_s)


def resumed_share(threads: dict[str, int], cache: Path = campaign_partials.CACHE):
    """(seed, point) -> the share of the command's training left (:func:`campaign_estimate.share_left`) where
    its method's folder has a resumable checkpoint (shipped, or in ``cache``), else 1.0 without building its
    plan (also for a point that names no method)."""
    import campaign_estimate

    def share(seed: int, point: Point) -> float:
        method = point.method
        if method is None or not (any(p.parent.name == method for p in campaign_partials.shipped_for(point.task))
                or any((cache / point.task / method).glob("*.partial.pt"))):
            return 1.0
        return campaign_estimate.share_left(seed, point, threads[point.task])
    return share


def job_threads(jobs: int) -> int:
    """The threads each of ``jobs`` commands run at once (``--jobs``) gets: its share of the usable CPUs."""
    return max(1, usable_cpus() // jobs)


def usable_cpus() -> int:
    """The CPUs this process may run on (``taskset -c 1 python scripts/campaign.py`` leaves the others free
    for other work: its trainings then use one thread)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def training_threads(tasks: tuple[str, ...], asked: int | None) -> dict[str, int]:
    """The ``train_threads`` of each task's one-at-a-time commands: ``asked``, or where it is None the count
    the task's dense base trained fastest at here (:func:`campaign_estimate.fastest_threads`, read once)."""
    import campaign_estimate

    if asked is not None:
        return {task: asked for task in tasks}
    from bench import throughput

    rates = throughput.quiet_base_rates(campaign_estimate.THROUGHPUT)
    return {task: campaign_estimate.fastest_threads(rates, task, usable_cpus()) for task in tasks}


def run_settings(threads: int, train_threads: int) -> tuple[str, ...]:
    """The run-level keys of a one-at-a-time command: ``threads`` for evaluation and timing, and
    ``train_threads`` for its training stages where it is set and differs (neither is part of a row's identity)."""
    train = min(train_threads, threads) if train_threads else threads
    return (f"threads={threads}",) if train == threads else (f"threads={threads}", f"train_threads={train}")


def run_parallel(plan: list[tuple[int, Point]], jobs: int, stop: dt.datetime | None, times: Path,
                 expected: dict[str, float], log_dir: Path, export_bases: bool = False, commit: bool = False,
                 trained: dict[str, float] | None = None, share=None, pause: dt.datetime | None = None) -> int:
    """Run the plan's pending commands ``jobs`` at a time, each on its share of the CPUs (``threads``, not
    part of a row's identity), dense bases first (their seed's methods wait for them), then a command that
    trains a missing base on its way, the rest in plan order;
    a command that would not end before ``stop`` is skipped (its time: :func:`expected_seconds` from the
    recorded times ``expected`` and the rows' ``trained``, at ``share(seed, point)`` where it resumes, and
    its seed's dense base's where it trains that on its way).  Each command's output goes to its own log in
    ``log_dir``.  Timings taken while another training runs are not quiet: the rows record the load, and the
    report marks them.  At ``pause`` (``--pause-at``) the running commands are stopped (each saves its
    checkpoint) and ship what they saved (:func:`pause_running`), and no other starts: 130 when one was
    stopped; else, as the one-at-a-time campaign stopping before a command, 1 if one failed, else 0."""
    threads = job_threads(jobs)
    waiting = [(i, seed, point) for i, (seed, point) in enumerate(plan, 1) if not has_rows(seed, point)]
    running: list[Job] = []
    trained_bases: dict[tuple[str, int], bool] = {}
    shipper = BaseShipper(commit) if export_bases else None
    failed = 0
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        while waiting or running:
            if pause is not None and dt.datetime.now(dt.timezone.utc) >= pause:
                stopped, failed_now = pause_running(running, plan, times, export_bases, commit)
                return 130 if stopped else 1 if failed + failed_now else 0
            startable = ([item for item in waiting if _ready(item, waiting, running, trained_bases)]
                         if len(running) < jobs else [])
            # bases first, then a command that trains its seed's missing base on the way (the longest, and
            # its seed's other commands wait for it), then the plan's order
            startable.sort(key=lambda item: (not is_base(item[2]), trained_bases.get((item[2].task, item[1]), True)
                                             if starts_from_base(item[2]) else True, item[0]))
            if startable:
                i, seed, point = item = startable[0]
                waiting.remove(item)
                now = dt.datetime.now(dt.timezone.utc)
                estimate, *_ = until_estimate(seed, point, expected, trained or {}, share, stop)
                if not ends_in_time(now, stop, estimate):
                    print(f"[campaign] skipping command {i}/{len(plan)}: it would not end by the stop time",
                          flush=True)
                    continue
                line = command(seed, point, (f"threads={threads}",))
                log = log_dir / f"{i:03d}-seed{seed}-{point.task}.log"
                record(times, seed, point, START)
                plan_then = started(seed, point)
                print(f"[campaign] {i}/{len(plan)} {now:%H:%M:%S} {shlex.join(line)} (log: {log})", flush=True)
                with log.open("w") as out:
                    process = subprocess.Popen([sys.executable, *line[1:]], cwd=ROOT, stdout=out,
                                               stderr=subprocess.STDOUT, start_new_session=True)
                running.append(Job(i, seed, point, process, log, time.time(), line, plan_then))
                continue
            if not running:  # nothing runs and nothing may start: a base that failed holds the rest back
                print(f"[campaign] {len(waiting)} commands wait for a dense base that did not train", flush=True)
                return 1
            time.sleep(5)
            if shipper is not None:
                shipper.poll([(job.seed, job.point, job.line) for job in running], time.time())
            for job in [job for job in running if job.process.poll() is not None]:
                running.remove(job)
                trained_bases = {key: True for key, done in trained_bases.items() if done}
                if not settle(job, plan, times, export_bases, commit):
                    failed += 1
                    waiting = [item for item in waiting if not (is_base(job.point) and item[2].task == job.point.task
                                                                 and item[1] == job.seed and starts_from_base(item[2]))]
    except KeyboardInterrupt:
        for job in running:
            job.process.send_signal(signal.SIGINT)  # each training saves its checkpoint and stops
        for job in running:
            job.process.wait()
        return 130
    return 1 if failed else 0


def settle(job: Job, plan: list[tuple[int, Point]], times: Path, export_bases: bool, commit: bool) -> bool:
    """A parallel command of ``plan`` that has ended: a finished one is settled as the one-at-a-time
    campaign's are (:func:`settle_finished`).  Whether it finished."""
    seconds = time.time() - job.start
    rc = job.process.returncode
    print(f"[campaign] {job.index}/{len(plan)} rc={rc} after {seconds:.0f} s (log: {job.log})", flush=True)
    if rc != 0:
        return False
    settle_finished(job.seed, job.point, job.line, plan, times, seconds, job.started, export_bases, commit)
    return True


def settle_finished(seed: int, point: Point, line: list[str], plan: list[tuple[int, Point]], times: Path,
                    seconds: float, start: Started, export_bases: bool, commit: bool, nproc: int = 1) -> None:
    """A command of ``plan`` that finished: its wall time (:func:`record_finished`), its bases
    (``--export-bases``: :func:`settle_bases`) and its commit (``--commit``)."""
    record_finished(times, seed, point, seconds, start, nproc)
    if export_bases:
        settle_bases(seed, point, line, plan)
    if commit:
        commit_finished(seed, point, times)


def pause_running(running: list[Job], plan: list[tuple[int, Point]], times: Path, export_bases: bool,
                  commit: bool) -> tuple[int, int]:
    """``--pause-at`` with ``--jobs``: settle the commands that ended on their own, then stop the others as a
    Ctrl-C does (each training saves its checkpoint) and ship what each saved of its plan's stages (one that
    finished meanwhile is settled as finished).  A Ctrl-C meanwhile waits until all is shipped: a second
    SIGINT would abort a checkpoint being saved.  (commands stopped, commands that failed)."""
    from bench import signals

    with signals.deferred():
        failed = sum(not settle(job, plan, times, export_bases, commit)
                     for job in running if job.process.poll() is not None)
        stopping = [job for job in running if job.process.returncode is None]
        print(f"[campaign] pause time reached: stopping {len(stopping)} running command(s); no other starts",
              flush=True)
        for job in stopping:
            job.process.send_signal(signal.SIGINT)
        for job in stopping:
            job.process.wait()
        for job in stopping:
            if not settle(job, plan, times, export_bases, commit):
                pause_and_ship(job.seed, job.point, job.line, commit)
        running.clear()
    return len(stopping), failed


@dataclass
class Started:
    """What a command's plan said when it started, for the wall time the campaign records when it ends."""
    borrowed: dict[Path, float] = field(default_factory=dict)  # stage trained for another point -> seconds in it
    resumed: bool = False  # one of its own stages came from a paused command's shipped checkpoint


def started(seed: int, point: Point) -> Started:
    """Read a command's plan as it starts (``campaign_estimate.command_stages``): the stages it will train on
    its way that another point's command trains (its seed's default dense base, where neither cached nor
    shipped; the model an evaluation-only point evaluates, :data:`EVALUATES`), each with the training seconds
    its checkpoint holds already (a resumed one), and whether one of its own stages is installed from a
    paused command's shipped checkpoint (its wall time then covers part of its training).  A point whose plan
    cannot be read is left to ``bench run`` to report: nothing borrowed, not resumed."""
    import campaign_estimate

    try:
        _, stages = campaign_estimate.command_stages(seed, point, 1)
        default_base = base_checkpoint(seed, point.task)
    except Exception:
        return Started()
    out = Started()
    for stage in stages:
        if (stage.base and stage.path == default_base and not is_base(point)) or (
                not stage.base and point in EVALUATES):
            if stage.state.startswith("to train"):
                out.borrowed[stage.path] = campaign_partials.seconds_saved(stage.path)
        elif campaign_partials.from_shipped(stage.path, stage.state):
            out.resumed = True
    return out


def own_seconds(seconds: float, borrowed: dict[Path, float]) -> float | None:
    """The wall seconds of a finished command to record as its point's time: less the training the
    ``borrowed`` stages got in it (:func:`started`), which the estimates add on their own where a later
    command needs them; None (nothing to record) when that leaves nothing."""
    import torch

    done = {ckpt: before for ckpt, before in borrowed.items() if ckpt.exists()}  # (one left out trained less)
    if not done:
        return seconds
    other_s = sum(float(torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)["time_s"]) - before
                  for ckpt, before in done.items())
    names = ", ".join(ckpt.name for ckpt in done)
    if seconds - other_s <= 0:
        print(f"[campaign] no wall time recorded: the {other_s:.0f} s of the stages another point's command "
              f"trains ({names}) take all of its {seconds:.0f} s", flush=True)
        return None
    print(f"[campaign] recorded {seconds - other_s:.0f} s: the wall time less the {other_s:.0f} s of the stages "
          f"another point's command trains ({names}), trained on its way", flush=True)
    return seconds - other_s


def record_finished(times: Path, seed: int, point: Point, seconds: float, start: Started, nproc: int = 1) -> None:
    """Record a finished command's wall time (:func:`own_seconds`), unless it resumed from shipped checkpoints;
    then drop the shipped checkpoints no pending command needs any more (:func:`drop_unneeded`)."""
    if not start.resumed:
        own = own_seconds(seconds, start.borrowed)
        if own is not None:
            record_time(times, seed, point, own, nproc)
    drop_unneeded(point.task)


def drop_unneeded(task: str) -> list[Path]:
    """Remove the shipped checkpoints of ``task``'s paused commands whose stage is finished here, but those a
    planned command of the checkpoint's seed without its rows yet needs (a stage that commands share, such
    as ACM's distillation, or a paused command's own): those it re-ships finished where they shipped part-way."""
    import campaign_estimate

    @functools.cache
    def needed(seed: int, owner: str) -> frozenset[Path]:
        pending = [point for _, point in planned((seed,), (task,))
                   if owner == "dense" or f"method={owner}" in point.overrides]
        return frozenset(ckpt for point in pending if not has_rows(seed, point)
                         for ckpt in campaign_estimate.stage_checkpoints(seed, point))

    return campaign_partials.drop_unneeded(task, needed, campaign_partials.CACHE)


def pause_and_ship(seed: int, point: Point, line: list[str], commit: bool, nproc: int = 1) -> None:
    """``--pause-at``: ship what the stopped command saved of its plan's stages (in this launch or an earlier
    one), and commit it with --commit.  A stop signal meanwhile waits until the files are written (what is
    shipped is whole)."""
    import campaign_estimate
    from bench import signals

    with signals.deferred():
        drop_unneeded(point.task)  # stale ones first: they count against the size limit (its own are needed)
        shipped = campaign_partials.ship(campaign_estimate.stage_checkpoints(seed, point),
                                         shlex.join(launch(line, nproc)[1:]) if nproc > 1 else shlex.join(line))
    if shipped and commit:
        commit_paths(["artifacts"], f"partial: {shlex.join(command(seed, point))} paused; it resumes from the "
                                    "shipped checkpoint (scripts/campaign.py --pause-at --commit)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked (``parser.error``: one line and exit 2)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the commands and exit")
    parser.add_argument("--status", action="store_true",
                        help="print, per task and seed, how many commands have rows and the time left estimated "
                             "from the times file")
    parser.add_argument("--until", default=None, type=clock_time,
                        help="UTC HH:MM (a time already past today means tomorrow): no command starts after it, "
                             "nor one whose recorded wall time would end after it")
    parser.add_argument("--fill", action="store_true",
                        help="with --until: skip a command that would not end in time (or has no recorded time) "
                             "and go on to the next that would, instead of stopping; a skipped dense base "
                             "skips the commands of its seed that load it (methods, timed static sizes)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--task", action="append", choices=TASK_ORDER, help="only these tasks (repeatable)")
    parser.add_argument("--times", default=str(TIMES), help=f"the wall-time file (default {TIMES})")
    parser.add_argument("--match", action="append", default=[],
                        help="only the commands whose line contains this text (repeatable: all of them), with "
                             "the dense bases they load, e.g. --match recipe=paper")
    parser.add_argument("--jobs", type=int, default=1,
                        help="commands run at once, each on its share of the CPUs (default 1; on 2 cores, two "
                             "one-thread trainings do about 2.2x the steps of one two-thread training; their "
                             "timings are not quiet, and their rows say so)")
    parser.add_argument("--train-threads", type=int, default=None,
                        help="torch threads while a one-at-a-time command trains; its evaluation and timing keep "
                             "all usable CPUs (default: per task, the thread count its dense base trained fastest "
                             "at in results/throughput, e.g. 1 for imagenet on 2 cores; all usable CPUs for a task "
                             "measured at fewer than two counts; 0 = all usable CPUs)")
    parser.add_argument("--nproc", type=int, default=1,
                        help="data-parallel ranks per one-at-a-time command (torchrun, one training thread each; "
                             "default 1): two ranks end one long training sooner than one process does, while "
                             "--jobs 2 gets more steps in all from several commands; the times file keeps its wall times apart "
                             "from one process's)")
    parser.add_argument("--pause-at", default=None, type=clock_time,
                        help="UTC HH:MM: stop the commands running then (each saves its checkpoint) and end; "
                             "their resumable checkpoints and the stages they finished ship under artifacts/ "
                             "(committed with --commit), so the same command on a later session's fresh machine "
                             "resumes from that step")
    parser.add_argument("--export-bases", action="store_true",
                        help="ship every dense base this machine trains (artifacts/, within 64 MB in all), so a "
                             "later session's fresh machine installs it instead of training it; commit them")
    parser.add_argument("--commit", action="store_true",
                        help="after each command that ends well, commit its rows (results/), a base it shipped "
                             "(artifacts/) and the times file, and nothing else (run it from a clean checkout "
                             "of the code it should time: rows record the commit)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.train_threads is not None and args.train_threads < 0:
        parser.error("--train-threads must be 0 (the timing threads) or more")
    if args.train_threads is not None and args.jobs > 1:
        parser.error("--train-threads is the one-at-a-time campaign's; with --jobs each command trains and times "
                     "on its share of the CPUs")
    if args.nproc < 1:
        parser.error("--nproc must be at least 1")
    if args.nproc > 1 and (args.jobs > 1 or args.train_threads is not None):
        parser.error("--nproc trains one command at a time on one thread per rank: leave out --jobs and "
                     "--train-threads")
    if args.fill and not args.until:
        parser.error("--fill needs --until (the stop time it fills up to)")
    if args.fill and args.jobs > 1:
        parser.error("--fill is the one-at-a-time campaign's; with --jobs, a command that would not end in "
                     "time is always skipped")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    plan = matching(planned(seeds, tuple(t for t in TASK_ORDER if not args.task or t in args.task)), args.match)
    times = Path(args.times)
    train_threads = training_threads(tuple({point.task for _, point in plan}),
                                     1 if args.nproc > 1 else args.train_threads)
    if args.status:
        print("\n".join(status(plan, read_times(times, args.nproc), row_train_times(), throughput_estimator(train_threads),
                               resumed_share(train_threads), default_base_state, evaluated_model_state)))
        return 0
    if args.list:
        print("\n".join(shlex.join(command(seed, point)) for seed, point in plan))
        return 0
    stoppable()
    stop = utc_clock(args.until) if args.until else None
    expected = estimates(read_times(times, args.nproc))
    trained = row_train_times() if stop else {}  # reads every row: only --until needs it
    if args.jobs > 1:
        return run_parallel(plan, args.jobs, stop, times, expected, ROOT / ".cache" / "campaign",
                            args.export_bases, args.commit, trained,
                            resumed_share({task: job_threads(args.jobs) for task in train_threads}),
                            utc_clock(args.pause_at) if args.pause_at else None)
    return run_one_at_a_time(plan, args, times, train_threads, stop, expected, trained,
                             resumed_share(train_threads))


def run_one_at_a_time(plan: list[tuple[int, Point]], args: argparse.Namespace, times: Path,
                      train_threads: dict[str, int], stop: dt.datetime | None, expected: dict[str, float],
                      trained: dict[str, float], share=None) -> int:
    """The plan's commands in order, one at a time (:func:`run_in_foreground`), within ``--until`` (``stop``)
    and ``--pause-at``; a command that resumes is expected to take its recorded time less the training it
    has done (:func:`expected_seconds` at ``share(seed, point)``, :func:`resumed_share`); 1 if one failed,
    130 when stopped or paused."""
    pause = utc_clock(args.pause_at) if args.pause_at else None
    failed = 0
    shipper = BaseShipper(args.commit) if args.export_bases else None
    skipped_bases: set[tuple[str, int]] = set()  # --fill: (task, seed) whose base was left for later
    for i, (seed, point) in enumerate(plan, 1):
        line = command(seed, point, run_settings(usable_cpus(), train_threads[point.task]))
        if has_rows(seed, point):
            print(f"[campaign] {i}/{len(plan)} has its rows: {shlex.join(line)}", flush=True)
            continue
        if (point.task, seed) in skipped_bases and starts_from_base(point):
            print(f"[campaign] --fill: skipping command {i}/{len(plan)}: it loads its seed's dense base, "
                  "which was skipped", flush=True)
            continue
        # the plan's order matters (a method fine-tunes the base before it), so the campaign stops at the
        # first command that does not fit rather than looking for a later one that does; under --fill it
        # skips that command (and the commands of its seed that load it, if it is a base) instead
        estimate, left, base_s, model_s = until_estimate(seed, point, expected, trained, share, stop)
        now = dt.datetime.now(dt.timezone.utc)
        if pause is not None and now >= pause:
            print(f"[campaign] {args.pause_at} UTC reached: stopping before command {i}/{len(plan)}", flush=True)
            break
        fits = ends_in_time(now, stop, estimate) and not (args.fill and estimate is None)
        if not fits:
            source = "recorded" if point_id(point) in expected else "of training in its rows"
            why = ("reached" if stop is not None and now >= stop else "no recorded time" if estimate is None
                   else f"would be passed (about {estimate / 60:.0f} min {source}"
                   + (f", {left:.1%} of its training left" if left < 1 else "")
                   + (f", {base_s / 60:.0f} min of them its seed's dense base" if base_s else "")
                   + (f", {model_s / 60:.0f} min of them the model it evaluates" if model_s else "") + ")")
            if args.fill and now < stop:
                print(f"[campaign] --fill: {args.until} UTC {why}: skipping command {i}/{len(plan)}", flush=True)
                if is_base(point):
                    skipped_bases.add((point.task, seed))
                continue
            print(f"[campaign] {args.until} UTC {why}: stopping before command {i}/{len(plan)}", flush=True)
            break
        print(f"[campaign] {i}/{len(plan)} {dt.datetime.now(dt.timezone.utc):%H:%M:%S} "
              f"{shlex.join(line if args.nproc == 1 else ['torchrun', f'--nproc_per_node={args.nproc}', *line[1:]])}",
              flush=True)
        rc = run_command(seed, point, line, args, times, shipper, pause, plan)
        if rc == 130:  # interrupted or paused: stop the campaign too
            return rc
        failed += rc != 0
    return 1 if failed else 0


def run_command(seed: int, point: Point, line: list[str], args: argparse.Namespace, times: Path,
                shipper: BaseShipper | None, pause: dt.datetime | None, plan: list[tuple[int, Point]]) -> int:
    """Run one command of the one-at-a-time campaign's ``plan`` and settle what it leaves: paused, its
    checkpoints ship; finished, as :func:`settle_finished` says.  Its exit code."""
    record(times, seed, point, START, args.nproc)
    start_plan = started(seed, point)
    start = time.time()
    rc = run_in_foreground(line, seed, point, shipper, args.nproc, pause.timestamp() if pause else None)
    seconds = time.time() - start
    print(f"[campaign] rc={rc} after {seconds:.0f} s", flush=True)
    if rc == 130 and pause is not None and dt.datetime.now(dt.timezone.utc) >= pause:  # paused, not Ctrl-C
        pause_and_ship(seed, point, line, args.commit, args.nproc)
    if rc == 0:
        settle_finished(seed, point, line, plan, times, seconds, start_plan, args.export_bases, args.commit,
                        args.nproc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
