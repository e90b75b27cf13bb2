"""Paper claims as data: what a method's (or task's) package declares, and ``bench report`` evaluates.

A claim names the task (and, optionally, the dataset) whose rows test it, and one or more checks; each
check compares *points* (seed means per knob value) chosen by :class:`Select`.  The core evaluates the
checks with bootstrap confidence intervals (``bench/report/claims.py``) into ``reports/claims.md`` with a
verdict: holds, does not hold, or inconclusive at 95%.  This module only declares; it imports nothing heavy,
so a method's ``claims.py`` can be imported by ``bench ls`` or a test without torch.

Registration: ``MethodSpec(..., claims="methods.<name>.claims:CLAIMS")`` (or ``TaskSpec``): a list of
:class:`Claim`.

The check types (all qualities in the metric's own units; "better" follows the metric's direction):

* :class:`Reaches` -- every selected point's quality reaches ``threshold`` (e.g. "solves parity": 0.99);
  with ``fails=True``: every selected point stays *below* it (e.g. "fails": under 0.6, chance being 0.5).
* :class:`Beats` -- ``a`` is better than ``b`` by more than ``margin``: at each fraction of dense cost in
  ``budgets`` (both methods' hulls interpolated there), or, with ``budgets=()``, at each of ``a``'s points
  (against ``b``'s hull at that point's cost, or against ``b``'s single point when ``b_is_point``).
  A negative ``margin`` makes it a non-inferiority check ("within 1 point of": margin = -0.01).
* :class:`Increases` -- within each selected row, per-sample column ``y`` increases with column ``x``
  (Spearman correlation > 0), e.g. ponder steps with input difficulty.

``quantifier`` ("all" or "any") says whether every budget/point must satisfy a check or at least one.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Select:
    """Points of one method in a report section (``method`` "" = of every method).

    ``variant_has`` / ``variant_not``: substrings the row's variant must (not) contain; ``variant_is``: the
    exact variant ("" = rows without one); ``setting_has``: a substring of the curve's setting (config keys
    that split a method's rows, e.g. "pairs=diagonal"); ``knob``: a regular expression the knob value must
    match in full ("" = every value); ``curve``: the exact curve (its label in the report: the method and
    what tells its variants apart); ``kind``: the method's knob kind ("static" = the fixed-size models).
    ``label`` names the selection in the report.
    """

    method: str
    label: str = ""
    variant_has: str = ""
    variant_not: str = ""
    variant_is: str | None = None
    setting_has: str = ""
    knob: str = ""
    curve: str = ""
    kind: str = ""

    @property
    def name(self) -> str:
        return self.label or self.curve or self.method


@dataclass(frozen=True)
class Reaches:
    select: Select
    threshold: float
    fails: bool = False
    quantifier: str = "all"
    title: str = ""


@dataclass(frozen=True)
class Beats:
    a: Select
    b: Select
    budgets: tuple[float, ...] = ()
    margin: float = 0.0
    b_is_point: bool = False
    max_cost: float = float("inf")  # with budgets=(): only a's points at most this fraction of dense cost
    quantifier: str = "all"
    title: str = ""


@dataclass(frozen=True)
class Increases:
    select: Select
    x: str
    y: str
    quantifier: str = "all"
    title: str = ""


Check = Reaches | Beats | Increases


PAPER, HARNESS = "paper", "harness"  # whose claim it is: a paper's (quoted), or the harness's own question


@dataclass(frozen=True)
class Claim:
    """One claim: ``source`` (paper), ``statement`` (what is tested, in a sentence), where it is tested
    (``task``; ``dataset``: a substring of the dataset, "" = the task's default dataset), and its checks
    (the claim holds when every check holds).  ``note`` says how the statement was turned into checks.

    A paper's claim (``kind`` "paper") quotes the paper: ``quote`` is its sentence verbatim, ``section``
    where it is (section, table or figure), ``axis`` the metric and cost axis the paper states it on (e.g.
    "BLEU against average exit"); the checks use that axis where the rows have it, and the note says where
    they cannot.  A claim of kind "harness" is the harness's own question about a method (no paper makes it)
    and is listed apart from the papers' claims."""

    id: str
    source: str
    statement: str
    task: str
    checks: tuple[Check, ...]
    dataset: str = ""
    note: str = ""
    owner: str = field(default="", compare=False)
    quote: str = ""
    section: str = ""
    axis: str = ""
    kind: str = PAPER
    # the training recipe of the rows it reads (bench/recipes.py): "paper" (the papers' recipes); while a
    # selection has no such rows, the report reads the "matched" rows and says so
    recipe: str = "paper"


@dataclass(frozen=True)
class BaseTarget:
    """What a task's offline default dense base model must reach, judged by ``bench report`` on the learning
    curve under ``results/curves`` (bench/report/curves.py): declared as ``BASE_TARGET`` in the task's
    ``claims`` module.  ``quality``: a threshold in the metric's direction at the default budget (WER ≤ 0.30,
    BLEU ≥ 10); ``doubling_gain``: doubling the default steps must gain less than this (metric units, the
    metric's direction applied); ``minutes``: the longest the default base may train (wall clock);
    ``source``: who set the target; ``task``: the task it is for (a claims module serves every task
    registered from its package, e.g. iwslt and wmt); ``equal_budget_control``: a dense model trained for
    the base's and a method's steps together (``train_steps + method_steps``) must gain less over the
    default base than the base's seed spread, so that a method's loss against dense is not a budget
    artefact."""

    task: str
    quality: float | None = None
    doubling_gain: float | None = None
    minutes: float = 60.0
    source: str = ""
    equal_budget_control: bool = False

