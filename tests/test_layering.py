"""Layering rules (docs/architecture.md): the import contracts in .importlinter (bench/ knows no method or task, a
method never imports a task and a task never imports a method, producers of rows do not import the report, no
import cycles), and what a contract cannot say (methods ask for capabilities, not task names)."""

import ast
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
REPORT_MODULES = ("bench.report", "bench.report.plots")


def files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _lint_imports(*contracts: str) -> subprocess.CompletedProcess:
    """import-linter on .importlinter, in a process of its own (it reconfigures logging)."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(ROOT / '.importlinter')!r}, no_cache=True, no_logo=True, "
            f"limit_to_contracts={contracts!r}))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_layer_contracts_hold():
    """The contracts in .importlinter (import-linter): the core knows no method or task, methods and tasks never
    import each other, what makes rows never imports the report, and no package has an import cycle."""
    done = _lint_imports()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_a_broken_contract_fails():
    """The contracts can fail: a method module that imports a task breaks the methods contract."""
    probe = ROOT / "methods" / "_probe_contract.py"
    probe.write_text("import tasks.parity.task\n")
    try:
        done = _lint_imports("methods")
    finally:
        probe.unlink()
    assert done.returncode == 1 and "Methods never import tasks BROKEN" in done.stdout


def test_kernel_benchmark_draws_without_loading_the_report(tmp_path):
    """Importing the kernel benchmark and drawing its figure from rows leaves the report unloaded."""
    code = (
        "import sys\n"
        "import methods.acm.kernels.bench as kb\n"
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
