"""kcal.run.train end to end on small subsets: every objective, outputs, determinism, divergence, config errors."""

import csv
import json
from pathlib import Path

import pytest

from kcal.core.errors import ConfigError
from kcal.run import run

from ..common import assert_runs_close, compose_cfg, run_modules
from ..data.conftest import needs

pytestmark = needs("crime", "breast-cancer")
SMALL = ["trainer.max_epochs=2", "trainer.min_epochs=0", "trainer.progress_bar=false", "save_checkpoint=true"]
REGRESSION = ["dataset=crime", "dataset.max_train_rows=256"]
CLASSIFICATION = ["dataset=breast-cancer", "dataset.max_train_rows=200"]


def cfg_for(*overrides):
    return compose_cfg("train", *SMALL, *overrides)


@pytest.mark.parametrize(
    "overrides",
    [[*REGRESSION, "objective=nll", "recalibrator=isotonic"],
     [*REGRESSION, "objective=nll_mmd", "recalibrator=conformal"],
     [*REGRESSION, "objective=nll_mmd_tanh"],
     [*CLASSIFICATION, "objective=xe"],
     [*CLASSIFICATION, "objective=xe_mmd"],
     [*CLASSIFICATION, "objective=xe_mmce"],
     [*CLASSIFICATION, "objective=xe_kde"]],
)  # fmt: skip
def test_every_objective_trains_two_epochs(overrides, tmp_path):
    metrics = run(cfg_for(*overrides), tmp_path)
    assert metrics["status"] == "ok" and metrics["epochs"] == 2
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved == metrics
    for f in ("config.yaml", "run.json", "checkpoints/best.pt", "csv/metrics.csv"):
        assert (tmp_path / f).is_file(), f
    if "dataset=crime" in overrides:
        keys = ["val/nll", "test/nll", "test/qce", "test/dce", "test_recal/qce", "test_recal/nll",
                "official/test/qce", "official/test/dce", "official/test_recal/nll"]  # fmt: skip
    else:
        keys = ["val/acc", "val/ece", "test/acc", "test/ece", "test/entropy", "test/kce", "test_recal/ece",
                "official/test/acc", "official/test/ece", "official/test_recal/ece"]  # fmt: skip
    for key in keys:
        assert key in metrics and metrics[key] == metrics[key], key  # present and not NaN


def test_same_config_and_seed_give_identical_metrics(tmp_path):
    cfg = cfg_for(*REGRESSION, "objective=nll_mmd", "seed=3")
    run(cfg, tmp_path / "a")
    run(cfg, tmp_path / "b")
    # the same code path twice in one process on one machine: bit for bit (README, Conventions)
    assert (tmp_path / "a" / "metrics.json").read_bytes() == (tmp_path / "b" / "metrics.json").read_bytes()
    other = run(cfg_for(*REGRESSION, "objective=nll_mmd", "seed=4"), tmp_path / "c")
    assert other["test/nll"] != json.loads((tmp_path / "a" / "metrics.json").read_text())["test/nll"]
    # the history says how large the regulariser was relative to the base loss, every epoch
    rows = list(csv.DictReader((tmp_path / "a" / "history.csv").open()))
    weight = float(cfg.objective.weight)
    for row in rows:
        expected = weight * abs(float(row["train/reg"])) / abs(float(row["train/base"]))
        assert float(row["train/reg_share"]) == pytest.approx(expected, rel=1e-12)
    assert any(float(row["train/reg_share"]) > 0 for row in rows)


def test_a_null_bandwidth_in_the_config_is_the_per_batch_median_heuristic(tmp_path):
    """The library's default serves the configs too: null bandwidths train, and the term acts."""
    cfg = cfg_for(*REGRESSION, "objective=nll_mmd", "objective.params.bandwidth_z=null",
                  "objective.params.bandwidth_y=null", "trainer.max_epochs=3")  # fmt: skip
    metrics = run(cfg, tmp_path)
    assert metrics["status"] == "ok"
    rows = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert min(float(row["train/reg_share"]) for row in rows) > 1e-4


