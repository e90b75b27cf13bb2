"""AdaTape: ATR selection math against a hand-written transcription of Algorithm 2, the integer K rule,
the real path (exact tape length per sample) against the masked path, and per-sample cost vs the counter."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bench import cost, runner
from bench.errors import UserError
from bench.models.transformer import Block, EncoderConfig
from methods.adatape import atr as A
from methods.adatape import model as M
from tests.helpers import compose_tiny


def reference_atr(query, bank, norm, *, max_tape, tau, k, key_dim, complex_query=True):
    """Algorithm 2 for one sample, written out step by step with Python lists."""
    keys = norm(bank)[:, :key_dim]
    used = [False] * bank.shape[0]
    acc, loss, q, tokens = 0.0, 0.0, query.clone(), []
    for step in range(max_tape):
        qk = norm(q)[:key_dim]
        scores = [float(qk @ keys[c]) - (1e9 if used[c] else 0.0) for c in range(bank.shape[0])]
        top = sorted(range(len(scores)), key=lambda c: -scores[c])[:k]
        logits = torch.tensor([scores[c] for c in top]) / math.sqrt(key_dim)
        w = torch.exp(logits - logits.max())
        w = w / w.sum()
        token = sum(float(w[j]) * bank[top[j]] for j in range(k))
        tokens.append(token)
        if acc + float(w.max()) >= tau or step == max_tape - 1:
            break
        acc += float(w.max())
        loss += 1.0 - float((w * w).sum())
        for c in top:
            used[c] = True
        q = (q + token) / 2 if complex_query else token
    return torch.stack(tokens), loss


@pytest.mark.parametrize("tau,max_tape,complex_query", [(2.0, 4, True), (1.0, 4, True), (3.0, 6, False),
                                                        (4.0, 4, True)])
def test_atr_matches_hand_written_algorithm(tau, max_tape, complex_query):
    torch.manual_seed(0)
    b, c, d, h = 7, 24, 16, 8
    k = A.k_per_step(max_tape, tau)
    norm = nn.LayerNorm(d)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 3.0)  # sharper softmax: lengths vary between samples
    bank = torch.randn(b, c, d) * 3
    query = torch.randn(b, d) * 3
    with torch.no_grad():
        result = A.atr(query, norm(bank)[..., :h], bank, norm, max_tape=max_tape, tau=tau, k=k, key_dim=h,
                       complex_query=complex_query)
        for i in range(b):
            tokens, loss = reference_atr(query[i], bank[i], norm, max_tape=max_tape, tau=tau, k=k, key_dim=h,
                                         complex_query=complex_query)
            n = int(result.length[i])
            assert n == len(tokens)
            torch.testing.assert_close(result.tape[i, :n], tokens, rtol=1e-5, atol=1e-5)
            assert float(result.tape[i, n:].abs().sum()) == 0.0
            assert float(result.loss[i]) == pytest.approx(loss, abs=1e-5)
    if tau == max_tape:  # K = 1: max w = 1 every step, so every sample reads exactly tau tokens
        assert result.length.tolist() == [max_tape] * b


def test_atr_lengths_vary_and_masking_subtracts():
    """Negative scores: a multiplicative mask (paper's Algorithm 2 text) would leave used entries at 0,
    the best score; the subtracted mask never re-selects an entry."""
    torch.manual_seed(1)
    c, d, h = 12, 8, 8
    norm = nn.LayerNorm(d, elementwise_affine=False)
    bank = torch.randn(1, c, d)
    query = -bank[0].mean(0, keepdim=True) * 5  # anti-aligned query: most scores negative
    with torch.no_grad():
        result = A.atr(query, norm(bank), bank, norm, max_tape=6, tau=6.0, k=1, key_dim=h, complex_query=False)
    # K = 1: each step copies one bank row; the six rows read must be distinct
    picked = [int(torch.cdist(result.tape[0, s:s + 1], bank[0]).argmin()) for s in range(6)]
    assert len(set(picked)) == 6


def test_k_must_be_an_integer():
    assert A.k_per_step(8, 4.0) == 2
    assert A.k_per_step(8, 1.6) == 5
    with pytest.raises(ValueError):
        A.k_per_step(10, 3.0)


def _tiny_model(bank: str, max_tape: int = 4, tau: float = 2.0) -> M.AdaTapeModel:
    torch.manual_seed(0)
    n, d = 8, 16
    cfg = EncoderConfig(d_model=d, n_layers=3, n_heads=2, d_mlp=32)
    the_bank = M.ParityBank(n, d) if bank == "input" else M.LearnableBank(16, d)
    settings = M.TapeSettings(max_tape=max_tape, tau=tau, k=A.k_per_step(max_tape, tau), key_dim=8)
    model = M.AdaTapeModel(cfg, M.ParityInput(n, d), the_bank, nn.ModuleList(Block(cfg) for _ in range(3)),
                           nn.LayerNorm(d), nn.Linear(d, 2), settings)
    with torch.no_grad():  # a sharper selection softmax so tape lengths differ between samples
        model.bank_norm.weight.fill_(4.0 if bank == "input" else 10.0)
        if bank == "learnable":
            model.bank.weight.normal_()
    return model.eval()


@pytest.mark.parametrize("bank", ["input", "learnable"])
def test_real_path_equals_masked_path_and_cost_matches_counter(bank):
    model = _tiny_model(bank)
    x = torch.randint(0, 3, (64, 8))
    with torch.inference_mode():
        masked = model(x)
        lengths = model.last.length.clone()
        model.real_path = True
        real = model(x)
        assert torch.equal(model.last.length, lengths)
        report = cost.count(model, x)
    assert len(set(lengths.tolist())) > 1, "test needs samples with different tape lengths"
    torch.testing.assert_close(real, masked, rtol=1e-5, atol=1e-5)
    # each sample alone gives the same output (no padding, no batch dependence)
    with torch.inference_mode():
        for i in (0, 5, 17):
            torch.testing.assert_close(model(x[i:i + 1]), real[i:i + 1], rtol=1e-5, atol=1e-5)
    logged = model.sample_macs(lengths, 1)
    assert report.uncounted == []
    assert float(logged.sum()) == pytest.approx(report.macs, rel=1e-9)


def test_sample_cost_grows_with_tape_length():
    model = _tiny_model("input")
    short, long = model.sample_macs(torch.tensor([1, 4]), 1).tolist()
    blocks = sum(b.macs(5) - b.macs(2) for b in model.blocks[1:])
    assert long - short == pytest.approx(3 * model.step_macs() + blocks)


def test_eval_cap_limits_tape_length():
    model = _tiny_model("input", max_tape=4, tau=4.0)  # K = 1: always 4 tokens uncapped
    x = torch.randint(0, 3, (16, 8))
    with torch.inference_mode():
        model(x)
        assert model.last.length.tolist() == [4] * 16
        model.cap = 2
        model(x)
        assert model.last.length.tolist() == [2] * 16


def test_atr_gradients_reach_query_and_bank():
    model = _tiny_model("input").train()
    x = torch.randint(0, 3, (8, 8))
    out = model(x)
    (out.sum() + model.last.loss.sum()).backward()
    assert model.bank.h2.weight.grad.abs().sum() > 0
    assert model.embed.proj.weight.grad.abs().sum() > 0  # through the query's selection weights
    assert model.bank_norm.weight.grad.abs().sum() > 0


def _parity_model(embed: nn.Module, bank: nn.Module | None) -> M.AdaTapeModel:
    torch.manual_seed(0)
    d = 16
    cfg = EncoderConfig(d_model=d, n_layers=3, n_heads=2, d_mlp=32)
    settings = M.TapeSettings(max_tape=4, tau=2.0, k=2, key_dim=8)
    return M.AdaTapeModel(cfg, embed, bank, nn.ModuleList(Block(cfg) for _ in range(3)), nn.LayerNorm(d),
                          nn.Linear(d, 2), settings)


def test_paper_token_query_sees_the_input_only_through_the_tape():
    """adatape.input=token: the query (block 1's output) is the same for every input, and the input's
    embedding (the bank's) gets its gradient through the tape alone; the projection ablation's query
    depends on the input."""
    n, d = 8, 16
    x = torch.randint(0, 3, (32, n))
    token = _parity_model(M.ParityToken(d), M.ParityBank(n, d)).train()
    query, _ = token.read_tape(x)
    assert torch.equal(query, query[:1].expand_as(query))
    flipped = x.clone()
    flipped[:, 0] = (flipped[:, 0] + 1) % 3
    assert torch.equal(token.read_tape(flipped)[0], query)
    # every path from the input starts at the bank: cut it and the output no longer depends on the input
    embedded = token.bank.embed(x).detach().requires_grad_(True)
    token.bank.embed = _Fixed(embedded)
    token(x).sum().backward()
    assert embedded.grad.abs().sum() > 0
    assert token.bank.h2.weight.grad.abs().sum() > 0
    projection = _parity_model(M.ParityInput(n, d), M.ParityBank(n, d)).train()
    with torch.no_grad():
        projection.embed.proj.weight.normal_()
        assert not torch.allclose(projection.read_tape(x)[0], projection.read_tape(flipped)[0])


class _Fixed(nn.Module):
    """A stand-in for the bank's embedding that returns a given tensor (the gradient's leaf)."""

    def __init__(self, value: torch.Tensor):
        super().__init__()
        self.value = value

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.value


def test_no_tape_control_output_is_input_independent_and_costed():
    n, d = 8, 16
    model = _parity_model(M.ParityToken(d), None)
    x = torch.randint(0, 3, (32, n))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    for real in (False, True):
        model.real_path = real
        with torch.inference_mode():
            out = model.eval()(x)
        assert torch.equal(out, out[:1].expand_as(out))
        assert model.last.length.tolist() == [0] * 32
    with torch.inference_mode():
        report = cost.count(model, x)
    assert report.uncounted == []
    assert float(model.sample_macs(model.last.length, 1).sum()) == pytest.approx(report.macs, rel=1e-9)


@pytest.mark.parametrize("kind,embed,bank", [("token", M.ParityToken, M.ParityBank),
                                             ("projection", M.ParityInput, M.ParityBank),
                                             ("none", M.ParityToken, type(None))])
def test_method_builds_the_declared_parity_input(tmp_path, kind, embed, bank):
    cfg = compose_tiny("adatape", "parity", tmp_path, "parity.variant=sequence", f"adatape.input={kind}")
    _, _, method = runner.build(cfg, "adatape", "parity")
    model = method.convert(None)
    assert type(model.embed) is embed and type(model.bank) is bank
    assert f"input={kind}" in method.variant()


def test_input_choice_is_refused_off_parity(tmp_path):
    cfg = compose_tiny("adatape", "imagenet", tmp_path, "adatape.input=projection")
    with pytest.raises(UserError, match="adatape.input"):
        runner.build(cfg, "adatape", "imagenet")


@pytest.mark.parametrize("recipe,lr,warmup", [("paper", 3e-5, 1000.0), ("matched", None, None)])
def test_parity_optimiser_is_the_papers_under_recipe_paper(tmp_path, recipe, lr, warmup):
    """recipe=paper on parity: the paper's Adam lr 3e-5 after 1,000 linear warm-up steps (§3.1); matched keeps
    the task's lr and policy; an explicit adatape.lr wins over the recipe's."""
    from bench.protocol import base_policy

    cfg = compose_tiny("adatape", "parity", tmp_path, "parity.variant=sequence", f"recipe={recipe}")
    _, _, method = runner.build(cfg, "adatape", "parity")
    task = method.task
    (stage,) = method.stages()
    assert stage.lr == (lr if lr is not None else float(task.base_budget()["lr"]))
    assert stage.policy.warmup == (warmup if warmup is not None else base_policy(task).warmup)
    explicit = compose_tiny("adatape", "parity", tmp_path, "parity.variant=sequence", f"recipe={recipe}",
                            "adatape.lr=0.002")
    assert runner.build(explicit, "adatape", "parity")[2].stages()[0].lr == 0.002
