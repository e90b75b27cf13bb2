"""The AdaTape and CCT figures draw from rows written by real (tiny) runs of the runner."""

from __future__ import annotations

import pandas as pd

from bench import results, runner
from methods.adatape import figures as adatape_figures
from methods.cct import figures as cct_figures
from tests.helpers import compose_tiny


def test_adatape_difficulty_figure_from_rows(tmp_path):
    for method in ("adatape", "dense"):
        cfg = compose_tiny(method, "parity", tmp_path, "parity.variant=sequence", "timing=false")
        runner.run(cfg, method, "parity", "test")
    rows = results.load(tmp_path / "results")
    paths = adatape_figures.draw(rows, tmp_path / "results", tmp_path / "reports", "stem")
    assert [p.name for p in paths] == ["stem_adatape_difficulty.png", "stem_adatape_difficulty.csv"]
    table = pd.read_csv(paths[1])
    assert set(table["method"]) == {"adatape", "dense"}
    uncapped = table[table["model"] == "adatape T4-tau2"]
    assert uncapped["tape_len"].between(1, 4).all() and table["error"].between(0, 1).all()


def test_cct_gate_usage_figure_from_rows(tmp_path):
    cfg = compose_tiny("cct", "imagenet", tmp_path, "timing=false", "cct.budgets=[1.0,0.5]")
    runner.run(cfg, "cct", "imagenet", "test")
    paths = cct_figures.draw(results.load(tmp_path / "results"), tmp_path / "results", tmp_path / "reports", "s")
    table = pd.read_csv(paths[1])
    assert sorted(table["budget"].unique()) == [0.5, 1.0]
    assert set(table["unit"]) == {"kv", "att", "ffn0", "ffn1", "ffn2", "ffn3"}
    assert table["usage"].between(0, 1).all() and paths[0].exists()


def test_cct_gate_usage_keeps_models_of_other_recipes_apart(tmp_path):
    """Rows of a matched and a paper-recipe CCT are two models: one row of heatmaps each, never pooled."""
    for recipe in ("matched", "paper"):
        cfg = compose_tiny("cct", "imagenet", tmp_path, "timing=false", "cct.budgets=[1.0,0.5]", f"recipe={recipe}")
        runner.run(cfg, "cct", "imagenet", "test")
    rows = results.load(tmp_path / "results")
    paths = cct_figures.draw(rows, tmp_path / "results", tmp_path / "reports", "s")
    table = pd.read_csv(paths[1])
    assert sorted(s.rsplit("[", 1)[1] for s in table["setting"].unique()) == ["recipe=matched]", "recipe=paper]"]
    assert (table["seeds"] == 1).all() and len(table) == 2 * 2 * 6 * table["layer"].nunique()
    for setting, part in table.groupby("setting"):  # each setting's cost is its own rows' (not a mean over both)
        recipe = setting.rsplit("recipe=", 1)[1].rstrip("]")
        own = rows[(rows["method"] == "cct") & (rows["recipe"] == recipe)]
        assert sorted(part["cost_pct_dense"].round(6).unique()) == sorted(own["cost_pct_dense"].round(6).unique())


def test_cct_gate_usage_figure_on_translation_rows(tmp_path):
    cfg = compose_tiny("cct", "iwslt", tmp_path, "timing=false", "cct.budgets=[1.0,0.5]", "cct.pairs=cross")
    runner.run(cfg, "cct", "iwslt", "test")
    paths = cct_figures.draw(results.load(tmp_path / "results"), tmp_path / "results", tmp_path / "reports", "s")
    table = pd.read_csv(paths[1])
    assert sorted(table["budget"].unique()) == ["e0.5-d0.5", "e0.5-d1", "e1-d0.5", "e1-d1"]
    assert set(table[table["layer"].str.startswith("enc")]["unit"]) == {"kv", "att", "ffn0", "ffn1", "ffn2", "ffn3"}
    assert set(table[table["layer"].str.startswith("dec")]["unit"]) == {"kv", "att", "xkv", "xatt", "ffn0", "ffn1",
                                                                         "ffn2", "ffn3"}
    assert table["usage"].between(0, 1).all() and set(table["metric"]) == {"bleu"} and paths[0].exists()
