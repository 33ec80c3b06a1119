"""A sweep's Optuna study: where it is stored, how it is opened (checked against its fingerprint), how its
trials are counted, and which trial is selected.

* The study lives in a database (default SQLite ``<root>/sweeps.db``; any SQLAlchemy URL, e.g.
  ``sweep.storage=postgresql://...``), so re-running a sweep resumes it and several workers, started
  independently on one or more machines, share it. The embedded SQLite file is opened in WAL mode with a
  60 s busy timeout and ``synchronous=NORMAL`` (:func:`sqlite_connection`; ``src/kcal/bench/storage_locks.py``
  measures it against Optuna's journal file storage, which has no heartbeats); a server URL serves several
  machines.
* A study is named ``sweep.study_name`` plus the selection's suffix (:mod:`kcal.core.layout`); under
  ``sweep.selection=pareto`` it is multi-objective (:mod:`kcal.sweep.selection`).
* :func:`counted` is what a study's ``sweep.n_trials`` counts: completed and pruned trials and trials that failed for
  a reason of their own (:data:`COUNTED_FAILURES`), unless Optuna re-queued them after a stale heartbeat.
* :data:`STATUS` is the user attribute that records how a trial ended.
"""

from __future__ import annotations

import functools
import shutil
import sqlite3
import time
import warnings
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import sqlalchemy.event
import sqlalchemy.exc
from omegaconf import DictConfig
from optuna.trial import TrialState

from kcal.core import layout
from kcal.core.errors import ConfigError, IncompleteError
from kcal.core.storage_url import engine_url, mask_text, masked
from kcal.data import get_spec
from kcal.sweep.fingerprint import check_study, stamp_study
from kcal.sweep.pruners import make_pruner
from kcal.sweep.samplers import make_sampler
from kcal.sweep.search_space import search_space
from kcal.sweep.selection import directions, is_pareto, name_objectives, selected, selection_of

STATUS = "kcal_status"  # user attr: "ok" | "pruned" | "diverged" | "invalid_config" | "surplus" ("stale": older studies)
COUNTED_FAILURES = ("diverged", "invalid_config")  # failed trials that still use up a slot of n_trials
STARTED = "started"  # user attr: the trial's own number, the first thing its objective records
SQLITE_TIMEOUT_S = 60
OPEN_ATTEMPTS = 4  # a lost schema race needs one more; a refused connection is reported after the last


class StorageUnavailable(ConfigError):
    """``sweep.storage`` cannot be opened: one line on stderr, exit status 2."""


def storage_url(cfg: DictConfig) -> str:
    if cfg.sweep.storage:
        return str(cfg.sweep.storage)
    Path(cfg.root).mkdir(parents=True, exist_ok=True)
    return layout.sqlite_url(cfg.root)


def open_storage(cfg: DictConfig) -> optuna.storages.RDBStorage:
    """The study's database with heartbeats and the retry of stale trials; SQLite in WAL mode.

    Several processes that open a new database at the same moment race to create Optuna's schema: the
    loser fails with a UNIQUE constraint error, or, on PostgreSQL, with "type/table ... already exists"
    when the winner's object appears between its existence check and its ``CREATE``; the schema then
    exists, so opening it again succeeds (see :func:`lost_schema_race`). A storage that cannot be
    opened (no server, a refused connection, a driver not installed, a malformed URL) is a
    :class:`StorageUnavailable`, its password masked.
    """
    url = storage_url(cfg)
    engine_kwargs = {}
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        use_wal(url[len("sqlite:///") :])
        engine_kwargs = {"creator": functools.partial(sqlite_connection, url[len("sqlite:///") :])}
    grace = cfg.sweep.get("grace_period")
    for attempt in range(OPEN_ATTEMPTS):
        try:
            with warnings.catch_warnings():  # heartbeats and their retry callback are "experimental"
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(
                    engine_url(url),
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=int(cfg.sweep.heartbeat_interval),
                    grace_period=int(grace) if grace else None,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=int(cfg.sweep.max_retry)
                    ),
                )
            if engine_kwargs:
                sqlalchemy.event.listen(storage.engine, "begin", begin_immediate)
            return storage
        except sqlalchemy.exc.SQLAlchemyError as exc:
            if not lost_schema_race(exc) or attempt == OPEN_ATTEMPTS - 1:
                raise StorageUnavailable(unavailable_message(url, exc)) from None
            time.sleep(0.5 * (attempt + 1))
        except ImportError as exc:
            raise StorageUnavailable(unavailable_message(url, exc)) from None
    raise AssertionError("unreachable")


