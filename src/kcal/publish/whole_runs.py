"""A protocol variant judged over whole runs: exact permutation tests over the runs, Holm's adjustment, and the
runs a margin needs (issue 66 item 4). The run is the unit: the cells of one run share its selected models, so
they are not independent, and runs are.

**Two quantities per run** (one value per run of a dataset, each signed so that higher is better):

* the *best validation score* (:func:`best_scores`): each (dataset, objective) study's best value
  (``studies.csv``'s ``best_value``: classification, validation accuracy less a tie-break by ECE, maximised;
  regression, validation NLL, minimised, so its sign is flipped), averaged over the dataset's objectives;
* the *rank score of the cells* (:func:`rank_scores`): per cell (flavour, dataset, objective, recalibrator,
  metric; a number that two tables share counts once), each run's rank among all the runs (both sides) that hold
  the cell, as the share of the other runs it beats (a tie, up to float rounding, counts half; 0: the worst, 1: the
  best by the metric's direction), averaged over the run's cells of the dataset. The ranks are taken over the
  pooled runs, so they do not depend on which side a run is on, and a permutation of the sides is exact.

**The test** (:func:`permutation_test`): with ``a`` the full protocol's runs (``n_a`` values) and ``b`` the
variant's (``n_b``), the statistic is ``T = mean(b) - mean(a)`` (positive: the variant better). Under the null
hypothesis that the variant's runs are runs of the full protocol, every split of the ``n_a + n_b`` values into
sides of those sizes is equally likely; the two-sided p-value is the share of all ``C(n_a + n_b, n_b)`` splits
(enumerated, not sampled) with ``|T| >= |T_observed|``. Its smallest value is ``2 / C(n_a + n_b, n_b)`` where the
split is symmetric (0.008 at 5 and 5 runs), ``1 / C(n_a + n_b, n_b)`` otherwise.

**Equivalence at a margin** ``δ`` (:func:`equivalence_p`), on the best validation score, in the score's units:
two one-sided permutation tests of ``T <= -δ`` and ``T >= δ``, each exact under a shift of the variant's values by
``±δ`` (under ``T = -δ`` the values ``b + δ`` are exchangeable with ``a``); ``p`` is the larger of the two.

**Holm** (:func:`holm`): the step-down adjustment of a family of m p-values, ``p_(i)`` sorted ascending,
``adjusted_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``; it keeps the chance of any false finding in the family
at most ``ALPHA`` whatever their dependence.

**The outcome** (:func:`outcome`, the words of :mod:`kcal.publish.verdicts`): *worse* when a difference test,
Holm-adjusted over its family, is at most ``ALPHA`` with ``T < 0``; else *better* when one is with ``T > 0``; else
*equivalent* when the equivalence test, Holm-adjusted over its family, is at most ``ALPHA``; else *inconclusive*,
with the runs per side that would decide (:func:`runs_needed`). The rank score has no margin in a metric's units,
so it can show a difference, never equivalence.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kcal.publish import verdicts as V
from kcal.publish.table_cells import FLAVOURS, TABLES, comparison_frame

ALPHA = 0.05
"""The family-wise level of the difference tests and of the equivalence tests (each family, after Holm)."""
MAX_SPLITS = 500_000
"""The most splits :func:`permutation_test` enumerates (C(20, 10) = 184,756); beyond, it refuses."""
CELL_ID = ["flavour", "dataset", "objective", "recalibrator", "metric"]
MAX_NEEDED = 100_000
""":func:`runs_needed` gives up beyond this many runs per side."""
NEEDS_TOO_MANY = f"more than {MAX_NEEDED}"


# ---- the statistics ---------------------------------------------------------------------------------------
def _splits(n: int, k: int) -> np.ndarray:
    """Every choice of ``k`` of ``n`` indices, one per row."""
    count = math.comb(n, k)
    if count > MAX_SPLITS:
        raise ValueError(f"{count} splits of {n} runs into {k} and {n - k} is more than {MAX_SPLITS}")
    return np.array(list(itertools.combinations(range(n), k)), dtype=int).reshape(count, k)


def split_statistics(a: Sequence[float], b: Sequence[float]) -> tuple[float, np.ndarray]:
    """``(T_observed, T over every split)``: ``T = mean(second side) - mean(first side)`` for the observed split
    (``b`` the second side) and for each of the ``C(n_a + n_b, n_b)`` splits of the pooled values."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 1 or len(b) < 1:
        raise ValueError(f"a permutation test needs a value on each side, got {len(a)} and {len(b)}")
    pooled = np.concatenate([a, b])
    chosen = pooled[_splits(len(pooled), len(b))].sum(axis=1)
    perm = chosen / len(b) - (pooled.sum() - chosen) / len(a)
    return float(b.mean() - a.mean()), perm


