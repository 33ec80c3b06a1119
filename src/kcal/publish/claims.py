"""The paper's claims as data, read from its sentences, and a verdict per claim with its uncertainty.

Each :class:`Claim` quotes the paper's sentence (with its section) and takes from it which rows of which
table are compared on which metric (``ours`` against ``others``), the direction (``better``, or
``not worse`` for "comparable (or better)") and the quantifier over datasets (``every`` for "across all
datasets", ``most`` for "on most datasets"); ``reading`` says how the sentence became those fields where
it is not literal. A sentence without a quantifier is read as "most": the weakest reading that is still a
claim about the datasets, and the one the paper's own table allows (e.g. Table 4's accuracy is not ahead
on online-shoppers). Where kcal used to read a claim more strictly (against plain XE too, or on every
dataset), the claim keeps that as its *stricter reading* (``strict_others`` / ``strict_quantifier``), shown
on a second, labelled line; it is not the headline.

Per dataset the outcome is better / indistinguishable / worse, and the claim's verdict supported / not
supported / undecided follows from the counts over datasets, by the rules of :mod:`kcal.publish.verdicts`
(combined seed SE for one run; a t test over the runs where replicates of the protocol exist). Each run
is also judged alone by its seed SEs ("holds in k of n runs"). A dataset counts only if every row the
claim needs has a mean there ("datasets run").

**Control.** The same rule applied to the paper's own numbers with the paper's SEs
(``paper's own numbers``) must say "supported" for a claim the paper makes; where it cannot, the line names
the paper's own counter-example (dataset, rows, numbers), so a reader sees that the paper's table itself
does not carry the sentence by this rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from kcal.publish import verdicts as V
from kcal.publish.table_cells import (
    FLAVOUR_LABEL,
    FLAVOURS,
    TABLES,
    by_key,
    cell_frame,
    fmt,
    normalise_results,
)

PAPER = "paper"
"""The source name of the paper's own numbers."""


@dataclass(frozen=True)
class Claim:
    id: str
    section: str  # where the sentence is, e.g. "§6.2, Results"
    quote: str  # the paper's sentence, LaTeX spelled out (tests/publish check it against the paper's source)
    table: str  # a key of TABLES
    metric: str  # ours metric name
    ours: tuple[str, ...]  # row keys; the best of them is compared
    others: tuple[str, ...]  # row keys it is compared with
    direction: str  # verdicts.DIRECTIONS
    quantifier: str  # verdicts.QUANTIFIERS
    reading: str = ""  # how the sentence becomes these fields, where it is not literal
    strict_others: tuple[str, ...] = ()  # kcal's stricter reading: compared rows (empty: no stricter reading)
    strict_quantifier: str = ""
    strict_label: str = ""  # what makes it stricter

    def summary(self) -> str:
        """The reading in one phrase, e.g. ``NLL + MMD better than NLL in QCE (Table 3) on every dataset``."""
        table = TABLES[self.table]
        ours = " or ".join(self.ours)
        word = "better than" if self.direction == "better" else "not worse than"
        where = "every dataset" if self.quantifier == "every" else "most datasets"
        return (f"{ours} {word} {' and '.join(self.others)} in {table.metric(self.metric).short} "
                f"(Table {table.number}) on {where}")  # fmt: skip

    def stricter(self) -> Claim | None:
        """The stricter reading as a claim of its own (None where there is none)."""
        if not self.strict_others:
            return None
        return replace(self, others=self.strict_others, quantifier=self.strict_quantifier or self.quantifier,
                       strict_others=(), strict_quantifier="", strict_label="")  # fmt: skip


_REGRESSION_RESULTS = ("In regression, our objective (NLL + MMD) achieves better QCE than the NLL objective across "
                       "all datasets while maintaining comparable (or better) NLL scores on the test set.")  # fmt: skip
_TABLE4 = ("For classification, we find that our method improves accuracy, ECE, and entropy relative to the "
           "baselines we tested for calibration regularization.")  # fmt: skip
