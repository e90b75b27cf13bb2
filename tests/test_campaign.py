"""The re-run campaign (scripts/campaign.py): every planned command is a valid `bench run` command line."""

from __future__ import annotations

import sys
import time

import pytest

from bench import config
from helpers import load_script


def _campaign():
    return load_script("campaign")


@pytest.fixture(autouse=True)
def _no_real_cache(tmp_path, monkeypatch):
    """A campaign run in a test looks for finished stages in an empty cache, so it never removes a shipped
    checkpoint of the repository's artifacts/ (whose stage this machine's .cache may hold), nor, looking in an
    empty folder, a shipped base."""
    partials = sys.modules.get("campaign_partials") or load_script("campaign_partials")
    monkeypatch.setattr(partials, "CACHE", tmp_path / "empty-cache")
    monkeypatch.setattr(partials, "ARTIFACTS", tmp_path / "no-artifacts")  # nor a shipped base


def test_every_planned_command_composes_and_passes_the_checks():
    campaign = _campaign()
    todo = campaign.commands(seeds=(0,), settled=campaign.TASK_ORDER)
    assert len(todo) == sum(len(points) for points in campaign.PLAN.values()) + len(campaign.CALIBRATION)
    for command in todo:
        assert command[:4] == ["python", "-m", "bench", "run"]
        assert config.validate(command[4:]) == 1, command  # one job each: no accidental sweep


def test_seed_major_order_and_one_seed_points():
    campaign = _campaign()
    order = campaign.planned(seeds=(0, 1, 2), settled=campaign.TASK_ORDER)
    calibration = order[:len(campaign.CALIBRATION)]
    assert [p for _, p in calibration] == campaign.CALIBRATION and {s for s, _ in calibration} == {0}
    order = order[len(campaign.CALIBRATION):]
    first = [(s, p) for s, p in order if p.task in campaign.TASK_MAJOR]
    assert first and order[:len(first)] == first  # the task-major tasks' seeds all come first ...
    assert {s for s, _ in first} == {0, 1, 2} and order[len(first)][0] == 0
    deferred = [(s, p) for s, p in order if s != 0 and p in campaign.DEFERRED]
    assert deferred and order[len(order) - len(deferred):] == deferred  # the deferred seeds come last ...
    for points in (first, order[len(first):len(order) - len(deferred)], deferred):  # ... each part seed-major
        seeds = [seed for seed, _ in points]
        assert seeds == sorted(seeds)  # every point's seed 0 runs before any seed 1
    assert campaign.ONE_SEED and all(any(p == q for plan in campaign.PLAN.values() for q in plan)
                                     for p in campaign.ONE_SEED)  # ONE_SEED names planned points
    for seed, point in order:
        assert seed == 0 or point not in campaign.ONE_SEED
    per_point = {point: [s for s, p in order if p == point] for _, point in order}
    assert all(s == [0, 1, 2] for p, s in per_point.items() if p not in campaign.ONE_SEED)


def test_unsettled_tasks_run_only_their_calibration():
    campaign = _campaign()
    order = campaign.planned(settled=("parity",))
    assert {p.task for _, p in order if p not in campaign.CALIBRATION} == {"parity"}
    assert all("results_dir=results/curves" in p.overrides for p in campaign.CALIBRATION)


def test_status_counts_a_command_done_exactly_when_bench_run_skips_it(tmp_path):
    """--status (and the campaign's skip) calls a command done exactly when `bench run` would skip it:
    every knob value has a row of its config at its seed (found by hash even when the file is named by
    another); the time left comes from the same point's recorded wall time at another seed."""
    import shutil

    from bench import runner
    from tests.helpers import compose_tiny, tiny_overrides

    campaign = _campaign()
    extra = ("parity.variant=sequence", "adatape.eval_caps=[1,2]", "timing=false")
    overrides = tuple(o for o in tiny_overrides("adatape", "parity", tmp_path, *extra) if not o.startswith("task="))
    point = campaign.Point("parity", overrides)
    cfg = compose_tiny("adatape", "parity", tmp_path, *extra, "threads=2", "seed=0")
    runner.run(cfg, "adatape", "parity", "test")
    rows = sorted((tmp_path / "results" / "parity" / "adatape").glob("*.csv"))
    assert len(rows) > 1  # an eval-time knob: one row per value
    assert campaign.has_rows(0, point) and not campaign.has_rows(1, point)
    other = campaign.Point("parity", (*overrides, "adatape.tau=4.0"))  # another config
    assert not campaign.has_rows(0, other)
    for row in rows:  # rows stored under another file name are found by their config's identity hash
        for path in row.parent.glob(row.name[:-len(".csv")] + ".*"):
            shutil.move(path, path.with_name("0123456789ab" + path.name[12:]))
    assert campaign.has_rows(0, point)
    first = min(row.parent.glob("0123456789ab*.csv"))  # one knob value's row missing: bench run would run it
    first.unlink()
    assert not campaign.has_rows(0, point)
    assert runner.pending_values(cfg, runner.build(cfg, "adatape", "parity")[2], "adatape", "parity")

    bad = campaign.Point("parity", (*overrides, "adatape.tau=3.0"))  # T/tau not whole: the method refuses
    assert campaign.has_rows(0, bad) is None  # not judged here: the campaign runs it and bench run says why

    times = tmp_path / "times.tsv"
    campaign.record(times, 0, point, campaign.START)
    campaign.record_time(times, 0, point, 7200.0)
    seed0, seed1 = campaign.progress([(0, point), (1, point), (0, other)], campaign.read_times(times))
    assert (seed0.commands, seed0.done, seed0.left_estimate_s, seed0.left_unmeasured) == (2, 0, 7200.0, 1)
    assert (seed1.commands, seed1.done, seed1.left_estimate_s, seed1.left_unmeasured) == (1, 0, 7200.0, 0)
    assert "2.0 h estimated" in seed1.line()


def test_times_of_interrupted_commands_are_left_out(tmp_path):
    """A command started twice before it finished (interrupted, then resumed by a later campaign) ran only
    part of its work in the run that finished it: its time is not used for estimates."""
    campaign = _campaign()
    a, b, c = (campaign.Point("parity", (f"dense.depth={d}",)) for d in (2, 4, 8))
    times = tmp_path / "times.tsv"
    campaign.record(times, 0, a, campaign.START)
    campaign.record_time(times, 0, a, 100.0)
    campaign.record(times, 0, b, campaign.START)  # interrupted ...
    campaign.record(times, 0, b, campaign.START)  # ... and resumed
    campaign.record_time(times, 0, b, 5.0)
    campaign.record(times, 1, b, campaign.START)
    campaign.record_time(times, 1, b, 80.0)
    campaign.record(times, 0, c, campaign.START)
    with times.open("a") as f:
        f.write("12.")  # a line cut short
    assert campaign.read_times(times) == {(campaign.point_id(a), 0): 100.0, (campaign.point_id(b), 1): 80.0}


def test_times_are_kept_apart_by_the_number_of_processes(tmp_path):
    """A command trained on two ranks (--nproc 2) takes another wall time than on one process: each count
    reads only its own lines, and a line whose count does not parse is skipped."""
    campaign = _campaign()
    point = campaign.Point("parity", ("dense.depth=2",))
    times = tmp_path / "times.tsv"
    campaign.record(times, 0, point, campaign.START)
    campaign.record_time(times, 0, point, 100.0)
    campaign.record(times, 1, point, campaign.START, nproc=2)
    campaign.record_time(times, 1, point, 60.0, nproc=2)
    with times.open("a") as f:
        f.write(f"50.0\t2\t{campaign.point_id(point)}\tnproc=two\n")
    assert times.read_text().splitlines()[3].endswith("\tnproc=2")
    key = campaign.point_id(point)
    assert campaign.read_times(times) == {(key, 0): 100.0}
    assert campaign.read_times(times, nproc=2) == {(key, 1): 60.0}
    assert campaign.read_times(times, nproc=4) == {}


def test_until_starts_no_command_that_its_recorded_time_would_carry_past_the_stop(tmp_path):
    """--until: a command starts before the stop time only when the same point's longest recorded wall time
    (any seed) ends by then; with no recorded time it starts whenever the stop time has not come."""
    import datetime as dt

    campaign = _campaign()
    a, b = (campaign.Point("parity", (f"dense.depth={d}",)) for d in (2, 4))
    times = tmp_path / "times.tsv"
    for seed, seconds in ((0, 600.0), (1, 900.0)):
        campaign.record(times, seed, a, campaign.START)
        campaign.record_time(times, seed, a, seconds)
    expected = campaign.estimates(campaign.read_times(times))
    assert expected == {campaign.point_id(a): 900.0}  # the longest seed
    stop = dt.datetime(2026, 1, 1, 6, 0, tzinfo=dt.timezone.utc)
    at = lambda minutes: stop - dt.timedelta(minutes=minutes)  # noqa: E731
    assert campaign.ends_in_time(at(15), stop, expected.get(campaign.point_id(a)))  # ends exactly at the stop
    assert not campaign.ends_in_time(at(14), stop, expected.get(campaign.point_id(a)))
    assert campaign.ends_in_time(at(1), stop, expected.get(campaign.point_id(b)))  # no recorded time
    assert not campaign.ends_in_time(at(0), stop, None)
    assert campaign.ends_in_time(at(0), None, 1e9)  # no --until


def test_campaign_stops_before_a_command_that_would_run_past_until(tmp_path, monkeypatch, capsys):
    """The loop itself: the first pending command's recorded time (2 h) does not fit in the hour left, so
    nothing runs and the campaign says why; without that record the same command starts."""
    import datetime as dt

    campaign = _campaign()
    ran = []
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign, "row_train_times", lambda: {})  # not the repository's rows
    monkeypatch.setattr(campaign, "run_in_foreground", lambda line, *_: ran.append(line) or 0)
    seed, first = campaign.planned(seeds=(0,), tasks=("parity",))[0]
    until = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).strftime("%H:%M")
    times = tmp_path / "times.tsv"
    campaign.record(times, 1, first, campaign.START)
    campaign.record_time(times, 1, first, 7200.0)
    args = ["--task", "parity", "--seeds", "0", "--until", until, "--times", str(times)]
    monkeypatch.setattr(campaign, "resumed_share", lambda threads: lambda seed, point: 1.0)  # nothing resumes
    assert campaign.main(args) == 0 and ran == []
    assert "would be passed (about 120 min recorded): stopping before command 1/" in capsys.readouterr().out
    # the same command resuming with a quarter of its training left fits in the hour
    monkeypatch.setattr(campaign, "resumed_share", lambda threads: lambda seed, point: 0.25 if point == first else 1)
    campaign.main(args)
    assert ran and all(override in ran[0] for override in first.overrides)
    assert "would be passed" not in capsys.readouterr().out
    ran.clear()
    fresh = tmp_path / "none.tsv"
    monkeypatch.setattr(campaign, "usable_cpus", lambda: 1)  # e.g. under taskset -c 1
    campaign.main([*args[:-1], str(fresh)])  # no recorded times: every command starts (the loop runs them all)
    assert ran and ran[0][-2:] == ["threads=1", f"seed={seed}"]
    assert not any(part == "threads=2" for line in ran for part in line)  # the plan's default is replaced
    ran.clear()
    monkeypatch.setattr(campaign, "usable_cpus", lambda: 2)
    from bench import throughput  # the module campaign.py reads the measured rates with

    monkeypatch.setattr(throughput, "quiet_base_rates", lambda folder: {
        ("parity", "dense:base", 1): 30.0, ("parity", "dense:base", 2): 20.0})
    campaign.main([*args[:-1], str(fresh), "--match", "method=dense"])  # trains on one thread, times on two
    assert ran and all(line[-3:-1] == ["threads=2", "train_threads=1"] for line in ran)
    for asked in ("0", "2"):  # all usable CPUs, explicitly or by count
        ran.clear()
        campaign.main([*args[:-1], str(fresh), "--match", "method=dense", "--train-threads", asked])
        assert ran and all(line[-2] == "threads=2" and "train_threads=1" not in line for line in ran)


