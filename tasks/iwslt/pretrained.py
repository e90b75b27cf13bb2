"""``iwslt.pretrained`` / ``wmt.pretrained``: a Marian or fairseq checkpoint as the dense base model.

The directory decides the format: ``config.json`` (+ ``source.spm``, ``target.spm``, ``vocab.json``) is a
HuggingFace Marian checkpoint (opus-mt-de-en), ``checkpoint_best.pt`` (+ ``dict.<src>.txt``,
``dict.<tgt>.txt``) a fairseq transformer.  Text ↔ ids:
- Marian: ``MarianTokenizer`` (SentencePiece; sacremoses punctuation normalisation), sources end with
  ``</s>``; decoding drops special tokens and joins pieces (its ``batch_decode``).
- fairseq: the text is expected in the form the model was trained on (IWSLT'14: Moses-tokenised,
  lower-cased, subword-nmt BPE with ``@@`` continuation, as fairseq's prepare-iwslt14.sh writes it);
  tokens are split on spaces and looked up in the dictionary (``<unk>`` otherwise), sources end with
  ``</s>``; hypotheses are joined and the BPE is removed (fairseq's ``--remove-bpe``: "@@ " deleted).
  BLEU is then computed on that tokenised text, as in the fairseq IWSLT recipe.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from torch import Tensor

from bench.errors import UserError
from tasks.iwslt import fairseq as FS
from bench.models.pretrained import hf
from tasks.iwslt import marian as M
from bench.models.seq2seq import EncoderDecoder


@dataclass
class CheckpointText:
    """A loaded translation checkpoint: its model and its text ↔ id functions."""

    kind: str  # "marian" or "fairseq"
    model: EncoderDecoder
    encode_src: Callable[[list[str]], list[list[int]]]  # ids ending with EOS
    encode_tgt: Callable[[list[str]], list[list[int]]]  # ids without EOS
    decode: Callable[[Tensor], list[str]]
    digest: str  # sha256 prefix of the weights file

    @property
    def pad(self) -> int:
        return self.model.cfg.pad

    @property
    def bos(self) -> int:
        return self.model.cfg.bos

    @property
    def eos(self) -> int:
        return self.model.cfg.eos


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


# Behaviour version of the checkpoint loaders (Marian, fairseq and their tokenizers): part of the base
# model's and the tokenized data's cache keys; bump it when a change can alter a loaded model or its tokens.
VERSION = 1


def load(directory: str, key: str, src_lang: str, tgt_lang: str) -> CheckpointText:
    root = Path(directory)
    if not root.is_dir():
        raise UserError(f"{key}={directory}: no such directory; give a HuggingFace Marian directory "
                        "(config.json, model.safetensors, source.spm, target.spm, vocab.json) or a fairseq one "
                        "(checkpoint_best.pt, dict.<src>.txt, dict.<tgt>.txt)")
    if (root / "config.json").exists():
        return _marian(root, key)
    if any((root / name).exists() for name in FS.CHECKPOINT_NAMES):
        return _fairseq(root, key, src_lang, tgt_lang)
    raise UserError(f"{key}={directory}: neither config.json (Marian) nor {FS.CHECKPOINT_NAMES[0]} (fairseq) there")


def _marian(root: Path, key: str) -> CheckpointText:
    model = M.load(root, key)
    missing = [n for n in ("source.spm", "target.spm", "vocab.json") if not (root / n).exists()]
    if missing:
        raise UserError(f"{key}={root}: no {missing[0]} (the MarianTokenizer files belong beside the weights)")
    from transformers import MarianTokenizer

    tok = MarianTokenizer.from_pretrained(str(root))
    eos = model.cfg.eos

    def encode_src(texts: list[str]) -> list[list[int]]:
        return [list(ids) for ids in tok(texts).input_ids]

    def encode_tgt(texts: list[str]) -> list[list[int]]:
        return [[i for i in ids if i != eos] for ids in tok(text_target=texts).input_ids]

    def decode(rows: Tensor) -> list[str]:
        return tok.batch_decode(rows.tolist(), skip_special_tokens=True)

    return CheckpointText("marian", model, encode_src, encode_tgt, decode, _digest(hf.weights_file(root, key)))


def _fairseq(root: Path, key: str, src_lang: str, tgt_lang: str) -> CheckpointText:
    model, src_symbols, tgt_symbols = FS.load(root, key, src_lang, tgt_lang)
    src_index = {s: i for i, s in enumerate(src_symbols)}
    tgt_index = {s: i for i, s in enumerate(tgt_symbols)}

    def encode_src(texts: list[str]) -> list[list[int]]:
        return [[src_index.get(w, FS.UNK) for w in t.split()] + [FS.EOS] for t in texts]

    def encode_tgt(texts: list[str]) -> list[list[int]]:
        return [[tgt_index.get(w, FS.UNK) for w in t.split()] for t in texts]

    def decode(rows: Tensor) -> list[str]:
        out = []
        for row in rows.tolist():
            words = [tgt_symbols[i] for i in row if i >= FS.UNK]
            out.append((" ".join(words) + " ").replace("@@ ", "").rstrip())
        return out

    return CheckpointText("fairseq", model, encode_src, encode_tgt, decode, _digest(FS.find_checkpoint(root, key)))


def truncate(ids: list[int], limit: int, eos: int) -> list[int]:
    """At most ``limit`` ids, keeping a final EOS."""
    return ids if len(ids) <= limit else ids[: limit - 1] + [eos]

