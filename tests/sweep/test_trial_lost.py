"""kcal.sweep.search.run_trial: a trial that another process failed as stale while its worker trained it (the
worker starved or paused past sweep.grace_period) ends that worker's task with TaskLost, one line, instead of
Optuna's "Cannot tell a FAIL trial"; any other error of the objective is still raised as it is. A trial's first
heartbeat is recorded before its objective's first write, so a worker killed at any point leaves a trial that goes
stale."""

import contextlib
import time

import optuna
import pytest

import kcal.run
from kcal.core.errors import TaskLost
from kcal.sweep.search import run_trial, taken_over
from kcal.sweep.search_space import search_space
from kcal.sweep.studies import STARTED, fail_stale, open_storage

from ..common import compose_cfg


def test_a_trial_failed_by_another_process_while_it_trained_is_a_lost_task(monkeypatch, tmp_path):
    cfg = compose_cfg("sweep", "dataset=heart-disease", "objective=xe")
    study = optuna.create_study(direction="maximize")

    def failed_meanwhile(run_cfg, out, epoch_hook=None):
        (running,) = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
        study.tell(running.number, state=optuna.trial.TrialState.FAIL)  # what fail_stale does elsewhere
        return {"status": "ok", "val/acc": 0.5, "val/nll": 0.7}

    monkeypatch.setattr(kcal.run, "run", failed_meanwhile)  # run_trial imports it when a trial starts
    with pytest.raises(
        TaskLost, match=r"^trial #0 was failed by another process while this worker trained it"
    ):
        run_trial(cfg, study, search_space(cfg), tmp_path)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]


def test_an_objectives_own_error_is_not_a_lost_task(monkeypatch, tmp_path):
    cfg = compose_cfg("sweep", "dataset=heart-disease", "objective=xe")

    def broken(run_cfg, out, epoch_hook=None):
        raise ValueError("a bug of its own")

    monkeypatch.setattr(kcal.run, "run", broken)
    with pytest.raises(ValueError, match="a bug of its own"):
        run_trial(cfg, optuna.create_study(direction="maximize"), search_space(cfg), tmp_path)


def test_which_errors_mean_another_process_finished_the_trial():
    assert taken_over(ValueError("Cannot tell a FAIL trial."))
    assert taken_over(optuna.exceptions.UpdateFinishedTrialError("Trial#3 has already finished"))
    assert not taken_over(ValueError("Cannot tell with state TrialState.RUNNING."))
    assert not taken_over(RuntimeError("Cannot tell a FAIL trial."))


class Killed(BaseException):
    """A worker's death mid-objective: Optuna's optimize neither catches it nor tells the trial."""


def test_a_worker_killed_before_the_heartbeat_thread_beat_leaves_a_trial_that_goes_stale(
    monkeypatch, tmp_path
):
    # Optuna's heartbeat thread records its first beat when it gets the storage's lock; on a loaded machine
    # the objective's writes came first, and a worker killed then left a started trial without a heartbeat,
    # which no check failed: the study waited on it for ever (a CI run, test_sigkill_of_one_of_two_workers)
    cfg = compose_cfg("sweep", "dataset=heart-disease", "objective=xe", f"root={tmp_path}",
                      "sweep.heartbeat_interval=1", "sweep.grace_period=1")  # fmt: skip
    study = optuna.create_study(study_name="s", storage=open_storage(cfg), direction="maximize")
    # a heartbeat thread that has not beaten yet when its worker dies
    monkeypatch.setattr(optuna.study._optimize, "get_heartbeat_thread", lambda *_: contextlib.nullcontext())

    def killed(run_cfg, out, epoch_hook=None):
        raise Killed

    monkeypatch.setattr(kcal.run, "run", killed)
    with pytest.raises(Killed):
        run_trial(cfg, study, search_space(cfg), tmp_path)
    (trial,) = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert trial.user_attrs[STARTED] == trial.number
    time.sleep(2.5)
    fail_stale(study, cfg)
    assert study.trials[trial.number].state == optuna.trial.TrialState.FAIL
    (retry,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert retry.params == trial.params
