"""Optuna TPE sweep over one (dataset, objective): ``python -m kcal.sweep dataset=crime objective=nll_mmd``.

* The study lives in a database (default SQLite ``<root>/sweeps.db``; any SQLAlchemy URL, e.g.
  ``sweep.storage=postgresql://...``), so re-running the command resumes it and several workers,
  started independently on one or more machines, share it. All stop once the study holds
  ``sweep.n_trials`` *finished* trials (completed, or failed for a reason of their own).
* A trial is one :func:`kcal.train.run` with overrides sampled from ``hparams_search``. Its value:
  regression, validation NLL of the selected checkpoint (minimised); classification, validation
  accuracy with ties broken by validation ECE, as one lexicographic number
  ``acc - ece / (n_val + 1)`` (accuracy moves in steps of 1/n_val and ECE is at most 1, so this
  orders exactly by accuracy first, then lower ECE), maximised.
* A diverged run or an invalid sampled config (e.g. a batch larger than the training split) is stored
  as a failed trial with its reason, and the sweep goes on.
* A worker killed mid-trial leaves a RUNNING trial behind; the next worker on the same host that
  finds its process gone marks it failed as ``stale`` and re-queues its parameters. Stale trials and
  surplus trials (two workers racing for the last slot) are not counted as finished.

Why not hydra-optuna-sweeper: its stable release pins optuna<3 and fails with SQLAlchemy 2, and a
Hydra sweeper cannot resume a study or share it between independently started workers. ``hydra -m``
grid sweeps still work through ``kcal.train``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path

import hydra
import optuna
from omegaconf import DictConfig, OmegaConf
from optuna.trial import TrialState
from tqdm.auto import tqdm

from kcal.configs import CONFIG_PATH
from kcal.data import get_spec
from kcal.errors import ConfigError, IncompleteError, exits_on_config_error
from kcal.fingerprint import check_study, stamp_study
from kcal.run import run

STATUS = "kcal_status"  # user attr: "ok" | "diverged" | "invalid_config" | "stale" | "surplus"
NOT_COUNTED = ("stale", "surplus")


class TrialFailed(Exception):
    """A trial that finished without a usable value (diverged, invalid config)."""


def storage_url(cfg: DictConfig) -> str:
    if cfg.sweep.storage:
        return str(cfg.sweep.storage)
    root = Path(cfg.root)
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(root / 'sweeps.db').resolve()}"


def open_study(cfg: DictConfig, create: bool = True) -> optuna.Study:
    url = storage_url(cfg)
    storage = optuna.storages.RDBStorage(
        url, engine_kwargs={"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    )
    sampler = optuna.samplers.TPESampler(seed=int(cfg.sweep.sampler_seed) + int(cfg.sweep.worker),
                                         n_startup_trials=int(cfg.sweep.n_startup_trials))  # fmt: skip
    direction = "minimize" if get_spec(cfg.dataset.name).task == "regression" else "maximize"
    if create:
        return optuna.create_study(study_name=cfg.sweep.study_name, storage=storage, sampler=sampler,
                                   direction=direction, load_if_exists=True)  # fmt: skip
    return optuna.load_study(study_name=cfg.sweep.study_name, storage=storage, sampler=sampler)


def train_rows(cfg: DictConfig) -> int:
    """Rows in the training split this config trains on (the split sizes, capped by ``max_train_rows``)."""
    from kcal.data.splits import split_sizes

    n_train = split_sizes(get_spec(cfg.dataset.name).n_used)[0]
    cap = cfg.dataset.get("max_train_rows")
    return min(n_train, int(cap)) if cap else n_train


def fit_to_data(space: dict[str, dict], n_train: int) -> dict[str, dict]:
    """Drop batch-size choices larger than the training split: such a config cannot train (every batch
    is dropped), so sampling it would spend a trial of the budget on nothing."""
    dist = space.get("trainer.batch_size")
    if dist is None or "choices" not in dist:
        return space
    fitting = [b for b in dist["choices"] if int(b) <= n_train]
    if not fitting:
        raise ConfigError(
            f"no trainer.batch_size choice of the search space fits the training split ({n_train} rows); "
            f"add a smaller one to hparams_search (choices: {list(dist['choices'])})"
        )
    return {**space, "trainer.batch_size": {**dist, "choices": fitting}}


def search_space(cfg: DictConfig) -> dict[str, dict]:
    space = cfg.hparams_search
    objectives = space.objectives
    if cfg.objective.name not in objectives:
        raise ConfigError(f"hparams_search={space.name} has no entry for objective {cfg.objective.name}; "
                          f"it covers: {', '.join(objectives)}")  # fmt: skip
    merged = {
        **OmegaConf.to_container(space.common),
        **OmegaConf.to_container(objectives[cfg.objective.name]),
    }
    return fit_to_data(merged, train_rows(cfg))


def sample(trial: optuna.Trial, space: dict[str, dict]) -> dict:
    params = {}
    for path, dist in space.items():
        if "choices" in dist:
            params[path] = trial.suggest_categorical(path, list(dist["choices"]))
        elif all(isinstance(dist[k], int) for k in ("low", "high")) and not dist.get("log"):
            params[path] = trial.suggest_int(path, dist["low"], dist["high"])
        else:
            params[path] = trial.suggest_float(
                path, float(dist["low"]), float(dist["high"]), log=bool(dist.get("log"))
            )
    return params


def apply(cfg: DictConfig, params: dict) -> DictConfig:
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for path, value in params.items():
        OmegaConf.update(out, path, value, merge=False)
    return out


def trial_value(metrics: dict, task: str, n_val: int) -> float:
    if task == "regression":
        return float(metrics["val/nll"])
    return float(metrics["val/acc"]) - float(metrics["val/ece"]) / (n_val + 1)


def counted(study: optuna.Study) -> tuple[int, int]:
    """(finished trials that count towards n_trials, trials running now)."""
    trials = study.get_trials(deepcopy=False)
    finished = sum(t.state.is_finished() and t.user_attrs.get(STATUS) not in NOT_COUNTED for t in trials)
    running = sum(t.state == TrialState.RUNNING for t in trials)
    return finished, running


def reclaim_stale(study: optuna.Study) -> int:
    """Fail RUNNING trials of dead processes on this host and re-queue their parameters."""
    host, n = socket.gethostname(), 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get("host") != host or _alive(t.user_attrs.get("pid")):
            continue
        study._storage.set_trial_user_attr(t._trial_id, STATUS, "stale")
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        study.enqueue_trial(t.params, user_attrs={"retry_of": t.number}, skip_if_exists=False)
        n += 1
    return n


def _alive(pid) -> bool:
    if pid is None:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_trial(cfg: DictConfig, study: optuna.Study, space: dict, trial_dir: Path) -> None:
    """Ask, train, tell: one trial, stored as complete or failed with its reason."""
    trial = study.ask()
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", os.getpid())
    finished, _ = counted(study)
    earlier_running = sum(
        t.state == TrialState.RUNNING and t.number < trial.number for t in study.get_trials(deepcopy=False)
    )
    if finished + earlier_running >= int(cfg.sweep.n_trials):
        trial.set_user_attr(STATUS, "surplus")
        study.tell(trial, state=TrialState.FAIL)
        return
    params = sample(trial, space)
    out = trial_dir / f"trial_{trial.number:04d}"
    trial_cfg = apply(cfg, params)
    trial_cfg.trainer.progress_bar = False
    trial_cfg.figures = False  # per-run figures are for the seed reruns, not for every trial
    trial_cfg.trainer.log_dce = False  # per-epoch DCE curves on the whole training split: unused here
    trial_cfg.trainer.csv_log = False  # Lightning's csv/metrics.csv repeats history.csv
    trial_cfg.save_checkpoint = bool(cfg.sweep.keep_checkpoints)  # else the best weights stay in memory
    trial.set_user_attr("run_dir", str(out))
    try:
        metrics = run(trial_cfg, out)
        if metrics["status"] != "ok":
            raise TrialFailed(f"diverged at epoch {metrics.get('epoch')}")
        value = trial_value(metrics, metrics_task(cfg), _n_val(cfg))
    except (TrialFailed, ConfigError) as exc:
        trial.set_user_attr(STATUS, "diverged" if isinstance(exc, TrialFailed) else "invalid_config")
        trial.set_user_attr("fail_reason", str(exc))
        study.tell(trial, state=TrialState.FAIL)
        return
    finally:
        if not cfg.sweep.keep_checkpoints:
            shutil.rmtree(out / "checkpoints", ignore_errors=True)
    for key in ("val/nll", "val/acc", "val/ece", "epochs", "best_epoch"):
        if key in metrics:
            trial.set_user_attr(key, metrics[key])
    trial.set_user_attr(STATUS, "ok")
    study.tell(trial, value)


def metrics_task(cfg: DictConfig) -> str:
    return get_spec(cfg.dataset.name).task


def _n_val(cfg: DictConfig) -> int:
    from kcal.data.splits import split_sizes

    return split_sizes(get_spec(cfg.dataset.name).n_used)[1]


def best_trial(study: optuna.Study) -> optuna.trial.FrozenTrial:
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if not done:
        raise IncompleteError(no_usable_trial(study))
    return study.best_trial


def no_usable_trial(study: optuna.Study) -> str:
    """Why a study has no completed trial, and what to change."""
    failed: dict[str, list] = {}
    for t in study.get_trials(deepcopy=False):
        if t.state.is_finished() and t.user_attrs.get(STATUS) not in NOT_COUNTED:
            failed.setdefault(t.user_attrs.get(STATUS, t.state.name.lower()), []).append(t)
    dataset, objective = (study.study_name.split("__") + ["<dataset>", "<objective>"])[:2]
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


def write_best(study: optuna.Study, sweep_dir: Path) -> Path:
    best = best_trial(study)
    info = {"study": study.study_name, "trial": best.number, "value": best.value, "params": best.params,
            "overrides": [f"{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in best.params.items()],
            "user_attrs": best.user_attrs}  # fmt: skip
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / "best.json"
    path.write_text(json.dumps(info, indent=1, default=str) + "\n")
    return path


def sweep(cfg: DictConfig) -> optuna.Study:
    """Run trials until the study holds ``n_trials`` finished ones; return the study."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = search_space(cfg)
    study = open_study(cfg)
    sweep_dir = Path(cfg.root) / cfg.dataset.name / cfg.objective.name / "sweep"
    if check_study(study, cfg, space):  # kcal.fingerprint: made with another config, and sweep.overwrite=true
        optuna.delete_study(study_name=study.study_name, storage=study._storage)
        shutil.rmtree(sweep_dir, ignore_errors=True)
        study = open_study(cfg)
        stamp_study(study, cfg, space)
    reclaimed = reclaim_stale(study)
    n_trials = int(cfg.sweep.n_trials)
    finished, _ = counted(study)
    if reclaimed:
        print(f"re-queued {reclaimed} trial(s) left running by a killed worker", file=sys.stderr)
    bar = tqdm(total=n_trials, initial=min(finished, n_trials), desc=f"sweep {cfg.sweep.study_name}",
               disable=not sys.stderr.isatty() and os.environ.get("KCAL_PROGRESS") != "1")  # fmt: skip
    while True:
        finished, running = counted(study)
        bar.n = min(finished, n_trials)
        best = _best_value(study)
        bar.set_postfix_str(f"best={best:.4g}" if best is not None else "best=-")
        bar.refresh()
        if finished + running >= n_trials:
            break
        run_trial(cfg, study, space, sweep_dir / "trials")
    bar.close()
    if _best_value(study) is not None:
        write_best(study, sweep_dir)
    return study


def _best_value(study: optuna.Study):
    try:
        return study.best_value
    except ValueError:
        return None


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="sweep")
@exits_on_config_error
def main(cfg: DictConfig) -> None:
    study = sweep(cfg)
    finished, running = counted(study)
    best = _best_value(study)
    if best is None and finished:
        raise IncompleteError(no_usable_trial(study))
    print(f"study {study.study_name}: {finished} finished trials ({running} running elsewhere); best value "
          f"{best if best is not None else '-'}; storage {storage_url(cfg)}")  # fmt: skip


if __name__ == "__main__":
    main()
