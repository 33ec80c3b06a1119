"""Everything a run decides before any weight exists: config checks and every parameter resolution.

:func:`prepare` loads the data, rejects invalid values with a one-line :class:`~kcal.core.errors.ConfigError`
naming the key, and resolves the config's symbolic values in one place:

* ``decision_threshold: median`` -> the training target's median (0 under the official protocol);
* ``objective.params.bandwidth_z: median`` -> the median squared distance between training rows (a
  bandwidth left null is the library's default instead: the median heuristic on each batch);
* ``objective.bandwidth_z_phi`` (local calibration) -> ``objective.params.bandwidth_z`` from the rows'
  ``params.features`` columns only (``median``) or the number given;
* ``objective.params.threshold: auto`` -> the decision threshold;
* ``recalibrator: auto`` -> the task's default (:func:`kcal.recalibration.resolve_recalibrator`).

The training loop (:mod:`kcal.run.engine`) starts from the :class:`Prepared` it
returns, so a single run and a stacked member see the same objective, threshold and data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from kcal.baselines import ECE_KDE_FLAVOURS, MMCE_SCALINGS
from kcal.configs import CONFIG_DIR
from kcal.core import random_streams
from kcal.core.errors import ConfigError
from kcal.core.schema import Schema, choice, flag, integer, items, number, text
from kcal.data import get_spec, load
from kcal.data.dataset import DatasetSplits, Split
from kcal.data.preprocessing import PROTOCOLS, protocol_of
from kcal.data.registry import dataset_names
from kcal.evaluation import MAX_KCE_BANDWIDTH_ROWS
from kcal.inputs import TASKS
from kcal.kernels import KERNELS, median_heuristic
from kcal.mmd import CLASSIFICATION_FORMS, PAIRINGS, REGRESSION_FORMS
from kcal.models import MODEL_KINDS, build_model
from kcal.objectives import REGULARIZERS, Objective
from kcal.recalibration import RECALIBRATORS, resolve_recalibrator

#: objective params that must be numbers once resolved (``median``/``auto`` are resolved first)
NUMERIC_PARAMS = ("bandwidth_z", "bandwidth_y", "threshold")
#: the values of ``trainer.accelerator`` (:func:`device`)
ACCELERATORS = ("cpu", "gpu", "cuda", "mps", "auto")
#: ``objective.reduction``: what :class:`kcal.objectives.Objective` takes
REDUCTIONS = ("mean", "sum")
PER_BATCH = "the median heuristic on each batch"


def epochs_in_order(cfg: DictConfig) -> str | None:
    t = cfg.get("trainer")
    if t is not None and t.get("min_epochs") is not None and t.min_epochs > t.max_epochs:
        return (f"trainer.min_epochs={t.min_epochs} is above trainer.max_epochs={t.max_epochs}; lower "
                "trainer.min_epochs or raise trainer.max_epochs")  # fmt: skip
    return None


def objective_fits_task(cfg: DictConfig) -> str | None:
    """An objective for the dataset's task (``any``: both)."""
    task = get_spec(cfg.dataset.name).task
    if cfg.objective.task not in (task, "any"):
        return (f"objective={cfg.objective.name} is for {cfg.objective.task} but dataset={cfg.dataset.name} is "
                f"{task}; choose one of: {', '.join(objective_names(task))}")  # fmt: skip
    return None


def recalibrator_fits_task(cfg: DictConfig) -> str | None:
    task = get_spec(cfg.dataset.name).task
    if cfg.recalibrator.name not in RECALIBRATORS[task]:
        return f"recalibrator={cfg.recalibrator.name} does not apply to {task}; valid: {', '.join(RECALIBRATORS[task])}"
    return None


