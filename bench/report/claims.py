"""Evaluate every registered paper claim (``bench.claims``) on the report's sections into
``reports/claims.md`` (and ``claims.html``), with its numbers, 95% CIs and a verdict.

The rules are :data:`RULES` (printed at the top of claims.md).  A claim's checks are evaluated by
``bench/report/checks.py`` into the records and verdicts of ``bench/report/verdicts.py``; this module finds
the claims and their sections, corrects the page's checks for multiple comparisons (:func:`adjust`) and
writes the page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Callable

from bench import registry, results, stats, versions
from bench.claims import HARNESS, Beats, Claim, Increases, Reaches
from bench.report.checks import beats, claim_selects, increases, reaches, rows_recipe, select_points
from bench.report.page import NA, markdown_table, md_escape, write_page
from bench.report.status import cell
from bench.report.verdicts import FAILS, HOLDS, UNSURE, UNTESTED, CheckResult, Item, Test, ci_text, combine
from bench.report.views import TaskView

SACREBLEU_COLUMN = "sacreBLEU paired bootstrap (p of Δ = 0)"  # a test of no difference, whatever the margin
RULES = [
    "* A comparison is judged on the bootstrap draws (paired over test examples: the same resampled indices for "
    "every row of a section; parity draws each seed's test set from the seed, so there the rows of one seed share "
    "examples). With Δ = how much better A is than B (the metric's direction applied) and the check's "
    "margin m, the verdict is **holds** when the whole 95% CI of Δ lies above m, **does not hold** when it lies "
    "below m, and **inconclusive** when it contains m. A threshold check works the same way on a point's quality.",
    "* **Seeds.** Each comparison is computed per seed (seed s of A against seed s of B, a hull of seed s read at "
    "that seed's own cost), and the pooled Δ is the mean of the per-seed Δs over the seeds both sides have (the A "
    "and B columns average the same seeds, so Δ = A − B in the metric's direction). Its CI is two-level: "
    "`scipy.stats.bootstrap` resamples the seeds, and each resampled seed brings a resample of its test examples, "
    "so the CI covers the training seed as well as the test set; the \"examples only\" column holds the CI with the "
    f"seeds fixed. With fewer than {stats.MIN_SEEDS} seeds the seed level is not estimated (both CIs are the "
    "examples-only one, and the detectable effect says so). With few seeds the percentile bootstrap cannot reach "
    "beyond the seeds it has seen (its seed-level spread is too narrow), so a verdict also needs the t-interval over "
    "the per-seed values (`scipy.stats.t`, the seeds as the unit; each seed's value carries its own test-set noise) "
    "to exclude the margin, or it is inconclusive. On top, a verdict that a seed's own Δ contradicts is "
    "downgraded to inconclusive (\"seeds disagree\"), and so is one that a seed of either side cannot be checked on "
    "(its rows lack a point the comparison needs, or its own hull does not reach the cost; the per-seed column "
    "shows it as —).",
    "* **BLEU.** A point-against-point comparison on BLEU also runs sacreBLEU's own paired bootstrap test "
    "(`sacrebleu.significance.PairedTest`, 1000 resamples) for every seed pair; with margin 0, a verdict that any "
    "seed's test does not support at p < 0.05 is downgraded to inconclusive.",
    "* At a budget, a method's quality is read on its upper concave hull: the smallest concave line over its Pareto "
    "points (a point on or below the chord of two others is not a vertex; a segment is reached by running its two "
    "end points on shares of the inputs), so between two vertices the value is an interpolation. Each seed's hull "
    "is chosen on that seed's own points, on the validation split where every one of its rows has a validation "
    "metric (schema 7 rows of a task with a validation split; older rows: on the test split), and "
    "every bootstrap resample is read on that same line: the CI is that of the value printed, conditional on the "
    "vertices chosen (which points are on the front is the leaderboard's \"on the front\" share). The \"hull read "
    "between\" column names the vertices of the seed means' hull, as a guide; a seed's own hull can differ. A budget "
    "outside a method's measured cost range is \"not measured\" (inconclusive): hulls are never extrapolated.",
    "* **Multiple comparisons.** Each line has a two-sided bootstrap p-value of \"Δ equals what the line needs\" "
    "(twice the smaller share of its two-level draws on either side, as (k + 1)/(B + 1)), or, with enough seeds, "
    "the t-test's over the per-seed values (`scipy.stats.ttest_1samp`) where that is larger. A check's p is the "
    "largest of its lines' where its verdict needs every line, the smallest times the number of lines where one "
    "line settles it, and its deciding line's when it is inconclusive. The family is every tested check on this "
    "page; Holm–Bonferroni (`statsmodels.stats.multitest.multipletests`, 5%) keeps a check's verdict when it "
    "rejects, and makes it inconclusive otherwise. The summary's \"Holm-adjusted\" column is the claim's verdict "
    "from its adjusted checks.",
    "* **Detectable effect.** Beside each line: the smallest distance from what the line needs that its test "
    "would detect with 80% power at the 5% level: (z₀.₉₇₅ + z₀.₈) × the standard deviation of its two-level draws "
    "(`statsmodels.stats.power.NormalIndPower`), or, with enough seeds, the t-test's over the per-seed values "
    "(`TTestPower` at that many seeds × their standard deviation) where that is larger, since a verdict needs "
    "both. An inconclusive line whose Δ lies nearer the margin than this "
    "could not have been decided by this many seeds and examples.",
    "* **Degenerate models.** A point whose every seed outputs one label, or whose accuracy is not above the share "
    "of the test set's most frequent label (each seed's CI reaches it), is marked; a check that such a baseline "
    "\"fails\" says so (\"degenerate\"), and the summary flags the claim: the baseline learned nothing, so its "
    "failure says nothing about the architecture.",
    "* **Points compared** lists, per training-protocol version (rows without a `protocol` column are version 1), "
    "the points a claim's checks compared, counted by the seeds they have rows for.",
    "* A check over several budgets or points holds when all of them hold (quantifier \"all\"; it does not hold "
    "when any does not) or when one of them holds (\"any\"; it does not hold when none does); a claim holds when "
    "every check holds. A check whose selection matches no row is **not tested** (nothing was compared), and so "
    "is a claim with such a check that no other check refutes.",
    "* **Deciding line** (the summary): in each check, among the lines with the check's verdict, the weakest for "
    "quantifier \"all\" and the strongest for \"any\", by the centre of the line's CI against what it needs (so a "
    "check that does not hold with \"any\" shows its line closest to holding); across the checks whose verdict is "
    "the claim's (a claim needs every check), the weakest -- for a claim that does not hold, the clearest failure "
    "-- ranked by that distance in units of each line's CI half-width.",
]


@dataclass
class ClaimResult:
    """A claim evaluated on its section: its checks and the verdict they combine into (``reason``: why
    nothing was evaluated)."""

    claim: Claim
    view: TaskView | None
    checks: list[CheckResult] = field(default_factory=list)
    verdict: str = UNTESTED
    reason: str = ""
    recipe: str = ""  # the training recipe of the rows read (:func:`rows_recipe`)

    @property
    def adjusted(self) -> str:
        """The claim's verdict from its checks' Holm-adjusted verdicts."""
        return combine([c.adjusted or c.verdict for c in self.checks]) if self.checks else self.verdict

    @property
    def flags(self) -> list[str]:
        """Lines whose verdict stands on a degenerate model (one that learned nothing)."""
        return [f"{it.where}: {it.reason}" for c in self.checks for it in c.items if it.reason.startswith("degenerate")]

    @cached_property
    def older_code(self) -> list[str]:
        """Per method whose rows the checks read, the code versions of those rows that today's code has moved
        past (a behaviour version was bumped since: the campaign re-runs their points), e.g. "dat: 1 row of
        skeleton1.trainer1.iwslt1.dat2 (today skeleton1.trainer1.iwslt1.dat3)"."""
        if self.view is None:
            return []
        keys = {key for check in self.checks for keys in check.points for key in keys}
        rows = self.view.rows[self.view.rows["row_key"].isin(keys)]
        out = []
        tagged = rows[rows["code_version"].astype(str).str.startswith("skeleton")]  # explicit versions only
        for (task, method), group in tagged.groupby(["task", "method"], sort=True):
            try:
                today = versions.current_tag(str(task), str(method))
            except registry.RegistryError:  # a plugin that is not loaded here: its versions are unknown
                continue
            older = sorted({c for c in group["code_version"] if results.made_by_other_versions(str(c), today)})
            n = int(group["code_version"].isin(older).sum())
            if n:
                out.append(f"{method}: {n} row{'s' * (n != 1)} of {', '.join(older)} (today {today})")
        return out

    @property
    def evidence(self) -> str:
        """The points the claim's checks selected, their seeds and protocol versions (:func:`evidence_text`)."""
        points = {keys for check in self.checks for keys in check.points}
        return evidence_text(self.view, points) if self.view is not None else NA