def test_fill_skips_what_does_not_fit_and_what_starts_from_a_skipped_base(tmp_path, monkeypatch, capsys):
    """--fill keeps the plan's order but skips a command that would not end in time instead of stopping: a
    later command that fits runs; a command with no recorded time is skipped (nothing says it fits); a
    skipped dense base skips its seed's other commands (they start from it), not another seed's."""
    import datetime as dt

    campaign = _campaign()
    base = campaign.PLAN["parity"][0]
    long_static, short_static, method, untimed, scratch = (
        campaign.Point("parity", (f"method={m}", *rest)) for m, rest in
        (("dense", ("dense.depth=2",)), ("dense", ("dense.depth=4",)), ("act", ("act.tau=1e-3",)),
         ("dense", ("dense.width=2",)), ("dense", ("parity.train_steps=10", "timing=false"))))
    plan = [(0, long_static), (0, short_static), (0, untimed), (1, base), (1, method), (1, short_static),
            (1, scratch), (2, method)]
    times = tmp_path / "times.tsv"
    for seed, point, seconds in ((9, long_static, 7200.0), (9, short_static, 60.0), (9, base, 7200.0),
                                 (9, method, 60.0), (9, scratch, 60.0)):
        campaign.record(times, seed, point, campaign.START)
        campaign.record_time(times, seed, point, seconds)
    ran = []
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign, "row_train_times", lambda: {})
    monkeypatch.setattr(campaign, "planned", lambda seeds, tasks: plan)
    monkeypatch.setattr(campaign, "run_in_foreground", lambda line, *_: ran.append(line) or 0)
    monkeypatch.setattr(campaign, "usable_cpus", lambda: 2)
    monkeypatch.setattr(campaign, "training_threads", lambda tasks, asked: {task: 1 for task in tasks})
    # each base is cached, or its own command runs
    monkeypatch.setattr(campaign, "default_base_state", lambda seed, point: None if campaign.is_base(point) else True)
    until = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).strftime("%H:%M")
    assert campaign.main(["--until", until, "--fill", "--times", str(times)]) == 0
    # seed 1's method and timed static size load the skipped base; its untimed from-scratch point does not
    assert [line[1:] for line in ran] == [campaign.command(s, p, campaign.run_settings(2, 1))[1:] for s, p in
                                          ((0, short_static), (1, scratch), (2, method))]
    out = capsys.readouterr().out
    assert "skipping command 1/8" in out and "no recorded time: skipping command 3/8" in out
    for i in (5, 6):
        assert f"skipping command {i}/8: it loads its seed's dense base, which was skipped" in out

    ran.clear()  # a base that has its rows blocks nothing: its seed's commands run
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: point == base or seed == 0)
    assert campaign.main(["--until", until, "--fill", "--times", str(times)]) == 0
    assert [line[-1] for line in ran] == ["seed=1"] * 3 + ["seed=2"]

    ran.clear()  # without --fill: the first command that does not fit stops the campaign
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    assert campaign.main(["--until", until, "--times", str(times)]) == 0 and ran == []
    assert "stopping before command 1/8" in capsys.readouterr().out

    ran.clear()  # seed 2's base has rows but is neither cached nor shipped: its method trains it first (2 h)
    monkeypatch.setattr(campaign, "default_base_state",
                        lambda seed, point: None if campaign.is_base(point) else seed != 2)
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: point == base or seed == 0)
    assert campaign.main(["--until", until, "--fill", "--times", str(times)]) == 0
    assert [line[-1] for line in ran] == ["seed=1"] * 3
    assert ("would be passed (about 121 min recorded, 120 min of them its seed's dense base): skipping command 8/8"
            in capsys.readouterr().out)


def test_fill_stops_once_the_stop_time_has_come(tmp_path, monkeypatch, capsys):
    """--fill skips what does not fit only while the stop time is ahead; once it has come, it stops."""
    import datetime as dt

    campaign = _campaign()
    base = campaign.PLAN["parity"][0]
    ran = []
    elapsed = [0.0]  # seconds on the campaign's clock: each command that runs takes an hour
    start = dt.datetime.now(dt.timezone.utc).replace(second=0, microsecond=0)

    class Clock(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return start + dt.timedelta(minutes=1, seconds=elapsed[0])

    def run(line, *_):
        ran.append(line)
        elapsed[0] += 3600.0
        return 0

    monkeypatch.setattr(campaign.dt, "datetime", Clock)
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign, "row_train_times", lambda: {})
    monkeypatch.setattr(campaign, "planned", lambda seeds, tasks: [(0, base), (1, base), (2, base)])
    monkeypatch.setattr(campaign, "run_in_foreground", run)
    times = tmp_path / "times.tsv"
    campaign.record(times, 9, base, campaign.START)
    campaign.record_time(times, 9, base, 600.0)
    until = (start + dt.timedelta(minutes=30)).strftime("%H:%M")
    assert campaign.main(["--until", until, "--fill", "--times", str(times)]) == 0
    assert [line[-1] for line in ran] == ["seed=0"]
    assert "reached: stopping before command 2/3" in capsys.readouterr().out


def test_what_loads_the_dense_base():
    """The commands a skipped base holds back under --fill: methods, timed dense points, and untimed dense
    points of a task whose counted reference is its trained base (iwslt); not the base itself, nor an untimed
    dense point that trains from scratch (the equal-budget control)."""
    campaign = _campaign()
    assert not campaign.starts_from_base(campaign.PLAN["imagenet"][0])
    assert not campaign.starts_from_base(campaign.CONTROL)
    assert campaign.starts_from_base(campaign.Point("imagenet", ("method=acm",)))
    assert campaign.starts_from_base(campaign.Point("imagenet", ("method=dense", "dense.width=0.5")))
    assert campaign.starts_from_base(campaign.Point("iwslt", ("method=dense", "dense.width=0.5", "timing=false")))


def test_fill_needs_until(capsys):
    import pytest

    campaign = _campaign()
    with pytest.raises(SystemExit) as stop:
        campaign.main(["--fill"])
    assert stop.value.code == 2 and "--fill needs --until" in capsys.readouterr().err


def test_points_the_times_file_has_not_timed_are_estimated_by_their_rows(tmp_path, monkeypatch, capsys):
    """A point the times file lacks is estimated by its rows' training time (the longest seed); a timed
    static size's row made before OWN_TRAIN_TIME counted the base its run loaded, and a method's row of an
    older schema counts the base it fine-tunes, so the same seed's base time is taken off (a newer method
    row counts its own stages only: nothing is).  Rows whose command trained nothing
    of its own estimate nothing: a dense point's that reused its seed's base, a method's whose seed has no
    base row.  A method point that reused another point's stages (the same training time) is estimated as
    training them: its command does when they are not cached.  The estimate applies under ``--until``."""
    import datetime as dt
    import math
    import shlex

    from helpers import blank_row

    from bench import results

    campaign = _campaign()
    base = campaign.PLAN["parity"][0]
    static, untimed, method, own_base, evaluated, later, unplaced, reused, baseless = (
        campaign.Point("parity", (f"method={m}", *rest)) for m, rest in
        (("dense", ("dense.depth=2",)), ("dense", ("dense.depth=4", "timing=false")),
         ("act", ("dense.depth=2", "act.taus=[0.01,0.001]")),  # a list value: quoted in a point id, not in a row
         ("dense", ("parity.n=16",)), ("dense", ("parity.test_samples=64",)), ("dense", ("dense.width=2",)),
         ("dense", ("dense.width=0.5",)), ("act", ("dense.depth=2", "parity.test_samples=64")),
         ("act", ("dense.depth=3",))))
    made = [(base, 0, 100.0, "old"), (base, 1, 300.0, "old"), (static, 0, 700.0, "old"),
            (static, 1, 800.0, "old"), (static, 2, 2000.0, "old"),  # seed 2 of the static size has no base row
            (untimed, 0, 400.0, "old"), (method, 0, 1200.0, "old"), (own_base, 0, 50.0, "old"),
            (evaluated, 1, 300.0, "old"), (later, 0, 40.0, "new"), (unplaced, 0, 900.0, "unknown"),
            (reused, 0, 1200.0, "old"), (method, 1, 1000.0, "old"), (baseless, 2, 500.0, "old")]
    own = campaign.Point("parity", ("method=act", "dense.depth=5"))  # a newer row: its own stages' time
    made.append((own, 0, 700.0, "new"))
    for i, (point, seed, seconds, sha) in enumerate(made):
        row = blank_row(method=point.overrides[0][7:], task="parity", seed=seed, git_sha=sha, train_time_s=seconds,
                        latency_b1_ms=math.nan if point is untimed else 1.0, timestamp=f"2026-01-01T00:00:{i:02d}Z",
                        command=" ".join(campaign.command(seed, point)),  # as bench/cli.py writes it
                        schema_version=results.SCHEMA_VERSION if point is own else 5)
        results.append(tmp_path, row, f"r{i}")
    times_module = sys.modules[campaign.row_train_times.__module__]  # scripts/campaign_times.py
    monkeypatch.setattr(times_module, "descends", lambda ancestor, sha: {"new": True, "old": False}.get(sha))
    trained = campaign.row_train_times((tmp_path,))
    assert trained == {campaign.point_id(base): 300.0, campaign.point_id(static): 600.0,
                       campaign.point_id(untimed): 400.0, campaign.point_id(own_base): 50.0,
                       campaign.point_id(later): 40.0,  # since OWN_TRAIN_TIME: nothing taken off
                       campaign.point_id(method): 1100.0,  # seed 0: 1200 - 100; seed 1: 1000 - 300
                       campaign.point_id(reused): 1100.0,
                       campaign.point_id(own): 700.0}  # nothing taken off

    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    first = campaign.progress([(2, static), (2, baseless)], {}, trained)[0]
    assert (first.left_trained, first.left_trained_s, first.left_unmeasured) == (1, 600.0, 1)
    assert "left: 2, 1 of them training about 0.2 h by the same points' rows, 1 with no recorded time" in \
        first.line()

    ran = []
    monkeypatch.setattr(campaign, "row_train_times", lambda: trained)
    monkeypatch.setattr(campaign, "planned", lambda seeds, tasks: [(2, static), (2, baseless)])
    monkeypatch.setattr(campaign, "run_in_foreground", lambda line, *_: ran.append(line) or 0)
    monkeypatch.setattr(campaign, "default_base_state", lambda seed, point: True)
    until = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=9)).strftime("%H:%M")
    assert campaign.main(["--until", until, "--times", str(tmp_path / "none.tsv")]) == 0 and ran == []
    assert "would be passed (about 10 min of training in its rows): stopping before command 1/2" in \
        capsys.readouterr().out


