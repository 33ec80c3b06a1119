"""kcal.publish.questions.worker_count: the rules that compare runs of the protocol on N workers with the runs on 1 or 2, at their
boundaries, on synthetic runs (the published heart-disease rows, shifted); the verdict over whole runs; the README
against the published verdicts."""

import math
from pathlib import Path

import pandas as pd
import pytest

from kcal.publish import verdicts as V
from kcal.publish.protocol_runs import Runs
from kcal.publish.protocol_spread import PUBLISHED, prediction_half_width
from kcal.publish.questions.worker_count import (
    MARGIN,
    NOT_COMPARED,
    OUTSIDE,
    README_ADVICE,
    README_FIX,
    README_LIMIT,
    WITHIN,
    DatasetComparison,
    advice,
    agreement,
    agreement_check,
    cell_checks,
    claim_outcomes,
    compare,
    compare_dataset,
    comparisons,
    mean_half_width,
    readme_must_say,
    selections,
    setting,
    shown_fixes,
    side_bound,
    trials_summary,
)
from kcal.publish.report import data_dir
from kcal.publish.trials import KEY_COLUMNS

REPO = Path(__file__).resolve().parents[2]
EPS = 1e-6


@pytest.fixture(scope="module")
def heart():
    published = pd.read_csv(data_dir("full") / "results.csv")
    return published[published["dataset"] == "heart-disease"].reset_index(drop=True)


def test_the_interval_for_one_more_run_is_the_protocol_spreads_and_narrows_with_more_runs():
    for sd, runs in ((0.04, 5), (0.1, 3), (0.0, 4)):
        assert mean_half_width(sd, runs) == pytest.approx(prediction_half_width(sd, runs, 0.0, 0.0))
    assert mean_half_width(0.04, 5, 5) == pytest.approx(mean_half_width(0.04, 5) * math.sqrt(0.4 / 1.2))
    with pytest.raises(ValueError):
        mean_half_width(0.04, 5, 0)


def test_the_selection_score_at_the_edge_of_the_interval_is_indistinguishable_and_beyond_it_is_not():
    ref = [0.61, 0.72, 0.65, 0.68, 0.64]
    base = compare(ref, [0.66])
    low, high = base.mean - base.half_one, base.mean + base.half_one
    at = compare(ref, [low])
    assert at.outcome == V.INDISTINGUISHABLE and at.each == (WITHIN,)
    assert compare(ref, [high]).outcome == V.INDISTINGUISHABLE
    below, above = compare(ref, [low - EPS]), compare(ref, [high + EPS])
    assert (below.outcome, below.each, above.outcome, above.each) == (
        V.WORSE,
        (OUTSIDE,),
        V.BETTER,
        (OUTSIDE,),
    )
    # lower is better: the same values, the other way round
    assert compare(ref, [low - EPS], higher_is_better=False).outcome == V.BETTER
    # five worker runs: their mean is held to the narrower interval, each run to the one-run interval
    five = compare(ref, [low + EPS] * 5)
    assert five.outcome == V.WORSE and five.each == (WITHIN,) * 5 and five.half < five.half_one


def test_a_constant_reference_allows_only_its_value():
    assert compare([1.0] * 5, [1.0]).outcome == V.INDISTINGUISHABLE
    assert compare([1.0] * 5, [1.0 - EPS]).outcome == V.WORSE
    with pytest.raises(ValueError):
        compare([1.0], [1.0])


def test_near_the_best_counts_a_score_exactly_at_the_margin():
    bar = 0.7
    trials = pd.DataFrame({"state": ["complete"] * 4 + ["fail"], "value": [bar, bar - MARGIN, bar - MARGIN - EPS,
                                                                            0.5, 0.9]})  # fmt: skip
    mean, share, n = trials_summary(trials, bar)
    assert (
        n == 4
        and share == pytest.approx(0.5)
        and mean == pytest.approx((3 * bar - 2 * MARGIN - EPS + 0.5) / 4)
    )
    assert math.isnan(trials_summary(trials[trials["state"] == "fail"], bar)[0])


def _runs(heart, shifts: dict[str, float]) -> dict[str, pd.DataFrame]:
    return {name: heart.assign(mean=heart["mean"] * (1 + s)) for name, s in shifts.items()}


