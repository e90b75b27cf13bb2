"""The manual's instructions work as written: the plugin example (docs/extending.md) is extracted and run,
and the usage examples (README.md's "Using it", docs/running.md's sweeps) call the project's virtual
environment (not a bare system ``python``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
EXTENDING = (ROOT / "docs" / "extending.md").read_text()
RUNNING = (ROOT / "docs" / "running.md").read_text()

PLUGIN_TUTORIAL = "## Writing a plugin: a complete method outside the repository"


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def section(text: str, title: str) -> str:
    start = text.index(f"\n{title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _bench_commands(text: str) -> list[str]:
    return [line for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
            for line in block.splitlines() if "-m bench" in line]


def test_usage_examples_call_the_venv():
    usage = section(README, "## Using it")
    commands = _bench_commands(usage)
    assert commands, "no examples found"
    for line in commands:
        assert ".venv/bin/python -m bench" in line, line
    assert "source .venv/bin/activate" in usage


@pytest.mark.parametrize("text,title", [(RUNNING, "## Sweeps and Hydra launchers (joblib, submitit)"),
                                        (EXTENDING, PLUGIN_TUTORIAL)], ids=["running-sweeps", "extending-plugin"])
def test_manual_examples_call_the_venv(text, title):
    """The sweep and launcher examples (moved from the README's "Using it") and the plugin tutorial's."""
    commands = _bench_commands(section(text, title))
    assert commands, "no examples found"
    for line in commands:
        assert ".venv/bin/python -m bench" in line, line


def test_the_two_commands_are_the_main_job_and_what_ci_runs():
    blocks = code_blocks(section(README, "## The two commands"), "bash")
    assert blocks == ["bash scripts/setup.sh && .venv/bin/python -m bench run method=acm task=imagenet\n",
                      "bash scripts/setup.sh && .venv/bin/tox\n"]
    assert blocks[1].strip() in (ROOT / ".ci" / "run").read_text().splitlines()


def test_plugin_example_runs_as_written(tmp_path):
    files = {}
    for block in code_blocks(section(EXTENDING, PLUGIN_TUTORIAL), "python"):
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


def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#+ (.*)$", text, flags=re.M)}


def test_every_relative_link_resolves():
    """Every relative link (and its #anchor) in README.md and docs/*.md names a file of the repository."""
    broken = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"^```.*?^```", "", md.read_text(), flags=re.S | re.M)
        for target in re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            if not dest.exists() or ROOT not in dest.parents:
                broken.append(f"{md.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
                broken.append(f"{md.name}: {target} (no such heading)")
    assert not broken, broken