def test_descends_places_commits_by_git_ancestry(tmp_path):
    from helpers import git

    campaign = _campaign()
    git(tmp_path, "init", "-q")
    shas = []
    for i in range(2):
        git(tmp_path, "commit", "-q", "--allow-empty", "-m", str(i))
        shas.append(git(tmp_path, "rev-parse", "HEAD"))
    first, second = shas
    assert campaign.descends(first, second, tmp_path) is True
    assert campaign.descends(second, first, tmp_path) is False
    assert campaign.descends(first, "0" * 40, tmp_path) is None  # a commit this clone lacks


def _row_method_version(code_version: str, method: str) -> int:
    """The method version a row's ``code_version`` names (``...<method><n>``); a row made before the
    explicit versions (a source hash there) was made by version 1."""
    last = code_version.split(".")[-1]
    return int(last[len(method):]) if last.startswith(method) and last[len(method):].isdigit() else 1


def _awaits_rerun(rows, method: str) -> bool:
    """Today's version of ``method`` was bumped past every committed row of it: its rows await the
    campaign's re-run, so a selection that only rows of today's version can match (e.g. a variant label
    that version introduced) may select nothing until then."""
    import importlib

    from bench import registry

    module, cls = registry.method_spec(method).impl.split(":")
    today = int(getattr(importlib.import_module(module), cls).version)
    made = rows.loc[rows["method"] == method, "code_version"].astype(str)
    return all(_row_method_version(v, method) < today for v in made)


def test_every_claim_reads_only_points_the_campaign_runs_on_three_seeds():
    """The committed rows a claim's checks select were made by planned campaign commands, none of them a
    :data:`ONE_SEED` point (seed 0 only): a claim changed to read such a point must move it out of
    ``ONE_SEED``, or its verdict would rest on one seed for good.  A selection may be empty only while its
    method's rows all predate today's version of the method (:func:`_awaits_rerun`)."""
    from bench import results
    from bench.report import build as report
    from bench.report import checks as report_checks
    from bench.report import claims as report_claims

    campaign = _campaign()
    planned = {campaign.point_id(point) for points in campaign.PLAN.values() for point in points}
    one_seed = {campaign.point_id(point) for point in campaign.ONE_SEED}
    views = report.task_views(results.load(campaign.ROOT / "results"))
    read = 0
    for claim in report_claims.registered_claims():
        view = report_claims.find_view(claim, views)
        assert view is not None, f"claim {claim.id}: no committed rows of task {claim.task}"
        for select in report_checks.claim_selects(claim):
            keys = {key for point in report_checks.select_points(view, select)["keys"] for key in point}
            if not keys and _awaits_rerun(view.rows, select.method):
                continue
            assert keys, f"claim {claim.id}: {select} selects no committed point"
            for line in view.rows.loc[view.rows["row_key"].isin(keys), "command"]:
                point, seed = campaign.row_point(line)
                assert seed.startswith("seed=") and point in planned, f"claim {claim.id} reads {line!r}"
                assert point not in one_seed, f"claim {claim.id} reads the ONE_SEED point {point!r}"
                read += 1
    assert read


def test_parallel_campaign_starts_bases_first_and_runs_a_base_once(tmp_path, monkeypatch):
    """--jobs 2: each command gets one of the two CPUs; a dense base starts before everything else and its
    seed's methods wait for it; of two methods whose base is not trained here, only one starts (it trains
    the base) and the other waits for it to end, while another task's command takes the free slot."""
    campaign = _campaign()
    base = campaign.PLAN["parity"][0]
    act = campaign.Point("parity", ("method=act", "act.tau=1e-3"))
    other = campaign.Point("parity", ("method=act", "act.tau=1e-4"))
    cv_method, cv_other = (campaign.Point("commonvoice", ("method=moefication", r)) for r in ("recipe=paper", "x=1"))
    late = campaign.Point("parity", ("method=dense", "dense.depth=2", "timing=false", "results_dir=x"))
    plan = [(0, act), (0, late), (0, base), (0, cv_method), (0, cv_other)]
    events, live = [], []

    class Process:
        def __init__(self, line, cwd, stdout, stderr, start_new_session):
            self.line, self.returncode, self.polls = line, None, 0
            events.append(("start", " ".join(line), [" ".join(p.line) for p in live if p.returncode is None]))
            live.append(self)

        def poll(self):
            self.polls += 1
            if self.polls >= (8 if "recipe=paper" in self.line else 2):  # the command that trains the base: long
                self.returncode = 0
                events.append(("end", " ".join(self.line)))
            return self.returncode

    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign, "base_trained", lambda seed, task: task == "parity" and
                        any(e[0] == "end" and "method=dense" in e[1] for e in events))
    monkeypatch.setattr(campaign.subprocess, "Popen", Process)
    monkeypatch.setattr(campaign, "usable_cpus", lambda: 2)
    monkeypatch.setattr(campaign.time, "sleep", lambda s: None)
    monkeypatch.setattr(campaign, "drop_unneeded", lambda task: [])  # (the repository's artifacts/ untouched)
    assert campaign.run_parallel(plan, 2, None, tmp_path / "times.tsv", {}, tmp_path / "logs") == 0
    started = [" ".join(p.line) for p in live]
    assert len(started) == 5 and all(p.line[-2] == "threads=1" for p in live)
    # the base first, then the first commonvoice command beside it, before the earlier untimed dense point:
    # it trains its missing base on the way (the parity method waits for the parity base);
    # the second commonvoice command waits for the first (their base is not trained here)
    assert "method=dense task=parity" in started[0] and "recipe=paper" in started[1]
    beside = {line: others for kind, line, *rest in events if kind == "start" for others in rest}
    assert all(len(others) <= 1 for others in beside.values())  # two at a time
    assert not any("recipe=paper" in other for other in beside[next(n for n in started if "x=1" in n)])
    assert not any("method=dense" in other for other in beside[next(n for n in started if "act.tau=1e-3" in n)])
    times = (tmp_path / "times.tsv").read_text()
    assert times.count("start\t") == 5 and len(times.splitlines()) == 10


def test_parallel_campaign_starts_an_evaluation_only_point_after_its_model(tmp_path, monkeypatch):
    """--jobs 2: the CCT decoder pairing, which evaluates the CCT model of its seed, does not start beside
    the command that trains that model (it would wait for the model's lock with its CPU share idle); a
    later command takes the free slot, and the pairing starts once the model's command has ended."""
    campaign = _campaign()
    pairing, model = next((p, m) for p, m in campaign.EVALUATES.items() if "recipe=paper" in m.overrides)
    other = campaign.Point("parity", ("method=act", "act.tau=1e-3"))
    plan = [(0, model), (0, pairing), (0, other)]
    events, live = [], []

    class Process:
        def __init__(self, line, cwd, stdout, stderr, start_new_session):
            self.line, self.returncode, self.polls = " ".join(line), None, 0
            events.append(("start", self.line, [p.line for p in live if p.returncode is None]))
            live.append(self)

        def poll(self):
            self.polls += 1
            if self.polls >= (6 if "method=cct" in self.line and "cct.pairs" not in self.line else 2):
                self.returncode = 0
                events.append(("end", self.line))
            return self.returncode

    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign, "base_trained", lambda seed, task: True)
    monkeypatch.setattr(campaign.subprocess, "Popen", Process)
    monkeypatch.setattr(campaign, "usable_cpus", lambda: 2)
    monkeypatch.setattr(campaign.time, "sleep", lambda s: None)
    monkeypatch.setattr(campaign, "drop_unneeded", lambda task: [])  # (the repository's artifacts/ untouched)
    monkeypatch.setattr(campaign, "started", lambda seed, point: campaign.Started())
    assert campaign.run_parallel(plan, 2, None, tmp_path / "times.tsv", {}, tmp_path / "logs") == 0
    starts = [line for kind, line, *_ in events if kind == "start"]
    assert len(starts) == 3 and "method=act" in starts[1]  # beside the model: the later command, not the pairing
    pairing_start = next(i for i, e in enumerate(events) if e[0] == "start" and "cct.pairs=decoder" in e[1])
    model_end = next(i for i, e in enumerate(events) if e[0] == "end" and "cct.pairs" not in e[1]
                     and "method=cct" in e[1])
    assert pairing_start > model_end


def test_parallel_campaign_pauses_every_running_command_and_ships_what_each_saved(tmp_path, monkeypatch):
    """--jobs 2 --pause-at: at the pause time the running command gets a Ctrl-C (it saves its checkpoint) and
    ships its saved stages; the one that failed on its own just before is neither signalled nor shipped; the
    third command never starts and nothing is recorded as finished."""
    import datetime as real_dt
    import signal
    import types

    campaign = _campaign()
    points = [campaign.Point("parity", ("method=act", f"act.tau={tau}")) for tau in ("1e-3", "1e-4", "1e-5")]
    live, shipped, clock = [], [], {"reached": False}

    class Process:
        def __init__(self, line, cwd, stdout, stderr, start_new_session):
            self.line, self.returncode, self.signals, self.polls = line, None, [], 0
            live.append(self)

        def poll(self):  # the second command fails on its own between the campaign's last poll and the pause
            self.polls += 1
            if len(live) > 1 and self is live[1] and self.polls > 1:
                self.returncode = 1
            return self.returncode

        def send_signal(self, signum):
            self.signals.append(signum)
            self.returncode = 130

        def wait(self):
            return self.returncode

    pause = real_dt.datetime(2030, 1, 1, tzinfo=real_dt.timezone.utc)
    now = lambda tz=None: pause if clock["reached"] else pause - real_dt.timedelta(minutes=5)  # noqa: E731
    monkeypatch.setattr(campaign, "dt", types.SimpleNamespace(
        datetime=types.SimpleNamespace(now=now), timezone=real_dt.timezone, timedelta=real_dt.timedelta))
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign, "base_trained", lambda seed, task: True)
    monkeypatch.setattr(campaign.subprocess, "Popen", Process)
    monkeypatch.setattr(campaign, "usable_cpus", lambda: 2)
    monkeypatch.setattr(campaign.time, "sleep", lambda s: clock.update(reached=True))
    monkeypatch.setattr(campaign, "started", lambda seed, point: campaign.Started())
    monkeypatch.setattr(campaign, "pause_and_ship", lambda seed, point, line, commit: shipped.append(point))
    rc = campaign.run_parallel([(0, p) for p in points], 2, None, tmp_path / "times.tsv", {}, tmp_path / "logs",
                               pause=pause)
    assert rc == 130 and len(live) == 2 and live[0].signals == [signal.SIGINT] and live[1].signals == []
    assert shipped == points[:1]
    assert (tmp_path / "times.tsv").read_text().count("start\t") == 2
    assert len((tmp_path / "times.tsv").read_text().splitlines()) == 2


