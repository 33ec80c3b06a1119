"""The search space adapts to the data: no trial of the budget goes to a batch that cannot train; entries
can share one sampled value between config keys and derive a key from others (``authors_first``)."""

import optuna
import pytest

import kcal.run
from kcal.core.errors import ConfigError
from kcal.core.formula import evaluate, parse_formula
from kcal.sweep.search import run_trial
from kcal.sweep.search_space import apply, fit_to_data, sample, search_space, settings, train_rows

from ..common import compose_cfg


def sweep_cfg(*overrides):
    return compose_cfg("sweep", *overrides)


def test_batch_sizes_larger_than_the_training_split_are_not_sampled():
    # heart-disease keeps 299 rows: int(0.7 * 299) = 209 training rows, so 256 and 512 cannot train
    cfg = sweep_cfg("dataset=heart-disease", "objective=xe_mmd")
    assert train_rows(cfg) == 209
    assert search_space(cfg)["trainer.batch_size"]["choices"] == [16, 32, 64, 128]
    # crime (1395 training rows) keeps every choice of the paper's space
    assert search_space(sweep_cfg("dataset=crime"))["trainer.batch_size"]["choices"][-1] == 512


def test_max_train_rows_caps_the_batch_choices():
    cfg = sweep_cfg("dataset=crime", "dataset.max_train_rows=100")
    assert train_rows(cfg) == 100
    assert search_space(cfg)["trainer.batch_size"]["choices"] == [16, 32, 64]


def test_no_fitting_batch_size_is_a_config_error():
    with pytest.raises(ConfigError, match="no trainer.batch_size choice"):
        fit_to_data({"trainer.batch_size": {"choices": [64, 128]}}, n_train=10)


@pytest.mark.parametrize("objective", ["nll_mmd", "nll_mmd_tanh"])
def test_median_x_is_the_paper_space_without_the_x_bandwidth(objective):
    paper = search_space(sweep_cfg("dataset=crime", f"objective={objective}"))
    cfg = sweep_cfg("dataset=crime", f"objective={objective}", "hparams_search=median_x")
    median_x = search_space(cfg)
    assert "objective.params.bandwidth_z" in paper
    assert median_x == {k: v for k, v in paper.items() if k != "objective.params.bandwidth_z"}
    assert cfg.objective.params.bandwidth_z == "median"  # the config's value stays
    assert cfg.sweep.study_name == f"crime__{objective}__median_x"  # never the paper study


@pytest.mark.parametrize("dataset,objective", [("crime", "nll"), ("heart-disease", "xe_mmce")])
def test_median_x_leaves_objectives_without_an_x_kernel_alone(dataset, objective):
    overrides = (f"dataset={dataset}", f"objective={objective}")
    paper = search_space(sweep_cfg(*overrides))
    assert search_space(sweep_cfg(*overrides, "hparams_search=median_x")) == paper


AUTHORS_FIRST_NLL_MMD = {
    "model.widths.0": {"choices": [32, 64, 128, 256, 512]},
    "model.widths.1": {"choices": [32, 64, 128, 256, 512]},
    "model.widths.2": {"choices": [32, 64, 128, 256, 512]},
    "model.batchnorm": {"choices": [True, False]},
    "trainer.batch_size": {"choices": [16, 32, 64, 128, 256, 512]},
    "trainer.lr": {"low": 1e-7, "high": 1e-1, "log": True},
    "bandwidth": {"low": 0.001, "high": 10.0, "log": True,
                  "set": ["objective.params.bandwidth_y", "objective.params.bandwidth_z"]},
    "objective.params.kernel_y": {"choices": ["rbf", "tanh_decision"]},
    "nll_weight": {"low": 1e-4, "high": 10.0, "log": True, "set": []},
    "objective.weight": {"derive": "1 / (nll_weight * trainer.batch_size)"},
}  # fmt: skip


def test_authors_first_space_has_the_stated_ranges():
    cfg = sweep_cfg("dataset=crime", "objective=nll_mmd", "hparams_search=authors_first")
    assert search_space(cfg) == AUTHORS_FIRST_NLL_MMD
    # the weight 1 / (w * B) translates a summed NLL into kcal's mean NLL
    assert cfg.objective.reduction == "mean"
    nll = search_space(sweep_cfg("dataset=crime", "objective=nll", "hparams_search=authors_first"))
    assert nll["trainer.lr"] == {"low": 1e-7, "high": 1e-2, "log": True}
    assert {k: v for k, v in nll.items() if k != "trainer.lr"} == {
        k: v
        for k, v in search_space(sweep_cfg("dataset=crime", "objective=nll")).items()
        if k != "trainer.lr"
    }  # everything else as in the paper's space


