"""Row identity: keys that cannot change a result stay out of the config hash, a point
already written under an older hash is found again, re-running a point with identical numbers writes no
second file, and the report never collapses rows of different budgets or configs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bench import results, runner
from bench.report import build as report
from bench.run import stable_hash
from tests.helpers import compose_tiny
from tests.test_report import _row


def _row_files(path):
    return sorted(p.name for p in path.glob("*.csv"))


def test_results_hash_is_the_runs_hash():
    value = {"seed": 1, "parity": {"n": 8, "lr": 1e-3}, "plugins": []}
    assert results.stable_hash(value) == stable_hash(value)


def test_non_result_keys_leave_the_identity_alone(tmp_path):
    cfg = compose_tiny("dense", "parity", tmp_path, "timing=false")
    other = compose_tiny("dense", "parity", tmp_path, "timing=false", "timing_rounds=7", "allow_cost_mismatch=true")
    assert runner.config_hash(cfg, "dense", "parity") == runner.config_hash(other, "dense", "parity")
    changed = compose_tiny("dense", "parity", tmp_path, "timing=false", "parity.train_steps=3")
    assert runner.config_hash(changed, "dense", "parity") != runner.config_hash(cfg, "dense", "parity")


def test_a_task_key_added_later_at_its_default_keeps_the_identity(tmp_path):
    """A row written before ``iwslt.streaming`` existed is the same point as a new config that holds it at
    false (the earlier behaviour); true is another point, and so is any other task key."""
    from bench.run import plain

    config = plain(compose_tiny("dense", "iwslt", tmp_path, "timing=false"))
    assert config["iwslt"]["streaming"] is False
    older = {**config, "iwslt": {k: v for k, v in config["iwslt"].items() if k != "streaming"}}
    assert results.identity_hash(older, "dense", "iwslt") == results.identity_hash(config, "dense", "iwslt")
    streamed = {**config, "iwslt": {**config["iwslt"], "streaming": True}}
    assert results.identity_hash(streamed, "dense", "iwslt") != results.identity_hash(config, "dense", "iwslt")
    other = {**older, "iwslt": {**older["iwslt"], "dropout": 0.3}}
    assert results.identity_hash(other, "dense", "iwslt") != results.identity_hash(older, "dense", "iwslt")


def test_rerun_with_identical_numbers_adds_no_row(tmp_path):
    rows_dir = tmp_path / "results" / "parity" / "dense"
    runner.run(compose_tiny("dense", "parity", tmp_path, "timing=false"), "dense", "parity", "test")
    first = _row_files(rows_dir)
    assert len(first) == 1
    # an old row written when timing_rounds was part of the hash: renamed to another hash, config kept
    old_id = first[0][:-len(".csv")]
    fake = "0" * 12 + old_id[12:]
    for suffix in (".csv", ".samples.csv.gz", ".config.yaml"):
        (rows_dir / f"{old_id}{suffix}").rename(rows_dir / f"{fake}{suffix}")
    assert runner.run(compose_tiny("dense", "parity", tmp_path, "timing=false", "timing_rounds=9"),
                      "dense", "parity", "test") == []  # found by identity: skipped before any work
    # force=true re-evaluates the same cached model: same quality, cost and samples -> no second file
    assert runner.run(compose_tiny("dense", "parity", tmp_path, "timing=false", "force=true"),
                      "dense", "parity", "test") == []
    assert _row_files(rows_dir) == [f"{fake}.csv"]
    # a different point (another training budget) is written
    assert len(runner.run(compose_tiny("dense", "parity", tmp_path, "timing=false", "parity.train_steps=3"),
                          "dense", "parity", "test")) == 1


def test_a_row_of_an_older_protocol_does_not_count_as_the_point(tmp_path):
    """A point whose config is unchanged but whose row was made under an older training protocol runs
    again, and its new row replaces the old one (git history keeps it)."""
    import pandas as pd

    rows_dir = tmp_path / "results" / "parity" / "dense"
    cfg = compose_tiny("dense", "parity", tmp_path, "timing=false")
    runner.run(cfg, "dense", "parity", "test")
    [name] = _row_files(rows_dir)
    row = pd.read_csv(rows_dir / name)
    assert results.row_protocol(rows_dir / name) == results.PROTOCOL_VERSION
    row.drop(columns=["protocol"]).to_csv(rows_dir / name, index=False)  # as rows before the column existed
    assert results.row_protocol(rows_dir / name) == 1
    written = runner.run(cfg, "dense", "parity", "test")  # the same numbers: only the protocol differs
    assert [Path(p).name for p in written] == [name] and _row_files(rows_dir) == [name]
    assert results.row_protocol(rows_dir / name) == results.PROTOCOL_VERSION
    assert runner.run(cfg, "dense", "parity", "test") == []  # now it has its row
    assert [results.protocol_version(v) for v in (None, float("nan"), "", 1, 2.0, "2")] == [1, 1, 1, 1, 2, 2]


def test_a_row_made_by_other_behaviour_versions_does_not_count_as_the_point(tmp_path):
    """A method or task version bump makes its existing rows stale: the same command runs the point again
    (the bump retrains the stages it keys).  Rows from before explicit versions (a source hash in
    code_version) still count."""
    import pandas as pd

    from bench import versions

    rows_dir = tmp_path / "results" / "parity" / "dense"
    cfg = compose_tiny("dense", "parity", tmp_path, "timing=false")
    runner.run(cfg, "dense", "parity", "test")
    [name] = _row_files(rows_dir)
    row = pd.read_csv(rows_dir / name, dtype={"code_version": str})
    current = row["code_version"].iloc[0]
    assert current.startswith("skeleton") and results.row_code_version(rows_dir / name) == current
    assert runner.run(cfg, "dense", "parity", "test") == []  # made by today's versions: the point exists
    for stored, counts in ((current.replace("dense1", "dense0"), False), ("0a1b2c3d4e5f", True), ("", True)):
        row.assign(code_version=stored).to_csv(rows_dir / name, index=False)
        pending = runner.pending_values(cfg, runner.build(cfg, "dense", "parity", "test")[2], "dense", "parity")
        assert (pending == []) is counts, stored
    assert not results.made_by_other_versions(versions.tag(versions.core()), versions.tag(versions.core()))


def test_report_keeps_rows_of_different_budgets_apart(tmp_path):
    a = dataclasses.replace(_row("acm", "train", 0.1, 0.5, 0.80), train_budget="100 steps")
    b = dataclasses.replace(_row("acm", "train", 0.1, 0.5, 0.85, timestamp="2024-03-01T00:00:00+00:00"),
                            train_budget="200 steps")
    rerun = dataclasses.replace(b, timestamp="2024-04-01T00:00:00+00:00", git_sha="feedface")
    for i, row in enumerate((a, b, rerun)):
        results.append(tmp_path, row, f"r{i}")
    kept = report.latest_rows(results.load(tmp_path))
    assert sorted(kept["train_budget"]) == ["100 steps", "200 steps"]  # never collapsed to the latest
    assert kept.attrs["dedup"] == {"read": 3, "duplicates": 0, "superseded": 1}  # the re-run replaced b


def test_rows_that_differ_in_config_get_their_own_curve(tmp_path):
    """CCT's two budget sets are separate runs (cct.pairs=diagonal / decoder) with one knob value in common:
    the report keeps both rows and labels the curves by the config key that tells them apart."""
    for i, pairs in enumerate(("diagonal", "decoder")):
        row = dataclasses.replace(_row("cct", "eval", "e1-d1", 1.0, 0.8 + i / 100), config_hash=f"h{i}")
        path = results.append(tmp_path, row, f"c{i}",
                              config_yaml=f"seed: 0\ntiming_rounds: {i + 1}\ncct:\n  pairs: {pairs}\n")
        assert path.exists()
    (view,) = report.task_views(results.load(tmp_path))
    assert sorted(view.rows["curve"]) == ["cct [pairs=decoder]", "cct [pairs=diagonal]"]


def test_the_readme_main_command_joins_the_committed_acm_curve_at_any_thread_count():
    """threads changes neither the trained model nor its quality: the README's main command (threads=1 by
    default) has the identity of the committed ACM row made with threads=2."""
    from pathlib import Path

    from bench import config, results, runner

    root = Path(__file__).resolve().parents[1]
    hashes = {runner.config_hash(config.compose(["method=acm", "task=imagenet", f"threads={t}"]), "acm", "imagenet")
              for t in (1, 2, 8)}
    assert len(hashes) == 1
    committed = [p for p in sorted((root / "results" / "imagenet" / "acm").glob("*-beta_target0.6-s0.csv"))
                 if results.stored_identity(p, "acm", "imagenet", "") in hashes]
    assert committed, "no committed row of the README's main command's point"
    assert "threads: 2" in committed[0].with_name(committed[0].name[:-4] + ".config.yaml").read_text()
