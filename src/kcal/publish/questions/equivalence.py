"""Is a cheaper protocol (e.g. a pruned sweep) equivalent to the full one? The rule, fixed before its runs.

The full protocol's runs ``F`` (the published run and its replicates, ``R_F`` runs) and the candidate's runs
``P`` (``R_P`` runs of the same datasets, the same sampler seeds where they exist) are compared on four
counts. Written on 2026-11-27, before any pruned protocol was run; its constants are the module's. Since issue 66
the pruned protocol's verdict is over whole runs (:mod:`kcal.publish.whole_runs`); these counts are shown beside
it, no longer the verdict.

**1. The cells shift by less than one protocol SD** (per dataset, :func:`shift_test`). A *cell* is one
number of the paper's tables (flavour, dataset, objective, recalibrator, metric; a number that two tables
share counts once). With ``mean_F,c`` and ``sd_F,c`` the full runs' mean and SD (ddof 1) of cell ``c``, and
``s_c = +1`` where lower is better, ``-1`` where higher is better, every run ``r`` gets a *score* on the dataset

    z_r = mean over the dataset's cells c of  s_c (x_rc - mean_F,c) / sd_F,c

(cells with ``sd_F,c = 0`` or missing in a run are left out): how many protocol SDs the run sits on the
worse side, averaged over cells. Runs are independent, cells within a run are not, so the run is the unit.
The shift ``d = mean(z_P) - mean(z_F)`` is tested by two one-sided Welch t tests with margin
``MARGIN = 1`` protocol SD at level ``ALPHA = 0.05`` each, i.e. its 90 % confidence interval
``d +- t_{0.95, df} sqrt(var(z_P)/R_P + var(z_F)/R_F)`` (Welch-Satterthwaite ``df``):

* **equivalent** when the interval lies inside ``(-MARGIN, MARGIN)``;
* **differs** when it lies wholly outside ``[-MARGIN, MARGIN]`` (a shift of more than one SD shown);
* **undecided** otherwise (too few runs, or a shift near the margin).

**2. No more single cells differ than chance gives** (:func:`cells_differing`): per cell, the candidate's
runs against the full runs by a two-sided Welch t test at 5 % (:func:`welch_differs`). It passes when the
number of cells that differ is within the central 95 % range of Binomial(n, 0.05)
(:func:`kcal.publish.protocol_spread.chance_range`) or below. (Testing each candidate run against the full
runs' prediction interval instead would count one cell's reference R_P times over: its counts are not
binomial.) Cells of one run share a model, so the count is a guide, as the protocol spread's is.

**3. Claim verdicts agree as often as the full runs agree among themselves** (:func:`claim_agreement`): each
run alone gives every claim an outcome per flavour and dataset (better / indistinguishable / worse,
:mod:`kcal.publish.verdicts`). ``within`` is the mean share of equal outcomes over pairs of full runs,
``across`` over (candidate, full) pairs; it passes when ``across >= within - AGREEMENT_SLACK`` (0.10).

**4. The selected regulariser share does not shift** (:func:`share_shifts`): per study (dataset and
regularised objective), with ``l = log10(share + SHARE_FLOOR)`` of each run's selected trial (studies.csv's
``reg_share_at_best``), the study *shifts* when the candidate's mean ``l`` moves more than ``MIN_DECADES``
(one decade) from the full runs' and the Welch test says it differs; it passes when the number of shifted
studies is within the binomial chance range.

**The verdict** (:func:`judge`): **equivalent** when count 1 says equivalent on every dataset and 2-4 pass;
**rejected** when count 1 says differs on some dataset or one of 2-4 fails; **undecided** otherwise (a count
with nothing to test, e.g. no recorded shares, neither passes nor fails). A
candidate that is not equivalent ships only as an experiment under its own label.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kcal.publish import verdicts as V
from kcal.publish.claims import CLAIMS, claim_values, evaluate_claim
from kcal.publish.protocol_spread import chance_range
from kcal.publish.table_cells import FLAVOURS, TABLES, cell_frame, normalise_results
from kcal.publish.whole_runs import replicate_cells

MARGIN = 1.0
"""Equivalence margin of count 1, in protocol SDs of a cell."""
ALPHA = 0.05
"""Level of each one-sided test of count 1 (a 90 % interval)."""
AGREEMENT_SLACK = 0.10
"""How much lower the candidate's claim-outcome agreement with the full runs may be than theirs among themselves."""
SHARE_FLOOR = 1e-8
"""Added to a regulariser share before its log (a share of 0: the regulariser off)."""
MIN_DECADES = 1.0
"""A selected share moves by at least this many decades before it counts as shifted."""
EQUIVALENT, DIFFERS, UNDECIDED, REJECTED = "equivalent", "differs", "undecided", "rejected"
CELL_ID = ["flavour", "dataset", "objective", "recalibrator", "metric"]


