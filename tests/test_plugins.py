"""A method defined in a module outside this repository, used from the CLI and from Python."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PLUGIN = textwrap.dedent('''
    """An external plugin: a 'constant' method that predicts one class at zero cost."""
    from dataclasses import dataclass

    from bench.params import param
    from bench.registry import MethodSpec, register_method


    @dataclass
    class ConstantConfig:
        label: int = param(0, min=0, max=1, help="the class always predicted")


    register_method(MethodSpec(name="constant", config=ConstantConfig, impl="extplug.impl:Constant",
                               description="always predicts one class", knob="label", knob_kind="static"))
''')

IMPL = textwrap.dedent('''
    import torch
    from torch import nn

    from bench.api import Method


    class Always(nn.Module):
        def __init__(self, label):
            super().__init__()
            self.label = label
            self.dummy = nn.Parameter(torch.zeros(1))

        def forward(self, x):
            logits = torch.zeros(x.shape[0], 2)
            logits[:, self.label] = 1.0
            return logits


    class Constant(Method):
        def starts_from(self):
            return "scratch"  # nothing to convert, no stage: nothing trains

        def convert(self, base):
            return Always(int(self.cfg.label))

        def knob_values(self):
            return [int(self.cfg.label)]

        def sample_macs(self, model, batch):
            return torch.zeros(len(batch), dtype=torch.float64)
''')


def _write_plugin(tmp_path: Path) -> Path:
    pkg = tmp_path / "outside" / "extplug"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PLUGIN)
    (pkg / "impl.py").write_text(IMPL)
    return tmp_path / "outside"


def _env(*paths: Path) -> dict:
    import os

    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (*paths, ROOT))}


def test_plugin_from_cli_override(tmp_path):
    outside = _write_plugin(tmp_path)
    out = subprocess.run([sys.executable, "-m", "bench", "run", "plugins=[extplug]", "method=constant",
                          "task=parity", "constant.label=1", "parity.test_samples=64", "parity.eval_batch=32",
                          f"results_dir={tmp_path / 'results'}", f"cache_dir={tmp_path / 'cache'}",
                          "timing=false"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=_env(outside))
    assert out.returncode == 0, out.stderr
    rows = list((tmp_path / "results" / "parity" / "constant").glob("*-s0.csv"))
    assert len(rows) == 1
    import pandas as pd

    row = pd.read_csv(rows[0]).iloc[0]
    assert row["method"] == "constant" and row["knob_value"] == 1
    assert 0.3 < row["quality"] < 0.7  # a constant guess on balanced parity


def test_plugin_unknown_key_and_missing_module(tmp_path):
    outside = _write_plugin(tmp_path)
    bad_key = subprocess.run([sys.executable, "-m", "bench", "run", "plugins=[extplug]", "method=constant",
                              "constant.lable=1"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                             env=_env(outside))
    assert bad_key.returncode == 2
    assert "did you mean constant.label" in bad_key.stderr
    missing = subprocess.run([sys.executable, "-m", "bench", "run", "plugins=[no_such_plugin]"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120, env=_env(outside))
    assert missing.returncode == 2
    assert "plugins: cannot import 'no_such_plugin'" in missing.stderr


def test_plugin_from_entry_point_and_python(tmp_path):
    outside = _write_plugin(tmp_path)
    dist = outside / "extplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: extplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[bench.plugins]\nextplug = extplug\n")
    code = ("from bench import registry; spec = registry.method_spec('constant'); "
            "print(spec.impl, 'constant' in registry.methods())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=_env(outside))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "extplug.impl:Constant True"
    ls = subprocess.run([sys.executable, "-m", "bench", "ls"], cwd=tmp_path, capture_output=True, text=True,
                        timeout=120, env=_env(outside))
    assert "constant" in ls.stdout


def test_ls_with_plugins_lists_the_plugin(tmp_path):
    outside = _write_plugin(tmp_path)
    out = subprocess.run([sys.executable, "-m", "bench", "ls", "plugins=[extplug]"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env=_env(outside))
    assert out.returncode == 0, out.stderr
    assert "constant" in out.stdout and "constant.label=0" in out.stdout


def test_a_plugin_that_registers_nothing_is_refused_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bench", "run", "plugins=[json]", "method=dense", "task=parity",
                          f"results_dir={tmp_path / 'results'}", f"cache_dir={tmp_path / 'cache'}"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_env())
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == ("bench: error: plugins: 'json' registers no method or task; name "
                                                   "the module whose import calls bench.registry.register_method "
                                                   "or register_task")
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "results").exists()


def test_a_plugin_cannot_replace_a_builtin(tmp_path, monkeypatch):
    from bench import registry

    (tmp_path / "shadow_acm.py").write_text(PLUGIN.replace('name="constant"', 'name="acm"'))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = registry.method_spec("acm")
    import pytest

    with pytest.raises(registry.RegistryError, match="method 'acm' is registered twice .*give the plugin's method "
                                                     "another name"):
        registry.load_plugin("shadow_acm")
    assert registry.method_spec("acm") is before
