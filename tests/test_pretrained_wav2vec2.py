"""wav2vec 2.0 / XLS-R checkpoints load into the skeleton and compute what HF's Wav2Vec2ForCTC computes.

A tiny random ``Wav2Vec2ForCTC`` is written by ``save_pretrained`` in both layer-norm orders (base:
group-norm feature encoder and post-norm blocks; stable: layer-norm feature encoder and pre-norm blocks);
bench's model must give the same CTC logits (1e-5, fp32) on raw 16 kHz audio (HF's feature extractor
normalises it, ours does the same inside the model) and the same greedy transcripts as HF's tokenizer.
MACs: the counter agrees with the analytic formula at the tiny size, and at the full XLS-R-300M and
wav2vec2-base sizes (built on the meta device: shapes only) with the formula written out here from the
published architecture.
"""

import pytest
import torch

from bench import cost
from tasks.commonvoice import text as T
from tasks.commonvoice.pretrained import build_model
from tests.pretrained_fixtures import write_wav2vec2


@pytest.fixture(scope="module", params=[False, True], ids=["base-postnorm", "stable-prenorm"])
def checkpoint(request, tmp_path_factory):
    return write_wav2vec2(tmp_path_factory.mktemp("w2v") / "ckpt", stable=request.param), request.param


def test_logits_and_greedy_decode_match_transformers(checkpoint):
    from transformers import Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC, Wav2Vec2Processor

    directory, stable = checkpoint
    ref = Wav2Vec2ForCTC.from_pretrained(str(directory)).eval()
    processor = Wav2Vec2Processor.from_pretrained(str(directory))
    assert isinstance(processor.feature_extractor, Wav2Vec2FeatureExtractor)
    model, vocab, shape, _, _ = build_model(str(directory), "commonvoice.pretrained")
    model.eval()
    assert shape.stable == stable and model.blocks[0].norm_first == stable
    torch.manual_seed(0)
    audio = [torch.randn(16000 * 2).mul(0.1).numpy() for _ in range(3)]
    inputs = processor(audio, sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        expected = ref(inputs.input_values).logits
        got = model(torch.stack([torch.from_numpy(a) for a in audio]))
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # greedy CTC: HF's tokenizer on the argmax ids (repeats collapsed on the frame sequence, blanks dropped)
    # with the special-token strings then removed, vs the task's decoding through the vocabulary map.
    # (skip_special_tokens=True would drop <s>/<unk> *before* collapsing repeats, merging "b <unk> b".)
    texts = processor.batch_decode(expected.argmax(-1))
    for special in ("<s>", "</s>", "<unk>"):
        texts = [t.replace(special, "") for t in texts]
    ours = T.rows_to_text(vocab.greedy(got))
    assert [T.normalize(t) for t in texts] == [T.normalize(t) for t in ours]
    assert any(t.strip() for t in ours), "the random model should emit some characters (a test with teeth)"


def test_targets_map_into_the_checkpoint_vocabulary(checkpoint):
    directory, _ = checkpoint
    _, vocab, _, _, _ = build_model(str(directory), "commonvoice.pretrained")
    ids = T.pad_ids([T.encode("it's a b")], 10)
    mapped = vocab.targets(ids)
    from transformers import Wav2Vec2CTCTokenizer

    tok = Wav2Vec2CTCTokenizer.from_pretrained(str(directory))
    assert mapped[0, :8].tolist() == tok("IT'S A B").input_ids
    assert mapped[0, 8:].tolist() == [-1, -1]


def test_counted_macs_equal_the_analytic_formula_at_tiny_size(checkpoint):
    directory, _ = checkpoint
    model, _, shape, _, _ = build_model(str(directory), "commonvoice.pretrained")
    wave = torch.randn(2, 32000)
    counted = cost.count(model, wave)
    assert counted.uncounted == []
    tokens = shape.frames(32000)
    assert counted.macs == 2 * model.macs(tokens)


def _published_formula(samples: int, conv: list[tuple[int, int, int]], d: int, layers: int, mlp: int,
                       pos_kernel: int = 128, pos_groups: int = 16, vocab: int = 32) -> tuple[int, int]:
    """MACs of a wav2vec 2.0 CTC model on ``samples`` (Baevski et al. 2020, §2 and App. B): the conv
    feature encoder, the projection, the grouped position conv (T + 1 outputs for an even kernel), per
    layer 4·T·d² + 2·T·d·mlp + 2·T²·d, and the CTC head T·d·V.  Returns (total, frames)."""
    length, c_in, total = samples, 1, 0
    for c_out, k, s in conv:
        length = (length - k) // s + 1
        total += length * c_in * k * c_out
        c_in = c_out
    t = length
    total += t * c_in * d + (t + 1) * (d // pos_groups) * pos_kernel * d
    total += layers * (4 * t * d * d + 2 * t * d * mlp + 2 * t * t * d) + t * d * vocab
    return total, t


@pytest.mark.parametrize("name", ["base", "xlsr_300m"])
def test_full_size_macs_on_meta_device(name):
    """wav2vec2-base and XLS-R-300M at full size (meta tensors: shapes only), 1 s of audio: the counter
    equals the published-architecture formula; XLS-R-300M is about 17.8 GMACs per second (derived from
    the architecture) with 49 frames."""
    from tasks.commonvoice import wav2vec2 as W
    from tasks.commonvoice.model import CTCEncoder, FrameHead

    shape = {"base": W.BASE, "xlsr_300m": W.XLSR_300M}[name]
    with torch.device("meta"):
        model = CTCEncoder(shape.encoder_config(), W.Wav2Vec2FrontEnd(shape), FrameHead(shape.hidden, 32)).eval()
        wave = torch.empty(1, 16000)
        counted = cost.count(model, wave).macs
    conv = [(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512, 2, 2)] * 2
    expected, frames = _published_formula(16000, conv, shape.hidden, shape.layers, shape.mlp)
    assert frames == 49
    assert counted == expected
    assert counted == model.macs(frames)
    if name == "xlsr_300m":
        assert counted / 1e9 == pytest.approx(17.8, rel=0.02)