def test_parallel_campaign_expects_a_resumed_command_to_take_its_share_left(tmp_path, monkeypatch, capsys):
    """--jobs 2 --until: a command recorded at 2 h does not start with an hour left, unless it resumes with a
    quarter of its training left (its rows say the 2 h were all training) and its seed's base is here."""
    import datetime as dt

    campaign = _campaign()
    static = campaign.Point("parity", ("method=dense", "dense.depth=2"))
    started = []

    class Process:
        def __init__(self, line, **kwargs):
            self.line, self.returncode = line, 0
            started.append(line)

        def poll(self):
            return 0

    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign.subprocess, "Popen", Process)
    monkeypatch.setattr(campaign, "usable_cpus", lambda: 2)
    monkeypatch.setattr(campaign.time, "sleep", lambda s: None)
    stop = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    recorded = {campaign.point_id(static): 7200.0, campaign.point_id(campaign.PLAN["parity"][0]): 3600.0}
    for left, has_base, runs in ((1.0, True, False), (0.25, True, True), (0.25, False, False)):
        # without its seed's dense base here, the command trains it first (an hour more)
        monkeypatch.setattr(campaign, "default_base_state", lambda seed, point: has_base)
        started.clear()
        assert campaign.run_parallel([(0, static)], 2, stop, tmp_path / "times.tsv", recorded, tmp_path / "logs",
                                     trained=recorded, share=lambda seed, point: left if point == static else 1.0) == 0
        assert bool(started) == runs
        assert ("it would not end by the stop time" in capsys.readouterr().out) != runs


def test_export_new_base_ships_what_this_machine_trained(tmp_path, monkeypatch):
    """--export-bases: a base trained here and not shipped is exported (with its canonical command); a
    shipped or untrained one is not, nor one that would take the shipped weights past the limit."""
    import sys
    import types

    from bench import artifacts, train

    campaign = _campaign()
    ckpt = tmp_path / "cache" / "w1.0-d1.0-abc.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"x" * 1000)
    calls = []
    fake = types.ModuleType("export_base")
    fake.export = lambda overrides, **kw: calls.append((overrides, kw)) or tmp_path / "a.safetensors"
    monkeypatch.setitem(sys.modules, "export_base", fake)
    monkeypatch.setattr(campaign, "base_checkpoint", lambda seed, task: ckpt)
    monkeypatch.setattr(campaign, "ROOT", tmp_path)
    shipped, done = [None], [True]
    monkeypatch.setattr(artifacts, "find", lambda path: shipped[0])
    monkeypatch.setattr(train, "is_done", lambda path: done[0])
    assert campaign.export_new_base(1, "imagenet") == tmp_path / "a.safetensors"
    assert calls[0][0] == ["task=imagenet", "seed=1"]
    assert calls[0][1]["command"] == "python -m bench run method=dense task=imagenet threads=2 seed=1"
    shipped[0] = object()
    assert campaign.export_new_base(1, "imagenet") is None
    shipped[0], done[0] = None, False
    assert campaign.export_new_base(1, "imagenet") is None
    done[0] = True
    monkeypatch.setattr(campaign, "SHIPPED_LIMIT", 999)
    assert campaign.export_new_base(1, "imagenet") is None and len(calls) == 1
    monkeypatch.setattr(campaign, "SHIPPED_LIMIT", 10 ** 6)  # trained on the way to a method: that command
    method_line = ["python", "-m", "bench", "run", "method=acm", "task=imagenet", "threads=1", "seed=1"]
    assert campaign.export_new_base(1, "imagenet", method_line) is not None
    assert calls[1][1]["command"] == "python -m bench run method=acm task=imagenet threads=1 seed=1"


def test_a_base_trained_on_the_way_ships_before_its_command_ends(tmp_path, monkeypatch):
    """--export-bases --commit: while a method's command runs, its seed's base ships (and is committed on its
    own) once trained, not when the command ends; it is looked for at most every BASE_POLL_S seconds, shipped
    once, and a command that loads no base is never looked at."""
    campaign = _campaign()
    method = campaign.Point("imagenet", ("method=acm", "recipe=paper"))
    static = campaign.Point("parity", ("method=act", "act.tau=1e-3", "results_dir=x", "timing=false"))
    monkeypatch.setattr(campaign, "starts_from_base", lambda point: point is method)
    trained, exported, commits = [False], [], []
    monkeypatch.setattr(campaign, "base_trained", lambda seed, task: trained[0])
    monkeypatch.setattr(campaign, "export_new_base",
                        lambda seed, task, trained_by: exported.append((task, seed, trained_by)) or tmp_path)
    monkeypatch.setattr(campaign, "commit_paths", lambda paths, message, root: commits.append((paths, message)))
    shipper = campaign.BaseShipper(commit=True, root=tmp_path)
    line = ["python", "-m", "bench", "run", "method=acm", "task=imagenet", "recipe=paper", "threads=1", "seed=1"]
    running = [(1, method, line), (1, static, ["python", "-m", "bench", "run", "method=act"])]
    shipper.poll(running, now=1000.0)
    assert not exported  # still training
    trained[0] = True
    shipper.poll(running, now=1000.0 + campaign.BASE_POLL_S / 2)
    assert not exported  # not looked at again before BASE_POLL_S
    shipper.poll(running, now=1000.0 + campaign.BASE_POLL_S)
    assert exported == [("imagenet", 1, line)]  # the command that trained it is recorded
    assert commits[0][0] == ["artifacts"] and commits[0][1].startswith("base: the imagenet dense base of seed 1")
    shipper.poll(running, now=1000.0 + 3 * campaign.BASE_POLL_S)
    assert len(exported) == 1 and len(commits) == 1  # once


def _interrupt_once_ready(campaign, monkeypatch, ready) -> None:
    """The foreground loop's first sleep waits for the child to have armed its handlers (``ready``), then
    raises KeyboardInterrupt, as a Ctrl-C to the campaign would."""
    real_sleep = campaign.time.sleep

    def interrupt_once_ready(seconds):
        while not ready.exists():
            real_sleep(0.05)
        raise KeyboardInterrupt

    monkeypatch.setattr(campaign.time, "sleep", interrupt_once_ready)


def test_an_interrupted_foreground_command_gets_one_sigint_and_stops(tmp_path, monkeypatch):
    """The one-at-a-time campaign, interrupted, forwards SIGINT to its command (which runs in its own session,
    so a Ctrl-C reaches it only this way) and returns 130 once the command has stopped."""
    campaign = _campaign()
    ready, got = tmp_path / "ready", tmp_path / "got"
    child = ("import pathlib, signal, sys, time\n"
             "count = []\n"
             "def on_int(*_):\n"
             "    count.append(1)\n"
             f"    pathlib.Path({str(got)!r}).write_text(str(len(count)))\n"
             "    sys.exit(130)\n"
             "signal.signal(signal.SIGINT, on_int)\n"
             f"pathlib.Path({str(ready)!r}).touch()\n"
             "time.sleep(60)\n")
    _interrupt_once_ready(campaign, monkeypatch, ready)
    point = campaign.Point("parity", ("method=dense",))
    assert campaign.run_in_foreground(["python", "-c", child], 0, point, None) == 130
    assert got.read_text() == "1"


def test_a_campaign_started_with_sigint_ignored_still_stops_on_sigint_and_sigterm():
    """A campaign started in the background by a script begins with SIGINT ignored; it re-arms SIGINT, and
    SIGTERM stops it the same way (KeyboardInterrupt: its commands are sent SIGINT and save their checkpoints)."""
    import os
    import signal

    campaign = _campaign()
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        campaign.stoppable()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signum)
                time.sleep(1)  # the handler runs at the next bytecode; this is not reached
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def test_stage_rates_fall_back_to_the_same_kind_then_to_none(tmp_path):
    import pandas as pd

    from bench import throughput as estimate

    rows = [("imagenet", "acm:e2e-b0.6", 1, 8.0, "2026-01-01"), ("imagenet", "acm:e2e-b0.6", 1, 9.0, "2026-02-01"),
            ("imagenet", "acm:e2e-b0.75", 1, 7.0, "2026-01-01"), ("imagenet", "dense:base", 2, 20.0, "2026-01-01")]
    pd.DataFrame(rows, columns=["task", "stage", "threads", "steps_per_s", "timestamp"]).to_csv(
        tmp_path / "a.csv", index=False)
    rates = estimate.measured_rates(tmp_path)
    assert rates[("imagenet", "acm:e2e-b0.6", 1)] == 9.0  # the latest row
    assert estimate.stage_rate(rates, "imagenet", "acm:e2e-b0.4", 1) == 7.0  # the slowest of its kind
    assert estimate.stage_rate(rates, "imagenet", "acm:gates", 1) is None
    assert estimate.stage_rate(rates, "imagenet", "dense:base", 1) is None  # another thread count
    assert estimate.measured_rates(tmp_path / "none") == {}
    pd.DataFrame([("imagenet", "dense:base", 2, 99.0, "2026-03-01", "bf16")],
                 columns=["task", "stage", "threads", "steps_per_s", "timestamp", "precision"]).to_csv(
        tmp_path / "b.csv", index=False)
    assert estimate.measured_rates(tmp_path)[("imagenet", "dense:base", 2)] == 20.0  # the campaign trains in fp32


def test_a_row_made_with_other_thread_counts_maps_to_its_point():
    campaign = _campaign()
    seed, point = campaign.planned(seeds=(0,), tasks=("imagenet",))[1]
    line = campaign.command(seed, point, ("threads=1", "train_threads=1"))
    assert campaign.row_point(" ".join(line)) == (campaign.point_id(point), f"seed={seed}")
    ranks = ["torchrun", "--nproc_per_node=2", *line[1:]]  # the command a --nproc 2 campaign's row records
    assert ranks[3:5] == ["bench", "run"]
    assert campaign.row_point(" ".join(ranks)) == (campaign.point_id(point), f"seed={seed}")


