"""Optuna TPE sweep over one (dataset, objective): ``python -m kcal.sweep dataset=crime objective=nll_mmd``.

* The study lives in a database (default SQLite ``<root>/sweeps.db``; any SQLAlchemy URL, e.g.
  ``sweep.storage=postgresql://...``), so re-running the command resumes it and several workers,
  started independently on one or more machines, share it. All stop once the study holds
  ``sweep.n_trials`` *finished* trials (completed, or failed for a reason of their own).
* A trial is one :func:`kcal.train.run` with overrides sampled from ``hparams_search``. Its value:
  regression, validation NLL of the selected checkpoint (minimised); classification, validation
  accuracy with ties broken by validation ECE, as one lexicographic number
  ``acc - ece / (n_val + 1)`` (accuracy moves in steps of 1/n_val and ECE is at most 1, so this
  orders exactly by accuracy first, then lower ECE), maximised. With ``sweep.selection=pareto`` the
  study is multi-objective instead, a study of its own (:mod:`kcal.selection`: its metrics, its front
  and which front trial is selected); its trials go to ``<objective>/sweep__pareto/``.
* Every trial records whether the regulariser acted: the user attributes ``reg_share_median`` and
  ``reg_share_at_best``, the median over epochs of ``history.csv``'s ``train/reg_share`` and its value
  at the best epoch.
* A diverged run or an invalid sampled config (e.g. a batch larger than the training split) is stored
  as a failed trial with its reason, and the sweep goes on.
* A worker killed mid-trial, on any machine, stops sending its trial's heartbeat (Optuna's
  ``heartbeat_interval``); once ``grace_period`` has passed, any worker on the study fails that trial
  and Optuna's retry callback re-queues its parameters, which the next free worker runs. A trial
  left behind this way, and a surplus trial (two workers racing for the last slot), is not counted.
  A worker whose remaining slots are all held by running trials waits for them (or for their
  heartbeats to go stale), so ``sweep`` returns with the study complete.
* Several workers: TPE with ``constant_liar`` (running trials count as bad results while they run),
  and worker ``w`` seeds its sampler with ``sampler_seed + w``. The embedded SQLite file is opened in
  WAL mode with a 60 s busy timeout (``scripts/bench_storage.py`` measures it against Optuna's
  journal file storage, which has no heartbeats); a server URL serves several machines.
* One line per finished trial on stderr, whether or not it is a terminal.

Why not hydra-optuna-sweeper: its stable release pins optuna<3 and fails with SQLAlchemy 2, and a
Hydra sweeper cannot resume a study or share it between independently started workers. Hydra
launchers still start the workers: ``python -m kcal.sweep -m hydra/launcher=submitit_slurm
sweep.worker=0,1,2,3 sweep.storage=postgresql://...`` runs four jobs on one study.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import sqlite3
import statistics
import sys
import time
import warnings
from pathlib import Path

import hydra
import optuna
import sqlalchemy.exc
from omegaconf import DictConfig
from optuna.trial import TrialState

from kcal import layout
from kcal.configs import CONFIG_PATH
from kcal.data import get_spec
from kcal.data.splits import split_sizes
from kcal.errors import ConfigError, IncompleteError, exits_on_config_error
from kcal.fingerprint import check_study, stamp_study
from kcal.progress import Progress
from kcal.run import run
from kcal.search_space import apply, sample, search_space, settings
from kcal.selection import (
    describe,
    directions,
    front,
    is_pareto,
    name_objectives,
    pareto_values,
    selected,
    selection_of,
    summary,
    value_of,
)
from kcal.storage_url import engine_url, keeps_password_off_disk, mask_text, masked

STATUS = "kcal_status"  # user attr: "ok" | "diverged" | "invalid_config" | "surplus" ("stale": older studies)
COUNTED_FAILURES = ("diverged", "invalid_config")  # failed trials that still use up a slot of n_trials
SQLITE_TIMEOUT_S = 60
SETTINGS = "settings"  # user attr: config path -> value, where shared or derived entries make it differ from the params


class TrialFailed(Exception):
    """A trial that finished without a usable value (diverged, invalid config)."""


class StorageUnavailable(ConfigError):
    """``sweep.storage`` cannot be opened: one line on stderr, exit status 2."""


def storage_url(cfg: DictConfig) -> str:
    if cfg.sweep.storage:
        return str(cfg.sweep.storage)
    Path(cfg.root).mkdir(parents=True, exist_ok=True)
    return layout.sqlite_url(cfg.root)


def open_storage(cfg: DictConfig) -> optuna.storages.RDBStorage:
    """The study's database with heartbeats and the retry of stale trials; SQLite in WAL mode.

    Several processes that open a new SQLite file at the same moment race to create Optuna's schema
    (one fails with a UNIQUE constraint or "table already exists" error); the schema then exists,
    so opening it again succeeds. A storage that cannot be opened (no server, a refused connection,
    a driver not installed, a malformed URL) is a :class:`StorageUnavailable`, its password masked.
    """
    url = storage_url(cfg)
    engine_kwargs = {}
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        con = sqlite3.connect(url[len("sqlite:///") :], timeout=SQLITE_TIMEOUT_S)
        try:  # WAL: readers never block the writer; the mode is stored in the file
            con.execute("PRAGMA journal_mode=WAL")
        finally:
            con.close()
        engine_kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    grace = cfg.sweep.get("grace_period")
    for attempt in range(3):
        try:
            with warnings.catch_warnings():  # heartbeats and their retry callback are "experimental"
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    engine_url(url),
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=int(cfg.sweep.heartbeat_interval),
                    grace_period=int(grace) if grace else None,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=int(cfg.sweep.max_retry)
                    ),
                )
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as exc:
            if attempt == 2:
                raise StorageUnavailable(unavailable_message(url, exc)) from None
            time.sleep(0.5 * (attempt + 1))
        except (sqlalchemy.exc.SQLAlchemyError, ImportError) as exc:
            raise StorageUnavailable(unavailable_message(url, exc)) from None
    raise AssertionError("unreachable")


def unavailable_message(url: str, exc: Exception) -> str:
    """Why ``url`` cannot be opened, in one line without its password."""
    cause = getattr(exc, "orig", None) or exc.__cause__ or exc  # the driver's own message, if any
    reason = " ".join(str(cause).split()) or type(cause).__name__
    if isinstance(exc, ImportError):
        reason = f"{reason} (its database driver is not installed)"
    return mask_text(f"cannot open sweep.storage={masked(url)}: {reason}", url)


def study_name(cfg: DictConfig) -> str:
    """``sweep.study_name`` with the selection's suffix appended (``__pareto``, :mod:`kcal.layout`)."""
    return layout.with_selection(str(cfg.sweep.study_name), selection_of(cfg))


