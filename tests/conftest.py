"""Test-wide settings: the Triton interpreter (read when kernels are decorated, so set before any import),
quiet progress bars, offline HuggingFace, and two torch threads."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("BENCH_QUIET", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(2)
