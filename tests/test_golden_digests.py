"""Behaviour is pinned by explicit versions: every matrix case's tiny training matches its golden digest
while the versions of the code that trained it are unchanged (tests/golden/__init__.py explains)."""

import pytest

from tests import golden
from tests.golden.compute import compute
from tests.helpers import matrix_cases

CASES = matrix_cases()
RECORDS = golden.load()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("golden")


def test_every_case_has_a_golden_digest():
    missing = sorted({golden.case_id(*c) for c in CASES} - set(RECORDS))
    assert not missing, f"no golden digest for {missing}: record them with python -m tests.golden --update {' '.join(missing)}"


@pytest.mark.parametrize("method,task,variant", CASES, ids=[golden.case_id(*c) for c in CASES])
def test_behaviour_changes_only_with_a_version_bump(method, task, variant, workdir):
    name = golden.case_id(method, task, variant)
    if name not in RECORDS:
        pytest.fail(f"no golden digest for {name}")
    stored, current = RECORDS[name], compute(method, task, variant, workdir)
    update = f"re-record it in the same commit: python -m tests.golden --update {name}"
    assert current["versions"] == stored["versions"], (
        f"{name}: versions {stored['versions']} -> {current['versions']} (a bump); {update}")
    changed = golden.differences(stored["digest"], current["digest"])
    assert not changed, (f"{name}: behaviour changed without a version bump ({', '.join(changed[:5])}); bump the "
                         f"version of the code you changed (docs/architecture.md), then {update}")


def test_the_digest_sees_a_one_step_change(tmp_path):
    """A training that differs by one optimizer step is told apart (the tolerance is not too loose)."""
    first = compute("dense", "parity", (), tmp_path / "a")  # the tiny config trains 15 steps
    second = compute("dense", "parity", ("parity.train_steps=16",), tmp_path / "b")
    assert golden.differences(first["digest"], second["digest"])
    assert not golden.differences(first["digest"], compute("dense", "parity", (), tmp_path / "c")["digest"])