def sweep_dir(cfg: DictConfig) -> Path:
    """Where the study's trial runs, ``best.json`` (and ``front.json``) go."""
    return layout.sweep_dir(cfg.root, cfg.dataset.name, cfg.objective.name, selection_of(cfg))


def open_study(cfg: DictConfig, create: bool = True) -> optuna.Study:
    storage = open_storage(cfg)
    sampler = optuna.samplers.TPESampler(seed=int(cfg.sweep.sampler_seed) + int(cfg.sweep.worker),
                                         n_startup_trials=int(cfg.sweep.n_startup_trials),
                                         constant_liar=True)  # fmt: skip
    name, task = study_name(cfg), get_spec(cfg.dataset.name).task
    if not create:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    if selection_of(cfg) == "paper":
        return optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                   direction="minimize" if task == "regression" else "maximize", load_if_exists=True)  # fmt: skip
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, directions=directions(task),
                                load_if_exists=True)  # fmt: skip
    if len(study.directions) != len(directions(task)):
        raise ConfigError(f"study {name!r} has {len(study.directions)} objective(s), sweep.selection="
                          f"{selection_of(cfg)} needs {len(directions(task))}; pass another sweep.study_name")  # fmt: skip
    name_objectives(study, task)
    return study


def open_checked_study(cfg: DictConfig) -> optuna.Study:
    """:func:`open_study`, refused (:mod:`kcal.fingerprint`) when the study was made with another config;
    with ``sweep.overwrite=true`` such a study and its trial folders are deleted and started again."""
    space = search_space(cfg)
    study = open_study(cfg)
    if check_study(study, cfg, space):
        optuna.delete_study(study_name=study.study_name, storage=open_storage(cfg))
        shutil.rmtree(sweep_dir(cfg), ignore_errors=True)
        study = open_study(cfg)
        stamp_study(study, cfg, space)
    return study


def trial_value(metrics: dict, task: str, n_val: int) -> float:
    if task == "regression":
        return float(metrics["val/nll"])
    return float(metrics["val/acc"]) - float(metrics["val/ece"]) / (n_val + 1)


def reg_share(run_dir: Path, best_epoch: int | None) -> dict[str, float]:
    """``reg_share_median`` (over epochs) and ``reg_share_at_best`` (at ``best_epoch``) of ``train/reg_share``
    in a run's ``history.csv`` (:func:`kcal.run.epoch.train_values`); those it holds."""
    path = run_dir / "history.csv"
    if not path.is_file():
        return {}
    with path.open(newline="") as f:
        shares = {int(row["epoch"]): float(row["train/reg_share"]) for row in csv.DictReader(f)
                  if row.get("train/reg_share")}  # fmt: skip
    out = {"reg_share_median": statistics.median(shares.values())} if shares else {}
    if best_epoch is not None and int(best_epoch) in shares:
        out["reg_share_at_best"] = shares[int(best_epoch)]
    return out