# ---------------------------------------------------------------------------------------------
# Claims from the registry
# ---------------------------------------------------------------------------------------------
def claims_path(spec) -> str:
    """Where a method's or task's claims are: the "module:attr" its spec declares (``claims=``); "" for
    none."""
    return str(getattr(spec, "claims", "") or "")


def registered_claims() -> list[Claim]:
    """Every claim a registered method or task declares, methods first (by name), each in declaration order."""
    out = []
    for kind, specs in (("method", registry.methods()), ("task", registry.tasks())):
        for name, spec in specs.items():
            path = claims_path(spec)
            if path:
                out += [replace(c, owner=f"{kind} {name}") for c in registry.load_impl(path)]
    return out


def find_view(claim: Claim, views: list[TaskView]) -> TaskView | None:
    """The section a claim is tested on: its task's, on the dataset the claim names (a part of its name), or
    else on the task's default dataset (the first section of the task when it declares none)."""
    mine = [v for v in views if v.task == claim.task]
    if claim.dataset:
        mine = [v for v in mine if claim.dataset in v.dataset]
    else:
        try:
            default = registry.task_spec(claim.task).default_dataset
        except registry.RegistryError:
            default = ""
        mine = [v for v in mine if v.dataset == default] if default else mine[:1]
    return mine[0] if mine else None


