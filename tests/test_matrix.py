"""Registry-parametrized tests over every method × task (× task variant) the method supports.

Everything runs the task's evaluation forward (``Task.infer``: ``model(x)``, or decoding for
translation).  For each: the mean per-sample cost from the method's decision log equals the dispatch-level counter's
executed total on the real path (within 1%), no executed op lacks a MAC formula, and predictions do
not depend on batch composition.
"""

import pytest
import torch

from bench.api import Batch

from bench import cost
from tests.helpers import build_tiny, matrix_cases

CASES = matrix_cases()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("matrix")


def _first_batch(task):
    return next(iter(task.eval_batches()))


@pytest.mark.parametrize("method,task,variant", CASES, ids=[f"{m}-{t}{'-' + '-'.join(v) if v else ''}"
                                                            for m, t, v in CASES])
def test_per_sample_cost_matches_counter_and_batch_invariance(method, task, variant, workdir):
    _check_cost_and_invariance(method, task, variant, workdir)


# Pretrained checkpoints (tests/pretrained_fixtures.py): every method that supports the task runs on a tiny
# random checkpoint of each format; the checks are the same.  Subset for speed (about 45 s): every method of
# the task on wav2vec2-base (post-norm speech), opus-mt (Marian) and DeiT; on the other formats, whose
# blocks the matrix above or those runs already exercise, ACM and dense (stable-layer-norm XLS-R: pre-norm
# blocks) or dense and DAT (fairseq; its narrow-decoder layout of DAT's IWSLT model also runs ACM).
# CCT refuses post-norm and narrow-decoder models (test_cct_refuses_post_norm_checkpoints).
PRETRAINED = {"commonvoice": ("wav2vec2-base-tiny", "xlsr-tiny"), "iwslt": ("opus-mt-tiny", "fairseq-tiny",
                                                                           "fairseq-dat-tiny"),
              "imagenet": ("deit-fashion-tiny.pth",)}
SUBSET = {"xlsr-tiny": ("acm", "dense"), "fairseq-tiny": ("dat", "dense"),
          "fairseq-dat-tiny": ("dat", "acm", "dense")}


def _pretrained_cases() -> list[tuple[str, str, str]]:
    cases = []
    for method, task, variant in CASES:
        if variant or task not in PRETRAINED:
            continue
        for ckpt in PRETRAINED[task]:
            if method in SUBSET.get(ckpt, (method,)) and not (method == "cct" and task == "iwslt"):
                cases.append((method, task, ckpt))
    return cases


PRETRAINED_CASES = _pretrained_cases()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    from tests.pretrained_fixtures import main

    root = tmp_path_factory.mktemp("checkpoints")
    main([str(root)])
    return root


@pytest.mark.parametrize("method,task,ckpt", PRETRAINED_CASES, ids=[f"{m}-{t}-{c}" for m, t, c in PRETRAINED_CASES])
def test_methods_on_pretrained_checkpoints(method, task, ckpt, workdir, checkpoints):
    _check_cost_and_invariance(method, task, (f"{task}.pretrained={checkpoints / ckpt}",), workdir)


def test_cct_refuses_post_norm_checkpoints(workdir, checkpoints):
    from bench.errors import UserError

    with pytest.raises(UserError, match="post-norm"):
        build_tiny("cct", "iwslt", workdir, f"iwslt.pretrained={checkpoints / 'opus-mt-tiny'}")


def test_narrow_decoder_from_scratch(workdir):
    """The DAT paper's IWSLT layout (decoder narrower than the encoder) built from the task's config."""
    model = _check_cost_and_invariance("dat", "iwslt", ("iwslt.dec_d_model=8",), workdir)
    assert (model.cfg.d_model, model.cfg.d_dec) == (16, 8)
    assert model.decoder.blocks[0].cross.k.weight.shape[1] == 16


def test_pretrained_matrix_covers_every_method_and_format():
    """Every (method, task) pair of the matrix with a pretrained format runs on at least one checkpoint of
    that task (CCT on translation: its refusal is tested instead), and every format is used."""
    pairs = {(m, t) for m, t, v in CASES if t in PRETRAINED and not v}
    covered = {(m, t) for m, t, _ in PRETRAINED_CASES} | {("cct", "iwslt")}
    assert pairs <= covered
    assert {c for _, _, c in PRETRAINED_CASES} == {c for cs in PRETRAINED.values() for c in cs}


def _check_cost_and_invariance(method, task, variant, workdir):
    task_impl, method_impl, model = build_tiny(method, task, workdir, *variant)
    batch = _first_batch(task_impl)

    def infer(x):  # the task's evaluation forward (decoding for translation)
        return task_impl.infer(model, x)

    def counted_infer(m, x):  # the forward alone under the counter, as the runner counts it
        with cost.count_macs() as counter:
            out = task_impl.infer(m, x)
        reports.append(counter.report)
        return out

    for value in method_impl.knob_values():
        method_impl.set_knob(model, value)
        reports = []
        with torch.inference_mode():
            result = method_impl.infer(model, batch, forward=counted_infer)  # the typed result the runner reads
            half_result = method_impl.infer(model, Batch(batch.x[: len(batch) // 2], batch.y[: len(batch) // 2]))
        report, logged = reports[0], result.macs
        assert logged.shape == (len(batch),) and logged.dtype == torch.float64
        assert all(v.shape[0] == len(batch) for v in result.columns.values())
        if result.outputs.is_floating_point():
            # per-sample costs do not depend on what else is in the batch (a decoding task's encoder runs
            # over the batch's padded source width, and each sentence is charged its row of it: there the
            # cost depends on the batch's longest source, as the executed work does)
            torch.testing.assert_close(half_result.macs, logged[: len(batch) // 2], rtol=1e-9, atol=0.0)
        assert report.uncounted == [], f"ops executed without a MAC formula: {report.uncounted}"
        assert report.macs > 0
        assert float(logged.sum()) == pytest.approx(report.macs, rel=0.01), (
            f"{method} on {task}{variant} at {value}: decision log {float(logged.sum()):.6g} "
            f"vs counter {report.macs:.6g} MACs")
        with torch.inference_mode():
            full = infer(batch.x)
            half = infer(batch.x[: len(batch) // 2])
            single = infer(batch.x[3:4])
        if not full.is_floating_point():  # decoded token ids: exactly equal
            assert torch.equal(full[: len(batch) // 2], half)
            assert torch.equal(full[3:4], single)
            continue
        assert torch.equal(full[: len(batch) // 2].argmax(-1), half.argmax(-1))
        torch.testing.assert_close(full[: len(batch) // 2], half, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(full[3:4], single, rtol=1e-4, atol=1e-5)
    return model


def test_matrix_covers_every_registered_method():
    from bench import registry

    covered = {m for m, _, _ in CASES}
    assert covered == set(registry.methods()), "every method must run on at least one task"