@pytest.mark.parametrize(
    "overrides",
    [[*REGRESSION, "objective=nll_mmd", "seed=2"],
     [*CLASSIFICATION, "objective=xe", "trainer.monitor=val/acc", "seed=1"]],
)  # fmt: skip
def test_a_run_that_keeps_its_best_weights_in_memory_gives_the_same_results(overrides, tmp_path):
    """Sweep trials skip the checkpoint file and Lightning's CSV log; nothing they report changes."""
    full = cfg_for(*overrides, "trainer.max_epochs=5", "trainer.patience=2")
    lean = cfg_for(*overrides, "trainer.max_epochs=5", "trainer.patience=2")
    lean.save_checkpoint, lean.logger = False, None
    run(full, tmp_path / "full")
    run(lean, tmp_path / "lean")
    for name in ("metrics.json", "history.csv"):  # the same training path, only the files differ: bit for bit
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "lean" / name).read_bytes(), name
    assert (tmp_path / "full" / "checkpoints" / "best.pt").is_file()
    assert not (tmp_path / "lean" / "checkpoints").exists() and not (tmp_path / "lean" / "csv").exists()


def test_a_diverging_loss_ends_the_run_with_status_diverged(tmp_path):
    metrics = run(cfg_for(*REGRESSION, "objective=nll", "trainer.lr=1e30", "trainer.gradient_clip_val=null",
                          "trainer.max_epochs=5"), tmp_path)  # fmt: skip
    assert metrics["status"] == "diverged" and isinstance(metrics["epoch"], int)
    assert json.loads((tmp_path / "metrics.json").read_text())["status"] == "diverged"


def test_a_run_whose_forecasts_are_not_finite_is_diverged_not_an_error(tmp_path, monkeypatch):
    """A finite training loss with non-finite forecasts (an overflowing std): the library's metrics refuse such
    forecasts, so the run is not scored; it ends "diverged", as before the library checked its input."""
    from kcal.run import artifacts

    real = artifacts.regression_predictions

    def overflowing(model, data):
        preds = real(model, data)
        preds["test_std"] = preds["test_std"] * float("inf")
        return preds

    monkeypatch.setattr(artifacts, "regression_predictions", overflowing)
    metrics = run(cfg_for(*REGRESSION, "objective=nll", "trainer.max_epochs=2"), tmp_path)
    assert metrics["status"] == "diverged" and "test/nll" not in metrics


@pytest.mark.parametrize(
    ("override", "message"),
    [("objective.params.bandwidth_y=-1", "objective.params.bandwidth_y must be a finite number > 0"),
     ("model.widths=[0,64,64]", "model.widths must be a non-empty list of integers >= 1"),
     ("trainer.batch_size=100000", "larger than the training split"),
     ("objective.weight=-2", "objective.weight must be a finite number >= 0"),
     ("objective=xe", "choose one of"),
     ("trainer.num_threads=null", "trainer.num_threads must be an integer >= 1")],
)  # fmt: skip
def test_invalid_values_are_rejected_before_training(override, message, tmp_path):
    base = [o for o in REGRESSION] + ["objective=nll_mmd"]
    with pytest.raises(ConfigError, match=message):
        run(cfg_for(*base, override), tmp_path)
    assert not (tmp_path / "metrics.json").exists()


def test_unknown_group_option_lists_the_choices():
    with pytest.raises(Exception) as err:  # hydra.errors.MissingConfigException
        cfg_for("objective=nll_mmmd")
    msg = str(err.value)
    assert "nll_mmmd" in msg and "nll_mmd" in msg and "xe_kde" in msg


def _cli(*args) -> tuple[str, list[str]]:
    flags = [a for a in args if a.startswith("-")]
    overrides = [a for a in args if not a.startswith("-")]
    return "kcal.run.train", [*flags, *SMALL, *overrides]


