"""CCT on the encoder–decoder: the real gathered decoding path against the masked (teacher-forced,
hard-gated) path, the decision-log cost against the dispatch-level counter, batch invariance, and the
budget loss."""

from __future__ import annotations

import pytest
import torch

from bench import cost
from bench.models import seq2seq as S
from methods.cct.model import ControlNet
from methods.cct.seq2seq import CCTSeq2Seq
from tests.test_translation import _as_lists, _model, _reference_greedy, _sources, _teacher_forced


def _cct(seed: int = 0, spread: float = 1.5) -> CCTSeq2Seq:
    base = _model(dec_layers=3, seed=seed).float()
    model = CCTSeq2Seq(base, n_budgets=2, slices=4, gate_hidden=5, gate_bias=3.0)
    model.calibrate(torch.stack([_sources(4, seed=7), _sources(4, seed=8)], dim=1))
    torch.manual_seed(seed + 11)
    with torch.no_grad():  # gates that switch units off for some tokens and on for others
        for net in model.modules():
            if isinstance(net, ControlNet):
                net.fc2.bias.normal_(0.0, spread)
                net.fc2.weight.mul_(4.0)
    head = torch.nn.Linear(model.cfg.d_model, model.cfg.vocab)  # never emit PAD/BOS (they are not words)
    with torch.no_grad():
        head.weight.copy_(model.decoder.head.weight)
        head.bias.zero_()
        head.bias[[S.PAD, S.BOS]] = -1e4
    model.decoder.head = head
    model.len_a, model.len_b = 1.0, 4
    return model.double().eval()


def _decisions(model: CCTSeq2Seq) -> dict[str, float]:
    return {k: float(v.mean()) for k, v in model.usage_fractions().items()}


def test_real_path_greedy_equals_masked_recomputation_with_units_off():
    model = _cct()
    src = _sources(batch=5)
    with torch.no_grad():
        greedy = _as_lists(model.generate(src, beam=1), model.last_out_len)
        used = _decisions(model)
        reference = _reference_greedy(model, src)
    assert greedy == reference
    assert any(len(r) > 1 for r in reference)
    # the test means something only if units really were skipped and run
    assert sum(0.05 < v < 0.95 for v in used.values()) >= 6  # units on for some tokens, off for others


