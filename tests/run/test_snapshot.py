"""kcal.run.snapshot: a stack of seeds stopped mid-training goes on from its last snapshot and ends as if never
stopped; a snapshot of another stack or an unreadable one is left aside."""

import json
import logging

import pytest
import torch

from kcal.core import layout
from kcal.run import engine as E
from kcal.run import stacked as V

from .test_vectorized import CANCER, CRIME, assert_close, cfg_for, history, needs_data, numbers

SEEDS = [0, 1, 2]
EVERY_EPOCH = "trainer.snapshot_minutes=0"


class Stop(Exception):
    """Stands for a killed process."""


def stop_at(monkeypatch, epoch: int) -> None:
    """Make the engine raise when it reaches ``epoch`` (snapshots up to ``epoch - 1`` are written by then)."""
    real = E.Engine.epoch

    def epoch_or_stop(self, e):
        if e == epoch:
            raise Stop(f"stopped at epoch {e}")
        return real(self, e)

    monkeypatch.setattr(E.Engine, "epoch", epoch_or_stop)


def train(cfg, folder, seeds=SEEDS):
    return V.train_stacked(cfg, seeds, [folder / f"s{s}" for s in seeds], progress=False)


def assert_same_training(a_dir, b_dir, a, b):
    """Two trainings of one stack ended alike: status, epochs, every metric and every history value."""
    for ma, mb, s in zip(a, b, SEEDS, strict=True):
        assert (ma["status"], ma["epochs"], ma.get("best_epoch")) == (
            mb["status"],
            mb["epochs"],
            mb.get("best_epoch"),
        )
        for key, value in numbers(mb).items():
            assert_close(ma[key], value, key, tol=1e-6)
        ha, hb = history(a_dir / f"s{s}" / "history.csv"), history(b_dir / f"s{s}" / "history.csv")
        assert [r["epoch"] for r in ha] == [str(e) for e in range(len(hb))]
        for ra, rb in zip(ha, hb, strict=True):
            for key in rb:
                if rb[key]:
                    assert_close(
                        float(ra[key]), float(rb[key]), f"history {key} epoch {rb['epoch']}", tol=1e-6
                    )


@needs_data
@pytest.mark.parametrize("overrides", [
    [*CRIME, "objective=nll_mmd", "trainer.max_epochs=12", "trainer.patience=3"],  # members stop at different epochs
    [*CANCER, "objective=xe_mmce", "trainer.max_epochs=8", "model.batchnorm=true"],  # per-member regulariser, BatchNorm
], ids=["nll_mmd_early_stopping", "xe_mmce_batchnorm"])  # fmt: skip
def test_a_stopped_stack_goes_on_from_its_snapshot_as_if_never_stopped(
    tmp_path, monkeypatch, caplog, overrides
):
    cfg = cfg_for(*overrides, EVERY_EPOCH)
    whole = train(cfg_for(*overrides, "trainer.snapshot_minutes=null"), tmp_path / "whole")  # writing none
    snap = layout.snapshot_file(tmp_path / "stopped" / "s0")

    with monkeypatch.context() as m:
        stop_at(m, 5)
        with pytest.raises(Stop):
            train(cfg, tmp_path / "stopped")
    assert snap.is_file() and not layout.is_finished(tmp_path / "stopped" / "s0")
    saved = torch.load(snap, weights_only=True)
    assert saved["epoch"] == 4 and saved["kcal_snapshot"]["seconds"] > 0

    with caplog.at_level(logging.WARNING, logger="kcal.run.snapshot"):
        resumed = train(cfg, tmp_path / "stopped")
    assert "going on from" in caplog.text and "at epoch 5" in caplog.text
    assert not snap.exists()  # a finished training deletes its snapshot
    assert_same_training(tmp_path / "stopped", tmp_path / "whole", resumed, whole)
    info = json.loads((tmp_path / "stopped" / "s0" / "run.json").read_text())
    assert (
        info["vectorized"]["chunk_train_seconds"] >= saved["kcal_snapshot"]["seconds"]
    )  # seconds before the stop count


@needs_data
def test_a_snapshot_of_another_stack_or_a_broken_one_is_left_aside(tmp_path, monkeypatch, caplog):
    cfg = cfg_for(*CRIME, "objective=nll", "trainer.max_epochs=6", EVERY_EPOCH)
    whole = train(cfg, tmp_path / "whole")
    with monkeypatch.context() as m:  # a snapshot of seeds 0-2 with another learning rate
        stop_at(m, 3)
        with pytest.raises(Stop):
            train(cfg_for(*CRIME, "objective=nll", "trainer.max_epochs=6", "trainer.lr=0.01", EVERY_EPOCH),
                  tmp_path / "other")  # fmt: skip
    snap = layout.snapshot_file(tmp_path / "other" / "s0")
    assert snap.is_file()
    with caplog.at_level(logging.WARNING, logger="kcal.run.snapshot"):
        again = train(cfg, tmp_path / "other")
    assert "another stack, configuration or commit; training from the start" in caplog.text
    assert_same_training(tmp_path / "other", tmp_path / "whole", again, whole)

    broken = layout.snapshot_file(tmp_path / "broken" / "s0")
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"half a checkpoint")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kcal.run.snapshot"):
        third = train(cfg, tmp_path / "broken")
    assert "cannot be read" in caplog.text and not broken.exists()
    assert_same_training(tmp_path / "broken", tmp_path / "whole", third, whole)


@needs_data
def test_snapshots_are_off_when_snapshot_minutes_is_null(tmp_path, monkeypatch):
    cfg = cfg_for(*CRIME, "objective=nll", "trainer.max_epochs=6", "trainer.snapshot_minutes=null")
    with monkeypatch.context() as m:
        stop_at(m, 3)
        with pytest.raises(Stop):
            train(cfg, tmp_path / "off")
    assert not layout.snapshot_file(tmp_path / "off" / "s0").exists()
