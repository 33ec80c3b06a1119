"""sweep.pruner: a trial reports the running best of its validation NLL each epoch and stops where the study's
pruner says; pruned trials count towards n_trials; the pruner is part of the study's fingerprint."""

from __future__ import annotations

import math

import optuna
import pytest

from kcal.core.errors import ConfigError
from kcal.run import run
from kcal.sweep.fingerprint import shaping_config, study_fingerprint
from kcal.sweep.pruners import PRUNER_REPORT, SETTINGS, CurveReporter, make_pruner
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


@needs("crime")  # a study's fingerprint holds its data's digest
def test_the_pruner_is_in_the_fingerprint_only_when_set():
    plain = shaping_config(common.compose_cfg("sweep", *CRIME))
    assert "sweep.pruner" not in plain  # studies made before pruners existed keep their fingerprints
    pruned = shaping_config(common.compose_cfg("sweep", *CRIME, "sweep.pruner=median_warmup5"))
    assert pruned["sweep.pruner"] == "median_warmup5"
    # a pruned study records that its trials report a signed loss: one made before the fix is not resumed
    assert "sweep.pruner_report" not in study_fingerprint(common.compose_cfg("sweep", *CRIME))
    signed = study_fingerprint(common.compose_cfg("sweep", *CRIME, "sweep.pruner=median_warmup5"))
    assert signed["sweep.pruner_report"] == PRUNER_REPORT


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


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
@pytest.mark.parametrize("setting", ["sha_min5", "median_warmup5"])
def test_the_pruner_stops_the_trials_with_the_worse_validation_loss_whatever_the_studys_direction(
    direction, setting
):
    """A classification study is maximised (its selection is validation accuracy) while its curve, the
    validation cross-entropy, is minimised: the value reported must be signed to the study, else Optuna's
    pruners keep the worst trials. Twelve trials alternate a good curve (loss 0.5) and a bad one (2.0)."""
    study = optuna.create_study(direction=direction, pruner=SETTINGS[setting](),
                                sampler=optuna.samplers.RandomSampler(0))  # fmt: skip
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruned = {}
    for n in range(12):
        trial, loss = study.ask(), (0.5 if n % 2 == 0 else 2.0) - n * 1e-3  # each good one the best yet
        report = CurveReporter(trial)
        stopped = next((e for e in range(30) if report(loss, e)), None)
        pruned[n] = stopped is not None
        if pruned[n]:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, report.value)
    assert any(pruned.values()), "nothing pruned: the test shows nothing"
    assert all(n % 2 == 1 for n, p in pruned.items() if p), f"good trials pruned: {pruned}"


@needs("breast-cancer")
def test_a_pruned_classification_sweep_reports_minus_the_running_best_cross_entropy(tmp_path):
    """The live sweep, in a maximised study: each epoch it reports minus the running best of the trial's
    validation cross-entropy (history.csv), so the pruner ranks a lower loss as better."""
    from kcal.sweep.pruners import running_best
    from kcal.sweep.search import CURVE_KEY, history_column

    cfg = common.compose_cfg("sweep", "dataset=breast-cancer", "objective=xe", *common.SMOKE, f"root={tmp_path}",
                             "sweep.n_trials=4", "trainer.max_epochs=4", "trainer.min_epochs=0",
                             "trainer.patience=4", "sweep.pruner=median_warmup5")  # fmt: skip
    sweep(cfg)
    study = optuna.load_study(
        study_name="breast-cancer__xe__paper", storage=f"sqlite:///{tmp_path / 'sweeps.db'}"
    )
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    for t in study.trials:
        from pathlib import Path

        curve = history_column(Path(t.user_attrs["run_dir"]), CURVE_KEY)
        best = running_best([curve[e] for e in sorted(curve)])
        reported = [t.intermediate_values[e] for e in sorted(t.intermediate_values)]
        assert reported == pytest.approx([-b for b in best[: len(reported)]]) and reported
