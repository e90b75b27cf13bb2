"""Early exit (SDN heads, ZTW cascading + ensembling): exit decisions and outputs against every head run
on every sample, exited samples leave the batch (cost == counter, batch 1 stops at its exit), heads'
cost counted, cascade input detached, ensemble formula, per-token outputs, frozen backbone."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bench import cost
from methods.early_exit import model as M
from tests.encoder_fixtures import tiny_encoder, token_batch
from tests.helpers import build_tiny


def early_exit(per_token=False, ensemble=True, layers=4):
    torch.manual_seed(0)
    model = M.EarlyExitEncoder(tiny_encoder(per_token=per_token, layers=layers), list(range(layers - 1)),
                               classes=5, hidden=12, cascade=True).eval()
    with torch.no_grad():  # spread the ensemble weights/biases so they matter
        model.ensembles.weights.normal_(0, 0.5)
        model.ensembles.bias.normal_(0, 0.5)
        for head in model.heads:  # sharper heads: confidences spread over (0.2, 1)
            head.out.weight.mul_(8)
    model.use_ensemble = ensemble
    return model


def reference_exits(model, ids, threshold):
    """Every head on every sample, then the first exit whose confidence > threshold (else the final)."""
    _, mask = model.encoder.embed(ids)
    with torch.no_grad():
        outs, final = model.all_exits(ids)
    chosen, exits = final.clone(), torch.full((len(ids),), len(outs), dtype=torch.long)
    for i in reversed(range(len(outs))):
        fire = M.confidence(outs[i], mask) > threshold
        chosen[fire] = outs[i][fire]
        exits[fire] = i
    return chosen, exits


@pytest.mark.parametrize("per_token,padded,ensemble", [(False, False, True), (False, True, False),
                                                       (True, True, True)])
def test_exits_match_all_heads_reference(per_token, padded, ensemble):
    model = early_exit(per_token=per_token, ensemble=ensemble)
    ids = token_batch(12, padded=padded, seed=4)
    with torch.no_grad():
        outs, _ = model.all_exits(ids)
    threshold = float(M.confidence(outs[0], model.encoder.embed(ids)[1]).median())
    ref, ref_exits = reference_exits(model, ids, threshold)
    model.threshold = threshold
    with torch.inference_mode():
        out = model(ids)
    assert len(set(model.last_exit.tolist())) >= 2, "test needs samples leaving at different exits"
    assert torch.equal(model.last_exit, ref_exits)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_exited_samples_leave_the_batch_cost_matches_counter():
    model = early_exit()
    ids = token_batch(12, seed=4)
    with torch.no_grad():
        outs, _ = model.all_exits(ids)
    model.threshold = float(M.confidence(outs[0], None).median())
    with torch.inference_mode():
        report = cost.count(model, ids)
        logged = model.sample_macs()
        exits = model.last_exit.clone()
    assert report.uncounted == []
    assert float(logged.sum()) == pytest.approx(report.macs, rel=1e-9)
    tokens = ids.shape[1] + 1
    table = model.exit_macs(tokens)
    enc = model.encoder
    assert table[0] == enc.blocks[0].macs(tokens) + model.heads[0].macs()
    assert table[-1] == enc.macs(tokens) + sum(h.macs() for h in model.heads)  # heads' cost counted
    # batch 1: a sample stops at its exit and costs exactly its row of the table
    assert int(exits.max()) > 0
    for i in (int((exits == 0).nonzero()[0]), int(exits.argmax())):
        with torch.inference_mode():
            single = cost.count(model, ids[i:i + 1]).macs
        assert single == table[int(exits[i])]


def test_batch_invariance_and_threshold_one_is_the_dense_model():
    model = early_exit()
    ids = token_batch(10, seed=6)
    with torch.no_grad():
        outs, _ = model.all_exits(ids)
    model.threshold = float(M.confidence(outs[1], None).median())
    with torch.inference_mode():
        full = model(ids)
        alone = torch.cat([model(ids[i:i + 1]) for i in range(len(ids))])
    torch.testing.assert_close(alone, full, rtol=1e-4, atol=1e-5)
    model.threshold = 1.0
    with torch.inference_mode():
        out = model(ids)
        dense = model.encoder(ids)
    assert bool((model.last_exit == len(model.heads)).all())
    torch.testing.assert_close(out, dense)


def test_cascade_input_is_detached_and_ensemble_formula():
    model = early_exit()
    model.train()
    ids = token_batch(6)
    model.use_ensemble = False
    outs, _ = model.all_exits(ids, grad_backbone=False)
    outs[1].sum().backward()
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0 for p in model.heads[0].parameters())
    assert model.heads[1].out.weight.grad is not None
    model.zero_grad()
    model.use_ensemble = True
    with torch.no_grad():
        ens, _ = model.all_exits(ids)
        model.use_ensemble = False
        logits, _ = model.all_exits(ids)
    w, b = model.ensembles.weights, model.ensembles.bias
    i = 2
    expected = sum(torch.exp(w[i, j]) * F.log_softmax(logits[j], -1) for j in range(i + 1)) / (i + 1) + b[i]
    torch.testing.assert_close(ens[i], expected)


def test_per_token_confidence_is_mean_over_valid_tokens():
    out = torch.tensor([[[10.0, 0.0], [0.0, 0.0], [5.0, 5.0]]])
    mask = torch.tensor([[False, False, True]])
    p = torch.softmax(torch.tensor([10.0, 0.0]), 0).max()
    assert float(M.confidence(out, mask)[0]) == pytest.approx((float(p) + 0.5) / 2)


def test_frozen_backbone_training_leaves_the_base_model_unchanged(tmp_path: Path):
    task, method, model = build_tiny("early_exit", "imagenet", tmp_path)
    base = method.run.base_model(task)
    for (name, p), q in zip(model.encoder.state_dict().items(), base.state_dict().values()):
        assert torch.equal(p, q), name
    assert method.knob_values()[-1] == 1.0
    assert len(model.heads) == len(base.blocks) - 1


def test_depth_histogram_from_rows(tmp_path: Path):
    from bench import config, runner
    from methods.early_exit.figures import depth_histogram, exit_tables
    from tests.helpers import compose_tiny

    cfg = compose_tiny("early_exit", "imagenet", tmp_path, "timing=false")
    runner.run(cfg, "early_exit", "imagenet", "test")
    from bench import results

    rows = results.load(tmp_path / "results")
    tables = exit_tables(rows, tmp_path / "results")
    assert sorted(tables) == [0.0, 0.5, 1.0]
    assert set(tables[0.0]["blocks"][0].tolist()) == {0}  # threshold 0: every sample leaves at the first IC
    (path,) = depth_histogram(rows, tmp_path / "results", tmp_path / "reports", "imagenet")
    assert path.name == "imagenet_early_exit_depth_hist.png" and path.stat().st_size > 0
