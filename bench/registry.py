"""Registry of methods and tasks, and plugin discovery.

This module must stay light: it is imported by ``--help``, ``ls`` and config validation, which must not
wait for torch.  A method or task is registered by a *spec*: its name, its config dataclass, and the
dotted path of its (heavy) implementation, which is imported only when a run needs it.

Built-in methods and tasks are the packages under ``methods/`` and ``tasks/``: each package's
``__init__`` holds the light registration (config + spec); the implementation lives beside it.
Plugins outside this repository register the same way, from a module named on the command line
(``plugins=[pkg.module]``), in the ``BENCH_PLUGINS`` environment variable, or through the
``bench.plugins`` package entry-point group.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable, Literal

from bench.errors import UserError, near_matches

KnobKind = Literal["eval", "train", "static"]


@dataclass(frozen=True)
class TaskSpec:
    """A task: data, backbone, metric.  ``backbones(cfg)`` lists the task's capabilities: the backbone
    families it builds ("encoder", "encoder-decoder", "rnn"), what its outputs are ("pooled-outputs": one
    prediction per input; "token-outputs": one per token, e.g. CTC or a decoder) and what its inputs offer
    ("image-patches", "sequence-bits": elements a method such as AdaTape can read).  Methods ask for
    capabilities, never for task names."""

    name: str
    config: type
    impl: str  # "package.module:Class"
    description: str
    metric: str
    higher_is_better: bool
    backbones: Callable[[Any], tuple[str, ...]] = lambda cfg: ("encoder",)
    # Overrides that make the task tiny for the registry-parametrized tests (seconds, not minutes),
    # and the task variants those tests cover (each a tuple of extra overrides).
    test_overrides: tuple[str, ...] = ()
    test_variants: tuple[tuple[str, ...], ...] = ((),)
    # Overrides of evaluation-only keys (tests check that changing them retrains nothing).
    eval_examples: tuple[str, ...] = ()
    # Extra figures drawn by `bench report`: "module:function" taking (rows, results_dir, reports_dir, stem)
    # (one dataset's latest rows as a DataFrame, two Paths, the file-name stem of that dataset) and
    # returning the paths it wrote, all named after the stem (e.g. f"{stem}_difficulty.png").
    figures: str = ""
    # The dataset name (``Task.dataset``) of the task's default config: its report files keep the plain
    # names (``<task>_pareto.png``) whatever other datasets have rows; other datasets get their own names.
    default_dataset: str = ""
    # Paper claims tested on this task's rows: "module:attr" naming a list of bench.claims.Claim (the module
    # may also declare the task's BASE_TARGET); "" = none
    claims: str = ""
    # `bench speed`: the module with this task's named model sizes (``ARCHS``) and ``build(arch)``
    # (bench/speed.py); "" = none.
    speed: str = ""
    # Config keys the task added after rows existed, each at the value that keeps the behaviour before it:
    # a config holding one at that value is the point a config without it was (bench.results.identity_hash
    # leaves it out), e.g. (("ding_phrases", 0),).
    added_defaults: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class MethodSpec:
    """A method.  ``knob`` names the config field that moves it along its trade-off curve."""

    name: str
    config: type
    impl: str
    description: str
    knob: str
    knob_kind: KnobKind
    # support(task_spec, task_cfg) -> None when the method applies, else the reason it does not.
    support: Callable[[TaskSpec, Any], str | None] = field(default=lambda task, cfg: None)
    # Overrides that make the method's training tiny for the registry-parametrized tests.
    test_overrides: tuple[str, ...] = ()
    # Overrides of evaluation-only keys (eval-time knob values and the like): tests check that changing
    # them retrains nothing.
    eval_examples: tuple[str, ...] = ()
    # Figures `bench report` draws from rows: "module:function" taking (rows, results_dir, reports_dir, stem)
    # like TaskSpec.figures, called for every (task, dataset) where this method has rows.  No figure builds
    # or trains a model: what one needs beyond the rows is a per-sample field that the run writes.
    figures: str = ""
    # Paper claims `bench report` evaluates: "module:attr" naming a list of bench.claims.Claim; "" = none
    claims: str = ""
    # `bench speed`: "module:Class" of the method's decision forcer (a bench.speed.Forcer); "" = none.
    speed: str = ""
    # The paper's training recipe: paper_recipe(task capabilities, the base's training steps) -> a
    # bench.recipes.Recipe, or None when the method declares none (``recipe=paper`` is then refused).
    paper_recipe: Callable[[tuple[str, ...], int], Any] = field(default=lambda capabilities, base_steps: None)
    # `bench kernels`: the module of the method's kernel benchmark ("" = none), with ``KernelsConfig`` (its
    # keys' dataclass, fields declared with bench.params.param: their help and ranges), ``parse(argv)``
    # (key=value composed by Hydra: bench.config.compose_scenario), ``check(opts)`` (what composing cannot check; a UserError of one line)
    # and ``main(argv) -> int``; one method at most registers one.
    kernels: str = ""
    # `bench report`: "module:function" drawing the kernel benchmark's page from its rows, taking (results_dir,
    # reports_dir) (two Paths) and returning the paths it wrote ([] when there are no rows).  Apart from
    # ``kernels``, so that the benchmark (a producer of rows) never imports the report.
    kernel_page: str = ""


def requires_backbone(kind: str | tuple[str, ...], reason: str) -> Callable[[TaskSpec, Any], str | None]:
    """A ``MethodSpec.support`` for methods that need one backbone family (e.g. "encoder"), or any of
    several (a tuple)."""
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)

    def support(task: TaskSpec, task_cfg: Any) -> str | None:
        return None if set(kinds) & set(task.backbones(task_cfg)) else reason

    return support


_METHODS: dict[str, MethodSpec] = {}
_TASKS: dict[str, TaskSpec] = {}
_loaded_builtin = False
_loaded_plugins: set[str] = set()


class RegistryError(UserError, ValueError):
    """An unknown name or a bad plugin; its message is one line for the user."""


def _origin(spec: Any) -> str:
    """The module that declares a spec (its config class's module)."""
    return f"{spec.config.__module__}.{spec.config.__qualname__}"


def _register(kind: str, table: dict, spec: Any) -> Any:
    """Add a spec; a second spec under a name another module already registered is refused in one line
    (a plugin never silently replaces a built-in).  The same module registering again (a reload) is fine."""
    held = table.get(spec.name)
    if held is not None and _origin(held) != _origin(spec):
        raise RegistryError(f"{kind} '{spec.name}' is registered twice (by {held.config.__module__} and by "
                            f"{spec.config.__module__}); give the plugin's {kind} another name")
    table[spec.name] = spec
    return spec


def register_method(spec: MethodSpec) -> MethodSpec:
    return _register("method", _METHODS, spec)


def register_task(spec: TaskSpec) -> TaskSpec:
    return _register("task", _TASKS, spec)


def _registered_by(module_name: str) -> list[str]:
    """Names of the methods and tasks whose config is defined in ``module_name`` or a module below it."""
    return [s.name for s in (*_METHODS.values(), *_TASKS.values())
            if s.config.__module__ == module_name or s.config.__module__.startswith(f"{module_name}.")]


def _import_packages(package_name: str) -> None:
    package = importlib.import_module(package_name)
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg:
            importlib.import_module(f"{package_name}.{info.name}")


def load_builtin() -> None:
    global _loaded_builtin
    if _loaded_builtin:
        return
    _loaded_builtin = True
    _import_packages("tasks")
    _import_packages("methods")
    for entry in metadata.entry_points(group="bench.plugins"):
        load_plugin(entry.value)
    for name in filter(None, os.environ.get("BENCH_PLUGINS", "").split(",")):
        load_plugin(name.strip())


def load_plugin(module_name: str) -> None:
    """Import a module that registers methods/tasks (``pkg.module`` or ``pkg.module:attr``)."""
    module_name = module_name.split(":")[0]
    if module_name in _loaded_plugins:
        return
    load_builtin()  # a plugin's names are checked against the built-ins
    before = (len(_METHODS), len(_TASKS))
    try:
        importlib.import_module(module_name)
    except ImportError as err:
        raise RegistryError(
            f"plugins: cannot import '{module_name}' ({err}); put its directory on PYTHONPATH "
            "or install its package"
        ) from err
    if (len(_METHODS), len(_TASKS)) == before and not _registered_by(module_name):
        raise RegistryError(f"plugins: '{module_name}' registers no method or task; name the module whose import "
                            "calls bench.registry.register_method or register_task")
    _loaded_plugins.add(module_name)


def _lookup(kind: str, name: str, table: dict) -> Any:
    load_builtin()
    if name in table:
        return table[name]
    near = near_matches(name, table, n=3)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise RegistryError(f"unknown {kind} '{name}'{hint} valid: {', '.join(sorted(table))}")


def method_spec(name: str) -> MethodSpec:
    return _lookup("method", name, _METHODS)


def task_spec(name: str) -> TaskSpec:
    return _lookup("task", name, _TASKS)


def added_task_defaults(name: str) -> dict[str, Any]:
    """The ``added_defaults`` a task declares ({} for a task that is not registered, e.g. a plugin whose rows are
    read without it)."""
    load_builtin()
    spec = _TASKS.get(name)
    return dict(spec.added_defaults) if spec is not None else {}


def methods() -> dict[str, MethodSpec]:
    load_builtin()
    return dict(sorted(_METHODS.items()))


def tasks() -> dict[str, TaskSpec]:
    load_builtin()
    return dict(sorted(_TASKS.items()))


def load_impl(path: str) -> Any:
    """Import the heavy implementation named by a spec (``package.module:attr``)."""
    module_name, _, attr = path.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def support_reason(method: MethodSpec, task: TaskSpec, task_cfg: Any = None) -> str | None:
    if task_cfg is None:
        task_cfg = task.config()
    return method.support(task, task_cfg)
