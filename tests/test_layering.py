"""Layering rules (docs/architecture.md): bench/ knows no method or task, a method never imports a task and a task
never imports a method, and producers of rows (runs, the kernel benchmark) do not import the report."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REPORT_MODULES = ("bench.report", "bench.report_plots")
# The report itself and the CLI verb that starts it may import it; nothing else in bench/ may.
REPORT_USERS = {"bench/report.py", "bench/report_plots.py", "bench/report_speed.py", "bench/report_claims.py", "bench/report_curves.py",
                "bench/report_method_budget.py", "bench/report_static.py", "bench/report_status.py",
                "bench/cli.py"}


def imported_modules(path: Path) -> set[str]:
    """Every module an ``import``/``from ... import`` statement names anywhere in the file (lazy ones too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def offending(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in paths:
        for name in sorted(imported_modules(path)):
            if name in forbidden or name.startswith(tuple(f"{f}." for f in forbidden)):
                bad.append(f"{path.name if not path.is_relative_to(ROOT) else path.relative_to(ROOT)} imports {name}")
    return bad


def test_imported_modules_sees_lazy_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from bench.report_plots import save_figure\n    import tasks.parity.task\n")
    assert {"bench.report_plots", "tasks.parity.task"} <= imported_modules(probe)
    assert offending([probe], ("tasks",)) and offending([probe], REPORT_MODULES)


def test_methods_do_not_import_tasks():
    assert offending(files("methods"), ("tasks",)) == []


def test_tasks_do_not_import_methods():
    assert offending(files("tasks"), ("methods",)) == []


def test_core_imports_no_method_or_task():
    assert offending(files("bench"), ("methods", "tasks")) == []


@pytest.mark.parametrize("package", ["bench", "methods", "tasks"])
def test_producers_do_not_import_the_report(package):
    # figures.py of a method/task draws from rows for `bench report` (TaskSpec.figures): report-side code
    paths = [p for p in files(package) if str(p.relative_to(ROOT)) not in REPORT_USERS and p.name != "figures.py"]
    assert offending(paths, REPORT_MODULES) == []


def test_kernel_benchmark_draws_without_loading_the_report(tmp_path):
    """Importing the kernel benchmark and drawing its figure from rows leaves the report unloaded."""
    code = (
        "import sys\n"
        "import bench.kernels.bench as kb\n"
        "from bench.figures import save_figure\n"
        "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
        "fig = plt.figure(); save_figure(fig, __import__('pathlib').Path(sys.argv[1]))\n"
        "print(sorted(m for m in sys.modules if m.startswith('bench.report')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "f.png")], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rnn_cell_is_shared_model_code():
    from bench.models.rnn import RNNCell, StaticRNN
    from methods.act import model as act_model

    assert act_model.RNNCell is RNNCell
    assert isinstance(StaticRNN(4, 3, steps=2).cell, RNNCell)


TASK_NAMES = ("imagenet", "commonvoice", "iwslt", "wmt", "parity")
# Task config keys every task has and the core itself uses (the base model's budget): a method may read
# these; any other task key is the task's private business.
CORE_TASK_KEYS = {"train_steps", "batch_size", "lr"}


def task_coupling(path: Path) -> list[str]:
    """String constants naming a task (docstrings aside) and reads of a task's private config keys."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value in TASK_NAMES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} names the task {node.value!r}")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "cfg" and isinstance(node.value.value, ast.Attribute) \
                and node.value.value.attr == "task" and node.attr not in CORE_TASK_KEYS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} reads the task key {node.attr!r}")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "task_cfg" \
                and node.attr not in CORE_TASK_KEYS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} reads the task key {node.attr!r}")
    return found


def test_task_coupling_sees_names_and_private_keys(tmp_path):
    probe = ROOT / "methods" / "_probe_layering.py"
    probe.write_text('"""Mentions imagenet in a docstring: fine."""\n'
                     'def f(self, task_cfg):\n    if self.task.name == "parity":\n        return self.task.cfg.n\n'
                     '    return task_cfg.hidden, self.task.cfg.lr\n')
    try:
        found = task_coupling(probe)
    finally:
        probe.unlink()
    assert [f.split(" ", 1)[1] for f in found] == ["names the task 'parity'", "reads the task key 'n'",
                                                   "reads the task key 'hidden'"]


def test_methods_ask_for_capabilities_not_task_names():
    """No method's model or training code mentions a task's name or reads a task's private key (they ask
    for capabilities).  Claim declarations (``claims.py``) name the rows a paper claim is about, task
    included: they read results, never a task."""
    skipped = {"claims.py"}
    assert [f for path in files("methods") if path.name not in skipped for f in task_coupling(path)] == []
