"""``commonvoice.pretrained``: a HuggingFace wav2vec 2.0 / XLS-R CTC checkpoint as the dense base model.

The model (tasks/commonvoice/wav2vec2.py) reads the raw 16 kHz waveform, so corpora are kept as
waveform clips (``[N, samples]`` float32) instead of log-mel features: the same sentences, voices and clip
lengths as the log-mel corpora (tasks/commonvoice/data.py), cached under their own names.

Vocabulary: the checkpoint's ``vocab.json`` (characters; ``|`` or the tokenizer's word delimiter between
words; the CTC blank is ``pad_token_id``).  Targets and predictions stay in the task's own 29 symbols
(text.py) for scoring; ``CheckpointVocab`` maps targets into the checkpoint's ids for the CTC loss and
maps greedy CTC output back (collapse repeats on the frame sequence, drop blanks, then drop tokens outside
the task's symbols, e.g. ``<s>``, ``<unk>``: ``Wav2Vec2CTCTokenizer.decode`` with those strings removed,
then the task's normaliser; ``skip_special_tokens=True`` would instead drop them before collapsing
repeats, merging "b <unk> b" into "b").  Letters map to the checkpoint's lower- or upper-case entry, whichever it has; a
task symbol the checkpoint lacks becomes its ``<unk>`` in targets (an error if it has none).  A checkpoint
without ``lm_head`` (a pretraining checkpoint such as XLS-R-300M) gets a new CTC head over the task's
29 symbols (or over its ``vocab.json`` if it has one), initialised from the run's seed.
"""

from __future__ import annotations

import hashlib
import tempfile
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from bench.errors import UserError
from tasks.commonvoice import wav2vec2 as W
from tasks.commonvoice import data as D
from tasks.commonvoice import features as F
from tasks.commonvoice import text as T
from tasks.commonvoice.model import CTCEncoder, FrameHead


class CheckpointVocab:
    """Task symbols (text.VOCAB ids) ↔ a checkpoint's CTC ids."""

    def __init__(self, vocab: dict[str, int], delimiter: str, blank: int, size: int, where: str):
        self.blank, self.size = blank, size
        self.to_ckpt = torch.full((len(T.VOCAB),), -1, dtype=torch.long)
        self.to_ckpt[T.BLANK] = blank
        unk = vocab.get("<unk>", vocab.get("[UNK]"))
        for i, symbol in enumerate(T.SYMBOLS, start=1):
            token = delimiter if symbol == " " else symbol
            found = vocab.get(token, vocab.get(token.upper()))
            if found is None and symbol == " ":
                found = vocab.get(" ")
            if found is None:
                if unk is None:
                    raise UserError(f"{where}: vocab.json has no entry for {symbol!r} and no <unk>")
                found = unk
            self.to_ckpt[i] = found
        self.from_ckpt = torch.full((size,), -1, dtype=torch.long)
        for i in range(1, len(T.VOCAB)):
            ckpt = int(self.to_ckpt[i])
            if ckpt != unk:
                self.from_ckpt[ckpt] = i

    @classmethod
    def identity(cls) -> "CheckpointVocab":
        vocab = {("|" if c == " " else c): i for i, c in enumerate(T.SYMBOLS, start=1)}
        return cls(vocab, "|", T.BLANK, len(T.VOCAB), "task vocabulary")

    def targets(self, y: Tensor) -> Tensor:
        """Task labels (-1 padded) → checkpoint ids (-1 padded)."""
        table = self.to_ckpt.to(y.device)
        return torch.where(y >= 0, table[y.clamp(min=0)], y)

    def greedy(self, logits: Tensor) -> Tensor:
        """[B, T, V] checkpoint logits → [B, T] task symbol ids, left-aligned, -1 padded."""
        best = logits.argmax(dim=-1)
        previous = torch.cat([torch.full_like(best[:, :1], -1), best[:, :-1]], dim=1)
        mapped = self.from_ckpt.to(best.device)[best]
        keep = (best != self.blank) & (best != previous) & (mapped >= 0)
        position = keep.long().cumsum(dim=1) - 1
        out = torch.full_like(best, -1)
        rows = torch.arange(best.shape[0], device=best.device)[:, None].expand_as(best)
        out[rows[keep], position[keep]] = mapped[keep]
        return out


