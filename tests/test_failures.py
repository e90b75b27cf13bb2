"""Runtime failures end in one line, with nothing half-written.

* a device this machine lacks stops the run before any work (CLI and ``runner.run``), and device strings
  are validated (cpu, cuda, cuda:N);
* an unusable checkpoint (final or partial) is named, moved aside and retrained, with the same weights as
  a first run; when it cannot be moved aside, the one line says what to do;
* Ctrl-C (a real SIGINT) prints one line with the step and the checkpoint, exits 130 and leaves only the
  resumable partial checkpoint; the same command then resumes exactly;
* a stage's ``.pt.lock`` is removed when the stage finishes, fails or is interrupted, and one left by a
  killed process neither blocks nor confuses a later run.

Bad command lines (a sweep without ``-m``, names in the wrong case, bad device strings) are in
tests/test_cli.py's table.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from bench import checkpoints, devices, train
from bench.api import Batch
from bench.errors import UserError
from bench.run import RunContext, stage_lock

ROOT = Path(__file__).resolve().parent.parent
TINY = ["method=dense", "task=parity", "parity.n=4", "parity.hidden=4", "parity.train_steps=30",
        "parity.test_samples=16", "parity.eval_batch=16", "timing=false", "count_batches=1", "threads=1"]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "BENCH_QUIET": "1"}


def _bench(tmp: Path, *args: str, script: Path | None = None, env: dict | None = None):
    """``python -m bench run <TINY> args`` (or ``python script run ...``) with outputs under ``tmp``."""
    cmd = [sys.executable, *([str(script)] if script else ["-m", "bench"]), "run", *TINY,
           f"results_dir={tmp / 'results'}", f"cache_dir={tmp / 'cache'}", *args]
    return subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=300, env={**_env(), **(env or {})})


def _one_error_line(stderr: str) -> str:
    """The single ``bench: error:`` line a failure ends in (no traceback before it)."""
    lines = stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("bench: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    assert "Traceback" not in stderr, stderr
    return errors[0]


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# --- device -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:0", "cuda:12"])
def test_valid_device_strings(device):
    assert devices.spelling_problem(device) is None


@pytest.mark.parametrize("device", ["gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cpu:0", "", 3])
def test_invalid_device_strings_say_what_is_valid(device):
    problem = devices.spelling_problem(device)
    assert problem and problem.endswith(devices.VALID), problem


def _absent_devices() -> list[str]:
    absent = ["cuda:99"]  # no machine here has 100 GPUs
    if not torch.cuda.is_available():
        absent.append("cuda")
    return absent


@pytest.mark.parametrize("device", _absent_devices())
def test_absent_device_stops_the_cli_before_any_work(device, tmp_path):
    result = _bench(tmp_path, f"device={device}")
    assert result.returncode == 2, result.stderr
    line = _one_error_line(result.stderr)
    assert line.startswith(f"bench: error: device={device}: ") and "use device=cpu" in line, line
    assert _files(tmp_path) == []  # no cache, no lock, no rows, no Hydra run directory


def test_absent_device_stops_runner_before_any_work(tmp_path):
    """The same check guards runner.run itself (launcher jobs and Python callers)."""
    from bench import config, runner

    cfg = config.compose([*TINY, "device=cuda:99", f"cache_dir={tmp_path / 'c'}", f"results_dir={tmp_path / 'r'}"])
    with pytest.raises(UserError, match=r"^device=cuda:99: "):
        runner.run(cfg, "dense", "parity", "test")
    assert _files(tmp_path) == []


# --- unusable checkpoints -----------------------------------------------------------------------------
def _data(step: int) -> Batch:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(16, 4, generator=g)
    return Batch(x, (x.sum(1) > 0).long())


def _loss(model, batch):
    return nn.functional.cross_entropy(model(batch.x), batch.y)


def _model(hidden: int = 8):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 2))


def _fit(model, ckpt: Path, **kwargs):
    return train.fit(model, _data, _loss, steps=20, lr=1e-2, ckpt=ckpt, desc="t", **kwargs)


def _assert_same_weights(a: nn.Module, b: nn.Module) -> None:
    for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def _corrupt(path: Path, how: str) -> None:
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "text":
        path.write_text("not a checkpoint\n")
    elif how == "no entries":
        torch.save({"something": 1}, path)
    elif how == "other model":  # a checkpoint of a model with other shapes
        other = _model(hidden=3)
        state = {"model": other.state_dict(), "steps": 20, "time_s": 0.0, "final_loss": 0.0, "step": 5,
                 "loss_ema": 0.0, "optimizer": torch.optim.Adam(other.parameters()).state_dict(), "scheduler": {}}
        torch.save(state, path)
    else:
        raise ValueError(how)


HOW = ["truncated", "empty", "text", "no entries", "other model"]


@pytest.mark.parametrize("how", HOW)
def test_unusable_final_checkpoint_is_moved_aside_and_retrained(how, tmp_path, caplog):
    first = _model()
    _fit(first, tmp_path / "s.pt")
    _corrupt(tmp_path / "s.pt", how)
    again = _model()
    with caplog.at_level(logging.WARNING, logger="bench"):
        result = _fit(again, tmp_path / "s.pt")
    assert result.resumed_from == 0  # trained again, from step 0
    aside = list(tmp_path.glob("s.pt.corrupt-*"))
    assert len(aside) == 1
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and str(tmp_path / "s.pt") in warning[0] and aside[0].name in warning[0]
    _assert_same_weights(first, again)  # the retrained stage equals the first training
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["s.pt", aside[0].name])


@pytest.mark.parametrize("how", HOW)
def test_unusable_partial_checkpoint_is_moved_aside_and_the_stage_starts_at_zero(how, tmp_path):
    straight = _model()
    _fit(straight, tmp_path / "a.pt")
    with pytest.raises(KeyboardInterrupt):  # a real partial checkpoint to break
        _fit(_model(), tmp_path / "b.pt", stop_after=7)
    _corrupt(tmp_path / "b.partial.pt", how)
    model = _model()
    result = _fit(model, tmp_path / "b.pt")
    assert result.resumed_from == 0
    assert len(list(tmp_path.glob("b.partial.pt.corrupt-*"))) == 1
    assert not (tmp_path / "b.partial.pt").exists()
    _assert_same_weights(straight, model)  # nothing of the broken checkpoint leaked into the model


def test_checkpoint_that_cannot_be_moved_aside_says_what_to_do(tmp_path, monkeypatch):
    ckpt = tmp_path / "s.pt"
    ckpt.write_text("not a checkpoint\n")

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(checkpoints.os, "replace", refuse)
    with pytest.raises(UserError) as err:
        _fit(_model(), ckpt)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"checkpoint {ckpt} is unusable (") and "cannot be moved aside (Permission denied)" \
        in message and f"rm '{ckpt}'" in message, message
    assert ckpt.read_text() == "not a checkpoint\n"  # left as it was


def test_is_done_is_false_for_an_unusable_checkpoint(tmp_path):
    """MoEfication asks is_done() before building the layers a stage's weights were trained for."""
    _fit(_model(), tmp_path / "s.pt")
    assert train.is_done(tmp_path / "s.pt")
    _corrupt(tmp_path / "s.pt", "truncated")
    assert not train.is_done(tmp_path / "s.pt")
    assert not (tmp_path / "s.pt").exists() and list(tmp_path.glob("s.pt.corrupt-*"))


