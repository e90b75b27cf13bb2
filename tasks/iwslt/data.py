"""Parallel text for the translation tasks: the offline Ding pairs, HuggingFace loaders, BPE, batching.

Offline default (Debian ``trans-de-en``, the Ding dictionary, GPL-2+): lines ``de | de2 :: en | en2``.
The ``|``-separated parts of the two sides are aligned (same count, else the line is skipped).  Each part
keeps its first alternative (text before ``; ``), loses the ``{m}`` ``[cook.]`` ``(…)`` annotations and
extra spaces.  A *sentence pair* is one whose German side starts with a capital letter and whose two sides both
end in ``.``, ``?`` or ``!`` and have at least 3 words; exact duplicates are dropped (about 19.8k pairs).
Splits are fixed by a hash of the German sentence (so one German sentence never sits in two splits):
the ``test_size`` pairs with the smallest hashes are the test set, the next ``valid_size`` the
validation set, the rest the training set.
``ding_phrases=N`` adds N of the dictionary's phrase pairs (its non-sentence entries) to the training set
(:func:`ding_phrases`); the validation and test sets stay the same sentences.

HuggingFace (``source=hf``): ``load_dataset`` on local parquet/json/jsonl/csv files or a
``save_to_disk`` directory, or a hub name already in the local cache (offline), map-style (memory-mapped
Arrow) or streamed (``IterableDataset``).  Two layouts (:class:`Columns`): a ``translation`` column of
{lang: text} dicts (the HF IWSLT/WMT format), or one column per language.  The training split is never
turned into lists (tasks/iwslt/hfsplit.py); a map-style evaluation split is (:func:`hf_pairs`).

BPE: HF ``tokenizers`` SentencePiece-style BPE (NFKC, Metaspace) trained jointly on the source and target
sides of the training split, cached as JSON; decoding gives detokenized text for sacreBLEU.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from bench.errors import UserError

DING_PATH = "/usr/share/trans/de-en"
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0..3 = PAD, BOS, EOS, UNK of bench/models/seq2seq.py
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|\([^)]*\)")


@dataclass
class Pairs:
    src: list[str]
    tgt: list[str]

    def __len__(self) -> int:
        return len(self.src)


def _clean(part: str) -> str:
    return " ".join(_ANNOTATION.sub("", part.split("; ")[0]).split())


def _is_sentence(text: str) -> bool:
    return bool(text) and text[-1] in ".?!" and len(text.split()) >= 3


def _is_sentence_pair(de: str, en: str) -> bool:
    return _is_sentence(de) and _is_sentence(en) and de[0].isupper()


def _aligned_lines(path: str) -> Iterator[list[tuple[str, str]]]:
    """The cleaned (German, English) parts of each dictionary line whose two sides have as many parts."""
    if not os.path.exists(path):
        raise UserError(f"trans-de-en: no dictionary at {path}; install it (apt-get install -y trans-de-en) "
                        "or set iwslt.data_dir to the file")
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("#") or " :: " not in line:
                continue
            de, en = line.rstrip("\n").split(" :: ", 1)
            de_parts, en_parts = de.split(" | "), en.split(" | ")
            if len(de_parts) == len(en_parts):
                yield [(_clean(d), _clean(e)) for d, e in zip(de_parts, en_parts)]


@functools.lru_cache(maxsize=2)
def ding_pairs(path: str = DING_PATH) -> tuple[tuple[str, str], ...]:
    """All cleaned, de-duplicated German–English sentence pairs of the Ding dictionary file."""
    seen: dict[tuple[str, str], None] = {}
    for parts in _aligned_lines(path):
        for d, e in parts:
            if _is_sentence_pair(d, e):
                seen.setdefault((d, e), None)
    return tuple(seen)


def _rank(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def ding_splits(path: str, valid_size: int, test_size: int) -> dict[str, Pairs]:
    pairs = ding_pairs(path)
    german = sorted({d for d, _ in pairs}, key=_rank)
    test_de = set(german[:test_size])
    valid_de = set(german[test_size:test_size + valid_size])
    out = {"train": Pairs([], []), "validation": Pairs([], []), "test": Pairs([], [])}
    for d, e in pairs:
        split = "test" if d in test_de else "validation" if d in valid_de else "train"
        out[split].src.append(d)
        out[split].tgt.append(e)
    return out


def ding_phrases(path: str, held_out: set[str], count: int) -> Pairs:
    """The ``count`` dictionary *phrase* pairs of the Ding file to add to the training sentences: the aligned
    parts of a line that are not sentence pairs (head words, inflections, idioms such as "Abholung der Waren
    am Bahnhof :: collection of the goods from the station"), cleaned like the sentences and de-duplicated.

    A line that holds a held-out German sentence (``held_out``: the validation and test sentences) gives no
    phrase: its head words are the dictionary entry that sentence illustrates, so they stay out of training
    with it.  Nor does a phrase whose German is a held-out sentence but for case and final punctuation (the
    same sentence on another line, with an English side that is not a sentence).  Only plain text is kept: a
    part that lists alternatives with ``/`` ("nicht den Hauch/den Funken einer Chance haben") or elides with
    ``…`` is not a translation of itself.  The longest phrases come first (most German plus English words;
    ties in hash order), so a small ``count`` takes the multi-word idioms and phrases before the head words;
    the order depends on the file alone, not the seed."""
    if count <= 0:
        return Pairs([], [])

    def loose(text: str) -> str:
        return " ".join(text.lower().rstrip(".?!").split())

    held_loose = {loose(d) for d in held_out}
    seen: dict[tuple[str, str], None] = {}
    for parts in _aligned_lines(path):
        if any(d in held_out for d, _ in parts):
            continue
        for d, e in parts:
            if d and e and not _is_sentence_pair(d, e) and loose(d) not in held_loose \
                    and not any(mark in d + e for mark in ("/", "…", "...")):
                seen.setdefault((d, e), None)
    ranked = sorted(seen, key=lambda p: (-(len(p[0].split()) + len(p[1].split())), _rank(f"{p[0]} :: {p[1]}")))
    chosen = ranked[:count]
    return Pairs([d for d, _ in chosen], [e for _, e in chosen])


# --- HuggingFace ----------------------------------------------------------------------------------
_EXTENSIONS = {"parquet": "parquet", "json": "json", "jsonl": "json", "csv": "csv", "arrow": "arrow"}


def _split_files(data_dir: str, split: str) -> tuple[str, list[str]]:
    """(builder, files) of one split in a directory: files whose name contains the split name."""
    files = sorted(p for p in glob.glob(os.path.join(data_dir, "**", "*"), recursive=True) if os.path.isfile(p))
    aliases = {"validation": ("validation", "valid", "dev"), "test": ("test",), "train": ("train",)}
    names = aliases.get(split, (split,))
    chosen = [p for p in files if any(n in os.path.basename(p).lower() for n in names)
              and p.rsplit(".", 1)[-1] in _EXTENSIONS]
    if not chosen:
        return "", []
    kinds = {_EXTENSIONS[p.rsplit(".", 1)[-1]] for p in chosen}
    if len(kinds) > 1:
        raise UserError(f"data_dir={data_dir}: split '{split}' mixes file formats {sorted(kinds)}; keep one")
    return kinds.pop(), chosen


def _offline_datasets():
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    datasets.disable_progress_bars()
    return datasets


def open_split(*, data_dir: str, hf_name: str, hf_config: str, split: str, task: str,
               streaming: bool = False) -> tuple[Any, str]:
    """(dataset, description of the source) of one split through HuggingFace ``datasets`` (offline): a
    memory-mapped ``Dataset``, or with ``streaming`` an ``IterableDataset`` (``load_dataset(streaming=True)``
    for files and the hub cache, ``Dataset.to_iterable_dataset()`` for a ``save_to_disk`` directory)."""
    datasets = _offline_datasets()
    if data_dir:
        if not os.path.exists(data_dir):
            raise UserError(f"{task}.data_dir={data_dir}: no such directory; point it at local parquet/json/csv "
                            f"files of the parallel corpus (or set {task}.hf_name)")
        if os.path.exists(os.path.join(data_dir, "dataset_dict.json")) or \
                os.path.exists(os.path.join(data_dir, "dataset_info.json")):
            loaded = datasets.load_from_disk(data_dir)
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise UserError(f"{task}.data_dir={data_dir}: no split '{split}' (has {sorted(loaded)}); "
                                    f"set {task}.train_split/eval_split")
                loaded = loaded[split]
            return (loaded.to_iterable_dataset() if streaming else loaded), data_dir
        builder, files = _split_files(data_dir, split)
        if not files:
            raise UserError(f"{task}.data_dir={data_dir}: no parquet/json/jsonl/csv file named after split "
                            f"'{split}'; name files like {split}.parquet or set {task}.train_split/eval_split")
        return datasets.load_dataset(builder, data_files={split: files}, split=split, streaming=streaming), data_dir
    if hf_name:
        try:
            ds = datasets.load_dataset(hf_name, hf_config or None, split=split, streaming=streaming)
        except (ConnectionError, FileNotFoundError, ValueError) as err:
            first = " ".join(str(err).split())[:160]
            raise UserError(f"{task}.hf_name={hf_name}: not in the local HF cache and the hub is offline ({first}); "
                            f"download it elsewhere and set {task}.data_dir to its files") from None
        return ds, f"{hf_name}{'/' + hf_config if hf_config else ''}"
    raise UserError(f"{task}.source=hf needs {task}.data_dir (local parquet/json/csv files) or {task}.hf_name "
                    "(a dataset in the local HF cache)")


@dataclass(frozen=True)
class Columns:
    """Where the two sides of a pair are: in a ``translation`` column of {lang: text} dicts (the HF
    IWSLT/WMT layout), or one column per language."""
    src: str
    tgt: str
    translation: bool

    @property
    def names(self) -> list[str]:
        return ["translation"] if self.translation else [self.src, self.tgt]

    def texts(self, batch: Mapping[str, Iterable[Any]]) -> tuple[list[str], list[str]]:
        """(sources, targets) of a batch of rows given as columns ({column: values})."""
        if self.translation:
            rows = list(batch["translation"])
            return [str(r[self.src]) for r in rows], [str(r[self.tgt]) for r in rows]
        return [str(s) for s in batch[self.src]], [str(t) for t in batch[self.tgt]]


def _languages(ds: Any) -> list[str] | None:
    """The language keys of the ``translation`` column: from its feature (a struct of strings, or
    ``Translation``), else from the first row; None for an empty split."""
    feature = (getattr(ds, "features", None) or {}).get("translation")
    if isinstance(feature, dict):
        return list(feature)
    if getattr(feature, "languages", None):
        return list(feature.languages)
    first = next(iter(ds.take(1)), None) if hasattr(ds, "take") else None
    return None if first is None else list(first["translation"])


def columns_of(ds: Any, *, where: str, src_lang: str, tgt_lang: str, task: str) -> Columns:
    """The layout of a split (map-style or streamed), or one UserError line naming the keys to set."""
    columns = ds.column_names
    if columns is None:  # a stream whose features are unknown until read: the first row's keys
        columns = list(next(iter(ds.take(1)), None) or {})
    if "translation" in columns:
        languages = _languages(ds)
        missing = [lang for lang in (src_lang, tgt_lang) if languages is not None and lang not in languages]
        if missing:
            raise UserError(f"{where}: the translation column has no language {missing[0]!r} "
                            f"(has {sorted(languages or [])}); set {task}.src_lang/tgt_lang")
        return Columns(src_lang, tgt_lang, translation=True)
    if src_lang in columns and tgt_lang in columns:
        return Columns(src_lang, tgt_lang, translation=False)
    raise UserError(f"{where}: expected a 'translation' column or columns {src_lang!r} and {tgt_lang!r} "
                    f"(has {columns}); set {task}.src_lang/tgt_lang")


def hf_pairs(*, data_dir: str, hf_name: str, hf_config: str, split: str, src_lang: str, tgt_lang: str,
             task: str) -> tuple[Pairs, str]:
    """(pairs, description of the source) of one split, as lists (the map-style evaluation split)."""
    ds, where = open_split(data_dir=data_dir, hf_name=hf_name, hf_config=hf_config, split=split, task=task)
    cols = columns_of(ds, where=where, src_lang=src_lang, tgt_lang=tgt_lang, task=task)
    src, tgt = cols.texts({name: ds[name] for name in cols.names})
    return Pairs(src, tgt), where


def text_stream(ds: Any, cols: Columns, chunk: int = 10_000) -> Iterator[str]:
    """Every source text, then every target text of a map-style split (the order of ``src + tgt``), read
    ``chunk`` rows at a time from the Arrow table: for BPE training without a list of the whole split."""
    table = ds.select_columns(cols.names)
    for side in (0, 1):
        for batch in table.iter(batch_size=chunk):
            yield from cols.texts(batch)[side]


# --- BPE --------------------------------------------------------------------------------------------
# Behaviour version of the BPE tokenizer training below: part of the cached tokenizer's key.
BPE_VERSION = 1


def train_bpe(texts: list[str], vocab: int, path: Path):
    """Train (or load the cached) joint BPE on ``texts``; ids 0..3 are the special tokens."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if path.exists():
        return Tokenizer.from_file(str(path))
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tok.save(str(tmp))
    os.replace(tmp, path)
    return tok
