"""The one LightningModule and its fit: wires a network, an objective and the per-epoch rules.

Per-step math lives in :class:`kcal.objectives.Objective` (a function of outputs and batch); the
module only calls it, keeps running sums on the device (no per-step host sync), and at the end of
each validation epoch computes the whole-split metrics once through :mod:`kcal.run.epoch` (the rules
the stacked trainer shares). :func:`fit` runs it under a Lightning ``Trainer`` with early stopping
and best-weights selection on ``trainer.monitor``.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
import torch

from kcal import seeding
from kcal.data.batches import TensorBatches
from kcal.data.dataset import DatasetSplits
from kcal.objectives import Objective
from kcal.run.epoch import (
    MonitorState,
    ValidationAccumulator,
    diverged,
    monitor_mode,
    train_values,
    update_bests,
)
from kcal.run.setup import Prepared

warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # a Lightning-internal deprecation, not ours
warnings.filterwarnings("ignore", message=".*does not have many workers.*")  # no DataLoader by design


def quiet_lightning() -> None:
    """Keep Lightning's per-run banners (GPU/TPU available, tips, 'fit stopped') out of sweeps."""
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


class TensorDataModule(pl.LightningDataModule):
    """Train/val splits as tensors on the training device, batched by :class:`TensorBatches`."""

    def __init__(self, data: DatasetSplits, batch_size: int, eval_batch_size: int, seed: int):
        super().__init__()
        self.data, self.batch_size, self.eval_batch_size, self.seed = data, batch_size, eval_batch_size, seed
        self.train = self.val = None

    def setup(self, stage: str | None = None) -> None:
        device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
        self.train, self.val = self.data.train.to(device), self.data.val.to(device)

    def train_dataloader(self):
        return TensorBatches(self.train.x, self.train.y, self.batch_size, shuffle=True, drop_last=True,
                             seed=seeding.shuffle_seed(self.seed))  # fmt: skip

    def val_dataloader(self):
        return TensorBatches(self.val.x, self.val.y, self.eval_batch_size)


class CalibrationModule(pl.LightningModule):
    def __init__(self, model: torch.nn.Module, objective: Objective, lr: float = 1e-3, weight_decay: float = 5e-4,
                 seed: int = 0, threshold: float = 0.0, log_dce: bool = False):  # fmt: skip
        super().__init__()
        self.model, self.objective, self.seed = model, objective, seed
        self.threshold, self.log_dce = threshold, log_dce and objective.task == "regression"
        self.noise: torch.Generator | None = None  # MMD sample stream, created on the training device
        self.lr, self.weight_decay = lr, weight_decay
        self.task = objective.task
        self.diverged_epoch: int | None = None
        self.history: list[dict] = []
        self.best: dict[str, float] = {}
        self.train_sums: torch.Tensor | None = None
        self.validation = ValidationAccumulator(self.task)
        self.val_noise: torch.Generator | None = None

    def forward(self, x):
        return self.model(x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.parameters(), lr=self.lr, weight_decay=self.weight_decay)

    # ---- training --------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        self.noise = seeding.generator(seeding.noise_seed(self.seed), self.device)

    def on_train_epoch_start(self) -> None:
        self.train_sums = torch.zeros(3, device=self.device)  # sum loss, sum base, sum reg (per batch)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss, base, reg = self.objective(self.model(x), x, y, generator=self.noise)
        self.train_sums += torch.stack([loss.detach(), base.detach(), reg.detach()])
        return loss

    def on_train_epoch_end(self) -> None:
        n = max(self.trainer.num_training_batches, 1)
        values = train_values(
            *(self.train_sums / n).tolist(), self.objective.weight
        )  # one host sync per epoch
        self.log_dict(values)
        self.record(values)
        loss = values["train/loss"]
        if diverged(loss):
            self.diverged_epoch = self.current_epoch
            self.trainer.should_stop = True

    # ---- validation ------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self.validation.reset()
        # the same validation noise every epoch, so val/loss changes only through the weights
        self.val_noise = seeding.generator(seeding.eval_seed(self.seed), self.device)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        outputs = self.model(x)
        if x.shape[0] >= 2:
            loss, _, _ = self.objective(outputs, x, y, generator=self.val_noise)
        else:  # a 1-row tail batch has no U-statistic; use the base loss alone
            loss = self.objective.base(outputs, y)
        self.validation.update(outputs, y, loss)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or self.validation.empty:
            return
        metrics = self.validation.compute()
        if self.log_dce:
            metrics |= self.decision_curves(*self.validation.split())
        values = {k: float(v) for k, v in metrics.items()}  # one host sync per epoch
        update_bests(self.best, values)
        self.log_dict(values, prog_bar=True)
        self.record(values)
        self.validation.reset()

    def decision_curves(self, val_outputs, val_y) -> dict:
        """Exact and official-style DCE on the whole train and validation splits (paper Figures 3-4)."""
        from kcal.diagnostics import decision_curves

        train = self.trainer.datamodule.train
        with torch.no_grad():
            was_training = self.model.training
            self.model.eval()
            train_outputs = self.model(train.x)
            self.model.train(was_training)
        seed = seeding.eval_seed(self.seed)
        return {**decision_curves(train_outputs, train.y, self.threshold, "train", seed),
                **decision_curves(val_outputs, val_y, self.threshold, "val", seed)}  # fmt: skip

    def record(self, values: dict) -> None:
        """Merge an epoch's values into ``history`` (validation runs before train-epoch end)."""
        if not self.history or self.history[-1]["epoch"] != self.current_epoch:
            self.history.append({"epoch": self.current_epoch})
        self.history[-1].update(values)


