"""``kcal.publish.questions.fronts`` against naive references: a double-loop front, the area of a union of boxes (exact
by coordinate compression, and counted on a fine grid), hand-made cases, and Optuna's own front."""

import json
import math

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState, create_trial

from kcal.publish.questions.fronts import (
    CALIBRATION_TOL,
    bootstrap_compare,
    choose,
    common_reference,
    dominated_share,
    hypervolume,
    pareto_front,
    study_points,
)
from kcal.sweep import selection


def dominates(p, q) -> bool:
    return all(pk <= qk for pk, qk in zip(p, q, strict=True)) and any(
        pk < qk for pk, qk in zip(p, q, strict=True)
    )


def naive_front(points) -> list[int]:
    """Every finite row that no finite row dominates, by a double loop, in (x, y, index) order."""
    rows = [i for i, p in enumerate(points) if all(math.isfinite(v) for v in p)]
    front = [i for i in rows if not any(dominates(points[j], points[i]) for j in rows)]
    return sorted(front, key=lambda i: (points[i][0], points[i][1], i))


def union_area(points, reference) -> float:
    """The exact area of the union of the boxes [x_i, r_x] x [y_i, r_y] (points beyond the reference
    bound empty boxes): over the grid that the points' coordinates cut the box into, a cell is
    covered iff some point lies below and left of its lower-left corner."""
    rx, ry = reference
    inside = [(x, y) for x, y in points if x < rx and y < ry]
    xs = sorted({x for x, _ in inside} | {rx})
    ys = sorted({y for _, y in inside} | {ry})
    area = 0.0
    for x0, x1 in zip(xs, xs[1:], strict=False):
        for y0, y1 in zip(ys, ys[1:], strict=False):
            if any(x <= x0 and y <= y0 for x, y in inside):
                area += (x1 - x0) * (y1 - y0)
    return area


def grid_area(points, reference, cells: int) -> float:
    """The dominated area counted on a ``cells x cells`` grid of cell centres over [lo, reference]."""
    points = np.asarray(points)
    lo = points.min(axis=0)
    ref = np.asarray(reference)
    h = (ref - lo) / cells
    cx = lo[0] + (np.arange(cells) + 0.5) * h[0]
    cy = lo[1] + (np.arange(cells) + 0.5) * h[1]
    gx, gy = np.meshgrid(cx, cy, indexing="ij")
    covered = np.zeros((cells, cells), dtype=bool)
    for x, y in points:
        covered |= (gx >= x) & (gy >= y)
    return float(covered.sum() * h[0] * h[1])


# pareto_front


@pytest.mark.parametrize("seed", range(20))
def test_pareto_front_matches_double_loop_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    points = rng.integers(-3, 4, size=(n, 2)).astype(float)  # few values: many ties and duplicates
    assert pareto_front(points).tolist() == naive_front(points.tolist())


@pytest.mark.parametrize("seed", range(5))
def test_pareto_front_matches_double_loop_continuous(seed):
    points = np.random.default_rng(100 + seed).normal(size=(60, 2))
    assert pareto_front(points).tolist() == naive_front(points.tolist())


def test_pareto_front_by_hand():
    points = [[1, 5], [2, 2], [2, 2], [2, 3], [5, 1], [6, 1], [0, 9], [3, 3]]
    # (2, 2) twice: identical points do not dominate each other, so both are on the front
    assert pareto_front(points).tolist() == [6, 0, 1, 2, 4]
    assert pareto_front(np.empty((0, 2))).tolist() == []
    with_nonfinite = [[np.nan, 0.0], [1.0, np.inf], [-np.inf, 0.0], [1.0, 1.0]]
    assert pareto_front(with_nonfinite).tolist() == [3]
    with pytest.raises(ValueError):
        pareto_front([[1.0, 2.0, 3.0]])


# hypervolume


