"""``python -m bench <verb>``: run, report, ls, kernels.

Heavy modules (torch, pandas, matplotlib) are imported only inside the verbs that need them, so
``--help``, ``ls`` and config errors answer quickly.  Bad input prints one line and exits with code 2.
"""

from __future__ import annotations

import importlib
import sys

from bench import config, devices, paths, registry, signals
from bench.config import ConfigError
from bench.errors import UserError, near_matches
from bench.params import field_help

USAGE = """usage: python -m bench <verb> [args]

verbs:
  run [method=<m>] [task=<t>] [key=value ...] [-m]
        train (cached) and evaluate one method on one task; rows go to results/<task>/<method>/.
        Hydra overrides; -m / --multirun sweeps comma lists, e.g. -m act.tau=1e-3,1e-2
        `run --cfg job` prints the composed config; `python -m bench ls` lists every key's default.
  report [results_dir=results] [reports_dir=reports]
        Pareto figures, the leaderboard and the claims page from the rows under results/
  ls [plugins=[pkg.module,...]]
        run-level keys, registered methods and tasks (with plugins), their config keys, the method x task matrix
  kernels [key=value ...]
        the kernel latency benchmark a method registers (latency vs executed fraction against linear scaling);
        `kernels --help` lists the keys
  speed method=<m>[,<m>...] task=<t> arch=<a> fraction=<f>[,...] batch=<b> threads=<n> [key=value ...]
        each method's real path at a paper's model size with forced decisions, timed against the dense
        backbone in the same process; rows go to results/speed/<run_id>/ (`speed --help` lists the keys)

Bad input (any verb) prints one line starting with "bench: error:" and exits with code 2; Ctrl-C prints
one line (the step reached and the checkpoint saved) and exits with 130; the same command resumes.

examples:
  python -m bench run method=act task=parity act.tau=0.001
  python -m bench run -m method=act task=parity act.tau=1e-4,1e-3,1e-2,1e-1
  torchrun --nproc_per_node=2 -m bench run method=acm task=imagenet precision=bf16   # data-parallel training
  python -m bench report
"""

HYDRA_FLAGS = {"-m", "--multirun", "--cfg", "-c", "--info", "-i", "--resolve", "--package", "-p",
               "--help", "-h", "--hydra-help", "--shell-completion", "-sc", "--config-dir", "-cd",
               "--config-name", "-cn", "--config-path", "-cp", "--experimental-rerun"}
# Flags after which Hydra only prints (the config, help, completion) and runs nothing.
PRINT_ONLY_FLAGS = {"--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help", "--shell-completion", "-sc"}
HYDRA_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--config-dir", "-cd", "--config-name",
                          "-cn", "--config-path", "-cp", "--info", "-i"}


def fail(message: str) -> int:
    """One ``bench: error:`` line (rank 0 alone under torchrun; every rank exits 2)."""
    signals.ignore_sigterm()  # torchrun stops the other ranks once one exits: this one exits with its own code
    if _rank() == 0:
        print(f"bench: error: {message}", file=sys.stderr)
    return 2


def interrupted(err: KeyboardInterrupt) -> int:
    """Ctrl-C (exit 130) or SIGTERM (exit 143): one line on rank 0 (the step reached and the checkpoint
    saved, if it came during training).

    A stage interrupted during training raises ``bench.checkpoints.Interrupted`` after saving its partial
    checkpoint; read by attribute so that this module does not import torch.
    """
    stage, step, steps, checkpoint = (getattr(err, k, None) for k in ("stage", "step", "steps", "checkpoint"))
    if checkpoint is not None:
        where = (f"at step {step} of {steps} of stage {stage}; its progress is saved in {checkpoint}; "
                 "run the same command to resume from that step")
    else:
        where = ("outside training; no row was half-written and finished stages stay cached; "
                 "run the same command to continue")
    how, code = ("terminated (SIGTERM)", 143) if signals.stop_requested() else ("interrupted (Ctrl-C)", 130)
    signals.ignore_sigterm()
    if _rank() == 0:
        print(f"bench: error: {how} {where}", file=sys.stderr)
    return code


def split_overrides(args: list[str]) -> tuple[list[str], list[str]]:
    """Separate Hydra's own flags from key=value overrides."""
    flags, overrides, i = [], [], 0
    while i < len(args):
        arg = args[i]
        if arg in HYDRA_FLAGS:
            flags.append(arg)
            if arg in HYDRA_FLAGS_WITH_VALUE and i + 1 < len(args) and "=" not in args[i + 1]:
                flags.append(args[i + 1])
                i += 1
        elif arg.startswith("-"):
            raise ConfigError(f"unknown option '{arg}'; options are -m/--multirun, --cfg job, --help")
        else:
            overrides.append(arg)
        i += 1
    return flags, overrides


def _rank() -> int:
    """This process's data-parallel rank from torchrun's or SLURM's environment (0 when launched alone)."""
    import os

    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def _log_setup() -> None:
    """INFO logging on rank 0; other ranks log warnings only (rank 0 alone writes logs and rows)."""
    import logging

    level = logging.INFO if _rank() == 0 else logging.WARNING
    logging.basicConfig(level=level, format="[bench] %(message)s", force=True)