def test_cli_single_run_multirun_and_config_error(tmp_path, train_cli_run):
    single, run_dir = train_cli_run  # kcal train dataset=crime objective=nll ... (conftest.py)
    assert single.returncode == 0, single.stderr[-2000:]
    assert json.loads((run_dir / "metrics.json").read_text())["status"] == "ok"
    assert single.stdout.strip().splitlines()[-1] == f"run: {run_dir}"  # where it wrote
    # the config error first (its check of stderr is the strictest), then the multirun, in one subprocess
    bad, multi = run_modules([
        _cli(*REGRESSION, "trainer.batch_size=100000", f"hydra.run.dir={tmp_path / 'bad'}"),
        _cli("-m", "dataset=crime,breast-cancer", "dataset.max_train_rows=128", "objective=nll", "seed=0",
             f"hydra.sweep.dir={tmp_path / 'many'}"),
    ], env={"PYTHONUNBUFFERED": "1"}, cwd=tmp_path)  # fmt: skip
    assert multi.returncode == 0, multi.stderr[-2000:]
    assert len(list(Path(tmp_path / "many").glob("*/metrics.json"))) == 2
    assert bad.returncode == 2 and "config error" in bad.stderr and "Traceback" not in bad.stderr


def test_the_logger_group_sends_epoch_values_to_tensorboard_or_nowhere(tmp_path):
    """logger=tensorboard: Lightning's TensorBoardLogger gets one point per epoch of each value that
    history.csv holds; ~logger (Hydra's delete): no Lightning log at all; history.csv is the same in both."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    overrides = [*CLASSIFICATION, "objective=xe", "trainer.max_epochs=3", "trainer.min_epochs=3"]
    run(cfg_for(*overrides, "logger=tensorboard"), tmp_path / "tb")
    run(cfg_for(*overrides, "~logger"), tmp_path / "none")
    events = EventAccumulator(str(tmp_path / "tb" / "tensorboard")).Reload()
    with open(tmp_path / "tb" / "history.csv") as f:
        history = list(csv.DictReader(f))
    assert [e.value for e in events.Scalars("val/loss")] == pytest.approx(
        [float(r["val/loss"]) for r in history]
    )
    assert not (tmp_path / "tb" / "csv").exists()
    assert not (tmp_path / "none" / "csv").exists() and not (tmp_path / "none" / "tensorboard").exists()
    assert (tmp_path / "tb" / "history.csv").read_bytes() == (tmp_path / "none" / "history.csv").read_bytes()


def test_the_csv_logger_gets_each_epochs_history_row_as_float32(tmp_path):
    """Lightning's CSV logger: one row per epoch (epoch, step = the epoch, every history value as the
    float32 Lightning logs), sent straight to the logger rather than through log_dict."""
    import numpy as np

    run(
        cfg_for(*CLASSIFICATION, "objective=xe_mmd", "trainer.max_epochs=3", "trainer.min_epochs=3"), tmp_path
    )
    with open(tmp_path / "history.csv") as f:
        history = list(csv.DictReader(f))
    with open(tmp_path / "csv" / "metrics.csv") as f:
        logged = list(csv.DictReader(f))
    assert [(r["epoch"], r["step"]) for r in logged] == [("0", "0"), ("1", "1"), ("2", "2")]
    assert set(logged[0]) == set(history[0]) | {"step"}
    for h, row in zip(history, logged, strict=True):
        assert all(float(row[k]) == float(np.float32(float(h[k]))) for k in h if k != "epoch")


@pytest.mark.parametrize("objective", ["nll_mmd", "nll"])
def test_an_epoch_gathered_in_chunks_trains_as_one_gathered_whole(objective, tmp_path, monkeypatch):
    """The engine gathers an epoch's batches (and builds their MMD constants) in chunks of at most
    GATHER_ELEMENTS elements: a chunk per step gives the same run as the whole epoch at once. Without the MMD
    gathering is indexing, so bit for bit; with it, the x-kernels of a chunk are one batched product over
    fewer batches, which a CPU may round otherwise: to a trained run's rounding (TRAINED_RTOL)."""
    from kcal.run import engine

    cfg = cfg_for(*REGRESSION, f"objective={objective}", "trainer.max_epochs=3", "trainer.min_epochs=3")
    run(cfg, tmp_path / "whole")
    monkeypatch.setattr(engine, "GATHER_ELEMENTS", 1)  # every step its own chunk
    run(cfg, tmp_path / "chunks")
    if objective == "nll":
        for name in ("metrics.json", "history.csv"):
            assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "chunks" / name).read_bytes(), name
    else:
        assert_runs_close(tmp_path / "chunks", tmp_path / "whole")
