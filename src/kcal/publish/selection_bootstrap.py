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

COVERAGE = 0.8
MAX_FACTOR = 2.0


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
