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

import optuna
from omegaconf import DictConfig, OmegaConf

from kcal.core.progress import Progress
from kcal.data import get_spec
from kcal.reruns.seeds import chunk_line, chunk_units, chunks, seed_dirs, seed_plan, summarize, train_seeds
from kcal.sweep.search import run_trial, trial_line, write_best
from kcal.sweep.search_space import search_space, train_rows
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

    @property
    def cost(self) -> float:
        """The estimated cost of one of its trials (:func:`work_cost`)."""
        return work_cost(self.cfg)


REGULARISER_COST = {"mmd": 1.6, "mmce": 1.6, "kde": 2.6}
"""A trial with each calibration regulariser costs about this many trials without one: the geometric
mean, over the four classification datasets run at the full budget (heart-disease, breast-cancer,
dry-bean, online-shoppers), of the study's trial hours over XE's (``studies.csv``; for online-shoppers
its complete trials only, as trials stopped by a session's end count the pause there): XE + MMD 2.5,
1.8, 0.92, 1.6; XE + MMCE 3.3, 0.72, 2.8, 1.1; XE + ECE-KDE 5.6, 1.5, 3.0, 1.9. The per-epoch costs
alone (``kcal.bench.speed``: MMD 1.4-1.7) are mixed with how long the selected configurations train, so one
dataset's ratio can be off by 2x either way; ECE-KDE's bandwidth selection grows with the batch size."""


DRAWS_COST = 1.0 / 40
"""A regression MMD with M forecast draws costs ``1 + (M - 10) * DRAWS_COST`` times one with the default
10 (Table 6's reruns; fewer draws count as 10): fitted to the 50-seed stack epochs of blog that ``python -m
kcal.bench.speed --estimate-only --estimate-datasets blog`` measured on ``d073cab``, NLL 9.8 s, M = 10 15.5 s,
50 31.9 s, 100 47.9 s, 200 76.0 s (this rule: 15.5, 31, 50, 89; the regulariser's (M, n, n) kernel
tensors grow with M)."""


def work_cost(cfg: DictConfig) -> float:
    """A trial's (or a single seed's) estimated cost in units of an epoch pass over 1000 training rows
    without a regulariser: an epoch's minibatch steps scale with the training rows, and a regulariser
    multiplies them by its ``REGULARISER_COST`` (an MMD with many draws by :data:`DRAWS_COST` too).
    Progress counts work in these units, so a reproduction's ETA after crime's 1-2 s trials is not that of
    blog's 20-120 s ones, nor XE's that of XE + ECE-KDE, nor Table 6's M = 10 rerun that of M = 200."""
    reg = cfg.objective.get("regularizer")
    if not reg or not float(cfg.objective.weight):
        return train_rows(cfg) / 1000.0
    draws = cfg.objective.get("params", {}).get("num_samples") if reg == "mmd" else None
    if draws is None or get_spec(cfg.dataset.name).task != "regression":  # classes: no draws
        draws = 10
    return train_rows(cfg) / 1000.0 * REGULARISER_COST[reg] * (1.0 + max(int(draws) - 10, 0) * DRAWS_COST)


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


def trial_task(cfg_container: dict, worker: int) -> tuple[str, int]:
    """One trial of the study; (progress line, 1 if it counts towards n_trials else 0)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = OmegaConf.create(cfg_container)
    cfg.sweep.worker = worker
    study = open_study(cfg, storage=worker_storage(cfg))
    trial = run_trial(cfg, study, search_space(cfg), sweep_dir(cfg))
    counts = (
        trial.state == optuna.trial.TrialState.COMPLETE or trial.user_attrs.get(STATUS) in COUNTED_FAILURES
    )
    return f"[{cfg.dataset.name}/{cfg.objective.name}] {trial_line(cfg, trial, study)}", int(counts)


def seeds_task(base_container: dict, cfg_container: dict, seeds: list[int]) -> str:
    """Train one chunk of seeds; the progress line."""
    base, cfg = OmegaConf.create(base_container), OmegaConf.create(cfg_container)
    dirs = seed_dirs(cfg)
    t0 = time.perf_counter()
    train_seeds(base, seeds, [dirs[k] for k in seeds], cfg)
    return chunk_line(cfg, seeds, time.perf_counter() - t0)


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
    nothing finished runs twice. After ``max_restarts`` restarts in a row without a finished task the error
    is raised."""
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
                raise
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
    costs = {key: work_cost(cfg) for key, cfg in studies.items()}
    opened = {key: open_checked_study(cfg) for key, cfg in studies.items()}  # creates (or checks) every study
    containers = {key: OmegaConf.to_container(cfg, resolve=True) for key, cfg in studies.items()}
    swept: set[tuple[str, str]] = set()
    in_flight: Counter = Counter()
    seed_queue: deque = deque()
    chunks_left: Counter = Counter()
    futures: dict[Future, tuple] = {}
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
                        futures[pool.submit(seeds_task, base_c, cfg_c, group)] = ("seeds", st, group)
                        continue
                    key = next_trial()
                    if key is None:
                        break
                    worker = len(opened[key].get_trials(deepcopy=False)) + in_flight[key]
                    futures[pool.submit(trial_task, containers[key], worker)] = ("trial", key, None)
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
                    kind, what, group = futures.pop(fut)
                    if fut.exception() is None:
                        finished["tasks"] += 1
                    if kind == "trial":
                        in_flight[what] -= 1
                        dirty.add(what)
                        line, counts = fut.result()
                        progress.advance(counts * costs[what], line)
                    else:
                        line = fut.result()
                        progress.advance(chunk_units(len(group)) * what.cost, line)
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
