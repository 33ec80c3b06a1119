"""Which validation metrics a sweep optimises and which trial it selects (``sweep.selection``).

* ``paper`` (the default): one objective, the paper's protocol (:func:`kcal.sweep.search.trial_value`);
  Optuna's ``study.best_trial`` is the selected trial.
* ``pareto``: an Optuna multi-objective study over two validation metrics, both minimised:
  regression, validation NLL and validation QCE (``val/nll``, ``val/qce``: the binned QCE of the
  validation PIT values that every run already evaluates); classification, validation NLL
  (cross-entropy) and validation ECE (``val/nll``, ``val/ece``). Not accuracy: on breast-cancer
  most configurations classify the 56-row validation split perfectly, so an (accuracy, ECE) front
  holds only the trials of lowest ECE among them and cannot rank the rest. The front is
  ``study.best_trials``; the *selected* trial (``best.json``, the seed reruns) is the front trial with
  the lowest validation NLL, ties broken by the second metric, then by the earlier trial. Since
  the trial of lowest validation NLL is always on the front, this is the trial a single-objective
  NLL selection would pick, and the rest of the front shows what calibration it gives up.

The sampler is TPE for both, as in the paper: Optuna's sampler table recommends TPE for 100-1000
trials and NSGA-II for 100-10000, and ``NSGAIISampler``'s default generation of 50 trials would
leave a 100-trial budget two generations, the first of them random; its documentation also notes
that TPE handles categorical distances (most of kcal's spaces are categorical) and NSGA-II does not
(https://optuna.readthedocs.io/en/v3.0.5/reference/samplers/index.html,
https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.NSGAIISampler.html).
Multi-objective TPE keeps ``constant_liar`` for parallel workers (running trials count as dominated).

A pareto study is a study of its own: its name and folders end in ``__pareto`` (:mod:`kcal.core.layout`), and
its fingerprint holds
``sweep.selection`` (:mod:`kcal.sweep.fingerprint` leaves the key out while it is ``paper``).
"""

from __future__ import annotations

import warnings

import optuna
from omegaconf import DictConfig
from optuna.trial import FrozenTrial, TrialState

from kcal.core.errors import ConfigError

SELECTIONS = ("paper", "pareto")
#: per task: (metrics.json key, direction) of each objective of a pareto study; the first one selects
PARETO_OBJECTIVES = {
    "regression": (("val/nll", "minimize"), ("val/qce", "minimize")),
    "classification": (("val/nll", "minimize"), ("val/ece", "minimize")),
}


def selection_of(cfg: DictConfig) -> str:
    """``sweep.selection`` (``paper`` where the config has none), checked."""
    name = str(cfg.sweep.get("selection") or "paper")
    if name not in SELECTIONS:
        raise ConfigError(f"sweep.selection={name} is not one of: {', '.join(SELECTIONS)}")
    return name


def metric_names(task: str) -> list[str]:
    return [key for key, _ in PARETO_OBJECTIVES[task]]


def directions(task: str) -> list[str]:
    return [direction for _, direction in PARETO_OBJECTIVES[task]]


def pareto_values(metrics: dict, task: str) -> tuple[float, ...]:
    """A finished run's objective values under ``pareto`` (in :data:`PARETO_OBJECTIVES`' order)."""
    return tuple(float(metrics[key]) for key in metric_names(task))


def name_objectives(study: optuna.Study, task: str) -> None:
    """Store the objectives' metric names on a pareto study (Optuna's ``metric_names``, which
    optuna-dashboard shows), once."""
    if study.metric_names is None:
        with warnings.catch_warnings():  # set_metric_names is "experimental"
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metric_names(task))


def is_pareto(study: optuna.Study) -> bool:
    return len(study.directions) > 1


def front(study: optuna.Study) -> list[FrozenTrial]:
    """The completed trials that no other completed trial dominates, selected one first (by validation
    NLL, then the second metric, then trial number)."""
    return sorted(study.best_trials, key=lambda t: (*t.values, t.number))


def selected(study: optuna.Study) -> FrozenTrial:
    """The selected trial: Optuna's best trial, or under ``pareto`` the front trial of lowest
    validation NLL. Raises ``ValueError`` while no trial is complete."""
    if not is_pareto(study):
        return study.best_trial
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        raise ValueError("no trial is complete yet")
    return front(study)[0]


def value_of(trial: FrozenTrial) -> float | list[float]:
    """A trial's value; its list of values in a multi-objective study."""
    return trial.value if len(trial.values) == 1 else list(trial.values)


def describe(study: optuna.Study, trial: FrozenTrial) -> str:
    """A pareto trial's values with their metric names, e.g. ``val/nll -0.71, val/qce 0.043``."""
    names = study.metric_names or [f"value{i}" for i in range(len(trial.values))]
    return ", ".join(f"{name} {value:.4g}" for name, value in zip(names, trial.values, strict=True))


def summary(study: optuna.Study) -> str:
    """The selected trial of a pareto study and the front's size, e.g.
    ``#12 (val/nll -0.78, val/qce 0.031), front of 5``."""
    best = selected(study)
    return f"#{best.number} ({describe(study, best)}), front of {len(study.best_trials)}"
