"""Test-wide settings: the Triton interpreter (read when kernels are decorated, so set before any import),
quiet progress bars, offline HuggingFace, two torch threads, and each test's SIGTERM disposition undone."""

import os
import signal

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("BENCH_QUIET", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(autouse=True)
def _sigterm_restored():
    """``bench.cli.main`` handles SIGTERM, and on an error ignores it (a rank ending with its own exit code):
    left so, the ignored disposition would outlive the test and pass to every process it spawns, where a
    multiprocessing pool's terminate() could then never stop its workers."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)
