"""kcal.sweep.samplers: what ``sweep.n_startup_trials`` counts. With Optuna's rule (finished trials) N asynchronous
workers sample about n + N - 1 trials at random; with ``startup_by=started`` the first n trials by number are random
at any worker count, and every later one is TPE's. Driven by ask/tell with N trials in flight, the random draws
counted by spying on RandomSampler (which TPE itself falls back to)."""

import heapq

import optuna
import pytest
from omegaconf import OmegaConf

from kcal.core.errors import ConfigError
from kcal.sweep.fingerprint import shaping_config
from kcal.sweep.samplers import STARTUP_BY, StartedStartupTPE, make_sampler, parallel_label, startup_by

optuna.logging.set_verbosity(optuna.logging.WARNING)
SPACE = {
    "x": optuna.distributions.FloatDistribution(-3.0, 3.0),
    "y": optuna.distributions.FloatDistribution(-3.0, 3.0),
}
N_STARTUP, N_TRIALS = 10, 30


def sweep_cfg(**sweep):
    return OmegaConf.create(
        {"sweep": {"sampler_seed": 5, "worker": 0, "n_startup_trials": N_STARTUP, **sweep}}
    )


def random_trials(sampler, workers: int, monkeypatch) -> set[int]:
    """The numbers of the trials sampled at random when ``workers`` trials are always in flight (each finishing
    in the order it started, one at a time)."""
    drawn: set[int] = set()
    original = optuna.samplers.RandomSampler.sample_independent

    def spy(self, study, trial, name, distribution):
        drawn.add(trial.number)
        return original(self, study, trial, name, distribution)

    monkeypatch.setattr(optuna.samplers.RandomSampler, "sample_independent", spy)
    study = optuna.create_study(sampler=sampler)
    flight: list = []
    asked = 0
    while asked < N_TRIALS or flight:
        while asked < N_TRIALS and len(flight) < workers:
            trial = study.ask(SPACE)
            heapq.heappush(flight, (trial.number, trial))
            asked += 1
        _, trial = heapq.heappop(flight)
        study.tell(trial, trial.params["x"] ** 2 + trial.params["y"] ** 2)
    return drawn


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_optunas_rule_samples_n_plus_workers_minus_one_trials_at_random(workers, monkeypatch):
    drawn = random_trials(make_sampler(sweep_cfg(startup_by="finished")), workers, monkeypatch)
    assert drawn == set(range(N_STARTUP + workers - 1))


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_started_samples_the_first_n_trials_at_random_at_any_worker_count(workers, monkeypatch):
    sampler = make_sampler(sweep_cfg(startup_by="started"))
    assert isinstance(sampler, StartedStartupTPE) and sampler.random_trials == N_STARTUP
    assert random_trials(sampler, workers, monkeypatch) == set(range(N_STARTUP))


def test_started_falls_back_to_random_while_no_trial_has_finished(monkeypatch):
    # 12 workers, 10 random trials: trials 10 and 11 start before any trial finishes, so TPE has nothing to fit
    drawn = random_trials(make_sampler(sweep_cfg(startup_by="started")), 12, monkeypatch)
    assert drawn == set(range(12))


def test_the_same_seed_samples_the_same_trials():
    def params(seed):
        study = optuna.create_study(
            sampler=StartedStartupTPE(n_startup_trials=3, seed=seed, constant_liar=True)
        )
        study.optimize(lambda t: t.suggest_float("x", -1, 1) ** 2, n_trials=8)
        return [t.params["x"] for t in study.trials]

    assert params(1) == params(1) and params(1) != params(2)


def test_the_protocols_value_is_the_configs_default_is_unlabelled_and_leaves_the_fingerprint_alone():
    default = OmegaConf.load("configs/sweep.yaml").sweep.startup_by
    assert default == STARTUP_BY[0] == "finished"
    assert parallel_label({"startup_by": "finished"}) == parallel_label({}) == ""
    assert parallel_label({"startup_by": "started"}) == "startup_by=started"
    assert startup_by({}) == "finished"  # a config made before the key existed
    base = {"sweep": {"n_startup_trials": 10}}
    assert shaping_config(
        OmegaConf.create({"sweep": {**base["sweep"], "startup_by": "finished"}})
    ) == shaping_config(OmegaConf.create(base))
    assert "sweep.startup_by" in shaping_config(OmegaConf.create({"sweep": {"startup_by": "started"}}))


def test_an_unknown_value_is_one_line_listing_the_valid_ones():
    with pytest.raises(ConfigError, match="sweep.startup_by=begun is not one of: finished, started"):
        make_sampler(sweep_cfg(startup_by="begun"))
