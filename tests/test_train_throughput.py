"""scripts/train_throughput.py: a stage's rate comes from two trainings of the plan (N1 and N2 steps per
stage), rows record the load and the tree, and the page is drawn from the rows."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.helpers import load_script


def test_rates_per_stage_rows_and_page(tmp_path):
    tp = load_script("train_throughput")
    results_dir, reports_dir = tmp_path / "results", tmp_path / "reports"
    assert tp.main(["--task", "parity", "--methods", "dense,act", "--threads", "1", "--steps", "5,15",
                    "--precision", "fp32,bf16", "--results-dir", str(results_dir),
                    "--reports-dir", str(reports_dir)]) == 0
    rows = pd.concat([pd.read_csv(f) for f in sorted((results_dir / "throughput").glob("*.csv"))])
    assert set(rows["stage"]) == {"dense:base", "act:tau0.001"}  # ACT trains from scratch: no base stage of its own
    assert sorted(rows.groupby("stage")["precision"].apply(sorted).iloc[0]) == ["bf16", "fp32"]
    assert (rows["steps_timed"] == 10).all() and (rows["steps_per_s"] > 0).all()
    assert list(rows["samples_per_s"]) == pytest.approx(list(rows["steps_per_s"] * rows["batch"]), rel=1e-3)
    assert rows["cpus"].gt(0).all() and rows["load_before"].notna().all() and rows["git_sha"].notna().all()
    page = (reports_dir / "throughput.md").read_text()
    assert (rows["dataset"].str.startswith("parity-vector n=32")).all()  # the data each stage trained on
    for precision in ("fp32", "bf16"):
        assert f"| parity (parity-vector n=32) | act:tau0.001 | 1 | {precision} | 128 |" in page
    assert "quiet (" in page or "loaded (" in page
