"""Shipped trained bases (bench/artifacts.py, scripts/export_base.py): a fresh cache starts from them, a
corrupted one is refused in one line, ``shipped=false`` trains, and every committed artefact still names the
key a run computes today."""

import json
from pathlib import Path

import pytest
import torch

from bench import artifacts, config, runner
from bench.errors import UserError
from bench.run import stable_hash
from tests.helpers import load_script, tiny_overrides

EXPORT = load_script("export_base")


def _args(tmp_path: Path, cache: str, *extra: str) -> list[str]:
    """The tiny parity config's overrides with its cache in ``tmp_path/cache`` (method=dense left out)."""
    tiny = [o for o in tiny_overrides("dense", "parity", tmp_path, *extra) if not o.startswith(("method=", "cache_dir="))]
    return [*tiny, f"cache_dir={tmp_path / cache}"]


def _base(tmp_path: Path, cache: str, *extra: str):
    cfg = config.compose(["method=dense", *_args(tmp_path, cache, *extra)])
    run, task, _ = runner.build(cfg, "dense", "parity")
    return run, task


def _no_training(monkeypatch):
    import bench.train

    def refuse(*args, **kwargs):
        raise AssertionError("the stage trained although a shipped artefact exists")

    monkeypatch.setattr(bench.train, "step_loader", refuse)


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A tiny parity base trained in cache ``a`` and exported to ``tmp_path/artifacts``."""
    run, task = _base(tmp_path, "a")
    trained = run.base_model(task).state_dict()
    root = tmp_path / "artifacts"
    path = EXPORT.export(_args(tmp_path, "a"), source=None, command="", git_sha="abc1234",
                         root=root)
    monkeypatch.setattr(artifacts, "ROOT", root)
    return path, trained


def test_a_fresh_cache_installs_the_shipped_base_instead_of_training(tmp_path, shipped, monkeypatch):
    path, trained = shipped
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["sha256"] == artifacts.sha256(path) and meta["git_sha"] == "abc1234" and meta["steps"] == 15
    _no_training(monkeypatch)
    run, task = _base(tmp_path, "b")
    model = run.base_model(task)
    assert all((model.state_dict()[k] == v).all() for k, v in trained.items())
    assert path.stem in {p.stem for p in (tmp_path / "b" / "parity" / "dense").glob("*.pt")}


def test_shipped_false_trains(tmp_path, shipped, monkeypatch):
    _no_training(monkeypatch)
    run, task = _base(tmp_path, "c", "shipped=false")
    with pytest.raises(AssertionError, match="trained although"):
        run.base_model(task)


def test_a_corrupted_artefact_is_refused_in_one_line(tmp_path, shipped):
    path, _ = shipped
    path.write_bytes(path.read_bytes()[:-4] + b"\0\0\0\0")
    run, task = _base(tmp_path, "d")
    with pytest.raises(UserError, match="does not match its sha256") as err:
        run.base_model(task)
    assert "\n" not in str(err.value) and "shipped=false" in str(err.value)
    assert not list((tmp_path / "d").rglob("*.pt")), "nothing half-written in the cache"


def test_export_without_a_trained_base_says_what_to_do(tmp_path, capsys):
    assert EXPORT.main(["task=parity", "parity.train_steps=3", f"cache_dir={tmp_path}", "--root", str(tmp_path)]) == 2
    assert "no trained base at" in capsys.readouterr().err


SHIPPED = sorted(p for p in artifacts.ROOT.glob("*/*/*.json") if not p.name.endswith(".partial.json"))


@pytest.mark.parametrize("meta_path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_artefact_matches_todays_key(meta_path):
    """A version bump or a changed default re-keys a base: its shipped artefact must then be re-exported."""
    meta = json.loads(meta_path.read_text())
    cfg = config.compose(["method=dense", *meta["overrides"]])
    _, task_name = config.selected(cfg)
    run, task, _ = runner.build(cfg, "dense", task_name)
    key = run.base_key(task, float(cfg.dense.width), float(cfg.dense.depth))
    assert json.loads(json.dumps(key, default=str)) == meta["key"], (
        f"{meta_path.name} was trained under another key; re-train and re-export it (scripts/export_base.py)")
    assert meta_path.stem.endswith(stable_hash(key))
    assert artifacts.sha256(meta_path.with_suffix(".safetensors")) == meta["sha256"]


def test_the_plan_line_names_shipped_cached_and_untrained_stages(tmp_path, shipped):
    from bench import protocol

    def plan_of(cache: str, *extra: str) -> str:
        cfg = config.compose(["method=acm", *[a for a in _args(tmp_path, cache, *extra) if a != "method=dense"],
                              "acm.min_distill_steps=2", "acm.min_gate_steps=2"])
        _, task, method = runner.build(cfg, "acm", "parity")
        text, steps = protocol.describe_plan(method, protocol.plan(method))
        return text, steps, runner.plan_line(method, task, cfg)

    text, steps, line = plan_of("e")
    assert text.startswith("dense base 15 steps (shipped), then distill") and "(to train)" in text
    assert line.startswith("plan: dense base") and "ms per base-model step" in line and steps > 0
    text, steps, _ = plan_of("f", "shipped=false")
    assert text.startswith("dense base 15 steps (to train)") and steps > 15
    text, _, _ = plan_of("a")  # the cache the base was trained in
    assert text.startswith("dense base 15 steps (cached)")


def test_a_method_from_scratch_lists_the_base_it_is_timed_against_last(tmp_path, shipped):
    """ACT trains from scratch, but its run loads the dense base after training to time it beside the model:
    the plan line names that base last (shipped or to train); untimed, the run does not load it."""
    from bench import protocol

    def plan_of(cache: str, *extra: str) -> tuple[str, str]:
        cfg = config.compose(["method=act", *_args(tmp_path, cache, *extra)])
        _, task, method = runner.build(cfg, "act", "parity")
        assert protocol.plan(method).starts_from == "scratch"
        return protocol.describe_plan(method, protocol.plan(method), runner.loads_dense_base(task, cfg))[0], \
            runner.plan_line(method, task, cfg)

    reference = "then dense base (the reference it is timed or counted against) 15 steps"
    text, line = plan_of("e")
    assert text.endswith(f"{reference} (shipped)") and not text.startswith("dense base") and reference in line
    text, _ = plan_of("f", "shipped=false")
    assert text.endswith(f"{reference} (to train)")
    text, line = plan_of("g", "timing=false")
    assert "dense base" not in text and "dense base" not in line


def test_imagenet_seed_0_base_is_shipped():
    assert any(json.loads(p.read_text())["overrides"][:2] == ["task=imagenet", "seed=0"] for p in SHIPPED)


def _stopped_base(tmp_path: Path, cache: str, after: int):
    """The tiny parity base stopped after ``after`` steps in cache ``cache``: (its checkpoint path, the partial)."""
    from bench.checkpoints import Interrupted, partial_path, stage_of

    run, task = _base(tmp_path, cache)
    run.fit_extra = {"stop_after": after}
    with pytest.raises(Interrupted):
        run.base_model(task)
    ckpt = next((tmp_path / cache / "parity" / "dense").glob("*.partial.pt"))
    assert partial_path(stage_of(ckpt)) == ckpt  # the two names are each other's inverse
    return stage_of(ckpt), ckpt


def test_a_stage_stopped_on_one_machine_resumes_exactly_on_another_from_its_shipped_checkpoint(tmp_path, monkeypatch):
    """Trained 6 of 15 steps in cache ``a``, shipped, then finished in a fresh cache ``b``: the weights are those
    of 15 uninterrupted steps, the plan says where it resumes, and the trainer starts at step 6."""
    from bench import protocol

    root = tmp_path / "artifacts"
    monkeypatch.setattr(artifacts, "ROOT", root)
    run, task = _base(tmp_path, "straight")
    straight = run.base_model(task).state_dict()
    ckpt, partial = _stopped_base(tmp_path, "a", 6)
    shipped = artifacts.export_partial(partial, command="python -m bench run ...", git_sha="abc1234", machine="here")
    meta = json.loads(shipped.with_name(shipped.name.replace(".pt", ".json")).read_text())
    assert meta["step"] == 6 and meta["sha256"] == artifacts.sha256(shipped)
    assert shipped == artifacts.shipped_partial_path(ckpt) and shipped.parent == root / "parity" / "dense"

    run, task = _base(tmp_path, "b")
    assert protocol.stage_state(run, "dense", protocol.base_stage_name(), run.base_key(task)) == (
        "to train from step 6 of a shipped checkpoint")
    cfg = config.compose(["method=acm", *[a for a in _args(tmp_path, "b")], "acm.min_distill_steps=2",
                          "acm.min_gate_steps=2"])
    _, _, acm = runner.build(cfg, "acm", "parity")
    text, steps_left = protocol.describe_plan(acm, protocol.plan(acm))
    later = sum(p.steps for p in protocol.plan(acm).stages)  # the method's own stages, all to train
    assert text.startswith("dense base 15 steps (to train from step 6 of a shipped checkpoint)")
    assert steps_left == 15 - 6 + later
    resumed = run.base_model(task).state_dict()
    assert all(torch.equal(resumed[k], v) for k, v in straight.items())
    assert run.train_time_s > 0
    assert artifacts.drop_partial(ckpt) and artifacts.find_partial(ckpt) is None


def test_a_cache_that_can_resume_on_its_own_ignores_the_shipped_checkpoint(tmp_path, monkeypatch):
    """Cache ``c`` stopped at step 3 before step 6 shipped from cache ``a``: it resumes from its own step 3."""
    from bench import protocol

    monkeypatch.setattr(artifacts, "ROOT", tmp_path / "artifacts")
    _, own = _stopped_base(tmp_path, "c", 3)
    _, partial = _stopped_base(tmp_path, "a", 6)
    artifacts.export_partial(partial, command="", git_sha="", machine="")
    run, task = _base(tmp_path, "c")
    assert protocol.stage_state(run, "dense", protocol.base_stage_name(), run.base_key(task)) == (
        "to train from step 3 of its checkpoint in the cache")
    _stopped_base(tmp_path, "c", 1)
    assert torch.load(own, weights_only=True)["step"] == 4


def test_the_plan_does_not_fail_on_a_resumable_checkpoint_cut_short(tmp_path):
    """A resumable checkpoint that does not load reads "to train" in the plan (the trainer then says why)."""
    from bench import protocol

    _, own = _stopped_base(tmp_path, "g", 3)
    own.write_bytes(own.read_bytes()[:100])
    run, task = _base(tmp_path, "g")
    assert protocol.stage_state(run, "dense", protocol.base_stage_name(), run.base_key(task)) == "to train"


def test_a_tampered_shipped_checkpoint_is_refused_in_one_line(tmp_path, monkeypatch):
    root = tmp_path / "artifacts"
    monkeypatch.setattr(artifacts, "ROOT", root)
    ckpt, partial = _stopped_base(tmp_path, "a", 6)
    shipped = artifacts.export_partial(partial, command="", git_sha="", machine="")
    shipped.write_bytes(shipped.read_bytes()[:-8] + b"\0" * 8)
    run, task = _base(tmp_path, "d")
    with pytest.raises(UserError, match="does not match its sha256") as err:
        run.base_model(task)
    assert "\n" not in str(err.value) and "shipped=false" in str(err.value)
    assert not list((tmp_path / "d").rglob("*.pt")), "nothing half-written in the cache"


def test_a_shipped_checkpoint_must_hold_tensors_and_plain_values_only(tmp_path, monkeypatch):
    """A pickled object (here a function) in a shipped checkpoint is refused, even with a matching sha256:
    it is read with weights_only=True."""
    root = tmp_path / "artifacts"
    monkeypatch.setattr(artifacts, "ROOT", root)
    ckpt, partial = _stopped_base(tmp_path, "a", 6)
    shipped = artifacts.export_partial(partial, command="", git_sha="", machine="")
    state = torch.load(shipped, weights_only=True)
    torch.save({**state, "extra": Path}, shipped)
    meta_path = shipped.with_name(shipped.name.replace(".pt", ".json"))
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "sha256": artifacts.sha256(shipped)}))
    run, task = _base(tmp_path, "e")
    with pytest.raises(UserError, match="holds more than tensors and plain values"):
        run.base_model(task)


def test_a_finished_stage_shipped_with_an_unfinished_command_is_installed_not_trained(tmp_path, monkeypatch):
    from bench import protocol

    monkeypatch.setattr(artifacts, "ROOT", tmp_path / "artifacts")
    run, task = _base(tmp_path, "a")
    trained = run.base_model(task).state_dict()
    ckpt = run.stage_path("dense", protocol.base_stage_name(), run.base_key(task))
    shipped = artifacts.export_partial(ckpt, command="", git_sha="", machine="")
    assert json.loads(shipped.with_name(shipped.name.replace(".pt", ".json")).read_text())["finished"] is True
    _no_training(monkeypatch)
    run, task = _base(tmp_path, "b")
    assert protocol.stage_state(run, "dense", protocol.base_stage_name(), run.base_key(task)) == "shipped"
    model = run.base_model(task)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in trained.items())


def test_resuming_on_another_number_of_processes_says_it_is_not_exact(tmp_path, monkeypatch, caplog):
    import logging

    monkeypatch.setattr(artifacts, "ROOT", tmp_path / "artifacts")
    _, partial = _stopped_base(tmp_path, "a", 6)
    shipped = artifacts.export_partial(partial, command="", git_sha="", machine="")
    meta_path = shipped.with_name(shipped.name.replace(".pt", ".json"))
    assert json.loads(meta_path.read_text())["world"] == 1
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "world": 2}))
    run, task = _base(tmp_path, "b")
    with caplog.at_level(logging.WARNING, logger="bench"):
        run.base_model(task)
    assert any("ran on 2 process(es), this run has 1" in r.getMessage() for r in caplog.records)
