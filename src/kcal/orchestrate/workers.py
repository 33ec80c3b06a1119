"""One pool of worker processes for a whole reproduction (``reproduce.jobs``).

The pool is :class:`concurrent.futures.ProcessPoolExecutor`; each task is one sweep trial or one
chunk of seed reruns, so no process idles while work remains. The parent only decides what to
submit next: a study's seed reruns (and Table 6's sample-size reruns of the same study) as soon as
the study holds its ``n_trials`` finished trials, otherwise one more trial of the first study (in the
plan's order) that still has a free slot. The slots themselves are Optuna's: a worker that finds the
study full marks its trial surplus (see :mod:`kcal.sweep.search`), and trials of workers elsewhere (other
machines on the same storage) count too. Each process trains with one torch thread
(``trainer.num_threads``).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import cached_property

import optuna
from omegaconf import DictConfig, OmegaConf

from kcal.core.errors import IncompleteError
from kcal.core.progress import Progress
from kcal.orchestrate.costs import Prediction, predict
from kcal.reruns.seeds import chunk_line, chunks, seed_dirs, seed_plan, summarize, train_seeds
from kcal.sweep.search import run_trial, trial_line, trial_seconds, write_best
from kcal.sweep.search_space import search_space
from kcal.sweep.studies import (
    COUNTED_FAILURES,
    STATUS,
    best_value,
    counted,
    fail_stale,
    open_checked_study,
    open_storage,
    open_study,
    storage_url,
    sweep_dir,
)

#: tasks waiting in the pool's queue per worker, beyond the one it runs: a worker that finishes a task
#: starts the next at once instead of waiting for this process to read the result and submit another
#: (quick reproductions' trials take ~1 s; the parent's turn-around per result was a good part of that)
QUEUED_PER_WORKER = 1

# one thread per worker process, BLAS/OpenMP included: oversubscribed cores run these small models
# many times slower (docs/speed.md, "One thread per process")
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def init_worker(parent: int) -> None:
    """Set up a pool worker: one torch thread, and an exit when ``parent`` (the pool's process) dies."""
    import torch

    torch.set_num_threads(1)
    threading.Thread(target=exit_with_parent, args=(parent,), daemon=True).start()


def exit_with_parent(parent: int, poll_s: float = 2.0) -> None:
    """Exit this process once its parent is no longer ``parent``.

    A pool's parent that is killed (SIGTERM, SIGKILL; Ctrl-C stops the workers by itself) would leave
    its workers training a trial to the end and then waiting forever, still sending the trial's
    heartbeat. Exiting stops the heartbeat, so the trial goes stale and a later run retries it."""
    while os.getppid() == parent:
        time.sleep(poll_s)
    os._exit(1)


@dataclass
class Stage:
    """One seed rerun of the plan; ``sweeps``: it also owns the sweep of its (dataset, objective)."""

    dataset: str
    label: str
    cfg: DictConfig
    sweeps: bool
    pending: list[list[int]] = field(default_factory=list)

    @property
    def study_key(self) -> tuple[str, str]:
        return self.dataset, str(self.cfg.seeds_run.best_from)

    @cached_property
    def prediction(self) -> Prediction:
        """Its predicted seconds of a trial and of a seed chunk (:func:`kcal.orchestrate.costs.predict`)."""
        return predict(self.cfg, self.label)

    def piece(self, family: str, n: int) -> tuple[tuple[str, str, str], float]:
        """(kind, predicted seconds) of ``n`` of its study's trials (``family="trial"``) or of a chunk of ``n``
        of its seeds (``"seeds"``): what :class:`kcal.core.progress.Progress` weighs and forecasts."""
        if family == "trial":
            return ("trial", self.dataset, str(self.cfg.seeds_run.best_from)), n * self.prediction.trial_s
        return ("seeds", self.dataset, self.label), self.prediction.chunk(n)


# ------------------------------------------------------------------------------------------------
# tasks (run in the pool's processes; plain containers in and strings out, so they pickle)
# ------------------------------------------------------------------------------------------------
#: this worker process's open study storages: opening one (an engine, Optuna's schema check through
#: alembic) cost ~70 ms, paid on every trial; the storage files stay in place while a pool runs
STORAGES: dict[tuple, optuna.storages.BaseStorage] = {}


def worker_storage(cfg: DictConfig) -> optuna.storages.BaseStorage:
    """The study storage of ``cfg``, opened once per worker process and setting."""
    s = cfg.sweep
    key = (storage_url(cfg), s.heartbeat_interval, s.get("grace_period"), s.max_retry)
    if key not in STORAGES:
        STORAGES[key] = open_storage(cfg)
    return STORAGES[key]


#: whether this worker process has run a task yet (its first paid for the imports: Lightning's ~3 s)
STARTED: list[bool] = []


def first_task() -> bool:
    """True the first time a worker process asks."""
    first = not STARTED
    STARTED.append(True)
    return first


def trial_task(cfg_container: dict, worker: int) -> tuple[str, int, float, float, bool]:
    """One trial of the study; (progress line, 1 if it counts towards n_trials else 0, its seconds, its CPU
    seconds, whether it was this worker's first task)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = OmegaConf.create(cfg_container)
    cfg.sweep.worker = worker
    study = open_study(cfg, storage=worker_storage(cfg))
    cpu = time.process_time()
    trial = run_trial(cfg, study, search_space(cfg), sweep_dir(cfg))
    cpu = time.process_time() - cpu
    counts = (
        trial.state == optuna.trial.TrialState.COMPLETE or trial.user_attrs.get(STATUS) in COUNTED_FAILURES
    )
    line = f"[{cfg.dataset.name}/{cfg.objective.name}] {trial_line(cfg, trial, study, cpu)}"
    return line, int(counts), trial_seconds(trial), cpu, first_task()


def seeds_task(base_container: dict, cfg_container: dict, seeds: list[int]) -> tuple[str, float, float, bool]:
    """Train one chunk of seeds; (the progress line, its seconds, its CPU seconds, whether it was this worker's
    first task)."""
    base, cfg = OmegaConf.create(base_container), OmegaConf.create(cfg_container)
    dirs = seed_dirs(cfg)
    t0, cpu = time.perf_counter(), time.process_time()
    train_seeds(base, seeds, [dirs[k] for k in seeds], cfg)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu
    return chunk_line(cfg, seeds, seconds, cpu), seconds, cpu, first_task()


# ------------------------------------------------------------------------------------------------
# the parent: what to submit next
# ------------------------------------------------------------------------------------------------
MAX_POOL_RESTARTS = 10
""":func:`run_pool` gives up when its pool broke this many times in a row with no task finished in between
(a worker that dies on every task, e.g. out of memory, would otherwise restart it for ever)."""


def run_pool(
    stages: list[Stage],
    jobs: int,
    progress: Progress,
    poll_s: float = 5.0,
    max_restarts: int = MAX_POOL_RESTARTS,
) -> None:
    """Run every stage's sweep trials and seed chunks on ``jobs`` processes; return when all are done.

    A worker process that dies (SIGKILL, the kernel's OOM killer) breaks the pool
    (:class:`~concurrent.futures.process.BrokenProcessPool`). Its other workers are killed too, a line says
    so, and a new pool plans the work again from the storage and the seed folders, as a resumed command
    would: the trials that were running go stale once their heartbeat is older than ``sweep.grace_period``
    and are retried (:mod:`kcal.sweep.search`), seeds without a ``metrics.json`` are trained again, and
    nothing finished runs twice. After ``max_restarts`` restarts in a row without a finished task it gives up
    with an :class:`~kcal.core.errors.IncompleteError` (one line, exit 2 from a command)."""
    finished = Counter()
    restarts = in_a_row = 0
    while True:
        before = finished["tasks"]
        try:
            return run_pool_once(stages, jobs, progress, poll_s, finished)
        except BrokenProcessPool as exc:
            for (
                child
            ) in multiprocessing.active_children():  # the broken pool's SIGTERM may not stop a seed chunk
                child.kill()
                child.join()
            in_a_row = 0 if finished["tasks"] > before else in_a_row + 1
            if in_a_row > max_restarts:
                raise IncompleteError(
                    f"the worker pool broke {in_a_row} times in a row with no task finished in between (a worker "
                    "that dies on every task, e.g. out of memory, or workers killed faster than a trial "
                    "finishes); what finished is kept: rerun the same command to resume (fewer "
                    "reproduce.jobs if memory is short)"
                ) from exc
            restarts += 1
            print(f"a worker process died ({exc}); pool started again (restart {restart_text(restarts, in_a_row)}); "
                  "its running trials are retried once their heartbeat is older than sweep.grace_period",
                  file=sys.stderr, flush=True)  # fmt: skip


def restart_text(restarts: int, in_a_row: int) -> str:
    return f"{restarts}" + (f", {in_a_row} in a row with no task finished" if in_a_row else "")


def run_pool_once(
    stages: list[Stage], jobs: int, progress: Progress, poll_s: float = 5.0, finished: Counter | None = None
) -> None:
    """One pool's run of :func:`run_pool`: it raises ``BrokenProcessPool`` when a worker dies; ``finished``
    counts the tasks that came back (``finished["tasks"]``)."""
    finished = Counter() if finished is None else finished
    studies = {s.study_key: s.cfg for s in stages if s.sweeps}
    owners = {s.study_key: s for s in stages if s.sweeps}
    opened = {key: open_checked_study(cfg) for key, cfg in studies.items()}  # creates (or checks) every study
    containers = {key: OmegaConf.to_container(cfg, resolve=True) for key, cfg in studies.items()}
    swept: set[tuple[str, str]] = set()
    in_flight: Counter = Counter()
    seed_queue: deque = deque()
    chunks_left: Counter = Counter()
    futures: dict[Future, tuple] = {}
    # when each task started, as far as this process can tell: tasks start in the order they were submitted,
    # each as a worker finishes its last one (the forecast counts what a running task has left, not all of it)
    queued: deque[Future] = deque()
    started: dict[Future, float] = {}
    waiting = False
    # (finished, running) of each study as last read from the storage. A study is read again only when
    # one of its trials came back here, or every poll_s (trials of other processes, dead workers' trials):
    # reading every study after every task cost the parent ~10% of a core on two workers.
    study_counts: dict[tuple[str, str], tuple[int, int]] = {}
    dirty, last_full = set(studies), 0.0

    def refresh() -> None:
        nonlocal last_full
        if time.monotonic() - last_full >= poll_s:
            dirty.update(studies)
            last_full = time.monotonic()
        for key in dirty:
            if key not in swept:
                fail_stale(opened[key], studies[key])
                study_counts[key] = counted(opened[key])
        dirty.clear()

    def study_complete(key) -> bool:
        return study_counts[key][0] >= int(studies[key].sweep.n_trials)

    def release_seeds() -> None:
        refresh()
        for key in studies:
            if key in swept or in_flight[key] or not study_complete(key):
                continue
            swept.add(key)
            if best_value(opened[key]) is not None:
                write_best(opened[key], sweep_dir(studies[key]))
            for st in stages:
                if st.study_key != key:
                    continue
                base, pending = seed_plan(st.cfg)
                base_c, cfg_c = OmegaConf.to_container(base), OmegaConf.to_container(st.cfg, resolve=True)
                groups = chunks(st.cfg, pending, parts=jobs)
                chunks_left[id(st)] = len(groups)
                seed_queue.extend((st, base_c, cfg_c, g) for g in groups)
                if not groups:
                    summarize(st.cfg)

    def submitted(fut: Future, what: tuple) -> None:
        futures[fut] = what
        queued.append(fut)
        start_queued()

    def start_queued() -> None:
        while queued and len(started) < jobs:
            started[queued.popleft()] = time.monotonic()

    def running() -> list[tuple]:
        out = []
        for fut in started:
            kind, what, group = futures[fut]
            piece = owners[what].piece("trial", 1) if kind == "trial" else what.piece("seeds", len(group))
            out.append((*piece, started[fut]))
        return out

    def next_trial():
        for key in studies:
            if key in swept:
                continue
            finished, running = study_counts[key]
            if finished + max(running, in_flight[key]) < int(studies[key].sweep.n_trials):
                return key
        return None

    ctx = multiprocessing.get_context("spawn")  # no fork of a process that holds torch's thread pools
    saved = {k: os.environ.get(k) for k in ONE_THREAD_ENV}
    os.environ.update(ONE_THREAD_ENV)  # read by the workers' libraries as they start
    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=ctx, initializer=init_worker, initargs=(os.getpid(),)
    ) as pool:
        try:
            while True:
                release_seeds()
                while len(futures) < jobs + QUEUED_PER_WORKER * jobs:
                    if seed_queue:
                        st, base_c, cfg_c, group = seed_queue.popleft()
                        submitted(pool.submit(seeds_task, base_c, cfg_c, group), ("seeds", st, group))
                        continue
                    key = next_trial()
                    if key is None:
                        break
                    worker = len(opened[key].get_trials(deepcopy=False)) + in_flight[key]
                    submitted(pool.submit(trial_task, containers[key], worker), ("trial", key, None))
                    in_flight[key] += 1
                if not futures:
                    if len(swept) == len(studies):
                        return
                    if not waiting:
                        left = ", ".join(f"{d}/{o}" for d, o in studies if (d, o) not in swept)
                        print(f"waiting for trials running elsewhere ({left}); a dead worker's trial is retried "
                              "once its heartbeat is older than sweep.grace_period", file=sys.stderr, flush=True)  # fmt: skip
                    waiting = True
                    time.sleep(poll_s)  # the studies' last trials run elsewhere: wait for them
                    continue
                waiting = False
                done, _ = wait(list(futures), timeout=poll_s, return_when=FIRST_COMPLETED)
                for fut in done:
                    started.pop(fut, None)
                start_queued()
                progress.running = running()
                for fut in done:
                    kind, what, group = futures.pop(fut)
                    if fut.exception() is None:
                        finished["tasks"] += 1
                    if kind == "trial":
                        in_flight[what] -= 1
                        dirty.add(what)
                        line, counts, seconds, cpu, first = fut.result()
                        progress.advance(counts, line, "trial", seconds, owners[what], cpu, warmup=first)
                    else:
                        line, seconds, cpu, first = fut.result()
                        progress.advance(len(group), line, "seeds", seconds, what, cpu, warmup=first)
                        chunks_left[id(what)] -= 1
                        if chunks_left[id(what)] == 0:
                            summarize(what.cfg)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