def _slack(values: np.ndarray) -> float:
    return 1e-9 * max(1.0, float(np.abs(values).max()))


@dataclass(frozen=True)
class Test:
    """One permutation test: the observed ``diff`` (``mean(b) - mean(a)``), its p-value and the splits counted."""

    diff: float
    p: float
    splits: int


def permutation_test(a: Sequence[float], b: Sequence[float], alternative: str = "two-sided") -> Test:
    """The exact permutation test of ``mean(b) - mean(a)`` over every split of the runs (module docstring);
    ``alternative`` ``"greater"`` or ``"less"`` for a one-sided test (the share of splits with ``T >= T_observed``,
    or ``<=``). A tie up to float rounding counts as at least as extreme."""
    diff, perm = split_statistics(a, b)
    eps = _slack(np.concatenate([np.asarray(a, float), np.asarray(b, float)]))
    if alternative == "two-sided":
        hits = np.abs(perm) >= abs(diff) - eps
    elif alternative == "greater":
        hits = perm >= diff - eps
    elif alternative == "less":
        hits = perm <= diff + eps
    else:
        raise ValueError(f"unknown alternative {alternative!r}; valid: two-sided, greater, less")
    return Test(diff, float(hits.mean()), len(perm))


def equivalence_p(a: Sequence[float], b: Sequence[float], margin: float) -> float:
    """The equivalence test's p-value at ``margin`` (module docstring): the larger of the one-sided permutation
    p-values of ``T <= -margin`` (``b + margin`` against ``a``, greater) and ``T >= margin`` (``b - margin``,
    less)."""
    b = np.asarray(b, float)
    low = permutation_test(a, b + margin, "greater").p
    high = permutation_test(a, b - margin, "less").p
    return max(low, high)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given (module docstring); NaN stays NaN and is not
    counted in the family."""
    found = [(p, i) for i, p in enumerate(pvalues) if not math.isnan(p)]
    out = [math.nan] * len(pvalues)
    m, running = len(found), 0.0
    for j, (p, i) in enumerate(sorted(found)):
        running = max(running, min(1.0, (m - j) * p))
        out[i] = running
    return out


def pooled_sd(a: Sequence[float], b: Sequence[float]) -> float:
    """The runs' SD within sides (ddof 1 in each, pooled); a side of one run adds nothing; NaN with no spread to
    measure."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    df = max(len(a) - 1, 0) + max(len(b) - 1, 0)
    if df == 0:
        return math.nan
    ss = sum(float(((x - x.mean()) ** 2).sum()) for x in (a, b) if len(x) > 1)
    return math.sqrt(ss / df)


def runs_needed(sd: float, margin: float, tests: int = 1, power: float = V.POWER) -> int | None:
    """The fewest runs per side (n, both sides alike) that decide at ``margin`` with probability ``power``, each
    test at Holm's strictest level ``a = ALPHA / tests`` (its first step): with ``q`` Student's t quantiles on
    ``2n - 2`` degrees of freedom (a normal approximation of the permutation test, whose power at these sizes is
    close to the t test's), ``sd`` the runs' SD (:func:`pooled_sd`) and ``se = sd sqrt(2 / n)``:

    * equivalence shown when there is no difference: ``(q_{1-a} + q_{1-(1-power)/2}) se <= margin`` (two
      one-sided tests);
    * a difference of ``margin`` shown: ``(q_{1-a/2} + q_{power}) se <= margin``;
    * and the exact test able to reach ``a`` at all: ``2 / C(2n, n) <= a``.

    Each holds from some n on, so the smallest is found by bisection. None where more than :data:`MAX_NEEDED`
    are needed, or the margin or SD is unknown."""
    if math.isnan(sd) or math.isnan(margin) or margin <= 0:
        return None
    a = ALPHA / max(tests, 1)
    smallest_exact = (
        1  # C(2n, n) grows with n: the first n whose exact test can reach a (big binomials are slow)
    )
    while 2 / math.comb(2 * smallest_exact, smallest_exact) > a:
        smallest_exact += 1

    def decides(n: int) -> bool:
        if n < smallest_exact:
            return False
        se, df = sd * math.sqrt(2 / n), 2 * n - 2
        eq = (V.quantile(1 - a, df) + V.quantile(1 - (1 - power) / 2, df)) * se
        diff = (V.quantile(1 - a / 2, df) + V.quantile(power, df)) * se
        return max(eq, diff) <= margin

    if not decides(MAX_NEEDED):
        return None
    low, high = 1, MAX_NEEDED  # decides(high), not decides(low)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if decides(mid) else (mid, high)
    return high


