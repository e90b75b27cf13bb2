"""Marian (opus-mt-de-en layout) loads into the encoder–decoder skeleton and computes what HF computes.

A tiny random ``MarianMTModel`` with its ``MarianTokenizer`` (SentencePiece models trained here, shared
vocab.json) is written by ``save_pretrained``.  bench's model must give the same teacher-forced logits
(1e-5, fp32) and the same greedy decode (HF ``generate``, num_beams=1, pad forbidden, EOS forced at the
length cap) on padded batches; the counter's MACs equal the analytic formula at the tiny size and at the
full opus-mt-de-en size.
"""

import pytest
import torch

from bench import cost
from tasks.iwslt import marian
from tests.pretrained_fixtures import TEXT_DE, TEXT_EN, write_marian


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_marian(tmp_path_factory.mktemp("marian") / "opus-mt-tiny")


@pytest.fixture(scope="module")
def models(checkpoint):
    from transformers import MarianMTModel, MarianTokenizer

    ref = MarianMTModel.from_pretrained(str(checkpoint)).eval()
    tok = MarianTokenizer.from_pretrained(str(checkpoint))
    ours = marian.load(checkpoint, "iwslt.pretrained").eval()
    return ref, tok, ours


def _batch(tok, pad):
    src = tok(TEXT_DE[:4], padding=True, return_tensors="pt")
    tgt = tok(text_target=TEXT_EN[:4], padding=True, return_tensors="pt").input_ids
    dec_in = torch.cat([torch.full((4, 1), pad), tgt[:, :-1]], dim=1)  # HF's shift_tokens_right
    dec_in = dec_in.masked_fill(dec_in == -100, pad)
    return src, dec_in


def test_teacher_forced_logits_match(models):
    ref, tok, ours = models
    pad = tok.pad_token_id
    src, dec_in = _batch(tok, pad)
    assert (src.input_ids == pad).any(), "the batch must contain padded sources"
    with torch.no_grad():
        expected = ref(input_ids=src.input_ids, attention_mask=src.attention_mask, decoder_input_ids=dec_in).logits
        width = max(src.input_ids.shape[1], dec_in.shape[1])
        x = torch.full((4, 2, width), pad, dtype=torch.long)
        x[:, 0, : src.input_ids.shape[1]] = src.input_ids
        x[:, 1, : dec_in.shape[1]] = dec_in
        got = ours(x)
    t = got.shape[1]
    # HF computes every decoder position; ours trims the batch to its longest target (same positions)
    assert t == dec_in.shape[1]
    torch.testing.assert_close(got, expected[:, :t], atol=1e-5, rtol=1e-5)


def test_greedy_decode_matches_generate(models):
    from transformers import GenerationConfig

    ref, tok, ours = models
    pad = tok.pad_token_id
    src = tok(TEXT_DE[4:10], padding=True, return_tensors="pt")
    cap = 12
    gen = GenerationConfig(num_beams=1, do_sample=False, max_new_tokens=cap, min_length=0, bad_words_ids=[[pad]],
                           forced_eos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=pad,
                           decoder_start_token_id=pad, no_repeat_ngram_size=0, repetition_penalty=1.0)
    with torch.no_grad():
        expected = ref.generate(input_ids=src.input_ids, attention_mask=src.attention_mask, generation_config=gen)
    ours.beam, ours.len_a, ours.len_b = 1, 0.0, cap
    with torch.no_grad():
        got = ours.generate(src.input_ids)
    texts_ref = tok.batch_decode(expected, skip_special_tokens=True)
    texts_ours = tok.batch_decode(got, skip_special_tokens=True)
    assert texts_ours == texts_ref
    for row_ref, row in zip(expected[:, 1:], got):  # token by token (ours: EOS dropped, pad-padded)
        ref_ids = [int(i) for i in row_ref if int(i) not in (pad, tok.eos_token_id)]
        assert [int(i) for i in row if int(i) != pad] == ref_ids
    assert len({tuple(r.tolist()) for r in got}) > 1, "different sources should decode differently"


def test_checkpoint_layout_options(models, checkpoint):
    _, tok, ours = models
    cfg = ours.cfg
    assert not cfg.norm_first and cfg.bos == cfg.pad == tok.pad_token_id and cfg.eos == tok.eos_token_id
    assert ours.decoder.head.weight is ours.decoder.embed.tok.weight is ours.encoder.embed.tok.weight
    assert not ours.encoder.embed.pos.weight.requires_grad
    assert isinstance(ours.decoder.norm, torch.nn.Identity)


def _analytic(cfg, s: int, t: int) -> int:
    """Teacher-forced MACs: encoder S·(4d² + 2d·m) + 2S²d per layer; decoder per layer T·(4d² + 2d·m)
    + 2T²d (self) + 2T·d² (cross q, o) + 2S·d² (cross k, v) + 2T·S·d; output projection T·d·V."""
    d, m, v = cfg.d_model, cfg.d_mlp, cfg.vocab
    enc = cfg.enc_layers * (s * (4 * d * d + 2 * d * m) + 2 * s * s * d)
    dec = cfg.dec_layers * (t * (4 * d * d + 2 * d * m) + 2 * t * t * d + 2 * t * d * d + 2 * s * d * d + 2 * t * s * d)
    return enc + dec + t * d * v


def test_counted_macs_tiny_and_full_size(models):
    _, _, ours = models
    x = torch.randint(2, 50, (2, 2, 9))
    x[:, 1, 0] = ours.cfg.pad
    report = cost.count(ours, x)
    assert report.uncounted == []
    assert report.macs == 2 * _analytic(ours.cfg, 9, 9)
    # opus-mt-de-en: d 512, 6 + 6 layers, 8 heads, MLP 2048, vocabulary 58101 (its config.json)
    full = marian.seq2seq_config({"model_type": "marian", "vocab_size": 58101, "d_model": 512, "encoder_layers": 6,
                                  "decoder_layers": 6, "encoder_attention_heads": 8, "decoder_attention_heads": 8,
                                  "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048, "pad_token_id": 58100,
                                  "decoder_start_token_id": 58100, "eos_token_id": 0}, "test")
    from bench.models.seq2seq import EncoderDecoder

    with torch.device("meta"):  # no initialisation: shapes on meta, then uninitialised CPU memory
        model = EncoderDecoder(full)
    model = model.to_empty(device="cpu").eval()
    x = torch.randint(1, 100, (1, 2, 20))
    x[:, 1, 0] = full.pad
    report = cost.count(model, x)
    assert report.macs == _analytic(full, 20, 20)
