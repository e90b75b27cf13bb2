"""Corpora of the speech task: (log-mel clips, character labels, texts), built once and cached.

Sources:
- ``espeak``: real English sentences (the English side of Debian's ``trans-de-en`` dictionary, the
  full-sentence entries) spoken by Debian's ``espeak-ng`` with voices, speeds and pitches drawn per
  utterance from a seeded generator.  Sentences are normalised (text.normalize); those with digits, fewer
  than ``min_words`` words, more than ``max_chars`` characters, or whose speech is longer than the clip are
  left out.  The distinct sentences are shuffled with a fixed seed and split: the first ``eval_utterances``
  are the evaluation set, the next ``train_utterances`` the training set (no sentence in both).
- ``pocketsphinx``: the real recordings of Debian's ``pocketsphinx-testdata`` that have transcripts
  (librivox/*.wav: read speech; cards/*.wav: spoken card names) — a real-speech smoke test (10 clips).
- ``tsv``: a CommonVoice release directory (``<split>.tsv`` with ``path`` and ``sentence`` columns, audio
  under ``clips/``) read through HuggingFace ``datasets`` (csv builder, tab-separated); audio files are kept
  as paths and decoded with ``wave`` (16-bit WAV) or, for mp3 and other formats, torchcodec 0.12.0 (CPU).

A corpus is stored as a dict: ``features`` [N, frames, n_mels] float32 log-mel (not standardised),
``labels`` [N, W] long (-1 padded), ``texts`` (normalised), ``seconds`` (speech length before padding),
and ``source`` (a description for the row's dataset column).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from bench.errors import UserError
from bench.results import stable_hash
from tasks.commonvoice import features as F
from tasks.commonvoice import text as T

# Behaviour version of corpus making (this module, features.py and text.py): part of every cached corpus's
# key; bump it when a change can alter a synthesised or read corpus.
CORPUS_VERSION = 1

TRANS_DE_EN = "/usr/share/trans/de-en"
POCKETSPHINX = "/usr/share/pocketsphinx/test/data"
ESPEAK = "espeak-ng"
# espeak-ng's own English voices (gmw/…) and voice variants (!v/…): 7 accents × 12 variants.
ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029")
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "f1", "f2", "f3", "f4", "f5", "klatt")
SPEED = (140, 200)  # words per minute (espeak-ng -s), uniform integer range
PITCH = (30, 70)  # espeak-ng -p (0..99), uniform integer range
_PLACEHOLDERS = {"sb", "sth", "sbd", "etw", "jdn", "jdm", "jds"}
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|\([^)]*\)")


# --- sentences ---------------------------------------------------------------------------------------
def english_sentences(path: str = TRANS_DE_EN) -> list[str]:
    """Distinct English full sentences of the Ding dictionary, in file order (raw, not normalised).

    Lines are ``de | de2 :: en | en2``; every English alternative (`` | ``) and every ``; ``-separated
    part of it is a candidate, with ``{…}``, ``[…]`` and ``(…)`` annotations removed.  A sentence starts
    with an upper-case letter, ends with ``.``, ``?`` or ``!``, has a space, no ``/`` choices and no
    dictionary placeholders (sb, sth, …)."""
    if not os.path.exists(path):
        raise UserError(f"commonvoice: {path} not found; install Debian's trans-de-en "
                        "(apt-get install -y trans-de-en) or set commonvoice.sentences")
    seen: dict[str, None] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.startswith("#") or " :: " not in line:
                continue
            for alternative in line.split(" :: ", 1)[1].split(" | "):
                for part in _ANNOTATION.sub("", alternative).split("; "):
                    english = " ".join(part.split())
                    words = set(re.split(r"[^A-Za-z]+", english))
                    if (len(english) > 1 and english[0].isupper() and english[-1] in ".?!" and " " in english
                            and not words & _PLACEHOLDERS and "/" not in english):
                        seen.setdefault(english, None)
    return list(seen)


def usable_sentences(raw: list[str], *, min_words: int, max_chars: int) -> list[str]:
    out: dict[str, None] = {}
    for sentence in raw:
        if any(c.isdigit() for c in sentence):
            continue
        norm = T.normalize(sentence)
        if norm and len(norm.split()) >= min_words and len(norm) <= max_chars:
            out.setdefault(norm, None)
    return list(out)


# --- synthesis ----------------------------------------------------------------------------------------
def voice_plan(n: int, seed: int) -> list[tuple[str, int, int]]:
    """Per utterance (voice, speed wpm, pitch), from a generator seeded by ``seed``."""
    rng = np.random.default_rng(seed)
    voices = [f"{a}+{v}" for a in ACCENTS for v in VARIANTS]
    return [(voices[int(rng.integers(len(voices)))], int(rng.integers(SPEED[0], SPEED[1] + 1)),
             int(rng.integers(PITCH[0], PITCH[1] + 1))) for _ in range(n)]


def synthesize(sentence: str, voice: str, speed: int, pitch: int, workdir: str) -> np.ndarray:
    """16 kHz float32 speech of ``sentence`` from espeak-ng (its 22.05 kHz output resampled)."""
    out = os.path.join(workdir, "utt.wav")
    try:
        subprocess.run([ESPEAK, "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", out, sentence],
                       check=True, capture_output=True, timeout=60)
    except FileNotFoundError:
        raise UserError("commonvoice: espeak-ng not found; install it (apt-get install -y espeak-ng) "
                        "or point the task at real data (commonvoice.source=tsv)") from None
    audio, rate = F.read_wav(out)
    return F.resample(audio, rate)


def trim_silence(audio: np.ndarray, threshold: float = 1e-3) -> np.ndarray:
    """Drop leading/trailing samples below ``threshold`` (espeak pads its output with silence)."""
    loud = np.flatnonzero(np.abs(audio) > threshold)
    return audio[loud[0]: loud[-1] + 1] if len(loud) else audio[:0]


def espeak_corpus(sentences: list[str], *, seed: int, clip_samples: int, n_mels: int,
                  label_width: int, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Speak ``sentences`` (skipping any whose speech does not fit the clip) → a corpus dict."""
    clips, texts, seconds, voices = [], [], [], []
    plan = voice_plan(len(sentences), seed)
    with tempfile.TemporaryDirectory(prefix="bench-espeak-") as workdir:
        for i, (sentence, (voice, speed, pitch)) in enumerate(zip(sentences, plan)):
            audio = trim_silence(synthesize(sentence, voice, speed, pitch, workdir))
            if progress:
                progress(i)
            if len(audio) == 0 or len(audio) > clip_samples:
                continue
            clips.append(F.clip(audio, clip_samples))
            texts.append(sentence)
            seconds.append(len(audio) / F.SAMPLE_RATE)
            voices.append(f"{voice} s{speed} p{pitch}")
    return _corpus(clips, texts, seconds, clip_samples, n_mels, label_width, voices=voices)


