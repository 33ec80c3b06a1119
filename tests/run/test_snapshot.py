"""kcal.run.snapshot: a stack of seeds stopped mid-training goes on from its last snapshot and ends as if never
stopped; a snapshot of another stack or an unreadable one is left aside."""

import json
import logging

import pytest
import torch
from omegaconf import OmegaConf

from kcal.core import layout
from kcal.run import engine as E
from kcal.run import single as S
from kcal.run import stacked as V
from kcal.run.snapshot import Snapshot, resumed_note, resumed_record, resumed_seconds, snapshot_key

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


def assert_same_training(a_dir, b_dir, a, b, seeds=SEEDS):
    """Two trainings of one stack ended alike: status, epochs, every metric and every history value."""
    for ma, mb, s in zip(a, b, seeds, strict=True):
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


CASES = {  # overrides, seeds, the epoch the training is stopped at, whether members left the stack before it
    "nll_mmd_noise_draws": ([*CRIME, "objective=nll_mmd", "trainer.max_epochs=12"], SEEDS, 5, False),
    "xe_mmce_batchnorm_members_stopped": ([*CANCER, "objective=xe_mmce", "model.batchnorm=true", "trainer.min_epochs=1",
                                           "trainer.patience=2", "trainer.max_epochs=20"], SEEDS, 4, True),
    "one_seed": ([*CRIME, "objective=nll", "trainer.max_epochs=8", "trainer.min_epochs=0"], [0], 3, False),
}  # fmt: skip


@needs_data
@pytest.mark.parametrize("case", CASES)
def test_a_stopped_stack_goes_on_from_its_snapshot_as_if_never_stopped(tmp_path, monkeypatch, caplog, case):
    overrides, seeds, stop, some_stopped = CASES[case]
    whole = train(
        cfg_for(*overrides, "trainer.snapshot_minutes=null"), tmp_path / "whole", seeds
    )  # writing none
    snap = layout.snapshot_file(tmp_path / "stopped" / f"s{seeds[0]}")
    with monkeypatch.context() as m, caplog.at_level(logging.INFO, logger="kcal.run.module"):
        stop_at(m, stop)
        with pytest.raises(Stop):
            train(cfg_for(*overrides, EVERY_EPOCH), tmp_path / "stopped", seeds)
    assert snap.is_file() and not layout.is_finished(snap.parent)
    saved = torch.load(snap, weights_only=True)
    assert saved["epoch"] == stop - 1 and saved["kcal_snapshot"]["seconds"] > 0
    training = len(saved["kcal_snapshot"]["engine"]["active"])
    assert (training < len(seeds)) == some_stopped
    # each snapshot is a progress line in the run's log
    assert f"epoch {stop - 1}: {training} of {len(seeds)} members training" in caplog.text
    assert caplog.text.count("snapshot written to") == stop
    caplog.clear()

    with caplog.at_level(
        logging.WARNING, logger="kcal.run.snapshot"
    ):  # null: writes none, still goes on from one
        resumed = train(cfg_for(*overrides, "trainer.snapshot_minutes=null"), tmp_path / "stopped", seeds)
    assert f"going on from {snap} at epoch {stop}" in caplog.text
    assert not snap.exists()  # deleted once the members' files are written
    assert_same_training(tmp_path / "stopped", tmp_path / "whole", resumed, whole, seeds)
    info = json.loads((snap.parent / "run.json").read_text())
    assert (
        info["resumed"]["epoch"] == stop
        and info["resumed"]["seconds_before"] == saved["kcal_snapshot"]["seconds"]
    )
    assert (
        info["train_seconds"] * len(seeds) >= saved["kcal_snapshot"]["seconds"]
    )  # the seconds before the stop count
    # what a progress line reads of it (kcal seeds, kcal paths), and nothing for a training never stopped
    assert (
        resumed_record(snap.parent) == info["resumed"]
        and resumed_record(tmp_path / "whole" / f"s{seeds[0]}") is None
    )
    assert resumed_note(info["resumed"]).endswith(f"before a stop (a snapshot at epoch {stop})")


