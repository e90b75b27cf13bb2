"""fairseq transformer checkpoints (checkpoint_best.pt + dict.de.txt/dict.en.txt) on the skeleton.

Reference: HF ``FSMTForConditionalGeneration``, the port of fairseq's transformer (post-norm, fairseq's
sinusoidal positions with their padding offset, separate source/target dictionaries, decoder started with
</s>).  The test writes a random FSMT's weights in fairseq's checkpoint layout, loads them with bench's
loader and compares teacher-forced logits (1e-5, fp32) and greedy decodes.  The DAT layout (decoder
narrower than the encoder) has no HF reference: its cross-attention is checked against
``torch.nn.MultiheadAttention(kdim=vdim=d_enc)`` (fairseq's construction) and its MACs against the
formula of the DAT paper (Elbayad et al. 2020, App. A: source keys/values cost 2·|x|·d_dec·d_enc each).
"""

import pytest
import torch

from bench import cost
from tasks.iwslt import fairseq
from tests.pretrained_fixtures import TEXT_DE, TEXT_EN, write_fairseq


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    directory, fsmt = write_fairseq(tmp_path_factory.mktemp("fairseq") / "ckpt")
    model, src_dict, tgt_dict = fairseq.load(directory, "iwslt.pretrained", "de", "en")
    return fsmt, model.eval(), src_dict, tgt_dict


def _encode(texts, symbols, eos=True):
    index = {s: i for i, s in enumerate(symbols)}
    return [[index.get(w, fairseq.UNK) for w in t.split()] + ([fairseq.EOS] if eos else []) for t in texts]


def _pad(rows, width=None):
    width = width or max(len(r) for r in rows)
    out = torch.full((len(rows), width), fairseq.PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.as_tensor(r)
    return out


def test_teacher_forced_logits_match_fsmt(loaded):
    fsmt, model, src_dict, tgt_dict = loaded
    src = _pad(_encode(TEXT_DE[:5], src_dict))
    dec = _pad([[fairseq.EOS] + r for r in _encode(TEXT_EN[:5], tgt_dict, eos=False)])
    assert (src == fairseq.PAD).any()
    with torch.no_grad():
        # use_cache=False: FSMT builds its causal mask only then (with the cache it expects one step at a time)
        expected = fsmt(input_ids=src, attention_mask=src.ne(fairseq.PAD), decoder_input_ids=dec,
                        use_cache=False).logits
        width = max(src.shape[1], dec.shape[1])
        x = torch.cat([_pad(src.tolist(), width)[:, None], _pad(dec.tolist(), width)[:, None]], dim=1)
        got = model(x)
    assert got.shape == expected.shape
    real = dec.ne(fairseq.PAD)  # padded decoder positions feed no loss or decode (fairseq gives them position pad)
    assert not real.all()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)


def test_greedy_decode_matches_fsmt_generate(loaded):
    fsmt, model, src_dict, _ = loaded
    src = _pad(_encode(TEXT_DE[5:], src_dict))
    cap = 10
    with torch.no_grad():
        expected = fsmt.generate(input_ids=src, attention_mask=src.ne(fairseq.PAD), num_beams=1, do_sample=False,
                                 max_new_tokens=cap, min_length=0, bad_words_ids=[[fairseq.PAD]],
                                 forced_eos_token_id=fairseq.EOS, no_repeat_ngram_size=0, early_stopping=False)
        model.beam, model.len_a, model.len_b = 1, 0.0, cap
        got = model.generate(src)
    assert len({tuple(r.tolist()) for r in got}) > 1
    for ref_row, row in zip(expected[:, 1:], got):
        ref_ids = [int(i) for i in ref_row if int(i) not in (fairseq.PAD, fairseq.EOS)]
        assert [int(i) for i in row if int(i) != fairseq.PAD] == ref_ids


def test_layout_dictionaries_and_positions(loaded):
    _, model, src_dict, tgt_dict = loaded
    assert src_dict[:4] == list(fairseq.SPECIALS) and src_dict[4] == TEXT_DE[0].split()[0]
    cfg = model.cfg
    assert (cfg.pad, cfg.bos, cfg.eos, cfg.never_emit) == (1, 2, 2, (1,)) and not cfg.norm_first
    assert cfg.src_vocab == len(src_dict) and cfg.vocab == len(tgt_dict)
    assert model.decoder.head.weight is not model.decoder.embed.tok.weight  # FSMT's own output projection
    assert not model.encoder.embed.pos.weight.requires_grad


def test_dat_layout_narrow_decoder(tmp_path):
    directory, _ = write_fairseq(tmp_path / "dat", dec_dim=8)
    model, src_dict, _ = fairseq.load(directory, "iwslt.pretrained", "de", "en")
    model.eval()
    cfg = model.cfg
    assert (cfg.d_model, cfg.d_dec, cfg.mlp_dec) == (16, 8, 16)
    assert model.decoder.head.weight is model.decoder.embed.tok.weight  # share_decoder_input_output_embed
    cross = model.decoder.blocks[0].cross
    assert (cross.k.in_features, cross.k.out_features, cross.q.in_features) == (16, 8, 8)
    # cross-attention = torch's MultiheadAttention with kdim = vdim = d_enc (fairseq's construction)
    ref = torch.nn.MultiheadAttention(8, cfg.heads_dec, kdim=16, vdim=16, batch_first=True).eval()
    with torch.no_grad():
        ref.q_proj_weight.copy_(cross.q.weight)
        ref.k_proj_weight.copy_(cross.k.weight)
        ref.v_proj_weight.copy_(cross.v.weight)
        ref.in_proj_bias.copy_(torch.cat([cross.q.bias, cross.k.bias, cross.v.bias]))
        ref.out_proj.weight.copy_(cross.o.weight)
        ref.out_proj.bias.copy_(cross.o.bias)
        h, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 16)
        mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
        expected = ref(h, memory, memory, key_padding_mask=mask, need_weights=False)[0]
        got = cross(h, cross.memory_kv(memory), mask)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    # MACs of one teacher-forced forward: encoder as usual; decoder blocks with source K/V d_enc → d_dec
    s, t = 7, 6
    x = torch.full((2, 2, 7), fairseq.PAD)
    x[:, 0] = torch.randint(4, len(src_dict), (2, 7))
    x[:, 1, :t] = torch.randint(4, 10, (2, t))
    x[:, 1, 0] = fairseq.EOS
    de, dd, me, md, v = 16, 8, 32, 16, cfg.vocab
    enc = cfg.enc_layers * (s * (4 * de * de + 2 * de * me) + 2 * s * s * de)
    dec = cfg.dec_layers * (t * (4 * dd * dd + 2 * dd * md) + 2 * t * t * dd + 2 * t * dd * dd + 2 * s * de * dd
                            + 2 * t * s * dd)
    assert cost.count(model, x).macs == 2 * (enc + dec + t * dd * v)
