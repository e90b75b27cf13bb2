"""The README's instructions work as written: the plugin example is extracted and run, and the usage
examples call the project's virtual environment (not a bare system ``python``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.S | re.M)


def section(title: str) -> str:
    start = README.index(f"\n{title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def test_usage_examples_call_the_venv():
    usage = section("## Using it")
    commands = [line for block in re.findall(r"```bash\n(.*?)```", usage, flags=re.S)
                for line in block.splitlines() if "-m bench" in line]
    assert commands, "no examples found"
    for line in commands:
        assert ".venv/bin/python -m bench" in line, line
    assert "source .venv/bin/activate" in usage


def test_plugin_example_runs_as_written(tmp_path):
    files = {}
    for block in code_blocks("python"):
        first = block.splitlines()[0]
        if first.startswith("# mybench/"):
            files[first[2:].strip()] = block
    assert set(files) == {"mybench/__init__.py", "mybench/truncate.py"}
    for name, text in files.items():
        (tmp_path / "plugins" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "plugins" / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'plugins'}{os.pathsep}{ROOT}", "BENCH_QUIET": "1"}

    ls = subprocess.run([sys.executable, "-m", "bench", "ls", "plugins=[mybench]"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=120, env=env)
    assert ls.returncode == 0, ls.stderr
    assert "truncate.keep=1" in ls.stdout and "needs a transformer encoder backbone" in ls.stdout

    tiny = ["parity.variant=sequence", "parity.n=8", "parity.d_model=16", "parity.heads=2", "parity.layers=2",
            "parity.train_steps=10", "parity.test_samples=64", "parity.eval_batch=32", "threads=1",
            "timing=false", f"results_dir={tmp_path / 'results'}", f"cache_dir={tmp_path / 'cache'}"]
    run = subprocess.run([sys.executable, "-m", "bench", "run", "-m", "plugins=[mybench]", "method=truncate",
                          "task=parity", "truncate.keep=1,2", *tiny], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = pd.concat(pd.read_csv(p) for p in (tmp_path / "results" / "parity" / "truncate").glob("*.csv")
                     if not p.name.endswith(".samples.csv.gz"))
    rows = rows.sort_values("knob_value")
    assert list(rows["knob_value"]) == [1, 2]
    assert list(rows["cost_check"]) == ["agree", "agree"]  # decision log = dispatch-level counter
    one, two = rows["macs_mean"].tolist()
    assert one < two and two == rows["macs_dense"].iloc[1]  # keeping every block costs the dense model
