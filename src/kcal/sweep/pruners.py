"""The pruners a sweep can stop trials with (``sweep.pruner``), by name, and the value a trial reports.

A pruned protocol is not the paper's: it is published under its own name, and is worth having only where a
replay over the full protocol's trials (:mod:`kcal.publish.questions.pruning_replay`) and replicates show that it
selects as well. Names: ``median_warmupW`` (Optuna's ``MedianPruner``: 5 startup trials, no pruning in the
first ``W`` epochs) and ``sha_minR`` (``SuccessiveHalvingPruner``, minimum resource ``R`` epochs, reduction
factor 3). Each epoch a trial reports the *running best* of its validation NLL (:func:`running_best`; for
classes the cross-entropy), what early stopping keeps, so a noisy epoch does not prune a trial whose best
epoch is already good.

Optuna's pruners rank reported values by the study's direction, and a study's direction is its selection's
(classification studies maximise validation accuracy), while the curve is a loss, always minimised. So the
value reported is signed to the study (:func:`pruner_value`: the loss in a minimised study, minus the loss in
a maximised one), and a pruner always stops the trials with the worse validation loss. The live sweep and the
offline replay report through one class, :class:`CurveReporter`, so the two cannot disagree.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import optuna

from kcal.core.errors import ConfigError

#: how a pruned study's trials report (in its fingerprint: a pruned study whose trials reported the unsigned
#: loss, the pruner that kept the worst classification trials, is not resumed as this one)
PRUNER_REPORT = "running-best validation loss, signed to the study's direction"

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


def pruner_value(loss: float, direction: optuna.study.StudyDirection) -> float:
    """A running-best validation ``loss`` (minimised) as a study of ``direction`` ranks it: the loss itself
    in a minimised study, ``-loss`` in a maximised one; ``inf`` (no finite epoch yet) as the worst finite value."""
    value = reported(loss)
    return -value if direction == optuna.study.StudyDirection.MAXIMIZE else value


class CurveReporter:
    """Reports one trial's validation-loss curve to its study's pruner, an epoch a call: the running best
    (:func:`running_best`), signed to the study's direction (:func:`pruner_value`). Calling it returns True
    when the pruner stops the trial. Used by the live sweep and by the offline replay alike."""

    def __init__(self, trial: optuna.Trial):
        self.trial, self.best = trial, math.inf
        self.direction = trial.study.directions[0]

    def __call__(self, loss: float, epoch: int) -> bool:
        if math.isfinite(loss) and loss < self.best:
            self.best = loss
        self.trial.report(pruner_value(self.best, self.direction), epoch)
        return self.trial.should_prune()

    @property
    def value(self) -> float:
        """The running best as the study ranks it (what a replayed trial that was not pruned is told)."""
        return pruner_value(self.best, self.direction)