def counted(study: optuna.Study) -> tuple[int, int]:
    """(finished trials that count towards n_trials, trials running now).

    Counted: completed trials and trials that failed for a reason of their own (diverged, invalid
    config), unless Optuna's retry callback re-queued them (a stale heartbeat: the worker died).
    """
    trials = study.get_trials(deepcopy=False)
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    finished = sum(
        t.number not in retried
        and (
            t.state == TrialState.COMPLETE
            or (t.state == TrialState.FAIL and t.user_attrs.get(STATUS) in COUNTED_FAILURES)
        )
        for t in trials
    )
    running = sum(t.state == TrialState.RUNNING for t in trials)
    return finished, running


def fail_stale(study: optuna.Study) -> None:
    """Fail the running trials whose heartbeat stopped; the storage's callback re-queues them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def run_trial(
    cfg: DictConfig, study: optuna.Study, space: dict, sweep_folder: Path
) -> optuna.trial.FrozenTrial:
    """Ask, train, tell: one trial into ``sweep_folder``'s ``trials/``, stored as complete or failed with its
    reason (Optuna's ``optimize`` of one trial, which keeps the trial's heartbeat while it trains)."""
    numbers = []

    def objective(trial: optuna.Trial) -> float | tuple[float, ...]:
        numbers.append(trial.number)
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("pid", os.getpid())
        finished, _ = counted(study)
        earlier_running = sum(t.state == TrialState.RUNNING and t.number < trial.number
                              for t in study.get_trials(deepcopy=False))  # fmt: skip
        if finished + earlier_running >= int(cfg.sweep.n_trials):
            trial.set_user_attr(STATUS, "surplus")
            raise TrialFailed("surplus: the study already has its trials")
        params = sample(trial, space)
        applied = settings(cfg, params)
        if applied != params:  # shared or derived entries: record the config values the params stand for
            trial.set_user_attr(SETTINGS, applied)
        out = layout.trial_dir(sweep_folder, trial.number)
        trial_cfg = apply(cfg, params)
        trial_cfg.trainer.progress_bar = False
        trial_cfg.figures = False  # per-run figures are for the seed reruns, not for every trial
        trial_cfg.trainer.log_dce = False  # per-epoch DCE curves on the whole training split: unused here
        trial_cfg.logger = None  # a Lightning logger would repeat history.csv
        trial_cfg.save_checkpoint = bool(cfg.sweep.keep_checkpoints)  # else the best weights stay in memory
        trial.set_user_attr("run_dir", str(out))
        try:
            metrics = run(trial_cfg, out)
            for key, share in reg_share(out, metrics.get("best_epoch")).items():
                trial.set_user_attr(key, share)
            if metrics["status"] != "ok":
                raise TrialFailed(f"diverged at epoch {metrics.get('epoch')}")
            if selection_of(cfg) == "paper":
                value = trial_value(metrics, metrics_task(cfg), _n_val(cfg))
            else:
                value = pareto_values(metrics, metrics_task(cfg))
        except (TrialFailed, ConfigError) as exc:
            trial.set_user_attr(STATUS, "diverged" if isinstance(exc, TrialFailed) else "invalid_config")
            trial.set_user_attr("fail_reason", str(exc))
            raise TrialFailed(str(exc)) from exc
        finally:
            if not cfg.sweep.keep_checkpoints:
                shutil.rmtree(out / "checkpoints", ignore_errors=True)
        for key in ("val/nll", "val/acc", "val/ece", "val/qce", "epochs", "best_epoch"):
            if key in metrics:
                trial.set_user_attr(key, metrics[key])
        trial.set_user_attr(STATUS, "ok")
        return value

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed trial is reported by the progress line
    try:
        study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=False)
    finally:
        optuna.logging.set_verbosity(verbosity)
    return next(t for t in study.get_trials(deepcopy=False) if t.number == numbers[-1])


def metrics_task(cfg: DictConfig) -> str:
    return get_spec(cfg.dataset.name).task


def _n_val(cfg: DictConfig) -> int:
    return split_sizes(get_spec(cfg.dataset.name).n_used)[1]


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial:
    """The selected trial (:func:`kcal.selection.selected`)."""
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
        return (f"study {study.study_name!r} has no finished trial yet; run `python -m kcal.sweep dataset={dataset} "
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


def overrides(trial: optuna.trial.FrozenTrial) -> list[str]:
    """The ``key=value`` config overrides a trial's parameters stand for."""
    return [f"{k}={json.dumps(v) if isinstance(v, bool) else v}"
            for k, v in trial.user_attrs.get(SETTINGS, trial.params).items()]  # fmt: skip


