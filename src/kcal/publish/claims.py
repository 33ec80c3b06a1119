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

Per dataset and compared row the difference gets a 95 % interval and the metric's margin (:func:`paper_margins`:
half the median of the paper's own claimed gains in that metric, from the paper's numbers alone); the comparison
is better / equivalent / worse / inconclusive and *holds*, is *contradicted*, has *the paper's effect excluded*
or stays *open*; the claim's verdict is supported / not reproduced: the paper's effect excluded / contradicted /
inconclusive, by the rules of :mod:`kcal.publish.verdicts`. The interval: a t interval over the runs where
replicates of the protocol exist; on a dataset of ours with one run, the combined seed SE times the protocol's
spread measured where it was replicated (:class:`Spread`: the median over the replicated comparisons of their
run-to-run SD over their combined seed SE, at least 1), or the seed SE alone labelled "protocol spread
unknown"; the paper's numbers, their own seed SEs. Each run alone by its seed SEs is kept as a description.
A dataset counts only if every row the claim needs has a mean there ("datasets run").

**Control.** The same rule applied to the paper's own numbers with the paper's SEs
(``paper's own numbers``) must say "supported" for a claim the paper makes; where it cannot, the line names
the paper's own counter-example (dataset, rows, numbers), so a reader sees that the paper's table itself
does not carry the sentence by this rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

import pandas as pd

from kcal.publish import verdicts as V
from kcal.publish.table_cells import (
    FLAVOURS,
    TABLES,
    by_key,
    cell_frame,
    content_key,
    fmt,
    normalise_results,
    remembered,
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
          "not worse", "every", "its second half; comparable (or better) is read as non-inferior: not worse by "
          "more than the NLL margin"),
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
class Margin:
    """A metric's margin (:func:`kcal.publish.verdicts.margin_from_gains`) and where it comes from."""

    metric: str
    value: float
    median_gain: float
    gains: int  # how many of the paper's comparisons claim a gain in this metric

    def reason(self) -> str:
        return (f"half the median ({self.median_gain:.2g}) of the paper's {self.gains} claimed gains in this metric "
                "(its own numbers, every claim and dataset where its row is ahead)")  # fmt: skip


@dataclass(frozen=True)
class Spread:
    """How a dataset with one run of the protocol is judged: its combined seed SE times ``ratio``, the median
    over the replicated comparisons of their run-to-run SD over their combined seed SE (``low`` .. ``high``:
    a 95 % bootstrap interval of that median, ``comparisons``: how many it is taken over). ``ratio`` NaN: no
    replicated comparison, the protocol spread is unknown and the seed SE is used alone."""

    ratio: float = math.nan
    low: float = math.nan
    high: float = math.nan
    comparisons: int = 0

    @property
    def known(self) -> bool:
        return not math.isnan(self.ratio)

    def factor(self) -> float:
        """What a one-run dataset's seed SE is multiplied by: the ratio, at least 1 (the seed SE is a floor, as in
        the test over runs), 1 where the spread is unknown."""
        return max(1.0, self.ratio) if self.known else 1.0

    def phrase(self) -> str:
        if not self.known:
            return "protocol spread unknown (no replicated comparison): seed SE alone"
        return (f"seed SE x {self.ratio:.2f} (the replicated comparisons' median run-to-run SD over seed SE, 95 % "
                f"interval {self.low:.2f}-{self.high:.2f}, {self.comparisons} comparisons)")  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    """The claim's row against one compared row on one dataset (:mod:`kcal.publish.verdicts`)."""

    other: str
    interval: V.Interval  # the signed difference (negative: ours better), over runs where there are several
    runs: int
    outcome: str  # verdicts.CLAIM_OUTCOMES
    status: str  # verdicts.STATUSES
    margin: float
    paper_diff: (
        float  # the paper's own signed difference there (NaN: not known; for the paper itself, its own)
    )
    sd_run: float  # the per-run SD the runs needed are computed with
    basis: str  # "runs", "spread" (one run, seed SE x ratio) or "seed" (seed SE alone)

    @property
    def diff(self) -> float:
        return self.interval.diff

    def runs_needed(self) -> int | None:
        """Runs of the protocol that would detect the paper's gain (or, without one, the margin) at 80 % power."""
        target = self.paper_diff if not math.isnan(self.paper_diff) and self.paper_diff < 0 else self.margin
        return V.runs_needed(self.sd_run, target)


@dataclass(frozen=True)
class DatasetResult:
    dataset: str
    best: str  # the claim's row compared (the best of ``Claim.ours``)
    values: Values  # the published run's (or the paper's) numbers of every row the claim needs
    comparisons: tuple[Comparison, ...]
    status: str  # verdicts.STATUSES, over the compared rows
    run_outcomes: tuple[str, ...]  # each run alone by its seed SEs (descriptive), the published run first

    @property
    def runs(self) -> int:
        return len(self.run_outcomes)

    @property
    def outcome(self) -> str:
        """The comparisons' outcomes in one word: *worse* if one is, *better* if all are, *equivalent* if one
        is, else *inconclusive*."""
        outs = [c.outcome for c in self.comparisons]
        if V.WORSE in outs:
            return V.WORSE
        if all(o == V.BETTER for o in outs):
            return V.BETTER
        return V.EQUIVALENT if V.EQUIVALENT in outs else V.INCONCLUSIVE


@dataclass
class ClaimResult:
    claim: Claim
    source: str  # a flavour or PAPER
    datasets: dict[str, DatasetResult] = field(default_factory=dict)
    spread: Spread = field(default_factory=Spread)

    @property
    def n(self) -> int:
        return len(self.datasets)

    def count(self, status: str) -> int:
        return sum(d.status == status for d in self.datasets.values())

    def holds_on(self, d: DatasetResult) -> bool | None:
        """True where the claim holds, False where it is contradicted or the paper's effect is excluded."""
        return True if d.status == V.HOLDS else (None if d.status == V.OPEN else False)

    @property
    def held(self) -> int:
        return self.count(V.HOLDS)

    @property
    def verdict(self) -> str:
        return V.claim_verdict([d.status for d in self.datasets.values()], self.claim.quantifier)

    def runs_held(self) -> tuple[int, int]:
        """(runs in which the claim holds on their dataset by their seed SEs alone, runs): descriptive."""
        outs = [o for d in self.datasets.values() for o in d.run_outcomes]
        return sum(o == V.HOLDS for o in outs), len(outs)

    def counts_phrase(self) -> str:
        run = "datasets" if self.source == PAPER else "datasets run"
        parts = [f"{self.count(s)} {s}" for s in V.STATUSES if self.count(s)]
        return f"{', '.join(parts) or 'none'} of {self.n} {run}"

    def phrase(self) -> str:
        """E.g. ``1 holds, 1 open of 2 datasets run -> inconclusive``, the paper's counter-example where the
        paper's own numbers are not supported."""
        if self.n == 0:
            return f"0 datasets run -> {V.NOT_EVALUATED}"
        text = f"{self.counts_phrase()} -> {self.verdict}"
        if self.source == PAPER and self.verdict != V.SUPPORTED:
            text += f"; counter-example: {self.counter_example()}"
        return text

    def counter_example(self) -> str:
        """Every dataset where the claim does not hold, with the comparisons that keep it from holding."""
        parts = []
        for d in self.datasets.values():
            if d.status == V.HOLDS:
                continue
            blocking = [c for c in d.comparisons if c.status != V.HOLDS]
            parts.append(f"{d.dataset} " + "; ".join(comparison_text(d, c) for c in blocking))
        return " | ".join(parts)


def comparison_text(d: DatasetResult, c: Comparison) -> str:
    """``XE + MMD 0.261 ± 0.003 vs XE + MMCE 0.267 ± 0.002: inconclusive (d -0.006, 95 % [-0.012, 0.0003];
    δ 0.004)``: the published run's numbers (or the paper's), then the difference (over runs: their mean) with
    its interval, the margin, and for ours the paper's difference."""
    (am, as_), (bm, bs) = d.values[d.best], d.values[c.other]
    lo, hi = c.interval.ci()
    over = f", mean over {c.runs} runs" if c.runs > 1 else ""
    return (f"{d.best} {pm(am, as_)} vs {c.other} {pm(bm, bs)}: {c.outcome}, {c.status} "
            f"(d {c.diff:.2g}, 95 % [{lo:.2g}, {hi:.2g}]{over}; δ {c.margin:.2g})")  # fmt: skip


def pm(mean: float, se: float) -> str:
    """``mean ± se`` as the tables print them (``mean`` alone without an SE)."""
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


def _diffs(claim: Claim, runs: Sequence[Values], best: str, other: str) -> tuple[list[float], list[float]]:
    """Per run: the signed difference of ``best`` against ``other`` and its combined seed SE."""
    s = _sign(claim)
    diffs = [s * (v[best][0] - v[other][0]) for v in runs]
    ses = [math.hypot(V.se_or_zero(v[best][1]), V.se_or_zero(v[other][1])) for v in runs]
    return diffs, ses


def run_ratios(claim: Claim, runs: Sequence[Values]) -> list[float]:
    """On one dataset with R >= 2 runs: per compared row, the runs' SD of the difference over their RMS combined
    seed SE (left out where that SE is float rounding)."""
    if len(runs) < 2:
        return []
    best, out = _best(claim, runs), []
    for o in claim.others:
        diffs, ses = _diffs(claim, runs, best, o)
        mean = sum(diffs) / len(diffs)
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
        rms = math.sqrt(sum(u**2 for u in ses) / len(ses))
        if not V.is_rounding(rms, *(v[best][0] for v in runs)):
            out.append(sd / rms)
    return out


def spread_of(ratios: Sequence[float], resamples: int = 2000) -> Spread:
    """The median of ``ratios`` and its 95 % percentile-bootstrap interval (a fixed generator: the same
    ratios always give the same interval)."""
    import numpy as np

    found = np.asarray([r for r in ratios if not math.isnan(r)], dtype=float)
    if found.size == 0:
        return Spread()
    rng = np.random.default_rng(0)
    medians = np.median(rng.choice(found, size=(resamples, found.size), replace=True), axis=1)
    low, high = np.quantile(medians, [0.025, 0.975])
    return Spread(float(np.median(found)), float(low), float(high), int(found.size))


def evaluate_dataset(
    claim: Claim,
    dataset: str,
    runs: Sequence[Values],
    margin: float,
    paper_diffs: Mapping[str, float],
    spread: Spread,
    is_paper: bool = False,
) -> DatasetResult:
    """The status on one dataset from its runs (the published run, or the paper's, first): a t test over runs
    where there are several, else the combined seed SE, times the protocol spread's ratio for a run of ours."""
    best = _best(claim, runs)
    comparisons = []
    for o in claim.others:
        diffs, ses = _diffs(claim, runs, best, o)
        r = len(runs)
        if r == 1:
            factor = 1.0 if is_paper else spread.factor()
            basis = "seed" if is_paper or not spread.known else "spread"
            iv, sd_run = V.Interval(diffs[0], factor * ses[0]), factor * ses[0]
        else:
            mean = sum(diffs) / r
            sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (r - 1))
            sd_run = max(sd, math.sqrt(sum(u**2 for u in ses) / r))
            iv, basis = V.Interval(mean, sd_run / math.sqrt(r), r - 1), "runs"
        paper_diff = diffs[0] if is_paper else paper_diffs.get(o, math.nan)
        comparisons.append(Comparison(o, iv, r, V.compare(iv, margin), V.status(claim.direction, iv, margin, paper_diff),
                                      margin, paper_diff, sd_run, basis))  # fmt: skip
    each = tuple(_seed_status(claim, v, margin) for v in runs)
    return DatasetResult(
        dataset, best, runs[0], tuple(comparisons), V.combine_status(c.status for c in comparisons), each
    )