#: every key of ``kcal train``'s config (configs/train.yaml and its groups) and what it may hold
TRAIN_KEYS = Schema({
    "seed": integer(0, 2**32),
    "decision_threshold": number(words=("median",)),
    "save_checkpoint": flag(),
    "figures": flag(),
    "profile_name": text(),
    "dataset.name": choice(dataset_names, names="dataset"),
    "dataset.protocol": choice(lambda: PROTOCOLS),
    "dataset.max_train_rows": integer(1, null="every training row"),
    "dataset.local_features": items(integer(0), null="none"),
    "model.kind": choice(lambda: MODEL_KINDS),
    "model.widths": items(integer(1)),
    "model.batchnorm": flag(),
    "model.min_std": number(0, above=True),
    "objective.name": text(),
    "objective.task": choice(lambda: ("any", *TASKS)),
    "objective.regularizer": choice(lambda: sorted({r for rs in REGULARIZERS.values() for r in rs} - {None}),
                                    null="the base loss alone"),
    "objective.base_weight": number(0, above=True),
    "objective.weight": number(0),
    "objective.reduction": choice(lambda: REDUCTIONS),
    "objective.bandwidth_z_phi": number(0, above=True, words=("median",)),
    "objective.flavour_by_protocol.*": choice(lambda: ECE_KDE_FLAVOURS),
    "objective.scaling_by_protocol.*": choice(lambda: MMCE_SCALINGS),
    "objective.params.form": choice(lambda: [*REGRESSION_FORMS, *CLASSIFICATION_FORMS]),
    "objective.params.kernel_y": choice(lambda: KERNELS),
    "objective.params.kernel_z": choice(lambda: KERNELS),
    "objective.params.bandwidth_y": number(0, above=True, null=PER_BATCH),
    "objective.params.bandwidth_z": number(0, above=True, words=("median",), null=PER_BATCH),
    "objective.params.bandwidth": number(0, above=True, null="chosen per batch"),
    "objective.params.threshold": number(words=("auto",)),
    "objective.params.scale": number(0, above=True),
    "objective.params.num_samples": integer(1),
    "objective.params.pairing": choice(lambda: PAIRINGS),
    "objective.params.p": integer(1),
    "objective.params.flavour": choice(lambda: ECE_KDE_FLAVOURS),
    "objective.params.scaling": choice(lambda: MMCE_SCALINGS),
    "objective.params.features": items(integer(0)),
    "recalibrator.name": choice(lambda: sorted({r for rs in RECALIBRATORS.values() for r in rs})),
    "trainer.max_epochs": integer(1),
    "trainer.min_epochs": integer(0),
    "trainer.patience": integer(1),
    "trainer.monitor": text(prefix="val/"),
    "trainer.lr": number(0, above=True),
    "trainer.weight_decay": number(0),
    "trainer.gradient_clip_val": number(0, above=True, null="no clipping"),
    "trainer.batch_size": integer(2),  # BatchNorm and the MMD U-statistic need pairs
    "trainer.eval_batch_size": integer(2),
    "trainer.accelerator": choice(lambda: ACCELERATORS),
    "trainer.num_threads": integer(1),  # no null: torch's default is 1 in a pool worker, the cores alone
    "trainer.progress_bar": flag(),
    "trainer.snapshot_minutes": number(0, null="no snapshots"),
    "trainer.deterministic": flag(),
    "trainer.log_dce": flag(),
    "logger._target_": text(),
    "logger.name": text(),
    "logger.version": text(words=("",)),
    "logger.default_hp_metric": flag(),
}, relations=(epochs_in_order, objective_fits_task, recalibrator_fits_task))  # fmt: skip


def objective_names(task: str | None = None) -> list[str]:
    """Names of the objective configs (``configs/objective/*.yaml``) for ``task`` (None: all)."""
    names = []
    for path in sorted(Path(CONFIG_DIR, "objective").glob("*.yaml")):
        cfg = OmegaConf.load(path)
        if task is None or cfg.get("task") in (task, "any"):
            names.append(path.stem)
    return names


def subsample(data: DatasetSplits, max_train_rows: int | None) -> DatasetSplits:
    """Keep the first ``max_train_rows`` training rows (the split is already random)."""
    if not max_train_rows or max_train_rows >= len(data.train):
        return data
    return replace(data, train=Split(data.train.x[:max_train_rows], data.train.y[:max_train_rows]))


def load_data(cfg: DictConfig) -> DatasetSplits:
    """The splits a run with ``cfg`` trains on (``dataset.max_train_rows`` applied)."""
    return subsample(
        load(cfg.dataset.name, protocol=cfg.dataset.protocol, seed=cfg.seed), cfg.dataset.max_train_rows
    )


def validate(cfg: DictConfig, data: DatasetSplits) -> str:
    """Reject invalid values (:data:`TRAIN_KEYS`, then what only the data tells) with a one-line message naming
    the key, before training; return the resolved recalibrator name."""
    TRAIN_KEYS.validate(cfg)
    n_train, t = len(data.train), cfg.trainer
    if t.batch_size > n_train:
        raise ConfigError(f"trainer.batch_size={t.batch_size} is larger than the training split ({n_train} rows "
                          f"of {data.info.name}); lower it")  # fmt: skip
    return resolve_recalibrator(cfg.recalibrator.name, data.info.task)


def decision_threshold(cfg: DictConfig, data: DatasetSplits) -> float:
    """The decision threshold c in training-target units (paper Sec. 6.2)."""
    if data.info.task != "regression":
        return 0.0
    if cfg.decision_threshold == "median":
        # a target centred on the full-dataset median has c = 0 exactly
        rules = protocol_of(data.info.protocol)
        return (
            0.0
            if rules.median_centred_target and rules.full_data_statistics
            else float(data.train.y.median())
        )
    return float(cfg.decision_threshold)


