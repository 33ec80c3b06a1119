"""The pre-registered equivalence rule of a cheaper protocol (kcal.publish.questions.equivalence), at its boundaries and
on synthetic runs drawn around the published heart-disease cells."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kcal.core.layout import published_data
from kcal.publish.questions import equivalence as E
from kcal.publish.table_cells import TABLES, load_results

LOWER = {m.name: m.lower_is_better for t in TABLES.values() for m in t.metrics}


@pytest.mark.parametrize(
    ("cand", "outcome"),
    [(0.99, E.EQUIVALENT), (1.0, E.UNDECIDED), (1.01, E.DIFFERS), (-1.01, E.DIFFERS), (-0.99, E.EQUIVALENT)],
)
def test_shift_test_at_the_margin(cand, outcome):
    # no spread within groups: the interval is the point, so the margin itself decides
    assert E.shift_test(np.zeros(3), np.full(3, cand)).outcome == outcome


def test_shift_test_needs_two_runs_a_side_and_widens_with_spread():
    assert E.shift_test(np.zeros(3), np.array([0.0])).outcome == E.UNDECIDED
    wide = E.shift_test(np.array([-1.0, 0.0, 1.0]), np.array([-1.0, 0.0, 1.0]))
    assert wide.shift == 0 and wide.outcome == E.UNDECIDED and wide.high > E.MARGIN
    narrow = E.shift_test(np.array([-0.1, 0.0, 0.1, 0.05, -0.05]), np.array([-0.1, 0.0, 0.1, 0.05, -0.05]))
    assert narrow.outcome == E.EQUIVALENT


def _base() -> pd.DataFrame:
    res = load_results(published_data("full") / "results.csv")
    res = res[
        (res["dataset"] == "heart-disease") & res["objective"].isin(["xe", "xe_mmd", "xe_mmce", "xe_kde"])
    ]
    assert len(res) > 50
    return res.reset_index(drop=True)


def _runs(base: pd.DataFrame, n: int, seed: int, shift_sd: float = 0.0) -> dict[str, pd.DataFrame]:
    """n runs: every cell drawn N(mean, sd) with sd 2 % of |mean| (+1e-3), moved ``shift_sd`` SDs the worse way."""
    rng = np.random.default_rng(seed)
    sd = 0.02 * base["mean"].abs() + 1e-3
    worse = np.where([LOWER.get(m, True) for m in base["metric"]], 1.0, -1.0)
    return {f"r{seed}_{k}": base.assign(mean=base["mean"] + sd * (rng.normal(size=len(base)) + shift_sd * worse))
            for k in range(n)}  # fmt: skip


def _studies(runs: dict[str, pd.DataFrame], log_share: float, seed: int) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    return {name: pd.DataFrame({"dataset": "heart-disease", "objective": ["xe_mmd", "xe_mmce", "xe_kde"],
                                "reg_share_at_best": 10.0 ** (log_share + 0.2 * rng.normal(size=3))})
            for name in runs}  # fmt: skip


def test_same_protocol_is_equivalent_and_a_shifted_one_rejected():
    base = _base()
    full, same = _runs(base, 5, 1), _runs(base, 5, 2)
    fs = _studies(full, -3.0, 1)
    ok = E.judge(full, same, fs, _studies(same, -3.0, 2))
    assert [s.outcome for s in ok.shifts] == [E.EQUIVALENT]
    assert ok.cells["passes"] is True and ok.shares["passes"] and ok.claims["passes"] is not False
    worse = _runs(base, 5, 3, shift_sd=3.0)
    bad = E.judge(full, worse, fs, _studies(worse, -3.0, 3))
    assert bad.verdict == E.REJECTED
    assert bad.shifts[0].outcome == E.DIFFERS and bad.shifts[0].shift > 2
    assert bad.cells["differing"] > bad.cells["high"] and bad.cells["passes"] is False


def test_selected_share_moving_decades_is_a_shift():
    base = _base()
    full, same = _runs(base, 5, 1), _runs(base, 5, 2)
    off = E.share_shifts(_studies(full, -3.0, 1), _studies(same, -7.0, 2))
    assert off["shifted"] == off["tested"] == 3 and off["passes"] is False and off["median_shift"] < -3
    assert E.share_shifts(_studies(full, -3.0, 1), {})["passes"] is None  # untested: neither passes nor fails
    j = E.judge(full, same, _studies(full, -3.0, 1), _studies(same, -7.0, 2))
    assert j.verdict == E.REJECTED


def test_untested_count_keeps_the_verdict_undecided():
    base = _base()
    full, same = _runs(base, 5, 1), _runs(base, 5, 2)
    j = E.judge(full, same, {}, {})
    assert j.shares["passes"] is None and j.verdict in (E.UNDECIDED, E.REJECTED)
    assert j.verdict != E.EQUIVALENT


def test_run_scores_orient_higher_is_better_metrics():
    base = _base()
    full = _runs(base, 4, 1)
    acc_down = base.assign(mean=np.where(base["metric"] == "acc", base["mean"] - 0.5, base["mean"]))
    scores = E.run_scores(full, {"c": acc_down})
    assert scores.loc[scores.group == "candidate", "score"].iloc[0] > 0  # lower accuracy counts as worse


def test_cells_equal_to_rounding_count_as_no_spread():
    """breast-cancer's accuracy is 1.0 on every run, up to float rounding (SD ~1e-16): count 1 leaves such a cell
    out as it leaves out an SD of 0, instead of dividing by the rounding, and count 2 does not call it differing."""
    below = np.nextafter(1.0, 0.0)  # 1 - 1.1e-16: a 50-seed mean of 1.0 summed in another order
    base = _base()
    acc = (base["metric"] == "acc").to_numpy()
    full = {name: r.assign(mean=np.where(acc, [1.0, below, 1.0, below][k], r["mean"]))
            for k, (name, r) in enumerate(_runs(base, 4, 1).items())}  # fmt: skip
    # a candidate run one validation row off on those cells: no SD of the full runs to measure that in
    cand = {name: r.assign(mean=np.where(acc, 0.98, r["mean"])) for name, r in _runs(base, 3, 2).items()}
    scores = E.run_scores(full, cand)
    assert np.isfinite(scores["score"]).all() and scores["score"].abs().max() < 10
    assert not E.welch_differs(np.array([1.0, below, 1.0]), np.array([below, below, 1.0]))
    assert E.welch_differs(
        np.array([1.0, 1.0, 1.0]), np.array([0.99, 0.99, 0.99])
    )  # no spread, a real difference
    assert E.welch_differs(np.array([0.5, 0.5]), np.array([0.5 + 1e-6, 0.5 + 1e-6]))  # beyond rounding