def test_train_threads_is_refused_with_jobs(capsys):
    campaign = _campaign()
    with pytest.raises(SystemExit) as exit_:
        campaign.main(["--jobs", "2", "--train-threads", "1", "--list"])
    assert exit_.value.code == 2 and "--train-threads is the one-at-a-time campaign's" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--nproc", "0"], ["--nproc", "2", "--jobs", "2"],
                                  ["--nproc", "2", "--train-threads", "2"]])
def test_nproc_is_refused_with_what_it_replaces(args, capsys):
    campaign = _campaign()
    with pytest.raises(SystemExit) as exit_:
        campaign.main([*args, "--list"])
    assert exit_.value.code == 2 and "--nproc" in capsys.readouterr().err


def test_nproc_runs_each_command_on_torchrun_ranks_of_one_training_thread(tmp_path, monkeypatch, capsys):
    """``--nproc 2``: the command line (what its rows record) trains on one thread per rank and times on all
    usable CPUs; it is launched by torchrun with two ranks, and one process runs it as before."""
    import sys

    campaign = _campaign()
    launched = []
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign, "usable_cpus", lambda: 2)
    monkeypatch.setattr(campaign, "run_in_foreground",
                        lambda line, seed, point, shipper, nproc=1, pause_at=None:
                        launched.append(campaign.launch(line, nproc)) or 0)
    assert campaign.main(["--task", "parity", "--seeds", "0", "--match", "method=dense", "--nproc", "2",
                          "--times", str(tmp_path / "times.tsv")]) == 0
    assert launched and all(argv[:5] == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                         "--nproc_per_node=2"] and argv[5:8] == ["-m", "bench", "run"]
                            and argv[-3:-1] == ["threads=2", "train_threads=1"] for argv in launched)
    assert "torchrun --nproc_per_node=2 -m bench run method=dense" in capsys.readouterr().out
    line = ["python", "-m", "bench", "run", "method=dense"]
    assert campaign.launch(line) == [sys.executable, *line[1:]]


def test_training_threads_are_the_fastest_measured_count_of_the_task():
    _campaign()
    estimate = load_script("campaign_estimate")
    rates = {("imagenet", "dense:base", 1): 20.0, ("imagenet", "dense:base", 2): 17.0,
             ("commonvoice", "dense:base", 1): 2.7, ("commonvoice", "dense:base", 2): 4.5,
             ("iwslt", "dense:base", 1): 9.0, ("imagenet", "dense:base", 4): 30.0,
             ("parity", "dense:base", 1): 10.4, ("parity", "dense:base", 2): 10.0}
    assert estimate.fastest_threads(rates, "imagenet", 2) == 1  # one thread trains faster on 2 cores
    assert estimate.fastest_threads(rates, "imagenet", 4) == 4  # counts beyond the usable CPUs are left out
    assert estimate.fastest_threads(rates, "imagenet", 3) == 3  # the usable count not measured: all of them
    assert estimate.fastest_threads(rates, "commonvoice", 2) == 2
    assert estimate.fastest_threads(rates, "iwslt", 2) == 2  # one count measured: all usable CPUs
    assert estimate.fastest_threads(rates, "parity", 2) == 2  # 4% faster: within the margin
    assert estimate.fastest_threads(rates, "dat", 2) == 2  # none measured


def test_quiet_base_rates_are_medians_of_quiet_fp32_rows(tmp_path):
    import pandas as pd

    from bench import throughput as estimate

    columns = ["task", "stage", "threads", "steps_per_s", "timestamp", "load_before", "load_after", "cpus", "precision"]
    rows = [("imagenet", "dense:base", 1, v, f"2026-01-0{i}", 1.0, 1.0, 2, "fp32") for i, v in enumerate((18, 20, 25), 1)]
    rows += [("imagenet", "dense:base", 1, 99.0, "2026-01-05", 3.0, 1.0, 2, "fp32"),  # loaded: left out
             ("imagenet", "dense:base", 2, 99.0, "2026-01-06", 1.0, 1.0, 2, "bf16"),  # not fp32
             ("imagenet", "acm:gates", 1, 50.0, "2026-01-07", 1.0, 1.0, 2, "fp32")]  # not the base
    pd.DataFrame(rows, columns=columns).to_csv(tmp_path / "a.csv", index=False)
    assert estimate.quiet_base_rates(tmp_path) == {("imagenet", "dense:base", 1): 20.0}
    latest = {("imagenet", "dense:base", 1): 99.0, ("imagenet", "acm:gates", 1): 50.0}  # (the loaded row: latest)
    assert estimate.rates(tmp_path) == (latest, {("imagenet", "dense:base", 1): 20.0})  # the rows read once


def test_estimate_times_the_stages_left_to_train(tmp_path, monkeypatch):
    """A paper-recipe ACM point at a seed with no base here: the base then every ACM stage, each at its
    measured rate or, without one, at the base's step time; the stage steps are the recipe's."""
    campaign = _campaign()
    estimate = load_script("campaign_estimate")
    monkeypatch.setattr(estimate, "ROOT", tmp_path)  # an empty cache: nothing trained here
    point = campaign.Point("imagenet", ("method=acm", "acm.beta_target=0.4", "recipe=paper"))
    todo = estimate.stages_to_train(7, point, 1)
    assert todo[0][0] == "dense:base" and [s.split(":")[0] for s, _ in todo[1:]] == ["acm"] * (len(todo) - 1)
    base_steps = todo[0][1]
    assert abs(sum(steps for _, steps in todo[1:]) - base_steps / 3) <= 1  # the paper: a third of the base
    rates = {("imagenet", "dense:base", 1): 20.0, ("imagenet", todo[1][0], 1): 10.0}
    guess = estimate.estimate(7, point, 1, rates, lambda task, threads: 0.5)
    rest = todo[2:]
    assert guess.at_base_rate == [s for s, _ in rest]
    assert guess.seconds == pytest.approx(base_steps / 20 + todo[1][1] / 10 + sum(n for _, n in rest) * 0.5)


def test_a_stage_that_resumes_from_its_checkpoint_counts_only_the_steps_left(tmp_path, monkeypatch):
    from bench import checkpoints, protocol

    campaign = _campaign()
    estimate = load_script("campaign_estimate")
    monkeypatch.setattr(estimate, "ROOT", tmp_path)
    point = campaign.Point("imagenet", ("method=acm", "acm.beta_target=0.4", "recipe=paper"))
    whole = estimate.stages_to_train(7, point, 1)
    run, _, method, _ = estimate.build_command(7, point, ("threads=1",))
    last = [p for p in protocol.plan(method).stages if p.steps][-1]
    _fake_partial(checkpoints.partial_path(run.stage_path(run.method, last.stage.name, last.key)), 30)
    resumed = estimate.stages_to_train(7, point, 1)
    assert resumed[:-1] == whole[:-1] and resumed[-1] == (whole[-1][0], whole[-1][1] - 30)


def test_a_resumed_command_is_expected_to_take_its_share_of_steps_left(tmp_path, monkeypatch):
    import torch

    from bench import artifacts, checkpoints, protocol

    campaign = _campaign()
    estimate = load_script("campaign_estimate")
    monkeypatch.setattr(estimate, "ROOT", tmp_path)  # an empty cache ...
    monkeypatch.setattr(artifacts, "ROOT", tmp_path / "artifacts")  # ... and nothing shipped
    point = campaign.Point("imagenet", ("method=acm", "acm.beta_target=0.4", "recipe=paper"))
    assert estimate.share_left(7, point, 1) == 1.0  # nothing resumes
    run, _, method, _ = estimate.build_command(7, point, ("threads=1",))
    stages = [p for p in protocol.plan(method).stages if p.steps]
    first, last = stages[0], stages[-1]
    _fake_partial(checkpoints.partial_path(run.stage_path(run.method, last.stage.name, last.key)), 30)
    total = sum(p.steps for p in stages)
    assert estimate.share_left(7, point, 1) == pytest.approx((total - 30) / total)
    # a stage finished in the cache (e.g. shared with another point) counts neither as done nor as to train
    torch.save({}, run.stage_path(run.method, first.stage.name, first.key))
    assert estimate.share_left(7, point, 1) == pytest.approx((total - first.steps - 30) / (total - first.steps))
    # --status scales the training part of the recorded wall time (the rows' training time) by it
    monkeypatch.setattr(campaign, "has_rows", lambda seed, p: False)
    pid = campaign.point_id(point)
    lines = campaign.status([(7, point)], {(pid, 0): 6000.0}, {pid: 4000.0}, None, lambda seed, p: 0.25)
    assert "0.8 h estimated from the same points' recorded wall time" in lines[0]  # 6000 - 0.75 * 4000 s
    pending = lines[lines.index("pending commands (estimated time, from):") + 1:]
    assert "50 min" in pending[0] and "its training scaled to the 25.0% of its steps left" in pending[0]
    assert campaign.expected_seconds(point, {pid: 6000.0}, {}, 0.25) == 1500.0  # no rows: all of it is training
    assert campaign.expected_seconds(point, {}, {}, 0.25) is None
    # the campaign builds a plan only where the point's method has a resumable checkpoint
    monkeypatch.setattr(estimate, "share_left", lambda *a: pytest.fail("built a plan with nothing to resume"))
    _fake_partial(tmp_path / "cache" / "imagenet" / "cct" / "cct-x.partial.pt", 30)  # another method's
    assert campaign.resumed_share({"imagenet": 1}, cache=tmp_path / "cache")(7, point) == 1.0
    _fake_partial(tmp_path / "artifacts" / "imagenet" / "cct" / "cct-x.partial.pt", 30)  # shipped, another's
    assert campaign.resumed_share({"imagenet": 1}, cache=tmp_path / "cache")(7, point) == 1.0
    monkeypatch.setattr(estimate, "share_left", lambda seed, p, threads: 0.5)
    _fake_partial(tmp_path / "artifacts" / "imagenet" / "acm" / "acm-x.partial.pt", 30)  # shipped, its own
    assert campaign.resumed_share({"imagenet": 1}, cache=tmp_path / "cache")(7, point) == 0.5
    _fake_partial(tmp_path / "cache" / "imagenet" / "acm" / "acm-x.partial.pt", 30)  # in the cache
    (tmp_path / "artifacts" / "imagenet" / "acm" / "acm-x.partial.pt").unlink()
    assert campaign.resumed_share({"imagenet": 1}, cache=tmp_path / "cache")(7, point) == 0.5