def test_a_cell_is_judged_by_its_metrics_direction_at_the_edge_of_its_interval(heart):
    reference = _runs(heart, {PUBLISHED: 0.0, "sampler_seed=1": 0.02, "sampler_seed=2": -0.02})
    same = cell_checks(reference, {"w": heart})
    assert len(same) == 64 and set(same["verdict"]) == {WITHIN}  # 2 tables x 4 rows x 4 metrics x 2 flavours
    cell = same[(same["flavour"] == "exact") & (same["table"] == "classification") & (same["row"] == "XE")
                & (same["metric"] == "acc")].iloc[0]  # fmt: skip
    is_acc = (heart["objective"] == "xe") & (heart["recalibrator"] == "none") & (heart["flavour"] == "exact") & (
        heart["metric"] == "acc")  # fmt: skip
    for offset, outcome in ((-cell["half"] + EPS, V.INDISTINGUISHABLE), (-cell["half"] - EPS, V.WORSE),
                            (cell["half"] + EPS, V.BETTER)):  # fmt: skip
        moved = heart.copy()
        moved.loc[is_acc, "mean"] = (cell["mean"] + offset) / 100  # accuracy is displayed in %
        checks = cell_checks(reference, {"w": moved})
        assert list(checks[checks["outcome"] != V.INDISTINGUISHABLE]["outcome"]) == (
            [] if outcome == V.INDISTINGUISHABLE else [outcome]
        )
    ece = heart.assign(mean=heart["mean"].where(heart["metric"] != "ece", heart["mean"] * 3))
    assert set(cell_checks(reference, {"w": ece}).query("metric == 'ece'")["outcome"]) == {V.WORSE}


def test_chance_allows_a_few_cells_each_side():
    assert side_bound(0) == 0 and side_bound(64) == 4
    assert side_bound(64 * 5) > side_bound(64)


def _cells(worse: int, better: int, n: int = 64) -> pd.DataFrame:
    return pd.DataFrame({"outcome": [V.WORSE] * worse + [V.BETTER] * better
                         + [V.INDISTINGUISHABLE] * (n - worse - better)})  # fmt: skip


def _studies_scored(studies: pd.DataFrame, score: float) -> pd.DataFrame:
    return studies.assign(best_value=score)


def test_the_verdict_is_over_whole_runs_not_a_count_of_cells(heart):
    """Five worker runs whose best validation scores all lie below the five reference runs' are *worse* (exact
    permutation p 2/252); the same runs with their scores interleaved are *inconclusive* with the runs the margin
    needs; a dataset with fewer than 2 reference runs is not compared."""
    studies = pd.read_csv(data_dir("full") / "studies.csv")
    studies = studies[studies["dataset"] == "heart-disease"]
    empty = pd.DataFrame(columns=KEY_COLUMNS)
    names = [PUBLISHED] + [f"sampler_seed={k}" for k in range(1, 5)]
    ref = Runs({n: heart for n in names}, {n: _studies_scored(studies, 0.70 + 0.01 * i) for i, n in enumerate(names)},
               {n: empty for n in names})  # fmt: skip
    low = Runs({f"w{i}": heart for i in range(5)}, {f"w{i}": _studies_scored(studies, 0.60 + 0.01 * i) for i in range(5)},
               {f"w{i}": empty for i in range(5)})  # fmt: skip
    found = compare_dataset(ref, low, "heart-disease", "jobs=8")
    assert found.verdict == V.WORSE and found.case.best_test.p == pytest.approx(2 / 252)
    mixed = Runs(
        low.results, {f"w{i}": _studies_scored(studies, 0.705 + 0.01 * i) for i in range(5)}, low.trials
    )
    found = compare_dataset(ref, mixed, "heart-disease", "jobs=8")
    assert found.verdict.startswith("inconclusive: needs ") and found.verdict.endswith(" runs")
    assert found.case.needs > 5


def test_claims_agree_where_the_outcomes_are_equal(heart):
    a = claim_outcomes(heart, "heart-disease")
    assert {c for c, _ in a} == {"C1", "C2", "C3", "C4a", "C4b"} and len(a) == 10
    assert claim_outcomes(heart, "adult") == {}
    flipped = {k: (V.WORSE if v != V.WORSE else V.BETTER) for k, v in a.items()}
    assert agreement(a, a) == 1.0 and agreement(a, flipped) == 0.0 and math.isnan(agreement(a, {}))
    # reference runs that always agree: a worker run that disagrees once is worse, one that agrees is not
    one_off = dict(a)
    key = next(iter(a))
    one_off[key] = V.WORSE if a[key] != V.WORSE else V.BETTER
    assert agreement_check([a, a, a], [a]).outcome == V.INDISTINGUISHABLE
    check = agreement_check([a, a, a], [one_off])
    assert check.outcome == V.WORSE and check.workers == (pytest.approx(0.9),)
    with pytest.raises(ValueError):
        agreement_check([a], [a])


