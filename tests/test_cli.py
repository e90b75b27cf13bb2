"""CLI behaviour: bad input → one line, exit code 2, nothing written; light verbs do not import torch."""

import os
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
    (["run", "sed=3"], "unknown config key 'sed'; did you mean seed"),
    (["run", "method=early_exit", "task=parity"], "does not apply to task 'parity': early exit puts classifier heads "
                                                  "between the blocks of an encoder-only transformer; this task builds "
                                                  "none (an RNN, or an encoder-decoder: DAT); with "
                                                  "parity.variant=sequence it does (add it to the command)"),
    (["run", "-m", "method=act", "act.tau=0.1,-2"], "act.tau=-2.0 is out of range"),
    (["run", "method=act", "--bogus"], "unknown option '--bogus'"),
    (["rnu"], "unknown verb 'rnu'; did you mean 'run'?"),
    (["run", "nosuchgroup.key=1"], "unknown config key 'nosuchgroup.key': 'nosuchgroup' is not a config section; "
                                   "sections here: dense, parity; run-level keys: "),
    (["run", "method=act", "acm.beta_target=0.5"], "'acm' is a method that this run does not select (add method=acm)"),
    (["ls", "--bogus"], "ls: unexpected argument '--bogus'; ls takes only plugins=[pkg.module,...]"),
    (["ls", "seed=1"], "ls: unexpected argument 'seed=1'"),
    (["ls", "plugins=[no_such_plugin]"], "plugins: cannot import 'no_such_plugin'"),
    (["kernels", "dtype=fp64"], "kernels: dtype='fp64' is not allowed; choose one of fp32, fp16, bf16"),
    (["kernels", "fractions=0.5,1.5"], "kernels: fractions=1.5 is out of range; expected <= 1.0"),
    (["kernels", "rounds=0"], "kernels: rounds=0 is out of range; expected >= 1"),
    (["kernels", "batch=1,0"], "kernels: batch=0 is out of range; expected >= 1"),
    (["kernels", "rounds=x"], "kernels: rounds: expected integer, got 'x'"),
    (["kernels", "variants=dense_eager,acm_fast"], "kernels: variants='acm_fast' is not allowed; choose one of "),
    (["kernels", "--quick"], "kernels: expected key=value, got '--quick'"),
    (["kernels", "quik=true"], "kernels: unknown config key 'quik'; did you mean quick"),
    (["kernels", "refit=missing.csv"], "kernels: refit=missing.csv: no such rows file"),
    (["kernels", "results_dir=/proc/nope"], "results_dir=/proc/nope: cannot write there"),
    (["report", "--bogus"], "report: expected key=value, got '--bogus'; keys: results_dir, reports_dir"),
    (["run", "method=act", "act.tau=1e-3,1e-2"], "act.tau=1e-3,1e-2 is a sweep (one job per value) but the "
                                                 "command has no -m; add -m"),
    (["run", "method=ACT", "task=parity"], "unknown method 'ACT'; did you mean act? valid: "),
    (["run", "method=act", "task=Parity"], "unknown task 'Parity'; did you mean parity? valid: "),
    (["run", "parity.variant=Vector"], "choose one of vector, sequence (did you mean vector?)"),
    (["run", "device=gpu"], "device='gpu' is not a valid device; use cpu, cuda (the current CUDA device) or "
                            "cuda:N (CUDA device N, counted from 0)"),
    (["run", "device=cuda:99"], "device=cuda:99: "),
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