def _torchrun_world() -> int:
    import os

    return int(os.environ.get("WORLD_SIZE", "1"))


def _run_composed(overrides: list[str]) -> int:
    """One run under torchrun: every rank composes the same config with Hydra's compose API (no
    ``@hydra.main``, no output directory; hydra#2038) and runs it; rank 0 writes the rows."""
    import os

    from bench import runner

    _log_setup()
    cfg = config.compose(overrides)
    method, task = config.selected(cfg)
    command = " ".join([f"torchrun --nproc_per_node={os.environ.get('LOCAL_WORLD_SIZE', _torchrun_world())} -m bench run",
                        f"method={method}", f"task={task}",
                        *[o for o in overrides if not o.startswith(("method=", "task="))]])
    try:
        runner.run(cfg, method, task, command)
    except UserError as err:
        return fail(str(err))
    except KeyboardInterrupt as err:
        return interrupted(err)
    return 0


def _hydra_task(cfg) -> None:
    from hydra.core.hydra_config import HydraConfig

    from bench import runner

    _log_setup()
    hydra_cfg = HydraConfig.get()
    method, task = hydra_cfg.runtime.choices["method"], hydra_cfg.runtime.choices["task"]
    command = " ".join(["python -m bench run", f"method={method}", f"task={task}",
                        *[o for o in hydra_cfg.overrides.task
                          if not o.startswith(("method=", "task="))]])
    try:
        runner.run(cfg, method, task, command)
    except UserError as err:
        sys.exit(fail(str(err)))
    except KeyboardInterrupt as err:
        sys.exit(interrupted(err))