def evaluate(claim: Claim, views: list[TaskView], results_dir) -> ClaimResult:
    """A claim's checks on its section (:func:`find_view`), on the rows of :func:`rows_recipe`."""
    view = find_view(claim, views)
    out = ClaimResult(claim, view)
    if view is None or view.unc is None:
        out.reason = f"no rows of task {claim.task}" + (f" dataset containing {claim.dataset!r}" if claim.dataset else "")
        return out
    out.recipe = rows_recipe(claim, view)
    for check in claim.checks:
        if isinstance(check, Reaches):
            out.checks.append(reaches(view, check, out.recipe))
        elif isinstance(check, Beats):
            out.checks.append(beats(view, check, results_dir, out.recipe))
        elif isinstance(check, Increases):
            out.checks.append(increases(view, check, out.recipe))
        else:
            raise TypeError(f"claim {claim.id}: unknown check {type(check).__name__}")
    out.verdict = combine([c.verdict for c in out.checks])
    return out


def adjust(claim_results: list[ClaimResult]) -> int:
    """Holm–Bonferroni over every tested check of the claims page (the family): a check keeps its verdict
    ("holds" or "does not hold") when Holm rejects "Δ equals what it needs" at 5%, and is inconclusive
    otherwise.  Returns the family's size."""
    checks = [c for r in claim_results for c in r.checks]
    reject, adjusted = stats.holm([c.p for c in checks])
    for check, rejected, p in zip(checks, reject, adjusted):
        check.p_adjusted = p
        decided = check.verdict in (HOLDS, FAILS)
        check.adjusted = check.verdict if (rejected and decided) or check.verdict == UNTESTED else UNSURE
    return sum(math.isfinite(c.p) for c in checks)


def evidence_text(view: TaskView, points) -> str:
    """The rows of the points a claim's checks selected, per protocol version: the points counted by the
    seeds they have (:func:`bench.report.status.cell`), e.g. "12 points · seeds 0, 1, 2 (protocol 2)"."""
    rows = view.rows[view.rows["row_key"].isin({key for keys in points for key in keys})]
    if rows.empty:
        return "no points"
    return cell(rows, [c for c in ("curve", "method", "variant", "setting", "knob_name", "knob_value") if c in rows])


# ---------------------------------------------------------------------------------------------
# claims.md
# ---------------------------------------------------------------------------------------------
def _standardized(item: Item) -> float:
    """How far a line is towards "holds", in units of its CI's half-width (comparable across checks whose
    numbers are in different units); NaN when not measured."""
    half = (item.slack[1] - item.slack[0]) / 2
    return item.centre_slack / half if half > 0 else math.copysign(math.inf, item.centre_slack)


def deciding(result: ClaimResult) -> tuple[int, Item] | None:
    """(check number, line) that settles the claim's verdict.  Within a check, :meth:`CheckResult.deciding_item`;
    across the checks with the claim's verdict (a claim needs every check): the weakest for a claim that holds
    or is inconclusive (the check closest to failing or least sure), the clearest failure for one that does not
    hold -- ranked by each line's distance from what it needs in units of its CI's half-width, since the checks'
    numbers can be in different units (a metric, a rank correlation)."""
    found = [(number, check.deciding_item()) for number, check in enumerate(result.checks, 1)
             if check.verdict == result.verdict]
    found = [(n, it) for n, it in found if it is not None]
    if not found:
        return None
    measured = [(n, it) for n, it in found if math.isfinite(it.centre_slack)]
    if not measured:
        return found[0]
    return min(measured, key=lambda pair: _standardized(pair[1]))


