"""kcal.publish.protocol_spread (the replicates' spread, its verdict rule, claims per replicate) and
kcal.publish.questions.selection_bootstrap (the one-run estimate), on synthetic replicates of a published dataset."""

import math

import numpy as np
import pandas as pd
import pytest

from kcal.publish.answer import spread_moves
from kcal.publish.protocol_spread import (
    BEYOND,
    PUBLISHED,
    UNCERTAIN,
    WITHIN,
    chance_range,
    claim_counts,
    counts,
    old_protocol_verdict,
    prediction_half_width,
    prediction_verdict,
    sd_interval,
    spread_frame,
    spread_markdown,
)
from kcal.publish.questions.selection_bootstrap import (
    bootstrap_selected,
    passes,
    predicted_sd,
    trial_metric_key,
)
from kcal.publish.report import data_dir

SHIFTS = {"sampler_seed=1": 0.01, "sampler_seed=2": -0.02}


@pytest.fixture(scope="module")
def replicates():
    published = pd.read_csv(data_dir("full") / "results.csv")
    published = published[published["dataset"] == "heart-disease"].reset_index(drop=True)
    out = {PUBLISHED: published}
    for name, shift in SHIFTS.items():
        out[name] = published.assign(mean=published["mean"] + shift)
    return out


def test_spread_of_each_cell_is_the_replicates_sd(replicates):
    spread = spread_frame(replicates)
    assert set(spread["dataset"]) == {"heart-disease"} and set(spread["replicates"]) == {3}
    assert set(spread["flavour"]) == {"exact", "official"}
    row = spread[(spread["flavour"] == "exact") & (spread["row"] == "XE") & (spread["metric"] == "ece")].iloc[
        0
    ]
    pub = replicates[PUBLISHED]
    base = pub[(pub["objective"] == "xe") & (pub["recalibrator"] == "none") & (pub["flavour"] == "exact")
               & (pub["metric"] == "ece")]["mean"].iloc[0]  # fmt: skip
    expected = np.std([base, base + 0.01, base - 0.02], ddof=1)
    assert row["sd"] == pytest.approx(expected)
    assert row["sd_low"] == pytest.approx(expected * math.sqrt(2 / 7.377758908227871))
    assert row["sd_high"] == pytest.approx(expected * math.sqrt(2 / 0.05063561596857975))
    assert row["ratio"] == pytest.approx(expected / row["seed_se"])
    assert row["run_mean"] == pytest.approx(base - 0.01 / 3)
    assert row["seed_verdict"] == "definition differs" and row["protocol_verdict"] == "definition differs"
    acc = spread[(spread["flavour"] == "exact") & (spread["row"] == "XE") & (spread["metric"] == "acc")
                 & (spread["table"] == "classification")].iloc[0]  # fmt: skip
    seed_rms = math.sqrt(np.mean([acc["seed_se"] ** 2] * 3))  # the shifted copies keep the published SE
    half = 4.302652729911275 * math.sqrt(acc["sd"] ** 2 * (1 + 1 / 3) + max(0.0, 0.196**2 - seed_rms**2))
    assert acc["half_width"] == pytest.approx(half, rel=1e-6)
    assert acc["protocol_verdict"] == (WITHIN if abs(55.904 - acc["run_mean"]) <= half else BEYOND)
    text = spread_markdown(spread)
    assert text.count("\n") == len(spread) + 1 and "heart-disease" in text
    c = counts(spread)
    assert (
        c["cells"] == len(spread) and c["old_beyond"] <= c["seed_differs"] and c["new_beyond"] <= c["tested"]
    )
    assert c["tested"] + c["definition_differs"] == c["with_paper"]
    # a cell with one replicate has no spread
    assert spread_frame({PUBLISHED: replicates[PUBLISHED]}).empty


