"""Uncertainty for ``bench report``: a bootstrap over test examples for every row, paired across all rows
that share a test set, from the per-sample files beside the rows.

Choices (and their sources):

* **Resampling is scipy's.**  One ``scipy.stats.bootstrap`` call per (task, dataset, test set) resamples
  the test examples jointly for *all* its rows (one array ``[rows, statistics, examples]``, resampled
  along the example axis, so every row sees the same resampled examples: the bootstrap is paired between
  methods, seeds and knob values).  Its statistic returns every row's metric at once; scipy's percentile
  interval is each row's 95% CI, and its ``bootstrap_distribution`` is kept, so that every quantity
  derived from rows (a seed mean, a difference between two methods, quality on a method's hull at a
  budget, Pareto-front membership) gets its 95% percentile interval over the *same* resamples.
* ``random_state`` is fixed (:data:`RANDOM_SEED`), so the report is byte-identical when re-run.
  :data:`N_RESAMPLES` = 2000 with the percentile method: the whole report (about 250 rows, up to 10,000
  test examples each) stays well under a minute on 2 cores; BCa's jackknife would cost one statistic
  evaluation per test example and row.
* **Each metric is recomputed from per-example sufficient statistics, exactly as the row was scored**, and
  checked against the row's stored value (a row whose recomputation differs gets no CI, and the report
  says so).  The statistics and the corpus value are each metric's own (bench/metrics.py, registered once):

  - accuracy / top-1 (``score`` = 1 if correct): the mean;
  - WER / CER (jiwer 4, corpus level: total edits / total reference words or characters): per-utterance
    edit counts and reference lengths, from the stored columns ``word_edits``/``ref_words`` when the row
    has them, else recomputed with ``jiwer.process_words``/``process_characters`` from the stored
    (normalised) texts, with jiwer's own handling of empty references replaced as the task scored them
    (empty reference: the hypothesis' length in edits, 0 words);
  - BLEU (sacreBLEU 2, default ``BLEU()``: 13a tokenisation, exp smoothing): sacreBLEU's sentence-level
    sufficient statistics (hypothesis and reference lengths, n-gram matches and totals), from stored
    ``bleu_stats`` when present, else read from ``BLEU.sentence_score`` of the stored texts; the corpus
    score of a resample is ``BLEU.compute_bleu`` of their sum (both public).  For BLEU
    comparisons the claims also run sacreBLEU's own paired bootstrap test
    (:func:`sacrebleu_paired_test`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench import metrics, results
from bench.metrics import NoStatistics

CONFIDENCE = 0.95
N_RESAMPLES = 2000
RANDOM_SEED = 20261117
MIN_SEEDS = 3  # the seed level of a two-level interval is estimated from this many training seeds on
POWER = 0.80  # minimum detectable effects: the effect found with this probability at the 5% level
TOLERANCE = 1e-6  # relative: a recomputed metric must equal the stored one (float32-stored accuracies differ ~1e-8)
MAX_CHUNK_VALUES = 10_000_000  # resampled values scipy holds at once (its ``batch``): ~80 MB of float64


def supported(metric: str) -> bool:
    return metrics.supported(metric)


def example_statistics(metric: str, samples) -> np.ndarray:
    """[examples, k] per-example sufficient statistics of ``metric``, in the order of ``samples``."""
    return metrics.get(metric).statistics(samples)


def metric_from_sums(metric: str, sums: np.ndarray, n: int) -> np.ndarray:
    """The metric from statistics summed over examples: ``sums`` is [k, ...]; returns [...]."""
    return metrics.get(metric).from_sums(sums, n)


# ---------------------------------------------------------------------------------------------
# The joint bootstrap of one test set
# ---------------------------------------------------------------------------------------------
@dataclass
class Draws:
    """Bootstrap draws of row metrics on one test set: row key -> value and [B] resampled values."""

    metric: str
    n_examples: int
    value: dict[str, float] = field(default_factory=dict)
    draws: dict[str, np.ndarray] = field(default_factory=dict)
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)


def bootstrap_rows(metric: str, stats: dict[str, np.ndarray], n_resamples: int = N_RESAMPLES,
                   seed: int = RANDOM_SEED) -> Draws:
    """One paired ``scipy.stats.bootstrap`` over the examples of every row in ``stats`` (row key ->
    [examples, k], all rows in the same example order)."""
    from scipy.stats import bootstrap

    keys = list(stats)
    data = np.stack([stats[k].T for k in keys])  # [rows, k, examples]
    n = data.shape[-1]

    def statistic(x, axis=-1):
        return metric_from_sums(metric, np.moveaxis(x.sum(axis=axis), 1, 0), n)  # [rows, ...]

    batch = max(1, MAX_CHUNK_VALUES // max(1, data.size))
    result = bootstrap((data,), statistic, n_resamples=n_resamples, batch=batch, vectorized=True, axis=-1,
                       confidence_level=CONFIDENCE, method="percentile", random_state=np.random.default_rng(seed))
    values = statistic(data)
    out = Draws(metric, n)
    dist = np.asarray(result.bootstrap_distribution).reshape(len(keys), -1)
    for i, key in enumerate(keys):
        out.value[key] = float(values[i])
        out.draws[key] = dist[i]
        out.low[key] = float(np.atleast_1d(result.confidence_interval.low)[i])
        out.high[key] = float(np.atleast_1d(result.confidence_interval.high)[i])
    return out


def finite(values) -> np.ndarray:
    """``values`` as a float array without its NaN and infinite entries."""
    values = np.asarray(values, dtype=float)
    return values[np.isfinite(values)]


def interval(draws: np.ndarray) -> tuple[float, float]:
    """The 95% percentile interval of a derived quantity over the bootstrap draws (NaN draws are left
    out: e.g. quality at a budget a resample's hull does not reach)."""
    draws = finite(draws)
    if draws.size == 0:
        return math.nan, math.nan
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(draws, [alpha, 1 - alpha])
    return float(low), float(high)


def matches(stored: float, recomputed: float) -> bool:
    return math.isclose(float(stored), float(recomputed), rel_tol=TOLERANCE, abs_tol=1e-12)


# ---------------------------------------------------------------------------------------------
# sacreBLEU's own paired bootstrap test
# ---------------------------------------------------------------------------------------------
def sacrebleu_paired_test(baseline: tuple[list[str], list[str]], system: tuple[list[str], list[str]],
                          n_samples: int = 1000) -> dict[str, float]:
    """sacreBLEU's paired bootstrap resampling test (``sacrebleu.significance.PairedTest``, test type
    ``bs``; its fixed seed 12345 unless SACREBLEU_SEED is set) of ``system`` against ``baseline``, each
    (hypotheses, references) on the same references.  Returns both scores, the p-value, and the system's
    mean and 95% CI half-width over sacreBLEU's resamples."""
    import logging

    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if list(baseline[1]) != list(system[1]):
        raise ValueError("sacreBLEU paired test: the two systems were scored on different references")
    logging.getLogger("sacrebleu").setLevel(logging.WARNING)
    test = PairedTest([("baseline", list(baseline[0])), ("system", list(system[0]))], {"BLEU": BLEU()},
                      references=[list(baseline[1])], test_type="bs", n_samples=n_samples)
    _, scores = test()
    base, sys = scores["BLEU"][0], scores["BLEU"][1]
    return {"baseline": float(base.score), "system": float(sys.score), "p_value": float(sys.p_value),
            "system_mean": float(sys.mean), "system_ci": float(sys.ci)}


# ---------------------------------------------------------------------------------------------
# Two levels: training seeds, then test examples within each seed
# ---------------------------------------------------------------------------------------------
def seed_level(per_seed: np.ndarray, seed: int = RANDOM_SEED) -> np.ndarray:
    """[B] two-level bootstrap draws of the mean over seeds, from ``per_seed`` ([S, B]: each seed's
    example-level draws, paired across rows).

    ``scipy.stats.bootstrap`` resamples the S seeds with replacement (its own random state, fixed, so every
    call with S seeds draws the same seed multisets: two quantities over the same seeds stay paired); in
    resample j, every drawn seed contributes its example-level draw j.  The seeds of a point are scored on one
    test set, and draw j resamples the same examples for all of them: the test set's sampling error is shared
    by the seeds, not averaged away.  Fewer than :data:`MIN_SEEDS` seeds: the mean of the example-level draws
    (the seed level is not estimated)."""
    from scipy.stats import bootstrap

    per_seed = np.asarray(per_seed, dtype=float)
    n_seeds, n_draws = per_seed.shape
    if n_seeds < MIN_SEEDS:
        return per_seed.mean(axis=0)
    columns = np.broadcast_to(np.arange(n_draws)[:, None], (n_draws, n_seeds))  # [B, S]: draw j for every seed

    def statistic(picked, axis=-1):
        picked = np.asarray(picked).astype(int)
        if picked.ndim == 1:  # scipy's estimate on the data itself (unused by the percentile interval)
            return float(per_seed[picked].mean())
        if picked.shape != (n_draws, n_seeds):
            raise AssertionError(f"expected all {n_draws} seed resamples at once, got {picked.shape}")
        return per_seed[picked, columns].mean(axis=-1)

    result = bootstrap((np.arange(n_seeds),), statistic, n_resamples=n_draws, vectorized=True, axis=-1,
                       batch=None, method="percentile", random_state=np.random.default_rng(seed))
    return np.asarray(result.bootstrap_distribution, dtype=float)


def p_value(draws: np.ndarray, need: float) -> float:
    """Two-sided bootstrap p-value of "the quantity equals ``need``": twice the smaller share of the draws
    on either side of it, counted as (k + 1) / (B + 1) so that it is never 0; NaN without finite draws.
    A 95% percentile interval excludes ``need`` exactly when this is below 0.05 (up to that +1)."""
    draws = finite(draws)
    if draws.size == 0:
        return math.nan
    tail = min(int((draws <= need).sum()), int((draws >= need).sum()))
    return min(1.0, 2 * (tail + 1) / (draws.size + 1))


def min_detectable_effect(draws: np.ndarray, alpha: float = 1 - CONFIDENCE, power: float = POWER) -> float:
    """The smallest difference from the margin that a test with this spread detects with probability
    ``power`` at level ``alpha`` (two-sided): (z_{1-α/2} + z_{power}) × the draws' standard deviation, the
    factor from ``statsmodels.stats.power.NormalIndPower`` (one sample: ``ratio=0``, ``nobs1=1``)."""
    from statsmodels.stats.power import NormalIndPower

    draws = finite(draws)
    if draws.size < 2:
        return math.nan
    factor = NormalIndPower().solve_power(effect_size=None, nobs1=1, alpha=alpha, power=power, ratio=0.0,
                                          alternative="two-sided")
    return float(factor) * float(draws.std(ddof=1))


def seed_level_mde(values, alpha: float = 1 - CONFIDENCE, power: float = POWER) -> float:
    """The minimum detectable effect of the t-test over per-seed values (the seeds as the unit):
    ``statsmodels.stats.power.TTestPower``'s standardised effect at this many seeds times their standard
    deviation; NaN with fewer than :data:`MIN_SEEDS` seeds."""
    from statsmodels.stats.power import TTestPower

    values = finite(values)
    if values.size < MIN_SEEDS:
        return math.nan
    effect = TTestPower().solve_power(effect_size=None, nobs=values.size, alpha=alpha, power=power,
                                      alternative="two-sided")
    return float(effect) * float(values.std(ddof=1))


def seed_level_p(values, need: float) -> float:
    """Two-sided p-value of the t-test "the mean over seeds equals ``need``" (``scipy.stats.ttest_1samp``, the
    seeds as the unit); NaN with fewer than :data:`MIN_SEEDS` seeds."""
    from scipy.stats import ttest_1samp

    values = finite(values)
    if values.size < MIN_SEEDS:
        return math.nan
    if np.all(values == values[0]):
        return 1.0 if values[0] == need else 0.0
    return float(ttest_1samp(values, need).pvalue)


def holm(p_values: list[float], alpha: float = 1 - CONFIDENCE) -> tuple[list[bool], list[float]]:
    """Holm–Bonferroni over a family (``statsmodels.stats.multitest.multipletests``): which hypotheses are
    rejected and the adjusted p-values; NaN p-values (nothing tested) are left out of the family."""
    from statsmodels.stats.multitest import multipletests

    tested = [i for i, p in enumerate(p_values) if math.isfinite(p)]
    reject, adjusted = [False] * len(p_values), [math.nan] * len(p_values)
    if tested:
        rej, adj, _, _ = multipletests([p_values[i] for i in tested], alpha=alpha, method="holm")
        for i, r, a in zip(tested, rej, adj):
            reject[i], adjusted[i] = bool(r), float(a)
    return reject, adjusted


# ---------------------------------------------------------------------------------------------
# Every row of a report section
# ---------------------------------------------------------------------------------------------
@dataclass
class Uncertainty:
    """Bootstrap draws for the rows of one report section, keyed by row key; rows without draws have a
    note saying why (no per-sample file, a metric without a bootstrap, a recomputation that differs)."""

    draws: dict[str, np.ndarray] = field(default_factory=dict)
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)
    test_set: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    samples: dict[str, object] = field(default_factory=dict)  # row key -> per-sample frame (index order)
    seed: dict[str, int] = field(default_factory=dict)  # row key -> training seed

    def by_seed(self, keys) -> list[str] | None:
        """``keys`` in seed order, or None unless every key has draws on one test set."""
        keys = list(keys)
        if not keys or any(k not in self.draws for k in keys) or len({self.test_set[k] for k in keys}) != 1:
            return None
        return sorted(keys, key=lambda k: self.seed.get(k, 0))

    def mean_draws(self, keys) -> np.ndarray | None:
        """Two-level draws of the mean over ``keys`` (a point's rows, one per seed: :func:`seed_level`), or None
        unless every key has draws on one test set."""
        keys = self.by_seed(keys)
        if keys is None:
            return None
        distinct = len({self.seed.get(k) for k in keys}) == len(keys)
        stacked = np.stack([self.draws[k] for k in keys])
        return seed_level(stacked) if distinct else stacked.mean(axis=0)

    def example_draws(self, keys) -> np.ndarray | None:
        """Draws of the same mean over test examples only (the seeds fixed)."""
        keys = self.by_seed(keys)
        return None if keys is None else np.mean([self.draws[k] for k in keys], axis=0)

    def ci(self, keys) -> tuple[float, float]:
        draws = self.mean_draws(keys)
        return (math.nan, math.nan) if draws is None else interval(draws)

    def example_ci(self, keys) -> tuple[float, float]:
        draws = self.example_draws(keys)
        return (math.nan, math.nan) if draws is None else interval(draws)


