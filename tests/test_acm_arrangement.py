"""scripts/acm_arrangement.py: ACM's drawn learner counts against the same work with every token at k = f·N."""

from __future__ import annotations

import pytest
import torch

from helpers import load_script


def test_the_equal_point_runs_f_times_n_learners_on_every_token_and_is_timed(capsys):
    script = load_script("acm_arrangement")
    assert script.main(["arch=tiny", "batch=2", "fraction=0.5,1", "min_run_s=0.01", "max_load=1000",
                        "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    rows = {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in
            (line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and "point" not in line)}
    assert set(rows) == {"drawn k, f=0.5", "equal k, f=0.5", "drawn k, f=1", "equal k, f=1"}
    # at f = 1 the draw is k = N everywhere: both points execute the same MACs
    assert float(rows["equal k, f=1"][0]) == pytest.approx(float(rows["drawn k, f=1"][0]), abs=1e-3)
    assert float(rows["equal k, f=0.5"][0]) < float(rows["equal k, f=1"][0])
    for cells in rows.values():
        efficiency = float(cells[2])
        low, high = (float(v) for v in cells[3].strip("[]").split(","))
        assert 0 < low <= efficiency <= high


def test_equal_decisions_need_a_whole_number_of_learners():
    from methods.acm import modules as M
    from bench.models.transformer import Encoder, EncoderConfig
    from bench.errors import UserError

    script = load_script("acm_arrangement")
    model = Encoder(EncoderConfig(d_model=16, n_layers=1, n_heads=2, d_mlp=32), torch.nn.Identity(),
                    torch.nn.Identity())
    M.acmize(model, M.ACMSettings(n_learners=4))
    decisions = script.equal_decisions(model, 0.75, batch=2, tokens=5)
    assert len(decisions) == 5 and all(d.shape == (2, 5) and bool((d == 3).all()) for d in decisions)
    with pytest.raises(UserError, match="fraction=0.3 is not a whole number of learners"):
        script.equal_decisions(model, 0.3, batch=2, tokens=5)


def test_a_bad_key_is_one_line(capsys):
    assert load_script("acm_arrangement").main(["methd=acm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("acm_arrangement: ") and err.count("\n") == 1 and "methd" in err
