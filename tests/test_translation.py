"""The encoder–decoder skeleton's decoding, its cost ledger, and the Depth-Adaptive Transformer's
copied-state decoding, each against an independent slow reference (full recomputation, no cache)."""

from __future__ import annotations

import math

import pytest
import torch

from bench import cost
from bench.models import seq2seq as S
from methods.dat.model import DATModel, sample_macs_from_log


def _model(dec_layers: int = 3, seed: int = 0) -> S.EncoderDecoder:
    torch.manual_seed(seed)
    cfg = S.Seq2SeqConfig(vocab=23, d_model=16, enc_layers=2, dec_layers=dec_layers, n_heads=2, d_mlp=24,
                          max_positions=14)
    model = S.EncoderDecoder(cfg).double().eval()
    model.len_a, model.len_b = 1.0, 4
    return model


def _sources(batch: int = 5, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 8, (batch,), generator=g)
    src = torch.zeros(batch, int(lengths.max()), dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(4, 23, (int(n),), generator=g)
    return src


def _teacher_forced(model, src_row: torch.Tensor, prefix: list[int]) -> torch.Tensor:
    """Log-probabilities of the next token after ``prefix`` by recomputing the whole prefix (no cache)."""
    x = torch.zeros(1, 2, max(len(src_row), len(prefix)), dtype=torch.long)
    x[0, 0, : len(src_row)] = src_row
    x[0, 1, : len(prefix)] = torch.tensor(prefix)
    return torch.log_softmax(model(x)[0, len(prefix) - 1], dim=-1)


def _reference_greedy(model, src: torch.Tensor) -> list[list[int]]:
    """Greedy decoding by full recomputation at every step, with generate's per-sentence length cap."""
    out = []
    for row in src:
        row = row[row.ne(S.PAD)]
        cap = int(min(model.len_a * len(row) + model.len_b, model.cfg.max_positions - 1))
        prefix = [S.BOS]
        while True:
            logp = _teacher_forced(model, row, prefix)
            if len(prefix) >= cap:  # the last allowed token is EOS
                prefix.append(S.EOS)
                break
            token = int(logp.argmax())
            prefix.append(token)
            if token == S.EOS:
                break
        out.append(prefix[1:-1])
    return out


def _as_lists(tokens: torch.Tensor, lengths: torch.Tensor) -> list[list[int]]:
    """The decoded tokens of each sentence without its EOS, cut by ``lengths`` (``last_out_len``, EOS
    counted): a model with random weights may emit PAD mid-sentence, which dropping PADs would hide."""
    return [row[: int(n) - 1].tolist() for row, n in zip(tokens, lengths)]


def test_kv_cache_greedy_equals_full_recomputation_and_beam_1():
    model = _model()
    src = _sources()
    with torch.no_grad():
        reference = _reference_greedy(model, src)
        greedy = _as_lists(model.generate(src, beam=1), model.last_out_len)
    assert greedy == reference
    assert any(len(r) > 1 for r in reference)  # decoding ran several cached steps


def test_kv_cache_step_log_probs_equal_recomputation():
    model = _model()
    src = _sources(batch=3)
    recorded = []
    step = model.step

    def spy(state, tokens, t):
        logp = step(state, tokens, t)
        recorded.append((state.row_sample.clone(), logp.clone()))
        return logp

    model.step = spy
    with torch.no_grad():
        out = _as_lists(model.generate(src, beam=1), model.last_out_len)
        for t, (rows, logp) in enumerate(recorded):
            for r, b in enumerate(rows.tolist()):
                row = src[b][src[b].ne(S.PAD)]
                prefix = [S.BOS] + (out[b] + [S.EOS])[:t]
                torch.testing.assert_close(logp[r], _teacher_forced(model, row, prefix), rtol=1e-9, atol=1e-9)


def test_beam_search_batch_invariant_and_sorted_by_score():
    model = _model(seed=3)
    model.len_penalty = 0.0
    src = _sources(batch=6, seed=4)
    with torch.no_grad():
        full = model.generate(src, beam=4)
        full_len = model.last_out_len
        singles = torch.cat([model.generate(src[i:i + 1], beam=4) for i in range(len(src))])
        greedy = model.generate(src, beam=1)
        greedy_len = model.last_out_len
    assert torch.equal(full, singles)

    def score(tokens: list[int], row) -> float:
        prefix, total = [S.BOS], 0.0
        for tok in tokens + [S.EOS]:
            total += float(_teacher_forced(model, row, prefix)[tok])
            prefix.append(tok)
        return total

    # with no length penalty, beam search never returns a worse sum of log-probabilities than greedy
    with torch.no_grad():
        for b, (bt, gt) in enumerate(zip(_as_lists(full, full_len), _as_lists(greedy, greedy_len))):
            row = src[b][src[b].ne(S.PAD)]
            assert score(bt, row) >= score(gt, row) - 1e-9


@pytest.mark.parametrize("beam", [1, 3])
def test_counter_agrees_with_decode_ledger(beam):
    model = _model().float()
    src = _sources(batch=4)
    with torch.inference_mode():
        report = cost.count(lambda s: model.generate(s, beam=beam), src)
        ledger = model.last_sample_macs.clone()
        assert report.uncounted == []
        assert float(ledger.sum()) == pytest.approx(report.macs, rel=1e-9)
        single = cost.count(lambda s: model.generate(s, beam=beam), src[:1, : int(src[0].ne(0).sum())])
        assert float(model.last_sample_macs[0]) == pytest.approx(single.macs, rel=1e-9)
        assert torch.all(model.last_decoder_macs > 0) and torch.all(model.last_decoder_macs < ledger)


# --- DAT -------------------------------------------------------------------------------------------
def _dat(halting: str = "geometric", seed: int = 0) -> DATModel:
    base = _model(dec_layers=4, seed=seed)
    model = DATModel(base, halting).double().eval()
    torch.manual_seed(seed + 10)
    with torch.no_grad():  # random halting units so exits vary from token to token
        for unit in model.halt:
            unit.weight.normal_(0, 2.0)
            unit.bias.normal_(0, 0.5)
    model.thresholds = [0.5] * (model.n_blocks - 1)
    return model


def _reference_dat_logp(model: DATModel, src_row: torch.Tensor, tokens: list[int], exits: list[int]) -> list:
    """Per-token reference loop (no cache): token t runs blocks 1..exits[t]; above its exit, every block's
    input at position t is its exit state (the copy), whose K/V that block computes with its own
    projections.  Returns the log-probabilities emitted at every position and the halting decisions."""
    memory, mem_mask = model.encode(src_row[None])
    emb, _ = model.decoder.embed(torch.tensor([tokens]))
    n_blocks = model.n_blocks
    inputs = emb[0]  # [T, d]: input of block 1 at every position
    outs, chosen = [], []
    states = [None] * len(tokens)
    for n, block in enumerate(model.decoder.blocks):
        x = inputs[None]
        kv = block.cross.memory_kv(memory)
        full = block(x, kv, mem_mask)[0]  # causal teacher forcing over the inputs of this block
        new_inputs = []
        for t in range(len(tokens)):
            if exits[t] > n:  # position t runs block n
                states[t] = full[t]
            new_inputs.append(states[t])  # above the exit: the copied exit state
        inputs = torch.stack(new_inputs)
    for t in range(len(tokens)):
        norm, head = model.classifier(exits[t] - 1)
        outs.append(torch.log_softmax(head(norm(states[t])), dim=-1))
    # halting decisions of the reference: recompute block by block for position t's own path
    for t in range(len(tokens)):
        decision = n_blocks
        for n in range(n_blocks - 1):
            chi = torch.sigmoid(model.halt[0](model.exit_norms[n](_state_at(model, src_row, tokens, exits, t, n))))
            if float(chi) > model.thresholds[n]:
                decision = n + 1
                break
        chosen.append(decision)
    return outs, chosen


def _state_at(model, src_row, tokens, exits, t, n):
    """State of position t after block n (0-based) under the exit schedule (reference, recomputed)."""
    memory, mem_mask = model.encode(src_row[None])
    emb, _ = model.decoder.embed(torch.tensor([tokens[: t + 1]]))
    inputs = emb[0]
    state = [None] * (t + 1)
    for m, block in enumerate(model.decoder.blocks[: n + 1]):
        full = block(inputs[None], block.cross.memory_kv(memory), mem_mask)[0]
        rows = []
        for u in range(t + 1):
            if exits[u] > m or u == t:
                state[u] = full[u]
            rows.append(state[u])
        inputs = torch.stack(rows)
    return state[t]


def test_dat_copied_states_match_per_token_reference_loop():
    model = _dat()
    src = _sources(batch=3, seed=7)
    recorded = []
    step = model.step

    def spy(state, tokens, t):
        logp = step(state, tokens, t)
        recorded.append(logp.clone())
        return logp

    model.step = spy
    with torch.no_grad():
        out = model.generate(src, beam=1)
        trace, lengths = model.last_trace, model.last_out_len  # lengths count the EOS
    depths = set()
    for b in range(len(src)):
        row = src[b][src[b].ne(S.PAD)]
        n_tok = int(lengths[b])  # an untrained model may emit PAD mid-sentence: cut by length, not by PAD
        exits = [int(e) for e in trace[b, :n_tok]]
        depths.update(exits)
        tokens = [S.BOS] + out[b, : n_tok - 1].tolist()
        with torch.no_grad():
            ref, chosen = _reference_dat_logp(model, row, tokens, exits)
        assert chosen == exits
        # the sentence's rows: sentences leave the batch when done, so find this row per step
        for t in range(n_tok):
            rows = model.log.rows[t].tolist()
            r = rows.index(b)
            torch.testing.assert_close(recorded[t][r], ref[t].float().double(), rtol=1e-6, atol=1e-6)
    assert len(depths) > 1, "the exits must vary for the test to check copied states"


@pytest.mark.parametrize("halting", ["geometric", "confidence", "multinomial", "sequence"])
def test_dat_decision_log_cost_matches_counter(halting):
    model = _dat(halting).float()
    model.thresholds = [0.3] * (model.n_blocks - 1)
    src = _sources(batch=4, seed=2)
    for fixed in (None, 2):
        model.fixed_exit = fixed
        with torch.inference_mode():
            report = cost.count(lambda s: model.generate(s, beam=2), src)
        logged, _ = sample_macs_from_log(model, model.log)
        assert report.uncounted == []
        assert float(logged.sum()) == pytest.approx(report.macs, rel=1e-9)
        assert float(model.last_sample_macs.sum()) == pytest.approx(report.macs, rel=1e-9)


def test_dat_geometric_halting_is_one_unit_shared_by_every_block():
    """§4.1: the geometric-like exit classifier is a single linear layer d → 1, read after every block below N."""
    from methods.dat.model import DATModel

    model = DATModel(_model(dec_layers=3).float(), "geometric")
    assert len(model.halt) == 1 and model.halt[0].out_features == 1
    torch.manual_seed(0)
    for p in model.halt.parameters():
        torch.nn.init.normal_(p)
    states = [torch.randn(2, 3, model.cfg.d_dec) for _ in range(model.n_blocks)]
    log_q = model.halting_log_q(states, torch.zeros(2, 4, model.cfg.d_model), torch.ones(2, 4, dtype=torch.bool))
    chi = [torch.sigmoid(model.halt[0](model.exit_norms[n](states[n]))[..., 0]) for n in range(model.n_blocks - 1)]
    assert torch.allclose(log_q[..., 0].exp(), chi[0], atol=1e-6)
    assert torch.allclose(log_q[..., 1].exp(), (1 - chi[0]) * chi[1], atol=1e-6)
    assert torch.allclose(log_q.exp().sum(-1), torch.ones(2, 3), atol=1e-5)


def test_dat_lazy_source_kv_and_fixed_exit_one():
    model = _dat()
    model.fixed_exit = 1
    src = _sources(batch=2)
    with torch.no_grad():
        model.generate(src, beam=2)
    assert model.log.kv_computed[0].all() and not model.log.kv_computed[1:].any()
    assert all(int(e.max()) == 1 for e in model.log.exits)


def test_oracles_lowest_block_on_ties_lambda_and_rbf():
    from methods.dat.method import oracle, rbf_smooth

    y = torch.tensor([[5, 6, 7]])
    valid = torch.ones_like(y, dtype=torch.bool)

    def logits_with(correct):  # one-hot logits: classifier predicts y where correct, else token 0
        out = torch.zeros(1, 3, 10)
        for t, ok in enumerate(correct):
            out[0, t, int(y[0, t]) if ok else 0] = 5.0
        return out

    # block 1 wrong at t=0, right at t=1; blocks 2, 3 right everywhere; nobody right at t=2
    logits = [logits_with([0, 1, 0]), logits_with([1, 1, 0]), logits_with([1, 1, 0])]
    target = oracle(logits, y, valid, kind="correctness", lam=0.1, sigma=0.0)
    assert target.tolist() == [[1, 0, 0]]  # lowest correct block; none correct -> the penalty picks block 1
    # a larger lambda prefers lower blocks even when they are wrong
    assert oracle(logits, y, valid, kind="correctness", lam=2.0, sigma=0.0).tolist() == [[0, 0, 0]]
    # likelihood oracle: the most likely block minus lambda·n
    assert oracle(logits, y, valid, kind="likelihood", lam=0.0, sigma=0.0).tolist()[0][:2] == [1, 0]
    # RBF smoothing mixes neighbouring steps; sigma -> 0 leaves scores unchanged; invalid steps are ignored
    scores = torch.tensor([[[1.0], [0.0], [0.0]]], dtype=torch.float64)
    smooth = rbf_smooth(scores, valid, 2.0)  # Eq. 15: κ(t, t') = exp(−(t − t')² / σ)
    assert smooth[0, 0, 0] == pytest.approx(1.0)
    assert smooth[0, 1, 0] == pytest.approx(math.exp(-1 / 2))  # (1 − 0)² / 2
    assert smooth[0, 2, 0] == pytest.approx(math.exp(-4 / 2))  # (2 − 0)² / 2
    masked = rbf_smooth(scores, torch.tensor([[False, True, True]]), 1.0)
    assert float(masked.abs().sum()) == 0.0
    # sequence-level oracle: one exit per sentence
    assert oracle(logits, y, valid, kind="correctness", lam=0.1, sigma=0.0, sequence=True).tolist() == [[1]]


@pytest.mark.parametrize("halting,oracle_kind", [("multinomial", "likelihood"), ("sequence", "correctness"),
                                                 ("confidence", "correctness")])
def test_dat_trains_every_halting_variant(tmp_path, halting, oracle_kind):
    from tests.helpers import build_tiny

    task, method, model = build_tiny("dat", "iwslt", tmp_path, f"dat.halting={halting}",
                                     f"dat.oracle={oracle_kind}", "dat.sigma=1.0")
    assert model.halting == halting
    from bench import protocol

    exit_stage = protocol.plan(method).stages[1]
    assert exit_stage.stage.skip == (halting == "confidence")
    if halting != "confidence":
        assert any(float(p.detach().abs().sum()) > 0 for p in model.halt.parameters())  # the exit loss trained them
    values = method.knob_values()
    assert values[0] == ("ae1.5" if halting == "confidence" else "argmax")
    batch = next(iter(task.eval_batches()))
    method.set_knob(model, values[0])
    with torch.inference_mode():
        out = task.infer(model, batch.x)
    assert out.shape[0] == len(batch)
    exits = torch.cat(model.log.exits)
    assert int(exits.min()) >= 1 and int(exits.max()) <= model.n_blocks