def phi_bandwidth(cfg: DictConfig, data: DatasetSplits) -> float | None:
    """``objective.bandwidth_z_phi`` resolved: the kernel bandwidth on phi(x) = the ``params.features``
    columns (``median``: their median squared distance over training rows); None when the key is absent."""
    rule = cfg.objective.get("bandwidth_z_phi")
    if rule is None:
        return None
    if rule == "median":
        return median_heuristic(
            data.train.x[:, list(cfg.objective.params.features)], max_rows=MAX_KCE_BANDWIDTH_ROWS
        )
    try:
        value = float(rule)
    except ValueError:
        raise ConfigError(f"objective.bandwidth_z_phi={rule!r} is not a number (nor 'median')") from None
    if value <= 0:
        raise ConfigError(f"objective.bandwidth_z_phi must be > 0, got {value}")
    return value


def objective_params(cfg: DictConfig, data: DatasetSplits, threshold: float) -> dict:
    """``objective.params`` with every symbolic value resolved to a number."""
    params = OmegaConf.to_container(cfg.objective.params, resolve=True)
    if "bandwidth_x" in params:
        raise ConfigError(
            "objective.params.bandwidth_x is no parameter: the kernel on x takes objective.params.bandwidth_z"
        )
    if params.get("bandwidth_z") == "median":
        params["bandwidth_z"] = median_heuristic(data.train.x, max_rows=MAX_KCE_BANDWIDTH_ROWS)
    phi = phi_bandwidth(cfg, data)
    if phi is not None:
        params["bandwidth_z"] = phi
    if params.get("threshold") == "auto":
        params["threshold"] = threshold
    for key, value in params.items():
        if isinstance(value, str) and key in NUMERIC_PARAMS:
            raise ConfigError(f"objective.params.{key}={value!r} is not a number (nor 'median'/'auto')")
    return params


def base_weight(cfg: DictConfig) -> float:
    """``objective.base_weight``: the weight on the base loss (NLL / cross-entropy); 1 where a config (an
    objective config of the user's, a run saved before the key existed) has none."""
    return float(cfg.objective.get("base_weight", 1.0))


def objective_from_config(cfg: DictConfig, data: DatasetSplits, threshold: float) -> Objective:
    """The training objective of ``cfg`` with its parameters resolved on ``data``."""
    return Objective(
        name=cfg.objective.name, task=data.info.task, regularizer=cfg.objective.regularizer,
        weight=float(cfg.objective.weight), params=objective_params(cfg, data, threshold),
        reduction=cfg.objective.reduction, base_weight=base_weight(cfg),
    )  # fmt: skip


@dataclass
class Prepared:
    """Everything a run needs before any weight exists (shared by single and stacked training)."""

    cfg: DictConfig
    data: DatasetSplits
    objective: Objective
    threshold: float
    recalibrator: str = "none"  # the resolved post-hoc recalibrator (never "auto")

    @property
    def task(self) -> str:
        return self.data.info.task


def prepared_from(cfg: DictConfig, data: DatasetSplits) -> Prepared:
    """Validate ``cfg`` against ``data`` and resolve every parameter."""
    recalibrator = validate(cfg, data)
    threshold = decision_threshold(cfg, data)
    try:
        objective = objective_from_config(cfg, data, threshold)
    except ConfigError:
        raise
    except (
        ValueError
    ) as exc:  # the library's own check of an input (kcal.inputs, kcal.objectives): the config's
        raise ConfigError(" ".join(str(exc).split())) from None
    return Prepared(cfg, data, objective, threshold, recalibrator)


def prepare(cfg: DictConfig) -> Prepared:
    """Load and validate data and config; resolve symbolic parameters (see the module docstring)."""
    torch.distributions.Distribution.set_default_validate_args(False)
    if cfg.trainer.get("num_threads"):
        torch.set_num_threads(int(cfg.trainer.num_threads))
    return prepared_from(cfg, load_data(cfg))


def model_factory(prep: Prepared):
    """A zero-argument callable that builds the config's network (fresh weights from the global RNG)."""
    m, info = prep.cfg.model, prep.data.info
    return lambda: build_model(
        m.kind, info.task, info.d, info.m, m.widths, m.batchnorm, m.get("min_std", 0.05)
    )


def build(prep: Prepared, seed: int) -> torch.nn.Module:
    """The network with seed ``seed``'s initial weights (see :mod:`kcal.core.random_streams`)."""
    return random_streams.init_with_seed(seed, model_factory(prep))


def device(cfg: DictConfig) -> torch.device:
    """The torch device ``trainer.accelerator`` names (``auto``: CUDA, else MPS, else CPU)."""
    acc = str(cfg.trainer.accelerator)
    if acc not in ACCELERATORS:
        raise ConfigError(f"trainer.accelerator={acc} is not one of: {', '.join(ACCELERATORS)}")
    if acc in ("gpu", "cuda") or (acc == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    if acc == "mps" or (acc == "auto" and torch.backends.mps.is_available()):
        return torch.device("mps")
    return torch.device("cpu")