def _corpus(clips: list[np.ndarray], texts: list[str], seconds: list[float], clip_samples: int, n_mels: int,
            label_width: int, **extra: Any) -> dict[str, Any]:
    stack = np.stack(clips) if clips else np.zeros((0, clip_samples), dtype=np.float32)
    return {"features": F.clips_to_features(stack, n_mels),
            "labels": T.pad_ids([T.encode(t) for t in texts], label_width),
            "texts": texts, "seconds": seconds, **extra}


# --- real recordings ----------------------------------------------------------------------------------
def pocketsphinx_utterances(root: str = POCKETSPHINX) -> list[tuple[Path, str]]:
    """(wav path, transcript) of the pocketsphinx-testdata recordings with transcripts."""
    base = Path(root)
    if not base.is_dir():
        raise UserError(f"commonvoice: {root} not found; install Debian's pocketsphinx-testdata "
                        "(apt-get install -y pocketsphinx-testdata)")
    pairs = []
    for listing in (base / "librivox" / "transcription", base / "cards" / "cards.transcription"):
        for line in listing.read_text().splitlines():
            match = re.match(r"\s*(.*?)\s*\((\S+)\)\s*$", line)
            if not match:
                continue
            words = match.group(1).replace("<s>", " ").replace("</s>", " ")
            pairs.append((listing.parent / f"{match.group(2)}.wav", T.normalize(words)))
    return pairs


