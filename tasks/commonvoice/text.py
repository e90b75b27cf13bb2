"""Text side of the speech task: the normaliser, the character vocabulary, greedy CTC decoding, WER/CER.

Normaliser ``bench-en-v1`` (named in every row's metric signature), applied to references before they
become training targets and to references and hypotheses before scoring:
lower-case; "’" → "'"; every character other than a–z, apostrophe and space → space; runs of spaces → one;
strip.  Apostrophes inside words are kept ("don't"); digits are removed, so the corpora drop sentences
that contain any (their spoken form would not match the reference).

Vocabulary: index 0 is the CTC blank, then space, apostrophe, a–z (29 symbols).
Greedy CTC decoding: argmax per frame, merge repeats, drop blanks.
WER and CER: jiwer 4 (corpus level: total edits / total reference words or characters); per-sample
values are each utterance's own edit rate (an empty reference scores 1.0 if the hypothesis is non-empty).
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

NORMALIZER = "bench-en-v1"
BLANK = 0
SYMBOLS = " '" + "abcdefghijklmnopqrstuvwxyz"
VOCAB = ["<blank>", *SYMBOLS]
_INDEX = {c: i + 1 for i, c in enumerate(SYMBOLS)}
_DROP = re.compile(r"[^a-z' ]+")
_SPACES = re.compile(r" +")


def normalize(text: str) -> str:
    """The ``bench-en-v1`` normaliser (see the module docstring)."""
    text = text.lower().replace("\u2019", "'")
    return _SPACES.sub(" ", _DROP.sub(" ", text)).strip()


def encode(text: str) -> list[int]:
    """Normalised text → symbol ids (1..28); raises KeyError on a character outside the vocabulary."""
    return [_INDEX[c] for c in text]


def decode(ids) -> str:
    return "".join(SYMBOLS[i - 1] for i in ids if i > 0)


def pad_ids(sequences: list[list[int]], width: int) -> Tensor:
    """[N, width] long, each row the ids followed by -1."""
    out = torch.full((len(sequences), width), -1, dtype=torch.long)
    for i, seq in enumerate(sequences):
        if len(seq) > width:
            raise ValueError(f"label of {len(seq)} symbols is wider than {width}")
        out[i, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return out


def rows_to_text(ids: Tensor) -> list[str]:
    """[N, W] ids padded with -1 → strings."""
    return [decode([int(i) for i in row if i >= 0]) for row in ids]


def greedy_ctc(logits: Tensor) -> Tensor:
    """[B, T, V] → [B, T] long: per row the collapsed, blank-free symbol ids, left-aligned, -1 padded."""
    best = logits.argmax(dim=-1)  # [B, T]
    previous = torch.cat([torch.full_like(best[:, :1], -1), best[:, :-1]], dim=1)
    keep = (best != BLANK) & (best != previous)
    # stable left-alignment: position of each kept symbol = number of kept symbols before it
    position = keep.long().cumsum(dim=1) - 1
    out = torch.full_like(best, -1)
    rows = torch.arange(best.shape[0], device=best.device)[:, None].expand_as(best)
    out[rows[keep], position[keep]] = best[keep]
    return out


def error_rates(references: list[str], hypotheses: list[str]) -> dict[str, object]:
    """Corpus WER/CER (jiwer) and per-utterance WER/CER of normalised texts, with each utterance's edit
    counts and reference lengths (``counts``: what a bootstrap over utterances resamples)."""
    import jiwer

    refs = [normalize(r) for r in references]
    hyps = [normalize(h) for h in hypotheses]
    per_wer, per_cer, word_edits, words, char_edits, chars = [], [], 0, 0, 0, 0
    counts: dict[str, list[int]] = {"word_edits": [], "ref_words": [], "char_edits": [], "ref_chars": []}
    for ref, hyp in zip(refs, hyps):
        w_edits, w_len = _edits(ref.split(), hyp.split(), jiwer.process_words)
        c_edits, c_len = _edits(list(ref), list(hyp), jiwer.process_characters)
        for key, value in zip(counts, (w_edits, w_len, c_edits, c_len)):
            counts[key].append(value)
        per_wer.append(w_edits / w_len if w_len else float(bool(hyp)))
        per_cer.append(c_edits / c_len if c_len else float(bool(hyp)))
        word_edits, words, char_edits, chars = word_edits + w_edits, words + w_len, char_edits + c_edits, \
            chars + c_len
    return {"wer": word_edits / max(words, 1), "cer": char_edits / max(chars, 1), "per_wer": per_wer,
            "per_cer": per_cer, "references": refs, "hypotheses": hyps, "counts": counts}


def _edits(ref: list[str], hyp: list[str], process) -> tuple[int, int]:
    """(substitutions + deletions + insertions, reference length) of one utterance, scored by jiwer."""
    if not ref:
        return len(hyp), 0
    if not hyp:
        return len(ref), len(ref)
    if process.__name__ == "process_words":
        out = process(" ".join(ref), " ".join(hyp))
    else:
        out = process("".join(ref), "".join(hyp))
    return out.substitutions + out.deletions + out.insertions, len(ref)
