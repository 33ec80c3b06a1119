"""Lightning drives the training of every run: one Lightning step is one epoch of :mod:`kcal.run.engine`.

The networks are tiny, so Lightning's per-step machinery (hooks, logging, closures) cost as much as
the arithmetic when it drove every minibatch. Here Lightning stays the trainer of record (its fit loop,
``max_epochs``, the logger, the progress bar, ``deterministic``, the accelerator) while an epoch's
minibatch steps, its validation and the per-member rules run as one call of :meth:`Engine.epoch`:
:class:`EngineModule` has one "batch" per epoch and manual optimisation; it stops the fit once every
member has stopped. :func:`fit_members` runs it for K >= 1 members and returns their :class:`FitResult`. A stack of
seeds also writes a snapshot (a Lightning checkpoint carrying the engine's state) every so often, and a stopped one
goes on from it with Lightning's ``ckpt_path`` (:mod:`kcal.run.snapshot`).
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins.environments import SLURMEnvironment

from kcal.core.progress import duration
from kcal.run.engine import Engine, Member
from kcal.run.epoch import as_float32
from kcal.run.setup import Prepared
from kcal.run.snapshot import CHECKPOINT_KEY, Snapshot

log = logging.getLogger(__name__)

warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # a Lightning-internal deprecation, not ours
warnings.filterwarnings("ignore", message=".*does not have many workers.*")  # no DataLoader by design
warnings.filterwarnings(
    "ignore", message=".*configure_optimizers.*returned.*None.*"
)  # the engine's optimiser


def quiet_lightning() -> None:
    """Keep Lightning's per-run banners (GPU/TPU available, tips, 'fit stopped') out of sweeps."""
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


class EngineModule(pl.LightningModule):
    """One training step = one epoch of the engine (steps, validation, per-member rules)."""

    def __init__(self, engine: Engine, log_values: bool, bar=None, snapshot: Snapshot | None = None):
        super().__init__()
        self.engine, self.log_values, self.bar, self.snapshot = engine, log_values, bar, snapshot
        self.automatic_optimization = False
        self.t0 = time.perf_counter()

    def train_dataloader(self):
        return [0]  # one item: the epoch

    def configure_optimizers(self):
        return None

    def training_step(self, batch, batch_idx):
        rows = self.engine.epoch(self.current_epoch)
        if self.log_values and rows:  # a single member: Lightning's logger gets its epoch values
            # straight to the logger, as float32 with the epoch, as ``log_dict(on_epoch=True)`` hands them
            # over; its result collection costs ~1 ms a value (6.6 ms of crime's 20-30 ms epoch)
            epoch = self.current_epoch
            values = {k: as_float32(v) for k, v in rows[0].items() if k != "epoch"}
            self.logger.log_metrics({**values, "epoch": epoch}, step=epoch)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(training=len(self.engine.active))
        if not self.engine.active:
            self.trainer.should_stop = True

    def on_train_epoch_end(self):
        """Write the snapshot when it is due and members still train (a finished stack needs none), with a log line:
        a long stack's progress in the run's log."""
        if self.snapshot is not None and self.engine.active and self.snapshot.due():
            self.snapshot.save(self.trainer)
            log.info("epoch %d: %d of %d members training, %s trained; snapshot written to %s",
                     self.current_epoch, len(self.engine.active), len(self.engine.members),
                     duration(self.snapshot.seconds_before + time.perf_counter() - self.t0), self.snapshot.path)  # fmt: skip

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Lightning's checkpoint carries the engine's state, the snapshot's key and the seconds trained."""
        if self.snapshot is not None:
            checkpoint[CHECKPOINT_KEY] = self.snapshot.content(
                self.engine.state_dict(), time.perf_counter() - self.t0
            )

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Go on from a snapshot: the engine takes its state (Lightning restores which epoch comes next)."""
        if CHECKPOINT_KEY not in checkpoint:
            raise ValueError(
                "kcal trains from its own snapshots only (kcal.run.snapshot); this checkpoint is not one"
            )
        self.engine.load_state_dict(checkpoint[CHECKPOINT_KEY]["engine"])


@dataclass
class FitResult:
    epochs: int
    best_epoch: int | None  # None when no finite validation value was ever seen
    diverged_epoch: int | None
    best: dict[str, float]  # running best validation values
    train_seconds: float
    history: list[dict]  # one row per epoch: train/*, val/* (and train/dce, val/dce when logged)


def fit_members(prep: Prepared, members: list[Member], device: torch.device, out: Path | None = None,
                progress: bool = False, snapshot: Snapshot | None = None) -> tuple[Engine, float]:  # fmt: skip
    """Train ``members`` under a Lightning ``Trainer``; return the engine and the training seconds.

    ``snapshot``: written every so often while training and gone on from when one with its key is there
    (:mod:`kcal.run.snapshot`; the caller deletes it); the seconds then include those trained before it.

    With one member and a ``logger`` config (``configs/logger/``: Lightning's CSV logger writes
    ``out/csv/metrics.csv`` by default, ``logger=tensorboard`` ``out/tensorboard/``), its epoch values go to
    that logger; a terminal shows an epoch bar when ``progress`` (several members) or ``trainer.progress_bar``."""
    from tqdm.auto import tqdm

    cfg = prep.cfg
    single = len(members) == 1
    show = bool(cfg.trainer.progress_bar) or progress
    if not cfg.trainer.progress_bar:
        quiet_lightning()
    engine = Engine(prep, members, device)
    label = f"{prep.data.info.name}/{prep.objective.name}" + ("" if single else f" x{len(members)} seeds")
    # disable=None: tqdm draws only on a terminal; in a log file the per-chunk progress line reports
    bar = tqdm(total=int(cfg.trainer.max_epochs), desc=label, disable=None if show else True, leave=False,
               unit="epoch")  # fmt: skip
    log_values = single and out is not None and cfg.get("logger") is not None
    logger = hydra.utils.instantiate(cfg.logger, save_dir=str(out)) if log_values else False
    trainer = pl.Trainer(
        accelerator=cfg.trainer.accelerator, devices=1, max_epochs=int(cfg.trainer.max_epochs),
        logger=logger, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        num_sanity_val_steps=0, limit_val_batches=0, deterministic=cfg.trainer.deterministic,
        default_root_dir=out, log_every_n_steps=1,
        # on SLURM, Lightning would save a checkpoint mid-epoch at a requeue signal and train on from it; kcal's
        # own snapshots (kcal.run.snapshot) are what a stopped training goes on from
        plugins=[SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else None,
    )  # fmt: skip
    resume = snapshot.load() if snapshot is not None else None
    module = EngineModule(engine, log_values, bar, snapshot)
    try:
        trainer.fit(module, ckpt_path=resume, weights_only=True)
    finally:
        bar.close()
    seconds = time.perf_counter() - module.t0
    return engine, seconds + (snapshot.seconds_before if snapshot is not None else 0.0)


def member_result(member: Member, seconds: float) -> FitResult:
    """The :class:`FitResult` of a trained member (best epoch from its checkpoint rule)."""
    best_epoch = None
    if member.diverged_epoch is None and member.ckpt_state is not None:
        best_epoch = member.monitor.ckpt_epoch
    return FitResult(member.epochs, best_epoch, member.diverged_epoch, dict(member.best), seconds,
                     list(member.history))  # fmt: skip
