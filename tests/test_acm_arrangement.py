"""scripts/acm_arrangement.py: ACM's drawn learner counts against the same mean with every token at k = f·N."""

from __future__ import annotations

import pytest
import torch

from helpers import load_script


def _table(out: str) -> dict[str, list[str]]:
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in
            (line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and "point" not in line)}


def test_drawn_and_equal_points_are_timed_against_dense(capsys):
    script = load_script("acm_arrangement")
    assert script.main(["arch=tiny", "batch=2", "fraction=0.5,1", "min_run_s=0.01", "max_load=1000", "rounds=2",
                        "narrow=true"]) == 0  # narrow dense points are built but not timed
    rows = _table(capsys.readouterr().out)
    assert set(rows) == {"drawn k, f=0.5", "equal k, f=0.5", "drawn k, f=1", "equal k, f=1"}
    # at f = 1 the draw is k = N everywhere: both points execute the same MACs
    assert float(rows["equal k, f=1"][0]) == pytest.approx(float(rows["drawn k, f=1"][0]), abs=1e-3)
    for cells in rows.values():
        efficiency = float(cells[2])
        low, high = (float(v) for v in cells[3].strip("[]").split(","))
        assert 0 < low <= efficiency <= high


def test_the_equal_point_runs_f_times_n_learners_on_every_token():
    from bench import speed
    from methods.acm import modules as M

    script = load_script("acm_arrangement")
    keys = ["method=acm", "arch=tiny", "batch=2", "fraction=0.5", "narrow=false"]
    points, base, _ = speed.prepare(speed.parse(keys), keys, log=lambda line: None)
    drawn = points[1]
    _, model, _ = drawn.forced
    with torch.inference_mode():
        drawn.fn()
        assert any(bool((layer.last_k != 2).any()) for layer in M.acm_layers(model))  # the draw is ragged
        equal, macs = script.equal_point(drawn, 2, int(base["tokens"]))
        equal()
    layers = M.acm_layers(model)
    assert all(layer.last_k.shape == (2, base["tokens"]) and bool((layer.last_k == 2).all()) for layer in layers)
    assert macs == pytest.approx(float(M.sample_macs(model).mean()))


def test_a_fraction_that_is_not_a_whole_number_of_learners_is_one_line(capsys):
    assert load_script("acm_arrangement").main(["arch=tiny", "fraction=0.3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("acm_arrangement: fraction=0.3 is not a whole number of learners") and err.count("\n") == 1


def test_a_bad_key_is_one_line(capsys):
    assert load_script("acm_arrangement").main(["methd=acm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("acm_arrangement: ") and err.count("\n") == 1 and "methd" in err
