"""The pool's parts, each alone: the schedule's order (no process trains here: outcomes are told by hand), the
count of setbacks, and the dispatcher's processes."""

import os
import signal
import time

import pytest
from pebble import ProcessExpired

from kcal.core.errors import IncompleteError
from kcal.orchestrate.recovery import Setbacks, death_cause
from kcal.sweep.ask_tell import Outcome

from ..data.conftest import needs
from .test_workers import heart_disease_stage


def schedule_of(tmp_path, *overrides, jobs: int = 2):
    from kcal.orchestrate.schedule import Schedule

    return Schedule([heart_disease_stage(tmp_path, *overrides)], jobs)


@needs("heart-disease")
def test_a_study_has_one_trial_in_training_at_a_time_and_a_lost_one_comes_back_under_its_number(tmp_path):
    schedule = schedule_of(tmp_path, "sweep.n_trials=3", "seeds_run.n_seeds=4")
    first = schedule.next_task()
    assert (first.kind, first.number) == ("trial", 0) and schedule.next_task() is None  # batch 1: wait for it
    schedule.give_back(first)  # its worker died
    again = schedule.next_task()
    assert again.number == 0 and schedule.next_task() is None
    trial, _ = schedule.trial_done(again, Outcome("complete", 0.9))
    assert trial.number == 0 and trial.state.name == "COMPLETE"
    for n in (1, 2):
        task = schedule.next_task()
        assert task.number == n
        schedule.trial_done(task, Outcome("fail" if n == 1 else "complete", 0.8))
    # a failed trial of no reason of its own counts for nothing: a fourth is asked in its place
    fourth = schedule.next_task()
    assert fourth.number == 3 and not schedule.complete()
    schedule.trial_done(fourth, Outcome("complete", 0.95))
    seeds = [schedule.next_task(), schedule.next_task()]  # the study is done: best.json, then its seeds
    assert [t.seeds for t in seeds] == [[0, 1], [2, 3]] and schedule.complete()
    assert (tmp_path / "heart-disease" / "xe" / "sweep" / "best.json").is_file()
    assert schedule.give_back(seeds[0]) == (0, 2) and not schedule.complete()  # its seeds queued again
    assert schedule.next_task().seeds == [0, 1]


@needs("heart-disease")
def test_a_batch_above_one_puts_that_many_trials_of_a_study_in_training(tmp_path):
    schedule = schedule_of(tmp_path, "sweep.n_trials=5", "sweep.batch=3")
    batch = [schedule.next_task() for _ in range(4)]
    assert [t.number for t in batch[:3]] == [0, 1, 2] and batch[3] is None
    for t in batch[:3]:
        schedule.trial_done(t, Outcome("complete", 0.5))
    assert [schedule.next_task().number for _ in range(2)] == [3, 4] and schedule.next_task() is None


@needs("heart-disease")
def test_the_studies_of_one_root_share_one_opened_storage(tmp_path, monkeypatch):
    """Opening a storage costs an engine and Optuna's schema check (~0.1 s each): the schedule of several studies
    opens their root's once."""
    from kcal.orchestrate.schedule import Schedule
    from kcal.sweep import studies

    opened = []
    real = studies.open_storage
    monkeypatch.setattr(studies, "open_storage", lambda cfg: opened.append(cfg.root) or real(cfg))
    stages = [heart_disease_stage(tmp_path, objective=o) for o in ("xe", "xe_mmd", "xe_mmce")]
    schedule = Schedule(stages, 2)
    assert len(schedule.studies) == 3 and opened == [str(tmp_path)]


def test_setbacks_in_a_row_stop_the_run_in_one_line_and_a_finished_task_resets_the_row():
    setbacks = Setbacks(jobs=2, max_deaths=2)
    assert (
        setbacks.count() == "death 1"
        and setbacks.count("lost task") == "lost task 1, 2 in a row with no task finished"
    )
    setbacks.finished()
    for _ in range(4):
        setbacks.count()
    with pytest.raises(IncompleteError, match=r"^5 tasks lost in a row \(2 per worker of 2\)") as err:
        setbacks.count()
    assert "\n" not in str(err.value)


def test_a_death_is_named_by_its_signal_or_exit_code():
    assert death_cause(ProcessExpired("gone", code=-signal.SIGKILL, pid=42)) == "pid 42, SIGKILL"
    assert death_cause(ProcessExpired("gone", code=1, pid=42)) == "pid 42, exit code 1"


WAIT_S = 300.0


def pid_then_sleep(path: str, seconds: float) -> None:
    """A task that says which worker runs it, then sleeps."""
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)


def test_the_dispatcher_says_what_runs_and_what_came_back_and_replaces_a_dead_worker(tmp_path):
    from kcal.orchestrate.dispatch import Dispatcher

    pool, where = Dispatcher(2), tmp_path / "pid"
    try:
        assert pool.submit(time.sleep, (0.5,), "a") and pool.submit(os.getpid, (), "b")
        assert pool.submit(pid_then_sleep, (str(where), 60), "c") and pool.submit(time.sleep, (0,), "d")
        assert not pool.has_room()  # two running, and one waiting per worker
        assert {task for task, _ in pool.running()} == {"a", "b"}
        back = {}
        while len(back) < 3:
            back.update(dict(pool.collect(5.0)))
        assert set(back) == {"a", "b", "d"} and [t for t, _ in pool.running()] == ["c"]
        # the waits below end as soon as what they wait for happens; their bound only stops a hung pool (30 s left
        # little room for a new worker's start, which imports torch, on a loaded machine)
        deadline = time.monotonic() + WAIT_S
        while not where.is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(int(where.read_text()), signal.SIGKILL)
        ((task, fut),) = pool.collect(WAIT_S)
        assert task == "c" and isinstance(fut.exception(), ProcessExpired)
        assert (
            pool.submit(os.getpid, (), "e") and pool.collect(WAIT_S)[0][0] == "e"
        )  # a new worker in its place
    finally:
        pool.stop()


@needs("heart-disease")
def test_a_rerun_splits_over_the_workers_only_when_its_study_is_the_last_to_finish(tmp_path):
    """While another study sweeps, its trials keep the other worker busy: a rerun released then trains whole
    (one chunk's fixed cost); the last study's rerun is split over the workers, so none waits at the end."""
    from kcal.orchestrate.schedule import Schedule

    def stage(objective):
        return heart_disease_stage(tmp_path, "sweep.n_trials=1", "seeds_run.n_seeds=4", "seeds_run.vectorized=true",
                                   objective=objective)  # fmt: skip

    schedule = Schedule([stage("xe"), stage("xe_mmce")], jobs=2)
    trials = [schedule.next_task(), schedule.next_task()]
    assert {t.kind for t in trials} == {"trial"} and schedule.next_task() is None
    first, last = trials
    schedule.trial_done(first, Outcome("complete", 0.5))
    whole = schedule.next_task()  # the other study still sweeps: its rerun in one chunk
    assert (whole.kind, whole.stage.label, whole.seeds) == ("seeds", first.stage.label, [0, 1, 2, 3])
    schedule.trial_done(last, Outcome("complete", 0.5))
    split = [schedule.next_task(), schedule.next_task()]
    assert [(t.stage.label, t.seeds) for t in split] == [
        (last.stage.label, [0, 1]),
        (last.stage.label, [2, 3]),
    ]
    assert schedule.complete()
