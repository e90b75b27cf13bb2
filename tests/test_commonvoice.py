"""Task ``commonvoice``: log-mel front-end against a hand-computed STFT, CTC decoding, WER normalisation,
counter agreement of the CTC encoder, and the data loaders (sentences, pocketsphinx, CommonVoice tsv)."""

from __future__ import annotations

import math
import shutil
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from bench import cost, runner
from bench.errors import UserError
from tasks.commonvoice import data as D
from tasks.commonvoice import features as F
from tasks.commonvoice import text as T
from tasks.commonvoice.model import build_ctc_encoder
from tests.helpers import compose_tiny

HAVE_ESPEAK = shutil.which(D.ESPEAK) is not None
HAVE_SENTENCES = Path(D.TRANS_DE_EN).exists()
HAVE_POCKETSPHINX = Path(D.POCKETSPHINX, "librivox", "transcription").exists()
needs_espeak = pytest.mark.skipif(not (HAVE_ESPEAK and HAVE_SENTENCES),
                                  reason="apt-get install espeak-ng trans-de-en")
needs_pocketsphinx = pytest.mark.skipif(not HAVE_POCKETSPHINX, reason="apt-get install pocketsphinx-testdata")


# --- front-end --------------------------------------------------------------------------------------
def test_power_spectrogram_matches_hand_computed_dft_on_a_tone():
    rate, freq = F.SAMPLE_RATE, 1000.0
    n = np.arange(4000)
    tone = (0.5 * np.sin(2 * np.pi * freq * n / rate)).astype(np.float32)
    ours = F.power_spectrogram(torch.from_numpy(tone).double()).numpy()  # [frames, 201]
    assert ours.shape == (F.n_frames(len(tone)), F.N_FFT // 2 + 1)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(F.N_FFT) / F.N_FFT)  # periodic Hann
    k = np.arange(F.N_FFT // 2 + 1)
    basis = np.exp(-2j * np.pi * np.outer(k, np.arange(F.N_FFT)) / F.N_FFT)
    for t in (0, 7, ours.shape[0] - 1):
        frame = tone[t * F.HOP: t * F.HOP + F.N_FFT].astype(np.float64) * window
        expected = np.abs(basis @ frame) ** 2
        np.testing.assert_allclose(ours[t], expected, rtol=1e-6, atol=1e-6)
    # 1 kHz falls on bin 1000 / (16000 / 400) = 25 exactly
    assert int(ours[3].argmax()) == 25
    # Parseval-style check of the hand DFT's peak: |X[25]|² = (A·Σw/2)² for a bin-centred sine
    assert ours[3, 25] == pytest.approx((0.5 * window.sum() / 2) ** 2, rel=1e-3)


def test_log_mel_is_log_of_filterbank_energy_and_peaks_at_the_tone():
    n_mels = 40
    tone = torch.sin(2 * math.pi * 1000.0 * torch.arange(8000, dtype=torch.float64) / F.SAMPLE_RATE)
    feats = F.log_mel(tone, n_mels)
    bank = F.mel_filterbank(n_mels).double()
    power = F.power_spectrogram(tone)
    torch.testing.assert_close(feats, torch.log(power @ bank + F.LOG_FLOOR))
    centres = F.mel_to_hz(torch.linspace(0.0, float(F.hz_to_mel(8000.0)), n_mels + 2, dtype=torch.float64))[1:-1]
    peak = int(feats[5].argmax())
    assert abs(float(centres[peak]) - 1000.0) < 80.0  # the band centred nearest 1 kHz
    assert float(F.hz_to_mel(1000.0)) == pytest.approx(1000.0, abs=0.1)  # HTK: 1000 Hz ≈ 1000 mel
    assert torch.all(bank.max(dim=0).values <= 1.0) and torch.all(bank.max(dim=0).values > 0.3)


def test_resample_keeps_a_tone_and_clip_pads_with_silence():
    rate = 22050
    tone = np.sin(2 * np.pi * 440.0 * np.arange(rate) / rate).astype(np.float32)
    out = F.resample(tone, rate)
    assert len(out) == F.SAMPLE_RATE
    spectrum = np.abs(np.fft.rfft(out))
    assert abs(int(spectrum.argmax()) - 440) <= 1  # 1 s of audio: bins are 1 Hz apart
    clipped = F.clip(out[:100], 300)
    assert clipped.shape == (300,) and np.all(clipped[100:] == 0) and np.array_equal(clipped[:100], out[:100])
    with pytest.raises(ValueError):
        F.clip(out, 100)


# --- text -------------------------------------------------------------------------------------------
def test_normalizer_and_vocabulary():
    assert T.normalize("  Don’t STOP, me-now!  ") == "don't stop me now"
    assert T.normalize("It costs 5 euros.") == "it costs euros"
    assert T.decode(T.encode("it's ok")) == "it's ok"
    assert T.VOCAB[T.BLANK] == "<blank>" and len(T.VOCAB) == 29
    with pytest.raises(KeyError):
        T.encode("Upper")


def test_greedy_ctc_merges_repeats_and_drops_blanks():
    a, b = T.encode("a")[0], T.encode("b")[0]
    path = [a, a, T.BLANK, a, b, b, T.BLANK, b, T.BLANK]
    logits = torch.full((2, len(path), len(T.VOCAB)), -5.0)
    for t, s in enumerate(path):
        logits[0, t, s] = 5.0
    logits[1, :, T.BLANK] = 5.0  # all blank → empty
    out = T.greedy_ctc(logits)
    assert T.rows_to_text(out) == ["aabb", ""]
    assert out.shape == (2, len(path)) and out[0, 4:].eq(-1).all()


def test_wer_uses_jiwer_after_normalisation():
    rates = T.error_rates(["The cat sat.", "Hello, World!", "a b c d"], ["the cat sat down", "hello world", "a x c"])
    # utterance edits: 1 insertion / 3 words; 0 / 2; 1 substitution + 1 deletion / 4
    assert rates["per_wer"] == pytest.approx([1 / 3, 0.0, 0.5])
    assert rates["wer"] == pytest.approx(3 / 9)
    import jiwer

    assert rates["wer"] == pytest.approx(jiwer.wer(["the cat sat", "hello world", "a b c d"],
                                                   ["the cat sat down", "hello world", "a x c"]))
    assert rates["cer"] == pytest.approx(jiwer.cer(["the cat sat", "hello world", "a b c d"],
                                                   ["the cat sat down", "hello world", "a x c"]))
    empty = T.error_rates(["two words"], [""])
    assert empty["wer"] == 1.0 and empty["per_cer"] == [1.0]


# --- model cost ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("frames", [198, 201, 298])
def test_ctc_encoder_analytic_macs_match_the_counter(frames):
    from bench.models.transformer import EncoderConfig

    model = build_ctc_encoder(EncoderConfig(d_model=16, n_layers=2, n_heads=2, d_mlp=32, pool="mean"), 12,
                              len(T.VOCAB)).eval()
    x = torch.randn(3, frames, 12)
    report = cost.count(model, x)
    out = model(x)
    tokens = out.shape[1]
    assert report.uncounted == []
    assert 3 * model.macs(tokens) == report.macs
    assert out.shape == (3, (((frames - 3) // 2 + 1) - 3) // 2 + 1, len(T.VOCAB))
    # the pooled-head convention (head counted at 1 token) still gives the per-token head cost
    assert model.head.macs(1) == tokens * 16 * len(T.VOCAB)


# --- data ---------------------------------------------------------------------------------------------
def test_sentence_reader_parses_the_dictionary_format(tmp_path):
    dictionary = tmp_path / "de-en"
    dictionary.write_text(
        "# comment :: line\n"
        "Geht es dir gut? | Alles klar? :: Are you all right? | Everything OK?\n"
        "Haus {n} :: house\n"
        "Er kommt. {v} :: He is coming. [Br.]; He comes.\n"
        "jdm. etw. geben :: To give sb. sth.\n"
        "Es kostet 5 Euro. :: It costs 5 euros.\n", encoding="utf-8")
    raw = D.english_sentences(str(dictionary))
    assert raw == ["Are you all right?", "Everything OK?", "He is coming.", "He comes.", "It costs 5 euros."]
    assert D.usable_sentences(raw, min_words=2, max_chars=40) == ["are you all right", "everything ok",
                                                                  "he is coming", "he comes"]
    with pytest.raises(UserError, match="trans-de-en"):
        D.english_sentences(str(tmp_path / "missing"))


@needs_pocketsphinx
def test_pocketsphinx_recordings_have_transcripts():
    items = D.pocketsphinx_utterances()
    assert len(items) == 10
    texts = dict((p.name, t) for p, t in items)
    assert texts["sense_and_sensibility_01_austen_64kb-0880.wav"] == "he was not an ill disposed young man"
    assert texts["001.wav"] == "ten of clubs"
    audio, rate = F.read_wav(items[0][0])
    assert rate == 16000 and audio.dtype == np.float32 and 0.05 < np.abs(audio).max() <= 1.0


def _write_wav(path: Path, audio: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())


@needs_espeak
def test_commonvoice_tsv_layout_through_datasets(tmp_path):
    """A tiny local dataset in CommonVoice's release layout (tsv + clips/), spoken by espeak-ng."""
    root = tmp_path / "cv"
    (root / "clips").mkdir(parents=True)
    sentences = {"train": ["The dog runs fast.", "I like green tea.", "Where is the station?", "Open the door."],
                 "test": ["The cat sleeps.", "Close the window."]}
    for split, lines in sentences.items():
        rows = ["client_id\tpath\tsentence\tup_votes"]
        for i, sentence in enumerate(lines):
            name = f"{split}_{i}.wav"
            audio = D.synthesize(sentence, "en-us", 170, 50, str(tmp_path))
            _write_wav(root / "clips" / name, audio, F.SAMPLE_RATE)
            rows.append(f"c{i}\t{name}\t{sentence}\t2")
        (root / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    items = D.tsv_items(str(root), "test", "sentence", "path")
    assert [s for _, s in items] == ["the cat sleeps", "close the window"]
    cfg = compose_tiny("dense", "commonvoice", tmp_path, "commonvoice.source=tsv", f"commonvoice.data_dir={root}",
                       "commonvoice.train_utterances=0", "commonvoice.eval_utterances=0")
    _, task, _ = runner.build(cfg, "dense", "commonvoice")
    assert len(task.train) == 4 and len(task.eval) == 2
    assert "commonvoice (" in task.dataset and "test: 2 utterances" in task.dataset
    batch = next(iter(task.eval_batches()))
    assert T.rows_to_text(batch.y) == ["the cat sleeps", "close the window"]
    assert batch.x.shape[1] == F.n_frames(task.clip_samples)  # both fit the 2 s clip


def test_missing_commonvoice_directory_is_one_clear_line(tmp_path):
    cfg = compose_tiny("dense", "commonvoice", tmp_path, "commonvoice.source=tsv",
                       f"commonvoice.data_dir={tmp_path / 'nowhere'}")
    with pytest.raises(UserError) as err:
        runner.build(cfg, "dense", "commonvoice")
    message = str(err.value)
    assert "\n" not in message and "commonvoice.data_dir=" in message and "train.tsv" in message


@needs_espeak
def test_tiny_run_writes_wer_row_with_cer_and_texts(tmp_path):
    cfg = compose_tiny("dense", "commonvoice", tmp_path, "timing=false")
    written = runner.run(cfg, "dense", "commonvoice", "test")
    from bench import results

    rows = results.load(tmp_path / "results")
    assert len(written) == 1 and len(rows) == 1
    row = rows.iloc[0]
    assert row["metric"] == "wer" and not row["higher_is_better"]
    assert "norm:bench-en-v1" in row["metric_signature"] and row["extra_metrics"].startswith("cer=")
    assert row["macs_counted_mean"] == pytest.approx(row["macs_mean"], rel=1e-9)
    samples = results.load_samples(tmp_path / "results", "commonvoice", "dense", row["run_id"])
    assert {"target", "prediction", "score", "cer", "macs"} <= set(samples.columns)
    assert all(isinstance(t, str) and t for t in samples["target"])
    from tasks.commonvoice.figures import draw

    (figure,) = draw(rows, tmp_path / "results", tmp_path / "reports", "commonvoice")
    assert figure.name == "commonvoice_wer_cer.png" and figure.stat().st_size > 1000


def test_a_base_key_and_plan_need_no_corpus(tmp_path):
    """The task builds its corpora on first use: a base model's key (a shipped artefact's check, a plan line,
    "this point has a row") reads the configuration only; the first batch then builds them."""
    cfg = compose_tiny("dense", "commonvoice", tmp_path)
    run, task, _ = runner.build(cfg, "dense", "commonvoice")
    key = run.base_key(task)
    assert key["task"] == "commonvoice" and not {"train", "eval", "_feature_stats"} & set(vars(task))
    assert not list((tmp_path / "cache").rglob("*.pt"))  # no corpus written to the cache either
    batch = task.train_batch(0, 2)
    assert len(batch) == 2 and {"train", "_feature_stats"} <= set(vars(task))