def _seed_status(claim: Claim, vals: Values, margin: float) -> str:
    """One run alone by its seed SEs (descriptive: the seed SE leaves out the selection's noise)."""
    best, found = _best(claim, [vals]), []
    for o in claim.others:
        diffs, ses = _diffs(claim, [vals], best, o)
        found.append(V.status(claim.direction, V.Interval(diffs[0], ses[0]), margin, None))
    return V.combine_status(found)


def evaluate_claim(
    claim: Claim,
    runs: Sequence[pd.DataFrame],
    source: str,
    use_paper: bool = False,
    margin: float | None = None,
    paper: ClaimResult | None = None,
    spread: Spread | None = None,
) -> ClaimResult:
    """``claim`` on the cell frames of its table, one per run of the protocol (the published run first; a
    dataset counts if the first run has it, and takes the other runs that have it too). ``margin``: the
    metric's (default: from the paper's numbers in ``runs``' first frame); ``paper``: the paper's own result, whose
    differences decide "the paper's effect excluded"; ``spread``: how a one-run dataset of ours is judged."""
    if margin is None:
        margin = paper_margins()[claim.metric].value
    spread = spread or Spread()
    per_run = [claim_values(claim, cells, use_paper) for cells in runs]
    out = ClaimResult(claim, source, spread=spread)
    for ds, vals in per_run[0].items():
        theirs = {}
        if paper is not None and ds in paper.datasets:
            theirs = {c.other: c.paper_diff for c in paper.datasets[ds].comparisons}
        out.datasets[ds] = evaluate_dataset(claim, ds, [vals] + [r[ds] for r in per_run[1:] if ds in r], margin,
                                            theirs, spread, is_paper=use_paper)  # fmt: skip
    return out