@pytest.mark.parametrize("multirun", [False, True])
def test_unwritable_results_dir_stops_before_any_work(multirun, tmp_path):
    """Found before training (nothing in the cache), in one line with exit code 2."""
    args = ["run", *(["-m", "seed=0,1"] if multirun else []), "method=dense", "task=parity",
            "results_dir=/proc/nope", f"cache_dir={tmp_path / 'cache'}"]
    result = bench(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench: error: results_dir=/proc/nope: cannot write there")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()


def test_unwritable_results_dir_from_python_stops_before_training(tmp_path):
    """The same check guards runner.run itself (launcher jobs, Python callers)."""
    from bench import config, runner
    from bench.errors import UserError

    cfg = config.compose(["method=dense", "task=parity", "results_dir=/proc/nope", f"cache_dir={tmp_path / 'c'}"])
    with pytest.raises(UserError, match="results_dir=/proc/nope: cannot write there"):
        runner.run(cfg, "dense", "parity", "test")
    assert not (tmp_path / "c").exists()


def test_writable_check_leaves_nothing_behind(tmp_path):
    from bench.paths import check_writable

    check_writable("results_dir", tmp_path / "new" / "deeper")
    check_writable("results_dir", tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == []
    (tmp_path / "file").write_text("x")
    from bench.errors import UserError

    with pytest.raises(UserError, match="is a file, not a directory"):
        check_writable("cache_dir", tmp_path / "file" / "sub")


def test_run_without_task_says_which_task_it_uses(tmp_path):
    result = bench("run", "method=dense", "parity.n=4", "parity.hidden=4", "parity.train_steps=2",
                   "parity.test_samples=16", "parity.eval_batch=16", "timing=false", "count_batches=1",
                   f"results_dir={tmp_path / 'results'}", f"cache_dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "bench: no task= given; using the default task=parity" in result.stderr
    assert "no method= given" not in result.stderr
    quiet = bench("run", "method=dense", "--cfg", "job", cwd=tmp_path)  # printing the config says nothing
    assert quiet.returncode == 0 and "no task= given" not in quiet.stderr


def test_ls_lists_run_level_keys():
    result = bench("ls")
    assert result.returncode == 0
    head = result.stdout.split("tasks:")[0]
    for key in ("seed=", "threads=", "results_dir=", "cache_dir=", "plugins=", "force="):
        assert key in head, key


def test_a_reader_that_stops_early_gets_no_traceback():
    """`bench ls | head`: a pipe whose reader has gone (here one that never reads) ends the command quietly,
    with no BrokenPipeError traceback."""
    out = subprocess.run(["bash", "-c", f"{sys.executable} -m bench ls | true"], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.stderr == ""


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


def test_report_takes_key_value_and_the_earlier_flags(monkeypatch, tmp_path, capsys):
    from bench import cli
    from bench.report import build as report

    seen = []
    monkeypatch.setattr(report, "main", lambda results, reports: seen.append((results, reports)) or [])
    for args in (["results_dir=r", "reports_dir=p"], ["--results-dir", "r", "--reports-dir=p"]):
        assert cli.main(["report", *args]) == 0
    assert seen == [("r", "p"), ("r", "p")]
    for args, says in ((["--results-dir"], "--results-dir needs a value"), (["--bogus"], "expected key=value"),
                       (["results_dr=x"], "did you mean results_dir")):
        assert cli.main(["report", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith("bench: error: report: ") and says in err and err.count("\n") == 1
    assert len(seen) == 2


@pytest.mark.parametrize("verb, says", [("kernels", "variants=[]"), ("speed", "device='cpu'"),
                                         ("report", "results_dir='results'")])
def test_scenario_help_lists_every_key_with_what_it_accepts(capsys, verb, says):
    from bench import cli

    assert cli.main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m bench {verb} [key=value ...]") and says in out
    if verb == "kernels":
        assert "acm_triton" in out.split("variants=[]")[1].splitlines()[0]  # the allowed paths, from the field
        assert "rounds=3  interleaved measurement rounds [>= 1]" in out


def test_one_error_family_and_bugs_keep_their_traceback(monkeypatch, tmp_path, capsys):
    """The config's and the registry's errors are UserErrors (one line, exit 2); any other exception out of
    a verb is a bug: it is not turned into a user error (``report`` used to swallow every ValueError)."""
    from bench import cli, config, registry
    from bench.report import build as report
    from bench.errors import UserError

    assert issubclass(config.ConfigError, UserError) and issubclass(registry.RegistryError, UserError)
    monkeypatch.setattr(report, "main", lambda *a: (_ for _ in ()).throw(UserError("no rows here")))
    assert cli.main(["report", "--results-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith("no rows here")
    monkeypatch.setattr(report, "main", lambda *a: (_ for _ in ()).throw(ValueError("a bug")))
    with pytest.raises(ValueError, match="a bug"):
        cli.main(["report", "--results-dir", str(tmp_path)])


def test_kernels_runs_the_benchmark_a_method_registers(monkeypatch, capsys):
    """`bench kernels` finds its benchmark through the registry (MethodSpec.kernels, ACM's); with none
    registered it says so in one line, exit 2."""
    import dataclasses

    from bench import cli, registry

    assert cli.kernel_benchmark().__name__ == registry.method_spec("acm").kernels
    methods = {name: dataclasses.replace(spec, kernels="") for name, spec in registry.methods().items()}
    monkeypatch.setattr(registry, "methods", lambda: methods)
    assert cli.main(["kernels", "quick=true"]) == 2
    assert capsys.readouterr().err == ("bench: error: kernels: no kernel benchmark to run: no method registers one "
                                       "(MethodSpec.kernels)\n")
