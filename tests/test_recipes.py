"""Each method's paper recipe as a declared part of the protocol: ``recipe=paper`` allocates the paper's start,
budget (as its fraction of the base's training) and stage split; ``recipe=matched`` (the default) is the core's
equal budget; rows record their recipe and training compute, and old rows read as matched."""

from __future__ import annotations

import pandas as pd
import pytest

from bench import protocol, registry, results, runner
from bench.errors import UserError
from bench.recipes import Recipe
from tests.helpers import compose_tiny, matrix_cases


def _plan(tmp_path, method, task, *extra):
    cfg = compose_tiny(method, task, tmp_path, *extra)
    _, task_impl, method_impl = runner.build(cfg, method, task)
    return task_impl, method_impl, protocol.plan(method_impl)


def test_acm_paper_recipe_is_a_third_of_the_base_split_2_1_97(tmp_path):
    task, _, matched = _plan(tmp_path, "acm", "imagenet", "imagenet.train_steps=300")
    _, _, paper = _plan(tmp_path, "acm", "imagenet", "imagenet.train_steps=300", "recipe=paper")
    base_steps = int(task.base_budget()["steps"])
    assert sum(p.steps for p in matched.stages) == task.method_budget()
    steps = [p.steps for p in paper.stages]
    assert sum(steps) == round(base_steps / 3) and paper.starts_from == "base"
    assert steps == protocol.allocate([p.stage for p in paper.stages], round(base_steps / 3))
    assert [p.stage.share for p in paper.stages] == [2, 1, 97]
    assert paper.stages[-1].key != matched.stages[-1].key  # another training, another cache entry


def test_acm_speech_recipe_splits_5_1_4(tmp_path):
    _, _, paper = _plan(tmp_path, "acm", "commonvoice", "recipe=paper")
    assert [p.stage.share for p in paper.stages] == [5, 1, 4]


def test_a_paper_recipe_from_scratch_converts_an_untrained_dense_model(tmp_path):
    """CCT fine-tunes the base under the matched recipe; its paper trains it from scratch."""
    task, method, paper = _plan(tmp_path, "cct", "iwslt", "recipe=paper")
    assert paper.starts_from == "scratch" and paper.parent_key.get("from") == "scratch"
    assert sum(p.steps for p in paper.stages) == int(task.base_budget()["steps"]) and paper.stages[0].offset == 0
    model = protocol.train(method)
    assert not list((tmp_path / "cache" / "iwslt" / "dense").glob("*.pt"))  # no dense base was trained or loaded
    assert model is not None


def test_every_method_declares_a_paper_recipe_on_the_tasks_it_runs(tmp_path):
    for name, task, variant in matrix_cases():
        cfg = compose_tiny(name, task, tmp_path, *variant)
        capabilities = registry.task_spec(task).backbones(cfg[task])
        recipe = registry.method_spec(name).paper_recipe(capabilities, 1000)
        assert isinstance(recipe, Recipe) and recipe.budget > 0 and recipe.source, (name, task)


def test_a_method_without_a_paper_recipe_is_refused_in_one_line(tmp_path, monkeypatch):
    import dataclasses

    _, method, _ = _plan(tmp_path, "avit", "imagenet", "recipe=paper")
    spec = registry.method_spec("avit")
    monkeypatch.setitem(registry._METHODS, "avit", dataclasses.replace(spec, paper_recipe=lambda caps, steps: None))
    with pytest.raises(UserError, match="recipe=paper: method avit declares no paper recipe"):
        protocol.plan(method)


def test_rows_record_their_recipe_and_training_compute_and_old_rows_read_as_matched(tmp_path):
    cfg = compose_tiny("act", "parity", tmp_path, "timing=false", "recipe=paper")
    row = pd.read_csv(runner.run(cfg, "act", "parity", "test")[0]).iloc[0]
    steps, batch = int(cfg.parity.train_steps), int(cfg.parity.batch_size)
    assert row["recipe"] == "paper" and row["train_samples"] == steps * batch and row["base_train_samples"] == 0
    matched = compose_tiny("act", "parity", tmp_path, "timing=false")
    assert results.identity_hash(dict(matched), "act", "parity") == results.identity_hash(
        {k: v for k, v in dict(matched).items() if k != "recipe"}, "act", "parity")  # a row before the key


def test_bench_ls_lists_each_methods_recipes(capsys):
    from bench import cli

    assert cli.cmd_ls([]) == 0
    out = capsys.readouterr().out
    assert "recipes on imagenet: matched = the core's equal budget; paper = from the dense base, 0.333 x" in out
    assert "split distill 2, gates 1, e2e 97" in out and "paper = from scratch, 1.25 x the base's steps" in out


def test_dat_paper_recipe_trains_the_aligned_model_as_the_baseline_and_clips_at_3(tmp_path):
    """recipe=paper: DAT's aligned model starts from scratch at the base's learning rate and whole warm-up, and
    both stages renormalise gradients above 3 (§4.1); matched fine-tunes at dat.lr with the task's policy."""
    task, method, paper = _plan(tmp_path, "dat", "iwslt", "recipe=paper")
    aligned, exit_stage = (p.stage for p in paper.stages)
    base = protocol.base_policy(task)
    assert aligned.lr == float(task.base_budget()["lr"]) and aligned.policy.warmup_cap is None
    assert aligned.policy.warmup == base.warmup
    assert aligned.policy.grad_clip == exit_stage.policy.grad_clip == 3.0
    assert exit_stage.lr == float(method.cfg.lr)
    _, matched_method, matched = _plan(tmp_path, "dat", "iwslt")
    for planned in matched.stages:
        assert planned.stage.lr == float(matched_method.cfg.lr)
        assert planned.stage.policy == protocol.short_stage_policy(task)
