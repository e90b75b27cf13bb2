"""scripts/profile_train.py: the dense base's training under torch.profiler (CPU here; the device-busy
fraction needs a GPU and is not exercised by the suite)."""

from __future__ import annotations

import gzip
import json

from helpers import load_script


def test_profiles_a_tiny_training_and_writes_its_trace(tmp_path, capsys):
    profile_train = load_script("profile_train")
    tiny = ["task=parity", "parity.n=8", "parity.hidden=16", "parity.train_steps=4", "parity.batch_size=8"]
    assert profile_train.main([*tiny, "--rows", "5", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    summary = json.loads(printed[0])
    assert summary["steps"] == 4 and summary["device"] == "cpu" and 0 < summary["train_time_s"] <= \
        summary["profiled_wall_s"]
    assert "device_busy" not in summary  # no device here
    assert any("aten::" in line for line in printed[1:])
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert "aten::" in (tmp_path / "operators.txt").read_text()
    trace = json.loads(gzip.decompress((tmp_path / "trace.json.gz").read_bytes()))
    assert any(event.get("name", "").startswith("aten::") for event in trace["traceEvents"])


def test_a_bad_override_is_one_line(capsys):
    profile_train = load_script("profile_train")
    assert profile_train.main(["task=parity", "parity.hiden=16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("profile_train: ") and err.count("\n") == 1 and "parity.hiden" in err
    assert profile_train.main(["task=parity"]) == 2  # the default 20,000 steps
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "set parity.train_steps to at most 2000" in err


def test_device_time_counts_overlapping_spans_once():
    covered_us = load_script("profile_train").covered_us
    assert covered_us([]) == 0.0
    assert covered_us([(0, 10), (20, 25)]) == 15  # a gap: idle
    assert covered_us([(0, 10), (5, 12), (6, 8), (30, 31)]) == 13  # overlaps (streams) once
