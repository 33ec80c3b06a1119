"""An estimate of the protocol's spread from ONE protocol run: a bootstrap of the selection over a study's trials.

Replicates of the whole protocol (:mod:`kcal.publish.protocol_spread`) measure how much a published cell moves when
the sweep is run again; they are costly, so most datasets have none. This module estimates the same spread
from one study's kept trials (:mod:`kcal.publish.trials`): resample the study's complete trials with replacement
(``n_boot`` times, as many as it has), apply the paper's selection rule (the best selection score; the first
such trial on a tie, as Optuna's ``best_trial``), and read the selected trial's own test metric.

A trial's test metric is one seed's: ``T_i = mu_i + e_i`` with the configuration's mean ``mu_i`` and a seed
noise ``e_i`` of variance ``s^2`` (``s = se * sqrt(n)`` from the published cell's seed SE ``se`` over ``n``
seeds). A protocol run publishes ``mu_sel`` plus the mean of ``n`` seeds' noise, so its variance is
``var(mu_sel) + s^2 / n``, estimated as

    predicted_sd = sqrt( max(var_boot(T_sel) - s^2, 0) + s^2 / n ).

The bootstrap of a maximum is known to be biased low (most resamples keep the best trial, so the selection
moves less than in a new sweep): in a simulated world of 100 configurations it came out at 0.3-0.7 of the
spread of simulated protocol runs (tests/publish/test_protocol_spread.py). So whether this estimate may be used is decided against the replicates where both exist, by a rule fixed here
before any comparison (:func:`passes`): over those cells, the predicted SD lies inside the measured SD's
95 % confidence interval in at least :data:`COVERAGE` of them AND the median ratio predicted / measured lies
in [1 / :data:`MAX_FACTOR`, :data:`MAX_FACTOR`]. Where it does not pass, it is not used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from kcal.publish.questions import Published

COVERAGE = 0.8
MAX_FACTOR = 2.0
BLOCKS = ("protocol:estimate",)
"""The report's generated block that :func:`report_blocks` fills (RESULTS.md)."""


def trial_metric_key(flavour: str, recalibrator: str, metric: str) -> str:
    """The key of a trial's ``metrics.json`` (a trials table column) that a results cell reads:
    ``[official/]test[_recal]/<metric>``."""
    split = "test" if recalibrator == "none" else "test_recal"
    return f"{'official/' if flavour == 'official' else ''}{split}/{metric}"