@cache
def paper_margins() -> dict[str, Margin]:
    """Every compared metric's margin (:func:`margins`) from the paper's own tables alone."""
    from kcal.paper import RESULT_COLUMNS

    empty = normalise_results(pd.DataFrame(columns=list(RESULT_COLUMNS)))
    return margins(pd.concat([cell_frame(empty, "exact", TABLES[t]) for t in sorted({c.table for c in CLAIMS})],
                             ignore_index=True))  # fmt: skip


def margins(cells: pd.DataFrame) -> dict[str, Margin]:
    """Each compared metric's margin from the paper's numbers in ``cells`` (a cell frame holding every claim's
    table, or several concatenated): the gains the paper's own rows show in every claim's comparisons (its
    reading, not the stricter ones)."""
    gains: dict[str, list[float]] = {}
    for claim in CLAIMS:
        sub = cells[cells["table"] == claim.table]
        for vals in claim_values(claim, sub, use_paper=True).values():
            best = _best(claim, [vals])
            for o in claim.others:
                d = _diffs(claim, [vals], best, o)[0][0]
                gains.setdefault(claim.metric, []).append(-d)
    return {metric: Margin(metric, V.margin_from_gains(found), V.median_gain(found), sum(g > 0 for g in found))
            for metric, found in gains.items()}  # fmt: skip