def test_a_seed_se_that_is_only_rounding_has_no_ratio_and_official_kce_is_not_tested(replicates):
    """A cell whose seeds all gave one number, up to float rounding (the official KCE underflows to ~1e-117 with an
    SE of ~1e-129), has no SD-to-seed-SE ratio (it was 3.3e+12), and the report says how many such cells it leaves
    out; the official KCE is not the paper's number (a scaling in neither the authors' code nor the text)."""
    pub = replicates[PUBLISHED]
    cell = ((pub["objective"] == "xe") & (pub["recalibrator"] == "none") & (pub["flavour"] == "official")
            & (pub["metric"] == "entropy"))  # fmt: skip
    dust = pub.assign(mean=pub["mean"].mask(cell, 7.3e-117), se=pub["se"].mask(cell, 3.7e-129))
    runs = {PUBLISHED: dust, **{n: dust.assign(mean=dust["mean"] + s) for n, s in SHIFTS.items()}}
    spread = spread_frame(runs)
    row = spread[(spread["flavour"] == "official") & (spread["row"] == "XE") & (spread["metric"] == "entropy")
                 & (spread["table"] == "classification")].iloc[0]  # fmt: skip
    assert math.isnan(row["ratio"]) and row["sd"] > 0
    left_out = int(spread["ratio"].isna().sum())
    assert left_out >= 1
    text = spread_moves(spread)
    assert f"Over the {len(spread) - left_out} cells with replicates (both flavours; {left_out} more" in text
    kce = spread[(spread["flavour"] == "official") & (spread["metric"] == "kce")]
    assert len(kce) and set(kce["protocol_verdict"]) == {"definition differs"}


def test_old_protocol_verdict_rule():
    assert old_protocol_verdict(0.04, 0.02, 0.01, 0.019, 0.021) == WITHIN  # 0.04 <= 2 sqrt(0.0005) = 0.0447
    assert old_protocol_verdict(0.06, 0.02, 0.01, 0.019, 0.021) == BEYOND
    assert old_protocol_verdict(0.06, 0.02, 0.01, 0.01, 0.2) == BEYOND + UNCERTAIN  # within at the upper end
    assert old_protocol_verdict(0.03, 0.02, float("nan"), float("nan"), float("nan")) == WITHIN


def test_prediction_interval_at_its_boundaries():
    """t_{R-1} sqrt(sd^2 (1 + 1/R) + max(0, se_paper^2 - se_ours^2)): the paper's seed SE enters only by how much
    it exceeds ours (our SD already holds our seed noise)."""
    t2, t4 = 4.302652729911275, 2.7764451051977987
    assert prediction_half_width(0.1, 3, 0.0, 0.05) == pytest.approx(t2 * 0.1 * math.sqrt(4 / 3))
    assert prediction_half_width(0.1, 5, 0.03, 0.05) == pytest.approx(
        t4 * 0.1 * math.sqrt(6 / 5)
    )  # se_paper < ours
    assert prediction_half_width(0.1, 5, 0.05, 0.03) == pytest.approx(
        t4 * math.sqrt(0.012 + 0.0016)
    )  # the excess
    assert prediction_half_width(0.1, 5, 0.05, 0.03, full_paper_se=True) == pytest.approx(
        t4 * math.sqrt(0.012 + 0.0025)
    )
    assert prediction_half_width(0.1, 3, float("nan"), 0.05) == pytest.approx(t2 * 0.1 * math.sqrt(4 / 3))
    h = prediction_half_width(0.1, 3, 0.0, 0.0)
    assert prediction_verdict(1.0 + h, 1.0, h) == WITHIN and prediction_verdict(1.0 - h, 1.0, h) == WITHIN
    assert (
        prediction_verdict(1.0 + h * 1.0001, 1.0, h) == BEYOND
        and prediction_verdict(1.0 - h * 1.0001, 1.0, h) == BEYOND
    )
    # the old rule calls "differs" what the prediction interval for R = 3 keeps: 2 sqrt(sd^2 + se^2) = 0.2 < 0.497
    assert (
        old_protocol_verdict(0.3, 0.1, 0.0, 0.1, 0.1) == BEYOND and prediction_verdict(1.3, 1.0, h) == WITHIN
    )


