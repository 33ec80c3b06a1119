"""kcal.publish.whole_runs: the exact permutation test against a brute-force enumeration and scipy's, Holm
against a hand-worked example, the equivalence test and the runs a margin needs at their boundaries, the rank
score of the cells, and the outcome words."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from kcal.publish import verdicts as V
from kcal.publish import whole_runs as W
from kcal.publish.protocol_spread import PUBLISHED, replicates_of, spread_frame
from kcal.publish.report import data_dir
from kcal.publish.table_cells import load_results


def brute_force_p(a, b) -> float:
    """Every assignment of the pooled runs to the two sides, by labels (each split counted once)."""
    pooled = list(a) + list(b)
    obs = abs(np.mean(b) - np.mean(a))
    seen, hits = set(), 0
    for labels in itertools.permutations([0] * len(a) + [1] * len(b)):
        if labels in seen:
            continue
        seen.add(labels)
        bs = [x for x, k in zip(pooled, labels, strict=True) if k]
        as_ = [x for x, k in zip(pooled, labels, strict=True) if not k]
        hits += abs(np.mean(bs) - np.mean(as_)) >= obs - 1e-12
    return hits / len(seen)


@pytest.mark.parametrize(
    "a, b",
    [([0.61, 0.72, 0.65, 0.68], [0.55, 0.60, 0.70]), ([1.0, 2.0, 3.0], [4.0]), ([0.3, 0.3, 0.5], [0.3, 0.5])],
)
def test_the_permutation_test_is_the_brute_force_enumeration(a, b):
    t = W.permutation_test(a, b)
    assert t.p == pytest.approx(brute_force_p(a, b))
    assert t.splits == math.comb(len(a) + len(b), len(b))
    assert t.diff == pytest.approx(np.mean(b) - np.mean(a))


def test_the_permutation_test_agrees_with_scipys_exact_one():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 5), rng.normal(0.8, 1, 5)

    def diff(x, y):
        return np.mean(y) - np.mean(x)

    for alternative in ("two-sided", "greater", "less"):
        ref = stats.permutation_test((a, b), diff, permutation_type="independent", n_resamples=np.inf,
                                     alternative=alternative)  # fmt: skip
        assert W.permutation_test(a, b, alternative).p == pytest.approx(ref.pvalue)


def test_five_runs_wholly_on_one_side_of_five_give_the_smallest_p():
    """The issue's pruned breast-cancer case: every run of one side below every run of the other."""
    t = W.permutation_test([0.99, 0.995, 1.0, 0.998, 0.997], [0.90, 0.92, 0.95, 0.93, 0.94])
    assert t.p == pytest.approx(2 / 252) and t.diff < 0
    assert W.permutation_test([1.0] * 5, [1.0] * 5).p == 1.0  # all tied: nothing is more extreme than nothing
    with pytest.raises(ValueError):
        W.permutation_test([1.0], [])


def test_holm_against_a_hand_worked_example():
    # sorted 0.005, 0.01, 0.03, 0.04: x4 = 0.02, x3 = 0.03, x2 = 0.06, x1 = 0.04 -> carried up to 0.06
    assert W.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert W.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    out = W.holm([0.01, math.nan, 0.02])  # NaN is not in the family: m = 2
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.02)
    assert W.holm([]) == []


def test_equivalence_needs_both_one_sided_tests_at_the_margin():
    a = [0.700, 0.701, 0.702, 0.703, 0.704]
    close = [0.7005, 0.7015, 0.7025, 0.7035, 0.7045]
    assert W.equivalence_p(a, close, 0.02) == pytest.approx(1 / 252)  # every shifted value beyond every other
    assert W.equivalence_p(a, close, 0.001) > W.ALPHA  # a margin inside the runs' spread: not shown
    far = [x + 0.05 for x in a]
    assert W.equivalence_p(a, far, 0.02) == 1.0
    # the shift is exact: b + margin against a is the one-sided test of T <= -margin
    assert W.equivalence_p(a, close, 0.02) == max(
        W.permutation_test(a, np.array(close) + 0.02, "greater").p,
        W.permutation_test(a, np.array(close) - 0.02, "less").p,
    )


def _decides(n, sd, margin, tests):
    a = W.ALPHA / tests
    se, df = sd * math.sqrt(2 / n), 2 * n - 2
    eq = (stats.t.ppf(1 - a, df) + stats.t.ppf(0.9, df)) * se
    diff = (stats.t.ppf(1 - a / 2, df) + stats.t.ppf(0.8, df)) * se
    return 2 / math.comb(2 * n, n) <= a and max(eq, diff) <= margin


@pytest.mark.parametrize(
    "sd, margin, tests", [(1.0, 0.5, 1), (0.018, 0.002, 4), (0.01, 0.03, 6), (0.0, 0.01, 4)]
)
def test_the_runs_needed_are_the_fewest_that_decide(sd, margin, tests):
    n = W.runs_needed(sd, margin, tests)
    assert _decides(n, sd, margin, tests) and not _decides(n - 1, sd, margin, tests)