def test_interrupted_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def interrupted_save(obj, path):
        Path(path).write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoints.torch, "save", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        checkpoints.atomic_save({"model": {}}, tmp_path / "s.pt")
    assert list(tmp_path.iterdir()) == []


def test_cli_retrains_a_truncated_cached_checkpoint(tmp_path):
    first = _bench(tmp_path)
    assert first.returncode == 0, first.stderr
    [ckpt] = (tmp_path / "cache" / "parity" / "dense").glob("*.pt")
    good = torch.load(ckpt, weights_only=False)["model"]
    _corrupt(ckpt, "truncated")
    again = _bench(tmp_path, "force=true")
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    [aside] = ckpt.parent.glob(f"{ckpt.name}.corrupt-*")
    assert f"checkpoint {ckpt} is unusable (" in again.stderr and aside.name in again.stderr
    retrained = torch.load(ckpt, weights_only=False)["model"]
    for key in good:
        torch.testing.assert_close(good[key], retrained[key], rtol=0, atol=0)


# --- Ctrl-C -------------------------------------------------------------------------------------------
# Runs the CLI in a process that sends itself a real SIGINT when the training loop (or the evaluation)
# reaches a given point; Python's default handler turns it into KeyboardInterrupt there, as a Ctrl-C would.
SIGINT_AT = textwrap.dedent('''
    import os, signal, sys
    from tasks.parity.task import ParityTask

    # Python's KeyboardInterrupt handler, even where the process started with SIGINT ignored (a shell's
    # background job, e.g. the test suite started with '&', passes SIG_IGN on; Python then installs none)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    where, at = os.environ["SIGINT_WHERE"], int(os.environ["SIGINT_AT"])
    sent = getattr(signal, os.environ.get("SIGNAL", "SIGINT"))
    train_batch, score = ParityTask.train_batch, ParityTask.score

    def interrupting_train_batch(self, step, batch_size):
        if where == "train" and step == at:
            os.kill(os.getpid(), sent)
        return train_batch(self, step, batch_size)

    def interrupting_score(self, *args):
        if where == "eval":
            os.kill(os.getpid(), sent)
        return score(self, *args)

    ParityTask.train_batch, ParityTask.score = interrupting_train_batch, interrupting_score
    from bench.cli import main
    sys.exit(main(sys.argv[1:]))
''')


SIGNALS = {"SIGINT": (130, "interrupted (Ctrl-C)"), "SIGTERM": (143, "terminated (SIGTERM)")}