def test_prediction_interval_covers_one_more_run_95_percent_of_the_time():
    """Simulated protocols: R runs and one more from the same normal; the rule (equal seed noise, so no paper
    excess) calls the new run "differs" in ALPHA = 5 % of draws."""
    rng = np.random.default_rng(1)
    for r in (3, 5):
        runs = rng.normal(0.0, 1.0, size=(20000, r + 1))
        sd = np.std(runs[:, :r], axis=1, ddof=1)
        half = np.array([prediction_half_width(s, r, 0.1, 0.1) for s in sd])
        outside = np.abs(runs[:, r] - runs[:, :r].mean(axis=1)) > half
        assert 0.044 <= outside.mean() <= 0.056, (r, outside.mean())


def test_chance_alone_gives_alpha_n_with_a_binomial_range():
    expected, low, high = chance_range(80)
    assert expected == pytest.approx(4.0) and (low, high) == (1, 8)
    assert chance_range(0) == (0.0, 0, 0)
    expected, low, high = chance_range(36)
    assert expected == pytest.approx(1.8) and low == 0 and high == 5


def test_sd_interval_covers_the_true_sd_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    for n in (3, 5):
        samples = rng.normal(0.0, 1.0, size=(4000, n))
        cover = [lo <= 1.0 <= hi for lo, hi in (sd_interval(float(np.std(s, ddof=1)), n) for s in samples)]
        assert 0.935 <= np.mean(cover) <= 0.965, (n, np.mean(cover))
    assert all(math.isnan(v) for v in sd_interval(0.1, 1))


def test_claims_are_counted_per_replicate(replicates):
    # replicate 2 lowers every XE + MMD number: C2/C3 (lower ECE / entropy) may then hold where they did not
    changed = dict(replicates)
    r = replicates[PUBLISHED].copy()
    r.loc[r["objective"] == "xe_mmd", "mean"] -= 0.5
    changed["sampler_seed=2"] = r
    table = claim_counts(changed)
    c2 = table[(table["claim"] == "C2") & (table["flavour"] == "exact")].iloc[0]
    assert c2["dataset"] == "heart-disease" and c2["replicates"] == 3
    outcomes = {"better", "equivalent", "worse", "inconclusive"}  # kcal.publish.verdicts.CLAIM_OUTCOMES
    assert c2["holds"] >= 1 and c2["outcome"] in outcomes
    assert set(table["outcome"]) - {"—"} <= outcomes


def test_trial_metric_keys():
    assert trial_metric_key("exact", "none", "ece") == "test/ece"
    assert trial_metric_key("official", "post-hoc", "nll") == "official/test_recal/nll"


def test_bootstrap_selects_the_best_score_of_each_resample():
    scores, metric = [0.1, 0.9, 0.5], [10.0, 20.0, 30.0]
    picked = bootstrap_selected(scores, metric, maximize=True, n_boot=500, seed=1)
    # the best trial (0.9) is in a resample of 3 with probability 1 - (2/3)^3 = 0.704
    assert set(picked) <= {10.0, 20.0, 30.0} and abs((picked == 20.0).mean() - (1 - (2 / 3) ** 3)) < 0.06
    assert set(bootstrap_selected(scores, metric, maximize=False, n_boot=200)) <= {10.0, 20.0, 30.0}
    with pytest.raises(ValueError, match="one value per trial"):
        bootstrap_selected([0.1], [1.0, 2.0], True)


