"""Translation tasks: Ding parsing, HuggingFace loaders on small local files, BLEU, missing data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import config, runner
from bench import protocol
from bench.errors import UserError
from tasks.iwslt import data as D

ROOT = Path(__file__).resolve().parent.parent

DING = """# Version :: test
Haus {n} | Häuser {pl} :: house | houses
Das Haus ist groß. | Wir gehen nach Hause. :: The house is big. | We are going home.
Er kam {vi} (zu spät) [ugs.] zur Arbeit.; Er kam. :: He came to work.; He came.
Zu kurz. :: Too short.
Ungleich. | Zwei Teile hier. :: Only one part here.
"""


def test_ding_parsing_cleans_and_aligns(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(DING, encoding="utf-8")
    D.ding_pairs.cache_clear()
    pairs = D.ding_pairs(str(path))
    assert pairs == (("Das Haus ist groß.", "The house is big."), ("Wir gehen nach Hause.", "We are going home."),
                     ("Er kam zur Arbeit.", "He came to work."))
    splits = D.ding_splits(str(path), valid_size=1, test_size=1)
    assert sorted(len(s) for s in splits.values()) == [1, 1, 1]
    D.ding_pairs.cache_clear()


# six sentence lines (four with a head word) and phrase-only lines
DING_PHRASES = """# Version :: test
Haus {n} | Häuser {pl} :: house | houses
laufen {vi} | Der Hund läuft sehr schnell. :: to run | The dog runs very fast.
Katze {f} | Die Katze schläft hier. :: cat | The cat sleeps here.
Baum {m} | Der Baum ist sehr alt. :: tree | The tree is very old.
Buch {n} | Das Buch ist sehr gut. :: book | The book is very good.
Es regnet heute sehr stark. :: It is raining very hard today.
Wir fahren morgen nach Berlin. :: We are driving to Berlin tomorrow.
einen Baum fällen [forest.] :: to fell a tree
der Hund läuft sehr schnell :: the dog runs very fast
keine Chance / nicht die geringste Chance haben :: to have no chance / not to stand a chance
"""
HEAD_WORDS = {"Der Hund läuft sehr schnell.": "laufen", "Die Katze schläft hier.": "Katze",
              "Der Baum ist sehr alt.": "Baum", "Das Buch ist sehr gut.": "Buch"}


def test_ding_phrases_leave_out_held_out_lines_and_come_longest_first(tmp_path):
    path = tmp_path / "de-en"
    path.write_text(DING_PHRASES, encoding="utf-8")
    D.ding_pairs.cache_clear()
    splits = D.ding_splits(str(path), valid_size=1, test_size=1)
    held = set(splits["test"].src) | set(splits["validation"].src)
    assert len(held) == 2 and len(splits["train"]) == 4
    phrases = D.ding_phrases(str(path), held, count=100)
    # the head words of the training sentences' lines are kept, those of the held-out sentences' lines are not
    assert {HEAD_WORDS[s] for s in splits["train"].src if s in HEAD_WORDS} <= set(phrases.src)
    assert not set(phrases.src) & {HEAD_WORDS[s] for s in held if s in HEAD_WORDS}
    assert not set(phrases.src) & set(HEAD_WORDS)  # no sentence is a phrase
    assert {"Haus", "Häuser", "einen Baum fällen"} <= set(phrases.src)
    assert not [d for d in phrases.src if "/" in d]  # alternatives written with "/" are not plain text
    # the same sentence on another line, without its capital and full stop, is a phrase where it is not held out
    assert ("der Hund läuft sehr schnell" in phrases.src) == ("Der Hund läuft sehr schnell." not in held)
    assert "der Hund läuft sehr schnell" in D.ding_phrases(str(path), set(), count=100).src
    assert "der Hund läuft sehr schnell" not in D.ding_phrases(str(path), {"Der Hund läuft sehr schnell."}, 100).src
    words = [len(d.split()) + len(e.split()) for d, e in zip(phrases.src, phrases.tgt)]
    assert words == sorted(words, reverse=True) and words[0] >= 7  # longest first
    two = D.ding_phrases(str(path), held, count=2)
    assert (two.src, two.tgt) == (phrases.src[:2], phrases.tgt[:2])
    assert len(D.ding_phrases(str(path), held, count=0)) == 0
    D.ding_pairs.cache_clear()


def test_ding_phrases_join_the_training_set_only(tmp_path):
    """The phrases follow the training sentences (the evaluation split is unchanged), the dataset says how
    many there are, and they enter the base model's and the tokenizer's keys; at 0 the key and the row
    identity are as before the option existed (rows made without it keep their identity); with source=hf
    the option is one line."""
    from bench import results

    path = tmp_path / "de-en"
    path.write_text(DING_PHRASES, encoding="utf-8")
    D.ding_pairs.cache_clear()
    splits = D.ding_splits(str(path), 1, 1)
    common = (f"iwslt.data_dir={path}", "iwslt.valid_size=1", "iwslt.test_size=1", "iwslt.eval_samples=0")
    plain = _task(tmp_path, *common, "iwslt.train_samples=0")
    more = _task(tmp_path, *common, "iwslt.train_samples=0", "iwslt.ding_phrases=2")
    assert len(plain.train_pairs) == 4 and len(more.train_pairs) == 6
    assert more.train_pairs.src[:4] == plain.train_pairs.src
    held = set(splits["test"].src) | set(splits["validation"].src)
    assert more.train_pairs.src[4:] == D.ding_phrases(str(path), held, 2).src
    assert more._eval_pairs == plain._eval_pairs
    assert more.dataset.endswith("(de-en, 4 train + 2 dictionary phrases, test 1)")
    assert plain.dataset.endswith("(de-en, 4 train, test 1)")
    # every phrase: the head words of the validation and the test sentences' lines stay out
    every = _task(tmp_path, *common, "iwslt.train_samples=0", "iwslt.ding_phrases=100")
    assert HEAD_WORDS.get(splits["validation"].src[0], "-") not in every.train_pairs.src
    assert HEAD_WORDS.get(splits["test"].src[0], "-") not in every.train_pairs.src
    assert {HEAD_WORDS[s] for s in splits["train"].src if s in HEAD_WORDS} <= set(every.train_pairs.src)
    # train_samples limits the sentences; the phrases are added in full, and the tokenizer's key tells
    # 3 sentences + 1 phrase from 4 sentences (same count, same first three pairs)
    few = _task(tmp_path, *common, "iwslt.train_samples=3", "iwslt.ding_phrases=1", "iwslt.vocab=60")
    four = _task(tmp_path, *common, "iwslt.train_samples=4", "iwslt.vocab=60")
    assert few.train_pairs.src == plain.train_pairs.src[:3] + more.train_pairs.src[4:5]
    assert len(few.train_pairs) == len(four.train_pairs) and few.train_pairs.src[:3] == four.train_pairs.src[:3]
    assert few.tokenizer.to_str() != four.tokenizer.to_str()
    assert "ding_phrases" not in plain.base_config() and more.base_config()["ding_phrases"] == 2
    as_dict = runner.plain(config.compose(["task=iwslt", "method=dense"]))
    without = {**as_dict, "iwslt": {k: v for k, v in as_dict["iwslt"].items() if k != "ding_phrases"}}
    assert as_dict["iwslt"]["ding_phrases"] == 0
    assert results.identity_hash(as_dict, "dense", "iwslt") == results.identity_hash(without, "dense", "iwslt")
    changed = {**as_dict, "iwslt": {**as_dict["iwslt"], "ding_phrases": 5}}
    assert results.identity_hash(changed, "dense", "iwslt") != results.identity_hash(without, "dense", "iwslt")
    folder = _write_corpus(tmp_path, "jsonl")
    with pytest.raises(UserError, match="iwslt.ding_phrases=5 adds the Ding") as err:
        _task(tmp_path, "iwslt.source=hf", f"iwslt.data_dir={folder}", "iwslt.ding_phrases=5")
    assert "\n" not in str(err.value)
    D.ding_pairs.cache_clear()


def _write_corpus(tmp_path: Path, fmt: str) -> Path:
    import pandas as pd

    rows = [{"de": f"Das ist Satz Nummer {i}.", "en": f"This is sentence number {i}."} for i in range(40)]
    folder = tmp_path / fmt
    folder.mkdir()
    for split, part in (("train", rows[:30]), ("test", rows[30:])):
        if fmt == "parquet":  # the HF IWSLT/WMT layout: a 'translation' column of {lang: text}
            pd.DataFrame({"translation": part}).to_parquet(folder / f"{split}-00000.parquet")
        else:  # one column per language
            (folder / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in part))
    return folder


def _task(tmp_path: Path, *overrides: str, task: str = "iwslt"):
    from bench import registry

    spec = registry.task_spec(task)
    cfg = config.compose([f"task={task}", "method=dense", *spec.test_overrides, *overrides,
                          f"cache_dir={tmp_path / 'cache'}", f"results_dir={tmp_path / 'results'}"])
    config.check_config(cfg, "dense", task)
    _, task_impl, _ = runner.build(cfg, "dense", task)
    return task_impl


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_hf_local_files_load_train_and_score(tmp_path, fmt):
    folder = _write_corpus(tmp_path, fmt)
    task = _task(tmp_path, "iwslt.source=hf", f"iwslt.data_dir={folder}", "iwslt.train_samples=0",
                 "iwslt.eval_samples=0", "iwslt.vocab=60")
    assert task.train_size == 30 and "test 10" in task.dataset and str(folder) in task.dataset
    batches = list(task.eval_batches())
    assert sum(len(b) for b in batches) == 10
    lengths = [int(b.x[:, 0].ne(0).sum(1).max()) for b in batches]
    assert lengths == sorted(lengths)
    batch = task.train_batch(0, 4)
    assert batch.x.shape[:2] == (4, 2) and batch.y.shape == (4, batch.x.shape[2])
    # decoder input = BOS + target, target = tokens + EOS
    tokens = batch.y[:, :-1] > 3  # not PAD/BOS/EOS/UNK
    assert torch.equal(batch.x[:, 1, 1:][tokens], batch.y[:, :-1][tokens])
    assert torch.all(batch.x[:, 1, 0] == 1) and torch.all((batch.y == 2).sum(1) == 1)
    # perfect hypotheses (the references through the BPE round trip) score BLEU 100
    refs = [task._eval_pairs.tgt[i] for i in range(len(task._eval_pairs))]
    ids = [e.ids for e in task.tokenizer.encode_batch(refs)]
    width = max(map(len, ids))
    preds = torch.zeros(len(ids), width, dtype=torch.long)
    for i, row in enumerate(ids):
        preds[i, : len(row)] = torch.tensor(row)
    quality = task.score(preds, torch.arange(len(ids)))
    assert quality.value == pytest.approx(100.0)
    assert torch.allclose(quality.per_sample, torch.full((len(ids),), 100.0, dtype=torch.float64))
    assert task.metric_signature.startswith("sacrebleu nrefs:1|case:mixed|eff:no|tok:13a")
    wrong = task.score(torch.zeros_like(preds), torch.arange(len(ids)))
    assert wrong.value == 0.0


def test_hf_missing_columns_and_splits_are_one_line_errors(tmp_path):
    folder = _write_corpus(tmp_path, "jsonl")
    with pytest.raises(UserError, match="iwslt.src_lang"):
        _task(tmp_path, "iwslt.source=hf", f"iwslt.data_dir={folder}", "iwslt.src_lang=fr")
    with pytest.raises(UserError, match="no parquet/json/jsonl/csv file named after split 'validation'"):
        _task(tmp_path, "iwslt.source=hf", f"iwslt.data_dir={folder}", "iwslt.eval_split=validation")


def test_missing_configured_dataset_one_line_nothing_written(tmp_path):
    """Through the CLI: exit code 2, one line naming the key and what to do, nothing written."""
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run([sys.executable, "-m", "bench", "run", "method=dense", "task=wmt",
                             f"results_dir={tmp_path / 'results'}", f"cache_dir={tmp_path / 'cache'}"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "wmt.source=hf needs wmt.data_dir" in lines[0], result.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("overrides,needle", [
    (("iwslt.data_dir=/nonexistent/iwslt",), "iwslt.data_dir=/nonexistent/iwslt: no such"),
    (("iwslt.hf_name=nobody/no-such-corpus",), "not in the local HF cache"),
])
def test_missing_hf_data_is_a_user_error(tmp_path, monkeypatch, overrides, needle):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(UserError, match=needle) as err:
        _task(tmp_path, "iwslt.source=hf", *overrides)
    assert "\n" not in str(err.value)


def test_run_writes_rows_with_decoding_columns_and_figures(tmp_path):
    """The whole runner path on translation: decoding in evaluation, counting and timing; strings in the
    samples table; the task's figures from the rows."""
    from bench import results
    from tasks.iwslt.figures import translation_figures
    from tests.helpers import compose_tiny

    cfg = compose_tiny("dat", "iwslt", tmp_path, "timing=true", "timing_rounds=1", "timing_batch=4",
                       "dat.exit_budgets=[1.5,2]")
    written = runner.run(cfg, "dat", "iwslt", command="test")
    assert len(written) == 3  # two validation-tuned threshold vectors + fixed exit 1
    rows = results.load(tmp_path / "results")
    assert set(rows["knob_value"]) == {"ae1.5", "ae2", "exit1"}
    assert (rows["cost_check"] == "agree").all()
    assert rows["metric_signature"].str.contains("nrefs:1|case:mixed|eff:no|tok:13a", regex=False).all()
    assert (rows["latency_b1_ratio"] > 0).all()
    row = rows.iloc[0]
    samples = results.load_samples(tmp_path / "results", "iwslt", "dat", row["run_id"])
    assert len(samples) == 12
    for column in ("source", "target", "prediction", "macs", "decoder_macs", "decoder_macs_per_token",
                   "out_tokens", "avg_exit", "exit_p0", "tau_1", "valid_bleu", "valid_avg_exit"):
        assert column in samples, column
    assert samples["target"].map(type).eq(str).all()
    assert (samples["decoder_macs"] < samples["macs"]).all()
    assert samples["macs"].mean() == pytest.approx(row["macs_mean"])
    # the dense reference is counted on every evaluation sentence: the dense base itself is at 100%
    dense_cfg = compose_tiny("dense", "iwslt", tmp_path, "timing=false")
    runner.run(dense_cfg, "dense", "iwslt", command="test")
    rows = results.load(tmp_path / "results")
    dense = rows[rows["method"] == "dense"].iloc[0]
    assert dense["cost_pct_dense"] == pytest.approx(100.0, rel=1e-9)
    assert dense["macs_dense"] == pytest.approx(dense["macs_mean"], rel=1e-9)
    paths = translation_figures(rows, tmp_path / "results", tmp_path / "reports", "iwslt")
    names = {p.name for p in paths}
    assert {"iwslt_bleu_depth.png", "iwslt_bleu_depth.csv", "iwslt_dat_exits.png"} <= names
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)


