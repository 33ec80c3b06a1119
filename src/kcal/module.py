"""The one LightningModule: wires a network, an objective and the validation metrics.

Per-step math lives in :class:`kcal.objectives.Objective` (a function of outputs and batch); this
class only calls it, keeps running sums on the device (no per-step host sync), and at the end of
each validation epoch computes the whole-split selection metrics once.
"""

from __future__ import annotations

import math

import pytorch_lightning as pl
import torch

from kcal import seeding
from kcal.data.batches import TensorBatches
from kcal.data.dataset import DatasetSplits
from kcal.objectives import Objective


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
        self._train = None
        self._val: list = []

    def forward(self, x):
        return self.model(x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.parameters(), lr=self.lr, weight_decay=self.weight_decay)

    # ---- training --------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        self.noise = seeding.generator(seeding.noise_seed(self.seed), self.device)

    def on_train_epoch_start(self) -> None:
        self._train = torch.zeros(3, device=self.device)  # sum loss, sum base, sum reg (per batch)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss, base, reg = self.objective(self.model(x), x, y, generator=self.noise)
        self._train += torch.stack([loss.detach(), base.detach(), reg.detach()])
        return loss

    def on_train_epoch_end(self) -> None:
        n = max(self.trainer.num_training_batches, 1)
        loss, base, reg = (self._train / n).tolist()  # one host sync per epoch
        self.log_dict({"train/loss": loss, "train/base": base, "train/reg": reg})
        self._record({"train/loss": loss, "train/base": base, "train/reg": reg})
        if not math.isfinite(loss):
            self.diverged_epoch = self.current_epoch
            self.trainer.should_stop = True

    # ---- validation ------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._val = []
        # the same validation noise every epoch, so val/loss changes only through the weights
        self._val_noise = seeding.generator(seeding.eval_seed(self.seed), self.device)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        outputs = self.model(x)
        if x.shape[0] >= 2:
            loss, _, _ = self.objective(outputs, x, y, generator=self._val_noise)
        else:  # a 1-row tail batch has no U-statistic; use the base loss alone
            loss = self.objective.base(outputs, y)
        self._val.append((outputs, y, loss * x.shape[0]))

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking or not self._val:
            return
        n = sum(v[1].shape[0] for v in self._val)
        y = torch.cat([v[1] for v in self._val])
        metrics = {"val/loss": torch.stack([v[2] for v in self._val]).sum() / n}
        if self.task == "regression":
            mean = torch.cat([v[0][0] for v in self._val])
            std = torch.cat([v[0][1] for v in self._val])
            from kcal.objectives import gaussian_nll

            metrics["val/nll"] = gaussian_nll(mean, std, y)
            if self.log_dce:
                metrics |= self._decision_curves((mean, std), y)
        else:
            logits = torch.cat([v[0] for v in self._val])
            metrics["val/nll"] = torch.nn.functional.cross_entropy(logits, y)
            metrics["val/acc"] = (logits.argmax(-1) == y).float().mean()
        values = {k: float(v) for k, v in metrics.items()}  # one host sync per epoch
        for key, better in (("val/loss", min), ("val/nll", min), ("val/acc", max)):
            if key in values and math.isfinite(values[key]):
                self.best[key] = better(self.best.get(key, values[key]), values[key])
        self.log_dict(values, prog_bar=True)
        self._record(values)
        self._val = []

    def _decision_curves(self, val_outputs, val_y) -> dict:
        """Exact and official-style DCE on the whole train and validation splits (issue: Figures 3-4)."""
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

    def _record(self, values: dict) -> None:
        """Merge an epoch's values into ``history`` (validation runs before train-epoch end)."""
        if not self.history or self.history[-1]["epoch"] != self.current_epoch:
            self.history.append({"epoch": self.current_epoch})
        self.history[-1].update(values)
