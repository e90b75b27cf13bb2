"""``commonvoice.streaming=true``: a CommonVoice release read lazily (tasks/commonvoice/streaming.py).

The streamed reader must give the batches of the map-style reader (training batches of the same step, the
evaluation batches in order, the same evaluation clip length) while holding one batch of audio at a time.
The fixture is a tiny release in CommonVoice's layout whose clips are tones (no speech engine needed).
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from bench import runner
from bench.errors import UserError
from tasks.commonvoice import data as D
from tasks.commonvoice import features as F
from tasks.commonvoice import streaming as S
from tests.helpers import compose_tiny

WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight")


def _write_wav(path: Path, seconds: float, freq: float) -> None:
    t = np.arange(int(seconds * F.SAMPLE_RATE)) / F.SAMPLE_RATE
    audio = 0.3 * np.sin(2 * np.pi * freq * t)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(F.SAMPLE_RATE)
        handle.writeframes((audio * 32767).astype("<i2").tobytes())


def _release(root: Path, n_train: int = 14, n_test: int = 11, durations_file: bool = False) -> Path:
    """train.tsv / test.tsv + clips/: clip i lasts 0.4 + 0.13 i s (train clips past 2 s are too long for
    the tiny 2 s clip), with a two-word sentence."""
    (root / "clips").mkdir(parents=True)
    listed = ["clip\tduration[ms]"]
    for split, n in (("train", n_train), ("test", n_test)):
        rows = ["client_id\tpath\tsentence\tup_votes"]
        for i in range(n):
            name, seconds = f"{split}_{i}.wav", 0.4 + 0.13 * i
            _write_wav(root / "clips" / name, seconds, 200.0 + 37.0 * i)
            rows.append(f"c{i}\t{name}\t{WORDS[i % 8].title()} {WORDS[(3 * i) % 8]}.\t2")
            listed.append(f"{name}\t{round(seconds * 1000)}")
        (root / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    if durations_file:
        (root / S.DURATIONS_FILE).write_text("\n".join(listed) + "\n", encoding="utf-8")
    return root


def _task(tmp: Path, root: Path, *extra: str):
    cfg = compose_tiny("dense", "commonvoice", tmp, "commonvoice.source=tsv", f"commonvoice.data_dir={root}",
                       "commonvoice.train_utterances=0", "commonvoice.eval_utterances=0",
                       "commonvoice.spec_augment=false", *extra)
    return runner.build(cfg, "dense", "commonvoice")[1]


def test_streamed_reader_gives_the_map_style_batches(tmp_path):
    root = _release(tmp_path / "cv")
    mapped, streamed = _task(tmp_path, root), _task(tmp_path, root, "commonvoice.streaming=true")
    assert isinstance(streamed.train, S.LazyClips) and isinstance(streamed.eval, S.EvalStream)
    assert len(streamed.train) == len(mapped.train) == 13  # clip 13 (2.09 s) does not fit the 2 s clip
    assert streamed.train.dropped == 1 and "1 longer than the clip left out" in streamed.dataset
    for step in (0, 5):
        a, b = mapped.train_batch(step, 4), streamed.train_batch(step, 4)
        torch.testing.assert_close(b.x, a.x, rtol=0, atol=0)
        assert torch.equal(b.y[:, : a.y.shape[1]], a.y) and bool((b.y[:, a.y.shape[1]:] == -1).all())
    pairs = list(zip(mapped.eval_batches(), streamed.eval_batches(), strict=True))
    assert len(pairs) == -(-11 // int(mapped.cfg.eval_batch)) > 1  # 11 utterances
    for a, b in pairs:
        torch.testing.assert_close(b.x, a.x, rtol=0, atol=0)  # same clip length: the longest, rounded up
        assert torch.equal(b.y, a.y) and torch.equal(b.meta["index"], a.meta["index"])
    # fewer than 1000 training clips: the statistics are over every training frame, as the map-style ones
    torch.testing.assert_close(streamed.mean, mapped.mean, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(streamed.std, mapped.std, rtol=1e-4, atol=1e-4)
    assert "test streamed: 11 utterances" in streamed.dataset
    assert streamed.example_input(6).shape == mapped.example_input(6).shape


def test_eval_samples_stops_the_stream_without_changing_the_clip(tmp_path):
    """``eval_samples`` evaluates the first N utterances; the clip length is still sized over the whole
    (``eval_utterances``) set, as in the map-style reader, so padding and cost do not depend on N."""
    root = _release(tmp_path / "cv")
    short = ("commonvoice.eval_samples=5", "commonvoice.clip_seconds=1.0")  # the first 5 clips fit 1 s
    mapped = _task(tmp_path, root, *short)
    streamed = _task(tmp_path, root, *short, "commonvoice.streaming=true")
    a, b = [torch.cat([batch.x for batch in t.eval_batches()]) for t in (mapped, streamed)]
    assert len(b) == 5 and torch.equal(a[:5], b)
    assert streamed.eval.clip_samples == F.seconds_to_samples(2.0)  # the longest test clip (1.7 s) sizes it
    assert "first 5" in streamed.dataset


def test_data_parallel_shards_decode_only_their_rows(tmp_path, monkeypatch):
    """Each rank's shard (indices and SpecAugment masks drawn for the whole batch) is exactly its rows of
    the single-process batch, and a streamed shard decodes only those clips."""
    root = _release(tmp_path / "cv")
    for streaming in ("false", "true"):
        task = _task(tmp_path, root, f"commonvoice.streaming={streaming}", "commonvoice.spec_augment=true")
        whole = task.train_batch(3, 6)
        decoded: list[str] = []
        read = D.read_audio
        monkeypatch.setattr(D, "read_audio", lambda path: (decoded.append(Path(path).name), read(path))[1])
        shards = [task.train_shard(3, 6, rank, 2) for rank in (0, 1)]
        monkeypatch.setattr(D, "read_audio", read)
        assert torch.equal(torch.cat([s.x for s in shards]), whole.x)
        assert torch.equal(torch.cat([s.meta["index"] for s in shards]), whole.meta["index"])
        assert len(decoded) == (6 if streaming == "true" else 0)  # each clip once, by its own rank
        assert not torch.equal(whole.x, _task(tmp_path, root, f"commonvoice.streaming={streaming}").train_batch(3, 6).x)


def test_streamed_evaluation_holds_one_batch_of_audio(tmp_path, monkeypatch):
    """Measuring the evaluation clips reads WAV headers only; then each batch decodes its own clips, as it
    is yielded: when the first batch arrives, only its clips have been decoded."""
    root = _release(tmp_path / "cv", n_test=40)
    task = _task(tmp_path, root, "commonvoice.streaming=true", "commonvoice.eval_batch=5")
    decoded: list[str] = []
    read = D.read_audio
    monkeypatch.setattr(D, "read_audio", lambda path: (decoded.append(Path(path).name), read(path))[1])
    batches = task.eval_batches()
    first = next(batches)
    assert len(first.y) == 5 and decoded == [f"test_{i}.wav" for i in range(5)]
    assert sum(1 for _ in batches) == 7 and len(decoded) == 40
    monkeypatch.setattr(S, "seconds_of", lambda path: pytest.fail(f"measured {path} again"))
    again = S.EvalStream(data_dir=str(root), split="test", text_key="sentence", path_key="path", limit=0,
                         evaluate=12, min_clip_samples=task.clip_samples, cache_dir=tmp_path / "cache")
    assert again.count == 12 and again.clip_samples == task.eval.clip_samples  # durations come from the cache
    assert len(decoded) == 40  # and measuring a stream decodes nothing


def test_release_durations_table_is_used_when_it_lists_every_clip(tmp_path, monkeypatch):
    root = _release(tmp_path / "cv", durations_file=True)
    monkeypatch.setattr(S, "seconds_of", lambda path: pytest.fail(f"read {path} although the table lists it"))
    items = D.tsv_items(str(root), "train", "sentence", "path")
    seconds = S.durations(items, str(root), tmp_path / "cache")
    np.testing.assert_allclose(seconds, [round((0.4 + 0.13 * i) * 1000) / 1000 for i in range(14)])
    stream = S.EvalStream(data_dir=str(root), split="test", text_key="sentence", path_key="path", limit=0,
                          min_clip_samples=F.seconds_to_samples(1.0), cache_dir=tmp_path / "cache")
    assert stream.count == 11 and stream.clip_samples == F.seconds_to_samples(2.0)  # 1.7 s, rounded up


def test_streamed_run_writes_a_row(tmp_path):
    root = _release(tmp_path / "cv")
    cfg = compose_tiny("dense", "commonvoice", tmp_path, "commonvoice.source=tsv", f"commonvoice.data_dir={root}",
                       "commonvoice.train_utterances=0", "commonvoice.eval_utterances=0",
                       "commonvoice.streaming=true", "timing=false", "num_workers=1")
    written = runner.run(cfg, "dense", "commonvoice", "test")
    row = pd.read_csv(written[0]).iloc[0]
    assert row["n_eval"] == 11 and "test streamed" in row["dataset"] and row["cost_check"] == "agree"


def test_streaming_needs_a_release(tmp_path):
    with pytest.raises(UserError) as err:
        _task(tmp_path, tmp_path, "commonvoice.source=espeak", "commonvoice.streaming=true")
    assert "\n" not in str(err.value) and "commonvoice.streaming=true" in str(err.value)
