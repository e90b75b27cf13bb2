"""Hydra configuration: the config tree, strict validation, and one-line errors (no torch here).

Composed config layout (``python -m bench run --cfg job`` prints it)::

    seed, device, results_dir, ...     run-level keys (RunConfig)
    <method name>: {...}               the selected method's dataclass, e.g. ``act.tau``
    <task name>: {...}                 the selected task's dataclass, e.g. ``parity.n``

The selected names come from the config groups ``method=`` and ``task=``.  Methods and tasks register
their dataclasses in Hydra's ConfigStore (group ``method``/``task``, package ``_global_``), so plugins
get config groups exactly like built-ins.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any, Sequence

from bench import devices, registry
from bench.errors import UserError, near_matches
from bench.params import allowed, check_ranges, field_help, param

CONFIG_MODULE = "bench.conf"
DEFAULT_METHOD, DEFAULT_TASK = "dense", "parity"  # the defaults list of bench/conf/config.yaml
MAX_VALIDATED_COMBINATIONS = 64


@dataclasses.dataclass
class RunConfig:
    """Run-level keys shared by every method and task."""

    seed: int = param(0, min=0, help="random seed (data order, init, knob sampling)")
    device: str = param("cpu", help=f"where to train, evaluate and time: {devices.VALID}")
    threads: int = param(1, min=1, help="torch CPU threads for evaluation and timing, and for training unless "
                                        "train_threads is set (rows timed at different thread counts are never "
                                        "compared)")
    train_threads: int = param(0, min=0, help="torch CPU threads while a stage trains (0: threads); on a small "
                                              "machine one thread can train faster than two "
                                              "(scripts/train_throughput.py)")
    results_dir: str = param("results", help="root of the tidy result rows")
    cache_dir: str = param(".cache/bench", help="trained models and stage checkpoints")
    plugins: list = param([], help="modules that register extra methods/tasks")
    eval_limit: int = param(0, min=0, help="evaluate on the first N test samples (0 = all)")
    count_batches: int = param(2, min=1, help="batches run under the dispatch-level MAC counter")
    timing: bool = param(True, help="measure batch-1 latency and large-batch throughput")
    timing_batch: int = param(128, min=1, help="batch size of the throughput measurement")
    timing_min_run_s: float = param(0.5, min=0.01, help="seconds per timing measurement")
    timing_rounds: int = param(3, min=1, help="interleaved rounds of method vs dense base timing")
    allow_cost_mismatch: bool = param(False, help="write rows even if the MAC counter and the method's "
                                                  "decision log disagree by >1% (recorded in cost_check)")
    recipe: str = param("matched", choices=("matched", "paper"),
                        help="matched: every method on the task's method budget (the equal fine-tune of the dense "
                             "base, or the base's budget from scratch); paper: the method's paper recipe (its "
                             "starting point, its budget as the paper's fraction of the base's training, its "
                             "stage split; `bench ls` shows each)")
    force: bool = param(False, help="re-run knob values that already have result rows")
    shipped: bool = param(True, help="start from the trained bases shipped under artifacts/ when the cache lacks "
                                     "them (false: train them)")
    # scale: precision, accumulation, the training DataLoader, logging and checkpoints
    precision: str = param("fp32", choices=("fp32", "bf16", "fp16"),
                           help="fp32, or bf16/fp16: autocast training (fp16 adds a GradScaler) and evaluation, "
                                "counting and timing of the model cast to that dtype; CUDA or CPU")
    accumulate: int = param(1, min=1, help="gradient accumulation: micro-batches per optimizer step (the "
                                           "global batch and the step count stay the task's)")
    num_workers: int = param(0, min=0, help="DataLoader worker processes building upcoming training batches")
    pin_memory: bool = param(True, help="page-locked training batches (used on CUDA devices only)")
    log_every: int = param(50, min=1, help="read the training loss back from the device every N steps")
    save_every_s: float = param(60.0, min=0.0, help="seconds between resumable checkpoints (model, optimizer, "
                                                     "sampler position) of a training stage")


RUN_KEYS = {f.name for f in dataclasses.fields(RunConfig)}


@dataclasses.dataclass
class ReportConfig:
    """The keys of ``python -m bench report`` (a scenario beside ``speed``'s and ``kernels``')."""

    results_dir: str = param("results", help="the rows to read (every task's, speed, kernels, throughput)")
    reports_dir: str = param("reports", help="where the pages and figures are written")


class ConfigError(UserError, ValueError):
    """A bad command line or config; the message is one line for the user."""


def register_config_store() -> None:
    """Put RunConfig and every registered method/task dataclass in Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    # Run keys go in as plain values (a structured root would refuse the method/task sections);
    # check_config type-checks them against RunConfig.
    from omegaconf import OmegaConf

    store.store(name="run_schema", node=OmegaConf.to_container(OmegaConf.structured(RunConfig)))
    for spec in registry.methods().values():
        store.store(group="method", name=spec.name, node={spec.name: spec.config}, package="_global_")
    for spec in registry.tasks().values():
        store.store(group="task", name=spec.name, node={spec.name: spec.config}, package="_global_")


