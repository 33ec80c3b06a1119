"""The outcome of comparing two rows of a table on one dataset, and a claim's verdict from its outcomes over
datasets. Two sets of rules live here: the seed-SE rule of better / indistinguishable / worse (below; the
worker-count and equivalence studies still use it), and the claims' rules with margins, equivalence and the
paper's effect excluded (**A claim's comparison**, further below), fixed before they were run on our numbers.

**One comparison.** Row A (a claim's row) against row B, on one metric and one dataset:
``d = s (mean_A - mean_B)`` with ``s = +1`` where lower is better and ``s = -1`` where higher is better, so
``d < 0`` means A is better. With a half-width ``h`` (below), the outcome is

* **better** when ``d < -h``; **worse** when ``d > h``; **indistinguishable** when ``|d| <= h`` (a printed
  tie included).

``h`` depends on how many runs of the protocol hold both rows on that dataset:

* **one run** (the paper's own numbers, a dataset of ours without replicates, or any single run counted
  alone): ``h = Z sqrt(se_A^2 + se_B^2)``, ``Z = 2``, the rows' seed SEs combined (a missing SE counts as
  0; the paper prints SEs to 3 decimals, so its 0.000 enters as 0). This is the two-sided 95 % (95.4 %)
  test of two independent 50-seed means; it knows nothing of the selection's noise.
* **R >= 2 runs** (the published run and its replicates, :mod:`kcal.publish.protocol_spread`): the
  per-run differences ``d_1 .. d_R`` are tested, not the published one alone: ``d`` is their mean and
  ``h = t_{R-1} max(sd_d, u_rms) / sqrt(R)``, with ``sd_d`` their SD (ddof 1, the protocol's spread of this
  comparison: seeds and selection together), ``u_rms = sqrt(mean_r (se_A,r^2 + se_B,r^2))`` (the runs'
  combined seed SE, a floor: an SD from 3 to 5 runs can come out below the seed noise it contains) and
  ``t_{R-1}`` the two-sided 95 % quantile of Student's t with R - 1 degrees of freedom (4.30 at R = 3,
  2.78 at R = 5). This is the one-sample t test of the protocol's mean difference.

**Several compared rows** (a claim against several baselines): A is the best of the claim's rows by the
printed mean (with runs, by the mean over runs); the outcome on the dataset is *better* when A is better
than every compared row, *worse* when it is worse than at least one, *indistinguishable* otherwise.

**A claim's verdict** from its datasets' outcomes (n datasets evaluated). A claim *holds* on a dataset where
its outcome is *better* (direction ``better``) or is *better* or *indistinguishable* (direction
``not worse``, "comparable or better"); it *fails* where the outcome is *worse*; the remaining datasets
are *open*. With h holding, f failing and o = n - h - f open:

* quantifier ``every`` (the paper's "across all datasets"): **supported** when h = n; **not supported**
  when f >= 1; **undecided** otherwise (none fails, some open);
* quantifier ``most`` ("on most datasets"): **supported** when h > n / 2; **not supported** when
  h + o <= n / 2 (not a majority even if every open dataset held); **undecided** otherwise;
* n = 0: **not evaluated**.

**A claim's comparison** (:mod:`kcal.publish.claims`). The same signed difference ``d`` (``d < 0``: the
claim's row better), now with its standard error ``se`` and degrees of freedom (:class:`Interval`), and a
*margin* ``δ`` per metric, a difference a reader would not care about (:func:`margin_from_gains`: half the
median of the paper's own claimed gains in that metric, from the paper's numbers alone, so it is fixed before
any number of ours is read). With the 95 % interval ``[lo, hi]`` and the 90 % interval ``[lo90, hi90]``:

* **better** when ``hi < 0``; **worse** when ``lo > 0``; **equivalent** when ``-δ < lo90`` and ``hi90 < δ``
  (two one-sided 5 % tests at ``δ``); **inconclusive** otherwise.

For a claim of direction ``better`` the comparison *holds* when better, is *contradicted* when worse, and has
*the paper's effect excluded* when the paper's own difference on that dataset is a gain (``d_paper < 0``)
that lies below our interval (``d_paper < lo``): our data rule out a gain as large as the paper's. For
``not worse`` ("comparable or better", a non-inferiority test at ``δ``): it holds when ``hi90 < δ`` and is
contradicted when ``lo90 > δ`` (worse by more than the margin). Anything else is *open*.

**Against several rows**: holds when every comparison holds; contradicted when one is; the paper's effect
excluded when one is (and none contradicted); else open.

**A claim's verdict** over its n datasets: with ``every``, **supported** when it holds on all n,
**contradicted** when it is contradicted on one, **not reproduced: the paper's effect excluded** when the
paper's effect is excluded on one, else **inconclusive**. With ``most``: **supported** when it holds on more
than n/2; when it cannot (holding plus open datasets <= n/2), **contradicted** if it is contradicted on at
least n/2, else **not reproduced: the paper's effect excluded**; else **inconclusive**.

**The power beside each**: the minimum detectable effect at 80 % power of a two-sided 5 % test,
``(q_0.975 + q_0.80) se`` (:meth:`Interval.mde`), and the runs of the protocol that would detect the paper's
difference with that power (:func:`runs_needed`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

BETTER, INDISTINGUISHABLE, WORSE = "better", "indistinguishable", "worse"
OUTCOMES = (BETTER, INDISTINGUISHABLE, WORSE)
SUPPORTED, NOT_SUPPORTED, UNDECIDED, NOT_EVALUATED = (
    "supported",
    "not supported",
    "undecided",
    "not evaluated",
)
DIRECTIONS = ("better", "not worse")
QUANTIFIERS = ("every", "most")
Z = 2.0
"""Multiples of the combined seed SE a one-run difference must exceed to count as better or worse."""
LEVEL = 0.95
"""Two-sided level of the t test over runs."""
_EPS = 1e-12  # float slack: a difference equal to the half-width is indistinguishable
ROUNDING = 1e-9
"""An SE, SD or difference of at most ``ROUNDING * max(1, |mean|)`` is float rounding, i.e. 0: every seed or run
gave the same number, summed in another order (one class forecast for every test row; breast-cancer's accuracy of
1.0 on every run, its SD ~1e-16; the official flavour's KCE, which underflows to ~1e-120)."""


def is_rounding(x: float, *means: float) -> bool:
    """Whether ``x`` (an SE, an SD, a difference) is only float rounding of ``means`` (:data:`ROUNDING`)."""
    return abs(x) <= ROUNDING * max(1.0, *(abs(m) for m in means))


def se_or_zero(x: float | None) -> float:
    return 0.0 if x is None or math.isnan(x) else float(x)


def outcome(diff: float, half_width: float) -> str:
    """*better* when ``diff < -half_width``, *worse* when ``diff > half_width``, else *indistinguishable*."""
    if diff < -half_width - _EPS:
        return BETTER
    if diff > half_width + _EPS:
        return WORSE
    return INDISTINGUISHABLE


def seed_half_width(se_a: float, se_b: float) -> float:
    """``Z sqrt(se_a^2 + se_b^2)`` (a missing SE counts as 0)."""
    return Z * math.hypot(se_or_zero(se_a), se_or_zero(se_b))


def t_quantile(runs: int, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of Student's t with ``runs - 1`` degrees of freedom."""
    from scipy.stats import t

    if runs < 2:
        raise ValueError(f"a t quantile needs at least 2 runs, got {runs}")
    return float(t.ppf(0.5 + level / 2, runs - 1))


def runs_test(diffs: Sequence[float], seed_ses: Sequence[float]) -> tuple[float, float]:
    """``(mean difference, half-width)`` over R >= 2 runs: the mean of ``diffs`` and
    ``t_{R-1} max(sd, u_rms) / sqrt(R)``, ``seed_ses`` each run's combined seed SE (module docstring)."""
    r = len(diffs)
    if r < 2 or len(seed_ses) != r:
        raise ValueError(
            f"runs_test needs R >= 2 differences and one seed SE per run, got {r} and {len(seed_ses)}"
        )
    mean = sum(diffs) / r
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (r - 1))
    floor = math.sqrt(sum(se_or_zero(u) ** 2 for u in seed_ses) / r)
    return mean, t_quantile(r) * max(sd, floor) / math.sqrt(r)


def combine(outcomes: Iterable[str]) -> str:
    """One dataset's outcome against several compared rows: *worse* if any is, *better* if all are."""
    outs = list(outcomes)
    if not outs:
        raise ValueError("combine needs at least one outcome")
    if WORSE in outs:
        return WORSE
    return BETTER if all(o == BETTER for o in outs) else INDISTINGUISHABLE


def holds(direction: str, dataset_outcome: str) -> bool | None:
    """Whether a claim of ``direction`` holds (True), fails (False) or stays open (None) on a dataset."""
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; valid: {', '.join(DIRECTIONS)}")
    if dataset_outcome == WORSE:
        return False
    if dataset_outcome == BETTER or direction == "not worse":
        return True
    return None


def verdict(held: int, failed: int, n: int, quantifier: str) -> str:
    """The claim's verdict word from ``held`` / ``failed`` of ``n`` datasets (module docstring)."""
    if quantifier not in QUANTIFIERS:
        raise ValueError(f"unknown quantifier {quantifier!r}; valid: {', '.join(QUANTIFIERS)}")
    if not 0 <= held + failed <= n:
        raise ValueError(f"held ({held}) + failed ({failed}) must lie in 0..n ({n})")
    if n == 0:
        return NOT_EVALUATED
    open_ = n - held - failed
    if quantifier == "every":
        return SUPPORTED if held == n else (NOT_SUPPORTED if failed else UNDECIDED)
    if held > n / 2:
        return SUPPORTED
    return NOT_SUPPORTED if held + open_ <= n / 2 else UNDECIDED


# --------------------------------------------------------------------------------------------------
# The claims' rules: margins, equivalence, the paper's effect excluded

EQUIVALENT, INCONCLUSIVE = "equivalent", "inconclusive"
CLAIM_OUTCOMES = (BETTER, EQUIVALENT, WORSE, INCONCLUSIVE)
HOLDS, CONTRADICTED, EXCLUDED, OPEN = "holds", "contradicted", "the paper's effect excluded", "open"
STATUSES = (HOLDS, CONTRADICTED, EXCLUDED, OPEN)
NOT_REPRODUCED = "not reproduced: the paper's effect excluded"
CLAIM_VERDICTS = (SUPPORTED, NOT_REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_EVALUATED)
POWER = 0.80
"""Power at which the minimum detectable effect and the runs needed are stated."""
MAX_RUNS = 1000
""":func:`runs_needed` gives up beyond this many runs."""


@lru_cache(maxsize=4096)
def quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``math.inf``: the standard normal);
    remembered, since a report asks for the same few (p, df) pairs tens of thousands of times (scipy's ``ppf``
    costs ~75 us a call)."""
    from scipy.stats import norm, t

    return float(norm.ppf(p)) if math.isinf(df) else float(t.ppf(p, df))


@dataclass(frozen=True)
class Interval:
    """A signed difference ``diff`` (negative: the claim's row better), its standard error ``se`` and the
    degrees of freedom of its t statistic (``math.inf``: normal, seed SEs alone)."""

    diff: float
    se: float
    df: float = math.inf

    def ci(self, level: float = LEVEL) -> tuple[float, float]:
        """The two-sided ``level`` interval ``diff ± q se``."""
        half = quantile(0.5 + level / 2, self.df) * self.se
        return self.diff - half, self.diff + half

    def mde(self, power: float = POWER, level: float = LEVEL) -> float:
        """The smallest true difference a two-sided ``level`` test detects with probability ``power``:
        ``(q_{(1 + level)/2} + q_power) se``."""
        return (quantile(0.5 + level / 2, self.df) + quantile(power, self.df)) * self.se


def compare(iv: Interval, margin: float) -> str:
    """*better* / *worse* / *equivalent* / *inconclusive* (the rules above) of ``iv`` at margin ``margin``."""
    lo, hi = iv.ci(LEVEL)
    lo90, hi90 = iv.ci(2 * LEVEL - 1)
    if hi < -_EPS:
        return BETTER
    if lo > _EPS:
        return WORSE
    if -margin < lo90 and hi90 < margin:
        return EQUIVALENT
    return INCONCLUSIVE


def status(direction: str, iv: Interval, margin: float, paper_diff: float | None) -> str:
    """Whether one comparison *holds*, is *contradicted*, has the paper's effect *excluded*, or is *open*
    (the rules above); ``paper_diff`` is the paper's own signed difference there (None: not known)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; valid: {', '.join(DIRECTIONS)}")
    lo, hi = iv.ci(LEVEL)
    if direction == "not worse":
        lo90, hi90 = iv.ci(2 * LEVEL - 1)
        return HOLDS if hi90 < margin else (CONTRADICTED if lo90 > margin else OPEN)
    outcome_ = compare(iv, margin)
    if outcome_ == BETTER:
        return HOLDS
    if outcome_ == WORSE:
        return CONTRADICTED
    if paper_diff is not None and not math.isnan(paper_diff) and paper_diff < 0 and paper_diff < lo - _EPS:
        return EXCLUDED
    return OPEN


def combine_status(statuses: Iterable[str]) -> str:
    """One dataset's status against several compared rows (the rules above)."""
    found = list(statuses)
    if not found:
        raise ValueError("combine_status needs at least one status")
    if CONTRADICTED in found:
        return CONTRADICTED
    if EXCLUDED in found:
        return EXCLUDED
    return HOLDS if all(s == HOLDS for s in found) else OPEN


def claim_verdict(statuses: Sequence[str], quantifier: str) -> str:
    """The claim's verdict from its datasets' statuses (the rules above)."""
    if quantifier not in QUANTIFIERS:
        raise ValueError(f"unknown quantifier {quantifier!r}; valid: {', '.join(QUANTIFIERS)}")
    unknown = set(statuses) - set(STATUSES)
    if unknown:
        raise ValueError(f"unknown status {sorted(unknown)}; valid: {', '.join(STATUSES)}")
    n = len(statuses)
    if n == 0:
        return NOT_EVALUATED
    held, contradicted = statuses.count(HOLDS), statuses.count(CONTRADICTED)
    excluded, open_ = statuses.count(EXCLUDED), statuses.count(OPEN)
    if quantifier == "every":
        if held == n:
            return SUPPORTED
        return CONTRADICTED if contradicted else (NOT_REPRODUCED if excluded else INCONCLUSIVE)
    if held > n / 2:
        return SUPPORTED
    if held + open_ <= n / 2:
        return CONTRADICTED if contradicted >= n / 2 else NOT_REPRODUCED
    return INCONCLUSIVE


def runs_needed(sd_run: float, effect: float, power: float = POWER, level: float = LEVEL) -> int | None:
    """The fewest runs R >= 2 of the protocol whose t test over runs (per-run SD ``sd_run``) detects a true
    difference ``effect`` with probability ``power``: ``(t_{R-1,(1+level)/2} + t_{R-1,power}) sd / sqrt(R)
    <= |effect|``; None when more than :data:`MAX_RUNS` would be needed or ``effect`` is 0."""
    if not effect or math.isnan(effect) or math.isnan(sd_run):
        return None
    if sd_run <= 0:
        return 2
    for r in range(2, MAX_RUNS + 1):
        if (quantile(0.5 + level / 2, r - 1) + quantile(power, r - 1)) * sd_run / math.sqrt(r) <= abs(effect):
            return r
    return None


def median_gain(gains: Sequence[float]) -> float:
    """The median of the positive, finite ``gains`` (NaN without one)."""
    import statistics

    found = [g for g in gains if g > 0 and not math.isnan(g)]
    return float(statistics.median(found)) if found else math.nan


def margin_from_gains(gains: Sequence[float]) -> float:
    """A metric's margin: half the median of the paper's claimed gains (:func:`median_gain`), rounded to one
    significant digit; NaN without gains."""
    median = median_gain(gains)
    return math.nan if math.isnan(median) else float(f"{median / 2:.1g}")