_TABLE5 = ("These trends also generally hold with post-hoc calibration, where we observe that our method achieves "
           "better calibration and accuracy across most datasets")  # fmt: skip
_NO_QUANTIFIER = "the sentence names no quantifier over datasets: read as most datasets"
_REGULARISERS = ("XE + MMCE", "XE + ECE KDE")  # "the baselines we tested for calibration regularization"
_ALL_BASELINES = ("XE", "XE + MMCE", "XE + ECE KDE")
_STRICT_EVERY = "on every dataset"
_STRICT_XE_EVERY = "against plain XE too, on every dataset"

CLAIMS: tuple[Claim, ...] = (
    Claim("R1", "§6.2, Results", _REGRESSION_RESULTS, "regression", "qce", ("NLL + MMD",), ("NLL",),
          "better", "every", "its first half; the rows without post-hoc recalibration"),
    Claim("R2", "§6.2, Results", _REGRESSION_RESULTS, "regression", "nll", ("NLL + MMD",), ("NLL",),
          "not worse", "every", "its second half; comparable (or better) is read as not worse: better or "
          "indistinguishable"),
    Claim("R3", "§6.2, Results", "On most datasets, we find that our method also reduces the sharpness penalty "
          "induced by post-hoc calibration.", "regression", "nll", ("NLL + MMD + post-hoc",), ("NLL + post-hoc",),
          "better", "most", "the sharpness penalty is read as the NLL left after post-hoc recalibration"),
    Claim("R4", "§6.2, Results", "Importantly, we also observe that post-hoc calibration and our method are "
          "complementary for calibrating forecasters; post-hoc methods can guarantee calibration on held-out "
          "data, and calibration regularization mitigates the sharpness penalty.", "regression", "qce",
          ("NLL + MMD + post-hoc",), ("NLL", "NLL + post-hoc", "NLL + MMD"), "better", "most",
          "complementary is read as: the two together give the best QCE of Table 3's four rows; "
          + _NO_QUANTIFIER),
    Claim("R5", "§6.3, Results", "The results in Table 3 demonstrate that the MMD training objective tailored to "
          "the decision problem achieves the best decision calibration across all datasets.", "regression", "dce",
          ("NLL + MMD", "NLL + MMD + post-hoc"), ("NLL", "NLL + post-hoc"), "better", "every",
          "Table 3's NLL + MMD rows, with or without post-hoc; the paper prints there the numbers of Table 7's "
          "RBF row on four datasets and of its tanh row on medical-expenditure"),
    Claim("C1", "§6.2, Results", _TABLE4, "classification", "acc", ("XE + MMD",), _REGULARISERS, "better", "most",
          "the baselines for calibration regularization are XE + MMCE and XE + ECE KDE; " + _NO_QUANTIFIER,
          _REGULARISERS, "every", _STRICT_EVERY),
    Claim("C2", "§6.2, Results", _TABLE4, "classification", "ece", ("XE + MMD",), _REGULARISERS, "better", "most",
          "the baselines for calibration regularization are XE + MMCE and XE + ECE KDE; " + _NO_QUANTIFIER,
          _ALL_BASELINES, "every", _STRICT_XE_EVERY),
    Claim("C3", "§6.2, Results", _TABLE4, "classification", "entropy", ("XE + MMD",), _REGULARISERS, "better",
          "most", "the baselines for calibration regularization are XE + MMCE and XE + ECE KDE; " + _NO_QUANTIFIER,
          _ALL_BASELINES, "every", _STRICT_XE_EVERY),
    Claim("C4a", "§6.2, Results", _TABLE5, "classification_tempscaling", "ece", ("XE + MMD",), _REGULARISERS,
          "better", "most", "calibration is ECE; 'these trends' compare with the calibration regularizers, "
          "XE + MMCE and XE + ECE KDE", _ALL_BASELINES, "most", "against plain XE too"),
    Claim("C4b", "§6.2, Results", _TABLE5, "classification_tempscaling", "acc", ("XE + MMD",), _REGULARISERS,
          "better", "most", "'these trends' compare with the calibration regularizers, XE + MMCE and XE + ECE KDE",
          _ALL_BASELINES, "most", "against plain XE too"),
    Claim("D1", "§6.3, Results", "Additional results in Appendix B show that using an MMD kernel tailored to a "
          "decision problem (i.e. the tanh kernel) improves decision calibration scores across all datasets.",
          "decision_kernel", "dce", ("NLL + MMD k_Y=tanh",), ("NLL + MMD k_Y=rbf",), "better", "every",
          "Table 7, the tanh kernel against the RBF kernel; Appendix B.2 says the same of Table 7"),
)  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Evaluation