@dataclass(frozen=True)
class Evaluated:
    """One claim under one reading, with its result per source (each flavour of ours, and the paper's)."""

    claim: Claim
    label: str  # "" for the paper's reading, else what makes the stricter reading stricter
    results: dict[str, ClaimResult]
    margin: Margin | None = None


def evaluate_all(
    results: pd.DataFrame,
    flavours: Sequence[str] = FLAVOURS,
    replicates: Mapping[str, pd.DataFrame] | None = None,
) -> list[Evaluated]:
    """Every claim under its paper reading and (after it) its stricter reading, on ``results`` (the published
    run), the ``replicates`` of the protocol (``{name: results}``, optional) and the paper's numbers.

    The same results, flavours and replicates are evaluated once (:func:`kcal.publish.table_cells.remembered`): a
    report renders its claims in several places (the claims table, the answer, ``report.json``)."""
    key = ("claims", content_key(results), tuple(flavours),
           tuple((name, content_key(r)) for name, r in (replicates or {}).items()))  # fmt: skip
    return remembered(key, lambda: evaluated_claims(results, flavours, replicates))


def evaluated_claims(
    results: pd.DataFrame,
    flavours: Sequence[str] = FLAVOURS,
    replicates: Mapping[str, pd.DataFrame] | None = None,
) -> list[Evaluated]:
    """:func:`evaluate_all`'s evaluation itself, uncached."""
    runs = [normalise_results(results)] + [normalise_results(r) for r in (replicates or {}).values()]
    tables = {c.table for c in CLAIMS}
    frames = {fl: {t: [cell_frame(r, fl, TABLES[t]) for r in runs] for t in tables} for fl in flavours}
    paper = {t: [cell_frame(runs[0], "exact", TABLES[t])] for t in tables}
    found = paper_margins()
    spreads = {fl: spread_of([x for c in CLAIMS for ds, v in _per_dataset(c, frames[fl][c.table]).items()
                              for x in run_ratios(c, v)]) for fl in flavours}  # fmt: skip
    out = []
    for c in CLAIMS:
        for claim, label in ((c, ""), (c.stricter(), c.strict_label)):
            if claim is None:
                continue
            margin = found[claim.metric]
            theirs = evaluate_claim(claim, paper[claim.table], PAPER, use_paper=True, margin=margin.value)
            per = {fl: evaluate_claim(claim, frames[fl][claim.table], fl, margin=margin.value, paper=theirs,
                                      spread=spreads[fl]) for fl in flavours}  # fmt: skip
            per[PAPER] = theirs
            out.append(Evaluated(claim, label, per, margin))
    return out


