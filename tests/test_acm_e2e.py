"""End-to-end ACM timing (``python -m methods.acm.e2e``) on a tiny ViT on CPU: rows, the counter against
the decision log, the failure on a disagreement, bad input, and the report's e2e sections."""

from pathlib import Path

import pandas as pd
import pytest
import torch

from bench import report_e2e
from methods.acm import e2e
from methods.acm import modules as M

ARGS = ["--device", "cpu", "--arch", "tiny", "--batch", "1", "2", "--fractions", "0.5", "1", "--rounds", "1",
        "--min-run-s", "0.01"]


@pytest.fixture(scope="module")
def e2e_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e")
    assert e2e.main(ARGS + ["--results-dir", str(out)]) == 0
    return out


def test_rows(e2e_rows):
    files = list((e2e_rows / "e2e").glob("*.csv"))
    assert len(files) == 1
    rows = pd.read_csv(files[0])
    assert list(rows.columns) == e2e.COLUMNS
    assert (rows["status"] == "ok").all() and len(rows) == 2 * 3  # per batch: dense + 2 fractions
    assert (rows.loc[rows["variant"] == "dense", "rel_to_dense"] == 1.0).all()
    assert (rows["median_ms"] > 0).all()
    assert rows["throughput_per_s"].to_numpy() == pytest.approx((rows["batch"] / rows["median_ms"] * 1e3).to_numpy())
    acm = rows[rows["variant"] == "acm"]
    counted = acm[acm["batch"] == 1]
    assert counted["macs_counted_per_sample"].to_numpy() == pytest.approx(counted["macs_per_sample"].to_numpy(),
                                                                           rel=1e-9)
    assert acm.loc[acm["batch"] == 2, "macs_counted_per_sample"].isna().all()
    full = acm[acm["fraction"] == 1.0]
    assert (full["executed_fraction"] == 1.0).all()
    assert (full["macs_per_sample"] > full["macs_dense_per_sample"]).all()  # all learners + the gates
    half = acm[acm["fraction"] == 0.5]
    assert (half["macs_per_sample"] < 0.75 * half["macs_dense_per_sample"]).all()
    assert half["executed_fraction"].between(0.35, 0.65).all()


def test_report_sections(e2e_rows, tmp_path):
    written = report_e2e.write(e2e_rows, tmp_path / "reports")
    assert sorted(Path(p).name for p in written) == ["e2e.md", "e2e_latency.png"]
    text = (tmp_path / "reports" / "e2e.md").read_text()
    assert "No GPU rows" in text and "## CPU" in text and "| 2 | eager | acm | 0.50 |" in text
    # the same rows labelled as a CUDA run make a GPU section (the renderer reads rows only)
    rows = report_e2e.load_e2e_rows(e2e_rows)
    rows["device"], rows["device_name"], rows["run_id"] = "cuda", "cuda: test label", "gpu-run"
    (tmp_path / "gpu" / "e2e").mkdir(parents=True)
    rows.to_csv(tmp_path / "gpu" / "e2e" / "gpu-run.csv", index=False)
    report_e2e.write(tmp_path / "gpu", tmp_path / "gpu_reports")
    text = (tmp_path / "gpu_reports" / "e2e.md").read_text()
    assert "## GPU (cuda: test label)" in text and "No GPU rows" not in text
    assert report_e2e.write(tmp_path / "nothing", tmp_path / "none") == []


def test_counter_disagreement_fails_and_writes_nothing(tmp_path, monkeypatch, capsys):
    real = M.sample_macs
    monkeypatch.setattr(M, "sample_macs", lambda model: real(model) * 1.05)
    assert e2e.main(ARGS + ["--results-dir", str(tmp_path)]) == 1
    assert "disagree by >1%" in capsys.readouterr().out
    assert not (tmp_path / "e2e").exists()


@pytest.mark.parametrize("bad", [["--fractions", "1.5"], ["--batch", "0"]])
def test_bad_input(tmp_path, capsys, bad):
    assert e2e.main(["--device", "cpu", "--arch", "tiny", *bad, "--results-dir", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: ") and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "e2e").exists()


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.9])
def test_draw_k_means(fraction):
    g = torch.Generator().manual_seed(0)
    mlp = e2e.draw_k((50, 40), 4, fraction, 0, g)
    proj = e2e.draw_k((50, 40), 4, fraction, 1, g)
    assert mlp.shape == proj.shape == (50, 40)
    assert int(proj.min()) >= 1 and int(proj.max()) <= 4 and int(mlp.min()) >= 0
    assert abs(mlp.double().mean().item() / 4 - fraction) < 0.02
    assert abs(proj.double().mean().item() / 4 - fraction) < 0.02