def _headline(result: ClaimResult) -> tuple[str, str]:
    """The deciding line of the claim as (short text, what it needs)."""
    found = deciding(result)
    if found is None:
        return result.reason or NA, NA
    number, it = found
    value = f"Δ = {ci_text(it.delta, it.lo, it.hi, '.4f', sign=True)}" if it.b else it.a
    prefix = f"check {number}, " if len(result.checks) > 1 else ""
    value = f": {value}" if value else ""
    return f"{prefix}{it.where}{value}" + (f" ({it.reason})" if it.reason else ""), it.need or NA


def _mde_text(test: Test) -> str:
    if not math.isfinite(test.mde):
        return NA
    return f"{test.mde:.4f}" + ("" if test.seed_level else f" (examples only: {test.seeds} seed(s))")


def _headline_mde(result: ClaimResult) -> str:
    found = deciding(result)
    return _mde_text(found[1].test) if found is not None else NA


def summary_lines(claim_results: list[ClaimResult], link: str = "claims.md") -> list[str]:
    """The summary tables: the papers' claims, then the harness's own (each a line per claim)."""
    header = ["claim", "source", "tested on", "verdict (95%)", "Holm-adjusted", "deciding line [95% CI]", "needed",
              "detectable effect (80% power)", "points compared"]

    def table(results: list[ClaimResult]) -> str:
        return markdown_table(header, [
            [r.claim.id, r.claim.source + (f", {r.claim.section}" if r.claim.section else ""),
             f"{r.claim.task}" + (f" ({r.view.dataset.split(' (')[0]})" if r.view else ""),
             r.verdict + (" ⚑ degenerate baseline" if r.flags else "") + (" ⚑ older code" if r.older_code else ""),
             r.adjusted, *_headline(r), _headline_mde(r),
             r.evidence] for r in results])

    papers = [r for r in claim_results if r.claim.kind != HARNESS]
    own = [r for r in claim_results if r.claim.kind == HARNESS]
    lines = [f"Every registered paper claim, judged on today's rows ([details]({link})):", "", table(papers)]
    if own:
        lines += ["", "The harness's own questions about the methods (no paper makes these claims):", "", table(own)]
    return lines


def claim_curves(claim: Claim, view: TaskView) -> set[str]:
    """The curves a claim's checks select in ``view``, by the selectors' full filters (a claim that leaves
    some of a method's points out leaves their curve out); the static models (selected by kind) are not
    among them."""
    recipe = rows_recipe(claim, view)
    return {str(curve) for sel in claim_selects(claim) if sel.kind != "static"
            for curve in select_points(view, sel, recipe)["curve"]}


def _recipe_text(result: ClaimResult) -> str:
    if not result.recipe:
        return NA
    if result.recipe == result.claim.recipe:
        return f"recipe={result.recipe}"
    return (f"recipe={result.recipe}: no recipe={result.claim.recipe} rows of these methods yet, so the verdict is "
            f"on the harness's equal budget, not on the paper's recipe")


def _num_text(value: float, spec: str) -> str:
    return format(value, spec) if math.isfinite(value) else NA


def _example_text(item: Item) -> str:
    """The line's interval over test examples only (the seeds fixed), in the line's own units."""
    lo, hi = item.test.ex_lo, item.test.ex_hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return NA
    sign = "+" if item.b else ""
    return f"[{lo:{sign}.4f}, {hi:{sign}.4f}]"


def _check_test_text(check: CheckResult) -> str:
    if not math.isfinite(check.p):
        return "Nothing tested: not in the multiple-comparison family."
    return (f"p = {check.p:.3g}; Holm-adjusted over the page's checks: p = {check.p_adjusted:.3g}, "
            f"verdict **{check.adjusted}**.")


def _check_table(check: CheckResult) -> str:
    """A check's lines as a table: the two sides and Δ for a comparison, else the value; the sacreBLEU and
    hull columns where a line has them."""
    comparison = any(it.b for it in check.items)
    values = (["where", f"A = {check.header[0]}", f"B = {check.header[1]}", "Δ [95% CI]"] if comparison
              else ["where", "value [95% CI]"])
    header = values + ["examples only [95% CI]", "needed", "per seed Δ" if comparison else "per seed", "p",
                       "detectable effect", "verdict"]
    if any(it.extra for it in check.items):
        header.insert(-1, SACREBLEU_COLUMN)
    if any(it.hull for it in check.items):
        header.insert(-1, "hull read between")
    table = []
    for it in check.items:
        v = it.verdict + (f" ({it.reason})" if it.reason else "")
        examples = _example_text(it)
        if comparison:
            row = [it.where, it.a, it.b, ci_text(it.delta, it.lo, it.hi, ".4f", sign=True), examples,
                   it.need, it.seeds or NA]
        else:
            row = [it.where, it.a, examples, it.need, it.seeds or NA]
        row += [_num_text(it.test.p, ".3g"), _mde_text(it.test)]
        if SACREBLEU_COLUMN in header:
            row.append(it.extra or NA)
        if "hull read between" in header:
            row.append(it.hull or NA)
        table.append(row + [v])
    return markdown_table(header, table)


