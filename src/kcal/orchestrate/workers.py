"""One pool of worker processes for a whole reproduction (``reproduce.jobs``).

The pool is :class:`pebble.ProcessPool`; each task is one sweep trial or one chunk of seed reruns, so no
process idles while work remains, and a worker that dies costs only its own task (:func:`run_pool`). The
parent only decides what to submit next: a study's seed reruns (and Table 6's sample-size reruns of the same
study) as soon as the study holds its ``n_trials`` finished trials, otherwise one more trial of the first study
(in the plan's order) that still has a free slot. The slots themselves are Optuna's: a worker that finds the
study full marks its trial surplus (see :mod:`kcal.sweep.search`), and trials of workers elsewhere (other
machines on the same storage) count too. Each process trains with one torch thread
(``trainer.num_threads``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import cached_property

import optuna
import pebble
from omegaconf import DictConfig, OmegaConf
from pebble import ProcessExpired

from kcal.core import layout
from kcal.core.errors import IncompleteError, TaskLost
from kcal.core.progress import Progress
from kcal.orchestrate.costs import Prediction, predict
from kcal.reruns.seeds import chunk_line, chunks, seed_dirs, seed_plan, summarize, train_seeds
from kcal.run.snapshot import resumed_record, resumed_seconds
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
    """Set up a pool worker: one torch thread, Ctrl-C, and an exit when ``parent`` (the pool's process) dies.

    pebble's workers ignore SIGINT; Ctrl-C (SIGINT to the terminal's process group) interrupts a worker's
    trial again, so Optuna stores it as failed and a resumed run retries it without waiting for its heartbeat
    to go stale."""
    import torch

    torch.set_num_threads(1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
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


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The first line of an error's message (its type's name when it has none), cut at ``limit`` characters:
    Optuna's storage errors carry SQLAlchemy's whole statement below it."""
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:limit]


