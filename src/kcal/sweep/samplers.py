"""The sweep's sampler: Optuna's TPE with constant liar, seeded per worker, and when its random start ends.

``sweep.startup_by`` says what ``sweep.n_startup_trials`` counts before TPE takes over from random sampling:

* ``finished`` (the protocol's, Optuna's own rule): trials that have *finished*. With N workers, N - 1 other
  trials are still running whenever one finishes, so about ``n_startup_trials + N - 1`` trials are sampled at
  random: 11 of 100 on 2 workers, 17 on 8, 25 on 16.
* ``started``: trials that have *started*, i.e. the first ``n_startup_trials`` trials by number are random at
  any worker count (:class:`StartedStartupTPE`), and every later trial is sampled by TPE from the trials
  finished by then (with constant liar, the running ones count as the worst seen). This is the fix tried for
  the worker-count replicates (:mod:`kcal.publish.questions.worker_count`): it keeps the random share of the budget
  what it is on 1 worker.

A run whose setting differs from the protocol's is published as its own group of worker runs
(:func:`parallel_label`, :mod:`kcal.publish.variant_report`).
"""

from __future__ import annotations

from collections.abc import Mapping

import optuna
from omegaconf import DictConfig

from kcal.core.errors import ConfigError

STARTUP_BY = ("finished", "started")
"""The values of ``sweep.startup_by``; the first is the protocol's (``configs/sweep.yaml``)."""


class StartedStartupTPE(optuna.samplers.TPESampler):
    """TPE whose first ``n_startup_trials`` trials by number are sampled at random (``sweep.startup_by=started``).

    Later trials are TPE's (multivariate, Optuna's default for one objective) from the trials finished by then;
    where none has finished yet (more workers than random trials), TPE itself falls back to random sampling."""

    def __init__(self, *, n_startup_trials: int, seed: int | None = None, **kwargs) -> None:
        super().__init__(n_startup_trials=1, seed=seed, **kwargs)
        self.random_trials = int(n_startup_trials)
        self.random_sampler = optuna.samplers.RandomSampler(seed=seed)

    def reseed_rng(self) -> None:
        super().reseed_rng()
        self.random_sampler.reseed_rng()

    def sample_relative(self, study, trial, search_space):
        if trial.number < self.random_trials:
            return {}  # every parameter then comes from sample_independent: at random
        return super().sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        if trial.number < self.random_trials:
            return self.random_sampler.sample_independent(study, trial, param_name, param_distribution)
        return super().sample_independent(study, trial, param_name, param_distribution)


def startup_by(sweep: Mapping) -> str:
    """``sweep.startup_by`` (a config made before the key existed: the protocol's); an unknown value is a
    one-line :class:`ConfigError` listing the valid ones."""
    value = sweep.get("startup_by") or STARTUP_BY[0]
    if value not in STARTUP_BY:
        raise ConfigError(f"sweep.startup_by={value} is not one of: {', '.join(STARTUP_BY)}")
    return str(value)


def parallel_label(sweep: Mapping) -> str:
    """``""`` for the protocol's sampler, else ``startup_by=<value>``: how a run's group of worker runs is named
    (:func:`kcal.core.layout.workers_label`)."""
    value = startup_by(sweep)
    return "" if value == STARTUP_BY[0] else f"startup_by={value}"


def make_sampler(cfg: DictConfig, seed: int | None = None) -> optuna.samplers.TPESampler:
    """The TPE sampler of ``cfg``'s sweep: ``sweep.n_startup_trials`` random trials counted by
    ``sweep.startup_by``, constant liar; seed ``seed`` (the deterministic sweep's, one per trial:
    :func:`kcal.sweep.ask_tell.trial_seed`), by default ``sweep.sampler_seed + sweep.worker`` (the
    asynchronous mode's, each worker its own)."""
    kind = StartedStartupTPE if startup_by(cfg.sweep) == "started" else optuna.samplers.TPESampler
    seed = int(cfg.sweep.sampler_seed) + int(cfg.sweep.get("worker") or 0) if seed is None else int(seed)
    return kind(seed=seed,
                n_startup_trials=int(cfg.sweep.n_startup_trials), constant_liar=True)  # fmt: skip
