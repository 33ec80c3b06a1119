"""sweep.pruner: a trial reports the running best of its validation NLL each epoch and stops where the study's
pruner says; pruned trials count towards n_trials; the pruner is part of the study's fingerprint."""

from __future__ import annotations

import math

import optuna
import pytest

from kcal.core.errors import ConfigError
from kcal.run import run
from kcal.sweep.fingerprint import shaping_config
from kcal.sweep.pruners import SETTINGS, make_pruner
from kcal.sweep.search import sweep
from kcal.sweep.studies import STATUS, counted

from .. import common
from ..data.conftest import needs

CRIME = ["dataset=crime", "objective=nll", *common.SMOKE]


def test_an_unknown_pruner_is_one_line_naming_the_valid_ones():
    with pytest.raises(ConfigError, match="sweep.pruner=median is not one of: null, median_warmup5"):
        make_pruner("median")
    assert isinstance(make_pruner(None), optuna.pruners.NopPruner)
    assert all(isinstance(make_pruner(n), optuna.pruners.BasePruner) for n in SETTINGS)


def test_the_pruner_is_in_the_fingerprint_only_when_set():
    plain = shaping_config(common.compose_cfg("sweep", *CRIME))
    assert "sweep.pruner" not in plain  # studies made before pruners existed keep their fingerprints
    pruned = shaping_config(common.compose_cfg("sweep", *CRIME, "sweep.pruner=median_warmup5"))
    assert pruned["sweep.pruner"] == "median_warmup5"


@needs("crime")
def test_an_epoch_hook_stops_a_run_where_it_says(tmp_path):
    cfg = common.compose_cfg(
        "train", *CRIME, "trainer.max_epochs=6", "trainer.min_epochs=0", "trainer.patience=6"
    )
    seen = []
    metrics = run(cfg, tmp_path, epoch_hook=lambda row, epoch: seen.append(row["val/nll"]) or epoch == 2)
    assert len(seen) == 3 and metrics["epochs"] == 3 and metrics["status"] == "ok"


@needs("crime")
def test_a_pruned_sweep_counts_pruned_trials_and_reports_running_bests(tmp_path):
    cfg = common.compose_cfg("sweep", *CRIME, f"root={tmp_path}", "sweep.n_trials=9", "trainer.max_epochs=8",
                             "trainer.min_epochs=0", "trainer.patience=8", "sweep.pruner=median_warmup5")  # fmt: skip
    sweep(cfg)
    study = optuna.load_study(study_name="crime__nll__paper", storage=f"sqlite:///{tmp_path / 'sweeps.db'}")
    assert counted(study) == (9, 0)
    for t in study.trials:
        curve = [t.intermediate_values[e] for e in sorted(t.intermediate_values)]
        assert curve and all(b <= a for a, b in zip(curve, curve[1:], strict=False))  # running bests
        assert all(math.isfinite(v) for v in curve)
        assert t.user_attrs["cpu_seconds"] > 0  # pruned trials record their cost too
        if t.state == optuna.trial.TrialState.PRUNED:
            assert t.user_attrs[STATUS] == "pruned" and len(curve) < 8
