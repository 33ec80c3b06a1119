"""Optuna TPE sweep over one (dataset, objective): ``kcal sweep dataset=crime objective=nll_mmd``.

* The study lives in a database (:mod:`kcal.sweep.studies`: default SQLite ``<root>/sweeps.db``, or any
  SQLAlchemy URL), so re-running the command resumes it and several workers, started independently
  on one or more machines, share it. All stop once the study holds ``sweep.n_trials`` *finished*
  trials (completed, or failed for a reason of their own: :func:`kcal.sweep.studies.counted`).
* A trial is one :func:`kcal.run.train.run` with overrides sampled from ``hparams_search``. Its value:
  regression, validation NLL of the selected checkpoint (minimised); classification, validation
  accuracy with ties broken by validation ECE, as one lexicographic number
  ``acc - ece / (n_val + 1)`` (accuracy moves in steps of 1/n_val and ECE is at most 1, so this
  orders exactly by accuracy first, then lower ECE), maximised. With ``sweep.selection=pareto`` the
  study is multi-objective instead, a study of its own (:mod:`kcal.sweep.selection`: its metrics, its front
  and which front trial is selected); its trials go to ``<objective>/sweep__pareto/``.
* ``sweep.pruner`` (default none; :mod:`kcal.sweep.pruners`): a trial reports the running best of its
  validation NLL every epoch and stops where the study's pruner says (state ``PRUNED``, counted towards
  ``sweep.n_trials``). Not the paper's protocol: use it under its own root and label.
* Every trial keeps its per-epoch validation curve (:data:`CURVE_KEY`, validation NLL / cross-entropy) as
  Optuna intermediate values (``trial.report``; paper-selection studies: Optuna keeps none for a
  multi-objective one), published with its trials (:mod:`kcal.publish.trials`),
  so pruners can be replayed over finished studies.
* Every trial records whether the regulariser acted: the user attributes ``reg_share_median`` and
  ``reg_share_at_best``, the median over epochs of ``history.csv``'s ``train/reg_share`` and its value
  at the best epoch.
* A diverged run or an invalid sampled config (e.g. a batch larger than the training split) is stored
  as a failed trial with its reason, and the sweep goes on.
* (Asynchronous mode.) A worker killed mid-trial, on any machine, stops sending its trial's heartbeat (Optuna's
  ``heartbeat_interval``); once ``grace_period`` has passed, any worker on the study fails that trial
  and Optuna's retry callback re-queues its parameters, which the next free worker runs (a worker killed
  before its trial's first heartbeat too: :func:`kcal.sweep.studies.fail_stale`). A trial
  left behind this way, and a surplus trial (two workers racing for the last slot), is not counted.
  A worker whose remaining slots are all held by running trials waits for them (or for their
  heartbeats to go stale), so ``sweep`` returns with the study complete.
* ``sweep.mode=deterministic`` (default): this process asks and tells every trial, ``sweep.batch`` at a time,
  trial ``n`` suggested by a sampler seeded from ``(sampler_seed, n)`` (:mod:`kcal.sweep.ask_tell`); a reproduction's
  pool does the same with workers that only train. ``sweep.mode=async``: several workers on one study, each asking
  for itself: TPE with ``constant_liar`` (running trials count as bad results while they run), worker ``w``
  seeding its sampler with ``sampler_seed + w``, and the heartbeats below; its trials depend on timing.
* One line per finished trial on stderr, whether or not it is a terminal.

Why not hydra-optuna-sweeper: its stable release pins optuna<3 and fails with SQLAlchemy 2, and a
Hydra sweeper cannot resume a study or share it between independently started workers. Hydra
launchers still start the workers: ``kcal sweep -m hydra/launcher=submitit_slurm
sweep.worker=0,1,2,3 sweep.storage=postgresql://...`` runs four jobs on one study.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import socket
import statistics
import sys
import time
from pathlib import Path

import hydra
import optuna
from omegaconf import DictConfig
from optuna.trial import TrialState

from kcal.configs import CONFIG_PATH
from kcal.core import layout
from kcal.core.errors import (
    ConfigError,
    IncompleteError,
    TaskLost,
    exits_on_config_error,
)
from kcal.core.progress import Progress, cpu_note
from kcal.core.schema import Schema, choice, flag, integer, mapping, refusal, text
from kcal.core.startup import checks_config
from kcal.core.storage_url import keeps_password_off_disk, masked
from kcal.data import get_spec
from kcal.data.splits import split_sizes
from kcal.run.setup import TRAIN_KEYS
from kcal.sweep.ask_tell import MODES, Outcome, next_batch, sweep_mode, tell
from kcal.sweep.pruners import SETTINGS as PRUNERS
from kcal.sweep.pruners import CurveReporter
from kcal.sweep.samplers import STARTUP_BY
from kcal.sweep.search_space import apply, sample, search_space, settings
from kcal.sweep.selection import (
    SELECTIONS,
    describe,
    front,
    is_pareto,
    pareto_values,
    selection_of,
    summary,
    value_of,
)
from kcal.sweep.studies import (
    STARTED,
    STATUS,
    best_trial,
    best_value,
    counted,
    fail_stale,
    grace_s,
    no_usable_trial,
    open_checked_study,
    storage_url,
    sweep_dir,
)

SETTINGS = "settings"  # user attr: config path -> value, where shared or derived entries make it differ from the params


#: the keys of ``sweep.*`` (configs/sweep.yaml, the profiles' ``sweep.n_trials``), ``root`` and ``hparams_search``
SWEEP_KEYS = Schema({
    "root": text(),
    "hparams_search.name": text(),
    "hparams_search.common": mapping(),
    "hparams_search.objectives": mapping(),
    "sweep.n_trials": integer(1),
    "sweep.storage": text(null="the SQLite file of the root"),
    "sweep.study_name": text(),
    "sweep.selection": choice(lambda: SELECTIONS),
    "sweep.sampler_seed": integer(0, 2**32),
    "sweep.mode": choice(lambda: MODES),
    "sweep.batch": integer(1),
    "sweep.n_startup_trials": integer(0),
    "sweep.startup_by": choice(lambda: STARTUP_BY),
    "sweep.pruner": choice(lambda: PRUNERS, null="every trial trains to its early stop"),
    "sweep.worker": integer(0),
    "sweep.heartbeat_interval": integer(1),
    "sweep.grace_period": integer(1, null="2 x sweep.heartbeat_interval"),
    "sweep.max_retry": integer(0),
    "sweep.keep_checkpoints": flag(),
    "sweep.overwrite": flag(),
    "sweep.adopt": flag(),
})  # fmt: skip


def batch_fits(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` for a pruner with ``sweep.batch`` above 1 (a pruner compares a trial with the
    others of its batch as they train, which depends on timing), a worker number of the deterministic sweep (it has
    one asker), or a batch in the asynchronous mode."""
    batch = int(cfg.sweep.get("batch") or 1)
    if batch > 1 and cfg.sweep.get("pruner"):
        raise ConfigError(f"sweep.batch={batch} with sweep.pruner={cfg.sweep.pruner}: a pruner compares the trials "
                          "of a batch while they train, which depends on timing; use sweep.batch=1 with a pruner")  # fmt: skip
    worker = int(cfg.sweep.get("worker") or 0)
    if worker and sweep_mode(cfg.sweep) == "deterministic":
        raise ConfigError(f"sweep.worker={worker} names one of several workers on one study, which is the asynchronous "
                          "mode: pass sweep.mode=async (the deterministic sweep has one process that asks and tells)")  # fmt: skip
    if batch > 1 and sweep_mode(cfg.sweep) == "async":
        raise ConfigError(f"sweep.batch={batch} is the deterministic sweep's (sweep.mode=deterministic); the "
                          "asynchronous mode runs as many trials at once as it has workers")  # fmt: skip