@pytest.mark.parametrize("sent", SIGNALS)
def test_ctrl_c_or_sigterm_during_training_one_line_then_exact_resume(sent, tmp_path):
    """SIGTERM (kill, timeout, a SLURM time limit) is handled as Ctrl-C: partial checkpoint at the step
    reached, one line, lock released; exit 143 (Ctrl-C: 130)."""
    script = tmp_path / "sigint.py"
    script.write_text(SIGINT_AT)
    work, straight = tmp_path / "interrupted", tmp_path / "straight"
    work.mkdir(), straight.mkdir()
    result = _bench(work, script=script, env={"SIGINT_WHERE": "train", "SIGINT_AT": "12", "SIGNAL": sent})
    code, how = SIGNALS[sent]
    assert result.returncode == code, result.stderr
    line = _one_error_line(result.stderr)
    [partial] = (work / "cache" / "parity" / "dense").glob("*.partial.pt")
    assert line == (f"bench: error: {how} at step 12 of 30 of stage dense:w1.0-d1.0; its "
                    f"progress is saved in {partial}; run the same command to resume from that step")
    assert torch.load(partial, weights_only=False)["step"] == 12
    # only the resumable partial checkpoint: no lock, no temporary file, no row
    assert [p for p in _files(work) if not p.startswith("runs/")] == [str(partial.relative_to(work))]

    resumed = _bench(work)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {partial.name} from step 12" in resumed.stderr
    assert _bench(straight).returncode == 0
    ckpts = [next((d / "cache" / "parity" / "dense").glob("*.pt")) for d in (work, straight)]
    a, b = (torch.load(p, weights_only=False)["model"] for p in ckpts)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)  # the resume is exact
    assert not partial.exists() and not list(work.rglob("*.lock"))


@pytest.mark.parametrize("sent", SIGNALS)
def test_ctrl_c_or_sigterm_outside_training_one_line_no_row(sent, tmp_path):
    script = tmp_path / "sigint.py"
    script.write_text(SIGINT_AT)
    result = _bench(tmp_path, script=script, env={"SIGINT_WHERE": "eval", "SIGINT_AT": "0", "SIGNAL": sent})
    code, how = SIGNALS[sent]
    assert result.returncode == code, result.stderr
    line = _one_error_line(result.stderr)
    assert line.startswith(f"bench: error: {how} outside training; no row"), line
    assert not (tmp_path / "results").exists()
    cached = _files(tmp_path / "cache")  # the finished stage only: no lock, no temporary file
    assert len(cached) == 1 and cached[0].startswith("parity/dense/") and cached[0].endswith(".pt"), cached


# --- stage locks --------------------------------------------------------------------------------------
def _run_ctx(tmp: Path) -> RunContext:
    return RunContext(SimpleNamespace(seed=0, device="cpu", cache_dir=str(tmp / "cache")), "dense", "toy")


def test_lock_file_removed_when_the_stage_finishes_or_fails(tmp_path):
    run = _run_ctx(tmp_path)
    run.fit(_model(), _data, _loss, owner="dense", name="ok", key=1, steps=3, lr=1e-2)

    def broken(step):
        raise RuntimeError("data source failed")

    with pytest.raises(RuntimeError, match="data source failed"):
        run.fit(_model(), broken, _loss, owner="dense", name="bad", key=1, steps=3, lr=1e-2)
    stage_dir = tmp_path / "cache" / "toy" / "dense"
    assert [p.name for p in stage_dir.glob("*.pt")] == [run.stage_path("dense", "ok", 1).name]
    assert not list(stage_dir.glob("*.lock"))


KILLED_HOLDER = textwrap.dedent('''
    import os, signal, sys
    from pathlib import Path
    from bench.run import stage_lock

    with stage_lock(Path(sys.argv[1])):
        Path(sys.argv[1] + ".held").touch()
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup runs: the lock file stays behind
''')


def test_lock_file_of_a_killed_process_neither_blocks_nor_stays(tmp_path, caplog):
    run = _run_ctx(tmp_path)
    ckpt = run.stage_path("dense", "s", 1)
    ckpt.parent.mkdir(parents=True)
    killed = subprocess.run([sys.executable, "-c", KILLED_HOLDER, str(ckpt)], env=_env(), cwd=ROOT, timeout=120)
    assert killed.returncode == -signal.SIGKILL and Path(f"{ckpt}.held").exists()
    assert Path(f"{ckpt}.lock").exists()  # what a killed process leaves
    with caplog.at_level(logging.INFO, logger="bench"):
        run.fit(_model(), _data, _loss, owner="dense", name="s", key=1, steps=3, lr=1e-2)
    assert not any("being trained by another job" in r.getMessage() for r in caplog.records)  # never waited
    assert ckpt.exists() and not Path(f"{ckpt}.lock").exists()


def test_lock_still_excludes_a_second_holder(tmp_path):
    """Removing the file on release must not let two holders in at once (filelock re-checks the path)."""
    from filelock import FileLock, Timeout

    ckpt = tmp_path / "s.pt"
    with stage_lock(ckpt):
        with pytest.raises(Timeout):
            FileLock(f"{ckpt}.lock").acquire(timeout=0.2)
    assert not Path(f"{ckpt}.lock").exists()
    with stage_lock(ckpt):  # taken again after the file was removed
        assert Path(f"{ckpt}.lock").exists()
