"""DAT's exit thresholds: one per block (τ_1 … τ_{N−1}), tuned on the task's validation split and never on
the test split (paper §3.2), and the choice of a knob value from the tuned candidates."""

from __future__ import annotations

import pytest
import torch

from methods.dat import tuning as T
from tests.test_translation import _dat, _sources


@pytest.mark.parametrize("thresholds,depth", [([1.0, 0.0, 1.0], 2), ([1.0, 1.0, 0.0], 3), ([0.0, 1.0, 1.0], 1)])
def test_each_block_applies_its_own_threshold(thresholds, depth):
    """χ_n > τ_n with τ_n = 1 never exits and τ_n = 0 always does: every token exits at the first block whose
    own threshold is 0."""
    model = _dat()
    assert model.n_blocks == 4 and len(model.thresholds) == 3
    model.thresholds = thresholds
    with torch.no_grad():
        model.generate(_sources(batch=3, seed=4), beam=2)
    exits = torch.cat(model.log.exits)
    assert exits.eq(depth).all()


def test_choose_best_validation_bleu_within_the_average_exit_budget():
    a = T.Candidate((0.5, 0.5), bleu=20.0, avg_exit=2.5)
    b = T.Candidate((0.1, 0.9), bleu=18.0, avg_exit=1.4)
    c = T.Candidate((0.9, 0.2), bleu=19.0, avg_exit=1.9)
    d = T.Candidate((0.3, 0.3), bleu=19.0, avg_exit=1.6)  # same BLEU as c, cheaper
    cands = [a, b, c, d]
    assert T.choose(cands, 3.0) is a
    assert T.choose(cands, 2.0) is d
    assert T.choose(cands, 1.5) is b
    assert T.choose(cands, 1.2) is b  # none that cheap: the cheapest
    assert T.budget_label(1.5) == "ae1.5" and T.parse_budget("ae1.5") == 1.5 and T.parse_budget("exit2") is None


def test_candidates_are_per_block_vectors_with_the_papers_default_first():
    cands = T.draw_candidates(5, 8, seed=3)
    assert cands[0] == (0.5,) * 5 and len(cands) == 9
    assert all(len(c) == 5 and all(0.0 <= t <= 1.0 for t in c) for c in cands)
    assert any(len(set(c)) == 5 for c in cands[1:])  # the blocks get their own values
    assert cands == T.draw_candidates(5, 8, seed=3) and cands != T.draw_candidates(5, 8, seed=4)


def test_thresholds_are_tuned_on_the_validation_split_and_never_read_the_test_split(tmp_path):
    """The chosen per-block thresholds come from decoding the validation split: replacing the test split's
    sentences changes none of them, and the test split's batches are never read while tuning."""
    from tasks.iwslt import data as D
    from tests.helpers import build_tiny

    task, method, model = build_tiny("dat", "iwslt", tmp_path, "iwslt.dec_layers=3", "dat.exit_budgets=[1.5,3]",
                                     "dat.tune_samples=4")
    assert method.knob_values() == ["ae1.5", "ae3", "exit1"]
    valid = T.validation_task(task, 12)
    splits = D.ding_splits(D.DING_PATH, int(task.cfg.valid_size), int(task.cfg.test_size))
    assert valid._eval_pairs.src == splits["validation"].src[:12]
    assert not set(valid._eval_pairs.src) & set(task._eval_pairs.src)

    def chosen() -> dict[str, tuple[float, ...]]:
        model.tuned_candidates = None
        out = {}
        for value in ("ae1.5", "ae3"):
            method.set_knob(model, value)
            out[value] = tuple(model.thresholds)
        return out

    first = chosen()
    assert all(len(t) == model.n_blocks - 1 == 2 for t in first.values())
    assert len(model.tuned_candidates) == 5
    assert model.tuned_candidates[0].thresholds == (0.5, 0.5)
    task._eval_pairs = D.Pairs(task.train_pairs.src[:12], task.train_pairs.tgt[:12])  # other test sentences

    def refuse():
        raise AssertionError("tuning read the test split")

    task.eval_batches = refuse
    assert chosen() == first