def test_a_paused_dense_base_counts_its_own_steps_left(tmp_path, monkeypatch):
    from bench import artifacts, checkpoints, protocol

    campaign = _campaign()
    estimate = load_script("campaign_estimate")
    monkeypatch.setattr(estimate, "ROOT", tmp_path)
    monkeypatch.setattr(artifacts, "ROOT", tmp_path / "artifacts")  # the shipped parity base does not count
    point = campaign.Point("parity", ("method=dense",))
    run, task, method, _ = estimate.build_command(0, point, ("threads=1",))
    [base] = protocol.plan_status(method, protocol.plan(method))
    assert base.base and estimate.share_left(0, point, 1) == 1.0
    path = checkpoints.partial_path(run.stage_path("dense", base.name, protocol.plan(method).parent_key))
    _fake_partial(path, base.steps // 4)
    assert estimate.share_left(0, point, 1) == pytest.approx(0.75)
    _fake_partial(path, base.steps)  # saved at its last step, before a pause: nothing left to train
    assert estimate.share_left(0, point, 1) == 0.0


def test_a_seed_whose_base_is_missing_charges_the_base_to_its_first_command(monkeypatch):
    """--status: where a seed's dense base has its rows but is neither cached nor shipped here, the first
    pending command that loads it is charged the base's own recorded time, once per seed; a cached base adds
    nothing, and a pending base command counts it in its own time."""
    campaign = _campaign()
    base = campaign.PLAN["parity"][0]
    first, second = (campaign.Point("parity", ("method=act", f"act.tau={t}")) for t in ("1", "2"))
    times = {(campaign.point_id(base), 0): 3000.0, (campaign.point_id(first), 0): 600.0,
             (campaign.point_id(second), 0): 600.0}
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: point == base and seed < 2)
    plan = [(seed, point) for seed in (0, 1, 2) for point in (base, first, second)]
    rows = campaign.progress(plan, times, {},
                             base_state=lambda seed, point: None if campaign.is_base(point) else seed == 1)
    assert [row.left_estimate_s for row in rows] == [4200.0, 1200.0, 4200.0]
    assert [seconds for _, seconds, _ in rows[0].pending] == [3600.0, 600.0]
    assert rows[0].pending[0][2] == ("recorded wall time, and 50 min for its seed's dense base, which it trains on "
                                     "its way (neither cached nor shipped)")
    assert [seconds for _, seconds, _ in rows[2].pending] == [3000.0, 600.0, 600.0]
    assert [row.left_estimate_s for row in campaign.progress(plan, times, {})] == [1200.0, 1200.0, 4200.0]
    # a command planned before its seed's pending base command (a calibration point) is not charged it
    later = [(3, first), (3, base), (3, second)]
    [row] = campaign.progress(later, times, {},
                              base_state=lambda seed, point: None if campaign.is_base(point) else False)
    assert [seconds for _, seconds, _ in row.pending] == [600.0, 3000.0, 600.0]


def test_only_a_command_that_loads_its_tasks_default_base_is_charged_it(tmp_path, monkeypatch):
    """A point that changes the task's base settings loads a base of its own; a timed static size loads the
    default one after training (its plan lists it last); an untimed one trains from scratch and loads none."""
    from bench import artifacts

    campaign = _campaign()
    estimate = load_script("campaign_estimate")
    monkeypatch.setattr(estimate, "ROOT", tmp_path)  # an empty cache
    monkeypatch.setattr(artifacts, "ROOT", tmp_path / "artifacts")  # nothing shipped
    act, sequence = (campaign.Point("parity", ("method=act", *rest)) for rest in
                     (("act.tau=1e-3",), ("parity.variant=sequence", "parity.n=16", "parity.train_steps=2000")))
    static, untimed = (campaign.Point("parity", ("method=dense", "dense.depth=2", *rest))
                       for rest in ((), ("timing=false",)))
    assert campaign.loads_default_base(0, act) and not campaign.loads_default_base(0, sequence)
    assert campaign.default_base_state(0, act) is False and campaign.default_base_state(0, sequence) is None
    assert campaign.default_base_state(0, campaign.PLAN["parity"][0]) is None  # the base's own command
    steps = estimate.stages_to_train(0, static, 1)
    assert steps[0][0] == "dense:w1-d2" and steps[-1] == ("dense:base", steps[-1][1]) and len(steps) == 2
    assert [stage for stage, _ in estimate.stages_to_train(0, untimed, 1)] == ["dense:w1-d2"]


def test_an_evaluation_only_command_without_its_model_here_is_charged_the_models_training(monkeypatch):
    """--status: the CCT decoder pairing evaluates the model its point's command trained; where that model is
    not in this machine's cache, the pairing trains it first, so it is charged that command's recorded time;
    not where the model is here."""
    import datetime as dt

    campaign = _campaign()
    [(pairing, model)] = [(k, v) for k, v in campaign.EVALUATES.items() if "recipe=paper" in k.overrides]
    assert "cct.pairs=decoder" in pairing.overrides and "cct.pairs=decoder" not in model.overrides
    assert campaign.PLAN["iwslt"].index(pairing) == campaign.PLAN["iwslt"].index(model) + 1  # model still cached
    times = {(campaign.point_id(model), 0): 6000.0, (campaign.point_id(pairing), 0): 120.0}
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: point == model)
    for here, seconds in ((False, 6120.0), (True, 120.0)):
        [row] = campaign.progress([(1, model), (1, pairing)], times, {}, model_state=lambda seed, point: here)
        assert [s for _, s, _ in row.pending] == [seconds]
    [line] = [line for line in campaign.status([(1, model), (1, pairing)], times, {},
                                               model_state=lambda seed, point: False) if "pairs=decoder" in line]
    assert line.endswith("(recorded wall time, and 100 min to train again the model it evaluates (not in this "
                         "machine's cache))")
    # the model's command pending before it trains the model: nothing more is charged
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    [row] = campaign.progress([(1, model), (1, pairing)], times, {}, model_state=lambda seed, point: False)
    assert [s for _, s, _ in row.pending] == [6000.0, 120.0]
    # a pairing timed by its rows alone is not charged (those rows hold the model's training where it trained it)
    [row] = campaign.progress([(1, pairing)], {}, {campaign.point_id(pairing): 5000.0},
                              model_state=lambda seed, point: False)
    assert [s for _, s, _ in row.pending] == [5000.0]
    # --until charges it too, also where the model's command has no rows (skipped, or failed)
    monkeypatch.setattr(campaign, "default_base_state", lambda seed, point: True)
    monkeypatch.setattr(campaign, "evaluated_model_state", lambda seed, point: False)
    stop = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    expected = campaign.estimates(times)
    assert campaign.until_estimate(1, pairing, expected, {}, None, stop) == (6120.0, 1.0, 0.0, 6000.0)
    monkeypatch.setattr(campaign, "evaluated_model_state", lambda seed, point: True)
    assert campaign.until_estimate(1, pairing, expected, {}, None, stop) == (120.0, 1.0, 0.0, 0.0)


def test_the_model_an_evaluation_only_command_needs_is_looked_up_in_the_cache(tmp_path, monkeypatch):
    """:func:`evaluated_model_state`: None for a point that trains its own model; False in an empty cache (its
    method's stage is to train); True once that stage is cached."""
    from bench import artifacts

    campaign = _campaign()
    estimate = load_script("campaign_estimate")
    monkeypatch.setattr(estimate, "ROOT", tmp_path)  # an empty cache
    monkeypatch.setattr(artifacts, "ROOT", tmp_path / "artifacts")  # nothing shipped
    model = campaign.Point("parity", ("method=act", "act.tau=1e-3"))
    evaluation = campaign.Point("parity", ("method=act", "act.tau=1e-3", "timing=false"))
    monkeypatch.setattr(campaign, "EVALUATES", {evaluation: model})
    assert campaign.evaluated_model_state(0, model) is None
    assert campaign.evaluated_model_state(0, evaluation) is False
    from bench import protocol

    run, _, method, _ = estimate.build_command(0, evaluation)
    [stage] = [stage for stage in protocol.plan(method).stages if stage.steps]
    path = run.stage_path(run.method, stage.stage.name, stage.key)  # the model's stage, cached here
    path.parent.mkdir(parents=True)
    path.touch()
    assert campaign.evaluated_model_state(0, evaluation) is True


def test_status_lists_every_pending_command_with_its_estimate(monkeypatch):
    campaign = _campaign()
    estimate = load_script("campaign_estimate")
    done, timed, guessed = (campaign.Point("parity", ("method=act", f"act.tau={t}")) for t in ("1", "2", "3"))
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: point == done)
    times = {(campaign.point_id(timed), 0): 600.0}
    guess = estimate.Estimate(5400.0, [("act:tau3", 100)], ["act:tau3"], [5400.0])
    lines = campaign.status([(0, done), (0, timed), (0, guessed)], times, {}, lambda seed, point: guess)
    assert "1/3 commands have rows" in lines[0] and "training about 1.5 h by measured throughput" in lines[0]
    assert "1 at the dense base's step time" in lines[0]
    pending = lines[lines.index("pending commands (estimated time, from):") + 1:]
    assert len(pending) == 2 and "10 min" in pending[0] and "recorded wall time" in pending[0]
    assert "90 min" in pending[1] and "act:tau3 at the dense base's step time" in pending[1]
    assert "act.tau=1" not in "".join(pending)
    # two commands of one seed that both lack the base: the base's time is counted once
    with_base = estimate.Estimate(3000.0, [("dense:base", 10), ("act:tau3", 5)], ["dense:base"], [2400.0, 600.0])
    lines = campaign.status([(0, timed), (0, guessed), (1, guessed), (0, done)], {}, {},
                            lambda seed, point: with_base)
    assert "training about 1.0 h by measured throughput" in lines[0]  # 3000 + 600 s at seed 0
    assert "training about 0.8 h by measured throughput" in lines[1]  # seed 1 trains its own base


def test_a_shipped_base_goes_once_every_planned_command_of_its_seed_has_rows(tmp_path, monkeypatch, capsys):
    """Seed 1's base goes (its commands in the campaign's plan all have rows), seed 2's stays (one has none),
    seed 0's always stays (a fresh clone's default runs install it), another task's is not looked at, and a
    seed outside the plan keeps its base."""
    import json

    campaign = _campaign()
    root = tmp_path / "artifacts"
    for task, seed in (("parity", 0), ("parity", 1), ("parity", 2), ("imagenet", 1)):
        folder = root / task / "dense"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"w1.0-d1.0-s{seed}.json").write_text(json.dumps({"key": {"seed": seed, "task": task}}))
        (folder / f"w1.0-d1.0-s{seed}.safetensors").write_bytes(b"weights")
    plan = campaign.planned((0, 1, 2), ("parity", "imagenet"))
    late = [item for item in plan if item[0] == 2 and item[1].task == "parity"][-1]
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: (seed, point) != late)
    dropped = campaign.drop_finished_bases("parity", plan, root)
    assert dropped == [root / "parity" / "dense" / "w1.0-d1.0-s1.safetensors"]
    left = sorted(p.name for p in root.rglob("*") if p.is_file())
    assert left == sorted(f"w1.0-d1.0-s{s}.{ext}" for s in (0, 2, 1) for ext in ("json", "safetensors"))
    assert "every parity command of seed 1 in this campaign has its rows" in capsys.readouterr().out
    seed_2 = [item for item in plan if item[0] == 2]  # a campaign of seed 2 alone leaves seed 1's base alone
    assert campaign.drop_finished_bases("imagenet", seed_2, root) == [] and (root / "imagenet").exists()
    assert campaign.drop_finished_bases("parity", plan) == []  # (tests: campaign_partials.ARTIFACTS is empty)


