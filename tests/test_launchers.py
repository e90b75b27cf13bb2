"""Sweeps on real Hydra launchers, and the file lock that shares cached stages between parallel jobs.

* two processes that need the same stage at the same moment: one trains it, the other waits and loads
  it (the training loop runs once);
* a 2-job sweep through hydra-joblib-launcher (two local processes): distinct rows, one base model;
* a 2-job sweep through hydra-submitit-launcher's local executor (the SLURM launcher's local twin).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = ["method=dense", "task=parity", "parity.n=8", "parity.hidden=8", "parity.train_steps=20",
        "parity.eval_batch=32", "threads=1", "timing=false", "count_batches=1"]

TRAINER = textwrap.dedent('''
    """Train one cached stage with RunContext.fit once both processes are ready (a barrier on files)."""
    import sys, time
    from pathlib import Path
    from types import SimpleNamespace

    import torch
    from torch import nn

    from bench.api import Batch
    from bench.run import RunContext

    work, me = Path(sys.argv[1]), sys.argv[2]
    (work / f"ready-{me}").touch()
    while not (work / "go").exists():
        time.sleep(0.01)
    cfg = SimpleNamespace(seed=0, device="cpu", cache_dir=str(work / "cache"))
    run = RunContext(cfg, "dense", "toy")
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    log = work / "steps.log"

    def batch_fn(step):
        with open(log, "a") as handle:  # one line per training step, naming the process
            handle.write(me + "\\n")
        time.sleep(0.02)
        g = torch.Generator().manual_seed(step)
        return Batch(torch.randn(8, 4, generator=g), torch.randint(0, 2, (8,), generator=g), {})

    loss = lambda m, b: nn.functional.cross_entropy(m(b.x), b.y)
    run.fit(model, batch_fn, loss, owner="dense", name="shared", key={"k": 1}, steps=15, lr=0.1)
    print(" ".join(f"{v:.6f}" for v in model.weight.detach().flatten().tolist()))
''')


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "BENCH_QUIET": "1"}


def test_two_processes_never_train_the_same_stage_twice(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), name], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT) for name in ("a", "b")]
    deadline = time.time() + 120
    while not all((tmp_path / f"ready-{n}").exists() for n in ("a", "b")):
        assert time.time() < deadline, "trainers did not start"
        time.sleep(0.05)
    (tmp_path / "go").touch()  # both enter RunContext.fit at the same moment
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    steps = (tmp_path / "steps.log").read_text().split()
    assert len(steps) == 15 and len(set(steps)) == 1, f"the stage was trained more than once: {steps}"
    assert outs[0][0] == outs[1][0], "the waiting process must load the trained weights"
    assert list((tmp_path / "cache" / "toy" / "dense").glob("shared-*.pt"))
    assert not list((tmp_path / "cache" / "toy" / "dense").glob("shared-*.pt.lock"))  # removed by its holder


def _sweep(tmp_path: Path, *launcher: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "bench", "run", "-m", *launcher, *TINY, "parity.test_samples=64,96",
            f"results_dir={tmp_path / 'results'}", f"cache_dir={tmp_path / 'cache'}"]
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env())


def _check_two_rows_one_base(tmp_path: Path) -> None:
    rows = sorted((tmp_path / "results" / "parity" / "dense").glob("*-s0.csv"))
    assert len(rows) == 2, rows  # one row per job, distinct files (different config hashes)
    frame = pd.concat([pd.read_csv(p) for p in rows])
    assert sorted(frame["n_eval"]) == [64, 96]
    # both jobs used one base model: the test_samples sweep does not change its key, and the job that
    # did not train it loaded the checkpoint (whose recorded training time it reports)
    assert len(list((tmp_path / "cache" / "parity" / "dense").glob("*.pt"))) == 1
    assert frame["train_time_s"].nunique() == 1


def test_joblib_sweep_two_parallel_jobs(tmp_path):
    out = _sweep(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert out.returncode == 0, out.stderr[-3000:]
    hydra_cfgs = list((tmp_path / "runs" / "multirun").rglob(".hydra/hydra.yaml"))
    assert len(hydra_cfgs) == 2 and all("hydra_joblib_launcher" in p.read_text() for p in hydra_cfgs)
    _check_two_rows_one_base(tmp_path)


def test_submitit_local_sweep(tmp_path):
    out = _sweep(tmp_path, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5")
    assert out.returncode == 0, out.stderr[-3000:]
    hydra_cfgs = list((tmp_path / "runs" / "multirun").rglob(".hydra/hydra.yaml"))
    assert len(hydra_cfgs) == 2 and all("hydra_submitit_launcher" in p.read_text() for p in hydra_cfgs)
    assert list((tmp_path / "runs" / "multirun").rglob(".submitit"))
    _check_two_rows_one_base(tmp_path)


@pytest.mark.parametrize("launcher", ["joblib", "submitit_local", "submitit_slurm"])
def test_launcher_configs_compose(launcher):
    """The launcher groups resolve through bench's config validation (what the examples in docs/running.md use)."""
    from bench import config

    assert config.validate(["method=dense", "task=parity", f"hydra/launcher={launcher}", "seed=0,1"]) == 2
