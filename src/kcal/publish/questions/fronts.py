"""Comparing the Pareto fronts of two-objective studies (``sweep.selection=pareto``), both objectives
minimised: validation NLL first, validation QCE (regression) or ECE (classification) second.

A point ``p`` *dominates* ``q`` when ``p_k <= q_k`` for both coordinates ``k`` and ``p_k < q_k`` for
at least one, so two identical points do not dominate each other. A set's *front* is its subset
dominated by none of its points. Rows with a non-finite coordinate are on no front and dominate
nothing.

* :func:`pareto_front`, :func:`hypervolume`, :func:`dominated_share`: a front, the area it dominates
  up to a reference point, and how much of one front another dominates;
* :func:`common_reference`: the one reference point of every study compared (hypervolumes are
  comparable only under the same reference);
* :func:`bootstrap_compare`: percentile intervals for these statistics, resampling the trials;
* :func:`choose`: the two rules that pick one point of a front, stated before the comparison;
* :func:`study_points`: an Optuna study's completed trials as an ``(n, 2)`` array.

All but :func:`study_points` are plain numpy functions of ``(n, 2)`` arrays.
"""

from __future__ import annotations

import numpy as np

#: default ``tol`` of :func:`choose`'s ``calibration`` rule, in nats per observation
CALIBRATION_TOL = 0.01
RULES = ("nll", "calibration")


def as_points(points) -> np.ndarray:
    """``points`` as a float ``(n, 2)`` array (an empty input gives shape ``(0, 2)``)."""
    array = np.asarray(points, dtype=float)
    if array.size == 0:
        return array.reshape(0, 2)
    if array.ndim != 2 or array.shape[1] != 2:
        raise ValueError(f"expected an (n, 2) array of points, got shape {array.shape}")
    return array


def pareto_front(points) -> np.ndarray:
    """Indices of the non-dominated rows of ``points`` (``(n, 2)``, both coordinates minimised).

    Row ``i`` is on the front iff it is finite and no finite row ``j`` has
    ``x_j <= x_i``, ``y_j <= y_i`` and ``(x_j, y_j) != (x_i, y_i)``. Identical rows do not dominate
    each other, so duplicates of a front point are all on the front (as in Optuna's
    ``study.best_trials``). Sweep: sorted by ``x``, the rows sharing a value of ``x`` whose ``y`` is
    the group's minimum ``y_min`` are on the front iff ``y_min`` is below the least ``y`` of every
    smaller ``x``; the group's other rows are dominated by those.

    Returns the indices sorted by the first coordinate, then the second, then the index.
    """
    array = as_points(points)
    finite = np.flatnonzero(np.isfinite(array).all(axis=1))
    order = finite[np.lexsort((finite, array[finite, 1], array[finite, 0]))]
    kept: list[int] = []
    best_y = np.inf  # least y over the groups of smaller x
    start = 0
    while start < len(order):
        x = array[order[start], 0]
        stop = start
        while stop < len(order) and array[order[stop], 0] == x:
            stop += 1
        group = order[start:stop]  # sorted by y, then index
        y_min = array[group[0], 1]
        if y_min < best_y:
            kept.extend(int(i) for i in group if array[i, 1] == y_min)
            best_y = y_min
        start = stop
    return np.asarray(kept, dtype=int)


def hypervolume(points, reference) -> float:
    r"""The area dominated by ``points``' front and bounded by ``reference`` ``(r_x, r_y)``.

    It is the area of the union of the boxes :math:`[x_i, r_x] \times [y_i, r_y]`. Only points with
    :math:`x_i < r_x` and :math:`y_i < r_y` contribute (a point on or beyond the reference bounds an
    empty box). With those points' front sorted by ascending :math:`x`
    (so :math:`y` descends), :math:`x_1 < \dots < x_m`, and :math:`x_{m+1} = r_x`:

    .. math:: HV = \sum_{i=1}^{m} (x_{i+1} - x_i)\,(r_y - y_i).

    Duplicated front points add strips of zero width. An empty front gives 0.
    """
    array = as_points(points)
    ref = np.asarray(reference, dtype=float)
    if ref.shape != (2,) or not np.isfinite(ref).all():
        raise ValueError(f"reference must be two finite numbers, got {reference!r}")
    inside = array[np.isfinite(array).all(axis=1) & (array[:, 0] < ref[0]) & (array[:, 1] < ref[1])]
    if len(inside) == 0:
        return 0.0
    front = inside[pareto_front(inside)]
    right = np.append(front[1:, 0], ref[0])
    return float(np.sum((right - front[:, 0]) * (ref[1] - front[:, 1])))