def test_commit_finished_commits_rows_artifacts_and_times_only(tmp_path, monkeypatch):
    """--commit: a finished command's rows, shipped base and times line go into one commit naming the command;
    a staged code change and an untracked file outside those paths stay out; nothing new: no commit."""
    from helpers import git

    campaign = _campaign()
    for name in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{name}_NAME", "t")
        monkeypatch.setenv(f"GIT_{name}_EMAIL", "t@example.org")
    git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git(tmp_path, "add", "code.py")
    git(tmp_path, "commit", "-q", "-m", "code")
    (tmp_path / "code.py").write_text("x = 2\n")
    git(tmp_path, "add", "code.py")  # staged, not the campaign's
    (tmp_path / "notes.txt").write_text("scratch\n")
    rows = tmp_path / "results" / "parity" / "dense"
    rows.mkdir(parents=True)
    (rows / "r1.csv").write_text("method,seed\ndense,0\n")
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "base.safetensors").write_bytes(b"weights")
    times = tmp_path / "scripts" / "campaign_times.tsv"
    times.parent.mkdir()
    times.write_text("12.0\t0\tmethod=dense task=parity\n")
    point = campaign.Point("parity", ("method=dense",))
    assert campaign.commit_finished(0, point, times, root=tmp_path) is True
    subject, *files = git(tmp_path, "show", "--name-only", "--format=%s", "HEAD").splitlines()
    assert subject.startswith("rows: python -m bench run method=dense task=parity") and "seed=0" in subject
    assert sorted(f for f in files if f) == ["artifacts/base.safetensors", "results/parity/dense/r1.csv",
                                             "scripts/campaign_times.tsv"]
    status = git(tmp_path, "status", "--porcelain").splitlines()
    assert "M  code.py" in status and "?? notes.txt" in status  # still staged; still untracked
    assert campaign.commit_finished(0, point, times, root=tmp_path) is False  # nothing new


def test_a_base_step_measured_beside_other_work_is_flagged_once(monkeypatch):
    _campaign()
    estimate = load_script("campaign_estimate")
    from bench import runner

    class Built:
        def base_budget(self):
            return {"batch_size": 4}

    calls = []
    monkeypatch.setattr(runner, "build", lambda cfg, method, task: (None, Built(), None))
    monkeypatch.setattr(runner, "base_step_s", lambda built, batch, device: calls.append(batch) or 0.25)
    monkeypatch.setattr(estimate.os, "cpu_count", lambda: 2)
    warned = []
    monkeypatch.setattr(estimate.os, "getloadavg", lambda: (2.0, 2.0, 2.0))
    step_s = estimate.live_base_step_s(warn=warned.append)
    assert step_s("parity", 1) == 0.25 and step_s("parity", 1) == 0.25 and calls == [4]  # measured once
    assert len(warned) == 1 and "load of 2.00 on 2 CPUs" in warned[0] and "250 ms on 1 thread(s)" in warned[0]
    monkeypatch.setattr(estimate.os, "getloadavg", lambda: (0.3, 0.3, 0.3))
    quiet = []
    assert estimate.live_base_step_s(warn=quiet.append)("parity", 1) == 0.25 and quiet == []


def test_a_base_step_comes_from_the_quiet_recorded_rate_and_is_measured_only_without_one():
    _campaign()
    estimate = load_script("campaign_estimate")
    measured = []
    step_s = estimate.recorded_base_step_s({("imagenet", "dense:base", 1): 20.0},
                                           live=lambda task, threads: measured.append((task, threads)) or 0.5)
    assert step_s("imagenet", 1) == 0.05 and measured == []
    assert step_s("imagenet", 2) == 0.5 and step_s("parity", 1) == 0.5
    assert measured == [("imagenet", 2), ("parity", 1)]


def test_a_command_running_at_pause_time_gets_one_sigint_and_stops(tmp_path):
    """``--pause-at``: at the pause time the running command is stopped as by a Ctrl-C (it saves its
    checkpoint), and the campaign returns 130."""
    campaign = _campaign()
    ready, got = tmp_path / "ready", tmp_path / "got"
    child = ("import pathlib, signal, sys, time\n"
             "def on_int(*_):\n"
             f"    pathlib.Path({str(got)!r}).write_text('saved')\n"
             "    sys.exit(130)\n"
             "signal.signal(signal.SIGINT, on_int)\n"
             f"pathlib.Path({str(ready)!r}).touch()\n"
             "time.sleep(60)\n")
    point = campaign.Point("parity", ("method=dense",))
    started = time.time()
    rc = campaign.run_in_foreground(["python", "-c", child], 0, point, None, pause_at=time.time() + 2)
    assert rc == 130 and got.read_text() == "saved" and time.time() - started < 30


def _fake_partial(path, step: int, size: int = 10) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {"w": torch.zeros(size)}, "optimizer": {"state": {}, "param_groups": []}, "step": step,
                "time_s": 1.5, "loss_ema": 0.1}, path)


def test_the_saved_stages_of_the_paused_commands_plan_ship_and_go_once_their_stage_is_finished(tmp_path, monkeypatch,
                                                                                              capsys):
    """What ships is chosen by the command's plan, not by when it was saved: a stage finished in an earlier
    launch of the same command ships too, another command's checkpoint does not."""
    import torch

    _campaign()
    partials = load_script("campaign_partials")
    from bench import artifacts

    cache, root = tmp_path / "cache", tmp_path / "artifacts"
    other = cache / "imagenet" / "acm" / "gates-aaa.partial.pt"  # another command's
    _fake_partial(other, 3)
    base = cache / "imagenet" / "dense" / "base-eee.pt"  # finished here, and shipped as trained weights
    base.parent.mkdir(parents=True)
    torch.save({"model": {"w": torch.zeros(4)}, "steps": 20, "time_s": 2.0}, base)
    weights = artifacts.shipped_path(base, root)
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"w")
    weights.with_suffix(".json").write_text("{}")
    broken = cache / "imagenet" / "cct" / "embed-fff.pt"  # finished, but not a checkpoint torch can read
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not a checkpoint")
    earlier = cache / "imagenet" / "cct" / "distill-ddd.pt"  # finished before the command was relaunched
    torch.save({"model": {"w": torch.zeros(4)}, "steps": 20, "time_s": 2.0}, earlier)
    running = cache / "imagenet" / "cct" / "cct-bbb.pt"
    resumable = running.with_name("cct-bbb.partial.pt")
    _fake_partial(resumable, 40)
    stages = [base, broken, earlier, running]
    command = "python -m bench run method=cct seed=2"
    shipped = partials.ship(stages, command, root)
    assert shipped == [root / "imagenet" / "cct" / "distill-ddd.partial.pt",
                       root / "imagenet" / "cct" / "cct-bbb.partial.pt"]
    assert "not shipping embed-fff.pt: cannot ship" in capsys.readouterr().out
    assert not (root / "imagenet" / "acm").exists() and not artifacts.shipped_partial_path(base, root).exists()
    found = artifacts.find_partial(running, root)
    assert found.meta["step"] == 40 and found.meta["command"] == command
    assert artifacts.find_partial(earlier, root).meta["finished"]
    broken.unlink()
    assert partials.ship(stages, command, root) == []  # nothing new since: no new files
    _fake_partial(resumable, 45)  # trained on: the new step replaces the shipped one
    assert partials.ship(stages, command, root) == [shipped[1]]
    assert artifacts.find_partial(running, root).meta["step"] == 45
    needs = {earlier, running}  # what the seed's pending commands train or load
    asked = []

    def needed(seed, owner):
        asked.append((seed, owner))
        return frozenset(needs)

    assert partials.drop_unneeded("imagenet", needed, cache, root) == []  # its running stage is not finished
    torch.save({"model": {"w": torch.zeros(10)}, "steps": 50, "time_s": 3.0}, running)
    assert partials.drop_unneeded("imagenet", needed, cache, root) == []  # finished, and still needed:
    assert artifacts.find_partial(running, root).meta["finished"]  # the finished stage replaces step 45
    assert (2, "cct") in asked
    needs.discard(running)
    assert partials.drop_unneeded("imagenet", needed, cache, root) == [shipped[1]] and not shipped[1].exists()
    assert artifacts.find_partial(earlier, root) is not None  # a pending command needs it
    needs.clear()
    assert partials.drop_unneeded("imagenet", needed, cache, root) == [shipped[0]] and not shipped[0].exists()
    running.unlink()
    monkeypatch.setattr(partials, "SHIPPED_LIMIT", 100)  # a checkpoint that would pass the limit stays here
    _fake_partial(resumable, 41)
    capsys.readouterr()
    assert partials.ship(stages[3:], command, root) == []
    said = capsys.readouterr().out
    assert "not shipping cct-bbb.partial.pt (step 41, 0.0 MB)" in said and "trains its stage from step 0" in said


def test_a_shipped_stage_stays_while_a_planned_command_of_its_seed_without_rows_needs_it(tmp_path, monkeypatch):
    """ACM's points of one seed share their distillation and gates stages: a paused point's shipped copy of
    them stays while another point without rows needs it (a fresh machine installs it from there)."""
    import sys

    import torch

    campaign = _campaign()
    from bench import artifacts

    monkeypatch.setattr(artifacts, "ROOT", tmp_path / "artifacts")
    monkeypatch.setattr(campaign.campaign_partials, "CACHE", tmp_path / "cache")
    cache = tmp_path / "cache" / "imagenet" / "acm"
    distill, e2e_04, e2e_06 = (cache / f"{name}.pt" for name in ("distill-aaa", "e2e-b0.4-bbb", "e2e-b0.6-ccc"))
    acm_04, acm_06 = (campaign.Point("imagenet", ("method=acm", f"acm.beta_target={b}")) for b in ("0.4", "0.6"))
    moe = campaign.Point("imagenet", ("method=moefication",))
    plans = {acm_04: [distill, e2e_04], acm_06: [distill, e2e_06]}
    estimate = sys.modules.get("campaign_estimate") or load_script("campaign_estimate")
    looked_up = []
    monkeypatch.setattr(estimate, "stage_checkpoints", lambda seed, point: looked_up.append(point) or plans[point])
    monkeypatch.setattr(campaign, "planned", lambda seeds, tasks: [(2, acm_04), (2, acm_06), (2, moe)])
    for ckpt in (distill, e2e_04):
        _fake_partial(ckpt.with_name(ckpt.stem + ".partial.pt"), 5)
        artifacts.export_partial(ckpt.with_name(ckpt.stem + ".partial.pt"), machine="m", git_sha="",
                                 command="python -m bench run method=acm task=imagenet seed=2")
        torch.save({"model": {"w": torch.zeros(2)}, "steps": 9, "time_s": 1.0}, ckpt)  # finished here
    rows = {acm_04: True, acm_06: False, moe: False}
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: rows[point])
    assert campaign.drop_unneeded("imagenet") == [tmp_path / "artifacts" / "imagenet" / "acm" /
                                                  "e2e-b0.4-bbb.partial.pt"]
    assert artifacts.find_partial(distill) is not None and artifacts.find_partial(distill).meta["finished"]
    assert moe not in looked_up  # another method's plan cannot hold an ACM stage
    rows[acm_06] = True
    assert campaign.drop_unneeded("imagenet") and artifacts.find_partial(distill) is None
    assert campaign.drop_unneeded("imagenet") == []