def samples_path(row: dict, results_dir) -> Path:
    row_file = row.get("row_file")
    if isinstance(row_file, str) and row_file:
        path = Path(row_file)
        return path.with_name(path.name[:-len(".csv")] + ".samples.csv.gz")
    return results.row_dir(results_dir, row["task"], row["method"]) / f"{row['run_id']}.samples.csv.gz"


def rows_uncertainty(rows, results_dir, key: str = "row_key") -> Uncertainty:
    """Read every row's per-sample file, check that the metric recomputes to the stored value, and run one
    paired bootstrap per test set (rows whose examples, by ``index``, are the same)."""
    import hashlib

    import pandas as pd

    out = Uncertainty()
    groups: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for row in rows.to_dict("records"):
        name, metric = row[key], str(row["metric"])
        path = samples_path(row, results_dir)
        if not supported(metric):
            out.notes[name] = f"no bootstrap for metric {metric}"
            continue
        if not path.exists():
            out.notes[name] = "no per-sample file"
            continue
        samples = pd.read_csv(path, keep_default_na=False, na_values=[""])
        if "index" in samples:
            samples = samples.sort_values("index", kind="stable").reset_index(drop=True)
        try:
            stats = example_statistics(metric, samples)
        except NoStatistics as err:
            out.notes[name] = str(err)
            continue
        value = float(metric_from_sums(metric, stats.sum(axis=0), len(stats)))
        if not matches(row["quality"], value):
            out.notes[name] = f"recomputed {metric} {value:.6g} differs from the row's {float(row['quality']):.6g}"
            continue
        order = samples["index"].to_numpy() if "index" in samples else np.arange(len(samples))
        test_set = hashlib.sha256(np.ascontiguousarray(order, dtype=np.int64).tobytes()).hexdigest()[:12]
        groups.setdefault((metric, test_set), {})[name] = stats
        out.test_set[name] = test_set
        out.seed[name] = int(row.get("seed", 0))
        out.samples[name] = samples
    for (metric, _), stats in sorted(groups.items()):
        draws = bootstrap_rows(metric, stats)
        out.draws.update(draws.draws)
        out.low.update(draws.low)
        out.high.update(draws.high)
    return out


def proportion_interval(successes: int, n: int) -> tuple[float, float]:
    """95% Wilson interval of a proportion over ``n`` test examples (``scipy.stats.binomtest``)."""
    from scipy.stats import binomtest

    if n <= 0:
        return float("nan"), float("nan")
    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def mean_interval(values) -> tuple[float, float]:
    """95% t-interval of a mean over test examples (``scipy.stats.t``; NaN for fewer than two values)."""
    from scipy import stats

    values = finite(values)
    if len(values) < 2:
        return float("nan"), float("nan")
    sem = stats.sem(values)
    if sem == 0:
        return float(values.mean()), float(values.mean())
    low, high = stats.t.interval(0.95, len(values) - 1, loc=float(values.mean()), scale=sem)
    return float(low), float(high)
