"""Report files: every (task, dataset) has its own stable file names, nothing is written twice, and two
runs of `bench report` on the same rows give byte-identical files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench import registry, results
from bench.report import build as report
from bench.errors import UserError
from tests.test_report import _row

PARITY_DEFAULT = registry.task_spec("parity").default_dataset
PARITY_SMALL = "parity-vector n=8 (synthetic, Graves vector, test 64)"


def _parity_rows(results_dir: Path, dataset: str, n: int, error: float, tag: str,
                 timestamp: str = "2024-01-02T00:00:00+00:00") -> None:
    """A dense row and an ACT row of one parity dataset, with per-sample tables (difficulty 1..n)."""
    rng = np.random.default_rng(len(tag))
    for method, kind, knob, frac in (("dense", "static", "w1-d1", 1.0), ("act", "train", "0.001", 2.5)):
        row = dataclasses.replace(_row(method, kind, knob, frac, 1 - error, timestamp=timestamp),
                                  task="parity", dataset=dataset, run_id=f"{tag}-{method}")
        difficulty = np.arange(64) % n + 1
        samples = pd.DataFrame({"target": difficulty % 2, "prediction": difficulty % 2,
                                "score": (rng.random(64) > error).astype(float), "macs": frac * 1e6,
                                "difficulty": difficulty})
        if method == "act":
            samples["ponder_steps"] = 1 + difficulty / n
        results.append(results_dir, row, row.run_id, samples)


def test_parity_default_dataset_matches_the_default_config():
    """The name the report keeps plain is exactly what the default parity task reports as its dataset."""
    from bench import config, runner

    cfg = config.compose(["method=dense", "task=parity"])
    _, task, _ = runner.build(cfg, "dense", "parity")
    assert task.dataset == PARITY_DEFAULT


def test_each_dataset_has_its_own_stable_files(tmp_path):
    res, out = tmp_path / "results", tmp_path / "reports"
    _parity_rows(res, PARITY_DEFAULT, 32, 0.1, "big", timestamp="2024-03-01T00:00:00+00:00")
    written = report.main(str(res), str(out))
    alone = {p: Path(p).read_bytes() for p in written if "leaderboard" not in p and "status" not in p}
    assert {Path(p).name for p in alone} >= {"parity_pareto.png", "parity_difficulty.png", "parity_difficulty.csv"}

    # a second dataset of the same task, with EARLIER rows: the default dataset keeps its names and bytes
    _parity_rows(res, PARITY_SMALL, 8, 0.3, "small", timestamp="2024-01-01T00:00:00+00:00")
    both = report.main(str(res), str(out))
    assert len(both) == len(set(both)), "a file was written twice"
    for path, data in alone.items():
        assert Path(path).read_bytes() == data, f"{path} changed when another dataset got rows"
    small = "parity_parity-vector_n=8_synthetic_Graves_vector_test_64"
    names = {Path(p).name for p in both}
    assert {f"{small}_pareto.png", f"{small}_difficulty.png", f"{small}_difficulty.csv"} <= names
    big_table = pd.read_csv(out / "parity_difficulty.csv")
    small_table = pd.read_csv(out / f"{small}_difficulty.csv")
    assert big_table["difficulty"].max() == 32 and small_table["difficulty"].max() == 8
    md = (out / "leaderboard.md").read_text()
    assert "![parity_pareto.png](parity_pareto.png)" in md and f"![{small}_pareto.png]({small}_pareto.png)" in md


def test_task_without_default_dataset_keeps_its_first_dataset_plain(tmp_path):
    res, out = tmp_path / "results", tmp_path / "reports"
    results.append(res, _row("dense", "static", 1.0, 1.0, 0.9, timestamp="2024-01-01T00:00:00+00:00"), "a")
    later = dataclasses.replace(_row("dense", "static", 1.0, 1.0, 0.8, timestamp="2024-02-01T00:00:00+00:00"),
                                dataset="toy-other")
    results.append(res, later, "b")
    names = {Path(p).name for p in report.main(str(res), str(out))}
    assert {"toy_pareto.png", "toy_toy-other_pareto.png"} <= names


def test_clashing_stems_are_an_error(tmp_path):
    res = tmp_path / "results"
    for i, (dataset, when) in enumerate([("first", "2024-01-01"), ("x (1)", "2024-02-01"), ("x_1", "2024-03-01")]):
        row = dataclasses.replace(_row("dense", "static", 1.0, 1.0, 0.9, timestamp=f"{when}T00:00:00+00:00"),
                                  dataset=dataset)
        results.append(res, row, f"r{i}")
    with pytest.raises(UserError, match="map to the same file names"):
        report.view_stems(report.task_views(results.load(res)))


def test_report_twice_gives_byte_identical_files(tmp_path):
    res = tmp_path / "results"
    _parity_rows(res, PARITY_DEFAULT, 32, 0.1, "big")
    _parity_rows(res, PARITY_SMALL, 8, 0.3, "small")
    first = report.main(str(res), str(tmp_path / "one"))
    second = report.main(str(res), str(tmp_path / "two"))
    assert [Path(p).name for p in first] == [Path(p).name for p in second]
    for a, b in zip(first, second):
        assert Path(a).read_bytes() == Path(b).read_bytes(), Path(a).name


def test_parity_equal_cost_table_interpolates_the_static_recurrences():
    from tasks.parity.figures import equal_cost_table

    def row(method, knob, cost, quality, seed=0):
        return {"method": method, "knob_name": "tau" if method == "act" else "size", "knob_value": knob,
                "cost_pct_dense": cost, "quality": quality, "seed": seed}

    rows = pd.DataFrame([row("dense", "w1-d1", 100.0, 0.5), row("dense", "w1-d2", 200.0, 0.7),
                         row("dense", "w1-d4", 400.0, 0.9), row("dense", "w2-d1", 400.0, 0.99),  # wider: not a step count
                         row("act", "0.001", 300.0, 0.85, 0), row("act", "0.001", 300.0, 0.87, 1),
                         row("act", "0.1", 90.0, 0.5)])
    table = equal_cost_table(rows).set_index("knob_value")
    assert table.loc["0.001", "accuracy"] == pytest.approx(0.86)
    assert table.loc["0.001", "static_at_cost"] == pytest.approx(0.8)  # halfway between 2 and 4 steps
    assert table.loc["0.001", "act_minus_static"] == pytest.approx(0.06)
    assert table.loc["0.001", "seeds"] == 2
    assert np.isnan(table.loc["0.1", "static_at_cost"])  # cheaper than any static point: not extrapolated


def test_long_dataset_names_give_short_distinct_stems():
    from bench.report.build import SLUG_MAX, _slug

    a = "speech corpus " + "x" * 200 + " eval A"
    b = "speech corpus " + "x" * 200 + " eval B"
    assert len(_slug(a)) <= SLUG_MAX and len(_slug(b)) <= SLUG_MAX
    assert _slug(a) != _slug(b) and _slug(a) == _slug(a)
    assert _slug("parity-vector n=16") == "parity-vector_n=16"