def test_the_runs_needed_follow_the_normal_formula_and_the_exact_tests_floor():
    # n = 2 (z_{1-a} + z_{0.9})^2 sd^2 / margin^2 for many runs (equivalence is the stricter of the two)
    z = stats.norm.ppf(0.95) + stats.norm.ppf(0.9)
    assert W.runs_needed(1.0, 0.05) == pytest.approx(2 * z * z / 0.05**2, rel=0.01)
    assert W.runs_needed(0.0, 0.01) == 4  # 2 / C(8, 4) = 0.029; 2 / C(6, 3) = 0.1
    assert W.runs_needed(0.0, 0.01, tests=4) == 5  # 2 / 252 below 0.0125
    assert W.runs_needed(math.nan, 0.01) is None and W.runs_needed(1.0, 1e-6) is None
    assert W.runs_phrase(None) == f"inconclusive: needs more than {W.MAX_NEEDED} runs"
    assert W.runs_phrase(12) == "inconclusive: needs 12 runs"


def test_the_pooled_sd_is_the_within_sides_sd():
    a, b = [1.0, 2.0, 3.0], [5.0, 7.0]
    assert W.pooled_sd(a, b) == pytest.approx(math.sqrt((2.0 + 2.0) / 3))
    assert W.pooled_sd([1.0, 3.0], [9.0]) == pytest.approx(math.sqrt(2.0))
    assert math.isnan(W.pooled_sd([1.0], [2.0]))


def test_a_cells_ranks_are_shares_of_the_others_beaten_ties_half():
    assert W.cell_ranks([1.0, 2.0, 3.0], lower_is_better=True) == [1.0, 0.5, 0.0]
    assert W.cell_ranks([1.0, 2.0, 3.0], lower_is_better=False) == [0.0, 0.5, 1.0]
    assert W.cell_ranks([1.0, 1.0 + 1e-15, 0.0], lower_is_better=False) == [0.75, 0.75, 0.0]
    assert W.cell_ranks([2.0], lower_is_better=True) == [0.5]


def test_the_rank_score_averages_a_runs_ranks_over_its_cells_of_the_dataset():
    cells = pd.DataFrame({
        "run": ["a", "b", "c"] * 2 + ["a", "b"],
        "flavour": "exact", "dataset": ["d"] * 6 + ["e"] * 2, "objective": ["x"] * 3 + ["y"] * 3 + ["x"] * 2,
        "recalibrator": "none", "metric": ["ece"] * 3 + ["acc"] * 3 + ["ece"] * 2,
        "value": [0.1, 0.2, 0.3, 0.9, 0.8, 0.7, 0.5, 0.4], "lower": [True] * 3 + [False] * 3 + [True] * 2,
    })  # fmt: skip
    assert W.rank_scores(cells, "d") == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert W.rank_scores(cells, "e") == {"a": 0.0, "b": 1.0}


def test_the_outcome_words():
    assert W.outcome([-0.1, 0.2], 0.01) == V.WORSE  # a worse difference shown outweighs a better one
    assert W.outcome([0.2], 0.01) == V.BETTER
    assert W.outcome([], 0.05) == V.EQUIVALENT and W.outcome([], 0.051) == V.INCONCLUSIVE


def test_judge_holm_adjusts_over_the_family():
    """One clear difference (2/252) survives Holm over 4 tests (2 cases x 2 quantities): 4 x 0.0079 < 0.05;
    the other case's tests are adjusted upward too."""
    full = {f"f{i}": 0.70 + 0.01 * i for i in range(5)}
    low = {f"v{i}": 0.60 + 0.01 * i for i in range(5)}
    mixed = {f"v{i}": 0.705 + 0.01 * i for i in range(5)}
    ranks = ({k: 0.5 for k in full}, {k: 0.5 for k in low})
    cases = W.judge(
        [W.Case("d1", "s", (full, low), ranks, 0.002), W.Case("d2", "s", (full, mixed), ranks, 0.002)]
    )
    assert cases[0].outcome == V.WORSE and cases[0].adjusted[0] == pytest.approx(4 * 2 / 252)
    assert (
        cases[1].outcome == V.INCONCLUSIVE and cases[1].words == f"inconclusive: needs {cases[1].needs} runs"
    )
    assert cases[1].adjusted[0] >= cases[1].best_test.p


def test_the_paper_as_one_more_run_cannot_be_told_apart_from_five():
    """On the published runs the paper's numbers are ranked among ours; one run against five has a smallest p of
    1/6, so the test says how many runs of ours it would need."""
    data = data_dir("full")
    published = load_results(data / "results.csv")
    from kcal.core import layout

    others = {n: load_results(p / layout.RESULTS_FILE) for n, p in layout.replicate_data_dirs(data).items()}
    replicates = replicates_of(published, others)
    spread = spread_frame(replicates)
    tested = spread[spread["protocol_verdict"].isin(["within the protocol's spread", "differs beyond it"])]
    runs = W.paper_runs(replicates, tested)
    assert {(r.flavour, r.dataset) for r in runs} >= {("exact", "heart-disease"), ("official", "crime")}
    for r in runs:
        assert r.test.p >= 1 / (len(r.ours) + 1) - 1e-12 and PUBLISHED in r.ours
        assert (
            r.needs == math.ceil(len(runs) / W.ALPHA) - 1 and r.words == f"inconclusive: needs {r.needs} runs"
        )
