"""The presets named after the authors are their configs: ``experiment=authors_head_regression`` /
``authors_head_classification`` and ``hparams_search=authors_head`` are compared with the authors' own
config files at d52ae84 (read from ``<checkout>/../shared/reference/authors-code-d52ae84/configs``), so a
preset that drifts from them fails here.

Their experiment = their experiment file over the files its defaults name (datamodule, model, callbacks,
trainer), merged as Hydra merges them. Their search = ``hydra.sweeper.params`` of their
``hparams_search/*_optuna.yaml``: ``tag(log, interval(a, b))`` log-uniform, ``choice(...)`` categorical,
anything else fixed. Their loss is ``loss_scalers.nll * NLL + loss_scalers.mmd * MMD^2`` with the MMD's
kernels multiplied by ``scalers.x`` and ``scalers.y``, i.e. kcal's ``objective.base_weight`` and
``objective.weight = loss_scalers.mmd * scalers.x * scalers.y``.
"""

from __future__ import annotations

import inspect
import math
import random
import re

import pytest
import yaml
from omegaconf import OmegaConf

from kcal.mmd import classification_mmd, regression_mmd
from kcal.sweep.search_space import search_space, settings

from ..common import compose_cfg
from ..equivalence.authors import authors_dir

CONFIGS = authors_dir() / "configs"
pytestmark = pytest.mark.skipif(
    not CONFIGS.is_dir(), reason=f"the authors' configs are not at {CONFIGS} (../shared/reference)"
)

#: their experiment -> kcal's preset, the kcal objective of the same loss, and their search of it
EXPERIMENTS = {
    "regression_mixed": ("authors_head_regression", "nll_mmd", "regression_mixed_optuna"),
    "regression_nll": ("authors_head_regression", "nll", "regression_nll_optuna"),
    "classification_mixed": ("authors_head_classification", "xe_mmd", "classification_mixed_optuna"),
    "classification_nll": ("authors_head_classification", "xe", "classification_nll_optuna"),
    "classification_mmce": ("authors_head_classification", "xe_mmce", "classification_mmce_optuna"),
    "classification_ece_kde": ("authors_head_classification", "xe_kde", "classification_ece_kde_optuna"),
}
#: their key -> kcal's config path, for what shapes training in every experiment
TRAINING = {
    "seed": "seed",
    "model.lr": "trainer.lr",
    "model.weight_decay": "trainer.weight_decay",
    "model.net.lin1_size": "model.widths.0",
    "model.net.lin2_size": "model.widths.1",
    "model.net.lin3_size": "model.widths.2",
    "model.net.use_batchnorm": "model.batchnorm",
    "datamodule.batch_size": "trainer.batch_size",
    "datamodule.test_batch_size": "trainer.eval_batch_size",  # their validation batches too
    "trainer.min_epochs": "trainer.min_epochs",
    "trainer.max_epochs": "trainer.max_epochs",
    "trainer.gradient_clip_val": "trainer.gradient_clip_val",
    "callbacks.early_stopping.patience": "trainer.patience",
    "callbacks.early_stopping.monitor": "trainer.monitor",
    "callbacks.model_checkpoint.monitor": "trainer.monitor",
}
#: their searched key -> kcal's search-space entry (a config path, or a factor that only formulas use)
SEARCHED = {
    **{k: v for k, v in TRAINING.items() if k.startswith(("model.lr", "model.net", "datamodule.batch"))},
    "model.criterion.bandwidths.x": "objective.params.bandwidth_z",
    "model.criterion.bandwidths.y": "objective.params.bandwidth_y",
    "model.criterion.operands.y": "objective.params.kernel_y",
    "model.criterion.loss_scalers.nll": "objective.base_weight",
    "model.criterion.loss_scalers.mmd": "mmd_weight",
    "model.criterion.loss_scalers.mmce": "objective.weight",
    "model.criterion.loss_scalers.ece_kde": "objective.weight",
    "model.criterion.scalers.x": "scaler_x",
    "model.criterion.scalers.y": "scaler_y",
}
FACTORS = ("mmd_weight", "scaler_x", "scaler_y")  # sampled, written to no config key (set: [])
RECALIBRATORS = {"ConformalCalibrator": "conformal", "TemperatureScaling": "temperature"}
#: the MMD parameters the classification preset sets, which the other classification losses do not take
NOT_MMD = ("~objective.params.bandwidth_y", "~objective.params.bandwidth_z")


