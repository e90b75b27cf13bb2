"""Cache keys follow the code that trains: a method package's model code counts, its figures do not."""

import importlib
import sys

from bench.run import code_version, stable_hash


def test_package_code_version_tracks_training_code_only(tmp_path, monkeypatch):
    pkg = tmp_path / "methods" / "fakepkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text("def train():\n    return 1\n")
    (pkg / "figures.py").write_text("def draw():\n    return 'v1'\n")
    monkeypatch.syspath_prepend(str(tmp_path / "methods"))
    module = importlib.import_module("fakepkg.model")
    try:
        before = code_version(module)
        (pkg / "figures.py").write_text("def draw():\n    return 'v2'\n")
        assert code_version(module) == before, "editing a figure must not invalidate trained stages"
        (pkg / "model.py").write_text("def train():\n    return 2\n")
        assert code_version(module) != before, "editing training code must retrain"
    finally:
        for name in [n for n in sys.modules if n.startswith("fakepkg")]:
            del sys.modules[name]


def test_stable_hash_ignores_key_order():
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})
    assert stable_hash({"a": 1}) != stable_hash({"a": 2})


def test_base_model_key_ignores_evaluation_and_method_budget(tmp_path):
    from tests.helpers import compose_tiny
    from bench import runner

    def base_stage(*extra):
        cfg = compose_tiny("dense", "parity", tmp_path, *extra)
        run, task, _ = runner.build(cfg, "dense", "parity")
        run.base_model(task)
        return sorted(p.name for p in (tmp_path / "cache" / "parity" / "dense").glob("*.pt"))

    first = base_stage()
    assert base_stage("parity.test_samples=64", "parity.eval_batch=16") == first  # cached, not retrained
    assert base_stage("parity.train_steps=7") != first  # a training key is a different model
