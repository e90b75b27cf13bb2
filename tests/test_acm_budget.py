"""scripts/acm_budget.py: the executed fraction of a trained ACM model under argmax and under Gumbel samples."""

from __future__ import annotations

import torch

from helpers import load_script, tiny_overrides


def test_fractions_follow_the_gate(tmp_path, monkeypatch, capsys):
    budget = load_script("acm_budget")
    overrides = [o for o in tiny_overrides("acm", "imagenet", tmp_path) if o != "method=acm"]
    assert budget.main([*overrides, "shipped=false"]) == 2  # nothing trained here: refused, nothing trained
    assert "is not trained here" in capsys.readouterr().err and not (tmp_path / "cache").exists()
    from bench import cli

    assert cli.main(["run", "method=acm", *overrides, "timing=false"]) == 0
    got = budget.fractions(overrides, batches=2)
    assert got["beta_target"] > 0 and 0.0 <= got["argmax"] <= 1.0 and 0.0 <= got["sampled"] <= 1.0
    assert budget.fractions(overrides, batches=2) == got  # the samples are seeded: the same again

    from methods.acm import modules as M

    def sure_of(choice: int):  # a gate certain of one choice: argmax and samples both take it
        def forward(self, z):
            logits = torch.full((*z.shape[:-1], self.out.out_features), -1e4)
            logits[..., choice] = 1e4
            return logits
        return forward

    monkeypatch.setattr(M.Gate, "forward", sure_of(-1))  # every learner on every token
    assert budget.fractions(overrides, batches=2) | {"beta_target": 0} == {
        "beta_target": 0, "argmax": 1.0, "sampled": 1.0}
    monkeypatch.setattr(M.Gate, "forward", sure_of(0))  # the fewest: 0 learners, 1 where a module needs one
    low = budget.fractions(overrides, batches=2)
    assert 0.0 < low["argmax"] == low["sampled"] < 0.5