def test_train_time_counts_each_stage_once(tmp_path):
    """The dense base loaded again (reference cost, timing) does not add its training time again."""
    from tests.helpers import compose_tiny

    cfg = compose_tiny("dense", "iwslt", tmp_path, "timing=true", "timing_rounds=1", "timing_batch=2",
                       "iwslt.eval_samples=4")
    run, task, method = runner.build(cfg, "dense", "iwslt")
    model = protocol.train(method)
    first = run.train_time_s
    assert first > 0
    task.reference_model()
    run.base_model(task)
    assert run.train_time_s == first
    del model


def test_length_bucketed_batches_cover_the_epoch_with_less_padding(tmp_path):
    task = _task(tmp_path, "iwslt.bucket=10", "iwslt.max_tokens=40")
    src, tgt = task._train_ids
    per_epoch = len(src) // 8
    seen = [task.train_batch(step, 8).meta["index"] for step in range(per_epoch)]
    flat = torch.cat(seen)
    assert all(len(b) == 8 for b in seen) and len(set(flat.tolist())) == len(flat) == per_epoch * 8
    # deterministic in the step (a resumed run sees the same batch), a new order in the next epoch
    again = _task(tmp_path, "iwslt.bucket=10", "iwslt.max_tokens=40")
    assert torch.equal(again.train_batch(3, 8).meta["index"], seen[3])
    assert not torch.equal(task.train_batch(per_epoch + 3, 8).meta["index"], seen[3])

    def padded_tokens(t) -> int:
        return sum(int(t.train_batch(s, 8).x.shape[-1]) * 8 for s in range(per_epoch))

    plain = _task(tmp_path, "iwslt.bucket=1", "iwslt.max_tokens=40")
    assert padded_tokens(task) < 0.9 * padded_tokens(plain)


@pytest.mark.parametrize("value, oracle", [("ae1.5", "correctness"), ("0.99", "likelihood"), ("argmax", "")])
def test_exit_panel_titles_are_short_lines(value, oracle):
    """Each line of an exit-depth panel's title fits a 3.6-inch panel (about 30 characters at 9 pt), so
    titles of neighbouring panels cannot run into each other; the oracle is named only when given."""
    from tasks.iwslt.figures import _panel_title

    lines = _panel_title(value, oracle, 177).split("\n")
    assert max(len(line) for line in lines) <= 30
    assert (f"{oracle} oracle" in lines) == bool(oracle)
    assert lines[-1] == "≥ 177 tokens per position"
