"""Failing the trials of dead workers (kcal.sweep.studies.fail_stale)."""

from __future__ import annotations

import time

import optuna
import pytest
from omegaconf import OmegaConf
from optuna.trial import TrialState

from kcal.sweep.studies import STARTED, counted, fail_stale, open_storage

pytestmark = pytest.mark.filterwarnings(
    "ignore:Heartbeat of storage is supposed to be used with Study.optimize"
)


def trial_id(storage, trial) -> int:
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name("s"), trial.number)


def storage_cfg(tmp_path, grace: int):
    return OmegaConf.create({"root": str(tmp_path), "sweep": {"storage": f"sqlite:///{tmp_path}/s.db",
                             "heartbeat_interval": 1, "grace_period": grace, "max_retry": 2}})  # fmt: skip


def test_a_trial_whose_worker_died_before_its_first_heartbeat_is_failed_and_requeued(tmp_path):
    cfg = storage_cfg(tmp_path, grace=2)
    storage = open_storage(cfg)
    study = optuna.create_study(study_name="s", storage=storage)
    x = optuna.distributions.FloatDistribution(0.0, 1.0)
    # a re-queued trial with its parameters and the attributes of the trial it retries, then picked up by
    # a worker killed before its first heartbeat
    study.enqueue_trial({"x": 0.25}, user_attrs={STARTED: 7, "host": "a dead worker's"})
    dead = study.ask({"x": x})
    assert dead.params == {"x": 0.25} and dead.user_attrs[STARTED] != dead.number
    live = study.ask({"x": x})  # a worker that reached its objective and sends heartbeats
    live.set_user_attr(STARTED, live.number)
    time.sleep(2.5)
    storage.record_heartbeat(trial_id(storage, live))
    young = study.ask({"x": x})  # created a moment ago: its first heartbeat may still come
    assert fail_stale(study, cfg) == [dead.number]
    states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
    assert states[dead.number] == TrialState.FAIL
    assert states[live.number] == states[young.number] == TrialState.RUNNING
    (retry,) = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert retry.params == {"x": 0.25} and retry.system_attrs["retry_history"] == [dead.number]
    assert counted(study) == (0, 2)
    assert fail_stale(study, cfg) == []  # nothing twice


def test_a_running_trial_with_a_fresh_heartbeat_is_left_alone(tmp_path):
    cfg = storage_cfg(tmp_path, grace=1)
    storage = open_storage(cfg)
    study = optuna.create_study(study_name="s", storage=storage)
    trial = study.ask()
    trial.set_user_attr(STARTED, trial.number)
    storage.record_heartbeat(trial_id(storage, trial))
    fail_stale(study, cfg)
    assert study.trials[trial.number].state == TrialState.RUNNING
    time.sleep(2.5)  # its heartbeat stopped: Optuna's own stale check fails it
    assert fail_stale(study, cfg) == []  # not one without a heartbeat
    assert study.trials[trial.number].state == TrialState.FAIL