Values = dict[str, tuple[float, float]]  # row -> (mean, se) on one dataset in one run


@dataclass(frozen=True)
class Comparison:
    """The claim's row against one compared row on one dataset (:mod:`kcal.publish.verdicts`)."""

    other: str
    diff: float  # s (mean_ours - mean_other), negative: ours better; with runs, the mean over them
    half_width: float
    runs: int
    outcome: str


@dataclass(frozen=True)
class DatasetResult:
    dataset: str
    best: str  # the claim's row compared (the best of ``Claim.ours``)
    values: Values  # the published run's (or the paper's) numbers of every row the claim needs
    comparisons: tuple[Comparison, ...]
    outcome: str  # better / indistinguishable / worse
    run_outcomes: tuple[str, ...]  # each run judged alone by its seed SEs, the published run first

    @property
    def runs(self) -> int:
        return len(self.run_outcomes)


@dataclass
class ClaimResult:
    claim: Claim
    source: str  # a flavour or PAPER
    datasets: dict[str, DatasetResult] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.datasets)

    def count(self, outcome: str) -> int:
        return sum(d.outcome == outcome for d in self.datasets.values())

    def holds_on(self, d: DatasetResult) -> bool | None:
        return V.holds(self.claim.direction, d.outcome)

    @property
    def held(self) -> int:
        return sum(self.holds_on(d) is True for d in self.datasets.values())

    @property
    def failed(self) -> int:
        return sum(self.holds_on(d) is False for d in self.datasets.values())

    @property
    def verdict(self) -> str:
        return V.verdict(self.held, self.failed, self.n, self.claim.quantifier)

    def runs_held(self) -> tuple[int, int]:
        """(runs in which the claim holds on their dataset, runs), over every dataset and run."""
        outs = [o for d in self.datasets.values() for o in d.run_outcomes]
        return sum(V.holds(self.claim.direction, o) is True for o in outs), len(outs)

    def counts_phrase(self) -> str:
        run = "datasets" if self.source == PAPER else "datasets run"
        return (f"{self.count(V.BETTER)} better, {self.count(V.INDISTINGUISHABLE)} indistinguishable, "
                f"{self.count(V.WORSE)} worse of {self.n} {run}")  # fmt: skip

    def phrase(self) -> str:
        """E.g. ``2 better, 1 indistinguishable, 2 worse of 5 datasets run; runs: holds in 4 of 13 (...) ->
        not supported``, with the paper's counter-example where the paper's own numbers are not supported."""
        if self.n == 0:
            return f"0 datasets run -> {V.NOT_EVALUATED}"
        text = self.counts_phrase()
        if any(d.runs > 1 for d in self.datasets.values()):
            k, total = self.runs_held()
            per = ", ".join(f"{d.dataset} {sum(V.holds(self.claim.direction, o) is True for o in d.run_outcomes)} "
                            f"of {d.runs}" for d in self.datasets.values() if d.runs > 1)  # fmt: skip
            text += f"; runs: holds in {k} of {total} ({per})"
        text += f" -> {self.verdict}"
        if self.source == PAPER and self.verdict != V.SUPPORTED:
            text += f"; counter-example: {self.counter_example()}"
        return text

    def counter_example(self) -> str:
        """Every dataset where the claim does not hold, with the comparisons that keep it from holding."""
        parts = []
        for d in self.datasets.values():
            if self.holds_on(d) is True:
                continue
            blocking = [c for c in d.comparisons if V.holds(self.claim.direction, c.outcome) is not True]
            parts.append(f"{d.dataset} " + "; ".join(comparison_text(d, c) for c in blocking))
        return " | ".join(parts)


