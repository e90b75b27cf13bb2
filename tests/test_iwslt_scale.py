"""Translation data at WMT scale: the offline default unchanged, the Arrow-backed training table of
``source=hf``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from bench import config, registry, runner
from bench.errors import UserError
from tasks.iwslt import data as D
from tasks.iwslt import hfsplit as H
from tasks.iwslt.task import _ListRows

# Small enough for the tiny config to keep 1,280 training pairs (20 batches of 64: steps 30 and 95 are in
# later epochs) and a full trans-de-en test split of 1,000 sentences.
SMALL = ("max_tokens=40", "vocab=300")


def _task(tmp_path: Path, *overrides: str, task: str = "iwslt"):
    spec = registry.task_spec(task)
    cfg = config.compose([f"task={task}", "method=dense", *spec.test_overrides, *overrides,
                          f"cache_dir={tmp_path / 'cache'}", f"results_dir={tmp_path / 'results'}"])
    config.check_config(cfg, "dense", task)
    return runner.build(cfg, "dense", task)[1]


def _digest(task) -> str:
    """sha256 of the training batches of a few steps (batch 64) and of every evaluation batch."""
    h = hashlib.sha256()
    batches = [task.train_batch(step, 64) for step in (0, 1, 7, 30, 95)] + list(task.eval_batches())
    for batch in batches:
        for t in (batch.x, batch.y, batch.meta["index"]):
            h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def test_offline_default_batches_are_unchanged(tmp_path):
    """trans-de-en keeps its token ids, batches and evaluation order (so trained models stay bit-identical).
    The digests were recorded from the code before the Arrow-backed training table and streamed evaluation
    of source=hf were added (commit 7d36dc4)."""
    small = tuple(f"iwslt.{o}" for o in SMALL)
    assert _digest(_task(tmp_path, *small)) == "42f9c93aa059014dfed137912adfa61f46543b54187361073ba0c581890df06c"
    full = _task(tmp_path, *small, "iwslt.bucket=2", "iwslt.eval_samples=0", "iwslt.eval_batch=100")
    assert _digest(full) == "cfeffa47ad4850780aab49821cb436bce32e0e26a698a30ee150c87b6e36aa7a"
    wmt = _task(tmp_path, *(f"wmt.{o}" for o in SMALL), task="wmt")
    assert _digest(wmt) == "42f9c93aa059014dfed137912adfa61f46543b54187361073ba0c581890df06c"


# --- source=hf fixtures ---------------------------------------------------------------------------------
DE = ["Haus", "Hund", "Baum", "Stadt", "Buch", "Tisch", "Garten", "Zug"]
EN = ["house", "dog", "tree", "city", "book", "table", "garden", "train"]
HF = ("iwslt.source=hf", "iwslt.train_samples=0", "iwslt.eval_samples=0", "iwslt.vocab=200",
      "iwslt.max_tokens=40", "iwslt.eval_batch=7")


def _pairs(n: int, offset: int = 0) -> list[dict[str, str]]:
    rows = []
    for i in range(offset, offset + n):
        a, b = i % len(DE), (i * 3 + 1) % len(DE)
        words = " und der".join([""] * (i % 3))  # sources of several lengths
        rows.append({"de": f"Der {DE[a]}{words} sieht {i} {DE[b]}.", "en": f"The {EN[a]}{' and the' * (i % 3)} "
                                                                         f"sees {i} {EN[b]}."})
    return rows


def _write_corpus(root: Path, fmt: str, n_train: int = 48, n_test: int = 30) -> Path:
    """train/test splits: parquet with a 'translation' column of {lang: text} (the HF IWSLT/WMT layout),
    jsonl with one column per language, or a save_to_disk directory."""
    import json

    import datasets
    import pandas as pd

    splits = {"train": _pairs(n_train), "test": _pairs(n_test, offset=1000)}
    root.mkdir(parents=True)
    for split, rows in splits.items():
        if fmt == "parquet":
            pd.DataFrame({"translation": rows}).to_parquet(root / f"{split}-00000.parquet")
        elif fmt == "jsonl":
            (root / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    if fmt == "disk":
        datasets.DatasetDict({split: datasets.Dataset.from_dict({"translation": rows})
                              for split, rows in splits.items()}).save_to_disk(str(root))
    return root


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """Keep the Arrow copies that load_dataset makes inside tmp_path."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")
    monkeypatch.setattr(datasets.config, "HF_CACHE_HOME", str(tmp_path / "hf"))