@pytest.mark.parametrize("objective", ["nll", "nll_mmd"])
def test_authors_first_has_its_own_study(objective):
    cfg = sweep_cfg("dataset=crime", f"objective={objective}", "hparams_search=authors_first")
    assert cfg.sweep.study_name == f"crime__{objective}__authors_first"  # never the paper study


def test_authors_first_covers_only_nll_and_nll_mmd():
    with pytest.raises(
        ConfigError, match="authors_first has no entry for objective nll_mmd_tanh; it covers: nll, nll_mmd"
    ):
        search_space(sweep_cfg("dataset=crime", "objective=nll_mmd_tanh", "hparams_search=authors_first"))


def test_an_authors_first_trial_shares_the_bandwidth_and_derives_the_weight_from_its_batch_size():
    cfg = sweep_cfg("dataset=crime", "objective=nll_mmd", "hparams_search=authors_first")
    space = search_space(cfg)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    kernels, batches = set(), set()
    for _ in range(20):
        params = sample(study.ask(), space)
        assert "objective.weight" not in params and "objective.params.bandwidth_y" not in params
        # as a trial trains it, and as the seed reruns apply the best trial's params
        run_cfg = apply(cfg, params)
        p = run_cfg.objective.params
        assert p.bandwidth_y == p.bandwidth_z == params["bandwidth"]
        assert p.kernel_y in ("rbf", "tanh_decision")
        batch = run_cfg.trainer.batch_size
        assert run_cfg.objective.weight == pytest.approx(1 / (params["nll_weight"] * batch), rel=1e-12)
        assert "nll_weight" not in run_cfg and "bandwidth" not in run_cfg  # no stray keys
        kernels.add(p.kernel_y)
        batches.add(batch)
    assert kernels == {"rbf", "tanh_decision"} and len(batches) > 2


def test_the_study_records_the_sampled_nll_weight_and_the_derived_weight(monkeypatch, tmp_path):
    cfg = sweep_cfg("dataset=crime", "objective=nll_mmd", "hparams_search=authors_first")
    trained = []

    def fake_run(run_cfg, out, epoch_hook=None):
        trained.append(run_cfg)
        return {"status": "ok", "val/nll": 1.0}

    monkeypatch.setattr(kcal.run, "run", fake_run)  # run_trial imports it when a trial starts
    study = optuna.create_study()
    trial = run_trial(cfg, study, search_space(cfg), tmp_path)
    w, batch = trial.params["nll_weight"], trial.params["trainer.batch_size"]
    recorded = trial.user_attrs["settings"]
    assert recorded["objective.weight"] == pytest.approx(1 / (w * batch), rel=1e-12)
    assert (
        recorded["objective.params.bandwidth_y"]
        == recorded["objective.params.bandwidth_z"]
        == trial.params["bandwidth"]
    )
    assert trained[0].objective.weight == recorded["objective.weight"]
    assert settings(cfg, trial.params) == recorded


def test_a_derived_entry_is_left_alone_unless_the_params_name_one_of_its_inputs():
    cfg = sweep_cfg("dataset=crime", "objective=nll_mmd", "hparams_search=authors_first")
    # e.g. an ablation's override: the config's value stays
    assert settings(cfg, {"trainer.lr": 0.01}) == {"trainer.lr": 0.01}
    assert settings(cfg, {"objective.weight": 3.0, "nll_weight": 1.0}) == {"objective.weight": 3.0}
    # an input missing from the params comes from the config (trainer.batch_size: 64)
    assert settings(cfg, {"nll_weight": 0.5}) == {"objective.weight": 1 / 32}


def test_formulas_are_arithmetic_on_known_names():
    assert evaluate("2 ** -a.b / (c - 1)", {"a.b": 3, "c": 5}) == pytest.approx(1 / 32)
    for bad in ("__import__('os')", "a if b else c", "a[0]", "'text'", "a +"):
        with pytest.raises(ConfigError, match="is not a formula"):
            parse_formula(bad)
    cfg = sweep_cfg("dataset=crime", "objective=nll_mmd", "hparams_search=authors_first")
    cfg.hparams_search.objectives.nll_mmd["objective.weight"].derive = "1 / nll_wieght"
    with pytest.raises(ConfigError, match="nll_wieght in objective.weight's formula"):
        search_space(cfg)