def test_the_readme_still_gives_the_advice_the_section_quotes():
    assert README_ADVICE in " ".join((REPO / "README.md").read_text().split())


def test_a_dataset_with_one_reference_run_is_not_compared(heart):
    studies = pd.read_csv(data_dir("full") / "studies.csv")
    runs = Runs({PUBLISHED: heart}, {PUBLISHED: studies}, {PUBLISHED: pd.DataFrame(columns=KEY_COLUMNS)})
    found = compare_dataset(runs, runs, "heart-disease", "jobs=8")
    assert found.verdict == NOT_COMPARED and found.objectives == [] and found.cells.empty


def test_the_readme_states_the_deterministic_engine_not_the_asynchronous_modes_precaution():
    """The worker-count verdicts measured the asynchronous mode; a reproduction's numbers no longer depend on its
    workers (tests/orchestrate/test_determinism.py), so the README states that and drops the JOBS=2 precaution."""
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "write the same `results.csv` byte for byte (`tests/orchestrate/test_determinism.py`)" in readme
    assert "JOBS=2" not in readme and "as a precaution" not in readme


def test_the_readme_follows_the_published_worker_verdicts():
    """Over whole runs no dataset is *worse* at 8 workers (issue 66): the README states no limit on the workers;
    were one *worse*, it would have to state the limit (or the fix), and the section says what the runs measured."""
    found = comparisons(data_dir("full"))
    readme = " ".join((REPO / "README.md").read_text().split())
    must = readme_must_say(found)
    assert must is None or must in readme
    if must is None:
        assert README_LIMIT not in readme and README_FIX not in readme
    assert "the verdicts describe the asynchronous mode and its history" in advice(found)


def test_the_readme_is_told_the_limit_until_a_fix_is_shown():
    def case(label, dataset, verdict, runs):
        return DatasetComparison(dataset, label, [f"s{k}" for k in range(runs)], [], [], pd.DataFrame(), None, [],
                                 verdict)  # fmt: skip

    worse = [
        case("jobs=8", "heart-disease", V.WORSE, 5),
        case("jobs=8", "breast-cancer", V.INDISTINGUISHABLE, 5),
    ]
    assert readme_must_say(worse) == README_LIMIT
    assert readme_must_say([case("jobs=8", "heart-disease", V.WORSE, 4)]) is None  # provisional
    fix = "jobs=8,startup_by=started"
    going = [
        case(fix, "heart-disease", V.INDISTINGUISHABLE, 4),
        case(fix, "breast-cancer", V.INDISTINGUISHABLE, 5),
    ]
    assert readme_must_say(worse + going) == README_LIMIT
    shown = [case(fix, "heart-disease", V.INDISTINGUISHABLE, 5), case(fix, "breast-cancer", V.BETTER, 5)]
    assert shown_fixes(worse + shown) == [fix] and readme_must_say(worse + shown) == README_FIX
    said = advice(worse + shown)
    assert f'It is shown: the README says "{README_FIX}".' in said and README_LIMIT not in said
    assert README_LIMIT in advice(worse + going) and "provisional, 4 of 5 runs in" in advice(worse + going)
    failed = [case(fix, "heart-disease", V.WORSE, 5), case(fix, "breast-cancer", V.INDISTINGUISHABLE, 5)]
    assert readme_must_say(worse + failed) == README_LIMIT


def test_the_worse_cells_are_traced_to_the_selected_configurations_they_come_from():
    rows = [("s1", "XE", "worse"), ("s1", "XE", "worse"), ("s1", "XE + MMD", "indistinguishable"),
            ("s2", "XE", "better"), ("s2", "XE + MMD", "worse")]  # fmt: skip
    cells = pd.DataFrame(rows, columns=["run", "row", "outcome"])
    assert selections(cells, V.WORSE) == "2 of the 4 selected configurations (s1 XE 2, s2 XE + MMD 1)"
    assert selections(cells[cells["outcome"] != V.WORSE], V.WORSE) == "0 of the 2 selected configurations"


def test_a_fix_of_the_sampler_is_named_by_its_setting():
    assert setting("jobs=8") == "8 workers"
    assert setting("jobs=16,startup_by=started") == "16 workers with startup_by=started"