def bootstrap_selected(scores: Sequence[float], metric: Sequence[float], maximize: bool, n_boot: int = 2000,
                       seed: int = 0) -> np.ndarray:  # fmt: skip
    """The test ``metric`` of the trial that the selection picks in each of ``n_boot`` resamples (with
    replacement, as many as there are trials) of the trials' selection ``scores``."""
    s = np.asarray(scores, dtype=float)
    t = np.asarray(metric, dtype=float)
    if s.shape != t.shape or s.size == 0:
        raise ValueError(f"scores and metric need one value per trial, got {s.shape} and {t.shape}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, s.size, size=(n_boot, s.size))
    picked = np.argmax(s[idx] if maximize else -s[idx], axis=1)  # first best in draw order
    return t[idx[np.arange(n_boot), picked]]


def predicted_sd(scores: Sequence[float], metric: Sequence[float], maximize: bool, seed_se: float, n_seeds: int,
                 n_boot: int = 2000, seed: int = 0) -> float:  # fmt: skip
    """The protocol spread of a cell predicted from one study (module docstring's formula)."""
    boot = bootstrap_selected(scores, metric, maximize, n_boot, seed)
    s2 = (seed_se**2) * n_seeds
    return math.sqrt(max(float(np.var(boot, ddof=1)) - s2, 0.0) + s2 / n_seeds)


def passes(compared: pd.DataFrame) -> tuple[bool, float, float]:
    """``(passes, coverage, median ratio)`` over cells with ``predicted``, ``sd``, ``sd_low``, ``sd_high``."""
    ok = compared.dropna(subset=["predicted", "sd", "sd_low", "sd_high"])
    ok = ok[ok["sd"] > 0]
    if ok.empty:
        return False, float("nan"), float("nan")
    inside = ((ok["predicted"] >= ok["sd_low"]) & (ok["predicted"] <= ok["sd_high"])).mean()
    ratio = float((ok["predicted"] / ok["sd"]).median())
    return bool(inside >= COVERAGE and 1 / MAX_FACTOR <= ratio <= MAX_FACTOR), float(inside), ratio


def estimate_frame(spread: pd.DataFrame, replicates: dict[str, pd.DataFrame], trials: dict[str, pd.DataFrame],
                   n_boot: int = 2000) -> pd.DataFrame:  # fmt: skip
    """For each cell of ``spread`` (:func:`kcal.publish.protocol_spread.spread_frame`), the spread predicted from
    each replicate that kept its study's trials (``trials``: a trials table per replicate name), their median
    as ``predicted``, beside the measured ``sd`` and its interval. Cells no replicate kept trials for are left
    out."""
    from kcal.publish.table_cells import TABLES, by_key

    # each replicate's complete trials per (dataset, objective), and its cells' (se, n)
    studies = {name: dict(iter(f[f["state"] == "complete"].groupby(["dataset", "objective"], sort=False)))
               for name, f in trials.items()}  # fmt: skip
    cell_keys = ("dataset", "objective", "recalibrator", "flavour", "metric")
    seeds = {name: by_key(res, cell_keys, ("se", "n")) for name, res in replicates.items()}
    rows = []
    for cell in spread.to_dict("records"):
        scale = TABLES[cell["table"]].metric(cell["metric"]).scale
        key = trial_metric_key(cell["flavour"], cell["recalibrator"], cell["metric"])
        preds = []
        for name in trials:
            t = studies[name].get((cell["dataset"], cell["objective"]))
            if t is None or key not in t or name not in replicates:
                continue
            t = t.dropna(subset=["value", key])
            mine = seeds[name].get(tuple(cell[k] for k in cell_keys))
            if t.empty or mine is None:
                continue
            se, n = float(mine[0]), int(mine[1])
            maximize = t["direction"].iloc[0] == "maximize"
            preds.append(predicted_sd(t["value"], t[key], maximize, se, n, n_boot) * scale)
        if preds:
            rows.append({**{k: cell[k] for k in ("flavour", "table", "dataset", "row", "metric")},
                         "replicates_with_trials": len(preds), "predicted": float(np.median(preds)),
                         "sd": cell["sd"], "sd_low": cell["sd_low"], "sd_high": cell["sd_high"]})  # fmt: skip
    return pd.DataFrame(rows)


def estimate_markdown(frame: pd.DataFrame) -> str:
    """The validation of the one-run estimate against the replicates, and the verdict of the rule."""
    if frame.empty:
        return "(no replicated cell has kept trials yet: the one-run estimate is not validated, and not used)"
    ok, coverage, ratio = passes(frame)
    verdict = "passes: it may be used for datasets without replicates" if ok else "fails: it is not used"
    lines = [f"Predicted (one study's trials, bootstrap) against measured (replicates) spread over {len(frame)} "
             f"cells: inside the measured 95 % interval in {coverage:.0%} (rule: >= {COVERAGE:.0%}), median "
             f"predicted / measured {ratio:.2f} (rule: within x{MAX_FACTOR:g}). The estimate {verdict}.", "",
             "| flavour | table | dataset | row | metric | predicted | measured (95 % CI) |",
             "|---|---|---|---|---|---:|---|"]  # fmt: skip
    for r in frame.to_dict("records"):
        lines.append(f"| {r['flavour']} | {r['table']} | {r['dataset']} | {r['row']} | {r['metric']} "
                     f"| {r['predicted']:.4g} | {r['sd']:.4g} ({r['sd_low']:.4g}-{r['sd_high']:.4g}) |")  # fmt: skip
    return "\n".join(lines)


def report_blocks(published: Published) -> dict[str, str]:
    """The report's generated block :data:`BLOCKS`, ``protocol:estimate``: :func:`estimate_markdown` of
    :func:`estimate_frame` over the published replicates and their kept trials (none without a measured spread;
    :mod:`kcal.publish.questions`)."""
    spread = published.spread
    estimate = (
        estimate_frame(spread, published.replicates, published.kept) if not spread.empty else pd.DataFrame()
    )
    return {"protocol:estimate": estimate_markdown(estimate)}
