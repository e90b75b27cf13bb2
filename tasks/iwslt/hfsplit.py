"""``source=hf`` at WMT scale (4.5M pairs): the training split as a memory-mapped tokenised Arrow table, the
evaluation split as a stream.  Neither is turned into Python lists of the whole split.

Training (:class:`TokenizedTrain`): ``Dataset.map(batched=True)`` writes the ids of both sides (int32
lists) and their lengths to one Arrow file, which ``datasets`` memory-maps.  Memory holds two numpy arrays:
the rows kept by the ``max_tokens`` filter of the list path (both sides 1..max_len tokens) and their
batching lengths (max(|src|, |tgt| + 1)); :meth:`TokenizedTrain.rows` reads one step's rows by index.
Cache: the table is written to an explicit ``cache_file_name`` under the run's cache dir
(``<cache_dir>/<task>/tokenized/<split>-<key>.arrow``) whose key names the source, split, row count and first
rows, the tokenizer (its JSON, or a checkpoint's digest) and this module's code; the same key is passed as
``new_fingerprint``, so HF's fingerprinting (which hashes the tokenising closure, unreliably for a
tokenizer object) is not relied on.  The ``max_tokens`` filter is applied to the lengths in memory, so one
table serves every ``max_tokens``.  A file lock keeps data-parallel ranks from writing it twice.

Evaluation (:class:`EvalStream`, ``<task>.streaming=true``): an ``IterableDataset`` read ``size`` rows at a
time in file order (a stream cannot be sorted by length, so batches are padded more than the map-style
reader's); the task tokenises each batch as it is read.  The raw source and reference strings of the rows
read so far are kept (sacreBLEU scores against raw references; the samples table shows the sources), by
stream position, which is the evaluation index ``y``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from bench.errors import UserError
from tasks.iwslt.data import Columns, Pairs

Encode = Callable[[list[str]], list[list[int]]]
MAP_BATCH = 1000  # rows tokenised per map() call


# Behaviour version of TokenizedTrain (filtering and token storage): part of the cached tokenized split's key.
TOKENIZED_VERSION = 1


class TokenizedTrain:
    """The training split's ids in a memory-mapped Arrow table; only lengths in memory."""

    def __init__(self, ds: Any, cols: Columns, *, encode_src: Encode, encode_tgt: Encode, path: Path, key: str,
                 max_len: int):
        import datasets
        from filelock import FileLock

        def tokenize(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
            src, tgt = cols.texts(batch)
            s, t = encode_src(src), encode_tgt(tgt)
            return {"src": s, "tgt": t, "src_len": [len(a) for a in s], "tgt_len": [len(a) for a in t]}

        ids, count = datasets.List(datasets.Value("int32")), datasets.Value("int32")
        features = datasets.Features({"src": ids, "tgt": ids, "src_len": count, "tgt_len": count})
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{path}.lock"):
            table = ds.select_columns(cols.names).map(
                tokenize, batched=True, batch_size=MAP_BATCH, remove_columns=cols.names, features=features,
                cache_file_name=str(path), new_fingerprint=key, load_from_cache_file=True, desc="tokenize")
        src_len = table.data.column("src_len").to_numpy().astype(np.int64)
        tgt_len = table.data.column("tgt_len").to_numpy().astype(np.int64)
        kept = (src_len > 0) & (src_len <= max_len) & (tgt_len > 0) & (tgt_len <= max_len)
        self.keep = np.flatnonzero(kept)  # row of the table of each training pair (index of a batch)
        self.lengths = np.maximum(src_len, tgt_len + 1)[self.keep]
        self.table = table.select_columns(["src", "tgt"])

    def __len__(self) -> int:
        return len(self.keep)

    def rows(self, idx: np.ndarray) -> tuple[list[list[int]], list[list[int]]]:
        """(source ids, target ids) of training pairs ``idx``, read from the table in that order."""
        picked = self.table[self.keep[np.asarray(idx)].tolist()]
        return picked["src"], picked["tgt"]


class EvalStream:
    """The evaluation split as a streamed ``IterableDataset``: its first ``limit`` rows (0 = all)."""

    def __init__(self, ds: Any, cols: Columns, *, where: str, limit: int):
        self.ds = (ds.take(limit) if limit else ds).select_columns(cols.names)
        self.cols, self.where, self.limit = cols, where, limit
        self.seen = Pairs([], [])  # texts of the rows read so far, by stream position

    def batches(self, size: int) -> Iterator[tuple[int, list[str]]]:
        """(stream position of the first row, source texts) of consecutive rows, ``size`` at a time."""
        start = 0
        for batch in self.ds.iter(batch_size=size):
            src, tgt = self.cols.texts(batch)
            for i, (s, t) in enumerate(zip(src, tgt)):
                if start + i == len(self.seen):
                    self.seen.src.append(s)
                    self.seen.tgt.append(t)
                elif self.seen.src[start + i] != s or self.seen.tgt[start + i] != t:
                    raise UserError(f"{self.where}: the evaluation stream gave another sentence at row {start + i} "
                                    "on a second pass; streamed evaluation needs a fixed row order")
            yield start, src
            start += len(src)
