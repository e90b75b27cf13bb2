"""The GPU suite's CPU side (scripts/gpu_suite.py): the dry run end to end, a failing step and a step past
its limit recorded while the next steps still run, the budget split, the energy arithmetic on a simulated
counter (scripts/gpu_energy.py), unpacking the returned rows without overwriting, one-line errors, and
``device_pack.py --suite``."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import load_script

PY = sys.executable


@pytest.fixture(scope="module")
def gs():
    return load_script("gpu_suite")


@pytest.fixture(scope="module")
def ge(gs):
    """The energy step (scripts/gpu_energy.py), as the suite imported it."""
    return gs.gpu_energy


def _summary(out: Path) -> dict:
    return json.loads((out / "suite.json").read_text())


def _tgz(path: Path, files: dict[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


def test_dry_run_end_to_end_then_unpack(gs, tmp_path, capsys):
    out, stage, repo = tmp_path / "OUT", tmp_path / "stage", tmp_path / "repo"
    assert gs.main(["run", "--out", str(out), "--dry-run", "--stage", str(stage)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    summary = _summary(out)
    steps = {s["step"]: s for s in summary["steps"]}
    assert list(steps) == ["tests", "kernels", "speed-latency", "energy", "speed-throughput"]
    assert summary["suite"]["dry_run"] is True
    assert steps["tests"]["status"] in ("ok", "skipped")  # skipped where Triton is not installed
    for name in ("kernels", "speed-throughput", "speed-latency"):
        assert steps[name]["status"] == "ok" and steps[name]["rows"] > 0, steps[name]
    assert steps["energy"]["status"] == "skipped" and "no NVML" in steps["energy"]["detail"]
    # one line per step in suite.json, and the table printed last
    assert sum(line.startswith("  {\"step\": ") for line in (out / "suite.json").read_text().splitlines()) == 5
    assert printed[-6].split() == ["step", "status", "seconds", "limit", "rows", "detail"]
    assert [line.split()[0] for line in printed[-5:]] == list(steps)
    assert sorted(p.name for p in out.iterdir()) == ["results.tgz", "suite.json", "suite.log", "tests.xml"]
    with tarfile.open(out / "results.tgz") as tar:
        names = tar.getnames()
    assert any(n.startswith("results/kernels/") and n.endswith(".fit.csv") for n in names)
    assert sum(n.startswith("results/speed/") for n in names) == steps["speed-throughput"]["rows"] + \
        steps["speed-latency"]["rows"]

    assert gs.main(["unpack", str(out), "--root", str(repo)]) == 0
    said = capsys.readouterr().out
    assert f"added {len(names)} files" in said and "energy: skipped" in said
    assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()) == sorted(names)


def _steps(gs, *specs):
    return [gs.Step(name, share, [PY, "-c", code, *args]) for name, share, code, *args in specs]


def test_a_failing_step_is_recorded_and_the_next_steps_run(gs, tmp_path):
    out, results = tmp_path / "OUT", tmp_path / "stage" / "results"
    out.mkdir()
    write_row = "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True); " \
                "p.write_text('a,b\\n1,2\\n3,4\\n')"
    steps = _steps(gs, ("boom", 0.3, "print('working'); raise SystemExit('boom: the kernel failed')"),
                   ("after", 0.3, write_row, str(results / "speed" / "r1" / "x.csv")))
    outcomes = gs.run_suite(steps, out, results, 120, {})
    assert [(o.step, o.status) for o in outcomes] == [("boom", "failed"), ("after", "ok")]
    assert outcomes[0].detail == "exit 1: boom: the kernel failed"
    assert outcomes[1].rows == 2 and outcomes[1].detail == "results/speed/r1"
    assert [s["status"] for s in _summary(out)["steps"]] == ["failed", "ok"]
    with tarfile.open(out / "results.tgz") as tar:
        assert tar.getnames() == ["results/speed/r1/x.csv"]


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def test_a_step_past_its_limit_is_stopped_and_the_next_runs(gs, tmp_path):
    out, results, pidfile = tmp_path / "OUT", tmp_path / "stage" / "results", tmp_path / "child.pid"
    out.mkdir()
    slow = "import subprocess, sys, time; c = subprocess.Popen(['sleep', '60']); " \
           "open(sys.argv[1], 'w').write(str(c.pid)); time.sleep(60)"
    steps = _steps(gs, ("slow", 0.2, slow, str(pidfile)), ("next", 0.75, "print('ran')"))
    start = time.monotonic()
    # slow: 30 s x (0.95 - 0.75) = 6 s, time enough for its Python to start and write its child's pid on a busy
    # machine; next keeps at least 30 x 0.95 - (6 s + the stop's grace) of the budget even when stopping slow
    # takes seconds on a loaded machine
    outcomes = gs.run_suite(steps, out, results, 30, {})
    assert time.monotonic() - start < 45
    assert [(o.step, o.status) for o in outcomes] == [("slow", "timed out"), ("next", "ok")]
    assert outcomes[0].limit_s == 6.0 and outcomes[0].detail == "stopped at its limit of 6 s"
    assert _gone(int(pidfile.read_text()))  # the step's own children are stopped with it
    assert "ran" in (out / "suite.log").read_text()


def test_the_budget_split(gs, tmp_path):
    steps = gs.plan(tmp_path / "OUT", tmp_path / "results", dry_run=False)
    assert sum(s.share for s in steps) + gs.RESERVE == pytest.approx(1.0)
    spent, limits = 0.0, []
    for i, step in enumerate(steps):  # every step uses its whole limit: each gets its share
        limits.append(gs.step_limit(steps, i, gs.DEFAULT_BUDGET_S, spent))
        spent += limits[-1]
    assert [round(x, 1) for x in limits] == [91.8, 112.2, 76.5, 76.5, 127.5]
    assert 510 * (1 - gs.RESERVE) + 20 <= 540  # the steps, and setup.sh's install, fit the device call
    # a step that finishes early leaves its time to the next one, never to the later steps' shares
    assert gs.step_limit(steps, 1, 510, 10.0) == pytest.approx(510 * (1 - 0.05 - 0.55) - 10)
    assert [s.name for s in steps] == list(gs.SHARES)
    kernels = steps[1].argv
    assert "batch=1,8,32,128" in kernels and "full_breakdown=true" in kernels and "dtype=bf16" in kernels
    assert "k_mode=iid,equal" in kernels
    assert "batch=1" in steps[2].argv and "cuda_graphs=true" in steps[2].argv
    assert not any(a.startswith("rounds=") for a in steps[2].argv)  # the speed default, 3
    assert "batch=128" in steps[4].argv and "cuda_graphs=false" in steps[4].argv and "rounds=2" in steps[4].argv
    assert steps[0].env == {"TRITON_INTERPRET": "0"}


def test_some_steps_only_share_the_budget(gs, tmp_path):
    steps = gs.plan(tmp_path / "OUT", tmp_path / "results", dry_run=False, only=["speed-throughput", "tests"])
    assert [s.name for s in steps] == ["tests", "speed-throughput"]  # in the suite's order
    assert sum(s.share for s in steps) + gs.RESERVE == pytest.approx(1.0)
    assert steps[1].share / steps[0].share == pytest.approx(gs.SHARES["speed-throughput"] / gs.SHARES["tests"])
    assert gs.step_limit(steps, 1, 200, 0.0) == pytest.approx(200 * (1 - gs.RESERVE))


def test_the_tests_step_selects_the_kernel_and_cuda_tests_in_fp16_and_bf16(gs, tmp_path):
    import subprocess

    argv = [a for a in gs.tests_step(tmp_path, dry_run=False).argv if a not in ("-n", "8")]
    listed = subprocess.run([*argv, "--collect-only"], cwd=gs.ROOT, capture_output=True, text=True,
                            env={**os.environ, "TRITON_INTERPRET": "0"})
    assert listed.returncode == 0, listed.stdout + listed.stderr
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    dtypes = [i for i in ids if "test_triton_dtypes_activations" in i]
    assert len(dtypes) == 6 and all("[fp16-" in i or "[bf16-" in i for i in dtypes)
    assert any("test_triton_matches_fp64_cases" in i for i in ids) and any("test_benchmark_quick" in i for i in ids)


class FakeGPU:
    """A clock, and an energy counter published every ``period`` s: 10 W idle, plus 2 J per dense call
    and 1 J per method call (each call takes 4 ms)."""

    def __init__(self, period: float):
        self.t = self.e = self.published = 0.0
        self.period, self.next_tick = period, period

    def clock(self):
        return self.t

    def sleep(self, seconds, joules=0.0):
        self.t += seconds
        self.e += 10.0 * seconds + joules

    def read(self):
        while self.t >= self.next_tick:
            self.published, self.next_tick = self.e, self.next_tick + self.period
        return self.published


def _fake_points(gpu):
    fields = {"method": "dense", "fraction": 1.0, "executed_fraction": 1.0, "macs_per_sample": 100.0}
    return [SimpleNamespace(fn=lambda: gpu.sleep(0.004, 2.0), fields=fields),
            SimpleNamespace(fn=lambda: gpu.sleep(0.004, 1.0),
                            fields={**fields, "method": "acm", "fraction": 0.5, "macs_per_sample": 50.0})]


@pytest.mark.parametrize("window_s, flagged", [(5.0, False), (0.02, True)])
def test_energy_per_sample_against_dense(ge, window_s, flagged):
    gpu = FakeGPU(period=0.05)
    points = _fake_points(gpu)
    period, idle = ge.baseline(gpu.read, lambda: None, gpu.clock, gpu.sleep, idle_s=1.0)
    dense, method = ge.interleaved(points, lambda fn: ge.busy_window(fn, gpu.read, lambda: None, gpu.clock,
                                                                     window_s))
    assert len(dense) == 2 and len(method) == 1  # dense, acm, dense
    rows = ge.energy_rows(points, dense, method, idle, period, {"batch": 4, "run_id": "r"})
    assert period == pytest.approx(0.05) and rows[0]["idle_w"] == pytest.approx(10.0, rel=0.01)
    acm = rows[1]
    assert acm["macs_ratio"] == 0.5 and rows[0]["ratio"] == 1.0
    if not flagged:
        assert acm["joules_per_sample"] == pytest.approx(0.25, rel=0.03)  # 1 J per call of 4 samples
        assert acm["dense_joules_per_sample"] == pytest.approx(0.5, rel=0.03)
        assert acm["ratio"] == pytest.approx(0.5, rel=0.05) and acm["flags"] == ""
    else:
        assert "shorter_than_counter_period" in acm["flags"].split(";")
        assert "dense_shorter_than_counter_period" in acm["flags"].split(";")


def test_energy_step_writes_rows_from_a_given_counter(gs, ge, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(ge, "MIN_WINDOW_S", 0.01)
    argv = ["energy", "--device", "cpu", "--dtype", "fp32", "--arch", "tiny", "--batch", "2", "--methods",
            "acm,early_exit", "--fractions", "0.5", "--window-s", "0.02", "--idle-s", "0.02",
            "--results-dir", str(tmp_path / "results")]
    args = gs.parser().parse_args(argv)
    args.argv = argv[1:]
    assert ge.cmd_energy(args, counter=(torch, lambda: 30.0 * time.perf_counter(), lambda: None)) == 0
    import pandas as pd

    (path,) = (tmp_path / "results" / "energy").glob("*.csv")
    rows = pd.read_csv(path, keep_default_na=False)
    assert list(rows.columns) == ge.ENERGY_COLUMNS and list(rows["method"]) == ["dense", "acm", "early_exit"]
    assert path.stem.endswith("-energy") and (rows["energy_source"] == "given counter").all()
    assert (rows["dtype"] == "fp32").all() and (rows["batch"] == 2).all()


def test_unpack_adds_rows_and_never_overwrites(gs, tmp_path, capsys):
    root, back = tmp_path / "repo", tmp_path / "files_at"
    (root / "results" / "speed").mkdir(parents=True)
    (root / "results" / "speed" / "old.csv").write_text("kept\n")
    _tgz(back / "results.tgz", {"results/speed/r1/acm_f0.5.csv": "a\n1\n", "results/energy/e1.csv": "b\n2\n"})
    assert gs.main(["unpack", str(back), "--root", str(root)]) == 0
    assert "added 2 files" in capsys.readouterr().out
    assert (root / "results" / "energy" / "e1.csv").read_text() == "b\n2\n"

    _tgz(back / "results.tgz", {"results/new.csv": "c\n", "results/energy/e1.csv": "changed\n"})
    assert gs.main(["unpack", str(back), "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err == "gpu_suite: error: results/energy/e1.csv already exists; unpack writes nothing over existing " \
                  "files (move it aside first)\n"
    assert not (root / "results" / "new.csv").exists()  # nothing written when anything would be overwritten
    assert (root / "results" / "energy" / "e1.csv").read_text() == "b\n2\n"

    _tgz(back / "results.tgz", {"results/../escape.csv": "x\n"})
    assert gs.main(["unpack", str(back), "--root", str(root)]) == 2
    assert "outside results/" in capsys.readouterr().err and not (tmp_path / "escape.csv").exists()


def test_bad_input_is_one_line(gs, tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    cases = [(["run"], "the following arguments are required: --out"),
             (["run", "--out", str(tmp_path / "full")], "is not an empty folder"),
             (["run", "--out", str(tmp_path / "o"), "--budget-s", "1"], "--budget-s 1 is too small"),
             (["run", "--out", str(tmp_path / "o"), "--steps", "kernels,speed"], "unknown step 'speed'"),
             (["unpack", str(tmp_path)], "holds neither results.tgz nor results/"),
             (["energy", "--window-s", "0.5"], "--window-s and --idle-s must be at least 1 s"),
             (["energy", "--fractions", "2"], "is out of range; expected <= 1.0"),
             (["fly"], "invalid choice: 'fly'")]
    for argv, says in cases:
        assert gs.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("gpu_suite: error: ") and err.count("\n") == 1 and says in err, (argv, err)
    assert not (tmp_path / "o").exists()


def test_device_pack_suite_packs_the_common_wheels_and_no_data(tmp_path, monkeypatch, capsys):
    dp = load_script("device_pack")
    asked = []

    def pack(tasks, out, **kw):
        asked.append(tasks)
        return {"pack_mib": 0.1, "tree_mib": 9.0, "git_sha": "a" * 40, "tree_dirty": False}

    monkeypatch.setattr(dp, "pack", pack)
    assert dp.main(["--suite", "--out", str(tmp_path / ".device")]) == 0
    assert asked == [[]] and "for the GPU suite" in capsys.readouterr().out
    assert dp.TASK_DATA.get("parity") == [] and set(dp.WHEELS["*"]) == {"hydra-core", "omegaconf",
                                                                      "antlr4-python3-runtime"}
    assert dp.main(["--suite", "--unpack", str(tmp_path)]) == 2
    assert "without --task" in capsys.readouterr().err
