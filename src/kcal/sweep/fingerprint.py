"""The fingerprint of a result: everything that shapes its numbers, so that a resumed study or seed rerun
never mixes runs of different configurations.

A fingerprint is a flat ``{key: value}`` dict of

* the resolved config, minus what does not change a number: the seed (each trial and seed has its
  own), where results go (``root``, storage, study name, labels), how much is run (``sweep.n_trials``,
  ``seeds_run.n_seeds``, the stages of ``reproduce``, the points of ``kcal paths``), how it is run (worker
  index, threads, batched or one-by-one seeds, which are bit-identical), and what else is written
  (progress bars, figures, per-epoch DCE logs, checkpoints), and a key of :data:`LEFT_OUT_AT` while it
  holds that value (``sweep.selection: paper``, ``objective.params.flavour: kcal``,
  ``objective.base_weight: 1.0``, so studies and seed reruns made before the key existed keep their
  fingerprints). A stored fingerprint is read through the same rule, so one stored before a key was left
  out still resumes. A profile counts through the values it sets, not its name;
* ``data.<file>``: the hash of each raw file of the dataset (as verified by :mod:`kcal.data.sources`);
* ``kcal.version``.

A sweep study keeps its fingerprint as the study user attribute ``kcal_fingerprint`` (with the search
space that the sweep samples from, as ``search_space.<key>``); a seed rerun keeps it in
``<root>/<dataset>/<label>/fingerprint.json`` (with the best trial's parameters applied, and which
trial they came from). Resuming with another fingerprint is refused (:class:`FingerprintMismatch`,
a :class:`~kcal.core.errors.ConfigError`: one line, exit 2) naming the keys that differ and the two ways
out: a new ``root``, or ``sweep.overwrite=true`` / ``seeds_run.overwrite=true`` to discard the old
runs and start again (a matching fingerprint still resumes, so the flag can stay on a re-run).

Studies and seed directories made before fingerprints existed hold none: they are refused as
*unknown* unless they are empty, and ``sweep.adopt=true`` / ``seeds_run.adopt=true`` stamp them with
the current config (for a user who knows they were made with it); :func:`stamp_study` does the same
from Python.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

import kcal
from kcal.core import layout
from kcal.core.errors import ConfigError
from kcal.sweep.pruners import PRUNER_REPORT
from kcal.sweep.search_space import search_space

STUDY_ATTR = "kcal_fingerprint"
SEEDS_FILE = layout.FINGERPRINT_FILE
NOT_SHAPING = (  # config keys (and everything under them) that change no number of a run
    "seed", "root", "profile_name", "task", "hydra", "reproduce", "seeds_run", "hparams_search",
    "sweep.n_trials", "sweep.worker", "sweep.storage", "sweep.study_name", "sweep.keep_checkpoints",
    "sweep.overwrite", "sweep.adopt", "sweep.heartbeat_interval", "sweep.grace_period", "sweep.max_retry", "trainer.progress_bar", "trainer.num_threads", "trainer.snapshot_minutes", "trainer.log_dce", "logger",
    "figures", "save_checkpoint",
    "paths",  # which points a paths run trains (grids, objectives, seeds); each point's own config is the rest
    "objective.flavour_by_protocol",  # a table: the value it resolves to, objective.params.flavour, counts
)  # fmt: skip
# config key -> the value at which the fingerprint leaves it out
LEFT_OUT_AT = {
    "sweep.pruner": None,
    "sweep.startup_by": "finished",
    "sweep.mode": "async",  # the studies made before the deterministic sweep were asynchronous
    "sweep.batch": 1,
    "sweep.selection": "paper",
    "objective.params.flavour": "kcal",
    "objective.base_weight": 1.0,
}
SEEDS_ONLY_NOT_SHAPING = ("sweep",)  # seed runs take their hyperparameters from the best trial


class FingerprintMismatch(ConfigError):
    """A resumed study or seed rerun was made with a different (or unknown) configuration."""


def flatten(tree, prefix: str = "") -> dict[str, object]:
    if isinstance(tree, dict) and tree:
        out = {}
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def shaping_config(cfg: DictConfig, drop: tuple[str, ...] = ()) -> dict[str, object]:
    """The resolved config as flat keys, without :data:`NOT_SHAPING` (and ``drop``), and without a key of
    :data:`LEFT_OUT_AT` that holds its value there."""
    return shaping(flatten(OmegaConf.to_container(cfg, resolve=True)), drop)


def shaping(flat: dict[str, object], drop: tuple[str, ...] = ()) -> dict[str, object]:
    """``flat`` (config keys, or a stored fingerprint) without the keys :func:`shaping_config` leaves out. Applied to
    a stored fingerprint too, so one stored before a key was found not to shape a number still resumes."""
    excluded = NOT_SHAPING + drop
    return {k: v for k, v in flat.items()
            if not any(k == e or k.startswith(e + ".") for e in excluded) and LEFT_OUT_AT.get(k, ...) != v}  # fmt: skip


def data_hashes(dataset: str) -> dict[str, str]:
    from kcal.data import get_spec
    from kcal.data.sources import locate

    return {f"data.{name}": found.digest for name, found in locate(get_spec(dataset), download=False).items()}


def fingerprint(cfg: DictConfig, extra: dict | None = None, drop: tuple[str, ...] = ()) -> dict[str, object]:
    """Everything that shapes a result of ``cfg`` (see the module docstring); ``extra`` is added."""
    out = {**shaping_config(cfg, drop), **data_hashes(cfg.dataset.name), "kcal.version": kcal.__version__}
    out.update(extra or {})
    return json.loads(json.dumps(out, default=str))  # as stored: JSON types only


def study_fingerprint(cfg: DictConfig, space: dict | None = None) -> dict[str, object]:
    """A sweep's fingerprint: its config and the search space it samples from."""
    if space is None:
        space = search_space(cfg)
    extra = {f"search_space.{k}": v for k, v in flatten(space).items()}
    if (
        cfg.sweep.get("pruner") is not None
    ):  # a pruned study made before the report was signed is another protocol
        extra["sweep.pruner_report"] = PRUNER_REPORT
    return fingerprint(cfg, extra=extra)


