"""How the protocol's result depends on its search budget: expected best validation score after k trials.

Dodge et al. (*Show Your Work*, EMNLP 2019) report, for a sweep's n observed validation scores, the expected
best score that a sweep of k <= n trials would have found, treating the n observed scores as the
distribution that each trial draws from (k draws with replacement). With the scores sorted ascending,
``v_(1) <= ... <= v_(n)``, the best of k draws is at most ``v_(i)`` with probability ``(i / n)^k``, so

    E[max of k] = sum_i v_(i) [ (i / n)^k - ((i - 1) / n)^k ]

and, for a score to minimise (a validation NLL), the same formula on ``-v`` negated back. The standard
deviation comes from ``E[max^2]`` the same way. The TPE sampler's trials are not independent draws (later
trials depend on earlier ones), so the curve says what a budget of k trials buys *if trials were drawn from
the distribution of the observed ones*: the usual reading of these curves, stated with every figure.

Whether a sweep of 100 trials reached its plateau is decided by a rule fixed here before any curve was
drawn (:data:`PLATEAU_SHARE`): the expected best gains less from k = n/2 to k = n than
``PLATEAU_SHARE`` of what it gains from k = 1 to k = n.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

PLATEAU_SHARE = 0.1
"""A curve has reached its plateau at k = n when E[best of n] - E[best of n/2] < PLATEAU_SHARE x
(E[best of n] - E[best of 1]) (a curve that gains nothing at all has reached it too)."""


def _sorted_scores(values: Sequence[float], maximize: bool) -> np.ndarray:
    v = np.asarray(values, dtype=float).reshape(-1)
    if v.size == 0:
        raise ValueError("a budget curve needs at least one finished trial's score")
    if not np.isfinite(v).all():
        raise ValueError("trial scores must be finite (leave out failed trials)")
    return np.sort(v if maximize else -v)


def expected_best(values: Sequence[float], k: int | Sequence[int], maximize: bool = True) -> np.ndarray:
    """E[best of k draws with replacement from ``values``] for each ``k`` (Dodge et al. 2019, Eq. 1)."""
    mean, _ = expected_best_with_std(values, k, maximize)
    return mean


def expected_best_with_std(
    values: Sequence[float], k: int | Sequence[int], maximize: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, std)`` of the best of k draws with replacement from ``values``, for each ``k``."""
    v = _sorted_scores(values, maximize)
    ks = np.atleast_1d(np.asarray(k, dtype=float))
    if (ks < 1).any():
        raise ValueError(f"k must be >= 1, got {ks.min():g}")
    n = v.size
    i = np.arange(1, n + 1, dtype=float)
    weights = (i / n)[None, :] ** ks[:, None] - ((i - 1) / n)[None, :] ** ks[:, None]  # P(best = v_(i))
    mean = weights @ v
    var = np.maximum(weights @ (v * v) - mean * mean, 0.0)
    sign = 1.0 if maximize else -1.0
    return sign * mean, np.sqrt(var)


def budget_curve(
    values: Sequence[float], maximize: bool = True, k_max: int | None = None
) -> dict[str, np.ndarray]:
    """The curve for k = 1 .. ``k_max`` (default: the number of scores): ``{"k", "mean", "std"}``."""
    n = len(values)
    ks = np.arange(1, (k_max or n) + 1)
    mean, std = expected_best_with_std(values, ks, maximize)
    return {"k": ks, "mean": mean, "std": std}


def reached_plateau(values: Sequence[float], maximize: bool = True) -> tuple[bool, float, float]:
    """``(reached, late_gain, total_gain)`` by the rule of :data:`PLATEAU_SHARE` at k = n (the scores' count):
    ``late_gain`` = E[best of n] - E[best of n//2], ``total_gain`` = E[best of n] - E[best of 1], both
    signed so that a gain is positive whichever way the score is optimised."""
    n = len(values)
    first, half, last = expected_best(values, [1, max(1, n // 2), n], maximize)
    sign = 1.0 if maximize else -1.0
    late, total = sign * (last - half), sign * (last - first)
    return bool(late <= PLATEAU_SHARE * total), float(late), float(total)