def test_a_commands_plan_when_it_starts_says_what_it_trains_for_others_and_whether_it_resumes(tmp_path, monkeypatch):
    import sys

    import torch

    campaign = _campaign()
    campaign_estimate = sys.modules.get("campaign_estimate") or load_script("campaign_estimate")
    from bench import artifacts, protocol

    monkeypatch.setattr(artifacts, "ROOT", tmp_path / "artifacts")
    base = tmp_path / "cache" / "iwslt" / "dense" / "base.pt"
    monkeypatch.setattr(campaign, "base_checkpoint", lambda seed, task: base)
    base.parent.mkdir(parents=True)

    def status(is_base: bool, state: str, path):
        return protocol.StageStatus(is_base, path.stem, 10, state, 0, path)

    model = tmp_path / "cache" / "iwslt" / "cct" / "cct.pt"
    other_base = tmp_path / "cache" / "iwslt" / "dense" / "b2.pt"
    _fake_partial(model.with_name("cct.partial.pt"), 3)  # its checkpoint holds 1.5 s of training
    plans = {"trains": [status(True, "to train", base), status(False, "to train from step 3 of its checkpoint in the "
                                                                   "cache", model)],
             "resumes": [status(True, "cached", base), status(False, "to train from step 3 of a shipped checkpoint",
                                                               model)],
             "own base": [status(True, "to train", other_base), status(False, "to train", model)]}
    which = {"plan": "trains"}
    monkeypatch.setattr(campaign_estimate, "command_stages", lambda seed, point, threads: ("cct", plans[which["plan"]]))
    pairing = next(iter(campaign.EVALUATES))
    method = campaign.EVALUATES[pairing]
    assert campaign.started(1, pairing) == campaign.Started({base: 0.0, model: 1.5}, False)
    assert campaign.started(1, method) == campaign.Started({base: 0.0}, False)
    assert campaign.started(1, campaign.PLAN[method.task][0]) == campaign.Started({}, False)  # the base's own
    which["plan"] = "resumes"
    assert campaign.started(1, method) == campaign.Started({}, True)
    which["plan"] = "own base"  # a point whose settings change the base trains a base of its own: not borrowed
    assert campaign.started(1, method) == campaign.Started({}, False)
    monkeypatch.setattr(campaign_estimate, "command_stages", lambda *a: 1 / 0)
    assert campaign.started(1, method) == campaign.Started()  # left to bench run to report
    torch.save({"model": {}, "steps": 10, "time_s": 400.0}, base)
    assert campaign.own_seconds(1000.0, {base: 100.0}) == 700.0  # what it trained of it here


def test_pause_at_ships_what_the_stopped_command_saved_and_starts_nothing_after_it(tmp_path, monkeypatch, capsys):
    import datetime as dt

    campaign = _campaign()
    ran, shipped = [], []
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign.campaign_partials, "ship", lambda stages, line: shipped.append(stages) or [])

    def stopped_at(line, seed, point, shipper, nproc=1, pause_at=None):
        ran.append(pause_at)
        while time.time() < pause_at:  # as run_in_foreground: runs until the pause time, then stops
            time.sleep(0.05)
        return 130

    monkeypatch.setattr(campaign, "run_in_foreground", stopped_at)
    args = ["--task", "parity", "--seeds", "0", "--match", "method=dense", "--times", str(tmp_path / "t.tsv")]
    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)
    monkeypatch.setattr(campaign, "utc_clock", lambda text: soon)
    assert campaign.main([*args, "--pause-at", "08:00"]) == 130
    assert len(ran) == 1 and ran[0] == soon.timestamp() and len(shipped) == 1  # the stages of its plan
    assert shipped[0] and all(path.parent.parent.name == "parity" for path in shipped[0])
    ran.clear()
    shipped.clear()  # a Ctrl-C before the pause time stops the campaign but ships nothing
    monkeypatch.setattr(campaign, "utc_clock", lambda text: dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
    monkeypatch.setattr(campaign, "run_in_foreground", lambda *a, **k: ran.append(1) or 130)
    assert campaign.main([*args, "--pause-at", "08:00"]) == 130 and ran == [1] and shipped == []
    ran.clear()
    monkeypatch.setattr(campaign, "utc_clock", lambda text: dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1))
    assert campaign.main([*args, "--pause-at", "00:00"]) == 0 and ran == []
    assert "00:00 UTC reached: stopping before command 1/" in capsys.readouterr().out
    monkeypatch.setattr(campaign.subprocess, "Popen", lambda *a, **k: ran.append(a))
    assert campaign.main([*args, "--pause-at", "00:00", "--jobs", "2"]) == 0 and ran == []  # --jobs: the same
    assert "pause time reached: stopping 0 running command(s)" in capsys.readouterr().out
    for wrong in ("8", "25:00", "08:60", "soon"):
        with pytest.raises(SystemExit) as exit_:
            campaign.main([*args, "--pause-at", wrong])
        assert exit_.value.code == 2
    assert "is not a UTC time HH:MM" in capsys.readouterr().err


def test_a_command_records_its_wall_time_less_the_stages_it_trained_for_another_point(tmp_path, monkeypatch, capsys):
    """The estimates add a seed's base (or the model an evaluation-only point evaluates) on their own where a
    later command needs it: a recorded time that held it would count it twice there, and once too often where
    it is cached."""
    import torch

    campaign = _campaign()
    base, model = tmp_path / "base.pt", tmp_path / "model.pt"
    torch.save({"model": {}, "steps": 10, "time_s": 400.0, "final_loss": 0.1}, base)
    torch.save({"model": {}, "steps": 10, "time_s": 250.0, "final_loss": 0.1}, model)
    assert campaign.own_seconds(1000.0, {base: 0.0}) == 600.0
    assert campaign.own_seconds(1000.0, {base: 0.0, model: 0.0}) == 350.0
    assert campaign.own_seconds(1000.0, {}) == 1000.0
    assert campaign.own_seconds(1000.0, {tmp_path / "not-trained.pt": 0.0}) == 1000.0
    capsys.readouterr()
    assert campaign.own_seconds(300.0, {base: 0.0}) is None
    assert "no wall time recorded: the 400 s of the stages another point's command trains (base.pt)" in (
        capsys.readouterr().out)
    times = tmp_path / "t.tsv"  # through the campaign: what it trains for others is read before the command
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign, "drop_unneeded", lambda task: [])
    plans = iter([campaign.Started(), campaign.Started({base: 0.0})])  # the parity base's command, then ACT's
    monkeypatch.setattr(campaign, "started", lambda seed, point: next(plans))
    clock = iter([0.0, 100.0, 200.0, 1200.0])  # each command's start and end
    monkeypatch.setattr(campaign, "run_in_foreground", lambda *a, **k: 0)
    monkeypatch.setattr(campaign.time, "time", lambda: next(clock))
    assert campaign.main(["--task", "parity", "--seeds", "0", "--match", "method=act", "--match", "act.tau=1e-2 ",
                          "--times", str(times)]) == 0
    monkeypatch.undo()
    recorded = campaign.read_times(times)
    assert sorted(recorded.values()) == [100.0, 600.0]  # the base's own command, then ACT's less the base


def test_a_command_that_resumed_from_a_shipped_checkpoint_records_no_wall_time(tmp_path, monkeypatch):
    """Its wall time covers the part trained here only: recorded, it would make later estimates too short."""
    campaign = _campaign()
    monkeypatch.setattr(campaign, "has_rows", lambda seed, point: False)
    monkeypatch.setattr(campaign, "run_in_foreground", lambda *a, **k: 0)
    times = tmp_path / "t.tsv"
    args = ["--task", "parity", "--seeds", "0", "--match", "method=dense", "--times", str(times)]
    monkeypatch.setattr(campaign, "drop_unneeded", lambda task: [])
    # its stage had shipped when it started
    monkeypatch.setattr(campaign, "started", lambda seed, point: campaign.Started({}, True))
    assert campaign.main(args) == 0 and campaign.estimates(campaign.read_times(times)) == {}
    monkeypatch.setattr(campaign, "started", lambda seed, point: campaign.Started())
    fresh = tmp_path / "fresh.tsv"  # (a second start in one file is left out anyway: campaign_times.read_times)
    assert campaign.main([*args[:-1], str(fresh)]) == 0 and campaign.estimates(campaign.read_times(fresh))


def test_a_stage_another_process_is_training_is_not_shipped(tmp_path):
    from filelock import FileLock

    _campaign()
    partials = load_script("campaign_partials")
    cache, root = tmp_path / "cache", tmp_path / "artifacts"
    busy = cache / "imagenet" / "acm" / "e2e-ccc.partial.pt"
    _fake_partial(busy, 7)
    with FileLock(str(cache / "imagenet" / "acm" / "e2e-ccc.pt.lock")):
        assert partials.ship([cache / "imagenet" / "acm" / "e2e-ccc.pt"], "", root) == []
    assert partials.ship([cache / "imagenet" / "acm" / "e2e-ccc.pt"], "", root) == [
        root / "imagenet" / "acm" / "e2e-ccc.partial.pt"]


def test_ranks_started_by_torchrun_are_stopped_with_sigterm(tmp_path, monkeypatch):
    """torchrun passes on the signal it gets; SIGTERM is the one every rank treats as a stop of them all."""
    import signal

    campaign = _campaign()
    ready, got = tmp_path / "ready", tmp_path / "got"
    child = ("import pathlib, signal, sys, time\n"
             "def on(signum, frame):\n"
             f"    pathlib.Path({str(got)!r}).write_text(signal.Signals(signum).name)\n"
             "    sys.exit(143)\n"
             "signal.signal(signal.SIGINT, on)\n"
             "signal.signal(signal.SIGTERM, on)\n"
             f"pathlib.Path({str(ready)!r}).touch()\n"
             "time.sleep(60)\n")
    monkeypatch.setattr(campaign.campaign_launch, "launch", lambda line, nproc=1: [sys.executable, "-c", child])
    _interrupt_once_ready(campaign, monkeypatch, ready)
    point = campaign.Point("parity", ("method=dense",))
    assert campaign.run_in_foreground(["python", "-m", "bench"], 0, point, None, nproc=2) == 130
    assert got.read_text() == signal.SIGTERM.name
