"""kcal.publish.verdicts: better / indistinguishable / worse at the boundaries of each rule, and the verdict
words from the counts."""

import math

import pytest

from kcal.publish import verdicts as V

T2, T4 = 4.302652729911275, 2.7764451051977987  # Student's t, 97.5 % quantile, 2 and 4 degrees of freedom


def test_one_run_outcome_at_its_boundary():
    h = V.seed_half_width(0.03, 0.04)  # 2 * 0.05
    assert h == pytest.approx(0.1)
    assert V.outcome(-0.1, h) == V.INDISTINGUISHABLE  # exactly at the half-width: indistinguishable
    assert V.outcome(0.1, h) == V.INDISTINGUISHABLE
    assert V.outcome(-0.1001, h) == V.BETTER and V.outcome(0.1001, h) == V.WORSE
    assert V.outcome(0.0, 0.0) == V.INDISTINGUISHABLE  # a printed tie with printed SEs of 0.000
    assert V.outcome(-0.001, 0.0) == V.BETTER
    assert V.seed_half_width(0.01, float("nan")) == pytest.approx(0.02)  # a missing SE counts as 0
    assert V.seed_half_width(None, 0.0) == 0.0


def test_the_t_quantiles_are_students():
    assert V.t_quantile(3) == pytest.approx(T2) and V.t_quantile(5) == pytest.approx(T4)
    with pytest.raises(ValueError, match="at least 2 runs"):
        V.t_quantile(1)


def test_runs_test_is_a_t_test_of_the_mean_difference_with_the_seed_se_as_floor():
    diffs = [-0.30, -0.20, -0.10]  # mean -0.2, sd 0.1
    mean, h = V.runs_test(diffs, [0.01, 0.01, 0.01])
    assert mean == pytest.approx(-0.2) and h == pytest.approx(T2 * 0.1 / math.sqrt(3))  # 0.248: not better
    assert V.outcome(mean, h) == V.INDISTINGUISHABLE
    # the same mean with a tighter spread: better
    mean, h = V.runs_test([-0.21, -0.20, -0.19], [0.001] * 3)
    assert h == pytest.approx(T2 * 0.01 / math.sqrt(3)) and V.outcome(mean, h) == V.BETTER
    # runs that agree to the digit still carry their seed noise: the floor is the runs' RMS combined seed SE
    mean, h = V.runs_test([-0.02] * 5, [0.01, 0.01, 0.01, 0.01, 0.03])
    floor = math.sqrt((4 * 0.01**2 + 0.03**2) / 5)
    assert h == pytest.approx(T4 * floor / math.sqrt(5)) and V.outcome(mean, h) == V.INDISTINGUISHABLE
    # at the boundary: a mean difference equal to the half-width is indistinguishable, beyond it is not
    sd = 0.1
    edge = V.t_quantile(3) * sd / math.sqrt(3)
    mean, h = V.runs_test([edge - sd, edge, edge + sd], [0.0] * 3)
    assert mean == pytest.approx(h) and V.outcome(mean, h) == V.INDISTINGUISHABLE
    mean, h = V.runs_test([edge - sd + 1e-6, edge + 1e-6, edge + sd + 1e-6], [0.0] * 3)
    assert V.outcome(mean, h) == V.WORSE
    with pytest.raises(ValueError, match="R >= 2"):
        V.runs_test([0.1], [0.01])


def test_outcomes_against_several_rows():
    assert V.combine([V.BETTER, V.BETTER]) == V.BETTER
    assert V.combine([V.BETTER, V.INDISTINGUISHABLE]) == V.INDISTINGUISHABLE
    assert V.combine([V.BETTER, V.WORSE]) == V.WORSE  # worse than one compared row: worse
    assert V.combine([V.INDISTINGUISHABLE, V.WORSE]) == V.WORSE
    with pytest.raises(ValueError):
        V.combine([])


def test_what_holds_for_each_direction():
    assert V.holds("better", V.BETTER) is True and V.holds("better", V.INDISTINGUISHABLE) is None
    assert V.holds("better", V.WORSE) is False
    assert V.holds("not worse", V.INDISTINGUISHABLE) is True and V.holds("not worse", V.WORSE) is False
    with pytest.raises(ValueError, match="better, not worse"):
        V.holds("lower", V.BETTER)


@pytest.mark.parametrize(
    ("held", "failed", "n", "quantifier", "word"),
    [
        (5, 0, 5, "every", V.SUPPORTED),
        (4, 0, 5, "every", V.UNDECIDED),  # one open dataset
        (4, 1, 5, "every", V.NOT_SUPPORTED),  # one failure is enough
        (0, 0, 5, "every", V.UNDECIDED),
        (3, 2, 5, "most", V.SUPPORTED),  # more than half hold
        (2, 0, 5, "most", V.UNDECIDED),  # 2 + 3 open could still make a majority
        (2, 2, 5, "most", V.UNDECIDED),  # 2 + 1 open = 3 > 2.5
        (2, 3, 5, "most", V.NOT_SUPPORTED),  # 2 + 0 open <= 2.5
        (0, 3, 5, "most", V.NOT_SUPPORTED),
        (1, 1, 2, "most", V.NOT_SUPPORTED),  # even n: half is not most
        (1, 0, 2, "most", V.UNDECIDED),
        (2, 0, 2, "most", V.SUPPORTED),
        (0, 0, 0, "every", V.NOT_EVALUATED),
        (0, 0, 0, "most", V.NOT_EVALUATED),
    ],
)
def test_verdict_words_at_each_boundary(held, failed, n, quantifier, word):
    assert V.verdict(held, failed, n, quantifier) == word


def test_verdict_rejects_bad_counts_and_names():
    with pytest.raises(ValueError, match="every, most"):
        V.verdict(1, 0, 2, "all")
    with pytest.raises(ValueError, match="must lie"):
        V.verdict(2, 1, 2, "every")