def trial_task(cfg_container: dict, worker: int) -> tuple[str, int, float, float, bool]:
    """One trial of the study; (progress line, 1 if it counts towards n_trials else 0, its seconds, its CPU
    seconds, whether it was this worker's first task)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = OmegaConf.create(cfg_container)
    cfg.sweep.worker = worker
    where = f"[{cfg.dataset.name}/{cfg.objective.name}]"
    try:
        study = open_study(cfg, storage=worker_storage(cfg))
        cpu = time.process_time()
        trial = run_trial(cfg, study, search_space(cfg), sweep_dir(cfg))
    except TaskLost as exc:
        raise TaskLost(f"{where} {exc}") from None
    # e.g. SQLite's "database is locked" past its busy timeout
    except optuna.exceptions.StorageInternalError as exc:
        raise TaskLost(f"{where} the study storage failed ({first_line(exc)}); a trial it had begun goes stale and "
                       "is retried") from None  # fmt: skip
    cpu = time.process_time() - cpu
    counts = (
        trial.state == optuna.trial.TrialState.COMPLETE or trial.user_attrs.get(STATUS) in COUNTED_FAILURES
    )
    line = f"[{cfg.dataset.name}/{cfg.objective.name}] {trial_line(cfg, trial, study, cpu)}"
    return line, int(counts), trial_seconds(trial), cpu, first_task()


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


# ------------------------------------------------------------------------------------------------
# the parent: what to submit next, and what a dead worker costs
# ------------------------------------------------------------------------------------------------
MAX_DEATHS_PER_WORKER = 10
""":func:`run_pool` gives up at the worker death after this many per worker (``10 * jobs``) in a row with no task
finished in between (a worker that dies on every task, e.g. out of memory, or workers killed faster than their
tasks finish, would otherwise be replaced for ever); deaths that cost no task do not count. Per worker: a death
costs one worker's task while the others go on, so ``jobs`` deaths in a row cost about what one did when it
restarted the whole pool (the limit was 10 such restarts). A flat 10 stopped the long soak (8 workers, a kill
every 20 to 60 s) in its seed reruns: 8 chunks of 7 seeds trained for minutes side by side on 2 cores, and 11
kills came before the first of them finished."""


def death_cause(exc: ProcessExpired) -> str:
    """``pid 4242, SIGKILL`` (a signal) or ``pid 4242, exit code 1`` of a worker that died."""
    code = exc.exitcode
    if isinstance(code, int) and code < 0:
        try:
            how = signal.Signals(-code).name
        except ValueError:
            how = f"signal {-code}"
    else:
        how = f"exit code {code}"
    return f"pid {exc.pid}, {how}"


def stop_pool(pool: pebble.ProcessPool) -> None:
    """Stop ``pool`` now: drop its queued tasks and kill its workers (pebble's own stop sends each worker a
    SIGTERM and waits up to 3 s, one worker after the other, and a seed chunk does not stop on SIGTERM)."""
    pool.stop()
    for child in multiprocessing.active_children():
        child.kill()
    pool.join()


def run_pool(
    stages: list[Stage],
    jobs: int,
    progress: Progress,
    poll_s: float = 5.0,
    max_deaths: int = MAX_DEATHS_PER_WORKER,
) -> None:
    """Run every stage's sweep trials and seed chunks on ``jobs`` processes; return when all are done.

    The pool is :class:`pebble.ProcessPool`. A worker process that dies (SIGKILL, the kernel's OOM killer)
    costs only the task it ran: pebble starts a new worker in its place, the other workers go on with their
    tasks, the queued tasks wait for the next free worker, and a line says what died. A dead trial frees its
    slot; the trial itself goes stale once its heartbeat is older than ``sweep.grace_period`` and is retried
    (:mod:`kcal.sweep.search`). A dead chunk of seeds is queued again with those of its seeds that have no
    ``metrics.json``. A worker that dies while no task of the pool runs (e.g. while the workers start) makes
    pebble stop the whole pool (``BrokenProcessPool``): a new pool takes its place and the queued tasks, none
    of which had started, are queued again (a pool stopped while this process only waits for trials running
    elsewhere is replaced once there is work for it). After ``max_deaths * jobs`` deaths in a row that cost a task (its
    worker's, or the queued ones of a stopped pool) with no task finished in between, the next one ends it with
    an :class:`~kcal.core.errors.IncompleteError` (one line, exit 2 from a command); what finished is kept and a
    rerun resumes. A task lost through no fault of its own (:class:`~kcal.core.errors.TaskLost`: a starved
    worker's trial failed as stale and retried by another process, or a worker's study storage busy past its
    timeout) and a failed read of the studies here count the same way and cost only that task or that poll."""
    studies = {s.study_key: s.cfg for s in stages if s.sweeps}
    owners = {s.study_key: s for s in stages if s.sweeps}
    opened = {key: open_checked_study(cfg) for key, cfg in studies.items()}  # creates (or checks) every study
    containers = {key: OmegaConf.to_container(cfg, resolve=True) for key, cfg in studies.items()}
    swept: set[tuple[str, str]] = set()
    in_flight: Counter = Counter()
    # (stage, its base config, its config, seeds) of the seed chunks to submit
    seed_queue: deque = deque()
    chunks_left: Counter = Counter()
    # each submitted task: ("trial", study key, None, ()) or ("seeds", stage, seeds, (base, cfg))
    futures: dict[Future, tuple] = {}
    # when each task started, as far as this process can tell: tasks start in the order they were submitted,
    # each as a worker finishes its last one (the forecast counts what a running task has left, not all of it)
    queued: deque[Future] = deque()
    started: dict[Future, float] = {}
    waiting = False
    # worker deaths ("all"; "in_a_row": with no task finished since), pools pebble stopped ("pools") and
    # the tasks of a stopped pool queued again ("unrun")
    deaths: Counter = Counter()
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
            # the storage first: a read that fails leaves the key to retry
            if best_value(opened[key]) is not None:
                write_best(opened[key], sweep_dir(studies[key]))
            swept.add(key)
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

    def submit(pool: pebble.ProcessPool, fn, args: tuple, task: tuple) -> bool:
        """Schedule ``fn(*args)`` as ``task``; False when pebble stopped the pool in the meantime."""
        try:
            fut = pool.schedule(fn, args=args)
        except RuntimeError:
            if pool.active:
                raise
            return False
        futures[fut] = task
        queued.append(fut)
        start_queued()
        return True

    def start_queued() -> None:
        while queued and len(started) < jobs:
            started[queued.popleft()] = time.monotonic()

    def running() -> list[tuple]:
        out = []
        for fut in started:
            kind, what, group, _ = futures[fut]
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

    def fill(pool: pebble.ProcessPool) -> None:
        """Submit tasks until every worker has one running and QUEUED_PER_WORKER waiting."""
        while len(futures) < jobs + QUEUED_PER_WORKER * jobs:
            if seed_queue:
                st, base_c, cfg_c, group = seed_queue[0]
                task = ("seeds", st, group, (base_c, cfg_c))
                if not submit(pool, seeds_task, (base_c, cfg_c, group), task):
                    return
                seed_queue.popleft()
                continue
            key = next_trial()
            if key is None:
                return
            worker = len(opened[key].get_trials(deepcopy=False)) + in_flight[key]
            if not submit(pool, trial_task, (containers[key], worker), ("trial", key, None, ())):
                return
            in_flight[key] += 1

    def chunk_done(st: Stage) -> None:
        chunks_left[id(st)] -= 1
        if chunks_left[id(st)] == 0:
            summarize(st.cfg)

    def queue_again(task: tuple) -> tuple[int, int]:
        """Give back what ``task`` held: a trial's slot, or its chunk's unfinished seeds to the front of the
        queue; (its seeds that finished, those queued again)."""
        kind, what, group, extra = task
        if kind == "trial":
            in_flight[what] -= 1
            dirty.add(what)
            return 0, 0
        dirs = seed_dirs(what.cfg)
        left = [k for k in group if not layout.is_finished(dirs[k])]
        if left:
            seed_queue.appendleft((what, *extra, left))
        else:
            chunk_done(what)
        return len(group) - len(left), len(left)

    def death(what: str = "death") -> str:
        """Count a setback (``what``: a worker's death, a task lost, a failed read of the studies); the note for
        its line, or the error when too many came in a row with no task finished."""
        deaths[what] += 1
        deaths["in_a_row"] += 1
        if deaths["in_a_row"] > max_deaths * jobs:
            raise IncompleteError(
                f"{deaths['in_a_row']} tasks lost in a row ({max_deaths} per worker of {jobs}) with no task "
                "finished in between: worker processes that died (e.g. out of memory on every task, or killed "
                "faster than their tasks finish) or a study storage that keeps failing; what finished is kept: "
                "rerun the same command to resume (fewer reproduce.jobs if memory is short)"
            )
        in_a_row = deaths["in_a_row"]
        return f"{what} {deaths[what]}" + (f", {in_a_row} in a row with no task finished" * (in_a_row > 1))

    def lost(task: tuple, exc: TaskLost) -> None:
        """``task`` could not finish through no fault of its own (:class:`~kcal.core.errors.TaskLost`): its
        slot is free again and the others go on."""
        queue_again(task)
        print(
            f"a task was lost: {exc}; the other workers go on ({death('lost task')})",
            file=sys.stderr,
            flush=True,
        )

    def died(task: tuple, exc: ProcessExpired) -> None:
        """The worker that ran ``task`` died; pebble has started another in its place."""
        note = death()
        kind, what, group, _ = task
        done, left = queue_again(task)
        if kind == "trial":
            print(f"a worker process died ({death_cause(exc)}) while it ran a trial of {what[0]}/{what[1]}; a new "
                  f"worker took its place and the others go on ({note}); the trial is retried once its "
                  "heartbeat is older than sweep.grace_period", file=sys.stderr, flush=True)  # fmt: skip
            return
        span = f"seed {group[0]}" if len(group) == 1 else f"seeds {group[0]}-{group[-1]}"
        line = (f"a worker process died ({death_cause(exc)}) while it ran {span} of {what.dataset}/{what.label}; a "
                f"new worker took its place and the others go on ({note}); {done} of its seeds had finished, "
                f"{left} queued again")  # fmt: skip
        if done:
            progress.advance(done, line, "seeds", None, what)
        else:
            print(line, file=sys.stderr, flush=True)

    def came_back(fut: Future, task: tuple) -> None:
        """A task's future is done: its result, its worker's death, or a task of a pool pebble stopped."""
        exc = fut.exception()
        if isinstance(exc, ProcessExpired):
            return died(task, exc)
        if isinstance(exc, TaskLost):
            return lost(task, exc)
        if isinstance(exc, BrokenProcessPool):  # queued when pebble stopped its pool: it never ran
            queue_again(task)
            deaths["unrun"] += 1
            return
        kind, what, group, _ = task
        if kind == "trial":
            in_flight[what] -= 1
            dirty.add(what)
            line, counts, seconds, cpu, first = fut.result()  # raises the task's own error
            progress.advance(counts, line, "trial", seconds, owners[what], cpu, warmup=first)
        else:
            line, seconds, cpu, first, before = fut.result()
            progress.advance(len(group), line, "seeds", seconds, what, cpu, warmup=first, before=before)
            chunk_done(what)
        deaths["in_a_row"] = 0

    def new_pool() -> pebble.ProcessPool:
        return pebble.ProcessPool(jobs, initializer=init_worker, initargs=(os.getpid(),), context=ctx)

    def restart(pool: pebble.ProcessPool) -> pebble.ProcessPool:
        """pebble stopped ``pool`` (a worker died while none of its tasks ran): stop its workers, queue its
        tasks again (none had started; a result that came back still counts) and start a new pool. The death
        counts towards the limit (``max_deaths * jobs``) when it cost queued tasks; one while the pool had none (it waited for
        trials running elsewhere) costs nothing, like that of an idle worker which pebble replaces silently
        while other workers run tasks."""
        stop_pool(pool)
        deaths["pools"] += 1
        for fut in list(futures):
            task = futures.pop(fut)
            forget(fut)
            if fut.done() and not isinstance(fut.exception(), BrokenProcessPool):
                came_back(fut, task)  # came back before pebble stopped the pool
            else:  # queued, or (pebble's races) never answered: its worker is gone now
                queue_again(task)
                deaths["unrun"] += 1
        unrun, deaths["unrun"] = deaths["unrun"], 0
        note = death() if unrun else "no task lost"
        print(f"a worker process died while no task of the pool ran, which stops a pebble pool: pool started "
              f"again (restart {deaths['pools']}; {note}); its {unrun} queued tasks are queued again",
              file=sys.stderr, flush=True)  # fmt: skip
        return new_pool()

    def forget(fut: Future) -> None:
        """Drop a future that came back from the start bookkeeping."""
        started.pop(fut, None)
        if fut in queued:
            queued.remove(fut)

    ctx = multiprocessing.get_context("spawn")  # no fork of a process that holds torch's thread pools
    saved = {k: os.environ.get(k) for k in ONE_THREAD_ENV}
    os.environ.update(ONE_THREAD_ENV)  # read by the workers' libraries as they start (replacements too)
    pool = new_pool()
    try:
        while True:
            try:
                release_seeds()
                if not pool.active and (futures or seed_queue or next_trial() is not None):
                    pool = restart(pool)  # only when there is work for it: no new workers to wait with
                stopped = False
                if pool.active:
                    fill(pool)
                    stopped = not pool.active  # pebble stopped it while the tasks went in
            # e.g. "database is locked" past its busy timeout: this poll is lost, not the run
            except optuna.exceptions.StorageInternalError as exc:
                print(f"reading the studies failed ({first_line(exc)}); read again in {poll_s:g} s ({death('storage')})",
                      file=sys.stderr, flush=True)  # fmt: skip
                time.sleep(poll_s)
                continue
            if stopped:
                continue
            if not futures:
                if len(swept) == len(studies):
                    pool.close()
                    pool.join()
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
                forget(fut)
            start_queued()
            progress.running = running()
            for fut in done:
                came_back(fut, futures.pop(fut))
    except BaseException:
        stop_pool(pool)
        raise
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