class Loaded(NamedTuple):
    model: CTCEncoder  # the checkpoint's weights (a new head if it had none)
    vocab: CheckpointVocab
    shape: W.Wav2Vec2Shape
    digest: str  # sha256 prefix of the weights file
    has_head: bool


def build_model(directory: str, key: str) -> Loaded:
    """The CTC model of a HF wav2vec 2.0 directory, its vocabulary map, shape and weights digest."""
    ckpt = W.read_checkpoint(directory, key)
    where = f"{key}={directory}"
    if ckpt.has_head:
        vocab = (CheckpointVocab(ckpt.vocab, ckpt.word_delimiter, ckpt.shape.pad, ckpt.shape.vocab, where)
                 if ckpt.vocab else None)
        if vocab is None:
            raise UserError(f"{where}: the checkpoint has a CTC head but no vocab.json; save its tokenizer beside it")
        size = ckpt.shape.vocab
    else:
        vocab = (CheckpointVocab(ckpt.vocab, ckpt.word_delimiter, ckpt.shape.pad, len(ckpt.vocab), where)
                 if ckpt.vocab else CheckpointVocab.identity())
        size = vocab.size
    model = CTCEncoder(ckpt.shape.encoder_config(), W.Wav2Vec2FrontEnd(ckpt.shape), FrameHead(ckpt.shape.hidden, size))
    missing, unexpected = model.load_state_dict(ckpt.state_dict, strict=False)
    allowed = set() if ckpt.has_head else {"head.proj.weight", "head.proj.bias"}
    if unexpected or set(missing) - allowed:
        raise UserError(f"{where}: weights do not fit the model (missing {sorted(set(missing) - allowed)[:3]}, "
                        f"unexpected {sorted(unexpected)[:3]})")
    return Loaded(model, vocab, ckpt.shape, weights_digest(directory, key), ckpt.has_head)


def weights_digest(directory: str, key: str) -> str:
    digest = hashlib.sha256()
    with open(W.hf.weights_file(directory, key), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


# Behaviour version of the checkpoint loader and waveform corpora (this module and the wav2vec2 skeleton):
# part of the cache keys of corpora and of the fine-tuned base model; bump it when a change can alter either.
VERSION = 1


# --- waveform corpora ----------------------------------------------------------------------------------
def espeak_waves(sentences: list[str], *, seed: int, clip_samples: int, label_width: int) -> dict[str, Any]:
    """The espeak corpus of data.espeak_corpus (same voices, same skipping) with waveform clips."""
    clips, texts, seconds = [], [], []
    plan = D.voice_plan(len(sentences), seed)
    with tempfile.TemporaryDirectory(prefix="bench-espeak-") as workdir:
        for sentence, (voice, speed, pitch) in zip(sentences, plan):
            audio = D.trim_silence(D.synthesize(sentence, voice, speed, pitch, workdir))
            if len(audio) == 0 or len(audio) > clip_samples:
                continue
            clips.append(F.clip(audio, clip_samples))
            texts.append(sentence)
            seconds.append(len(audio) / F.SAMPLE_RATE)
    return _corpus(clips, texts, seconds, clip_samples, label_width)


def recording_waves(items: list[tuple[Any, str]], *, clip_samples: int, label_width: int, reader) -> dict[str, Any]:
    clips, texts, seconds = [], [], []
    for path, sentence in items:
        audio = F.resample(*reader(path))
        clips.append(F.clip(audio, clip_samples))
        texts.append(sentence)
        seconds.append(len(audio) / F.SAMPLE_RATE)
    return _corpus(clips, texts, seconds, clip_samples, label_width)


def _corpus(clips: list[np.ndarray], texts: list[str], seconds: list[float], clip_samples: int,
            label_width: int) -> dict[str, Any]:
    stack = np.stack(clips) if clips else np.zeros((0, clip_samples), dtype=np.float32)
    return {"features": torch.from_numpy(stack), "labels": T.pad_ids([T.encode(t) for t in texts], label_width),
            "texts": texts, "seconds": seconds}
