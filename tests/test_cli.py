"""CLI behaviour: bad input → one line, exit code 2, nothing written; light verbs do not import torch."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def bench(*args: str, cwd: Path = ROOT, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.parametrize("args,needle", [
    (["run", "method=acx", "task=parity"], "unknown method 'acx'; did you mean act"),
    (["run", "method=act", "task=parityy"], "unknown task 'parityy'; did you mean parity?"),
    (["run", "method=act", "act.taux=0.1"], "unknown config key 'act.taux'; did you mean act.tau"),
    (["run", "method=act", "act.tau=abc"], "act.tau: expected float, got 'abc'"),
    (["run", "method=act", "act.tau=-1"], "act.tau=-1.0 is out of range; expected >= 0.0"),
    (["run", "parity.variant=matrix"], "parity.variant='matrix' is not allowed; choose one of vector, sequence"),
    (["run", "sed=3"], "unknown config key 'sed'; did you mean seed?"),
    (["run", "-m", "method=act", "act.tau=0.1,-2"], "act.tau=-2.0 is out of range"),
    (["run", "method=act", "--bogus"], "unknown option '--bogus'"),
    (["rnu"], "unknown verb 'rnu'; did you mean 'run'?"),
])
def test_bad_input_one_line_exit_2_nothing_written(args, needle, tmp_path):
    result = bench(*args, f"results_dir={tmp_path / 'results'}", cwd=tmp_path) if args[0] == "run" \
        else bench(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]
    assert lines[0].startswith("bench: error: ")
    assert not (tmp_path / "results").exists()
    assert not (tmp_path / "runs").exists()


def test_help_ls_and_config_errors_do_not_import_torch():
    probe = ("import sys; from bench.cli import main; rc = main(sys.argv[1:]); "
             "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', rc)")
    for args in (["--help"], ["ls"], ["run", "method=act", "act.tau=abc"]):
        out = subprocess.run([sys.executable, "-c", probe, *args], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
        assert out.stdout.strip().splitlines()[-1] in ("NO-TORCH 0", "NO-TORCH 2"), (args, out.stdout, out.stderr)


def test_ls_shows_matrix():
    result = bench("ls")
    assert result.returncode == 0
    assert "method x task" in result.stdout
    for name in ("act", "dense", "parity"):
        assert name in result.stdout


def test_run_writes_rows_and_resolved_config(tmp_path):
    result = bench("run", "method=dense", "task=parity", "parity.train_steps=5", "parity.test_samples=64",
                   "parity.eval_batch=32", "parity.hidden=8", f"results_dir={tmp_path / 'results'}",
                   f"cache_dir={tmp_path / 'cache'}", "timing_min_run_s=0.01", "timing_batch=4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = list((tmp_path / "results" / "parity" / "dense").glob("*.csv"))
    assert len(rows) == 1 and rows[0].name.endswith("-s0.csv")
    assert list((tmp_path / "results" / "parity" / "dense").glob("*.samples.csv.gz"))
    resolved = list((tmp_path / "results" / "parity" / "dense").glob("*.config.yaml"))
    assert resolved and "train_steps: 5" in resolved[0].read_text()
    configs = list((tmp_path / "runs").rglob(".hydra/config.yaml"))
    assert configs and "train_steps: 5" in configs[0].read_text()
    # the same command again resumes: nothing left to do, no new row
    again = bench("run", "method=dense", "task=parity", "parity.train_steps=5", "parity.test_samples=64",
                  "parity.eval_batch=32", "parity.hidden=8", f"results_dir={tmp_path / 'results'}",
                  f"cache_dir={tmp_path / 'cache'}", "timing_min_run_s=0.01", "timing_batch=4", cwd=tmp_path)
    assert again.returncode == 0
    assert "already has a row" in again.stderr + again.stdout
    assert len(list((tmp_path / "results" / "parity" / "dense").glob("*.csv"))) == 1
