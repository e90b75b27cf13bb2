"""Declaring config fields with ranges and choices, and checking them (no torch here).

Config dataclasses of methods and tasks declare fields with :func:`param`; Hydra/OmegaConf checks
types, and :func:`check_ranges` checks the bounds and choices recorded in the field metadata, so that a
bad value gets one line naming the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from bench.errors import near_matches


def param(default: Any, *, min: float | None = None, max: float | None = None,
          choices: Sequence[Any] | None = None, help: str = "") -> Any:
    """A dataclass field with an allowed range or set of choices (lists get a default factory)."""
    meta = {"min": min, "max": max, "choices": tuple(choices) if choices else None, "help": help}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _check_value(key: str, value: Any, meta: Mapping[str, Any]) -> str | None:
    if isinstance(value, (list, tuple)):
        for item in value:
            problem = _check_value(key, item, meta)
            if problem:
                return problem
        return None
    choices = meta.get("choices")
    if choices and value not in choices:
        near = near_matches(value, map(str, choices), n=1) if isinstance(value, str) else []
        hint = f" (did you mean {near[0]}?)" if near else ""
        return f"{key}={value!r} is not allowed; choose one of {', '.join(map(str, choices))}{hint}"
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and value is not None and value < lo:
        return f"{key}={value} is out of range; expected >= {lo}"
    if hi is not None and value is not None and value > hi:
        return f"{key}={value} is out of range; expected <= {hi}"
    return None


def check_ranges(prefix: str, schema: type, values: Mapping[str, Any]) -> str | None:
    """First range/choice problem of ``values`` against the dataclass ``schema``, or None."""
    for f in dataclasses.fields(schema):
        if f.name in values:
            problem = _check_value(f"{prefix}.{f.name}" if prefix else f.name, values[f.name], f.metadata)
            if problem:
                return problem
    return None


def allowed(schema: type, name: str) -> str:
    """What field ``name`` of ``schema`` accepts, from its declared choices and range ("" when free)."""
    meta = next(f.metadata for f in dataclasses.fields(schema) if f.name == name)
    if meta.get("choices"):
        return "one of " + ", ".join(map(str, meta["choices"]))
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None:
        return f"in [{lo}, {hi}]"
    return f">= {lo}" if lo is not None else f"<= {hi}" if hi is not None else ""


def field_help(schema: type) -> list[tuple[str, Any, str]]:
    """(name, default, help) for every field, for ``bench ls``."""
    rows = []
    for f in dataclasses.fields(schema):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append((f.name, default, f.metadata.get("help", "")))
    return rows