def write_best(study: optuna.Study, sweep_folder: Path) -> Path:
    """``best.json``: the selected trial; for a pareto study also ``front.json``, every front trial
    (selected one first) with its values by metric name, params, overrides and user attributes."""
    best = best_trial(study)
    info = {"study": study.study_name, "trial": best.number, "value": value_of(best), "params": best.params,
            "overrides": overrides(best), "user_attrs": best.user_attrs}  # fmt: skip
    sweep_folder.mkdir(parents=True, exist_ok=True)
    if is_pareto(study):
        info = {"selection": "pareto", "metrics": study.metric_names, **info}
        rows = [{"trial": t.number, "values": dict(zip(study.metric_names, t.values, strict=True)),
                 "params": t.params, "overrides": overrides(t), "user_attrs": t.user_attrs}
                for t in front(study)]  # fmt: skip
        record = {"study": study.study_name, "selected": best.number, "front": rows}
        (sweep_folder / layout.FRONT_FILE).write_text(json.dumps(record, indent=1, default=str) + "\n")
    path = sweep_folder / layout.BEST_FILE
    path.write_text(json.dumps(info, indent=1, default=str) + "\n")
    return path


def trial_line(cfg: DictConfig, trial: optuna.trial.FrozenTrial, study: optuna.Study) -> str:
    """``trial 37/100 done in 41 s, val_nll -0.71, best -0.78`` (or the reason it failed)."""
    finished, _ = counted(study)
    seconds = (
        (trial.datetime_complete - trial.datetime_start).total_seconds() if trial.datetime_complete else 0
    )
    if trial.state == TrialState.COMPLETE and is_pareto(study):
        result = describe(study, trial)
    elif trial.state == TrialState.COMPLETE:
        name = "val_nll" if metrics_task(cfg) == "regression" else "val_acc"
        result = f"{name} {trial.value:.4g}"
    else:
        result = (
            f"{trial.user_attrs.get(STATUS, 'failed')}: {trial.user_attrs.get('fail_reason', '')}".rstrip(
                ": "
            )
        )
    best = best_value(study)
    shown = "-" if best is None else f"{best:.4g}"
    if best is not None and is_pareto(study):
        shown = summary(study)
    return (f"trial {min(finished, int(cfg.sweep.n_trials))}/{cfg.sweep.n_trials} (#{trial.number}) done in "
            f"{seconds:.0f} s, {result}, best {shown}")  # fmt: skip


def sweep(cfg: DictConfig, progress: Progress | None = None) -> optuna.Study:
    """Run trials until the study holds ``n_trials`` finished ones; return the study.

    ``progress``: the whole run's progress (e.g. the reproduction's); default: this study's.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = search_space(cfg)
    study = open_checked_study(cfg)
    folder = sweep_dir(cfg)
    n_trials = int(cfg.sweep.n_trials)
    tag = f"{cfg.dataset.name}/{cfg.objective.name}"
    if progress is None:
        progress = Progress(n_trials, "study", done=min(counted(study)[0], n_trials))
    poll = min(int(cfg.sweep.heartbeat_interval), 10)
    waiting = False
    while True:
        fail_stale(study)
        finished, running = counted(study)
        if finished >= n_trials:
            break
        if finished + running >= n_trials:  # the other slots are held by running trials: wait for them
            if not waiting:
                grace = cfg.sweep.get("grace_period") or 2 * int(cfg.sweep.heartbeat_interval)
                print(f"[{tag}] {finished}/{n_trials} finished; waiting for {running} trial(s) running elsewhere "
                      f"(a dead worker's trial is retried {grace} s after its last heartbeat)",
                      file=sys.stderr, flush=True)  # fmt: skip
            waiting = True
            time.sleep(poll)
            continue
        waiting = False
        trial = run_trial(cfg, study, space, folder)
        now, _ = counted(study)
        progress.advance(max(0, min(now, n_trials) - finished), f"[{tag}] {trial_line(cfg, trial, study)}")
    if best_value(study) is not None:
        write_best(study, folder)
    return study


def best_value(study: optuna.Study) -> float | None:
    """The best value so far (a pareto study: the selected trial's validation NLL); None while the study
    has no completed trial."""
    try:
        return selected(study).values[0] if is_pareto(study) else study.best_value
    except ValueError:
        return None


@keeps_password_off_disk
@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="sweep")
@exits_on_config_error
def main(cfg: DictConfig) -> None:
    study = sweep(cfg)
    finished, running = counted(study)
    best = best_value(study)
    if best is None and finished:
        raise IncompleteError(no_usable_trial(study))
    shown = f"best value {best if best is not None else '-'}"
    if best is not None and is_pareto(study):
        shown = f"selected {summary(study)}"
    print(f"study {study.study_name}: {finished} finished trials ({running} running elsewhere); {shown}; "
          f"storage {masked(storage_url(cfg))}")  # fmt: skip


if __name__ == "__main__":
    main()
