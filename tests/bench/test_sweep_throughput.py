"""kcal.bench.sweep_throughput: the command a user would run, and throughput read from the study's storage."""

import sys
from datetime import datetime, timedelta

import optuna

from kcal.bench.sweep_throughput import Throughput, command, finished


def test_the_command_is_a_reproduction_of_one_pair_with_capped_epochs(tmp_path):
    cmd = command("adult", "xe_mmd", 8, 2, 25, tmp_path)
    assert cmd[:3] == [sys.executable, "-m", "kcal.orchestrate.reproduce"]
    for arg in ("task=classification", "profile=full", "reproduce.datasets=[adult]", "reproduce.objectives=[xe_mmd]",
                "sweep.n_trials=8", "reproduce.jobs=2", "trainer.max_epochs=25", f"root={tmp_path}"):  # fmt: skip
        assert arg in cmd
    assert "task=regression" in command("crime", "nll_mmd", 8, 2, 25, tmp_path)


def test_finished_trials_come_from_the_roots_storage_in_completion_order(tmp_path):
    assert finished(tmp_path) == []  # no storage yet: the run is starting
    study = optuna.create_study(
        study_name="crime__nll_mmd__paper", storage=f"sqlite:///{tmp_path / 'sweeps.db'}"
    )
    t0 = datetime(2026, 1, 1)
    for k, (start, end) in enumerate(((0, 30), (5, 12), (12, 20))):
        study.add_trial(optuna.trial.FrozenTrial(
            number=k, state=optuna.trial.TrialState.COMPLETE, value=0.0, datetime_start=t0 + timedelta(seconds=start),
            datetime_complete=t0 + timedelta(seconds=end), params={}, distributions={}, user_attrs={},
            system_attrs={}, intermediate_values={}, trial_id=k))  # fmt: skip
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))  # not finished
    done = finished(tmp_path)
    assert [(t.datetime_complete - t0).seconds for t in done] == [12, 20, 30]
    assert Throughput("crime:nll_mmd", "src", 3, 10.0, 12.0).per_hour == 1080.0