def test_hypervolume_by_hand():
    assert hypervolume([[0, 0]], [1, 1]) == 1.0
    # boxes [0,2]x[1,2] and [1,2]x[0,2]: 2 + 2 - 1
    assert hypervolume([[0, 1], [1, 0]], [2, 2]) == 3.0
    # a dominated point and a duplicate change nothing
    assert hypervolume([[0, 1], [1, 0], [1, 1], [0, 1]], [2, 2]) == 3.0
    # negative coordinates (regression NLLs are often negative)
    assert hypervolume([[-1, -1]], [0, 0]) == 1.0
    assert hypervolume([[-2.0, 0.5], [-1.0, 0.25]], [0.0, 1.0]) == pytest.approx(2 * 0.5 + 1 * 0.25)
    # on or beyond the reference: nothing
    assert hypervolume([[1, 0], [0, 1], [3, -5]], [1, 1]) == 0.0
    assert hypervolume([[0.5, 0.5], [2, 0]], [1, 1]) == 0.25
    assert hypervolume(np.empty((0, 2)), [1, 1]) == 0.0
    assert hypervolume([[np.nan, 0.0], [0.0, 0.0]], [1, 1]) == 1.0
    with pytest.raises(ValueError):
        hypervolume([[0, 0]], [1, np.inf])


@pytest.mark.parametrize("seed", range(20))
def test_hypervolume_matches_exact_union_of_boxes(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 25))
    points = rng.integers(-4, 5, size=(n, 2)).astype(float)  # ties, and points beyond the reference
    reference = rng.integers(-1, 5, size=2).astype(float)
    assert hypervolume(points, reference) == pytest.approx(
        union_area(points.tolist(), reference.tolist()), abs=1e-12
    )


@pytest.mark.parametrize("seed", range(4))
def test_hypervolume_matches_grid_count(seed):
    """A cell centre is misclassified only in cells the front's staircase boundary crosses; a
    monotone staircase crosses at most 2 * cells of the cells x cells grid, so
    |grid - exact| <= 2 * cells * (cell area) = 2 * W_x * W_y / cells."""
    rng = np.random.default_rng(seed)
    points = rng.uniform(0, 1, size=(15, 2))
    reference = np.array([1.05, 1.1])
    cells = 1000
    width = reference - points.min(axis=0)
    tolerance = 2 * width[0] * width[1] / cells
    assert abs(hypervolume(points, reference) - grid_area(points, reference, cells)) <= tolerance


# dominated_share


def test_dominated_share_by_hand():
    a = [[1, 1], [2, 0], [0, 3]]
    assert dominated_share(a, [[0.5, 1]]) == pytest.approx(1 / 3)  # dominates (1, 1) only
    assert dominated_share(a, [[0.5, 1], [2, -1]]) == pytest.approx(2 / 3)
    assert dominated_share(a, a) == 0.0  # identical points do not dominate each other
    assert dominated_share(a, [[-1, -1]]) == 1.0
    assert dominated_share(a, np.empty((0, 2))) == 0.0
    assert dominated_share(a, [[np.nan, -5.0]]) == 0.0  # a non-finite point dominates nothing
    assert math.isnan(dominated_share(np.empty((0, 2)), a))


# common_reference


def test_common_reference():
    a = [[0, 1], [1, 0], [10, 10]]  # (10, 10) is dominated: off a's front
    b = [[0.5, 0.5], [np.inf, 0.0]]
    # fronts: (0,1), (1,0), (0.5,0.5): hi (1, 1), lo (0, 0)
    assert common_reference(a, b).tolist() == pytest.approx([1.05, 1.05])
    assert common_reference(a, b, margin=0.0).tolist() == pytest.approx([1.0, 1.0])
    assert common_reference(a, b, over="all").tolist() == pytest.approx([10.5, 10.5])
    # a range of 0 stands in |hi| (1 where hi is 0)
    assert common_reference([[2.0, 0.0]], margin=0.5).tolist() == pytest.approx([3.0, 0.5])
    with pytest.raises(ValueError):
        common_reference([[np.nan, 0.0]])


# bootstrap_compare