def comparison_text(d: DatasetResult, c: Comparison) -> str:
    """``XE + MMD 0.261 ± 0.003 vs XE + MMCE 0.267 ± 0.002: indistinguishable (difference 0.006 <= 0.0072)``:
    the published run's numbers (or the paper's), then the size of the difference (over runs: of their mean)
    against the half-width."""
    (am, as_), (bm, bs) = d.values[d.best], d.values[c.other]
    over = f", mean over {c.runs} runs" if c.runs > 1 else ""
    rel = "<=" if abs(c.diff) <= c.half_width else ">"
    return (f"{d.best} {_pm(am, as_)} vs {c.other} {_pm(bm, bs)}: {c.outcome} "
            f"(difference {abs(c.diff):.2g} {rel} {c.half_width:.2g}{over})")  # fmt: skip


def _pm(mean: float, se: float) -> str:
    return fmt(mean) if math.isnan(se) else f"{fmt(mean)} ± {fmt(se)}"


def claim_values(claim: Claim, cells: pd.DataFrame, use_paper: bool = False) -> dict[str, Values]:
    """``{dataset: {row: (mean, se)}}`` of the datasets where every row ``claim`` needs has a mean, from the
    cell frame of its table (ours, or with ``use_paper`` the paper's numbers)."""
    mcol, scol = ("paper_mean", "paper_se") if use_paper else ("ours_mean", "ours_se")
    sub = cells[(cells["table"] == claim.table) & (cells["metric"] == claim.metric)]
    cell = by_key(sub, ("dataset", "row"), (mcol, scol))
    out = {}
    for ds in TABLES[claim.table].datasets:
        try:
            vals = {r: (float(cell[ds, r][0]), float(cell[ds, r][1])) for r in claim.ours + claim.others}
        except KeyError:
            continue
        if not any(math.isnan(m) for m, _ in vals.values()):
            out[ds] = vals
    return out


def _sign(claim: Claim) -> float:
    return 1.0 if TABLES[claim.table].metric(claim.metric).lower_is_better else -1.0


def _best(claim: Claim, runs: Sequence[Values]) -> str:
    s = _sign(claim)
    return min(claim.ours, key=lambda r: sum(s * v[r][0] for v in runs) / len(runs))


def _one_run(claim: Claim, vals: Values) -> str:
    best = _best(claim, [vals])
    s, (am, as_) = _sign(claim), vals[best]
    return V.combine(
        V.outcome(s * (am - vals[o][0]), V.seed_half_width(as_, vals[o][1])) for o in claim.others
    )


def evaluate_dataset(claim: Claim, dataset: str, runs: Sequence[Values]) -> DatasetResult:
    """The outcome on one dataset from its runs (the published run, or the paper's, first)."""
    best, s = _best(claim, runs), _sign(claim)
    comparisons = []
    for o in claim.others:
        diffs = [s * (v[best][0] - v[o][0]) for v in runs]
        ses = [math.hypot(V.se_or_zero(v[best][1]), V.se_or_zero(v[o][1])) for v in runs]
        if len(runs) == 1:
            diff, half = diffs[0], V.Z * ses[0]
        else:
            diff, half = V.runs_test(diffs, ses)
        comparisons.append(Comparison(o, diff, half, len(runs), V.outcome(diff, half)))
    return DatasetResult(dataset, best, runs[0], tuple(comparisons), V.combine(c.outcome for c in comparisons),
                         tuple(_one_run(claim, v) for v in runs))  # fmt: skip


def evaluate_claim(
    claim: Claim, runs: Sequence[pd.DataFrame], source: str, use_paper: bool = False
) -> ClaimResult:
    """``claim`` on the cell frames of its table, one per run of the protocol (the published run first; a
    dataset counts if the first run has it, and takes the other runs that have it too)."""
    per_run = [claim_values(claim, cells, use_paper) for cells in runs]
    out = ClaimResult(claim, source)
    for ds, vals in per_run[0].items():
        out.datasets[ds] = evaluate_dataset(claim, ds, [vals] + [r[ds] for r in per_run[1:] if ds in r])
    return out


