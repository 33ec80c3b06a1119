"""Train one model from one Hydra command and write its results.

    python -m kcal.train dataset=crime objective=nll_mmd recalibrator=isotonic seed=3
    python -m kcal.train -m dataset=crime,adult objective=nll,xe_mmd seed=0,1

Writes into the Hydra run directory: ``config.yaml`` (resolved), ``metrics.json`` (deterministic:
same config and seed give the same file on CPU), ``run.json`` (timings, paths, versions),
``checkpoints/best.ckpt`` and ``csv/metrics.csv`` (per-epoch log).
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import hydra
import numpy as np
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from kcal import seeding
from kcal.configs import CONFIG_DIR, CONFIG_PATH
from kcal.data import load
from kcal.data.dataset import DatasetSplits, Split
from kcal.errors import ConfigError, exits_on_config_error
from kcal.evaluation import (
    RECALIBRATORS,
    classification_predictions,
    evaluate_classification,
    evaluate_regression,
    median_sq_distance,
    regression_predictions,
    resolve_recalibrator,
)
from kcal.models import build_model
from kcal.module import CalibrationModule, TensorDataModule
from kcal.objectives import Objective

warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # a Lightning-internal deprecation, not ours
warnings.filterwarnings("ignore", message=".*does not have many workers.*")  # no DataLoader by design


def quiet_lightning() -> None:
    """Keep Lightning's per-run banners (GPU/TPU available, tips, 'fit stopped') out of sweeps."""
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


def objective_names(task: str | None = None) -> list[str]:
    names = []
    for path in sorted(Path(CONFIG_DIR, "objective").glob("*.yaml")):
        cfg = OmegaConf.load(path)
        if task is None or cfg.get("task") in (task, "any"):
            names.append(path.stem)
    return names


def subsample(data: DatasetSplits, max_train_rows: int | None) -> DatasetSplits:
    """Keep the first ``max_train_rows`` training rows (the split is already random)."""
    if not max_train_rows or max_train_rows >= len(data.train):
        return data
    return replace(data, train=Split(data.train.x[:max_train_rows], data.train.y[:max_train_rows]))


def validate(cfg: DictConfig, data: DatasetSplits) -> None:
    """Reject invalid values with a message naming the key, before training."""
    task, t = data.info.task, cfg.trainer
    if cfg.objective.task not in (task, "any"):
        raise ConfigError(
            f"objective={cfg.objective.name} is for {cfg.objective.task} but dataset={data.info.name} is "
            f"{task}; choose one of: {', '.join(objective_names(task))}"
        )
    if cfg.recalibrator.name not in RECALIBRATORS[task]:
        raise ConfigError(
            f"recalibrator={cfg.recalibrator.name} does not apply to {task}; valid: {', '.join(RECALIBRATORS[task])}"
        )
    n_train = len(data.train)
    checks = [
        (t.batch_size >= 2, f"trainer.batch_size must be >= 2 (BatchNorm and the MMD U-statistic need pairs), got {t.batch_size}"),
        (t.batch_size <= n_train, f"trainer.batch_size={t.batch_size} is larger than the training split ({n_train} rows of {data.info.name}); lower it"),
        (t.eval_batch_size >= 2, f"trainer.eval_batch_size must be >= 2, got {t.eval_batch_size}"),
        (t.lr > 0 and math.isfinite(t.lr), f"trainer.lr must be > 0, got {t.lr}"),
        (t.weight_decay >= 0, f"trainer.weight_decay must be >= 0, got {t.weight_decay}"),
        (t.max_epochs >= 1, f"trainer.max_epochs must be >= 1, got {t.max_epochs}"),
        (t.min_epochs >= 0, f"trainer.min_epochs must be >= 0, got {t.min_epochs}"),
        (t.patience >= 1, f"trainer.patience must be >= 1, got {t.patience}"),
        (t.gradient_clip_val is None or t.gradient_clip_val > 0, f"trainer.gradient_clip_val must be > 0 or null, got {t.gradient_clip_val}"),
        (all(int(w) >= 1 for w in cfg.model.widths), f"model.widths must all be >= 1, got {list(cfg.model.widths)}"),
        (cfg.objective.weight >= 0, f"objective.weight must be >= 0, got {cfg.objective.weight}"),
    ]  # fmt: skip
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    for key, value in cfg.objective.params.items():
        if "bandwidth" in key and isinstance(value, int | float) and value <= 0:
            raise ConfigError(f"objective.params.{key} must be > 0, got {value}")
        if key == "num_samples" and value < 1:
            raise ConfigError(f"objective.params.num_samples must be >= 1, got {value}")


def decision_threshold(cfg: DictConfig, data: DatasetSplits) -> float:
    """The decision threshold c in training-target units (paper Sec. 6.2)."""
    if data.info.task != "regression":
        return 0.0
    if cfg.decision_threshold == "median":
        # official targets are centred on the full-dataset median, so c = 0 exactly
        return 0.0 if data.info.protocol == "official" else float(data.train.y.median())
    return float(cfg.decision_threshold)