def test_bootstrap_compare_is_deterministic_for_a_seed():
    rng = np.random.default_rng(0)
    a, b = rng.uniform(size=(30, 2)), rng.uniform(size=(25, 2))
    reference = common_reference(a, b)
    first = bootstrap_compare(a, b, reference, n_boot=200, seed=3)
    assert first == bootstrap_compare(a, b, reference, n_boot=200, seed=3)
    assert first != bootstrap_compare(a, b, reference, n_boot=200, seed=4)
    json.dumps(first)
    # the estimates are those of the full studies
    assert first["hv_a"]["estimate"] == hypervolume(a, reference)
    assert first["hv_b"]["estimate"] == hypervolume(b, reference)
    assert first["hv_diff"]["estimate"] == pytest.approx(
        hypervolume(b, reference) - hypervolume(a, reference)
    )
    front_a, front_b = a[pareto_front(a)], b[pareto_front(b)]
    assert first["dominated_a_by_b"]["estimate"] == dominated_share(front_a, front_b)
    assert first["dominated_b_by_a"]["estimate"] == dominated_share(front_b, front_a)
    # a resample holds a subset of the trials: its hypervolume is never above the full study's
    for key in ("hv_a", "hv_b"):
        assert first[key]["low"] <= first[key]["high"] <= first[key]["estimate"]


def test_bootstrap_compare_when_b_dominates_a():
    rng = np.random.default_rng(1)
    a = rng.uniform(1.0, 2.0, size=(40, 2))
    b = rng.uniform(0.0, 0.9, size=(40, 2))  # every point of b dominates every point of a
    result = bootstrap_compare(a, b, common_reference(a, b), n_boot=300, seed=0)
    diff = result["hv_diff"]
    assert diff["estimate"] > 0 and diff["low"] > 0
    assert diff["share_b_greater"] == 1.0
    assert result["dominated_a_by_b"] == {"estimate": 1.0, "low": 1.0, "high": 1.0}
    assert result["dominated_b_by_a"] == {"estimate": 0.0, "low": 0.0, "high": 0.0}
    # and the other way round
    swapped = bootstrap_compare(b, a, common_reference(a, b), n_boot=300, seed=0)
    assert swapped["hv_diff"]["high"] < 0 and swapped["hv_diff"]["share_b_greater"] == 0.0


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("seed", range(10))
def test_bootstrap_compare_one_resample_by_hand(seed, swap):
    """With one resample, both ends of each interval are that resample's value: redraw its trials
    (a's, then b's, from the same generator), keep the distinct ones, and recompute naively."""
    rng = np.random.default_rng(50 + seed)
    line = np.column_stack([np.arange(6.0), 5.0 - np.arange(6.0)])  # one front of 6 points
    scatter = rng.integers(0, 6, size=(6, 2)).astype(float)
    a, b = (scatter, line) if swap else (line, scatter)
    reference = [7.0, 7.0]
    result = bootstrap_compare(a, b, reference, n_boot=1, seed=seed)
    draw = np.random.default_rng(seed)
    ra = a[sorted(set(draw.integers(0, 6, size=6).tolist()))].tolist()
    rb = b[sorted(set(draw.integers(0, 6, size=6).tolist()))].tolist()
    front_a = [ra[i] for i in naive_front(ra)]
    front_b = [rb[i] for i in naive_front(rb)]
    hv_a, hv_b = union_area(ra, reference), union_area(rb, reference)
    share_ab = sum(any(dominates(q, p) for q in front_b) for p in front_a) / len(front_a)
    share_ba = sum(any(dominates(q, p) for q in front_a) for p in front_b) / len(front_b)
    for key, value in [("hv_a", hv_a), ("hv_b", hv_b), ("hv_diff", hv_b - hv_a)]:
        assert result[key]["low"] == pytest.approx(value) and result[key]["high"] == pytest.approx(value)
    assert result["hv_diff"]["share_b_greater"] == float(hv_b - hv_a > 1e-12)
    assert result["dominated_a_by_b"]["low"] == pytest.approx(share_ab)
    assert result["dominated_b_by_a"]["low"] == pytest.approx(share_ba)