def runs_phrase(n: int | None) -> str:
    """``inconclusive: needs N runs`` (per side), or more than :data:`MAX_NEEDED`."""
    return f"{V.INCONCLUSIVE}: needs {NEEDS_TOO_MANY if n is None else n} runs"


# ---- one run's values ---------------------------------------------------------------------------------------
def best_scores(studies: Mapping[str, pd.DataFrame], dataset: str, lower_is_better: bool) -> dict[str, float]:
    """``{run: mean over the dataset's objectives of its studies' best_value}``, signed so that higher is better;
    a run without every objective the others hold is left out (its mean would not compare)."""
    sign = -1.0 if lower_is_better else 1.0
    per = {}
    for name, s in studies.items():
        rows = s[(s["dataset"] == dataset) & s["best_value"].notna()] if len(s) else s
        if len(rows):
            per[name] = dict(zip(rows["objective"], rows["best_value"].astype(float), strict=True))
    if not per:
        return {}
    objectives = set().union(*per.values())
    return {n: sign * float(np.mean([v[o] for o in sorted(objectives)])) for n, v in per.items()
            if set(v) == objectives}  # fmt: skip


def replicate_cells(replicates: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every table cell of every replicate (its results, as ``results.csv``), both flavours, with a
    ``replicate`` column; cells a replicate did not run are left out."""
    frames = []
    for name, results in replicates.items():
        for flavour in FLAVOURS:
            comp = comparison_frame(results, flavour)
            comp = comp[comp["ours_mean"].notna()]
            frames.append(comp.assign(replicate=name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def cell_values(runs: Mapping[str, pd.DataFrame], tables: Sequence[str] | None = None) -> pd.DataFrame:
    """Every run's cells (``{run: results}``), both flavours, of ``tables`` (None: all), each once
    (:data:`CELL_ID`): columns ``run``, the cell keys, ``value`` and ``lower`` (True where lower is better)."""
    cells = replicate_cells(dict(runs))
    columns = ["run", *CELL_ID, "value", "lower"]
    if cells.empty:
        return pd.DataFrame(columns=columns)
    if tables is not None:
        cells = cells[cells["table"].isin(tables)]
    lower = {(t, m.name): m.lower_is_better for t, tab in TABLES.items() for m in tab.metrics}
    cells = cells.assign(run=cells["replicate"], value=cells["ours_mean"].astype(float),
                         lower=[lower.get(k, True) for k in zip(cells["table"], cells["metric"], strict=True)])  # fmt: skip
    return cells.drop_duplicates([*CELL_ID, "run"])[columns].reset_index(drop=True)


def cell_ranks(values: Sequence[float], lower_is_better: bool) -> list[float]:
    """Each value's share of the others it beats (a tie up to float rounding counts half): 1 the best, 0 the
    worst; with one value, 0.5."""
    x = np.asarray(values, float)
    if len(x) < 2:
        return [0.5] * len(x)
    s = -x if lower_is_better else x
    out = []
    for i in range(len(s)):
        others = np.delete(s, i)
        tie = np.abs(others - s[i]) <= V.ROUNDING * np.maximum(1.0, np.maximum(np.abs(others), abs(s[i])))
        out.append(float(((s[i] > others) & ~tie).sum() + 0.5 * tie.sum()) / len(others))
    return out


def rank_scores(cells: pd.DataFrame, dataset: str) -> dict[str, float]:
    """``{run: mean over its cells of the dataset of its rank among the runs holding the cell}``
    (:func:`cell_ranks`) from :func:`cell_values`."""
    part = cells[cells["dataset"] == dataset]
    ranks: dict[str, list[float]] = {}
    for _, g in part.groupby(CELL_ID, sort=False):
        for run, r in zip(g["run"], cell_ranks(g["value"].to_numpy(), bool(g["lower"].iloc[0])), strict=True):
            ranks.setdefault(run, []).append(r)
    return {run: float(np.mean(r)) for run, r in sorted(ranks.items())}


def score_margin(dataset: str) -> tuple[float, bool]:
    """``(margin, lower_is_better)`` of a dataset's best validation score: the margin of the metric the score is
    (:func:`kcal.publish.claims.paper_margins`, declared in ``claims.md``), in the score's units: validation
    accuracy for classification (the accuracy margin over its display scale: the score is a fraction; the ECE
    tie-break moves it by less than one validation row), validation NLL for regression (the NLL margin)."""
    from kcal.paper import PAPER_DATASETS
    from kcal.publish.claims import paper_margins

    margins = paper_margins()
    if dataset in PAPER_DATASETS["regression"]:
        return margins["nll"].value, True
    return margins["acc"].value / TABLES["classification"].metric("acc").scale, False


def dataset_case(
    full: tuple[Mapping[str, pd.DataFrame], Mapping[str, pd.DataFrame]],
    variant: tuple[Mapping[str, pd.DataFrame], Mapping[str, pd.DataFrame]],
    dataset: str,
    setting: str,
    tables: Sequence[str] | None = None,
) -> Case:
    """The :class:`Case` of a variant's runs on ``dataset``: ``full`` and ``variant`` are ``({run: results},
    {run: studies})``; the rank score over the cells of ``tables`` (None: all), ranked over both sides' runs."""
    margin, lower = score_margin(dataset)
    best = tuple(best_scores(side[1], dataset, lower) for side in (full, variant))
    names = [f"a:{n}" for n in full[0]] + [f"b:{n}" for n in variant[0]]
    results = dict(zip(names, [*full[0].values(), *variant[0].values()], strict=True))
    ranks = rank_scores(cell_values(results, tables), dataset)
    rank = tuple({n[2:]: v for n, v in ranks.items() if n.startswith(side)} for side in ("a:", "b:"))
    return Case(dataset, setting, best, rank, margin)  # type: ignore[arg-type]


