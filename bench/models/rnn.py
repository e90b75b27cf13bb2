"""The recurrent cell shared by tasks and methods (Graves 2016, parity), and its static unrolling.

``RNNCell`` is the cell that ACT ponders (``methods/act``) and that the parity task's dense model applies a
fixed number of times (``StaticRNN``).  It lives in ``bench/models`` so that a method never imports a task.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RNNCell(nn.Module):
    """s' = tanh(W·[x, first-step flag, s] + b): Graves' parity cell (a flag marks the first ponder step)."""

    def __init__(self, n_in: int, hidden: int):
        super().__init__()
        self.hidden = hidden
        self.cell = nn.Linear(n_in + 1 + hidden, hidden)

    def forward(self, x: Tensor, first: bool, state: Tensor) -> Tensor:
        flag = torch.full_like(x[:, :1], 1.0 if first else 0.0)
        return torch.tanh(self.cell(torch.cat([x, flag, state], dim=1)))


class StaticRNN(nn.Module):
    """The cell applied a fixed number of steps (1 = a one-hidden-layer MLP), then a linear head."""

    def __init__(self, n: int, hidden: int, steps: int = 1, classes: int = 2):
        super().__init__()
        self.steps = steps
        self.cell = RNNCell(n, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: Tensor) -> Tensor:
        state = x.new_zeros(x.shape[0], self.cell.hidden)
        for step in range(self.steps):
            state = self.cell(x, step == 0, state)
        return self.head(state)

    def macs_per_sample(self) -> int:
        cell = self.cell.cell
        return self.steps * cell.in_features * cell.out_features + self.head.in_features * self.head.out_features
