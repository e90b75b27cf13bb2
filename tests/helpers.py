"""Shared helpers for tests: compose a tiny config and build a method on a task."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import subprocess
import sys
from pathlib import Path

from bench import config, protocol, registry, results, runner

ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str):
    """The module of ``scripts/<name>.py`` (scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` with a committer identity (tests' throwaway repositories); its stripped output."""
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def tiny_overrides(method: str, task: str, tmp: Path, *extra: str) -> list[str]:
    m, t = registry.method_spec(method), registry.task_spec(task)
    return [f"method={method}", f"task={task}", *t.test_overrides, *m.test_overrides, *extra,
            f"cache_dir={tmp / 'cache'}", f"results_dir={tmp / 'results'}", "timing_min_run_s=0.01",
            "timing_batch=8", "timing_rounds=2", "count_batches=1"]


def compose_tiny(method: str, task: str, tmp: Path, *extra: str):
    cfg = config.compose(tiny_overrides(method, task, tmp, *extra))
    config.check_config(cfg, method, task)
    return cfg


def build_tiny(method: str, task: str, tmp: Path, *extra: str):
    """(task, method, trained adaptive model) for the tiny config."""
    cfg = compose_tiny(method, task, tmp, *extra)
    _, task_impl, method_impl = runner.build(cfg, method, task)
    model = protocol.train(method_impl).eval()
    return task_impl, method_impl, model


def blank_row(**values) -> results.ResultRow:
    """A result row with placeholder fields (0, False or "x" by type) and the current schema, then ``values``."""
    blank = {f.name: (0.0 if f.type == "float" else 0 if f.type == "int" else False if f.type == "bool" else "x")
             for f in dataclasses.fields(results.ResultRow)}
    return results.ResultRow(**{**blank, "schema_version": results.SCHEMA_VERSION, **values})


@functools.lru_cache(maxsize=1)
def matrix_cases() -> list[tuple[str, str, tuple[str, ...]]]:
    """Every registered (method, task, task variant) the method supports (composed once per process)."""
    cases = []
    for m in registry.methods().values():
        for t in registry.tasks().values():
            for variant in t.test_variants:
                cfg = config.compose([f"method={m.name}", f"task={t.name}", *t.test_overrides, *variant])
                if registry.support_reason(m, t, cfg[t.name]) is None:
                    cases.append((m.name, t.name, tuple(variant)))
    return cases
