"""The pruners a sweep can stop trials with (``sweep.pruner``), by name, and the value a trial reports.

A pruned protocol is not the paper's: it is published under its own name, and is worth having only where a
replay over the full protocol's trials (:mod:`kcal.publish.pruning_replay`) and replicates show that it
selects as well. Names: ``median_warmupW`` (Optuna's ``MedianPruner``: 5 startup trials, no pruning in the
first ``W`` epochs) and ``sha_minR`` (``SuccessiveHalvingPruner``, minimum resource ``R`` epochs, reduction
factor 3). Each epoch a trial reports the *running best* of its validation NLL (:func:`running_best`; for
classes the cross-entropy), what early stopping keeps, so a noisy epoch does not prune a trial whose best
epoch is already good.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import optuna

from kcal.core.errors import ConfigError

SETTINGS: dict[str, Callable[[], optuna.pruners.BasePruner]] = {
    "median_warmup5": lambda: optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=5),
    "median_warmup10": lambda: optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=10),
    "median_warmup20": lambda: optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=20),
    "sha_min5": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=5, reduction_factor=3),
    "sha_min10": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=10, reduction_factor=3),
    "sha_min20": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=20, reduction_factor=3),
}
"""Pruner settings by name. Warm-up and minimum resource in epochs: a full-protocol trial trains at most 200
epochs with early stopping, and 5 to 20 epochs is where most trials still improve."""


def make_pruner(name: str | None) -> optuna.pruners.BasePruner:
    """The pruner called ``name`` (None: none, Optuna's ``NopPruner``); an unknown name is a one-line error."""
    if name is None:
        return optuna.pruners.NopPruner()
    if name not in SETTINGS:
        raise ConfigError(f"sweep.pruner={name} is not one of: null, {', '.join(SETTINGS)}")
    return SETTINGS[name]()


def running_best(curve: list[float]) -> list[float]:
    """``min(curve[:i + 1])`` for each epoch ``i``; a non-finite value never counts as a best (inf until a
    finite one)."""
    out, best = [], math.inf
    for v in curve:
        if math.isfinite(v) and v < best:
            best = v
        out.append(best)
    return out


def reported(value: float) -> float:
    """What a running best of ``inf`` (no finite epoch yet) is reported as: a large finite number."""
    return value if math.isfinite(value) else 1e300