class BestInMemory(pl.callbacks.Checkpoint):
    """``ModelCheckpoint(monitor, mode, save_top_k=1)`` without a file: the best ``state_dict`` is kept
    as a copy in memory (same selection rule, :class:`kcal.run.epoch.MonitorState`). For runs whose
    checkpoint is never read afterwards (sweep trials), this saves a ``torch.save`` per improving epoch."""

    def __init__(self, monitor: str, patience: int):
        self.rule = MonitorState(monitor, patience)
        self.state: dict[str, torch.Tensor] | None = None
        self.epoch: int | None = None

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        values = {k: float(v) for k, v in trainer.callback_metrics.items()}
        if self.rule.update(values, trainer.current_epoch):
            self.state = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
            self.epoch = trainer.current_epoch


@dataclass
class FitResult:
    epochs: int
    best_epoch: int | None  # None when no finite validation value was ever seen
    diverged_epoch: int | None
    best: dict[str, float]  # running best validation values
    train_seconds: float
    history: list[dict]  # one row per epoch: train/*, val/* (and train/dce, val/dce when logged)


def fit(prep: Prepared, model: torch.nn.Module, out: Path) -> tuple[CalibrationModule, FitResult]:
    """Train with Lightning; on return the module holds the best-validation weights.

    ``save_checkpoint`` true: the best weights go through Lightning's ``checkpoints/best.ckpt``; false:
    they stay in memory (:class:`BestInMemory`). ``trainer.csv_log`` false drops Lightning's
    ``csv/metrics.csv`` (``history.csv`` holds the same values)."""
    cfg = prep.cfg
    if not cfg.trainer.progress_bar:
        quiet_lightning()
    module = CalibrationModule(model, prep.objective, lr=cfg.trainer.lr, weight_decay=cfg.trainer.weight_decay,
                               seed=cfg.seed, threshold=prep.threshold, log_dce=cfg.trainer.log_dce)  # fmt: skip
    datamodule = TensorDataModule(
        prep.data, cfg.trainer.batch_size, cfg.trainer.eval_batch_size, seed=cfg.seed
    )
    monitor = cfg.trainer.monitor
    mode = monitor_mode(monitor)
    if cfg.save_checkpoint:
        checkpoint = pl.callbacks.ModelCheckpoint(dirpath=out / "checkpoints", filename="best", monitor=monitor,
                                                  mode=mode, save_top_k=1, save_last=False,
                                                  enable_version_counter=False)  # fmt: skip
    else:
        checkpoint = BestInMemory(monitor, int(cfg.trainer.patience))
    callbacks = [
        checkpoint,
        pl.callbacks.EarlyStopping(monitor=monitor, mode=mode, patience=cfg.trainer.patience),
    ]
    if cfg.trainer.progress_bar:
        callbacks.append(pl.callbacks.TQDMProgressBar(refresh_rate=50))
    logger = pl.loggers.CSVLogger(out, name="csv", version="") if cfg.trainer.get("csv_log", True) else False
    trainer = pl.Trainer(
        accelerator=cfg.trainer.accelerator, devices=1, max_epochs=cfg.trainer.max_epochs,
        min_epochs=cfg.trainer.min_epochs, gradient_clip_val=cfg.trainer.gradient_clip_val,
        callbacks=callbacks, logger=logger,
        enable_progress_bar=bool(cfg.trainer.progress_bar), enable_model_summary=False,
        num_sanity_val_steps=0, deterministic=cfg.trainer.deterministic, default_root_dir=out,
        log_every_n_steps=1,
    )  # fmt: skip
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=datamodule)
    seconds = time.perf_counter() - t0
    best_epoch = None
    if module.diverged_epoch is None:
        if isinstance(checkpoint, BestInMemory) and checkpoint.state is not None:
            module.load_state_dict(checkpoint.state)
            best_epoch = int(checkpoint.epoch)
        elif isinstance(checkpoint, pl.callbacks.ModelCheckpoint) and checkpoint.best_model_path:
            state = torch.load(checkpoint.best_model_path, map_location=module.device, weights_only=False)
            module.load_state_dict(state["state_dict"])
            best_epoch = int(state["epoch"])
    result = FitResult(len(module.history), best_epoch, module.diverged_epoch, dict(module.best), seconds,
                       list(module.history))  # fmt: skip
    return module, result
