"""What a pool worker process runs: one asked trial, or one chunk of seed reruns (plain containers in, plain
values out, so they pickle), and how a worker is set up (:func:`init_worker`).

A worker trains; it never asks the study for a trial nor tells it one (:mod:`kcal.sweep.ask_tell`: the pool's
parent does both), so what it trains does not depend on which worker it is or on how many there are. Each
worker trains with one torch thread, BLAS/OpenMP included (:data:`kcal.orchestrate.worker_server.ONE_THREAD_ENV`):
oversubscribed cores run these small models many times slower (docs/speed.md, "One thread per process"), and
the number of threads would otherwise follow the machine.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import optuna
from omegaconf import OmegaConf

from kcal.core.errors import TaskLost
from kcal.reruns.seeds import chunk_line, seed_dirs, train_seeds
from kcal.run.snapshot import resumed_record, resumed_seconds
from kcal.sweep.ask_tell import Outcome
from kcal.sweep.search import train_asked
from kcal.sweep.search_space import search_space
from kcal.sweep.studies import StorageCache, open_study, sweep_dir


def init_worker(parent: int, environ: dict[str, str]) -> None:
    """Set up a pool worker: the pool's process's ``environ``, one torch thread, Ctrl-C, and an exit when
    ``parent`` (the pool's process) dies.

    A worker forks from the fork server (:mod:`kcal.orchestrate.worker_server`), which holds the environment of
    the moment it started, possibly before the program set its own (a storage's password moved off the command line,
    :mod:`kcal.core.storage_url`); the worker takes the pool's instead, as a spawned one would. pebble's workers
    ignore SIGINT; Ctrl-C (SIGINT to the terminal's process group) interrupts a worker's task again, so the run
    stops as a whole."""
    os.environ.clear()
    os.environ.update(environ)
    import torch

    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=exit_with_parent, args=(parent,), daemon=True).start()


def exit_with_parent(parent: int, poll_s: float = 2.0) -> None:
    """Exit this process once ``parent`` (the pool's process) is gone: its own parent changed (a pool's fork
    server exits with the pool's process, and its workers are handed to another) or ``parent`` no longer runs.

    A pool's parent that is killed (SIGTERM, SIGKILL; Ctrl-C stops the workers by itself) would leave its
    workers training a task to the end and then waiting forever; a resumed run trains that task again."""
    first = os.getppid()
    while os.getppid() == first and runs(parent):
        time.sleep(poll_s)
    os._exit(1)


def runs(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie counts: its parent has not read its end yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    return True


#: this worker process's open study storages (:class:`kcal.sweep.studies.StorageCache`): a worker would otherwise
#: open one on every trial; the storage files stay in place while a pool runs
worker_storage = StorageCache()


#: whether this worker process has run a task yet (its first paid for the imports: Lightning's ~3 s)
STARTED: list[bool] = []


def first_task() -> bool:
    """True the first time a worker process asks."""
    first = not STARTED
    STARTED.append(True)
    return first


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The first line of an error's message (its type's name when it has none), cut at ``limit`` characters:
    Optuna's storage errors carry SQLAlchemy's whole statement below it."""
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:limit]


def trial_task(cfg_container: dict, number: int) -> tuple[Outcome, float, float, bool]:
    """Train the study's asked trial ``number``; (how it ended, its seconds, its CPU seconds, whether it was this
    worker's first task)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = OmegaConf.create(cfg_container)
    t0, cpu = time.perf_counter(), time.process_time()
    try:
        study = open_study(cfg, storage=worker_storage(cfg))
        outcome = train_asked(cfg, study, number, search_space(cfg), sweep_dir(cfg))
    # e.g. SQLite's "database is locked" past its busy timeout
    except optuna.exceptions.StorageInternalError as exc:
        raise TaskLost(f"[{cfg.dataset.name}/{cfg.objective.name}] trial #{number}: the study storage failed "
                       f"({first_line(exc)}); the trial is trained again") from None  # fmt: skip
    return outcome, time.perf_counter() - t0, time.process_time() - cpu, first_task()


def seeds_task(
    base_container: dict, cfg_container: dict, seeds: list[int]
) -> tuple[str, float, float, bool, float]:
    """Train one chunk of seeds; (the progress line, its seconds, its CPU seconds, whether it was this worker's
    first task, the seconds it trained before a stop when it went on from a snapshot)."""
    base, cfg = OmegaConf.create(base_container), OmegaConf.create(cfg_container)
    dirs = seed_dirs(cfg)
    t0, cpu = time.perf_counter(), time.process_time()
    train_seeds(base, seeds, [dirs[k] for k in seeds], cfg)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu
    trained = [dirs[k] for k in seeds]
    line = chunk_line(cfg, seeds, seconds, cpu, resumed_record(trained[0]))
    return line, seconds, cpu, first_task(), resumed_seconds(trained)