def objective_from_config(cfg: DictConfig, data: DatasetSplits, threshold: float) -> Objective:
    params = OmegaConf.to_container(cfg.objective.params, resolve=True)
    for key in ("bandwidth_z", "bandwidth_x"):
        if params.get(key) == "median":
            params[key] = median_sq_distance(data.train.x)
    if params.get("threshold") == "auto":
        params["threshold"] = threshold
    for key, value in params.items():
        if isinstance(value, str) and key in ("bandwidth_z", "bandwidth_x", "bandwidth_y", "threshold"):
            raise ConfigError(f"objective.params.{key}={value!r} is not a number (nor 'median'/'auto')")
    return Objective(
        name=cfg.objective.name, task=data.info.task, regularizer=cfg.objective.regularizer,
        weight=float(cfg.objective.weight), params=params, reduction=cfg.objective.reduction,
    )  # fmt: skip


@dataclass
class Prepared:
    """Everything a run needs before any weight exists (shared by single and vectorised training)."""

    cfg: DictConfig
    data: DatasetSplits
    objective: Objective
    threshold: float

    @property
    def task(self) -> str:
        return self.data.info.task


@dataclass
class FitResult:
    epochs: int
    best_epoch: int | None  # None when no finite validation value was ever seen
    diverged_epoch: int | None
    best: dict[str, float]  # running best validation values
    train_seconds: float
    history: list[dict]  # one row per epoch: train/*, val/* (and train/dce, val/dce when logged)


def prepare(cfg: DictConfig) -> Prepared:
    """Load and validate data and config; resolve ``median`` bandwidths and the decision threshold."""
    torch.distributions.Distribution.set_default_validate_args(False)
    if cfg.trainer.get("num_threads"):
        torch.set_num_threads(int(cfg.trainer.num_threads))
    data = subsample(
        load(cfg.dataset.name, protocol=cfg.dataset.protocol, seed=cfg.seed), cfg.dataset.max_train_rows
    )
    validate(cfg, data)
    threshold = decision_threshold(cfg, data)
    return Prepared(cfg, data, objective_from_config(cfg, data, threshold), threshold)


def model_factory(prep: Prepared):
    m, info = prep.cfg.model, prep.data.info
    return lambda: build_model(
        m.kind, info.task, info.d, info.m, m.widths, m.batchnorm, m.get("min_std", 0.05)
    )


def build(prep: Prepared, seed: int) -> torch.nn.Module:
    """The network with seed ``seed``'s initial weights (see :mod:`kcal.seeding`)."""
    return seeding.init_with_seed(seed, model_factory(prep))


def fit(prep: Prepared, model: torch.nn.Module, out: Path) -> tuple[CalibrationModule, FitResult]:
    """Train with Lightning; on return the module holds the best-validation weights."""
    cfg = prep.cfg
    if not cfg.trainer.progress_bar:
        quiet_lightning()
    module = CalibrationModule(model, prep.objective, lr=cfg.trainer.lr, weight_decay=cfg.trainer.weight_decay,
                               seed=cfg.seed, threshold=prep.threshold, log_dce=cfg.trainer.log_dce)  # fmt: skip
    datamodule = TensorDataModule(
        prep.data, cfg.trainer.batch_size, cfg.trainer.eval_batch_size, seed=cfg.seed
    )
    monitor = cfg.trainer.monitor
    mode = "max" if monitor.endswith("acc") else "min"
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=out / "checkpoints", filename="best", monitor=monitor, mode=mode,
                                              save_top_k=1, save_last=False, enable_version_counter=False)  # fmt: skip
    callbacks = [
        checkpoint,
        pl.callbacks.EarlyStopping(monitor=monitor, mode=mode, patience=cfg.trainer.patience),
    ]
    if cfg.trainer.progress_bar:
        callbacks.append(pl.callbacks.TQDMProgressBar(refresh_rate=50))
    trainer = pl.Trainer(
        accelerator=cfg.trainer.accelerator, devices=1, max_epochs=cfg.trainer.max_epochs,
        min_epochs=cfg.trainer.min_epochs, gradient_clip_val=cfg.trainer.gradient_clip_val,
        callbacks=callbacks, logger=pl.loggers.CSVLogger(out, name="csv", version=""),
        enable_progress_bar=bool(cfg.trainer.progress_bar), enable_model_summary=False,
        num_sanity_val_steps=0, deterministic=cfg.trainer.deterministic, default_root_dir=out,
        log_every_n_steps=1,
    )  # fmt: skip
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=datamodule)
    seconds = time.perf_counter() - t0
    best_epoch = None
    if checkpoint.best_model_path and module.diverged_epoch is None:
        state = torch.load(checkpoint.best_model_path, map_location=module.device, weights_only=False)
        module.load_state_dict(state["state_dict"])
        best_epoch = int(state["epoch"])
        if not cfg.save_checkpoint:
            Path(checkpoint.best_model_path).unlink(missing_ok=True)
    result = FitResult(len(module.history), best_epoch, module.diverged_epoch, dict(module.best), seconds,
                       list(module.history))  # fmt: skip
    return module, result