def test_the_cell_rule_on_the_reference_runs_themselves(heart):
    """Rule 4: each reference run against the others. Four runs within 1 % of each other flag none; one run with
    every ECE tripled is worse on its ECE cells and counts as one flagged run (its cells then widen the others'
    intervals, so they are not flagged)."""
    from kcal.publish.questions.worker_count import flagged_runs, reference_null

    close = _runs(
        heart, {PUBLISHED: 0.0, "sampler_seed=1": 0.01, "sampler_seed=2": -0.01, "sampler_seed=3": 0.005}
    )
    n, worse, better, flagged = reference_null(close)
    assert (n, worse, better, flagged) == (4 * 64, 0, 0, 0)
    far = dict(
        close,
        **{
            "sampler_seed=3": heart.assign(
                mean=heart["mean"].where(heart["metric"] != "ece", heart["mean"] * 3)
            )
        },
    )
    n, worse, better, flagged = reference_null(far)
    assert n == 4 * 64 and flagged == 1 and worse == 16  # its 16 ECE cells: 2 tables x 4 rows x 2 flavours
    assert reference_null(dict(list(close.items())[:2])) == (0, 0, 0, 0)  # an interval needs 2 other runs
    cells = cell_checks(close, {"a": far["sampler_seed=3"], "b": heart})
    assert flagged_runs(cells) == 1


def test_the_summary_sets_the_worker_runs_flags_beside_the_reference_runs(heart):
    from kcal.publish.questions.worker_count import summary_line

    studies = pd.read_csv(data_dir("full") / "studies.csv")
    ref_results = _runs(heart, {PUBLISHED: 0.0, "sampler_seed=1": 0.01, "sampler_seed=2": -0.01})
    empty = pd.DataFrame(columns=KEY_COLUMNS)
    ref = Runs(ref_results, {n: studies for n in ref_results}, {n: empty for n in ref_results})
    wrk = Runs({"w": heart}, {"w": studies}, {"w": empty})
    from kcal.publish.questions.worker_count import details_block

    line = details_block([compare_dataset(ref, wrk, "heart-disease", "jobs=8")])
    assert summary_line(compare_dataset(ref, wrk, "heart-disease", "jobs=8")).startswith(
        "**heart-disease at 8 workers: inconclusive: needs "
    )
    assert ("runs with more worse cells than chance allows one run: 0 of 1 at 8 workers, 0 of 3 at 1-2 workers "
            "(the same rule on each against the other 2: 0 worse, 0 better of 192)") in line  # fmt: skip


def test_the_selected_learning_rates_are_set_side_by_side_with_those_of_the_worse_cells(heart):
    """A lead, not a rule: the selected configurations' learning rates of both sides, and those of the selections
    whose cells came out worse (here: the worker run's XE, with every ECE tripled)."""
    import json

    from kcal.publish.questions.worker_count import learning_rates, lr_text

    studies = pd.read_csv(data_dir("full") / "studies.csv")

    def with_lr(lr: float) -> pd.DataFrame:
        return studies.assign(best_params=json.dumps({"trainer.lr": lr, "trainer.batch_size": 32}))

    ref_results = _runs(heart, {PUBLISHED: 0.0, "sampler_seed=1": 0.01, "sampler_seed=2": -0.01})
    empty = pd.DataFrame(columns=KEY_COLUMNS)
    ref = Runs(ref_results, {PUBLISHED: with_lr(0.001), "sampler_seed=1": with_lr(0.002),
                             "sampler_seed=2": with_lr(0.003)}, {n: empty for n in ref_results})  # fmt: skip
    worse = heart.assign(
        mean=heart["mean"].where(
            ~((heart["metric"] == "ece") & (heart["objective"] == "xe")), heart["mean"] * 3
        )
    )
    wrk = Runs({"w": worse}, {"w": with_lr(0.05)}, {"w": empty})
    assert learning_rates(wrk, ["w"], "heart-disease") == {
        ("w", k): 0.05 for k in ("XE", "XE + MMCE", "XE + ECE KDE", "XE + MMD")
    }
    text = lr_text(compare_dataset(ref, wrk, "heart-disease", "jobs=8"))
    assert text == ("Learning rates of the selected configurations (`trainer.lr`, every objective): median 0.002 over "
                    "12 selections at 1-2 workers, 0.05 over 4 at 8 workers; the selections with worse cells: w XE 0.05")  # fmt: skip
    assert (
        learning_rates(Runs({}, {"x": studies.drop(columns="best_params")}, {}), ["x"], "heart-disease") == {}
    )