@dataclass(frozen=True)
class Evaluated:
    """One claim under one reading, with its result per source (each flavour of ours, and the paper's)."""

    claim: Claim
    label: str  # "" for the paper's reading, else what makes the stricter reading stricter
    results: dict[str, ClaimResult]


def evaluate_all(
    results: pd.DataFrame,
    flavours: Sequence[str] = FLAVOURS,
    replicates: Mapping[str, pd.DataFrame] | None = None,
) -> list[Evaluated]:
    """Every claim under its paper reading and (after it) its stricter reading, on ``results`` (the published
    run), the ``replicates`` of the protocol (``{name: results}``, optional) and the paper's numbers."""
    runs = [normalise_results(results)] + [normalise_results(r) for r in (replicates or {}).values()]
    tables = {c.table for c in CLAIMS}
    frames = {fl: {t: [cell_frame(r, fl, TABLES[t]) for r in runs] for t in tables} for fl in flavours}
    paper = {t: [cell_frame(runs[0], "exact", TABLES[t])] for t in tables}
    out = []
    for c in CLAIMS:
        for claim, label in ((c, ""), (c.stricter(), c.strict_label)):
            if claim is None:
                continue
            per = {fl: evaluate_claim(claim, frames[fl][claim.table], fl) for fl in flavours}
            per[PAPER] = evaluate_claim(claim, paper[claim.table], PAPER, use_paper=True)
            out.append(Evaluated(claim, label, per))
    return out


def claims_data(evaluated: Sequence[Evaluated]) -> list[dict]:
    """The verdicts as data (``report.json``): per claim and reading, per source, the counts over datasets and
    runs, the verdict and, for the paper's own numbers where not supported, the counter-example."""
    out = []
    for e in evaluated:
        sources = {}
        for src, r in e.results.items():
            held, runs = r.runs_held()
            sources[src] = {"datasets": r.n, **{o: r.count(o) for o in V.OUTCOMES}, "held": r.held,
                            "failed": r.failed, "runs_held": held, "runs": runs, "verdict": r.verdict,
                            "per_dataset": {d.dataset: d.outcome for d in r.datasets.values()}}  # fmt: skip
            if src == PAPER and r.verdict != V.SUPPORTED and r.n:
                sources[src]["counter_example"] = r.counter_example()
        out.append({"id": e.claim.id, "reading": "stricter" if e.label else "paper", "label": e.label,
                    "section": e.claim.section, "quote": e.claim.quote, "summary": e.claim.summary(),
                    "direction": e.claim.direction, "quantifier": e.claim.quantifier, "sources": sources})  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------------
# Text


def profile_note(profile: str | None) -> str:
    """Which profile produced the results; a profile other than ``full`` is marked as not evidence."""
    if profile is None:
        return "Profile: not recorded (only profile=full follows the paper's protocol)."
    if profile == "full":
        return "Profile: full (the paper's protocol)."
    return (f"Profile: {profile}, a reduced run (fewer trials, seeds or epochs than the paper): its numbers and "
            "verdicts are NOT evidence for or against the paper's claims.")  # fmt: skip


def verdict_mark(profile: str | None) -> str:
    """Mark of each verdict of a reduced profile (none for ``full`` or an unrecorded one)."""
    return "" if profile in ("full", None) else f"[profile {profile}: not evidence] "


def _sources(e: Evaluated) -> str:
    parts = [f"paper's own numbers: {e.results[PAPER].phrase()}"]
    parts += [f"{FLAVOUR_LABEL.get(s, s)}: {r.phrase()}" for s, r in e.results.items() if s != PAPER]
    return ". ".join(parts)