@needs_data
def test_a_snapshot_of_another_stack_or_a_broken_one_is_left_aside(tmp_path, monkeypatch, caplog):
    cfg = cfg_for(*CRIME, "objective=nll", "trainer.max_epochs=6", "trainer.min_epochs=0", EVERY_EPOCH)
    whole = train(cfg, tmp_path / "whole")
    with monkeypatch.context() as m:  # a snapshot of seeds 0-2 with another learning rate
        stop_at(m, 3)
        with pytest.raises(Stop):
            train(cfg_for(*CRIME, "objective=nll", "trainer.max_epochs=6", "trainer.min_epochs=0", "trainer.lr=0.01", EVERY_EPOCH),
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
    stale = broken.with_name(broken.name + ".999.tmp")  # what a process stopped while writing leaves
    stale.write_bytes(b"half")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kcal.run.snapshot"):
        third = train(cfg, tmp_path / "broken")
    assert "cannot be read" in caplog.text and not broken.exists() and not stale.exists()
    assert_same_training(tmp_path / "broken", tmp_path / "whole", third, whole)


@needs_data
def test_snapshots_are_off_when_snapshot_minutes_is_null(tmp_path, monkeypatch):
    cfg = cfg_for(
        *CRIME,
        "objective=nll",
        "trainer.max_epochs=6",
        "trainer.min_epochs=0",
        "trainer.snapshot_minutes=null",
    )
    with monkeypatch.context() as m:
        stop_at(m, 3)
        with pytest.raises(Stop):
            train(cfg, tmp_path / "off")
    assert not layout.snapshot_file(tmp_path / "off" / "s0").exists()


def test_snapshot_minutes_must_be_a_number_of_minutes_or_null(tmp_path):
    cfg = OmegaConf.create({"trainer": {"snapshot_minutes": -1}})
    with pytest.raises(ValueError, match="snapshot_minutes must be >= 0 or null"):
        Snapshot.of(cfg, tmp_path / "snapshot.ckpt", "key")
    assert (
        Snapshot.of(OmegaConf.create({"trainer": {"snapshot_minutes": None}}), tmp_path, "key").due() is False
    )
    assert Snapshot.of(OmegaConf.create({"trainer": {"snapshot_minutes": 0}}), tmp_path, "key").due() is True


@needs_data
def test_a_stop_while_the_members_files_are_written_keeps_the_snapshot(tmp_path, monkeypatch):
    cfg = cfg_for(*CRIME, "objective=nll", "trainer.max_epochs=6", "trainer.min_epochs=0", EVERY_EPOCH)
    monkeypatch.setattr(S, "finalize", lambda *a, **k: (_ for _ in ()).throw(Stop("stopped while writing")))
    with pytest.raises(Stop):
        train(cfg, tmp_path / "writing")
    assert torch.load(layout.snapshot_file(tmp_path / "writing" / "s0"), weights_only=True)["epoch"] == 4


def test_the_key_holds_what_the_training_reads_and_not_how_runs_are_organised():
    cfg = cfg_for(*CRIME, "objective=nll")
    key = snapshot_key([cfg], [0], "cpu", "abc")
    organised = OmegaConf.merge(OmegaConf.to_container(cfg, resolve=True), {"root": "/elsewhere", "paths": {"objectives": ["xe_kde"]},
                                      "trainer": {"snapshot_minutes": 3, "progress_bar": False}})  # fmt: skip
    assert snapshot_key([organised], [0], "cpu", "abc") == key
    for other in (snapshot_key([cfg_for(*CRIME, "objective=nll", "trainer.lr=0.5")], [0], "cpu", "abc"),
                  snapshot_key([cfg], [1], "cpu", "abc"), snapshot_key([cfg], [0], "cuda:0", "abc"),
                  snapshot_key([cfg], [0], "cpu", "def")):  # fmt: skip
        assert other != key


def test_a_progress_line_reads_the_seconds_before_a_stop_once_per_stack(tmp_path):
    """A progress line's seconds are its process's: a training that went on from a snapshot says how long it trained
    before the stop, and the ETA counts it once per stack (its members each carry the record)."""
    records = {"a0": ({"resumed": {"epoch": 56, "seconds_before": 2511.2}, "vectorized": {"seeds": [0, 1]}}),
               "a1": ({"resumed": {"epoch": 56, "seconds_before": 2511.2}, "vectorized": {"seeds": [0, 1]}}),
               "b2": ({"resumed": {"epoch": 9, "seconds_before": 100.0}, "vectorized": {"seeds": [2]}}),
               "single": {"resumed": {"epoch": 3, "seconds_before": 10.0}}, "c3": {}}  # fmt: skip
    for name, info in records.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text(json.dumps(info))
    assert (
        resumed_note(resumed_record(tmp_path / "a0"))
        == ", after 41m51s before a stop (a snapshot at epoch 56)"
    )
    assert resumed_note(resumed_record(tmp_path / "c3")) == "" and resumed_record(tmp_path / "absent") is None
    assert resumed_seconds([tmp_path / n for n in (*records, "absent")]) == pytest.approx(
        2511.2 + 100.0 + 10.0
    )
