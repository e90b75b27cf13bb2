"""CommonVoice read lazily (``commonvoice.streaming=true``, ``source=tsv``): audio is decoded when it is used.

The map-style reader (task.py ``_recordings``) computes every selected clip's features up front and keeps
them in memory and in one cache file: fine for the offline sets, about 0.3 MB per 10 s clip at 80 bins,
so hundreds of GB for a full English release.  Here:

* **Training** keeps only the item table (audio path, normalised sentence) of the clips that fit
  ``clip_seconds`` (durations decide which fit).  The batch of step s is still drawn from (seed, s) alone (random access into that
  table, as imagenet's memory-mapped training split), and only its clips are decoded, in the DataLoader's
  workers when ``num_workers`` > 0; under data parallelism each rank decodes only its rows
  (``CommonVoiceTask.train_shard``).  Durations come from the release's ``clip_durations.tsv`` (columns
  ``clip``, ``duration[ms]``) when it lists every clip, otherwise from each file (a WAV's header; other
  formats are decoded once), computed by one process under a file lock and cached per item list.
* **Evaluation** reads ``<eval_split>.tsv`` once as a streamed HuggingFace ``IterableDataset`` (csv builder,
  tab-separated) into the split's item table (paths and sentences of the first ``eval_utterances``, no
  audio) and decodes one batch of clips at a time from that table.  The table's durations (as for
  training) size the clip, so that every evaluation clip has the map-style reader's length: the longest of those
  utterances rounded up to 0.5 s, at least ``clip_seconds``; ``eval_samples`` then stops the evaluation
  early without changing that length, as in the map-style reader.

Standardisation: the map-style reader standardises log-mels by the mean and deviation over every training
frame; streaming uses :data:`NORM_UTTERANCES` training clips spread evenly over the table (all of them
when there are fewer), cached, so the two readers can train slightly different models (the base model's
key includes ``streaming``).
"""

from __future__ import annotations

import csv
import math
import os
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import Tensor

from bench.errors import UserError
from bench.results import stable_hash
from tasks.commonvoice import data as D
from tasks.commonvoice import features as F
from tasks.commonvoice import text as T

NORM_UTTERANCES = 1000  # training clips whose log-mel frames give the standardisation statistics
DURATIONS_FILE = "clip_durations.tsv"  # CommonVoice releases: clip name, duration in milliseconds
Featurize = Callable[[np.ndarray], Tensor]  # [N, samples] clips -> the model's input


def seconds_of(path: Path | str) -> float:
    """Speech length of one file at 16 kHz: a WAV's header, any other format decoded."""
    path = str(path)
    if path.lower().endswith(".wav"):
        try:
            with wave.open(path, "rb") as handle:
                return handle.getnframes() / handle.getframerate()
        except (wave.Error, EOFError):
            pass  # not PCM: decode it below
    audio, rate = D.read_audio(path)
    return len(audio) / rate


def release_durations(data_dir: str) -> dict[str, float]:
    """clip name -> seconds from ``<data_dir>/clip_durations.tsv`` ({} without it)."""
    path = Path(data_dir) / DURATIONS_FILE
    if not path.exists():
        return {}
    out = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            try:
                out[row["clip"]] = float(row["duration[ms]"]) / 1000.0
            except (KeyError, TypeError, ValueError):
                raise UserError(f"commonvoice: {path} needs columns 'clip' and 'duration[ms]' (a CommonVoice "
                                "release's clip_durations.tsv); remove or fix it") from None
    return out