def _parse(overrides: Sequence[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except OverrideParseException as err:
        first = str(err).strip().splitlines()[0]
        raise ConfigError(f"cannot parse override: {first}; write key=value, e.g. seed=1") from None


def load_plugins_from(overrides: Sequence[str]) -> None:
    """Import the plugin modules named by a ``plugins=`` override before composing."""
    for ov in _parse(overrides):
        if ov.key_or_group in ("plugins", "+plugins"):
            value = ov.value()
            for name in value if isinstance(value, list) else [value]:
                registry.load_plugin(str(name))


def _group_choice(parsed, group: str, default: str) -> list[str]:
    for ov in parsed:
        if ov.key_or_group == group:
            if ov.is_sweep_override():
                return [str(v) for v in ov.sweep_string_iterator()]
            return [str(ov.value())]
    return [default]


def _flat_keys(node: Any, prefix: str = "") -> list[str]:
    from omegaconf import DictConfig

    keys = []
    for key in node.keys():
        full = f"{prefix}{key}"
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            keys.extend(_flat_keys(child, f"{full}."))
        else:
            keys.append(full)
    return keys


def _unknown_section(key: str, known_keys: list[str]) -> str:
    """One line for a key whose section (``section.key``) is not part of the composed config."""
    section = key.split(".")[0]
    sections = sorted({k.split(".")[0] for k in known_keys if "." in k})
    top = sorted(k for k in known_keys if "." not in k)
    if section in registry.methods():
        why = f"'{section}' is a method that this run does not select (add method={section})"
    elif section in registry.tasks():
        why = f"'{section}' is a task that this run does not select (add task={section})"
    else:
        near = near_matches(section, sections, n=2, cutoff=0.5)
        why = f"'{section}' is not a config section" + (f"; did you mean {', '.join(near)}?" if near else "")
    return (f"unknown config key '{key}': {why}; sections here: {', '.join(sections)}; "
            f"run-level keys: {', '.join(top)}")


def _explain(err: BaseException, known_keys: list[str]) -> str:
    """Turn a Hydra/OmegaConf exception into one line naming the key and the choices."""
    text = " ".join(str(err).split())
    if err.__cause__ is not None:
        text += " " + " ".join(str(err.__cause__).split())
    m = re.search(r"Could not override '([^']+)'", text)
    if m:
        key = m.group(1).lstrip("+~")
        near = near_matches(key, known_keys, n=3, cutoff=0.5)
        section = key.rsplit(".", 1)[0] + "." if "." in key else ""
        siblings = [k for k in known_keys if k.startswith(section) and k.count(".") == key.count(".")]
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        if not siblings:  # the section itself is unknown (e.g. a method that is not selected)
            return _unknown_section(key, known_keys)
        return f"unknown config key '{key}'{hint} valid keys here: {', '.join(siblings[:24])}"
    m = re.search(r"Value '([^']*)' (?:of type '[^']+' )?could not be converted to (\w+)", text)
    if m:
        key = re.search(r"full_key: ([\w.]+)", text)
        where = key.group(1) if key else "a key"
        return f"{where}: expected {m.group(2).lower()}, got '{m.group(1)}'"
    m = re.search(r"Value '([^']*)' is not a valid bool", text)
    if m:
        key = re.search(r"full_key: ([\w.]+)", text) or re.search(r"Error merging override ([\w.]+)=", text)
        return f"{key.group(1) if key else 'a key'}: expected true or false, got '{m.group(1)}'"
    return text.split(" full_key:")[0]


def compose(overrides: Sequence[str]):
    """Compose one config (no sweeps) from the command-line overrides; ConfigError on any problem."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    register_config_store()
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        try:
            cfg = hydra_compose(config_name="config", overrides=list(overrides))
        except Exception as err:  # Hydra raises several types; all become one line
            base = hydra_compose(config_name="config", overrides=[
                o for o in overrides if re.match(r"^(method|task)=", o)])
            raise ConfigError(_explain(err, _flat_keys(base))) from None
    return cfg


def compose_scenario(name: str, schema: type, overrides: Sequence[str]) -> Any:
    """A verb's own config (``bench speed``'s and ``bench kernels``' keys): the dataclass ``schema`` as an
    OmegaConf structured config, each override parsed by Hydra's override grammar (as ``run``'s are) and
    set on it with the schema's type checks; every problem is one line starting with the verb ``name``
    (ConfigError).  A list-typed key also takes the comma form (``method=acm,cct``) and a single value
    (``fraction=0.5``).  Hydra's compose is not used: the ``method`` and ``task`` config groups that ``run``
    stores would capture the keys of the same names.  Returns a ``schema`` instance."""
    from omegaconf import OmegaConf

    keys = [f.name for f in dataclasses.fields(schema)]
    lists = {f.name for f in dataclasses.fields(schema) if str(f.type).startswith("list")}
    for arg in overrides:
        if "=" not in arg or arg.startswith("="):
            raise ConfigError(f"{name}: expected key=value, got '{arg}'; keys: {', '.join(keys)}")
    cfg = OmegaConf.structured(schema)
    try:
        parsed = _parse([_as_list(o, lists) for o in overrides])
    except ConfigError as err:
        raise ConfigError(f"{name}: {err}") from None
    for override in parsed:
        key = override.key_or_group
        if key not in keys:
            near = near_matches(key, keys, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise ConfigError(f"{name}: unknown config key '{key}'{hint} valid keys of {name}: {', '.join(keys)}")
        if override.is_sweep_override():
            raise ConfigError(f"{name}: {override.input_line}: one value per key (a list: {key}=[a,b])")
        try:
            cfg[key] = override.value()
        except Exception as err:  # OmegaConf's validation errors: one line naming the key
            raise ConfigError(f"{name}: {_explain(err, keys)}") from None
    composed = OmegaConf.to_object(cfg)
    problem = check_ranges("", schema, dataclasses.asdict(composed))
    if problem:
        raise ConfigError(f"{name}: {problem}")
    return composed


def print_scenario_keys(name: str, summary: str, schema: type) -> None:
    """``bench <name> --help``: the usage line, ``summary`` and every key of ``schema`` with its default and
    help (:func:`bench.params.field_help`)."""
    print(f"usage: python -m bench {name} [key=value ...]\n{summary}\n\nkeys:")
    for key, default, help_text in field_help(schema):
        accepts = allowed(schema, key)
        print(f"  {key}={default!r}  {help_text}" + (f" [{accepts}]" if accepts else ""))


def _as_list(override: str, lists: set[str]) -> str:
    """``key=a,b`` or ``key=a`` -> ``key=[a,b]`` / ``key=[a]`` for a list-typed key (other overrides as they are)."""
    key, sep, value = override.partition("=")
    if not sep or key not in lists or value.startswith("["):
        return override
    return f"{key}=[{value}]"


def selected(cfg: Any) -> tuple[str, str]:
    """(method name, task name) of a composed config."""
    method = [k for k in cfg.keys() if k in registry.methods()]
    task = [k for k in cfg.keys() if k in registry.tasks()]
    return method[0], task[0]


def check_config(cfg: Any, method: str, task: str) -> None:
    """Type-check run keys and range-check every section; ConfigError with one line."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    run_values = {k: cfg[k] for k in RUN_KEYS if k in cfg}
    try:
        OmegaConf.merge(OmegaConf.structured(RunConfig), run_values)
    except OmegaConfBaseException as err:
        raise ConfigError(_explain(err, sorted(RUN_KEYS))) from None
    sections = [("", RunConfig, run_values),
                (method, registry.method_spec(method).config, OmegaConf.to_container(cfg[method])),
                (task, registry.task_spec(task).config, OmegaConf.to_container(cfg[task]))]
    for prefix, schema, values in sections:
        problem = check_ranges(prefix, schema, values)
        if problem:
            raise ConfigError(problem)
    problem = devices.spelling_problem(run_values.get("device", "cpu"))
    if problem:
        raise ConfigError(problem)
    method_spec, task_spec = registry.method_spec(method), registry.task_spec(task)
    reason = registry.support_reason(method_spec, task_spec, cfg[task])
    if reason:
        works = _supported_variants(method_spec, task_spec, cfg[task])
        hint = f"; with {' or '.join(works)} it does (add it to the command)" if works else ""
        raise ConfigError(f"method '{method}' does not apply to task '{task}': {reason}{hint}")


def _supported_variants(method_spec: Any, task_spec: Any, task_cfg: Any) -> list[str]:
    """The task's declared variants (overrides such as ``parity.variant=sequence``) under which the method
    applies, for the refusal's hint."""
    import yaml
    from omegaconf import OmegaConf

    works = []
    for variant in task_spec.test_variants:
        changed = OmegaConf.create(OmegaConf.to_container(task_cfg))
        for override in variant:
            key, value = override.split("=", 1)
            OmegaConf.update(changed, key.split(".", 1)[1], yaml.safe_load(value))
        if variant and registry.support_reason(method_spec, task_spec, changed) is None:
            works.append(" ".join(variant))
    return works


def check_sweeps(overrides: Sequence[str], multirun: bool) -> None:
    """A sweep (comma list, ``range()``, ``glob()``) needs ``-m``; without it, say so in one line."""
    if multirun:
        return
    sweeps = [o.input_line for o in _parse(overrides) if o.is_sweep_override()]
    if sweeps:
        raise ConfigError(f"{sweeps[0]} is a sweep (one job per value) but the command has no -m; add -m "
                          f"(python -m bench run -m ...), or write a list value as key=[a,b]")


def validate(overrides: Sequence[str], outputs: list | None = None) -> int:
    """Validate a (multi)run command line: every sweep combination composes and passes the checks.

    Returns the number of jobs.  Sweeps with many combinations validate each swept value once.
    ``outputs``, if given, receives (results_dir, cache_dir, device) of every composed combination.
    """
    parsed = _parse(overrides)
    methods = _group_choice(parsed, "method", DEFAULT_METHOD)
    tasks = _group_choice(parsed, "task", DEFAULT_TASK)
    for name in methods:
        registry.method_spec(name)
    for name in tasks:
        registry.task_spec(name)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    sweeps = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
              for o in parsed if o.is_sweep_override()]
    combos = list(itertools.islice(itertools.product(*sweeps), MAX_VALIDATED_COMBINATIONS + 1))
    if len(combos) > MAX_VALIDATED_COMBINATIONS:
        combos = [tuple(s[min(i, len(s) - 1)] for s in sweeps) for i in range(max(map(len, sweeps)))]
    for combo in combos:
        cfg = compose(fixed + list(combo))
        check_config(cfg, *selected(cfg))
        if outputs is not None:
            outputs.append((str(cfg.results_dir), str(cfg.cache_dir), str(cfg.device)))
    total = 1
    for s in sweeps:
        total *= len(s)
    return total
