"""``--help`` of every entry point: a description, the config groups with their choices, three examples
that compose as printed; ``profile=...`` works for kcal.run.train as the help says."""

import shlex

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from kcal.configs import CONFIG_DIR

from .common import run_modules

ENTRY_POINTS = {
    "train": "train",
    "sweep": "sweep",
    "seeds": "seeds",
    "reproduce": "reproduce",
    "paths": "paths",
    "ablation": "ablation",
}


@pytest.fixture(scope="module")
def help_runs() -> dict:
    """``kcal <command> --help`` of every Hydra entry point (as ``python -m kcal``), run in one subprocess."""
    runs = run_modules([("kcal", [module, "--help"]) for module in ENTRY_POINTS], timeout=120)
    return dict(zip(ENTRY_POINTS, runs, strict=True))


@pytest.mark.parametrize("module", list(ENTRY_POINTS))
def test_help_describes_groups_and_examples_that_compose(module, help_runs):
    res = help_runs[module]
    assert res.returncode == 0, res.stderr[-2000:]
    text = res.stdout
    assert text.startswith(f"kcal {module}: ")
    assert "profile: full, quick, smoke" in text and "objective: nll, nll_mmd" in text
    examples = [line.strip() for line in text.split("== Examples ==")[1].splitlines()]
    examples = [line.split("    (")[0] for line in examples if line.startswith(f"kcal {module} ")]
    assert len(examples) == 3
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for example in examples:
            args = [a for a in shlex.split(example)[2:] if a not in ("-m", "--cfg", "job")]
            if "-m" in example:  # a grid: compose its first point
                args = [a.split(",")[0] if "=" in a and "[" not in a else a for a in args]
            cfg = compose(ENTRY_POINTS[module], overrides=args)
            if "profile=smoke" in args:
                assert cfg.profile_name == "smoke" and cfg.trainer.min_epochs == 0


def test_profile_applies_to_train_without_plus():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        assert compose("train").trainer.max_epochs == 200
        smoke = compose("train", overrides=["profile=smoke"])
        assert smoke.trainer.max_epochs == 2 and smoke.dataset.max_train_rows == 200
        # the reproduction's configs keep the profile over their own values
        assert compose("seeds", overrides=["profile=smoke"]).sweep.n_trials == 2
        assert compose("sweep").sweep.n_trials == 100


def test_train_runs_with_profile_smoke(train_cli_run):
    res, run_dir = train_cli_run  # kcal train profile=smoke dataset=crime ... (tests/conftest.py)
    assert "profile=smoke" in res.args
    assert res.returncode == 0, res.stderr[-2000:]
    assert OmegaConf.load(run_dir / "config.yaml").profile_name == "smoke"