def _defaults_note(overrides: list[str]) -> None:
    """Say which method/task a run uses when the command line does not name it (no silent default)."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o}
    for group, default in (("method", config.DEFAULT_METHOD), ("task", config.DEFAULT_TASK)):
        if group not in given:
            print(f"bench: no {group}= given; using the default {group}={default}", file=sys.stderr)


def cmd_run(args: list[str]) -> int:
    if any(a in ("--help", "-h") for a in args):
        print(USAGE)
        return 0
    try:
        flags, overrides = split_overrides(args)
        config.check_sweeps(overrides, multirun=bool({"-m", "--multirun"} & set(flags)))
        config.load_plugins_from(overrides)
        outputs: list[tuple[str, str, str]] = []
        config.validate(overrides, outputs=outputs)
        if not PRINT_ONLY_FLAGS & set(flags):
            for results_dir, cache_dir, device in dict.fromkeys(outputs):  # before any job starts
                paths.check_writable("results_dir", results_dir)
                paths.check_writable("cache_dir", cache_dir)
                devices.check_available(device)
    except UserError as err:
        return fail(str(err))
    if not PRINT_ONLY_FLAGS & set(flags) and _rank() == 0:
        _defaults_note(overrides)
    if _torchrun_world() > 1 and not PRINT_ONLY_FLAGS & set(flags):
        if {"-m", "--multirun"} & set(flags):
            return fail("-m (a sweep) under torchrun: torchrun runs one configuration on several processes; "
                        "sweep with a Hydra launcher instead (hydra/launcher=submitit_slurm with "
                        "hydra.launcher.tasks_per_node=<GPUs per node>)")
        return _run_composed(overrides)
    import hydra

    main = hydra.main(config_path="conf", config_name="config", version_base="1.3")(_hydra_task)
    sys.argv = ["bench"] + flags + overrides
    main()
    return 0


def recipe_lines(spec: registry.MethodSpec, tasks: dict[str, registry.TaskSpec]) -> list[str]:
    """The method's recipes on each task it supports at its defaults: ``matched`` (the core's equal budget) and
    ``paper`` (its declared paper recipe, at the task's default base budget)."""
    lines = []
    for task in tasks.values():
        if registry.support_reason(spec, task):
            continue
        defaults = task.config()
        steps = getattr(defaults, "train_steps", None)
        recipe = spec.paper_recipe(task.backbones(defaults), int(steps)) if isinstance(steps, int) else None
        paper = recipe.describe() if recipe is not None else "none declared"
        lines.append(f"recipes on {task.name}: matched = the core's equal budget; paper = {paper}")
    return lines


def cmd_ls(args: list[str]) -> int:
    if any(a in ("--help", "-h") for a in args):
        print("usage: python -m bench ls [plugins=[pkg.module,...]]\n"
              "  run-level keys, methods, tasks (built-in and plugins), their keys and the method x task matrix")
        return 0
    for arg in args:
        if not arg.lstrip("+").startswith("plugins="):
            return fail(f"ls: unexpected argument '{arg}'; ls takes only plugins=[pkg.module,...] "
                        "(see `python -m bench ls --help`)")
    try:
        config.load_plugins_from(args)
    except ConfigError as err:
        return fail(f"ls: {err}")
    methods, tasks = registry.methods(), registry.tasks()
    print("run-level keys (key=default):")
    for name, default, help_text in field_help(config.RunConfig):
        print(f"      {name}={default!r}  {help_text}")
    print("tasks:")
    for spec in tasks.values():
        print(f"  {spec.name:14s} {spec.description}")
        for name, default, help_text in field_help(spec.config):
            print(f"      {spec.name}.{name}={default!r}  {help_text}")
    print("methods:")
    for spec in methods.values():
        print(f"  {spec.name:14s} [{spec.knob_kind} knob: {spec.knob}] {spec.description}")
        for name, default, help_text in field_help(spec.config):
            print(f"      {spec.name}.{name}={default!r}  {help_text}")
        for line in recipe_lines(spec, tasks):
            print(f"      {line}")
    print("\nmethod x task (default task settings; ✓ = supported):")
    width = max(len(t) for t in tasks) + 2
    print(" " * 14 + "".join(f"{t:{width}s}" for t in tasks))
    notes = []
    for m in methods.values():
        cells = []
        for t in tasks.values():
            reason = registry.support_reason(m, t)
            if reason:
                notes.append(f"  {m.name} x {t.name}: {reason}")
                cells.append(f"{'✗ [' + str(len(notes)) + ']':{width}s}")
            else:
                cells.append(f"{'✓':{width}s}")
        print(f"  {m.name:12s}" + "".join(cells))
    for i, note in enumerate(notes, 1):
        print(f"  [{i}]{note}")
    return 0


LEGACY_REPORT_FLAGS = {"--results-dir": "results_dir", "--reports-dir": "reports_dir"}


def report_overrides(args: list[str]) -> list[str]:
    """``report``'s arguments as key=value overrides; the flag forms ``--results-dir X`` and
    ``--results-dir=X`` of earlier versions are read as ``results_dir=X``."""
    out, rest = [], list(args)
    while rest:
        arg = rest.pop(0)
        flag, eq, value = arg.partition("=")
        if flag in LEGACY_REPORT_FLAGS:
            if not eq:
                if not rest:
                    raise ConfigError(f"report: {flag} needs a value; use {LEGACY_REPORT_FLAGS[flag]}=<folder>")
                value = rest.pop(0)
            arg = f"{LEGACY_REPORT_FLAGS[flag]}={value}"
        out.append(arg)
    return out


def cmd_report(args: list[str]) -> int:
    """``bench report``: key=value arguments composed like ``speed``'s and ``kernels``' (one line, exit 2)."""
    if any(a in ("--help", "-h") for a in args):
        config.print_scenario_keys("report", "the pages and figures, drawn from the rows", config.ReportConfig)
        return 0
    try:
        opts = config.compose_scenario("report", config.ReportConfig, report_overrides(args))
    except ConfigError as err:
        return fail(str(err))
    from bench.report import build as report

    try:
        written = report.main(opts.results_dir, opts.reports_dir)
    except UserError as err:
        return fail(str(err))
    for path in written:
        print(path)
    return 0


def kernel_benchmark():
    """The module of the kernel benchmark a method registers (``MethodSpec.kernels``); ConfigError (one line)
    when no method, or more than one, registers one."""
    owners = {name: spec.kernels for name, spec in registry.methods().items() if spec.kernels}
    if len(owners) != 1:
        said = f"methods {', '.join(owners)} each register one" if owners else "no method registers one"
        raise ConfigError(f"kernels: no kernel benchmark to run: {said} (MethodSpec.kernels)")
    return importlib.import_module(next(iter(owners.values())))


def cmd_kernels(args: list[str]) -> int:
    """``bench kernels``: key=value arguments composed and checked like ``run``'s (one line, exit 2), then
    handed to the benchmark the method registers."""
    try:
        kernel_bench = kernel_benchmark()
        if any(a in ("--help", "-h") for a in args):
            config.print_scenario_keys("kernels", kernel_bench.__doc__.split("\n\n")[0], kernel_bench.KernelsConfig)
            return 0
        kernel_bench.check(kernel_bench.parse(args))
    except UserError as err:
        return fail(str(err))
    return kernel_bench.main(args)


def cmd_speed(args: list[str]) -> int:
    """``bench speed``: key=value arguments (bench/speed.py); bad input is one line, exit 2."""
    from bench import speed

    if any(a in ("--help", "-h") for a in args):
        config.print_scenario_keys("speed", speed.__doc__.split("\n\n")[0], speed.SpeedConfig)
        return 0
    try:
        return speed.main(args)
    except UserError as err:
        return fail(str(err))


VERBS = {"run": cmd_run, "report": cmd_report, "ls": cmd_ls, "kernels": cmd_kernels, "speed": cmd_speed}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    verb, rest = argv[0], argv[1:]
    signals.handle_sigterm()
    if verb not in VERBS:
        near = near_matches(verb, VERBS, n=1)
        hint = f"; did you mean '{near[0]}'?" if near else ""
        return fail(f"unknown verb '{verb}'{hint} valid: {', '.join(VERBS)}")
    try:
        return VERBS[verb](rest)
    except UserError as err:  # ConfigError and RegistryError are kinds of it
        return fail(str(err))
    except KeyboardInterrupt as err:
        return interrupted(err)