def test_real_path_step_log_probs_equal_masked_path():
    model = _cct(seed=1)
    src = _sources(batch=3, seed=2)
    recorded = []
    step = model.step

    def spy(state, tokens, t):
        logp = step(state, tokens, t)
        recorded.append((state.row_sample.clone(), tokens.clone(), logp.clone()))
        return logp

    model.step = spy
    history: dict[int, list[int]] = {}
    with torch.no_grad():
        model.generate(src, beam=1)
        assert len(recorded) > 2
        for rows, tokens, logp in recorded:  # beam 1: one row per live sentence, fed its own history
            for r, b in enumerate(rows.tolist()):
                history.setdefault(b, []).append(int(tokens[r]))
                row = src[b][src[b].ne(S.PAD)]
                torch.testing.assert_close(logp[r], _teacher_forced(model, row, history[b]), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("beam,budgets", [(1, (0, 0)), (3, (1, 0)), (2, (1, 1))])
def test_decision_log_cost_equals_counter(beam, budgets):
    model = _cct(seed=2).float()
    model.enc_budget_index, model.dec_budget_index = budgets
    src = _sources(batch=4, seed=3)
    with torch.inference_mode():
        report = cost.count(lambda s: model.generate(s, beam=beam), src)
        logged = model.last_sample_macs.clone()
        assert report.uncounted == []
        assert float(logged.sum()) == pytest.approx(report.macs, rel=1e-6)
        n = int(src[0].ne(S.PAD).sum())
        single = cost.count(lambda s: model.generate(s, beam=beam), src[:1, :n])
        assert float(model.last_sample_macs[0]) == pytest.approx(single.macs, rel=1e-6)
        assert torch.all(model.last_decoder_macs > 0) and torch.all(model.last_decoder_macs < model.last_sample_macs)


def test_batch_invariant_outputs():
    model = _cct(seed=3)
    src = _sources(batch=6, seed=5)
    with torch.no_grad():
        full = model.generate(src, beam=3)
        singles = torch.cat([model.generate(src[i:i + 1], beam=3) for i in range(len(src))])
    assert torch.equal(full, singles)


def test_budget_loss_two_sided_per_subnetwork_and_differentiable():
    model = _cct(seed=4).float().train()
    src, tgt = _sources(4, seed=7), _sources(4, seed=8)
    x = torch.stack([src, tgt], dim=1)
    enc, dec = torch.tensor([0, 0, 1, 1]), torch.tensor([1, 0, 1, 0])
    logits = model(x, enc, dec)
    assert logits.shape[:2] == (4, tgt.shape[1])
    loss = model.budget_loss(enc, dec, torch.tensor([1.0, 0.5], dtype=torch.float64))
    loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "gate" in n and p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    # with every gate forced on, the usage equals the full cost: loss 0 at p = 1, |1 - 1/p| at p
    model.eval()
    with torch.no_grad():
        for net in model.modules():
            if isinstance(net, ControlNet):
                net.fc2.bias.fill_(50.0)
                net.fc2.weight.zero_()
        model(x, enc, dec)
        enc_used, enc_full, dec_used, dec_full = model.utilisation()
        torch.testing.assert_close(enc_used, enc_full)
        torch.testing.assert_close(dec_used, dec_full)
        ones = torch.zeros(4, dtype=torch.long)
        assert float(model.budget_loss(ones, ones, torch.tensor([1.0]))) == pytest.approx(0.0, abs=1e-6)
        half = model.budget_loss(ones, ones, torch.tensor([0.5], dtype=torch.float64))
        assert float(half) == pytest.approx(2 * abs(1 - 1 / 0.5), rel=1e-6)


def test_all_on_starts_close_to_the_dense_model():
    base = _model(dec_layers=3, seed=5).float()
    model = CCTSeq2Seq(base, n_budgets=1, slices=4, gate_hidden=5, gate_bias=30.0).eval()
    x = torch.stack([_sources(4, seed=7), _sources(4, seed=8)], dim=1)
    model.calibrate(x)
    with torch.no_grad():
        dense = torch.log_softmax(base(x), -1)
        gated = torch.log_softmax(model(x), -1)
    keep = x[:, 1, : dense.shape[1]].ne(S.PAD)
    assert float((dense - gated).abs()[keep].mean()) < 0.5


def _first_block_inputs(model: CCTSeq2Seq, run) -> dict[str, torch.Tensor]:
    """The inputs of the first encoder and decoder blocks (their norm1) during ``run()``."""
    seen: dict[str, torch.Tensor] = {}

    def keep_first(key: str):
        def hook(module, args, out) -> None:
            seen.setdefault(key, args[0].clone())
        return hook

    hooks = [block.norm1.register_forward_hook(keep_first(key))
             for key, block in (("encoder", model.encoder.blocks[0]), ("decoder", model.decoder.blocks[0]))]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def test_one_control_symbol_per_budget_pair_reaches_source_and_target_tokens():
    """§2.2/§4: one symbol per (p_enc, p_dec) tuple, its embedding added to every source and target token:
    the encoder's input depends on the decoder budget and the decoder's on the encoder budget, on the
    teacher-forced path and on the real decoding path."""
    model = _cct(seed=6)
    assert model.control.num_embeddings == 2 * 2
    x = torch.stack([_sources(3, seed=7), _sources(3, seed=8)], dim=1)
    src = _sources(3, seed=9)
    inputs = {}
    with torch.no_grad():
        for enc, dec in ((0, 0), (0, 1), (1, 0)):
            e, d = torch.full((3,), enc), torch.full((3,), dec)
            model.enc_budget_index, model.dec_budget_index = enc, dec
            inputs[enc, dec] = (_first_block_inputs(model, lambda: model(x, e, d)),
                                _first_block_inputs(model, lambda: model.generate(src, beam=1)))
    for path in (0, 1):
        assert not torch.allclose(inputs[0, 0][path]["encoder"], inputs[0, 1][path]["encoder"])  # p_dec → encoder
        assert not torch.allclose(inputs[0, 0][path]["decoder"], inputs[1, 0][path]["decoder"])  # p_enc → decoder
    difference = inputs[0, 1][0]["encoder"] - inputs[0, 0][0]["encoder"]
    expected = model.control.weight[1] - model.control.weight[0]  # rows enc·n + dec
    torch.testing.assert_close(difference, expected.expand_as(difference))


def test_budget_loss_groups_by_pair_symbol():
    """Eq. 9: a term per (pair symbol, sub-network); with every gate on, a pair (p_e, p_d) costs
    |1 − 1/p_e| + |1 − 1/p_d|, summed over the pairs of the batch."""
    model = _cct(seed=4).float().eval()
    with torch.no_grad():
        for net in model.modules():
            if isinstance(net, ControlNet):
                net.fc2.bias.fill_(50.0)
                net.fc2.weight.zero_()
        x = torch.stack([_sources(4, seed=7), _sources(4, seed=8)], dim=1)
        enc, dec = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 1])
        model(x, enc, dec)
        loss = model.budget_loss(enc, dec, torch.tensor([1.0, 0.5], dtype=torch.float64))
    assert float(loss) == pytest.approx(0 + 1 + 1 + 2, rel=1e-6)