# --- training from the Arrow table ----------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_arrow_training_batches_equal_the_list_path(tmp_path, hf_cache, monkeypatch, fmt):
    folder = _write_corpus(tmp_path / fmt, fmt)
    real_pairs = D.hf_pairs

    def eval_only(**kw):
        assert kw["split"] != "train", "the training split was read into lists"
        return real_pairs(**kw)

    monkeypatch.setattr(D, "hf_pairs", eval_only)
    task = _task(tmp_path, *HF, f"iwslt.data_dir={folder}")
    assert task.train_size == 48 and isinstance(task._train_rows, H.TokenizedTrain)
    # the old path: the split as lists, BPE trained on src + tgt, every pair encoded, then filtered
    rows = _pairs(48)
    src_text, tgt_text = [r["de"] for r in rows], [r["en"] for r in rows]
    tok = D.train_bpe(src_text + tgt_text, 200, tmp_path / "list-bpe.json")
    assert tok.to_str() == task.tokenizer.to_str()
    src = [e.ids for e in tok.encode_batch(src_text)]
    tgt = [e.ids for e in tok.encode_batch(tgt_text)]
    keep = [i for i in range(48) if 0 < len(src[i]) <= 40 and 0 < len(tgt[i]) <= 40]
    lists = _ListRows([src[i] for i in keep], [tgt[i] for i in keep])
    assert np.array_equal(task._train_rows.lengths, lists.lengths)
    old = _task(tmp_path, *HF, f"iwslt.data_dir={folder}")
    old.__dict__["_train_rows"] = lists
    for step in (0, 1, 5, 6, 13):  # 6 batches of 8 per epoch: steps 6 and 13 are in later epochs
        a, b = task.train_batch(step, 8), old.train_batch(step, 8)
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and torch.equal(a.meta["index"], b.meta["index"])
    tables = list((tmp_path / "cache" / "iwslt" / "tokenized").glob("train-*.arrow"))
    assert len(tables) == 1  # under the run's cache dir, reused by the second task
    assert old._train_rows is lists and task._train_rows.table.cache_files[0]["filename"] == str(tables[0])


def test_arrow_table_is_keyed_by_the_tokenizer_and_filtered_in_memory(tmp_path, hf_cache):
    folder = _write_corpus(tmp_path / "jsonl", "jsonl")
    long = _task(tmp_path, *HF, f"iwslt.data_dir={folder}")
    cut = int(np.median(long._train_rows.lengths)) - 1
    short = _task(tmp_path, *HF, f"iwslt.data_dir={folder}", f"iwslt.max_tokens={cut}")
    assert 0 < len(short._train_rows) < len(long._train_rows) == 48 and short._train_rows.lengths.max() <= cut + 1
    other = _task(tmp_path, *HF, f"iwslt.data_dir={folder}", "iwslt.vocab=150")
    len(other._train_rows)
    tables = sorted((tmp_path / "cache" / "iwslt" / "tokenized").glob("train-*.arrow"))
    assert len(tables) == 2  # one per tokenizer; max_tokens shares the table


# --- errors ---------------------------------------------------------------------------------------------
def test_bad_training_split_is_one_line(tmp_path, hf_cache):
    folder = _write_corpus(tmp_path / "disk", "disk")
    task = _task(tmp_path, *HF, f"iwslt.data_dir={folder}", "iwslt.train_split=validation")
    with pytest.raises(UserError, match="no split 'validation'") as err:
        task.train_batch(0, 8)
    assert "\n" not in str(err.value)