def seeds_fingerprint(base: DictConfig, best: dict) -> dict[str, object]:
    """A seed rerun's fingerprint: the config it trains (best trial applied) and the trial it came from."""
    source = {"best_trial": f"{best['study']}#{best['trial']}"} if best else {"best_trial": None}
    return fingerprint(base, extra=source, drop=SEEDS_ONLY_NOT_SHAPING)


def differences(stored: dict, current: dict) -> list[str]:
    """``key (stored -> current)`` for every key whose value differs (``-`` where a key is absent)."""
    keys = sorted(set(stored) | set(current))
    return [f"{k} ({_show(stored, k)} -> {_show(current, k)})" for k in keys if stored.get(k, ...) != current.get(k, ...)]  # fmt: skip


def _show(d: dict, key: str) -> str:
    return json.dumps(d[key]) if key in d else "-"


def settle(stored: dict | None, current: dict, has_runs: bool, what: str, flag: str, overwrite: bool,
           adopt: bool) -> str:  # fmt: skip
    """Decide a resume: ``"resume"`` (fingerprints match), ``"stamp"`` (nothing to compare with yet, or
    adopted) or ``"overwrite"``; otherwise raise :class:`FingerprintMismatch` naming the differences."""
    if stored == current:
        return "resume"
    if stored is None:
        if not has_runs or adopt:
            return "stamp"
        if overwrite:
            return "overwrite"
        raise FingerprintMismatch(
            f"{what} has no configuration fingerprint (made by an older kcal), so its runs may come from another "
            f"config; pass {flag}.adopt=true if it was made with this same config, {flag}.overwrite=true to "
            "discard its runs and start again, or a new root=... to keep it apart"
        )
    if overwrite:
        return "overwrite"
    diff = differences(stored, current)
    shown = ", ".join(diff[:8]) + (f", and {len(diff) - 8} more" if len(diff) > 8 else "")
    raise FingerprintMismatch(
        f"{what} was made with a different configuration: {shown}; resuming would mix the two. Pass a new "
        f"root=... to keep both, or {flag}.overwrite=true to discard its runs and start again with this config"
    )


# ---- sweep studies -----------------------------------------------------------------------------------


def stamp_study(study, cfg: DictConfig, space: dict | None = None) -> None:
    """Store ``cfg``'s fingerprint on an Optuna study (e.g. a study made before fingerprints existed,
    by a running reproduction known to use the same config)."""
    study.set_user_attr(STUDY_ATTR, study_fingerprint(cfg, space))


def check_study(study, cfg: DictConfig, space: dict | None = None) -> bool:
    """Check a study before a sweep adds trials to it; stamp it when new (or adopted).

    Returns True when ``sweep.overwrite=true`` asks to discard it: the caller deletes the study, opens
    a new one and stamps it with :func:`stamp_study`. Raises :class:`FingerprintMismatch` otherwise.
    """
    current = study_fingerprint(cfg, space)
    stored = study.user_attrs.get(STUDY_ATTR)
    action = settle(None if stored is None else shaping(stored), current, has_runs=len(study.get_trials(deepcopy=False)) > 0,
                    what=f"sweep study {study.study_name!r}", flag="sweep",
                    overwrite=bool(cfg.sweep.get("overwrite")), adopt=bool(cfg.sweep.get("adopt")))  # fmt: skip
    if action == "stamp":
        study.set_user_attr(STUDY_ATTR, current)
    return action == "overwrite"


# ---- seed reruns -------------------------------------------------------------------------------------


def check_seeds(label_dir: Path, base: DictConfig, best: dict, cfg: DictConfig) -> None:
    """Check ``label_dir`` before training more seeds into it: resume, stamp, or (with
    ``seeds_run.overwrite=true``) delete its finished seeds; raise :class:`FingerprintMismatch` otherwise."""
    path = Path(label_dir) / SEEDS_FILE
    current = seeds_fingerprint(base, best)
    stored = shaping(json.loads(path.read_text()), SEEDS_ONLY_NOT_SHAPING) if path.is_file() else None
    has_runs = bool(layout.finished_seed_files(label_dir))
    action = settle(stored, current, has_runs, what=f"seed directory {label_dir}", flag="seeds_run",
                    overwrite=bool(cfg.seeds_run.get("overwrite")), adopt=bool(cfg.seeds_run.get("adopt")))  # fmt: skip
    if action == "overwrite":
        shutil.rmtree(layout.seeds_dir(label_dir), ignore_errors=True)
        (Path(label_dir) / layout.SUMMARY_FILE).unlink(missing_ok=True)
    if action != "resume":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
