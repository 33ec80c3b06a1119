"""The search space adapts to the data: no trial of the budget goes to a batch that cannot train."""

import pytest
from hydra import compose, initialize_config_dir

from kcal.configs import CONFIG_DIR
from kcal.errors import ConfigError
from kcal.sweep import fit_to_data, search_space, train_rows


def sweep_cfg(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("sweep", overrides=list(overrides))


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