# ---- the verdict over a family ------------------------------------------------------------------------------
@dataclass
class Case:
    """One comparison of a family: a variant's runs (``b``) against the full protocol's (``a``) on one dataset and
    setting, by the best validation score (``best``: ``{run: value}`` per side) and the rank score (``rank``), with
    the best score's margin. :func:`judge` fills the tests, their Holm-adjusted p-values and the outcome."""

    dataset: str
    setting: str
    best: tuple[dict, dict]
    rank: tuple[dict, dict]
    margin: float
    best_test: Test | None = None
    rank_test: Test | None = None
    equivalence: float = math.nan
    adjusted: tuple[float, float, float] = (math.nan, math.nan, math.nan)  # best, rank, equivalence
    needs: int | None = None
    outcome: str = ""

    @property
    def words(self) -> str:
        """The outcome, with the runs needed where it is inconclusive."""
        return runs_phrase(self.needs) if self.outcome == V.INCONCLUSIVE else self.outcome


def _test(sides: tuple[dict, dict]) -> Test | None:
    a, b = (list(s.values()) for s in sides)
    return permutation_test(a, b) if a and b else None


def judge(cases: Sequence[Case]) -> list[Case]:
    """Every case's tests, Holm over the family of difference tests (both quantities of every case) and over the
    family of equivalence tests (every case), and its outcome (module docstring); returns ``cases``."""
    for c in cases:
        c.best_test, c.rank_test = _test(c.best), _test(c.rank)
        a, b = (list(s.values()) for s in c.best)
        c.equivalence = equivalence_p(a, b, c.margin) if a and b and not math.isnan(c.margin) else math.nan
    diffs = holm([t.p if t else math.nan for c in cases for t in (c.best_test, c.rank_test)])
    equiv = holm([c.equivalence for c in cases])
    tests = max(sum(not math.isnan(c.equivalence) for c in cases), 1)
    for i, c in enumerate(cases):
        c.adjusted = (diffs[2 * i], diffs[2 * i + 1], equiv[i])
        shown = [t.diff for t, p in ((c.best_test, diffs[2 * i]), (c.rank_test, diffs[2 * i + 1]))
                 if t is not None and p <= ALPHA]  # fmt: skip
        c.needs = runs_needed(pooled_sd(*(list(s.values()) for s in c.best)), c.margin, tests)
        c.outcome = outcome(shown, equiv[i])
    return list(cases)


def outcome(shown: Sequence[float], equivalence: float) -> str:
    """*worse* / *better* / *equivalent* / *inconclusive* from the differences shown (their signed ``T``) and the
    Holm-adjusted equivalence p-value (module docstring)."""
    if any(d < 0 for d in shown):
        return V.WORSE
    if any(d > 0 for d in shown):
        return V.BETTER
    return V.EQUIVALENT if equivalence <= ALPHA else V.INCONCLUSIVE


def _p(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.3g}"


