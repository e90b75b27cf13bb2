"""Extension points are declared in the specs, never found by looking for sibling modules."""

from __future__ import annotations

import importlib.util

import pytest

from bench import registry, speed
from bench.report import claims as report_claims


def _specs():
    return [*registry.methods().values(), *registry.tasks().values()]


@pytest.mark.parametrize("spec", _specs(), ids=lambda s: s.name)
def test_every_claims_and_speed_module_is_declared_by_its_spec(spec):
    """A package's claims.py / speed.py is named in its spec (``claims=``, ``speed=``), and what a spec
    names exists: nothing is picked up because of a file name."""
    package = spec.impl.partition(":")[0].rpartition(".")[0]
    for field, module in (("claims", f"{package}.claims"), ("speed", f"{package}.speed")):
        declared = getattr(spec, field)
        if importlib.util.find_spec(module) is not None:
            assert declared.split(":")[0] == module, f"{spec.name}: {module} exists but {field}= does not name it"
        if declared:
            assert importlib.util.find_spec(declared.split(":")[0]) is not None


def test_an_undeclared_claims_module_is_not_read(monkeypatch):
    """A spec with ``claims=""`` has no claims even when a claims module sits beside its implementation."""
    import dataclasses

    acm = registry.method_spec("acm")
    assert report_claims.claims_path(acm) == "methods.acm.claims:CLAIMS"
    assert report_claims.claims_path(dataclasses.replace(acm, claims="")) == ""
    assert speed.speed_module(dataclasses.replace(acm, speed="")) == ""