def _cells(runs: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Every cell of every run once (``replicate`` names the run), with ``sign`` +1 where lower is better."""
    cells = replicate_cells(dict(runs))
    if cells.empty:
        return cells
    cells = cells.drop_duplicates(CELL_ID + ["replicate"])
    lower = {(t, m.name): m.lower_is_better for t, tab in TABLES.items() for m in tab.metrics}
    cells["sign"] = [
        1.0 if lower.get((t, m), True) else -1.0 for t, m in zip(cells["table"], cells["metric"], strict=True)
    ]
    return cells


def _reference(full: pd.DataFrame) -> pd.DataFrame:
    """Per cell: the full runs' mean, SD and count."""
    ref = full.groupby(CELL_ID)["ours_mean"].agg(mean_f="mean", sd_f="std", runs_f="count").reset_index()
    return ref[ref["runs_f"] >= 2]


def run_scores(full: Mapping[str, pd.DataFrame], candidate: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """``z_r`` per run and dataset (module docstring, count 1): columns ``dataset, run, group, score, cells``
    with ``group`` "full" or "candidate"."""
    f, p = _cells(full), _cells(candidate)
    ref = _reference(f)
    ref = ref[ref["sd_f"] > V.ROUNDING * ref["mean_f"].abs().clip(lower=1.0)]
    rows = []
    for group, cells in (("full", f), ("candidate", p)):
        joined = cells.merge(ref, on=CELL_ID)
        joined["z"] = joined["sign"] * (joined["ours_mean"].astype(float) - joined["mean_f"]) / joined["sd_f"]
        for (ds, run), g in joined.groupby(["dataset", "replicate"], sort=True):
            rows.append(
                {"dataset": ds, "run": run, "group": group, "score": float(g["z"].mean()), "cells": len(g)}
            )
    return pd.DataFrame(rows, columns=["dataset", "run", "group", "score", "cells"])


@dataclass(frozen=True)
class Shift:
    dataset: str
    shift: float
    low: float
    high: float
    runs_full: int
    runs_candidate: int
    outcome: str


def shift_test(full_scores: np.ndarray, cand_scores: np.ndarray, dataset: str = "") -> Shift:
    """Count 1 on one dataset: the 90 % Welch interval of ``mean(z_P) - mean(z_F)`` against ``+-MARGIN``."""
    from scipy.stats import t as student

    a, b = np.asarray(cand_scores, float), np.asarray(full_scores, float)
    if len(a) < 2 or len(b) < 2:
        return Shift(dataset, math.nan, math.nan, math.nan, len(b), len(a), UNDECIDED)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    d = float(a.mean() - b.mean())
    se = math.sqrt(va + vb)
    if se == 0:
        low = high = d
    else:
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
        half = float(student.ppf(1 - ALPHA, df)) * se
        low, high = d - half, d + half
    if -MARGIN < low and high < MARGIN:
        outcome = EQUIVALENT
    elif low > MARGIN or high < -MARGIN:
        outcome = DIFFERS
    else:
        outcome = UNDECIDED
    return Shift(dataset, d, low, high, len(b), len(a), outcome)


def shifts(full: Mapping[str, pd.DataFrame], candidate: Mapping[str, pd.DataFrame]) -> list[Shift]:
    """Count 1 for every dataset the candidate ran."""
    scores = run_scores(full, candidate)
    out = []
    for ds in sorted(set(scores.loc[scores["group"] == "candidate", "dataset"])):
        s = scores[scores["dataset"] == ds]
        out.append(
            shift_test(
                s.loc[s.group == "full", "score"].to_numpy(),
                s.loc[s.group == "candidate", "score"].to_numpy(),
                ds,
            )
        )
    return out


def welch_differs(a: np.ndarray, b: np.ndarray, alpha: float = 0.05) -> bool:
    """Two-sided Welch t test of ``mean(a) = mean(b)`` at level ``alpha`` (both with at least two values);
    with no spread beyond float rounding in either (:data:`kcal.publish.verdicts.ROUNDING`), any difference beyond
    rounding differs."""
    from scipy.stats import t as student

    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    d = abs(float(a.mean() - b.mean()))
    means = (float(a.mean()), float(b.mean()))
    if V.is_rounding(math.sqrt(va + vb), *means):  # no spread beyond rounding in either
        return not V.is_rounding(d, *means)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return d > float(student.ppf(1 - alpha / 2, df)) * math.sqrt(va + vb)


def cells_differing(full: Mapping[str, pd.DataFrame], candidate: Mapping[str, pd.DataFrame]) -> dict:
    """Count 2: ``{"differing", "tested", "expected", "low", "high", "passes"}``; a cell is tested where both
    protocols have at least two runs of it."""
    f, p = _cells(full), _cells(candidate)
    fv = {k: g["ours_mean"].astype(float).to_numpy() for k, g in f.groupby(CELL_ID)}
    tested = differing = 0
    for key, g in p.groupby(CELL_ID):
        a, b = g["ours_mean"].astype(float).to_numpy(), fv.get(key, np.array([]))
        if len(a) < 2 or len(b) < 2:
            continue
        tested += 1
        differing += welch_differs(a, b)
    expected, low, high = chance_range(tested)
    return {"differing": differing, "tested": tested, "expected": expected, "low": low, "high": high,
            "passes": differing <= high if tested else None}  # fmt: skip


def run_outcomes(results: pd.DataFrame) -> dict[tuple[str, str, str], str]:
    """One run alone: every claim's outcome per (claim, flavour, dataset)."""
    run = normalise_results(results)
    out = {}
    for flavour in FLAVOURS:
        for claim in CLAIMS:
            frame = cell_frame(run, flavour, TABLES[claim.table])
            if not claim_values(claim, frame):
                continue
            for ds, d in evaluate_claim(claim, [frame], flavour).datasets.items():
                out[(claim.id, flavour, ds)] = d.outcome
    return out


def _agree(a: dict, b: dict) -> float:
    keys = set(a) & set(b)
    return sum(a[k] == b[k] for k in keys) / len(keys) if keys else math.nan


def claim_agreement(full: Mapping[str, pd.DataFrame], candidate: Mapping[str, pd.DataFrame]) -> dict:
    """Count 3: ``{"within", "across", "passes"}``, the mean shares of equal claim outcomes."""
    fo = [run_outcomes(r) for r in full.values()]
    po = [run_outcomes(r) for r in candidate.values()]
    within = (
        float(np.nanmean([_agree(a, b) for a, b in itertools.combinations(fo, 2)]))
        if len(fo) > 1
        else math.nan
    )
    across = float(np.nanmean([_agree(a, b) for a in po for b in fo])) if po and fo else math.nan
    passes = None if math.isnan(within) or math.isnan(across) else across >= within - AGREEMENT_SLACK - 1e-12
    return {"within": within, "across": across, "passes": passes}


def _log_shares(studies: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frames = []
    for name, s in studies.items():
        if "reg_share_at_best" not in s:
            continue
        s = s[s["reg_share_at_best"].notna()]
        frames.append(pd.DataFrame({"dataset": s["dataset"], "objective": s["objective"], "run": name,
                                    "l": np.log10(s["reg_share_at_best"].astype(float) + SHARE_FLOOR)}))  # fmt: skip
    return (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["dataset", "objective", "run", "l"])
    )


def share_shifts(full_studies: Mapping[str, pd.DataFrame], cand_studies: Mapping[str, pd.DataFrame]) -> dict:
    """Count 4: ``{"shifted", "tested", "high", "passes", "median_shift"}`` (the median over studies of
    ``mean(l_P) - mean(l_F)``); ``passes`` is None where no study has shares in both (untested)."""
    f, p = _log_shares(full_studies), _log_shares(cand_studies)
    fv = {k: g["l"].to_numpy() for k, g in f.groupby(["dataset", "objective"])}
    moved, shifted = [], 0
    for key, g in p.groupby(["dataset", "objective"]):
        a, b = g["l"].to_numpy(), fv.get(key, np.array([]))
        if len(a) < 2 or len(b) < 2:
            continue
        m = float(a.mean() - b.mean())
        moved.append(m)
        shifted += abs(m) > MIN_DECADES and welch_differs(a, b)
    _, _, high = chance_range(len(moved))
    return {"shifted": shifted, "tested": len(moved), "high": high, "passes": shifted <= high if moved else None,
            "median_shift": float(np.median(moved)) if moved else math.nan}  # fmt: skip


@dataclass(frozen=True)
class Judgement:
    verdict: str
    shifts: list[Shift]
    cells: dict
    claims: dict
    shares: dict


def judge(
    full: Mapping[str, pd.DataFrame],
    candidate: Mapping[str, pd.DataFrame],
    full_studies: Mapping[str, pd.DataFrame],
    cand_studies: Mapping[str, pd.DataFrame],
) -> Judgement:
    """The four counts and the verdict (module docstring). ``full`` / ``candidate``: ``{run: results}``
    (results.csv frames); ``*_studies``: ``{run: studies}`` (studies.csv frames)."""
    sh = shifts(full, candidate)
    cells, claims, shares = (
        cells_differing(full, candidate),
        claim_agreement(full, candidate),
        share_shifts(full_studies, cand_studies),
    )
    passes = [cells["passes"], claims["passes"], shares["passes"]]
    if any(s.outcome == DIFFERS for s in sh) or any(p is False for p in passes):
        verdict = REJECTED
    elif sh and all(s.outcome == EQUIVALENT for s in sh) and all(p is True for p in passes):
        verdict = EQUIVALENT
    else:
        verdict = UNDECIDED
    return Judgement(verdict, sh, cells, claims, shares)