def summary_line(e: Evaluated, profile: str | None = None) -> str:
    """A claim's line: its ID, the paper's sentence, the reading and the verdict per source; a stricter
    reading's line says so after the ID."""
    c = e.claim
    if e.label:
        return f"{c.id}, {verdict_mark(profile)}kcal's stricter reading ({e.label}): {c.summary()}. {_sources(e)}."
    reading = f" ({c.reading})" if c.reading else ""
    return (f'{c.id} {verdict_mark(profile)}({c.section}) "{c.quote}" Read as: {c.summary()}{reading}. '
            f"{_sources(e)}.")  # fmt: skip


def claims_summary(
    results: pd.DataFrame,
    flavours: Sequence[str] = FLAVOURS,
    profile: str | None = None,
    replicates: Mapping[str, pd.DataFrame] | None = None,
) -> list[str]:
    """One line per claim and reading (:func:`summary_line`), the paper's reading first."""
    return [summary_line(e, profile) for e in evaluate_all(results, flavours, replicates)]


RULES = (
    "Per dataset, the claim's row is compared with each compared row: with d their difference (signed so that "
    "d < 0 is better), *better* when d < -h, *worse* when d > h, *indistinguishable* otherwise. One run (the "
    "paper's numbers, or a dataset of ours without replicates): h = 2·sqrt(se₁² + se₂²). Where replicates of "
    "the protocol exist: d is the mean over the R runs and h = t_{R-1}·max(sd, seed SE)/sqrt(R), a 95 % t test "
    "of the protocol's mean difference. Against several rows: better if better than all, worse if worse than "
    "one. A claim *holds* on a dataset where it is better (for 'comparable or better': better or "
    "indistinguishable), *fails* where worse. *every*: supported when it holds on all n datasets, not "
    "supported when it fails on one, else undecided; *most*: supported when it holds on more than n/2, not "
    "supported when it cannot (holding plus open datasets <= n/2), else undecided. 'runs: holds in k of n' "
    'judges each run alone by its seed SEs. Rules: `kcal.publish.verdicts`. "paper\'s own numbers" applies '
    "the same rule to the paper's printed numbers and SEs: where it is not supported, the paper's own "
    "counter-example is named."
)


def claims_markdown(
    results: pd.DataFrame,
    flavours: Sequence[str] = FLAVOURS,
    profile: str | None = None,
    replicates: Mapping[str, pd.DataFrame] | None = None,
) -> str:
    evaluated = evaluate_all(results, flavours, replicates)
    out = ["# The paper's claims, checked against our results", "", f"**{profile_note(profile)}**", "", RULES, "",
           "One line per claim, beginning with its ID; kcal's stricter reading, where it has one, follows as a "
           "labelled line.", ""]  # fmt: skip
    for e in evaluated:
        out += [("  - " if e.label else "") + summary_line(e, profile), ""]
    out += ["## Per dataset", "",
            "| claim | reading | source | dataset | runs | outcome | each run | values |",
            "|---|---|---|---|---:|---|---|---|"]  # fmt: skip
    for e in evaluated:
        for src, r in e.results.items():
            for d in r.datasets.values():
                runs = ", ".join(f"{d.run_outcomes.count(o)} {o}" for o in V.OUTCOMES if o in d.run_outcomes)
                values = "; ".join(comparison_text(d, c) for c in d.comparisons)
                out.append(f"| {e.claim.id} | {'stricter' if e.label else 'paper'} | {FLAVOUR_LABEL.get(src, src)} "
                           f"| {d.dataset} | {d.runs} | {d.outcome} | {runs} | {values} |")  # fmt: skip
    out += ["", "## Claim definitions", "",
            "| id | section | table | metric | rows | compared with | direction | quantifier | stricter reading |",
            "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in CLAIMS:
        strict = f"{', '.join(c.strict_others)}; {c.strict_quantifier}" if c.strict_others else "—"
        out.append(f"| {c.id} | {c.section} | {TABLES[c.table].number} ({c.table}) | {c.metric} | {' / '.join(c.ours)} "
                   f"| {', '.join(c.others)} | {c.direction} | {c.quantifier} | {strict} |")  # fmt: skip
    return "\n".join(out) + "\n"
