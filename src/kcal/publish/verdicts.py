"""Better, indistinguishable or worse: the outcome of comparing two rows of a table on one dataset, and a
claim's verdict from its outcomes over datasets. The rules were fixed here before any number was read.

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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

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