class StorageCache:
    """Open study storages of one process, one per setting (URL, heartbeat interval, grace period, retries): opening
    one costs an engine and Optuna's schema check through alembic (~70-100 ms), which a process that opens many
    studies of one root (a pool's worker on every trial, the pool's parent for every study) would pay each time.
    For processes whose storage files stay in place while they run."""

    def __init__(self):
        self.storages: dict[tuple, optuna.storages.BaseStorage] = {}

    def __call__(self, cfg: DictConfig) -> optuna.storages.BaseStorage:
        s = cfg.sweep
        key = (storage_url(cfg), s.heartbeat_interval, s.get("grace_period"), s.max_retry)
        if key not in self.storages:
            self.storages[key] = open_storage(cfg)
        return self.storages[key]


def lost_schema_race(exc: Exception) -> bool:
    """Whether opening failed because another process was creating the same schema (worth a retry):
    a unique-constraint or locking error, or a ``ProgrammingError`` saying an object "already exists"
    (PostgreSQL's duplicate type or table). A refused connection is an ``OperationalError`` too; it is
    retried as before and reported after the last attempt."""
    if isinstance(exc, (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError)):
        return True
    return isinstance(exc, sqlalchemy.exc.ProgrammingError) and "already exists" in str(exc)


def use_wal(path: str, timeout_s: float = SQLITE_TIMEOUT_S) -> None:
    """Put the SQLite file at ``path`` in WAL mode (readers never block the writer; the mode is stored in the
    file), waiting up to ``timeout_s`` for other processes.

    The switch upgrades a read lock to an exclusive one, and SQLite answers "database is locked" at once,
    without its busy timeout, when another connection holds a write lock then (it would deadlock otherwise):
    two workers opening a new study file together meet this while the other creates Optuna's schema. So
    the switch is tried again, with a growing pause, until ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.05
    while True:
        con = sqlite3.connect(path, timeout=timeout_s)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        finally:
            con.close()
        time.sleep(pause)
        pause = min(2 * pause, 1.0)


def sqlite_connection(path: str) -> sqlite3.Connection:
    """A connection to the study file: 60 s busy timeout, ``synchronous=NORMAL``.

    In WAL mode NORMAL syncs the file at checkpoints instead of at every commit: a commit cannot be lost
    when a process dies (only when the machine loses power, and then the file stays consistent), and
    it costs 0.7 ms instead of 5.6 ms on this project's machine (a trial commits ~15-35 times: its
    attributes, its heartbeats, its state). The pool hands a connection to one thread at a time
    (Optuna's heartbeat thread included), so it need not stay in the thread that made it. The driver's own
    transaction handling is off (``isolation_level=None``): :func:`begin_immediate` begins each one.
    """
    con = sqlite3.connect(path, timeout=SQLITE_TIMEOUT_S, check_same_thread=False, isolation_level=None)
    con.execute("PRAGMA synchronous=NORMAL")
    return con


def begin_immediate(connection: sqlalchemy.engine.Connection) -> None:
    """Start every transaction on the study file with ``BEGIN IMMEDIATE`` (SQLAlchemy's pysqlite recipe:
    the driver's own transaction handling is off, ``isolation_level=None`` in :func:`sqlite_connection`).

    Python's sqlite3 begins a transaction only at the first write, so Optuna's read-then-write updates are
    not atomic on SQLite (its ``SELECT ... FOR UPDATE`` is a no-op there): several workers that pop the
    same re-queued (waiting) trial all read it as waiting and all set it running, train it at once into one
    folder, and all but the first fail to tell it ("Cannot tell a COMPLETE trial"; 8 workers resuming a
    root with 6 re-queued trials, and 8 processes popping 40 queued trials 50 times). Taking the write lock
    at the transaction's start makes each read-then-write one step; other processes wait for it (the 60 s
    busy timeout). Readers in WAL mode still read while a writer holds the lock."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def unavailable_message(url: str, exc: Exception) -> str:
    """Why ``url`` cannot be opened, in one line without its password."""
    cause = getattr(exc, "orig", None) or exc.__cause__ or exc  # the driver's own message, if any
    reason = " ".join(str(cause).split()) or type(cause).__name__
    if isinstance(exc, ImportError):
        reason = f"{reason} (its database driver is not installed)"
    return mask_text(f"cannot open sweep.storage={masked(url)}: {reason}", url)


def study_name(cfg: DictConfig) -> str:
    """``sweep.study_name`` with the selection's suffix appended (``__pareto``, :mod:`kcal.core.layout`)."""
    return layout.with_selection(str(cfg.sweep.study_name), selection_of(cfg))


def sweep_dir(cfg: DictConfig) -> Path:
    """Where the study's trial runs, ``best.json`` (and ``front.json``) go."""
    return layout.sweep_dir(cfg.root, cfg.dataset.name, cfg.objective.name, selection_of(cfg))


def open_study(
    cfg: DictConfig, create: bool = True, storage: optuna.storages.BaseStorage | None = None
) -> optuna.Study:
    """The study of ``cfg`` (created unless ``create=False``), on ``storage`` (default: :func:`open_storage`)."""
    storage = storage if storage is not None else open_storage(cfg)
    sampler = make_sampler(cfg)
    pruner = make_pruner(cfg.sweep.get("pruner"))
    name, task = study_name(cfg), get_spec(cfg.dataset.name).task
    if not create:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
    if selection_of(cfg) == "paper":
        return optuna.create_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner,
                                   direction="minimize" if task == "regression" else "maximize", load_if_exists=True)  # fmt: skip
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, directions=directions(task),
                                load_if_exists=True)  # fmt: skip
    if len(study.directions) != len(directions(task)):
        raise ConfigError(f"study {name!r} has {len(study.directions)} objective(s), sweep.selection="
                          f"{selection_of(cfg)} needs {len(directions(task))}; pass another sweep.study_name")  # fmt: skip
    name_objectives(study, task)
    return study


