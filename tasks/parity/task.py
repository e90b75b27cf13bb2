"""Task ``parity``, two variants.

vector (Graves 2016, §3.1): one vector of length n; its first d entries (d uniform in 1..n) are ±1 at
    random, the rest 0.  Target: 1 if the number of +1 entries is odd.  Difficulty = d.
    The dense model is a tanh RNN cell (``bench.models.rnn``) applied once (a one-hidden-layer MLP:
    "without ACT the recurrence is never used"); ``dense.depth`` applies it a fixed number of steps
    instead (static baselines).
sequence (AdaTape §4.1): a length-n sequence whose elements are uniform over {−1, 0, +1} (tokens
    0/1/2 for −1/0/+1); target = number of +1 elements mod 2.  Difficulty = number of non-zero elements.
    The dense model is the shared transformer encoder with a class token.

Graves uses one sigmoid output with binary cross-entropy; we use two logits with softmax cross-entropy
(the same model family: logit difference = the sigmoid's pre-activation) so every task shares
``predict``/``score``.  Data are generated from a seed per (split, step): the test set is fixed, training
batches are reproducible, so interrupted training resumes on the same batches.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from bench.api import Batch, Task
from bench.models.rnn import StaticRNN
from bench.models.transformer import Encoder, EncoderConfig

TEST_SEED_OFFSET = 10_000_019  # test data come from a different stream than training data
VALIDATION_SEED_OFFSET = 20_000_003  # ... and validation data from a third one


def make_vector(n: int, count: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """Graves' parity vectors: (x [count, n] in {−1,0,1}, target [count], difficulty d [count])."""
    d = torch.randint(1, n + 1, (count,), generator=generator)
    signs = torch.randint(0, 2, (count, n), generator=generator) * 2 - 1
    prefix = torch.arange(n)[None, :] < d[:, None]
    x = (signs * prefix).float()
    target = ((x == 1).sum(dim=1) % 2).long()
    return x, target, d


def make_sequence(n: int, count: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """AdaTape's parity sequences: (tokens [count, n] in {0,1,2} for {−1,0,+1}, target, difficulty)."""
    tokens = torch.randint(0, 3, (count, n), generator=generator)
    target = ((tokens == 2).sum(dim=1) % 2).long()
    return tokens, target, (tokens != 1).sum(dim=1)


class SequenceEmbed(nn.Module):
    """Token embedding (3 symbols) + a class token + learned positions → ([B, n+1, d], no padding)."""

    def __init__(self, n: int, d_model: int):
        super().__init__()
        self.tokens = nn.Embedding(3, d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d_model) * 0.02)

    def forward(self, tokens: Tensor) -> tuple[Tensor, None]:
        x = self.tokens(tokens)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        return x + self.pos, None

    def macs(self, tokens: int) -> int:
        return 0  # an embedding lookup and adds: no multiply-accumulates


class ParityTask(Task):
    name = "parity"
    metric = "accuracy"
    higher_is_better = True
    not_base_keys = ("test_samples", "eval_batch")

    def __init__(self, cfg, run):
        super().__init__(cfg, run)
        generator = torch.Generator().manual_seed(run.seed + TEST_SEED_OFFSET)
        self._test = self._make(cfg.test_samples, generator)

    @property
    def dataset(self) -> str:
        form = "Graves vector" if self.cfg.variant == "vector" else "AdaTape sequence"
        return f"parity-{self.cfg.variant} n={self.cfg.n} (synthetic, {form}, test {self.cfg.test_samples})"

    def _make(self, count: int, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        maker = make_vector if self.cfg.variant == "vector" else make_sequence
        return maker(self.cfg.n, count, generator)

    def validation_task(self) -> "ParityTask":
        """The same task on a validation set of the test set's size, drawn from its own stream."""
        other = copy.copy(self)
        other._test = self._make(self.cfg.test_samples,
                                 torch.Generator().manual_seed(self.run.seed + VALIDATION_SEED_OFFSET))
        return other

    def train_batch(self, step: int, batch_size: int) -> Batch:
        generator = torch.Generator().manual_seed(self.run.seed * 1_000_003 + step)
        x, y, d = self._make(batch_size, generator)
        return Batch(x, y, {"difficulty": d})

    def eval_batches(self):
        x, y, d = self._test
        size = self.cfg.eval_batch
        for start in range(0, len(y), size):
            sl = slice(start, start + size)
            yield Batch(x[sl], y[sl], {"difficulty": d[sl], "index": torch.arange(start, start + len(y[sl]))})

    def example_input(self, batch_size: int) -> Tensor:
        x = self._test[0]
        reps = -(-batch_size // len(x))
        return x.repeat(reps, *([1] * (x.dim() - 1)))[:batch_size]

    def encoder_config(self, width: float = 1.0, depth: float = 1.0) -> EncoderConfig:
        heads = self.cfg.heads
        d_model = max(heads, int(round(self.cfg.d_model * width / heads)) * heads)
        return EncoderConfig(d_model=d_model, n_layers=max(1, round(self.cfg.layers * depth)), n_heads=heads,
                             d_mlp=4 * d_model, pool="cls")

    def build_backbone(self, width: float = 1.0, depth: float = 1.0) -> nn.Module:
        if self.cfg.variant == "vector":
            return StaticRNN(self.cfg.n, max(1, round(self.cfg.hidden * width)), steps=max(1, round(depth)))
        cfg = self.encoder_config(width, depth)
        return Encoder(cfg, SequenceEmbed(self.cfg.n, cfg.d_model), nn.Linear(cfg.d_model, 2))