def test_bootstrap_compare_needs_finite_trials():
    with pytest.raises(ValueError):
        bootstrap_compare([[np.nan, 1.0]], [[0.0, 0.0]], [1.0, 1.0], n_boot=5)


# choose

POINTS = [
    [1.00, 0.50],  # 0
    [0.90, 0.80],  # 1
    [0.90, 0.70],  # 2: lowest NLL, with the lower second metric of the two
    [1.20, 0.10],  # 3
    [0.95, 0.20],  # 4
    [np.nan, 0.0],  # 5: never chosen
]


def test_choose_nll_rule():
    assert choose(POINTS, "nll") == 2
    assert choose([[1.0, 0.3], [1.0, 0.3], [1.0, 0.2]], "nll") == 2
    assert choose([[1.0, 0.3], [1.0, 0.3]], "nll") == 0  # full tie: the lower index
    assert choose([[np.nan, 0.0]], "nll") is None


def test_choose_calibration_rule():
    assert choose(POINTS, "calibration", best_plain=0.9, tol=0.06) == 4  # rows 1, 2, 4 qualify
    assert choose(POINTS, "calibration", best_plain=0.9, tol=0.01) == 2  # rows 1, 2 qualify
    assert choose(POINTS, "calibration", best_plain=0.9, tol=0.3) == 3  # 1.2 <= 1.2: inclusive
    assert choose(POINTS, "calibration", best_plain=0.9) == choose(
        POINTS, "calibration", best_plain=0.9, tol=CALIBRATION_TOL
    )
    assert CALIBRATION_TOL == 0.01
    # an NLL below the plain objective's best qualifies
    assert choose(POINTS, "calibration", best_plain=2.0, tol=0.0) == 3
    # ties on the second metric: the lower NLL, then the lower index
    tied = [[0.5, 0.1], [0.4, 0.1], [0.4, 0.1], [0.3, 0.2]]
    assert choose(tied, "calibration", best_plain=0.5, tol=0.0) == 1
    # nothing within tol of the plain best
    assert choose(POINTS, "calibration", best_plain=0.5, tol=0.01) is None
    with pytest.raises(ValueError):
        choose(POINTS, "calibration")
    with pytest.raises(ValueError):
        choose(POINTS, "calibration", best_plain=0.9, tol=-0.1)
    with pytest.raises(ValueError):
        choose(POINTS, "accuracy")


@pytest.mark.parametrize("seed", range(10))
def test_choose_picks_a_front_point(seed):
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 6, size=(30, 2)).astype(float)
    front = set(pareto_front(points).tolist())
    assert choose(points, "nll") in front
    picked = choose(points, "calibration", best_plain=float(points[:, 0].min()), tol=2.0)
    assert picked in front


# study_points


def two_objective_study() -> optuna.Study:
    study = optuna.create_study(directions=["minimize", "minimize"])
    values = iter([(0.5, 0.2), (0.4, 0.3), (0.6, 0.1), (0.7, 0.4), (0.4, 0.3)])
    study.optimize(lambda trial: next(values), n_trials=5)
    study.add_trial(create_trial(state=TrialState.FAIL))
    study.add_trial(create_trial(values=[0.3, 0.9]))
    return study


def test_study_points():
    study = two_objective_study()
    points = study_points(study)
    assert points.tolist() == [[0.5, 0.2], [0.4, 0.3], [0.6, 0.1], [0.7, 0.4], [0.4, 0.3], [0.3, 0.9]]
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    numbers = [t.number for t in complete]
    # the same front as Optuna's, and the "nll" rule picks kcal.sweep.selection's trial
    assert sorted(numbers[i] for i in pareto_front(points)) == sorted(t.number for t in study.best_trials)
    assert numbers[choose(points, "nll")] == selection.selected(study).number


def test_study_points_needs_two_minimised_objectives():
    with pytest.raises(ValueError):
        study_points(optuna.create_study(directions=["minimize", "maximize"]))
    with pytest.raises(ValueError):
        study_points(optuna.create_study())
