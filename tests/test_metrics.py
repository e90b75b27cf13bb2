"""The metric registry (bench/metrics.py): each metric's sufficient statistics and corpus value."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench import metrics
from bench.errors import UserError

HYPS = ["the cat sat on the mat", "a dog", "", "there is a small house near the river bank today",
        "completely unrelated words here", "the cat is on the mat ."]
REFS = ["the cat is on the mat", "a dog runs", "nothing came out", "there is a house near the river bank",
        "", "the cat is on the mat ."]


def test_bleu_statistics_and_corpus_score_are_sacrebleus():
    """Per-sentence statistics read from sacreBLEU's public sentence score equal its own corpus
    extraction, and the corpus BLEU from their sum equals ``corpus_score`` exactly (empty hypothesis and
    empty reference included), for the whole set and for every resample-like subset."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    ours = np.asarray(metrics.bleu_sentence_stats(HYPS, REFS))
    assert ours.tolist() == [list(map(int, s)) for s in bleu._extract_corpus_statistics(HYPS, [REFS])]
    for keep in ([0, 1, 2, 3, 4, 5], [0, 0, 3, 5], [1, 2], [3, 3, 3]):
        hyps, refs = [HYPS[i] for i in keep], [REFS[i] for i in keep]
        expected = BLEU().corpus_score(hyps, [refs]).score
        assert metrics.bleu_from_stats(ours[keep].sum(axis=0)) == pytest.approx(expected, abs=1e-12)
    sums = np.stack([ours[[0, 1, 3]].sum(axis=0), ours.sum(axis=0)], axis=1)  # [k, 2]: two resamples at once
    both = metrics.get("bleu").from_sums(sums, 0)
    assert both.shape == (2,) and both[1] == pytest.approx(BLEU().corpus_score(HYPS, [REFS]).score, abs=1e-12)


def test_committed_bleu_rows_recompute_from_their_texts():
    """The statistics stored with committed iwslt rows equal those recomputed from the rows' texts."""
    files = sorted(glob.glob(str(Path(__file__).resolve().parents[1] / "results/iwslt/dat/*.samples.csv.gz")))[:2]
    if not files:
        pytest.skip("no committed iwslt rows")
    for path in files:
        samples = pd.read_csv(path, keep_default_na=False, na_values=[""]).head(300)
        stored = metrics.get("bleu").statistics(samples)
        recomputed = metrics.get("bleu").statistics(samples.drop(columns=["bleu_stats"]))
        assert np.array_equal(stored, recomputed), path


def test_edit_rates_and_means():
    samples = pd.DataFrame({"target": ["a b c", "d e", ""], "prediction": ["a x c", "d e f", "g"],
                            "score": [1.0, 0.0, 1.0]})
    wer = metrics.get("wer")
    counts = wer.statistics(samples)
    assert counts.tolist() == [[1, 3], [1, 2], [1, 0]]
    assert float(wer.from_sums(counts.sum(axis=0), 3)) == pytest.approx(3 / 5)
    assert not wer.higher_is_better and metrics.get("accuracy").higher_is_better
    assert float(metrics.get("accuracy").from_sums(metrics.get("accuracy").statistics(samples).sum(axis=0), 3)) == \
        pytest.approx(2 / 3)


def test_registry_refuses_a_second_metric_of_a_name_and_names_unknown_ones():
    with pytest.raises(UserError, match="'bleu' is registered already"):
        metrics.register_metric(metrics.Metric("bleu", False, lambda s: s, lambda s, n: s))
    with pytest.raises(metrics.NoStatistics, match="no bootstrap defined for metric 'meteor'"):
        metrics.get("meteor")
    assert metrics.get("bleu").text(12.3456) == "12.35" and metrics.get("wer").text(-0.01, signed=True) == "-0.0100"
    assert metrics.get("top1").text(float("nan")) == "n/a"