def space_fits(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` unless ``hparams_search`` covers the objective with entries Optuna can sample:
    ``choices`` a non-empty list, ``low`` below ``high`` (both finite; above 0 on a log scale)."""
    for path, entry in search_space(cfg).items():
        if "choices" in entry and not (isinstance(entry["choices"], list) and entry["choices"]):
            raise ConfigError(
                f"hparams_search entry {path}: choices must be a non-empty list, got {entry['choices']}"
            )
        if "low" in entry or "high" in entry:
            low, high = entry.get("low"), entry.get("high")
            numbers = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                          for v in (low, high))  # fmt: skip
            if not numbers or low > high or (entry.get("log") and low <= 0):
                raise ConfigError(f"hparams_search entry {path}: needs finite low <= high (low > 0 with log: true), "
                                  f"got low={low}, high={high}")  # fmt: skip


#: what ``kcal sweep`` checks before it starts (:mod:`kcal.core.startup`)
SCHEMA = TRAIN_KEYS | SWEEP_KEYS | Schema(relations=(refusal(space_fits), refusal(batch_fits)))


class TrialFailed(Exception):
    """A trial that finished without a usable value (diverged, invalid config)."""


def trial_value(metrics: dict, task: str, n_val: int) -> float:
    if task == "regression":
        return float(metrics["val/nll"])
    return float(metrics["val/acc"]) - float(metrics["val/ece"]) / (n_val + 1)


#: the per-epoch validation value every trial reports to Optuna (``trial.report``): validation NLL, the
#: cross-entropy for classes; what a pruner reads, and what a pruning replay reads from the kept trials
CURVE_KEY = "val/nll"
REG_SHARE_MEDIAN, REG_SHARE_AT_BEST = "reg_share_median", "reg_share_at_best"
REG_SHARE_KEYS = (REG_SHARE_MEDIAN, REG_SHARE_AT_BEST)
"""The user attributes in which every trial records its regulariser's share of the loss (:func:`reg_share`)."""
CPU_SECONDS = "cpu_seconds"
"""The user attribute in which every trial records the CPU seconds its process spent on it (training, evaluation
and the study's reads and writes): its cost whatever the machine's load (a pruned protocol's time saved)."""


def history_column(run_dir: Path, key: str) -> dict[int, float]:
    """``{epoch: value}`` of column ``key`` of a run's ``history.csv`` (empty without the file or column)."""
    path = run_dir / layout.HISTORY_FILE
    if not path.is_file():
        return {}
    with path.open(newline="") as f:
        return {int(row["epoch"]): float(row[key]) for row in csv.DictReader(f) if row.get(key)}


def reg_share(run_dir: Path, best_epoch: int | None) -> dict[str, float]:
    """``reg_share_median`` (over epochs) and ``reg_share_at_best`` (at ``best_epoch``) of ``train/reg_share``
    in a run's ``history.csv`` (:func:`kcal.run.epoch.train_values`); those it holds."""
    shares = history_column(run_dir, "train/reg_share")
    out = {REG_SHARE_MEDIAN: statistics.median(shares.values())} if shares else {}
    if best_epoch is not None and int(best_epoch) in shares:
        out[REG_SHARE_AT_BEST] = shares[int(best_epoch)]
    return out


def beat_now(trial: optuna.Trial) -> None:
    """Record the trial's first heartbeat before anything else, so that a trial which records
    :data:`STARTED` has a heartbeat to go stale (:func:`kcal.sweep.studies.fail_stale` leaves started trials
    to Optuna's heartbeat check). Optuna's heartbeat thread records its first beat whenever it gets the
    storage's lock: on a loaded machine, after the objective's own writes, and a worker killed in between
    left a trial running for ever (the study waited on it)."""
    storage = trial.storage  # kcal's RDBStorage, behind Optuna's cache (which passes heartbeats on)
    if getattr(storage, "get_heartbeat_interval", lambda: None)():
        study_id = storage.get_study_id_from_name(trial.study.study_name)
        storage.record_heartbeat(storage.get_trial_id_from_study_id_trial_number(study_id, trial.number))


def train_trial(
    cfg: DictConfig, trial: optuna.Trial, space: dict, sweep_folder: Path
) -> float | tuple[float, ...]:
    """Train ``trial`` into ``sweep_folder``'s ``trials/`` and record what it did (user attributes); its value.

    Raises :class:`TrialFailed` (diverged, invalid config: its reason recorded) or ``optuna.TrialPruned``. The
    trial's parameters are suggested from ``space`` (an asked trial's stored ones come back as they are)."""
    cpu = time.process_time()
    trial.set_user_attr(STARTED, trial.number)
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", os.getpid())
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
    # imported here: a pool's parent imports this module and trains nothing (Lightning: ~3 s to import)
    from kcal.run import run

    pruner, pruned, report = cfg.sweep.get("pruner"), [], CurveReporter(trial)
    pareto = is_pareto(trial.study)

    def prune(row: dict, epoch: int) -> bool:
        """Report the running best of the validation curve, signed to the study's direction; True when the
        study's pruner stops the trial."""
        if report(float(row.get(CURVE_KEY, math.inf)), epoch):
            pruned.append(epoch)
        return bool(pruned)

    try:
        metrics = run(trial_cfg, out, epoch_hook=prune if pruner else None)
        for key, share in reg_share(out, metrics.get("best_epoch")).items():
            trial.set_user_attr(key, share)
        if not pareto and not pruner:  # Optuna keeps intermediate values of single-objective studies only
            for epoch, value in sorted(history_column(out, CURVE_KEY).items()):
                trial.report(value, epoch)  # the validation curve, kept with the trial (pruning replays)
        if pruned:
            for key in ("val/nll", "val/acc", "val/ece", "epochs", "best_epoch"):
                if key in metrics:
                    trial.set_user_attr(key, metrics[key])
            trial.set_user_attr(STATUS, "pruned")
            raise optuna.TrialPruned(f"pruned after epoch {pruned[0]}")
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
            shutil.rmtree(layout.checkpoint_file(out).parent, ignore_errors=True)
        # what it cost, whatever the load
        trial.set_user_attr(CPU_SECONDS, round(time.process_time() - cpu, 3))
    for key in ("val/nll", "val/acc", "val/ece", "val/qce", "epochs", "best_epoch"):
        if key in metrics:
            trial.set_user_attr(key, metrics[key])
    trial.set_user_attr(STATUS, "ok")
    return value


def train_asked(
    cfg: DictConfig, study: optuna.Study, number: int, space: dict, sweep_folder: Path
) -> Outcome:
    """Train trial ``number``, asked by the deterministic sweep's asker (:mod:`kcal.sweep.ask_tell`), with the
    parameters it stored; how it ended, for the asker to tell. Training it again (after a kill) overwrites
    what the first attempt recorded with the same numbers."""
    frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
    trial = optuna.Trial(study, frozen._trial_id)  # Optuna's handle on a stored trial, as its own ask makes
    try:
        return Outcome("complete", train_trial(cfg, trial, space, sweep_folder))
    except optuna.TrialPruned:
        return Outcome("pruned")
    except TrialFailed:
        return Outcome("fail")


def run_trial(
    cfg: DictConfig, study: optuna.Study, space: dict, sweep_folder: Path
) -> optuna.trial.FrozenTrial:
    """The asynchronous mode's trial (``sweep.mode=async``): ask, train, tell one trial into ``sweep_folder``'s
    ``trials/``, stored as complete or failed with its reason (Optuna's ``optimize`` of one trial, which keeps the
    trial's heartbeat while it trains). A worker that finds the study's slots taken marks its trial surplus."""
    numbers = []

    def objective(trial: optuna.Trial) -> float | tuple[float, ...]:
        numbers.append(trial.number)
        beat_now(trial)
        finished, _ = counted(study)
        earlier_running = sum(t.state == TrialState.RUNNING and t.number < trial.number
                              for t in study.get_trials(deepcopy=False))  # fmt: skip
        if finished + earlier_running >= int(cfg.sweep.n_trials):
            trial.set_user_attr(STARTED, trial.number)
            trial.set_user_attr(STATUS, "surplus")
            raise TrialFailed("surplus: the study already has its trials")
        return train_trial(cfg, trial, space, sweep_folder)

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed trial is reported by the progress line
    try:
        study.optimize(objective, n_trials=1, catch=(TrialFailed,), gc_after_trial=False)
    except (ValueError, optuna.exceptions.UpdateFinishedTrialError) as exc:
        if not taken_over(exc):
            raise
        raise TaskLost(f"trial #{numbers[-1]} was failed by another process while this worker trained it (no "
                       "heartbeat for sweep.grace_period: a starved or paused worker); its retry trains it "
                       "again") from None  # fmt: skip
    finally:
        optuna.logging.set_verbosity(verbosity)
    return next(t for t in study.get_trials(deepcopy=False) if t.number == numbers[-1])


def taken_over(exc: Exception) -> bool:
    """Whether ``exc`` is Optuna refusing to update a trial that is already finished: another process failed it
    as stale (``kcal.sweep.studies.fail_stale``) while its worker still trained it, and re-queued it."""
    if isinstance(exc, optuna.exceptions.UpdateFinishedTrialError):
        return True
    return isinstance(exc, ValueError) and str(exc).startswith("Cannot tell a ")


def metrics_task(cfg: DictConfig) -> str:
    return get_spec(cfg.dataset.name).task


def _n_val(cfg: DictConfig) -> int:
    return split_sizes(get_spec(cfg.dataset.name).n_used)[1]


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


def trial_seconds(trial: optuna.trial.FrozenTrial) -> float:
    """How long the trial ran (0 for one that has not finished)."""
    if not (trial.datetime_complete and trial.datetime_start):
        return 0.0
    return (trial.datetime_complete - trial.datetime_start).total_seconds()


def trial_line(
    cfg: DictConfig,
    trial: optuna.trial.FrozenTrial,
    study: optuna.Study,
    cpu: float | None = None,
    seconds: float | None = None,
) -> str:
    """``trial 37/100 (#38) done in 41 s (39 s CPU), val_nll -0.71, best -0.78`` (or the reason it failed);
    ``cpu``: the CPU seconds its process spent on it, where known (less than the wall time on a busy machine);
    ``seconds``: how long it trained (default: from its start to its end in the study)."""
    finished, _ = counted(study)
    seconds = trial_seconds(trial) if seconds is None else seconds
    spent = cpu_note(cpu)
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
            f"{seconds:.0f} s{spent}, {result}, best {shown}")  # fmt: skip


def finish_study(study: optuna.Study, cfg: DictConfig) -> None:
    """What a finished study leaves beside its trials: ``best.json`` (and ``front.json``) once it has a
    completed trial (:func:`write_best`); the one place a sweep's end writes them."""
    if best_value(study) is not None:
        write_best(study, sweep_dir(cfg))


def sweep(cfg: DictConfig, progress: Progress | None = None) -> optuna.Study:
    """Run trials until the study holds ``n_trials`` finished ones; return the study.

    ``sweep.mode=deterministic`` (default): this process asks, trains and tells each trial
    (:mod:`kcal.sweep.ask_tell`); ``async``: trials are asked through Optuna's ``optimize`` and share the study
    with workers elsewhere. ``progress``: the whole run's progress (e.g. the reproduction's); default: this
    study's.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = search_space(cfg)
    study = open_checked_study(cfg)
    n_trials = int(cfg.sweep.n_trials)
    tag = f"{cfg.dataset.name}/{cfg.objective.name}"
    own = progress is None
    if own:
        progress = Progress(n_trials, "study", done=min(counted(study)[0], n_trials))
    (sweep_asked if sweep_mode(cfg.sweep) == "deterministic" else sweep_async)(
        cfg, study, space, progress, tag
    )
    finish_study(study, cfg)
    if own:
        progress.finish(f"[{tag}] {n_trials} trials finished")
    return study


def sweep_asked(cfg: DictConfig, study: optuna.Study, space: dict, progress: Progress, tag: str) -> None:
    """The deterministic sweep in one process: batches asked, trained one after the other, told in order."""
    n_trials = int(cfg.sweep.n_trials)
    while numbers := next_batch(study, cfg, space):
        for number in numbers:
            finished, cpu = counted(study)[0], time.process_time()
            outcome = train_asked(cfg, study, number, space, sweep_dir(cfg))
            try:
                trial = tell(study, number, outcome)
            except (ValueError, optuna.exceptions.UpdateFinishedTrialError):
                raise ConfigError(f"[{tag}] trial #{number} was told by another process: a deterministic study has one "
                                  "process that asks and tells; run several workers on one study with "
                                  "sweep.mode=async") from None  # fmt: skip
            cpu = time.process_time() - cpu
            line = f"[{tag}] {trial_line(cfg, trial, study, cpu)}"
            now = counted(study)[0]
            progress.advance(
                max(0, min(now, n_trials) - finished), line, "trial", trial_seconds(trial), cpu=cpu
            )


def sweep_async(cfg: DictConfig, study: optuna.Study, space: dict, progress: Progress, tag: str) -> None:
    """The asynchronous mode: trials until the study is full, waiting for those running elsewhere."""
    folder, n_trials = sweep_dir(cfg), int(cfg.sweep.n_trials)
    poll = min(int(cfg.sweep.heartbeat_interval), 10)
    waiting = False
    while True:
        fail_stale(study, cfg)
        finished, running = counted(study)
        if finished >= n_trials:
            return
        if finished + running >= n_trials:  # the other slots are held by running trials: wait for them
            if not waiting:
                grace = grace_s(cfg)
                print(f"[{tag}] {finished}/{n_trials} finished; waiting for {running} trial(s) running elsewhere "
                      f"(a dead worker's trial is retried {grace} s after its last heartbeat)",
                      file=sys.stderr, flush=True)  # fmt: skip
            waiting = True
            time.sleep(poll)
            continue
        waiting = False
        cpu = time.process_time()
        trial = run_trial(cfg, study, space, folder)
        cpu = time.process_time() - cpu
        now, _ = counted(study)
        line = f"[{tag}] {trial_line(cfg, trial, study, cpu)}"
        progress.advance(max(0, min(now, n_trials) - finished), line, "trial", trial_seconds(trial), cpu=cpu)


@keeps_password_off_disk
@checks_config("sweep", SCHEMA)
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
    print(f"trials: {sweep_dir(cfg)}")


if __name__ == "__main__":
    main()
