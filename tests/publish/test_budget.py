"""kcal.publish.budget: Dodge et al.'s expected best score after k trials, against drawing k trials by brute force."""

import itertools

import numpy as np
import pytest

from kcal.publish.budget import (
    PLATEAU_SHARE,
    budget_curve,
    expected_best,
    expected_best_with_std,
    reached_plateau,
)


@pytest.mark.parametrize("maximize", [True, False])
def test_expected_best_is_the_mean_over_every_draw_of_k_trials(maximize):
    """Every one of the n^k ordered draws (with replacement) of k of n scores, ties included: the mean and the
    standard deviation of their best equal the formula's, to rounding."""
    values = [0.3, 0.7, 0.7, 0.1, 0.55]
    best = max if maximize else min
    for k in (1, 2, 3, 4):
        bests = np.array([best(draw) for draw in itertools.product(values, repeat=k)])
        mean, std = expected_best_with_std(values, k, maximize)
        np.testing.assert_allclose(mean, [bests.mean()], rtol=1e-12)
        np.testing.assert_allclose(std, [bests.std()], rtol=1e-9, atol=1e-12)


def test_expected_best_against_a_simulation_of_many_trials():
    """100 scores, k up to 100: the formula lies within 4 standard errors of 20000 simulated sweeps."""
    rng = np.random.default_rng(0)
    values = rng.normal(0.8, 0.05, size=100)
    curve = budget_curve(values)
    for k in (1, 5, 30, 100):
        sims = rng.choice(values, size=(20000, k), replace=True).max(axis=1)
        se = sims.std() / np.sqrt(sims.size)
        assert abs(curve["mean"][k - 1] - sims.mean()) < 4 * se + 1e-12, k
    assert curve["k"][0] == 1 and curve["k"][-1] == 100
    assert np.all(np.diff(curve["mean"]) >= -1e-12)  # more trials never make the expected best worse
    assert curve["mean"][0] == pytest.approx(values.mean()) and curve["mean"][-1] <= values.max()


def test_minimised_scores_and_bad_input():
    values = [1.0, 0.5, 2.0]
    assert expected_best(values, 1, maximize=False)[0] == pytest.approx(np.mean(values))
    assert expected_best(values, 50, maximize=False)[0] == pytest.approx(0.5, abs=1e-6)
    with pytest.raises(ValueError, match="at least one"):
        expected_best([], 1)
    with pytest.raises(ValueError, match="finite"):
        expected_best([0.1, float("nan")], 1)
    with pytest.raises(ValueError, match="k must be >= 1"):
        expected_best([0.1], 0)


def test_plateau_rule():
    """Scores with one lucky outlier keep gaining late (no plateau); many scores near the best do not."""
    flat = [0.80] * 40 + [0.81] * 60
    reached, late, total = reached_plateau(flat)
    assert reached and late <= PLATEAU_SHARE * total
    lucky = [0.5] * 99 + [0.9]
    reached, late, total = reached_plateau(lucky)
    assert not reached and late > PLATEAU_SHARE * total > 0
    assert reached_plateau([0.3] * 10) == (True, 0.0, 0.0)
    # minimised: the gain is counted positive
    reached, late, total = reached_plateau([2.0] * 99 + [1.0], maximize=False)
    assert not reached and total > 0


def test_the_budget_summary_counts_studies_and_names_their_datasets():
    """The report's sentence says which datasets' studies kept trials, so that "100 trials are enough" is read
    of those datasets only; a study whose late trials still gain is counted as not reaching the plateau."""
    import pandas as pd

    from kcal.publish.report_tables import budget_summary

    def study(dataset, objective, values):
        return pd.DataFrame({"dataset": dataset, "objective": objective, "state": "complete", "value": values,
                             "direction": "maximize"})  # fmt: skip

    flat = [0.5, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    rising = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    runs = {"published": pd.concat([study("adult", "xe", flat), study("crime", "nll", rising)]),
            "sampler_seed=1": study("crime", "nll", flat)}  # fmt: skip
    text = budget_summary(runs)
    assert text.startswith(
        "2 of the 3 studies with kept trials (2 runs of the protocol; adult, crime) reached"
    )
    assert "(crime nll published)" in text
