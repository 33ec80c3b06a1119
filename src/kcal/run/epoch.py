"""The per-epoch rules of training, one implementation for every run.

The training loop (:mod:`kcal.run.engine`) calls these for every member of every run, so a change of a
validation metric, of the running bests or of the stopping rule is made once:

* :class:`ValidationAccumulator`: the whole-split validation metrics from per-batch outputs
  (``val/loss`` = the objective weighted by batch rows, ``val/nll``, and ``val/acc`` for classes);
* :func:`update_bests`: the running best of each validation value (NaN/inf never count);
* :func:`monitor_mode`: ``max`` for accuracies, ``min`` for everything else;
* :func:`diverged`: a non-finite mean training loss ends a run;
* :func:`train_values`: an epoch's mean training loss, base loss and regulariser, and the regulariser's
  share of the base loss (so ``history.csv`` shows whether the regulariser ever acted);
* :class:`MonitorState`: Lightning's ``EarlyStopping`` and ``ModelCheckpoint(save_top_k=1)`` on one
  monitored value, as plain state (for the stacked trainer, and for keeping the best weights in
  memory when no checkpoint file is wanted).

As torchmetrics does, argument checks live in the constructors, ``update``/``compute`` do the work,
and the math is plain functions (:func:`validation_metrics`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from kcal.inputs import TASKS
from kcal.metrics.regression import gaussian_nll

#: validation values with a running best, and which way is better
BEST_RULES = (("val/loss", min), ("val/nll", min), ("val/acc", max))


def monitor_mode(monitor: str) -> str:
    """``"max"`` when the monitored value is an accuracy, else ``"min"``."""
    return "max" if monitor.endswith("acc") else "min"


def diverged(train_loss: float) -> bool:
    """A run diverges when its mean training loss of an epoch is not finite."""
    return not math.isfinite(train_loss)


def train_values(
    loss: float, base: float, reg: float, weight: float, base_weight: float = 1.0
) -> dict[str, float]:
    """An epoch's ``train/loss``, ``train/base``, ``train/reg`` (means over its batches; ``train/base``
    unweighted) and ``train/reg_share`` = ``weight * |reg| / (base_weight * |base|)``: the weighted
    regulariser relative to the weighted base loss (0 without a regulariser; ~1e-10 means the term never
    acted)."""
    scaled = abs(base) if base_weight == 1.0 else base_weight * abs(base)
    share = weight * abs(reg) / scaled if scaled != 0 else math.inf
    return {"train/loss": loss, "train/base": base, "train/reg": reg, "train/reg_share": share}


def update_bests(best: dict[str, float], values: dict[str, float]) -> None:
    """Fold one epoch's finite validation ``values`` into the running ``best`` (in place)."""
    for key, better in BEST_RULES:
        if key in values and math.isfinite(values[key]):
            best[key] = better(best.get(key, values[key]), values[key])


def cat_outputs(chunks: list):
    """Concatenate per-batch network outputs (tensors, or tuples of tensors) along rows."""
    if isinstance(chunks[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*chunks, strict=True))
    return torch.cat(chunks)


def validation_metrics(task: str, outputs, y: torch.Tensor, loss_sum: torch.Tensor, n: int) -> dict:
    """Whole-split validation metrics as 0-d tensors.

    ``val/loss`` = loss_sum / n (loss_sum = sum over batches of batch-mean objective x batch rows);
    regression: ``val/nll`` = mean Gaussian NLL of ``outputs = (mean, std)``; classification:
    ``val/nll`` = cross-entropy of the logits and ``val/acc`` = mean(argmax logits == y).
    """
    metrics = {"val/loss": loss_sum / n}
    if task == "regression":
        mean, std = outputs
        metrics["val/nll"] = gaussian_nll((mean, std), y)
    else:
        metrics["val/nll"] = F.cross_entropy(outputs, y)
        metrics["val/acc"] = (outputs.argmax(-1) == y).float().mean()
    return metrics


class ValidationAccumulator:
    """Collects one validation epoch batch by batch; :meth:`compute` gives the whole-split values."""

    def __init__(self, task: str):
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        self.task = task
        self.reset()

    def reset(self) -> None:
        self.outputs: list = []
        self.targets: list[torch.Tensor] = []
        self.losses: list[torch.Tensor] = []

    def update(self, outputs, y: torch.Tensor, loss: torch.Tensor) -> None:
        """Add one batch: its network outputs, labels and batch-mean objective value."""
        self.outputs.append(outputs)
        self.targets.append(y)
        self.losses.append(loss * y.shape[0])

    @property
    def empty(self) -> bool:
        return not self.losses

    def split(self):
        """(outputs, labels) of the whole split, concatenated."""
        return cat_outputs(self.outputs), torch.cat(self.targets)

    def compute(self) -> dict[str, torch.Tensor]:
        outputs, y = self.split()
        return validation_metrics(self.task, outputs, y, torch.stack(self.losses).sum(), y.shape[0])


def as_float32(value: float) -> float:
    """Lightning logs python floats as float32 tensors and its callbacks compare those."""
    return float(np.float32(value))


@dataclass
class MonitorState:
    """``EarlyStopping(monitor, mode, patience)`` then ``ModelCheckpoint(monitor, mode, save_top_k=1)``
    on the values Lightning would compare (float32), as Lightning runs them each validation epoch.

    EarlyStopping (``check_finite=True``, ``min_delta=0``): a non-finite value requests a stop, a strict
    improvement resets the wait, else ``patience`` epochs without one request a stop; a request is never
    withdrawn. ModelCheckpoint: the first epoch is always saved, then strict improvements; a NaN is
    stored as the worst value.
    """

    monitor: str
    patience: int
    stop_requested: bool = False
    es_best: float = math.inf  # sign-adjusted: lower is better
    es_wait: int = 0
    ckpt_score: float | None = None  # sign-adjusted best checkpointed value, None before the first save
    ckpt_epoch: int | None = None

    def __post_init__(self):
        if self.patience < 1:
            raise ValueError(f"patience must be >= 1, got {self.patience}")
        self.sign = -1.0 if monitor_mode(self.monitor) == "max" else 1.0

    def update(self, values: dict[str, float], epoch: int) -> bool:
        """Apply one epoch's logged ``values``; return True when this epoch is the new best checkpoint."""
        if self.monitor not in values:
            raise ValueError(f"trainer.monitor={self.monitor!r} is not logged; logged keys: {sorted(values)}")
        current = as_float32(values[self.monitor]) * self.sign
        if not math.isfinite(current):
            self.stop_requested = True
        elif current < self.es_best:
            self.es_best, self.es_wait = current, 0
        else:
            self.es_wait += 1
            if self.es_wait >= self.patience:
                self.stop_requested = True
        if self.ckpt_score is None or current < self.ckpt_score:
            self.ckpt_score = math.inf if math.isnan(current) else current
            self.ckpt_epoch = epoch
            return True
        return False
