"""One pool of worker processes for a whole reproduction (``reproduce.jobs``): :func:`run_workers`.

The parts are units of their own: the order of the tasks and the asking and telling of every trial
(:mod:`kcal.orchestrate.schedule`), the processes (:mod:`kcal.orchestrate.dispatch`), what runs in them
(:mod:`kcal.orchestrate.tasks`) and what a lost task costs (:mod:`kcal.orchestrate.recovery`). This module only
joins them: it fills the pool from the schedule, hands what comes back to the schedule and the progress, and
gives a lost task back.

Every trial is asked and told here, in the deterministic sweep's order (:mod:`kcal.sweep.ask_tell`): the same
trials and results at any ``reproduce.jobs``, and after any kill (a resumed run trains the asked trials that
were not told, under their own numbers, and the seeds without ``metrics.json``).
"""

from __future__ import annotations

import sys
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import optuna
from pebble import ProcessExpired

from kcal.core.errors import TaskLost
from kcal.core.progress import Progress
from kcal.orchestrate.dispatch import Dispatcher
from kcal.orchestrate.recovery import MAX_DEATHS_PER_WORKER, Setbacks, death_cause
from kcal.orchestrate.schedule import Schedule, Stage, Task, counts
from kcal.orchestrate.tasks import first_line, seeds_task, trial_task
from kcal.orchestrate.worker_server import one_thread_env
from kcal.sweep.search import trial_line

__all__ = ["Stage", "run_workers"]


def run_workers(
    stages: list[Stage],
    jobs: int,
    progress: Progress,
    poll_s: float = 5.0,
    max_deaths: int = MAX_DEATHS_PER_WORKER,
) -> None:
    """Run every stage's trials and seed chunks on ``jobs`` processes; return when all are done.

    A dead worker costs its task, which is trained again (:mod:`kcal.orchestrate.recovery`); a pool pebble
    stopped is replaced and the tasks it held are queued again; a failed read or write of the studies costs
    that step. After ``max_deaths * jobs`` setbacks in a row the run stops with one line; a rerun resumes."""
    setbacks = Setbacks(jobs, max_deaths)
    with one_thread_env():
        schedule = Schedule(stages, jobs)
        pool = Dispatcher(jobs)
        try:
            while not (schedule.complete() and not pool.futures):
                step(schedule, pool, setbacks, progress, poll_s)
            pool.close()
        except BaseException:
            pool.stop()
            raise


def step(schedule: Schedule, pool: Dispatcher, setbacks: Setbacks, progress: Progress, poll_s: float) -> None:
    """One turn: replace a stopped pool, fill it, wait for what comes back and hand it on."""
    try:
        if not pool.active:
            restarted(schedule, pool, setbacks, progress)
        fill(schedule, pool)
    # e.g. "database is locked" past its busy timeout: this turn is lost, not the run
    except optuna.exceptions.StorageInternalError as exc:
        note = setbacks.count("storage")
        print(
            f"the study storage failed ({first_line(exc)}); tried again ({note})", file=sys.stderr, flush=True
        )
        return
    if not pool.futures:
        if pool.active and not schedule.complete():  # a stopped pool is replaced on the next turn
            raise RuntimeError("the schedule has tasks left but none it can hand out and none in training")
        return
    for task, fut in pool.collect(poll_s):
        came_back(schedule, pool, setbacks, progress, task, fut)
    progress.running = [(*task.piece(), started) for task, started in pool.running()]


def fill(schedule: Schedule, pool: Dispatcher) -> None:
    """Hand tasks to the pool until it has no room or the schedule has none to give."""
    while pool.has_room():
        task = schedule.next_task()
        if task is None:
            return
        if task.kind == "trial":
            args = (schedule.containers[task.stage.study_key], task.number)
            went_in = pool.submit(trial_task, args, task)
        else:
            went_in = pool.submit(seeds_task, (*task.containers, task.seeds), task)
        if not went_in:  # pebble stopped the pool meanwhile: the next turn replaces it
            schedule.give_back(task)
            return


def came_back(
    schedule: Schedule, pool: Dispatcher, setbacks: Setbacks, progress: Progress, task: Task, fut: Future
) -> None:
    """A task's future is done: its result, its worker's death, a lost task, or a task of a stopped pool."""
    exc = fut.exception()
    if isinstance(exc, ProcessExpired | TaskLost | BrokenProcessPool):
        return lost(schedule, setbacks, progress, task, exc)
    if task.kind == "trial":
        outcome, seconds, cpu, first = fut.result()
        trial, study = schedule.trial_done(task, outcome)
        key = task.stage.study_key
        line = f"[{key[0]}/{key[1]}] {trial_line(task.stage.cfg, trial, study, cpu, seconds)}"
        progress.advance(counts(trial), line, "trial", seconds, task.stage, cpu, warmup=first)
    else:
        line, seconds, cpu, first, before = fut.result()
        progress.advance(
            len(task.seeds), line, "seeds", seconds, task.stage, cpu, warmup=first, before=before
        )
        schedule.seeds_done(task)
    setbacks.finished()


def lost(schedule: Schedule, setbacks: Setbacks, progress: Progress, task: Task, exc: BaseException) -> None:
    """``task`` did not finish: it goes back to the schedule, and a line says why (a stopped pool's task that
    never ran says nothing: :func:`restarted` counts those)."""
    done, left = schedule.give_back(task)
    if isinstance(exc, BrokenProcessPool):
        return
    if isinstance(exc, TaskLost):
        note = setbacks.count("lost task")
        print(f"a task was lost: {exc}; the other workers go on ({note})", file=sys.stderr, flush=True)
        return
    note = setbacks.count()
    line = (f"a worker process died ({death_cause(exc)}) while it ran {task.span()}; a new worker took its place "
            f"and the others go on ({note}); ")  # fmt: skip
    if task.kind == "trial":
        print(line + "the trial is trained again", file=sys.stderr, flush=True)
    elif done:
        progress.advance(done, line + f"{done} of its seeds had finished, {left} queued again", "seeds", None,
                         task.stage)  # fmt: skip
    else:
        print(line + f"0 of its seeds had finished, {left} queued again", file=sys.stderr, flush=True)


def restarted(schedule: Schedule, pool: Dispatcher, setbacks: Setbacks, progress: Progress) -> None:
    """pebble stopped the pool (a worker died while none of its tasks ran): a new pool, the old one's tasks
    queued again (a result that came back still counts). The death counts as a setback when it cost tasks."""
    unrun = 0
    for task, fut in pool.restart():
        if fut is not None:
            came_back(schedule, pool, setbacks, progress, task, fut)
        else:
            schedule.give_back(task)
            unrun += 1
    note = setbacks.count() if unrun else "no task lost"
    print(f"a worker process died while no task of the pool ran, which stops a pebble pool: pool started again "
          f"({note}); its {unrun} queued tasks are queued again", file=sys.stderr, flush=True)  # fmt: skip