def _per_dataset(claim: Claim, frames: Sequence[pd.DataFrame]) -> dict[str, list[Values]]:
    """``{dataset: [values of each run that has it]}`` of the published run's datasets."""
    per_run = [claim_values(claim, f) for f in frames]
    return {ds: [vals] + [r[ds] for r in per_run[1:] if ds in r] for ds, vals in per_run[0].items()}


def claims_data(evaluated: Sequence[Evaluated]) -> list[dict]:
    """The verdicts as data (``report.json``): per claim and reading, its margin, per source the statuses over
    datasets, the verdict, per dataset and compared row the paper's difference, our interval and the minimum
    detectable effect, and for the paper's own numbers where not supported, the counter-example."""
    out = []
    for e in evaluated:
        sources = {}
        for src, r in e.results.items():
            sources[src] = {"datasets": r.n, **{s: r.count(s) for s in V.STATUSES}, "verdict": r.verdict,
                            "per_dataset": {d.dataset: d.status for d in r.datasets.values()},
                            "comparisons": [_comparison_data(d, c) for d in r.datasets.values() for c in d.comparisons]}  # fmt: skip
            if src != PAPER:
                sources[src]["spread"] = {"ratio": r.spread.ratio, "low": r.spread.low, "high": r.spread.high,
                                          "comparisons": r.spread.comparisons}  # fmt: skip
            if src == PAPER and r.verdict != V.SUPPORTED and r.n:
                sources[src]["counter_example"] = r.counter_example()
        out.append({"id": e.claim.id, "reading": "stricter" if e.label else "paper", "label": e.label,
                    "section": e.claim.section, "quote": e.claim.quote, "summary": e.claim.summary(),
                    "direction": e.claim.direction, "quantifier": e.claim.quantifier,
                    "margin": e.margin.value if e.margin else None, "sources": sources})  # fmt: skip
    return out


def _comparison_data(d: DatasetResult, c: Comparison) -> dict:
    lo, hi = c.interval.ci()
    return {"dataset": d.dataset, "row": d.best, "other": c.other, "runs": c.runs, "basis": c.basis,
            "diff": c.diff, "low": lo, "high": hi, "paper_diff": c.paper_diff, "mde": c.interval.mde(),
            "runs_needed": c.runs_needed(), "outcome": c.outcome, "status": c.status}  # fmt: skip
