"""Cache keys name the explicit behaviour versions of the code that trains (bench/versions.py), never its
source: a version bump retrains what it covers, a source edit without one retrains nothing."""

import json

from bench.run import stable_hash


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


# --- chained keys of every registered method (bench/protocol.py) ----------------------------------------

def _first_case(method: str) -> tuple[str, tuple[str, ...]]:
    from tests.helpers import matrix_cases

    cheap_first = {"parity": 0, "imagenet": 1, "iwslt": 2}  # tasks whose objects build fastest first
    cases = sorted(((t, v) for m, t, v in matrix_cases() if m == method), key=lambda c: cheap_first.get(c[0], 9))
    return cases[0]


def _keys(method: str, tmp_path, *extra: str) -> list:
    """The parent artifact's key and every stage's key (nothing is built or trained)."""
    from bench import protocol, runner
    from tests.helpers import compose_tiny

    task, variant = _first_case(method)
    cfg = compose_tiny(method, task, tmp_path, *variant, *extra)
    _, _, impl = runner.build(cfg, method, task)
    plan = protocol.plan(impl)
    return [plan.parent_key] + [p.key for p in plan.stages if p.steps]


def _methods() -> list[str]:
    from bench import registry

    return list(registry.methods())


import pytest  # noqa: E402


@pytest.mark.parametrize("method", _methods())
def test_evaluation_only_keys_retrain_nothing(method, tmp_path):
    from bench import registry
    from tests.helpers import compose_tiny

    task, variant = _first_case(method)
    examples = registry.method_spec(method).eval_examples + registry.task_spec(task).eval_examples
    assert examples, f"{method} on {task}: no evaluation-only example to check"
    before = _keys(method, tmp_path)
    default = compose_tiny(method, task, tmp_path, *variant)
    for override in examples:
        changed = compose_tiny(method, task, tmp_path, *variant, override)
        assert changed != default, f"{override} changes nothing in the config: not a test"
        assert _keys(method, tmp_path, override) == before, f"{override} changed a cache key of {method}"


@pytest.mark.parametrize("method", _methods())
@pytest.mark.parametrize("bump", ["skeleton", "trainer", "task"])
def test_a_core_or_task_version_bump_retrains_every_stage_downstream(method, bump, tmp_path, monkeypatch):
    import bench.models
    import bench.train
    from bench import registry, runner
    from tests.helpers import compose_tiny

    before = _keys(method, tmp_path)
    if bump == "task":
        task, variant = _first_case(method)
        _, task_impl, _ = runner.build(compose_tiny(method, task, tmp_path, *variant), method, task)
        monkeypatch.setattr(type(task_impl), "version", type(task_impl).version + 1)
    else:
        module = bench.models if bump == "skeleton" else bench.train
        monkeypatch.setattr(module, "VERSION", module.VERSION + 1)
    after = _keys(method, tmp_path)
    assert len(after) == len(before) and registry.method_spec(method)
    assert all(a != b for a, b in zip(before, after)), f"{method}: a stage kept its key after a {bump} bump"


@pytest.mark.parametrize("method", _methods())
def test_a_method_version_bump_retrains_its_stages_but_not_the_base(method, tmp_path, monkeypatch):
    from bench import runner
    from tests.helpers import compose_tiny

    task, variant = _first_case(method)
    before = _keys(method, tmp_path)
    _, _, impl = runner.build(compose_tiny(method, task, tmp_path, *variant), method, task)
    monkeypatch.setattr(type(impl), "version", type(impl).version + 1)
    after = _keys(method, tmp_path)
    assert after[0] == before[0], f"{method}: a method bump must not retrain its parent (the base or scratch key)"
    assert all(a != b for a, b in zip(before[1:], after[1:])), f"{method}: a stage kept its key after a bump"


def test_keys_hold_versions_not_source_hashes(tmp_path):
    """A key names the versions; nothing in it depends on the text of a source file."""
    import bench.models
    import bench.train
    from methods.acm.method import ACMMethod

    keys = _keys("acm", tmp_path)
    task, _ = _first_case("acm")
    assert keys[0]["versions"] == {"skeleton": bench.models.VERSION, "trainer": bench.train.VERSION,
                                   f"task:{task}": 1}
    assert len(keys) > 1 and [k["version"] for k in keys[1:]] == [ACMMethod.version] * (len(keys) - 1)
    assert not any(len(v) == 12 and all(c in "0123456789abcdef" for c in v)  # no hex source digest anywhere
                   for v in json.dumps(keys, default=str).replace('"', " ").split())


@pytest.mark.parametrize("task", ["imagenet", "iwslt", "parity"])
def test_methods_that_start_from_the_base_share_its_artifact(task, tmp_path):
    from bench import protocol, registry, runner
    from tests.helpers import compose_tiny, matrix_cases

    paths = {}
    for method, t, variant in matrix_cases():
        if t != task:
            continue
        cfg = compose_tiny(method, task, tmp_path, *variant)
        run, task_impl, impl = runner.build(cfg, method, task)
        plan = protocol.plan(impl)
        if plan.starts_from == "base":
            assert plan.parent_key == run.base_key(task_impl)
            paths.setdefault(variant, set()).add(run.stage_path("dense", "w1.0-d1.0", plan.parent_key))
    assert paths and all(len(p) == 1 for p in paths.values()), paths
    assert registry.task_spec(task)