def _cached_array(path: Path, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """``compute()`` saved at ``path`` once: one process computes under a file lock (data-parallel ranks
    wait for it), the others load it."""
    from filelock import FileLock

    if path.exists():
        return np.load(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock"):
        if path.exists():
            return np.load(path)
        value = np.asarray(compute())
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npy")
        np.save(tmp, value)
        os.replace(tmp, path)
    return value


# Behaviour version of the streamed corpora's statistics and clip sizes (this module and the features it
# computes): part of their cache keys; bump it when a change can alter them.
STREAMING_VERSION = 1


def _items_key(items: list[tuple[Path, str]] | list[Path], *extra: Any) -> str:
    paths = [p if isinstance(p, Path) else p[0] for p in items]
    listed = [(str(p), os.path.getsize(p)) for p in paths]
    return stable_hash([listed, list(map(str, extra)), f"v{STREAMING_VERSION}"])


def durations(items: list[tuple[Path, str]], data_dir: str, cache_dir: Path) -> np.ndarray:
    """Seconds of every item: the release's table when it lists them all, else the files (cached)."""
    table = release_durations(data_dir)
    if table and all(p.name in table for p, _ in items):
        return np.array([table[p.name] for p, _ in items], dtype=np.float64)
    path = Path(cache_dir) / "commonvoice" / "data" / f"durations-{_items_key(items)}.npy"
    return _cached_array(path, lambda: np.array([seconds_of(p) for p, _ in items], dtype=np.float64))


def decode(paths: list[Path | str], clip_samples: int) -> np.ndarray:
    """[N, clip_samples] 16 kHz clips of ``paths`` (resampled, padded with silence)."""
    return np.stack([F.clip(F.resample(*D.read_audio(p)), clip_samples) for p in paths])


@dataclass
class LazyClips:
    """The training clips that fit the clip, decoded when a batch draws them."""

    paths: list[Path]
    texts: list[str]
    clip_samples: int
    width: int  # label columns (the longest sentence)
    dropped: int  # clips longer than the clip, left out

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def description(self) -> str:
        note = f" ({self.dropped} longer than the clip left out)" if self.dropped else ""
        return f"{len(self)} utterances{note}, decoded per step"

    def batch(self, idx: np.ndarray, featurize: Featurize) -> tuple[Tensor, Tensor]:
        clips = decode([self.paths[i] for i in idx], self.clip_samples)
        labels = T.pad_ids([T.encode(self.texts[i]) for i in idx], self.width)
        return featurize(clips), labels


def lazy_training_set(items: list[tuple[Path, str]], *, data_dir: str, clip_samples: int,
                      cache_dir: Path) -> LazyClips:
    seconds = durations(items, data_dir, cache_dir)
    keep = np.flatnonzero(seconds * F.SAMPLE_RATE <= clip_samples)
    kept = [items[i] for i in keep]
    width = max([len(s) for _, s in kept] + [1])
    return LazyClips([p for p, _ in kept], [s for _, s in kept], clip_samples, width, len(items) - len(kept))


def log_mel_statistics(train: LazyClips, n_mels: int, cache_dir: Path) -> tuple[Tensor, Tensor]:
    """Mean and deviation per mel bin over the frames of :data:`NORM_UTTERANCES` training clips spread
    evenly over the table (every clip when there are fewer), accumulated a chunk at a time in float64;
    computed once per clip list (cached)."""
    n = len(train)
    chosen = np.unique(np.linspace(0, n - 1, min(NORM_UTTERANCES, n)).round().astype(np.int64))
    paths = [train.paths[i] for i in chosen]

    def compute() -> np.ndarray:
        total, squares, frames = np.zeros(n_mels), np.zeros(n_mels), 0
        for start in range(0, len(paths), 64):
            feats = F.clips_to_features(decode(paths[start:start + 64], train.clip_samples), n_mels)
            flat = feats.reshape(-1, n_mels).double().numpy()
            total += flat.sum(axis=0)
            squares += (flat * flat).sum(axis=0)
            frames += flat.shape[0]
        mean = total / frames
        var = (squares - frames * mean * mean) / max(frames - 1, 1)  # unbiased, as torch.std
        return np.stack([mean, np.sqrt(np.clip(var, 0.0, None))])

    path = Path(cache_dir) / "commonvoice" / "data" / f"logmel-stats-{_items_key(paths, n_mels, train.clip_samples)}.npy"
    mean, std = torch.from_numpy(_cached_array(path, compute)).float()
    return mean, std.clamp_min(1e-3)


class EvalStream:
    """``<split>.tsv`` of a release read as a streamed HuggingFace ``IterableDataset``."""

    def __init__(self, *, data_dir: str, split: str, text_key: str, path_key: str, limit: int,
                 min_clip_samples: int, cache_dir: Path, evaluate: int = 0):
        """``limit``: the split's first N utterances (0 = all) size the clip; ``evaluate``: evaluate the
        first N of them (0 = all)."""
        self.data_dir, self.split, self.limit = data_dir, split, limit
        self.text_key, self.path_key = text_key, path_key
        tsv = Path(data_dir) / f"{split}.tsv"
        if not data_dir or not tsv.exists():
            raise UserError(f"commonvoice.data_dir={data_dir or '(unset)'}: no {split}.tsv there; point it at a "
                            "CommonVoice release directory (<split>.tsv + clips/)")
        self.tsv = tsv
        items = list(self._read_items())  # the item table (paths and sentences, no audio)
        if not items:
            raise UserError(f"commonvoice: {tsv} has no utterance with a transcript")
        seconds = durations(items, data_dir, cache_dir)
        self.width = max(len(s) for _, s in items)  # label columns: the longest sentence (every batch alike)
        self.clip_samples = max(min_clip_samples, F.seconds_to_samples(math.ceil(float(seconds.max()) * 2) / 2))
        self.items, self.total = items, len(items)
        self.count = min(evaluate, self.total) if evaluate else self.total  # the utterances evaluated
        self.speech_share = float(seconds.sum()) / (self.total * self.clip_samples / F.SAMPLE_RATE)

    def _rows(self) -> Iterator[dict[str, Any]]:
        from datasets import load_dataset

        stream = load_dataset("csv", data_files={self.split: str(self.tsv)}, delimiter="\t", split=self.split,
                              quoting=3, keep_default_na=False, streaming=True)
        return iter(stream)

    def _read_items(self) -> Iterator[tuple[Path, str]]:
        """(audio path, normalised sentence) of the split's rows with a transcript, the first ``limit``."""
        clips = Path(self.data_dir) / "clips"
        seen = 0
        for row in self._rows():
            if self.limit and seen >= self.limit:
                return
            for key in (self.text_key, self.path_key):
                if key not in row:
                    raise UserError(f"commonvoice: {self.tsv} has no column '{key}' (columns: {', '.join(row)}); "
                                    "set commonvoice.text_key / commonvoice.path_key")
            name = str(row[self.path_key])
            path = Path(name) if os.path.isabs(name) else (clips / name if clips.is_dir() else Path(self.data_dir) / name)
            sentence = T.normalize(str(row[self.text_key]))
            if not sentence:
                continue
            if not path.exists():
                raise UserError(f"commonvoice: audio file {path} of {self.tsv} is missing")
            seen += 1
            yield path, sentence

    def batches(self, size: int, featurize: Featurize) -> Iterator[tuple[Tensor, Tensor, list[str]]]:
        """(inputs, labels, sentences) of ``size`` consecutive utterances of the first ``count``, each batch
        decoded when it is yielded."""
        for start in range(0, self.count, size):
            yield self._batch(self.items[start:min(self.count, start + size)], featurize)

    def _batch(self, chunk: list[tuple[Path, str]], featurize: Featurize) -> tuple[Tensor, Tensor, list[str]]:
        texts = [s for _, s in chunk]
        clips = decode([p for p, _ in chunk], self.clip_samples)
        return featurize(clips), T.pad_ids([T.encode(t) for t in texts], self.width), texts
