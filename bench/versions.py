"""The explicit behaviour versions that name trained artefacts and rows.

A cached stage's key holds the versions of the code that trained it, never a hash of source files, so a
refactor (code that moves, is renamed or reformatted) keeps every key; a change of behaviour bumps the
version of the code it touches (docs/architecture.md, "When to bump a version").  Golden digests of tiny
trainings (tests/test_golden_digests.py) fail when behaviour changes while these stay the same.

- ``skeleton``: ``bench.models.VERSION`` (the shared transformer blocks);
- ``trainer``: ``bench.train.VERSION`` (the training loop and the core's protocol);
- ``task:<name>``: the task class's ``version`` (data, backbone, loss);
- ``method:<name>``: the method class's ``version`` (conversion and stages).
"""

from __future__ import annotations

from typing import Any

from bench import models, train


def core() -> dict[str, int]:
    """The versions every trained artefact depends on."""
    return {"skeleton": models.VERSION, "trainer": train.VERSION}


def of(task: Any, method: Any | None = None) -> dict[str, int]:
    """The versions behind a task's base model, and with ``method`` behind that method's stages."""
    return _named(task.name, type(task), *((method.name, type(method)) if method is not None else ()))


def _named(task_name: str, task_cls: Any, method_name: str | None = None, method_cls: Any = None) -> dict[str, int]:
    versions = {**core(), f"task:{task_name}": int(task_cls.version)}
    if method_name is not None:
        versions[f"method:{method_name}"] = int(method_cls.version)
    return versions


def tag(versions: dict[str, int]) -> str:
    """The versions as one short string (a row's ``code_version``): ``skeleton1.trainer1.imagenet1.acm1``."""
    return ".".join(f"{name.split(':')[-1]}{value}" for name, value in versions.items())


def current_tag(task_name: str, method_name: str) -> str:
    """Today's ``code_version`` of rows a registered method makes on a registered task (the classes' versions,
    imported through the registry)."""
    from bench import registry

    return tag(_named(task_name, registry.load_impl(registry.task_spec(task_name).impl),
                      method_name, registry.load_impl(registry.method_spec(method_name).impl)))