def dominated_share(a, b) -> float:
    r"""The share of ``a``'s rows dominated by some row of ``b``:
    :math:`|\{p \in a : \exists q \in b,\ q \prec p\}| / |a|`.

    ``a`` is meant to be a front (a row per point, duplicates counted as often as they appear); ``b``
    may be a front or every point of a study, which gives the same share (whatever a point of ``b``
    dominates, a point of ``b``'s front dominates). Returns NaN where ``a`` has no row.
    """
    pa, pb = as_points(a), as_points(b)
    if len(pa) == 0:
        return float("nan")
    pb = pb[np.isfinite(pb).all(axis=1)]
    if len(pb) == 0:
        return 0.0
    q, p = pb[:, None, :], pa[None, :, :]
    dominated = ((q <= p).all(axis=2) & (q < p).any(axis=2)).any(axis=0)
    return float(dominated.mean())


def common_reference(*point_sets, margin: float = 0.05, over: str = "front") -> np.ndarray:
    """One reference point for every study compared: per coordinate, the largest value ``hi`` over
    the points considered, plus ``margin`` times their range ``hi - lo``.

    ``over="front"`` (the default) considers the points of each set's own front, so the reference is
    the nadir of the fronts, moved out by the margin; ``over="all"`` considers every finite point.
    The nadir keeps a study's worst trials (a run whose NLL blew up but still completed) from setting
    the reference: those would make the strip that a front's extreme points add toward them outweigh
    the rest of the front. The margin gives the extreme points of the fronts a strip of positive
    width, so they count. Where the range is 0, ``|hi|`` (or 1 where ``hi`` is 0) stands in for it.
    Points of a resample beyond the reference add nothing to a hypervolume.
    """
    if over not in ("front", "all"):
        raise ValueError(f"over must be 'front' or 'all', got {over!r}")
    chosen = []
    for points in point_sets:
        array = as_points(points)
        array = array[np.isfinite(array).all(axis=1)]
        chosen.append(array[pareto_front(array)] if over == "front" else array)
    union = np.concatenate(chosen) if chosen else np.empty((0, 2))
    if len(union) == 0:
        raise ValueError("no finite point to place a reference by")
    hi, lo = union.max(axis=0), union.min(axis=0)
    span = hi - lo
    span = np.where(span > 0, span, np.where(hi != 0, np.abs(hi), 1.0))
    return hi + margin * span


def interval(point: float, draws: np.ndarray) -> dict[str, float]:
    """A point estimate with the 2.5 % and 97.5 % percentiles (numpy's linear interpolation) of its
    bootstrap draws, NaN draws left out."""
    finite = draws[~np.isnan(draws)]
    low, high = np.percentile(finite, [2.5, 97.5]) if len(finite) else (np.nan, np.nan)
    return {"estimate": float(point), "low": float(low), "high": float(high)}


def front_statistics(a: np.ndarray, b: np.ndarray, reference: np.ndarray) -> tuple[float, ...]:
    """``(HV(a), HV(b), share of a's front dominated by b's, share of b's front dominated by a's)``."""
    front_a, front_b = a[pareto_front(a)], b[pareto_front(b)]
    return (
        hypervolume(front_a, reference),
        hypervolume(front_b, reference),
        dominated_share(front_a, front_b),
        dominated_share(front_b, front_a),
    )