def recordings_corpus(items: list[tuple[Path | str, str]], *, clip_samples: int, n_mels: int,
                      label_width: int, reader: Callable[[Path | str], tuple[np.ndarray, int]]) -> dict[str, Any]:
    """Read, resample and clip real recordings (every clip must fit: the caller sizes the clip)."""
    clips, texts, seconds = [], [], []
    for path, sentence in items:
        audio, rate = reader(path)
        audio = F.resample(audio, rate)
        clips.append(F.clip(audio, clip_samples))
        texts.append(sentence)
        seconds.append(len(audio) / F.SAMPLE_RATE)
    return _corpus(clips, texts, seconds, clip_samples, n_mels, label_width)


def read_audio(path: Path | str) -> tuple[np.ndarray, int]:
    """A WAV with ``wave``; other formats (CommonVoice's mp3) with torchcodec's CPU decoder."""
    path = str(path)
    if path.lower().endswith(".wav"):
        return F.read_wav(path)
    try:
        from torchcodec.decoders import AudioDecoder
    except ImportError:
        raise UserError(f"commonvoice: {path} is not a WAV file; install torchcodec==0.12.0 (CPU build, needs "
                        "the FFmpeg 5 libraries) or convert the clips to 16-bit WAV") from None
    samples = AudioDecoder(path).get_all_samples()
    return samples.data.mean(dim=0).numpy().astype(np.float32), int(samples.sample_rate)


def tsv_path(data_dir: str, split: str) -> Path:
    """``<data_dir>/<split>.tsv``; a :class:`UserError` naming ``commonvoice.data_dir`` when it is not there."""
    tsv = Path(data_dir) / f"{split}.tsv"
    if not data_dir or not tsv.exists():
        raise UserError(f"commonvoice.data_dir={data_dir or '(unset)'}: no {split}.tsv there; point it at a "
                        "CommonVoice release directory (<split>.tsv + clips/)")
    return tsv


def tsv_items(data_dir: str, split: str, text_key: str, path_key: str) -> list[tuple[Path, str]]:
    """(audio path, normalised sentence) of ``<data_dir>/<split>.tsv`` via HuggingFace datasets."""
    tsv = tsv_path(data_dir, split)
    from datasets import load_dataset

    table = load_dataset("csv", data_files={split: str(tsv)}, delimiter="\t", split=split,
                         quoting=3, keep_default_na=False)
    for key in (text_key, path_key):
        if key not in table.column_names:
            raise UserError(f"commonvoice: {tsv} has no column '{key}' (columns: {', '.join(table.column_names)}); "
                            "set commonvoice.text_key / commonvoice.path_key")
    clips = Path(data_dir) / "clips"
    items = []
    for row in table:
        name = str(row[path_key])
        path = Path(name) if os.path.isabs(name) else (clips / name if clips.is_dir() else Path(data_dir) / name)
        sentence = T.normalize(str(row[text_key]))
        if sentence:
            items.append((path, sentence))
    missing = [str(p) for p, _ in items if not p.exists()]
    if missing:
        raise UserError(f"commonvoice: {len(missing)} audio files of {tsv} are missing, e.g. {missing[0]}")
    return items


# --- cache --------------------------------------------------------------------------------------------
def cached(cache_dir: Path, name: str, key: dict[str, Any], build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    digest = stable_hash(key)
    path = Path(cache_dir) / "commonvoice" / "data" / f"{name}-{digest}.pt"
    if path.exists():
        return torch.load(path, weights_only=False)
    corpus = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(corpus, tmp)
    os.replace(tmp, path)
    return corpus


def file_digest(path: str | Path) -> str:
    """sha256 prefix of a file (part of cache keys of corpora built from it)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]