def authors_experiment(name: str):
    """Their experiment ``name`` merged over the datamodule, model, callbacks and trainer files it names."""
    exp = OmegaConf.load(CONFIGS / "experiment" / f"{name}.yaml")
    groups = {}
    for entry in exp.pop("defaults"):
        (key, value), = entry.items()  # fmt: skip
        group = key.removeprefix("override /")
        if group in ("datamodule", "model", "callbacks", "trainer"):
            groups[group] = OmegaConf.load(CONFIGS / group / value)
    return OmegaConf.merge(groups, exp)


def parse(value):
    """A sweeper parameter: ``{low, high, log}``, ``{choices}``, or the fixed value itself."""
    if not isinstance(value, str):
        return value
    if m := re.fullmatch(r"tag\(log,\s*interval\(([^,]+),\s*([^)]+)\)\)", value):
        return {"low": float(m[1]), "high": float(m[2]), "log": True}
    if m := re.fullmatch(r"interval\(([^,]+),\s*([^)]+)\)", value):
        return {"low": float(m[1]), "high": float(m[2])}
    if m := re.fullmatch(r"choice\((.*)\)", value):
        return {"choices": [yaml.safe_load(v.strip()) for v in m[1].split(",")]}
    return value


def authors_search(name: str) -> dict:
    params = OmegaConf.load(CONFIGS / "hparams_search" / f"{name}.yaml").hydra.sweeper.params
    return {k: parse(v) for k, v in OmegaConf.to_container(params).items()}


def preset(entry: str, experiment: str, objective: str, *more: str):
    """kcal's preset ``experiment`` for ``objective``, composed by ``entry`` (train, sweep, seeds)."""
    mmd = objective in ("nll_mmd", "xe_mmd", "nll", "xe")
    return compose_cfg(
        entry, f"experiment={experiment}", f"objective={objective}", *([] if mmd else NOT_MMD), *more
    )


def mmd_param(cfg, key: str):
    """An MMD parameter of ``cfg``'s objective: its config value, else the estimator's default."""
    if key in cfg.objective.params:
        return cfg.objective.params[key]
    fn = regression_mmd if cfg.objective.name.startswith("nll") else classification_mmd
    return inspect.signature(fn).parameters[key].default


@pytest.mark.parametrize("entry", ["train", "seeds"])  # seeds: with the full profile, composed after it
@pytest.mark.parametrize("theirs", list(EXPERIMENTS))
def test_the_presets_train_as_the_authors_experiments(theirs, entry):
    """Network, optimiser, batches, epochs, early stopping and seed of each of their six experiments are the
    preset's (the preset of NLL + MMD / XE + MMD also serves their NLL, XE, MMCE and ECE-KDE experiments)."""
    experiment, objective, _ = EXPERIMENTS[theirs]
    cfg, exp = preset(entry, experiment, objective), authors_experiment(theirs)
    for key, ours in TRAINING.items():
        assert OmegaConf.select(cfg, ours) == OmegaConf.select(exp, key), (key, ours)
    assert cfg.model.batchnorm is True  # their model files turn it on and no experiment turns it off
    assert cfg.dataset.protocol == "official"
    assert cfg.recalibrator.name == RECALIBRATORS[exp.model.calibrator._target_.rsplit(".", 1)[1]]
    if "dataset_name" in exp.datamodule and theirs.startswith("classification"):
        assert cfg.dataset.name == exp.datamodule.dataset_name  # adult (regression's default, wine, is none)


@pytest.mark.parametrize("theirs", ["regression_mixed", "classification_mixed"])
def test_the_presets_train_the_authors_mmd_loss(theirs):
    """Their loss_scalers and kernel scalers give base_weight and weight; their bandwidths (x: kcal's
    bandwidth_z), kernels, samples and conditioning (Z = X) are the preset's."""
    experiment, objective, _ = EXPERIMENTS[theirs]
    cfg, crit = preset("train", experiment, objective), authors_experiment(theirs).model.criterion
    assert cfg.objective.base_weight == crit.loss_scalers.nll
    assert cfg.objective.weight == pytest.approx(crit.loss_scalers.mmd * crit.scalers.x * crit.scalers.y)
    assert cfg.objective.params.bandwidth_z == crit.bandwidths.x
    assert cfg.objective.params.bandwidth_y == crit.bandwidths.y
    assert set(crit.operands) == {"x", "y"} and mmd_param(cfg, "form") == "individual"
    assert mmd_param(cfg, "kernel_z") == crit.operands.x and mmd_param(cfg, "kernel_y") == crit.operands.y
    if "num_samples" in crit:  # regression: forecast draws paired by index, as their GMMKernelLoss pairs them
        assert mmd_param(cfg, "num_samples") == crit.num_samples and mmd_param(cfg, "pairing") == "index"


