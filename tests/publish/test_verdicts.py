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


# ---- the claims' rules: margins, equivalence, the paper's effect excluded ----------------------------------
Z95, Z90, Z80 = 1.959963984540054, 1.6448536269514722, 0.8416212335729143


def test_compare_at_each_boundary():
    se, margin = 0.01, 0.03
    assert V.compare(V.Interval(-Z95 * se - 1e-6, se), margin) == V.BETTER  # the 95 % interval below 0
    assert V.compare(V.Interval(-Z95 * se + 1e-6, se), 0.04) == V.EQUIVALENT  # touches 0, within ±δ at 90 %
    assert V.compare(V.Interval(-Z95 * se + 1e-6, se), margin) == V.INCONCLUSIVE  # its 90 % end below -δ
    assert V.compare(V.Interval(Z95 * se + 1e-6, se), margin) == V.WORSE
    # equivalence: the 90 % interval inside (-δ, δ)
    edge = margin - Z90 * se
    assert V.compare(V.Interval(edge - 1e-6, se), margin) == V.EQUIVALENT
    assert V.compare(V.Interval(0.0, 0.03), margin) == V.INCONCLUSIVE  # a wide interval decides nothing
    # over runs: Student's t with R - 1 degrees of freedom
    lo, hi = V.Interval(0.0, 1.0, 2).ci()
    assert hi == pytest.approx(T2) and lo == pytest.approx(-T2)


def test_status_of_a_better_claim_and_of_a_non_inferiority_claim():
    se, margin = 0.01, 0.02
    assert V.status("better", V.Interval(-0.05, se), margin, -0.06) == V.HOLDS
    assert V.status("better", V.Interval(0.05, se), margin, -0.06) == V.CONTRADICTED
    # ours 0.0 ± 0.0196: the paper's gain of 0.056 lies below the interval: excluded; 0.01 does not
    assert V.status("better", V.Interval(0.0, se), margin, -0.056) == V.EXCLUDED
    assert V.status("better", V.Interval(0.0, se), margin, -0.01) == V.OPEN
    assert V.status("better", V.Interval(0.0, se), margin, 0.01) == V.OPEN  # the paper claims no gain there
    assert V.status("better", V.Interval(0.0, se), margin, None) == V.OPEN
    # non-inferiority at δ: the 90 % interval's upper end below δ holds; its lower end above δ contradicts
    assert V.status("not worse", V.Interval(margin - Z90 * se - 1e-6, se), margin, None) == V.HOLDS
    assert V.status("not worse", V.Interval(margin - Z90 * se + 1e-6, se), margin, None) == V.OPEN
    assert V.status("not worse", V.Interval(margin + Z90 * se + 1e-6, se), margin, None) == V.CONTRADICTED
    with pytest.raises(ValueError, match="better, not worse"):
        V.status("lower", V.Interval(0.0, se), margin, None)


def test_statuses_against_several_rows():
    assert V.combine_status([V.HOLDS, V.HOLDS]) == V.HOLDS
    assert V.combine_status([V.HOLDS, V.OPEN]) == V.OPEN
    assert V.combine_status([V.EXCLUDED, V.OPEN]) == V.EXCLUDED
    assert V.combine_status([V.EXCLUDED, V.CONTRADICTED]) == V.CONTRADICTED
    with pytest.raises(ValueError):
        V.combine_status([])


H, C_, X, OP = V.HOLDS, V.CONTRADICTED, V.EXCLUDED, V.OPEN


@pytest.mark.parametrize(
    ("statuses", "quantifier", "word"),
    [
        ([H] * 5, "every", V.SUPPORTED),
        ([H, H, H, H, OP], "every", V.INCONCLUSIVE),
        ([H, H, H, H, X], "every", V.NOT_REPRODUCED),
        ([H, H, H, X, C_], "every", V.CONTRADICTED),  # contradicted comes before excluded
        ([H, H, H, C_, C_], "most", V.SUPPORTED),
        ([H, H, OP, OP, OP], "most", V.INCONCLUSIVE),  # 2 + 3 open could still make a majority
        ([H, H, X, X, X], "most", V.NOT_REPRODUCED),
        ([H, X, C_, C_, C_], "most", V.CONTRADICTED),
        ([H, X, X, C_, C_], "most", V.NOT_REPRODUCED),  # contradicted on 2 < 2.5
        ([], "most", V.NOT_EVALUATED),
    ],
)
def test_claim_verdict_words(statuses, quantifier, word):
    assert V.claim_verdict(statuses, quantifier) == word


def test_claim_verdict_rejects_bad_words():
    with pytest.raises(ValueError, match="every, most"):
        V.claim_verdict([H], "all")
    with pytest.raises(ValueError, match="unknown status"):
        V.claim_verdict(["better"], "every")


def test_mde_and_runs_needed():
    assert V.Interval(0.0, 0.01).mde() == pytest.approx((Z95 + Z80) * 0.01)
    # runs of SD 0.1 to detect 0.1: the first R with (t_{R-1,.975} + t_{R-1,.8}) / sqrt(R) <= 1
    from scipy.stats import t

    need = V.runs_needed(0.1, -0.1)
    assert (t.ppf(0.975, need - 1) + t.ppf(0.8, need - 1)) / math.sqrt(need) <= 1
    assert (t.ppf(0.975, need - 2) + t.ppf(0.8, need - 2)) / math.sqrt(need - 1) > 1
    assert V.runs_needed(0.1, 0.0) is None and V.runs_needed(1.0, 1e-6) is None  # beyond MAX_RUNS


def test_a_margin_is_half_the_median_gain_to_one_digit():
    assert (
        V.margin_from_gains([0.1, 0.05, 0.03, -0.2]) == 0.03
    )  # median of the gains 0.05, half 0.025 -> 0.03
    assert V.margin_from_gains([0.378]) == 0.2
    assert math.isnan(V.margin_from_gains([-0.1, 0.0]))