def _claim_lines(r: ClaimResult, static_lines: list[str]) -> list[str]:
    """A claim's section: its quote, statement, section, points, rows and verdict, then a table per check."""
    c = r.claim
    md = ["", f"## {md_escape(c.id)}", ""]
    if c.quote:
        md += [f"> {md_escape(c.quote)}", "",
               f"— {md_escape(c.source)}" + (f", {md_escape(c.section)}" if c.section else "")
               + (f"; stated on {md_escape(c.axis)}" if c.axis else ""), ""]
    md += [f"**{'Claim' if c.kind != HARNESS else 'The harness asks'}** ({md_escape(c.source)}): "
           f"{md_escape(c.statement)}  ",
           f"**Declared by** {md_escape(c.owner)}; **tested on** {md_escape(c.task)}"
           + (f" — {md_escape(r.view.dataset)}" if r.view is not None else " (no rows)") + "  ",
           f"**Points compared**: {r.evidence}  ",
           f"**Rows read**: {_recipe_text(r)}  ",
           *([f"**Older code** (rows made before a behaviour change; the campaign re-runs their points): "
              f"{md_escape('; '.join(r.older_code))}  "] if r.older_code else []),
           f"**Verdict: {r.verdict}**" + (f" ({md_escape(r.reason)})" if r.reason else "")]
    if c.note:
        md += ["", md_escape(c.note)]
    if static_lines:
        md += [""] + static_lines
    for i, check in enumerate(r.checks, 1):
        md += ["", f"### {md_escape(c.id)}, check {i}: {md_escape(check.title)} — {check.verdict}", "",
               f"Quantifier: {check.quantifier} of the lines below. {_check_test_text(check)}"]
        md += ["", _check_table(check)]
    return md


def claims_markdown(claim_results: list[ClaimResult], results_dir: str,
                    static_lines: dict[str, list[str]] | None = None) -> str:
    """``static_lines``: per claim id, lines on its methods against the static models (placed after the
    claim's verdict)."""
    md = ["# Paper claims, judged on the rows", "",
          f"Generated by `python -m bench report` from `{results_dir}/`. Each claim is declared once, next to "
          "the method (or task) it belongs to (`claims=` in its registration), and evaluated here by the core.",
          "", "## Summary", ""] + summary_lines(claim_results, "#summary")[2:]
    md += ["", "## How the verdicts are reached", "",
           f"Bootstrap: `scipy.stats.bootstrap`, {stats.N_RESAMPLES} resamples of the training seeds and the test "
           f"examples (two levels), percentile intervals, random state {stats.RANDOM_SEED} (re-running gives the "
           "same numbers); every row of a section is resampled with the same example indices, so differences are "
           "paired. A comparison's A and B are means over the seeds both sides have. "
           "Δ = how much better A is than B in the metric's direction (for WER, B − A). "
           "The reasons for each rule: docs/measurement.md, \"Statistics\"."]
    md += [""] + RULES
    for r in claim_results:
        md += _claim_lines(r, (static_lines or {}).get(r.claim.id, []))
    return "\n".join(md) + "\n"


def write(views: list[TaskView], reports_dir: Path, results_dir, echo=print,
          static_lines: Callable[[ClaimResult], list[str]] | None = None) -> tuple[list[str], list[str]]:
    """Evaluate every registered claim; write claims.md/.html; return (paths, leaderboard summary lines).
    ``static_lines(result)``: the lines on a claim's methods against its section's static models."""
    claim_results = [evaluate(c, views, results_dir) for c in registered_claims()]
    adjust(claim_results)
    for r in claim_results:
        echo(f"  claim {r.claim.id}: {r.verdict}")
    static_lines = {r.claim.id: static_lines(r) for r in claim_results if r.view is not None} if static_lines else {}
    paths = write_page(reports_dir, "claims", claims_markdown(claim_results, str(results_dir), static_lines),
                       "Paper claims")
    return paths, summary_lines(claim_results) if claim_results else []