def finalize(prep: Prepared, model: torch.nn.Module, result: FitResult, out: Path, seed: int,
             extra_run_info: dict | None = None) -> dict:  # fmt: skip
    """Evaluate the best weights, write ``metrics.json`` and ``run.json``; return the metrics."""
    cfg, data = prep.cfg, prep.data
    metrics = {
        "dataset": cfg.dataset.name, "protocol": cfg.dataset.protocol, "objective": cfg.objective.name,
        "recalibrator": resolve_recalibrator(cfg.recalibrator.name, prep.task), "seed": int(seed),
        "epochs": result.epochs,
    }  # fmt: skip
    if result.diverged_epoch is not None or result.best_epoch is None:
        epoch = result.diverged_epoch if result.diverged_epoch is not None else result.epochs - 1
        metrics |= {"status": "diverged", "epoch": epoch}
    else:
        device = next(model.parameters()).device
        on_device = DatasetSplits(data.train.to(device), data.val.to(device), data.test.to(device), data.info)
        if prep.task == "regression":
            preds = regression_predictions(model, on_device)
            values = evaluate_regression(model, on_device, cfg.recalibrator.name, prep.threshold,
                                         seeding.eval_seed(seed), preds)  # fmt: skip
        else:
            preds = classification_predictions(model, on_device)
            values = evaluate_classification(
                model, on_device, cfg.recalibrator.name, cfg.objective.name, preds
            )
        save_predictions(preds, out / "predictions.npz")
        if cfg.get("figures", False):  # per-run figures (kcal.figures); a figure error never fails the run
            try:
                from kcal.figures import draw_run_figures

                draw_run_figures(out, config=cfg, seed=seed)
            except Exception as exc:  # noqa: BLE001
                import logging

                logging.getLogger(__name__).warning("kcal.figures failed for %s: %r", out, exc)
        values |= {f"{k}_best": v for k, v in result.best.items()}
        finite = all(math.isfinite(v) for k, v in values.items() if k.startswith(("test/", "val/")))
        metrics |= {"status": "ok" if finite else "diverged", "best_epoch": result.best_epoch, **values}
        if not finite:
            metrics["epoch"] = result.best_epoch
    out.mkdir(parents=True, exist_ok=True)
    write_history(result.history, out / "history.csv")
    run_info = {
        "train_seconds": result.train_seconds, "seconds_per_epoch": result.train_seconds / max(result.epochs, 1),
        "device": str(next(model.parameters()).device), "torch": torch.__version__,
        "pytorch_lightning": pl.__version__, "command": " ".join(sys.argv), "data_sources": data.info.sources,
        **(extra_run_info or {}),
    }  # fmt: skip
    (out / "run.json").write_text(json.dumps(run_info, indent=1) + "\n")
    # written last and atomically: its presence marks a finished run (seed reruns skip such runs)
    tmp = out / "metrics.json.tmp"
    tmp.write_text(json.dumps(metrics, indent=1, sort_keys=True) + "\n")
    tmp.replace(out / "metrics.json")
    return metrics


def save_predictions(preds: dict[str, torch.Tensor], path: Path) -> None:
    """Val/test predictions (float32, labels int64) so figures can be redrawn without training."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: (v.float() if v.is_floating_point() else v).cpu().numpy() for k, v in preds.items()}
    np.savez_compressed(path, **arrays)


def write_history(history: list[dict], path: Path) -> None:
    """Per-epoch values as CSV (columns: the union of keys, epoch first)."""
    keys = sorted({k for row in history for k in row} - {"epoch"})
    lines = [",".join(["epoch", *keys])]
    lines += [
        ",".join([str(row["epoch"]), *(repr(float(row[k])) if k in row else "" for k in keys)])
        for row in history
    ]
    path.write_text("\n".join(lines) + "\n")


def run(cfg: DictConfig, output_dir: str | Path) -> dict:
    """Train one model, restore its best checkpoint, evaluate; write outputs; return the metrics."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    pl.seed_everything(cfg.seed, workers=False, verbose=False)  # stray global-RNG users stay seeded too
    prep = prepare(cfg)
    OmegaConf.save(cfg, out / "config.yaml", resolve=True)
    module, result = fit(prep, build(prep, cfg.seed), out)
    return finalize(prep, module.model, result, out, cfg.seed)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
@exits_on_config_error
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    metrics = run(cfg, HydraConfig.get().runtime.output_dir)
    status = metrics["status"]
    print(
        f"status={status} "
        + " ".join(f"{k}={metrics[k]:.4g}" for k in sorted(metrics) if k.startswith("test/"))
    )
    return metrics.get("val/nll")


if __name__ == "__main__":
    main()