def open_checked_study(cfg: DictConfig, storage: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """:func:`open_study` (on ``storage``, default :func:`open_storage`), refused (:mod:`kcal.sweep.fingerprint`)
    when the study was made with another config; with ``sweep.overwrite=true`` such a study and its trial folders
    are deleted and started again."""
    space = search_space(cfg)
    storage = storage if storage is not None else open_storage(cfg)
    study = open_study(cfg, storage=storage)
    if check_study(study, cfg, space):
        optuna.delete_study(study_name=study.study_name, storage=storage)
        shutil.rmtree(sweep_dir(cfg), ignore_errors=True)
        study = open_study(cfg, storage=storage)
        stamp_study(study, cfg, space)
    return study


def counted(study: optuna.Study) -> tuple[int, int]:
    """(finished trials that count towards n_trials, trials running now).

    Counted: completed and pruned trials (``sweep.pruner``), and trials that failed for a reason of their own (diverged, invalid
    config), unless Optuna's retry callback re-queued them (a stale heartbeat: the worker died).
    """
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    finished = sum(
        t.number not in retried
        and (
            t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            or (t.state == TrialState.FAIL and t.user_attrs.get(STATUS) in COUNTED_FAILURES)
        )
        for t in trials
    )
    running = sum(t.state == TrialState.RUNNING for t in trials)
    return finished, running


def grace_s(cfg: DictConfig) -> int:
    """Seconds after its last heartbeat at which a running trial counts as dead (Optuna's default: two
    heartbeat intervals)."""
    return int(cfg.sweep.get("grace_period") or 2 * int(cfg.sweep.heartbeat_interval))


def fail_stale(study: optuna.Study, cfg: DictConfig) -> list[int]:
    """Fail the running trials whose worker died and re-queue them (``sweep.max_retry``); return the numbers
    of those failed for want of a heartbeat (below).

    Optuna's ``fail_stale_trials`` finds the trials whose heartbeat stopped, but skips a trial that never
    sent one: a worker killed between creating a trial and its first heartbeat (while the sampler
    proposes its parameters) leaves it running for ever, and a study waiting for its last slots waits for
    it too. Such a trial never reached its objective, whose first act records :data:`STARTED` (its own
    number: a re-queued trial carries the attributes of the one it retries). One that started more than
    the grace period ago (:func:`grace_s`, against this machine's clock) is failed here and re-queued
    like a stale one, so a re-queued trial's parameters are not lost. Every worker of a study runs a kcal
    that records :data:`STARTED` (one commit per reproduction), after the trial's first heartbeat
    (:func:`kcal.sweep.search.beat_now`), so a started trial always has a heartbeat to go stale.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=int(cfg.sweep.max_retry))
    cutoff, failed = datetime.now() - timedelta(seconds=grace_s(cfg)), []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get(STARTED) == t.number or t.datetime_start is None or t.datetime_start > cutoff:
            continue
        try:
            frozen = study.tell(t.number, state=TrialState.FAIL)
        except (RuntimeError, ValueError):  # finished meanwhile (by its worker, or failed by another process)
            continue
        retry(study, frozen)
        failed.append(t.number)
    return failed


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial:
    """The selected trial (:func:`kcal.sweep.selection.selected`)."""
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if not done:
        raise IncompleteError(no_usable_trial(study))
    return selected(study)


def no_usable_trial(study: optuna.Study) -> str:
    """Why a study has no completed trial, and what to change."""
    failed: dict[str, list] = {}
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.FAIL and t.user_attrs.get(STATUS) in COUNTED_FAILURES:
            failed.setdefault(t.user_attrs.get(STATUS, t.state.name.lower()), []).append(t)
    dataset, objective, *_ = layout.parse_study_name(study.study_name)
    if not failed:
        return (f"study {study.study_name!r} has no finished trial yet; run `kcal sweep dataset={dataset} "
                f"objective={objective}` (with the same profile and root) first")  # fmt: skip
    counts = ", ".join(f"{len(ts)} {status}" for status, ts in failed.items())
    reasons = (
        t.user_attrs["fail_reason"] for ts in failed.values() for t in ts if "fail_reason" in t.user_attrs
    )
    example = next(reasons, "no reason recorded")
    advice = {
        "diverged": "narrow hparams_search towards stabler values (a lower trainer.lr or objective.weight range) "
        "or raise sweep.n_trials",
        "invalid_config": "change hparams_search (or the fixed config) so that sampled values are valid",
    }
    todo = "; ".join(advice.get(status, "see the trials' fail_reason") for status in failed)
    return (f"study {study.study_name!r} has no usable trial: all {sum(map(len, failed.values()))} finished trials "
            f"failed ({counts}; e.g. {example}). To fix: {todo}; then run again with sweep.overwrite=true")  # fmt: skip


def best_value(study: optuna.Study) -> float | None:
    """The best value so far (a pareto study: the selected trial's validation NLL); None while the study
    has no completed trial."""
    try:
        return selected(study).values[0] if is_pareto(study) else study.best_value
    except ValueError:
        return None