def bootstrap_compare(a_points, b_points, reference, n_boot: int = 1000, seed: int = 0) -> dict:
    """Compare the fronts of studies ``a`` (e.g. the plain objective) and ``b`` (a regularised one)
    under one ``reference`` (:func:`common_reference`), with percentile bootstrap intervals.

    Each of the ``n_boot`` resamples draws ``len(a)`` trials of ``a`` and ``len(b)`` trials of ``b``
    with replacement, independently, and recomputes both fronts from the distinct trials drawn (a
    trial drawn twice is one point). From ``numpy.random.default_rng(seed)``, so one seed gives one
    result. Returns a JSON-ready dict::

        hv_a, hv_b                 {"estimate", "low", "high"}: hypervolume of each front
        hv_diff                    {"estimate", "low", "high", "share_b_greater"}: HV(b) - HV(a),
                                   and the share of resamples with HV(b) > HV(a)
        dominated_a_by_b           {"estimate", "low", "high"}: dominated_share(front a, front b)
        dominated_b_by_a           {"estimate", "low", "high"}: dominated_share(front b, front a)
        n_boot, seed, reference

    Estimates are those of the full studies; ``low``/``high`` are the 2.5 %/97.5 % percentiles of
    the resamples. A resample holds a subset of a study's trials, so its hypervolume is never above
    the full study's: each HV interval lies at or below its estimate. The difference shares that
    shortfall between the two studies and is the quantity to read.
    """
    a, b = as_points(a_points), as_points(b_points)
    if not np.isfinite(a).all(axis=1).any() or not np.isfinite(b).all(axis=1).any():
        raise ValueError("each study needs at least one trial with finite values")
    ref = np.asarray(reference, dtype=float)
    rng = np.random.default_rng(seed)
    draws = np.empty((n_boot, 4))
    for k in range(n_boot):
        rows_a = np.unique(rng.integers(0, len(a), size=len(a)))
        rows_b = np.unique(rng.integers(0, len(b), size=len(b)))
        draws[k] = front_statistics(a[rows_a], b[rows_b], ref)
    hv_a, hv_b, dom_ab, dom_ba = front_statistics(a, b, ref)
    diff = draws[:, 1] - draws[:, 0]
    return {
        "hv_a": interval(hv_a, draws[:, 0]),
        "hv_b": interval(hv_b, draws[:, 1]),
        "hv_diff": {**interval(hv_b - hv_a, diff), "share_b_greater": float(np.mean(diff > 0))},
        "dominated_a_by_b": interval(dom_ab, draws[:, 2]),
        "dominated_b_by_a": interval(dom_ba, draws[:, 3]),
        "n_boot": int(n_boot),
        "seed": int(seed),
        "reference": [float(v) for v in ref],
    }


def choose(points, rule: str, best_plain: float | None = None, tol: float = CALIBRATION_TOL) -> int | None:
    r"""The row of ``points`` that ``rule`` picks (``None`` where no finite row qualifies).

    * ``"nll"``: the row of lowest first coordinate (validation NLL); ties: lower second coordinate,
      then lower index. This is the trial :func:`kcal.sweep.selection.selected` picks.
    * ``"calibration"``: among the rows with ``x <= best_plain + tol``, where ``best_plain`` is the
      plain objective's best validation NLL, the row of lowest second coordinate (QCE or ECE); ties:
      lower first coordinate, then lower index. Rows with an NLL below ``best_plain`` qualify: they
      give up nothing. ``None`` when no row comes within ``tol`` of ``best_plain``.

    Either rule picks a point of the front of ``points``, so ``points`` may be a front or every trial.

    ``tol`` is absolute, in nats per observation (the NLLs are means of natural-log densities), and
    defaults to 0.01: the chosen model's geometric-mean predictive density (or probability of the
    true class) is at least :math:`e^{-0.01} \approx 0.990` times the plain best's, a 1 % give-up
    in likelihood. A share of ``|best_plain|`` would not do: a regression NLL moves by ``log c``
    when the targets are rescaled by ``c``, so the share would depend on the targets' unit, and it
    vanishes as ``best_plain`` nears 0 (and the NLLs cross it). A difference of NLLs is a mean
    log-likelihood ratio and does not depend on the unit.
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    array = as_points(points)
    eligible = np.isfinite(array).all(axis=1)
    if rule == "calibration":
        if best_plain is None or not np.isfinite(best_plain):
            raise ValueError("rule 'calibration' needs the plain objective's best NLL as best_plain")
        if not tol >= 0:
            raise ValueError(f"tol must be a non-negative number, got {tol!r}")
        eligible &= array[:, 0] <= best_plain + tol
    rows = np.flatnonzero(eligible)
    if len(rows) == 0:
        return None
    first, second = (0, 1) if rule == "nll" else (1, 0)
    order = np.lexsort((rows, array[rows, second], array[rows, first]))
    return int(rows[order[0]])


def study_points(study) -> np.ndarray:
    """The ``(n, 2)`` values of an Optuna study's completed trials, a row per trial in trial-number
    order (``study.get_trials(states=(TrialState.COMPLETE,))``), so row ``i`` of a :func:`choose` or
    :func:`pareto_front` index is the ``i``-th completed trial. The study must have two objectives,
    both minimised."""
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    if list(study.directions) != [StudyDirection.MINIMIZE, StudyDirection.MINIMIZE]:
        raise ValueError(f"expected two minimised objectives, got {study.directions}")
    trials = sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.number)
    return as_points([t.values for t in trials])