@pytest.mark.parametrize("theirs", ["classification_mmce", "classification_ece_kde"])
def test_the_baselines_weights_are_the_authors(theirs):
    experiment, objective, _ = EXPERIMENTS[theirs]
    scalers = authors_experiment(theirs).model.criterion.loss_scalers
    cfg = compose_cfg("train", "dataset=adult", f"objective={objective}")
    assert cfg.objective.base_weight == scalers.nll
    assert cfg.objective.weight == scalers[{"xe_mmce": "mmce", "xe_kde": "ece_kde"}[objective]]


@pytest.mark.parametrize("theirs", list(EXPERIMENTS))
def test_the_search_space_is_the_authors(theirs):
    """Every range they sample is an entry of the same range (their loss and kernel scalers as kcal's
    base_weight or as factors of the derived weight), kcal samples nothing else, and what they fix
    is the preset's value."""
    experiment, objective, search = EXPERIMENTS[theirs]
    cfg = preset("sweep", experiment, objective, "hparams_search=authors_head")
    space, exp = search_space(cfg), authors_experiment(theirs)
    sampled = set()
    for key, dist in authors_search(search).items():
        if key == "model.net.num_components":  # kcal's Gaussian head is their one-component mixture
            assert dist == 1
            continue
        ours = SEARCHED[key]
        if isinstance(dist, dict):
            entry = dict(space[ours])
            assert entry.pop("set", None) == ([] if ours in FACTORS else None), key
            assert entry == dist, key
            sampled.add(ours)
        elif ours in space:  # fixed by them, a single choice here
            assert space[ours] == {"choices": [dist]}, key
            sampled.add(ours)
        elif ours == "mmd_weight":
            assert dist == exp.model.criterion.loss_scalers.mmd, key
        else:
            assert OmegaConf.select(cfg, ours) == dist, key
    assert {k for k, v in space.items() if "derive" not in v} == sampled
    assert [k for k, v in space.items() if "derive" in v] == (
        ["objective.weight"] if "mixed" in theirs else []
    )


@pytest.mark.parametrize("theirs", ["regression_mixed", "classification_mixed"])
def test_a_trial_trains_the_authors_weights(theirs):
    """For random draws of their space, the trial's base_weight and weight are their w_nll and
    w_mmd * s_x * s_y (each factor drawn, or their experiment's value where they fix it)."""
    experiment, objective, _ = EXPERIMENTS[theirs]
    cfg = preset("sweep", experiment, objective, "hparams_search=authors_head")
    space, crit = search_space(cfg), authors_experiment(theirs).model.criterion
    rng = random.Random(0)
    for _ in range(5):
        params = {k: math.exp(rng.uniform(math.log(v["low"]), math.log(v["high"])))
                  for k, v in space.items() if v.get("log")}  # fmt: skip
        values = settings(cfg, params)
        w_nll = params.get("objective.base_weight", crit.loss_scalers.nll)
        w_mmd = params.get("mmd_weight", crit.loss_scalers.mmd)
        s_x, s_y = params.get("scaler_x", crit.scalers.x), params.get("scaler_y", crit.scalers.y)
        assert values.get("objective.base_weight", cfg.objective.base_weight) == pytest.approx(w_nll)
        assert values["objective.weight"] == pytest.approx(w_mmd * s_x * s_y)


def test_the_decision_kernel_space_is_the_mmd_space_without_the_y_bandwidth():
    """They have no search for the tanh kernel at HEAD (it was their NLL + MMD search with operands.y=tanh):
    the same space without the y-bandwidth, which the tanh kernel ignores."""
    mmd = search_space(preset("sweep", "authors_head_regression", "nll_mmd", "hparams_search=authors_head"))
    tanh = search_space(
        preset("sweep", "authors_head_regression", "nll_mmd_tanh", "hparams_search=authors_head")
    )
    assert tanh == {k: v for k, v in mmd.items() if k != "objective.params.bandwidth_y"}


def test_only_the_authors_presets_change_patience_under_the_full_profile():
    """The full profile sets no patience, so a preset's (the authors' 30) holds for sweeps and seed reruns;
    every other experiment keeps the trainer's 50, as when the profile set it."""
    for experiment in ("paper_regression", "paper_classification", "paper_decision", "paper_sample_size",
                       "local_calibration", "authors_head_regression", "authors_head_classification"):  # fmt: skip
        cfg = compose_cfg("seeds", f"experiment={experiment}")
        assert cfg.trainer.patience == (30 if experiment.startswith("authors") else 50), experiment
        assert cfg.trainer.max_epochs == 200, experiment
