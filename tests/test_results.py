"""Result rows: schema round-trip, atomic writes under two concurrent writers, nothing half-written."""

import multiprocessing as mp
from pathlib import Path

import pandas as pd
import pytest
from helpers import blank_row

from bench import results


def make_row(i: int, method: str = "dense") -> results.ResultRow:
    return blank_row(method=method, task="parity", knob_value=str(i), quality=i / 100, seed=0, macs_mean=float(i))


def _writer(args):
    root, writer, count = args
    for i in range(count):
        results.append(root, make_row(i, method=f"m{writer % 2}"), f"w{writer}-{i}",
                       samples=pd.DataFrame({"macs": [float(i)] * 50, "score": [1.0] * 50}))


def test_roundtrip(tmp_path):
    path = results.append(tmp_path, make_row(3), "row3", samples=pd.DataFrame({"macs": [1.0, 2.0]}))
    assert path.exists() and path.with_name("row3.samples.csv.gz").exists()
    frame = results.load(tmp_path)
    assert list(frame.columns) == results.COLUMNS + ["row_file"]  # row_file: where each row was read from
    assert frame.loc[0, "knob_value"] == "3" and frame.loc[0, "quality"] == pytest.approx(0.03)
    assert list(results.load_samples(tmp_path, "parity", "dense", "row3")["macs"]) == [1.0, 2.0]


def test_two_concurrent_writers_lose_nothing(tmp_path):
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        pool.map(_writer, [(tmp_path, 0, 40), (tmp_path, 1, 40)])
    frame = results.load(tmp_path)
    assert len(frame) == 80
    assert not list(Path(tmp_path).rglob("*.tmp")), "temporary files left behind"


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", boom)
    with pytest.raises(KeyboardInterrupt):
        results.append(tmp_path, make_row(1), "row1")
    assert not [p for p in Path(tmp_path).rglob("*") if p.is_file()]


def test_load_empty_has_schema(tmp_path):
    assert list(results.load(tmp_path).columns) == results.COLUMNS + ["row_file"]