def test_predicted_sd_in_simulated_protocol_runs_underestimates_and_the_rule_rejects_it():
    """An idealised world: configurations with means mu, validation and test noise; a protocol run draws 100
    configurations, selects on validation and publishes a 50-seed mean. The one-run estimate, averaged over 20
    runs, comes out at 0.3-0.7 of the spread measured over 300 simulated runs (the bootstrap of a maximum is known
    to be biased low: most resamples keep the best trial), and the rule fixed in advance rejects such estimates;
    an estimate of the right size passes it."""
    rng = np.random.default_rng(0)
    n_trials, n_seeds, seed_sd = 100, 50, 0.02

    def run():
        mu = rng.normal(0.8, 0.03, size=n_trials)
        score = mu + rng.normal(0, 0.01, size=n_trials)
        test = mu + rng.normal(0, seed_sd, size=n_trials)
        best = int(np.argmax(score))
        return mu[best] + rng.normal(0, seed_sd / math.sqrt(n_seeds)), score, test

    measured = float(np.std([run()[0] for _ in range(300)], ddof=1))
    predictions = []
    for _ in range(20):
        _, score, test = run()
        predictions.append(
            predicted_sd(score, test, True, seed_sd / math.sqrt(n_seeds), n_seeds, n_boot=1000)
        )
    ratio = float(np.mean(predictions)) / measured
    assert 0.3 < ratio < 0.7, (ratio, measured)
    lo, hi = sd_interval(measured, 5)
    cells = pd.DataFrame({"predicted": predictions, "sd": measured, "sd_low": lo, "sd_high": hi})
    ok, coverage, median_ratio = passes(cells)
    assert not ok and median_ratio < 1 / 1.5
    assert passes(cells.assign(predicted=measured * rng.uniform(0.8, 1.2, size=len(cells))))[0]


def test_the_one_run_estimate_is_compared_with_the_replicates_cell_by_cell(replicates):
    from kcal.publish.questions.selection_bootstrap import estimate_frame, estimate_markdown

    rng = np.random.default_rng(3)
    trials = {}
    for name in (PUBLISHED, "sampler_seed=1"):
        n = 40
        trials[name] = pd.DataFrame({
            "dataset": "heart-disease", "objective": "xe", "state": "complete", "direction": "maximize",
            "value": rng.uniform(0.5, 0.7, n), "test/acc": rng.uniform(0.5, 0.65, n),
        })  # fmt: skip
    spread = spread_frame(replicates)
    est = estimate_frame(spread, replicates, trials, n_boot=500)
    cell = est[(est["flavour"] == "exact") & (est["row"] == "XE") & (est["metric"] == "acc")
               & (est["table"] == "classification")].iloc[0]  # fmt: skip
    assert cell["replicates_with_trials"] == 2
    pub = replicates[PUBLISHED]
    mine = pub[(pub["objective"] == "xe") & (pub["recalibrator"] == "none") & (pub["flavour"] == "exact")
               & (pub["metric"] == "acc")].iloc[0]  # fmt: skip
    by_hand = [
        predicted_sd(t["value"], t["test/acc"], True, mine["se"], int(mine["n"]), 500) * 100
        for t in trials.values()
    ]
    assert cell["predicted"] == pytest.approx(np.median(by_hand))  # accuracy cells are printed in %
    assert set(est["metric"]) == {"acc"} and "ece" not in set(est["metric"])  # only metrics the trials kept
    text = estimate_markdown(est)
    assert (
        text.startswith("Predicted (one study's trials, bootstrap) against measured")
        and "| heart-disease |" in text
    )
    assert "not validated, and not used" in estimate_markdown(est.iloc[0:0])


