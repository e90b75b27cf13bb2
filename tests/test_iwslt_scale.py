"""Translation data at WMT scale: the offline default unchanged, the Arrow-backed training table of
``source=hf``, and the streamed evaluation split (``<task>.streaming=true``)."""

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


def _rows_by_index(task) -> dict[int, list[int]]:
    """{evaluation index y: source ids without padding} over all evaluation batches."""
    out = {}
    for batch in task.eval_batches():
        assert torch.equal(batch.y, batch.meta["index"])
        for y, row in zip(batch.y.tolist(), batch.x[:, 0]):
            out[y] = row[row.ne(0)].tolist()
    return out


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
    assert len(tables) == 1  # under the run's cache dir
    stamp = tables[0].stat().st_mtime_ns
    again = _task(tmp_path, *HF, f"iwslt.data_dir={folder}")
    assert np.array_equal(again._train_rows.lengths, task._train_rows.lengths)  # a new task reads the table
    assert list((tmp_path / "cache" / "iwslt" / "tokenized").glob("train-*.arrow")) == tables
    assert tables[0].stat().st_mtime_ns == stamp  # reused, not rewritten
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


# --- streamed evaluation --------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "disk"])
def test_streamed_evaluation_matches_the_map_style_reader(tmp_path, hf_cache, fmt):
    folder = _write_corpus(tmp_path / fmt, fmt)
    mapped = _task(tmp_path, *HF, f"iwslt.data_dir={folder}")
    streamed = _task(tmp_path, *HF, f"iwslt.data_dir={folder}", "iwslt.streaming=true")
    assert "test streamed" in streamed.dataset and "test 30" in mapped.dataset
    by_index = _rows_by_index(mapped)
    assert _rows_by_index(streamed) == by_index and sorted(by_index) == list(range(30))
    # file order, not sorted by length: y counts up batch after batch
    assert torch.equal(torch.cat([b.y for b in streamed.eval_batches()]), torch.arange(30))
    assert streamed._eval_texts == mapped._eval_texts  # (source, reference) of every index
    # scoring looks references up by index: perfect hypotheses score 100 in either order
    refs = mapped._eval_texts.tgt
    ids = [e.ids for e in mapped.tokenizer.encode_batch(refs)]
    preds = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
    for i, row in enumerate(ids):
        preds[i, : len(row)] = torch.tensor(row)
    order = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    assert streamed.score(preds[order], order).value == pytest.approx(100.0)
    assert streamed.sample_table(preds[order], order)["target"] == [refs[int(i)] for i in order]
    first = _task(tmp_path, *HF, f"iwslt.data_dir={folder}", "iwslt.streaming=true", "iwslt.eval_samples=10")
    assert "first 10" in first.dataset and _rows_by_index(first) == {i: by_index[i] for i in range(10)}


def test_run_with_streamed_evaluation_writes_a_row(tmp_path, hf_cache):
    from bench import results
    from tests.helpers import compose_tiny

    folder = _write_corpus(tmp_path / "jsonl", "jsonl")
    cfg = compose_tiny("dense", "iwslt", tmp_path, *HF, f"iwslt.data_dir={folder}", "iwslt.streaming=true",
                       "timing=false")
    assert len(runner.run(cfg, "dense", "iwslt", command="test")) == 1
    row = results.load(tmp_path / "results").iloc[0]
    assert "test streamed" in row["dataset"] and row["n_eval"] == 30
    samples = results.load_samples(tmp_path / "results", "iwslt", "dense", row["run_id"])
    assert list(samples["index"]) == list(range(30))
    assert list(samples["target"]) == [r["en"] for r in _pairs(30, offset=1000)]
    assert list(samples["source"]) == [r["de"] for r in _pairs(30, offset=1000)]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_streamed_split_is_never_materialised(tmp_path, hf_cache, monkeypatch, fmt):
    """load_dataset(streaming=True); nothing is read when the task is built, and one batch of a 300-sentence
    split is yielded after about one batch of rows has been pulled from the stream."""
    import datasets

    folder = _write_corpus(tmp_path / fmt, fmt, n_test=300)
    real_load, calls, pulled = datasets.load_dataset, [], [0]

    def counting_load(*args, **kwargs):
        calls.append(kwargs)
        ds = real_load(*args, **kwargs)
        if not kwargs.get("streaming"):
            return ds

        def rows():
            for row in ds:
                pulled[0] += 1
                yield row

        return datasets.IterableDataset.from_generator(rows, features=ds.features)

    def no_lists(**kw):
        raise AssertionError(f"hf_pairs read split {kw['split']} into lists")

    monkeypatch.setattr(datasets, "load_dataset", counting_load)
    monkeypatch.setattr(D, "hf_pairs", no_lists)
    task = _task(tmp_path, *HF, f"iwslt.data_dir={folder}", "iwslt.streaming=true", "iwslt.eval_batch=10")
    assert [c.get("streaming") for c in calls] == [True] and calls[0]["split"] == "test"
    assert pulled[0] == 0
    batches = iter(task.eval_batches())
    first = next(batches)
    assert len(first) == 10 and pulled[0] < 30 and len(task._eval_texts) == 10
    assert sum(len(b) for b in batches) == 290 and pulled[0] == 300 and len(task._eval_texts) == 300


# --- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides,needle", [
    (("iwslt.eval_split=validation",), "no parquet/json/jsonl/csv file named after split 'validation'"),
    (("iwslt.src_lang=fr",), "iwslt.src_lang/tgt_lang"),
    (("iwslt.source=trans-de-en",), "iwslt.streaming=true streams a HuggingFace split"),
])
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_bad_streamed_input_is_one_line(tmp_path, hf_cache, fmt, overrides, needle):
    folder = _write_corpus(tmp_path / fmt, fmt)
    with pytest.raises(UserError, match=needle.replace("/", ".").replace("(", r"\(")) as err:
        _task(tmp_path, *HF, f"iwslt.data_dir={folder}", "iwslt.streaming=true", *overrides)
    assert "\n" not in str(err.value)


def test_bad_training_split_is_one_line(tmp_path, hf_cache):
    folder = _write_corpus(tmp_path / "disk", "disk")
    task = _task(tmp_path, *HF, f"iwslt.data_dir={folder}", "iwslt.train_split=validation")
    with pytest.raises(UserError, match="no split 'validation'") as err:
        task.train_batch(0, 8)
    assert "\n" not in str(err.value)