def case_text(c: Case, units: str = "") -> str:
    """The numbers of one case in a phrase: each quantity's difference, raw and Holm-adjusted p, the equivalence
    test's, and the runs needed."""
    parts = []
    for label, t, p, unit in (("best validation score", c.best_test, c.adjusted[0], units),
                              ("rank score of the cells", c.rank_test, c.adjusted[1], "")):  # fmt: skip
        if t is not None:
            parts.append(f"{label} {t.diff:+.3g}{unit} (exact permutation p {_p(t.p)} over {t.splits} splits, "
                         f"Holm {_p(p)})")  # fmt: skip
    parts.append(f"equivalence at ±{c.margin:g}{units}: p {_p(c.equivalence)}, Holm {_p(c.adjusted[2])}")
    needs = NEEDS_TOO_MANY if c.needs is None else str(c.needs)
    parts.append(f"runs per side that decide at that margin: {needs}")
    return "; ".join(parts)


# ---- the paper's numbers as one more run (protocol_spread.md) ----------------------------------------------
@dataclass(frozen=True)
class PaperRun:
    """The paper's numbers as one run beside ours on one flavour and dataset, over the cells tested
    (:func:`paper_runs`): the rank scores (``ours``: by run), the test and its Holm-adjusted p, and the runs of
    ours with which the exact test could tell the paper's run apart at all."""

    flavour: str
    dataset: str
    cells: int
    paper: float
    ours: dict
    test: Test
    adjusted: float
    needs: int

    @property
    def words(self) -> str:
        if self.adjusted <= ALPHA:
            return f"differs beyond the protocol's spread (ranks {'above' if self.test.diff > 0 else 'below'} ours)"
        return runs_phrase(self.needs)


def paper_runs(replicates: Mapping[str, pd.DataFrame], tested: pd.DataFrame) -> list[PaperRun]:
    """Per flavour and dataset of ``tested`` (the spread frame's rows whose paper number is tested,
    :func:`kcal.publish.protocol_spread.spread_frame`): the paper's numbers ranked as one more run among our R runs
    on those cells (:func:`cell_ranks`, a cell once per table), the permutation test of its rank score against ours
    over the R + 1 ways of choosing which run is the paper's, Holm over every flavour and dataset, and the fewest
    runs of ours with which the test could reach Holm's strictest level ``ALPHA / K`` at all: the smallest p of one
    run against R is ``1 / (R + 1)``, so ``R + 1 >= K / ALPHA``. The rank score has no margin: it can show that the
    paper's run is not one more run of ours, never that it is."""
    keys = ["flavour", "table", "dataset", "row", "metric"]
    cells = replicate_cells(dict(replicates)).merge(tested[keys], on=keys)
    lower = {(t, m.name): m.lower_is_better for t, tab in TABLES.items() for m in tab.metrics}
    found = []
    for (flavour, dataset), part in cells.groupby(["flavour", "dataset"], sort=True):
        ranks: dict[str, list[float]] = {}
        for key, g in part.groupby(keys, sort=False):
            names = [*g["replicate"], "paper"]
            values = [*g["ours_mean"].astype(float), float(g["paper_mean"].iloc[0])]
            for name, r in zip(names, cell_ranks(values, lower.get((key[1], key[4]), True)), strict=True):
                ranks.setdefault(name, []).append(r)
        scores = {n: float(np.mean(r)) for n, r in ranks.items()}
        paper = scores.pop("paper")
        found.append((flavour, dataset, len(ranks["paper"]), paper, scores,
                      permutation_test(list(scores.values()), [paper])))  # fmt: skip
    adjusted = holm([f[5].p for f in found])
    needs = math.ceil(len(found) / ALPHA - 1e-9) - 1
    return [PaperRun(*f, a, needs) for f, a in zip(found, adjusted, strict=True)]


def paper_runs_markdown(runs: Sequence[PaperRun]) -> str:
    """:func:`paper_runs` in one bullet, one entry per flavour and dataset."""
    if not runs:
        return ""
    parts = []
    for r in runs:
        ours = " / ".join(f"{v:.2f}" for _, v in sorted(r.ours.items()))
        parts.append(f"{r.flavour} {r.dataset} ({r.cells} cells): the paper {r.paper:.2f}, our {len(r.ours)} runs "
                     f"{ours}, p {_p(r.test.p)}, Holm {_p(r.adjusted)}: {r.words}")  # fmt: skip
    return (f"- over whole runs (`kcal.publish.whole_runs`; a run's cells share its models, so the counts above are a "
            f"guide): the paper's numbers ranked as one more run among ours on the cells tested, its rank score (0: "
            f"last on every cell, 1: first) against our runs', exact permutation p over the R + 1 choices of the "
            f"paper's run, Holm over {len(runs)}; with one paper run it can reach Holm's level only from "
            f"{runs[0].needs} runs of ours on. " + "; ".join(parts))  # fmt: skip
