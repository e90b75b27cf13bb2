"""The metrics a task may score with, registered once: each metric's name, direction, per-example sufficient
statistics (what a bootstrap over test examples resamples), and how the corpus value follows from their
sums.  The statistics (bench/stats.py) and the report look a metric up here instead of branching on its
name; a task names its metric in its registration (``TaskSpec.metric``).

Built in: ``accuracy``/``top1``/``top5`` (the mean of a per-example score), ``wer``/``cer`` (edits over
reference words or characters, jiwer), ``bleu`` (corpus BLEU from n-gram matches, totals and lengths summed
over sentences, sacreBLEU's public ``sentence_score`` and ``compute_bleu``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from bench.errors import UserError


class NoStatistics(ValueError):
    """A row whose per-example statistics cannot be built (message says why, one line)."""


@dataclass(frozen=True)
class Metric:
    """``statistics(samples)`` -> [examples, k] per-example sufficient statistics from a row's per-sample
    table; ``from_sums(sums, n)`` -> the metric from statistics summed over ``n`` examples (``sums`` is
    [k, ...], the result [...]); ``decimals``: how many the report prints."""

    name: str
    higher_is_better: bool
    statistics: Callable[[Any], np.ndarray]
    from_sums: Callable[[np.ndarray, int], np.ndarray]
    decimals: int = 4

    def text(self, value: float, signed: bool = False) -> str:
        """``value`` as the report prints it ("n/a" when not finite)."""
        return text(value, self.name, signed)


_METRICS: dict[str, Metric] = {}


def register_metric(metric: Metric) -> Metric:
    """Add a metric; a second one under a taken name is refused in one line."""
    if metric.name in _METRICS and _METRICS[metric.name] != metric:
        raise UserError(f"metric {metric.name!r} is registered already; give the new one another name")
    _METRICS[metric.name] = metric
    return metric


def get(name: str) -> Metric:
    """The registered metric ``name``; NoStatistics when there is none."""
    try:
        return _METRICS[name]
    except KeyError:
        raise NoStatistics(f"no bootstrap defined for metric {name!r}") from None


def supported(name: str) -> bool:
    return name in _METRICS


def text(value: float, metric: str, signed: bool = False) -> str:
    """A value of ``metric`` (or a difference of two) as the report prints it: the metric's decimals (4 for
    a metric registered nowhere), "n/a" when not finite."""
    if not np.isfinite(value):
        return "n/a"
    decimals = _METRICS[metric].decimals if metric in _METRICS else 4
    return f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}"


def texts(samples, column: str) -> list[str]:
    """A text column of a per-sample table (an empty text read back as NaN -> "")."""
    return ["" if v != v else str(v) for v in samples[column]]


# --- mean of a per-example score ------------------------------------------------------------------------
def _scores(samples) -> np.ndarray:
    return samples[["score"]].to_numpy(dtype=float)


def _mean(sums: np.ndarray, n: int) -> np.ndarray:
    return np.asarray(sums, dtype=float)[0] / n


for _name in ("accuracy", "top1", "top5"):
    register_metric(Metric(_name, True, _scores, _mean))


# --- edit rates (jiwer) ---------------------------------------------------------------------------------
EDIT_COLUMNS = {"wer": ("word_edits", "ref_words"), "cer": ("char_edits", "ref_chars")}


def _edit_counts(metric: str) -> Callable[[Any], np.ndarray]:
    def counts(samples) -> np.ndarray:
        import jiwer

        edits, length = EDIT_COLUMNS[metric]
        if {edits, length} <= set(samples.columns):
            return samples[[edits, length]].to_numpy(dtype=float)
        if not {"target", "prediction"} <= set(samples.columns):
            raise NoStatistics(f"{metric}: the per-sample file has neither {edits}/{length} nor target/prediction "
                               "texts")
        words = metric == "wer"
        process, join = (jiwer.process_words, " ".join) if words else (jiwer.process_characters, "".join)
        out = []
        for ref, hyp in zip(texts(samples, "target"), texts(samples, "prediction")):
            ref_units, hyp_units = (ref.split(), hyp.split()) if words else (list(ref), list(hyp))
            if not ref_units:
                out.append((len(hyp_units), 0))
            elif not hyp_units:
                out.append((len(ref_units), len(ref_units)))
            else:
                m = process(join(ref_units), join(hyp_units))
                out.append((m.substitutions + m.deletions + m.insertions, len(ref_units)))
        return np.asarray(out, dtype=float).reshape(-1, 2)

    return counts


def _edit_rate(sums: np.ndarray, n: int) -> np.ndarray:
    sums = np.asarray(sums, dtype=float)
    return sums[0] / np.maximum(sums[1], 1.0)


for _name in EDIT_COLUMNS:
    register_metric(Metric(_name, False, _edit_counts(_name), _edit_rate))


# --- corpus BLEU (sacreBLEU) ----------------------------------------------------------------------------
def bleu_sentence_scores(hyps: list[str], refs: list[str]) -> list[Any]:
    """sacreBLEU's sentence BLEU of each hypothesis against its reference (effective order, as sentence
    BLEU should be): each score also reports the sentence's n-gram matches, totals and lengths."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(effective_order=True)
    return [bleu.sentence_score(hyp, [ref]) for hyp, ref in zip(hyps, refs)]


def sentence_stats(score: Any) -> list[int]:
    """A sentence's BLEU sufficient statistics [hypothesis length, reference length, n-gram matches (1..4),
    n-gram totals (1..4)] from its sacreBLEU sentence score: what the corpus score sums (the smoothing of the
    sentence score does not touch them)."""
    return [int(score.sys_len), int(score.ref_len), *map(int, score.counts), *map(int, score.totals)]


def bleu_sentence_stats(hyps: list[str], refs: list[str]) -> list[list[int]]:
    """Each sentence's BLEU sufficient statistics (:func:`sentence_stats`)."""
    return [sentence_stats(score) for score in bleu_sentence_scores(hyps, refs)]


def _bleu_stats(samples) -> np.ndarray:
    if "bleu_stats" in samples.columns:
        return np.asarray([[float(v) for v in str(s).split()] for s in samples["bleu_stats"]])
    if not {"target", "prediction"} <= set(samples.columns):
        raise NoStatistics("bleu: the per-sample file has neither bleu_stats nor target/prediction texts")
    return np.asarray(bleu_sentence_stats(texts(samples, "prediction"), texts(samples, "target")), dtype=float)


def bleu_from_stats(stats) -> float:
    """Corpus BLEU (sacreBLEU's defaults, as ``BLEU().corpus_score``) from summed sentence statistics."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    k = bleu.max_ngram_order
    stats = [int(round(v)) for v in stats]
    return float(BLEU.compute_bleu(correct=stats[2:2 + k], total=stats[2 + k:2 + 2 * k], sys_len=stats[0],
                                   ref_len=stats[1], smooth_method=bleu.smooth_method, smooth_value=bleu.smooth_value,
                                   effective_order=bleu.effective_order, max_ngram_order=k).score)


def _bleu_from_sums(sums: np.ndarray, n: int) -> np.ndarray:
    sums = np.asarray(sums, dtype=float)
    flat = sums.reshape(sums.shape[0], -1)
    return np.asarray([bleu_from_stats(flat[:, j]) for j in range(flat.shape[1])], dtype=float).reshape(sums.shape[1:])


register_metric(Metric("bleu", True, _bleu_stats, _bleu_from_sums, decimals=2))