def test_the_summary_names_the_differing_cells_the_protocol_spread_explains(replicates):
    """A cell that "differs" by the seed SE but lies within the protocol's spread is listed by name in the
    report's summary (per flavour, its tables and the SD's ratio to the seed SE); one beyond it is not."""
    from kcal.publish.protocol_spread import selection_noise, summary_markdown

    spread = spread_frame(replicates)
    noisy = spread.assign(seed_verdict="differs", protocol_verdict=BEYOND)
    pick = (noisy["flavour"] == "exact") & (noisy["row"] == "XE") & (noisy["metric"] == "ece")
    noisy.loc[pick, "protocol_verdict"] = WITHIN + UNCERTAIN
    noisy.loc[pick, "ratio"] = [2.0, 3.0][: int(pick.sum())]
    listed = selection_noise(noisy[noisy["flavour"] == "exact"])
    assert listed == ["heart-disease XE ece (Table 4, Table 5; SD 3.0x the seed SE)"]
    assert selection_noise(noisy[noisy["flavour"] == "official"]) == []
    text = summary_markdown(replicates, noisy)
    assert "within the protocol's spread: heart-disease XE ece (Table 4, Table 5" in text
    assert text.count('"differs" by the seed SE, within the protocol\'s spread: ') == 1


def test_the_summary_counts_runs_and_survivors_per_dataset(replicates):
    """With a dataset replicated fewer times than another (crime's replicates run apart), the summary says how
    many runs each dataset has and counts the surviving "differs" per dataset as well as in all."""
    from kcal.publish.protocol_spread import runs_per_dataset, summary_markdown

    other = {name: frame.assign(dataset="breast-cancer") for name, frame in replicates.items()}
    both = {name: pd.concat([replicates[name], other[name]], ignore_index=True) for name in replicates}
    both["sampler_seed=3"] = replicates["sampler_seed=1"].assign(
        mean=replicates["sampler_seed=1"]["mean"] - 0.03
    )
    assert runs_per_dataset(both) == {"breast-cancer": 3, "heart-disease": 4}
    spread = spread_frame(both).assign(seed_verdict="differs", protocol_verdict=BEYOND)
    spread.loc[spread["dataset"] == "breast-cancer", "protocol_verdict"] = WITHIN
    text = summary_markdown(both, spread)
    assert "breast-cancer (3 runs), heart-disease (4 runs)" in text
    exact = spread[spread["flavour"] == "exact"]
    n_bc, n_hd = (int((exact["dataset"] == d).sum()) for d in ("breast-cancer", "heart-disease"))
    assert (f"per dataset, beyond the protocol's spread of the cells tested: breast-cancer 0 of {n_bc}; "
            f"heart-disease {n_hd} of {n_hd}") in text  # fmt: skip
    assert f"- exact: of {n_bc + n_hd} cells tested, {n_hd} differ beyond the protocol's spread" in text
    expected, low, high = chance_range(n_bc + n_hd)
    assert f"chance alone would give about {expected:.1f} ({low}–{high})" in text


def test_the_summary_shows_the_old_rules_counts_beside_the_new(replicates):
    """For this release: per flavour, the old rule's counts (seed "differs", beyond 2 sqrt(sd^2 + se^2)) next to
    the prediction interval's on the same cells and on the cells it tests."""
    from kcal.publish.protocol_spread import counts_markdown

    spread = spread_frame(replicates)
    c = counts(spread[spread["flavour"] == "official"])
    line = next(x for x in counts_markdown(spread).splitlines() if x.startswith("| official |"))
    expected, low, high = chance_range(c["tested"])
    assert line == (f"| official | {c['cells']} ({c['with_paper']}) | {c['seed_differs']} | {c['old_beyond']} "
                    f"({c['old_certain']}) | {c['new_beyond_of_seed_differs']} | {c['tested']} ({c['definition_differs']}) "
                    f"| {c['new_beyond']} "
                    f"| {expected:.1f} ({low}–{high}) | {c['new_beyond_full_se']} |")  # fmt: skip
    official = spread[spread["flavour"] == "official"]
    assert c["seed_differs"] == int(official["seed_differs"].sum())
    assert c["old_beyond"] == int(
        (official["seed_differs"] & official["old_protocol_verdict"].str.startswith(BEYOND)).sum()
    )
    assert c["new_beyond"] == int((official["protocol_verdict"] == BEYOND).sum())
