"""What a finished run leaves in its directory, written in one place for every run and stacked member.

* ``config.yaml``: the resolved config (:func:`save_config`);
* ``metrics.json``: the evaluation of the best weights, deterministic (same config and seed give the
  same file on CPU), written last and atomically: its presence marks a finished run;
* ``run.json``: timings, device, versions, the commit of the code (:func:`checkout_commit`), data sources;
* ``history.csv``: one row per epoch (:func:`write_history`);
* ``predictions.npz``: val/test predictions, so figures can be redrawn without training;
* ``figures/``: per-run figures when ``figures: true`` (:func:`kcal.run.plots.draw_run_figures`);
* ``checkpoints/best.pt``: the best weights' ``state_dict`` when ``save_checkpoint`` (:func:`save_state`).
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from kcal.core import layout, random_streams
from kcal.data.dataset import DatasetSplits
from kcal.evaluation import (
    classification_predictions,
    evaluate_classification,
    evaluate_regression,
    regression_predictions,
)
from kcal.run.module import FitResult
from kcal.run.plots import draw_run_figures
from kcal.run.setup import Prepared

log = logging.getLogger(__name__)


@cache
def checkout_commit() -> str:
    """The commit of the kcal checkout this process runs (``unknown`` for an installed wheel), read at the first call
    and kept: the code a process runs is the code it imported, whatever the checkout moves to later (a caller that
    must not wait for its first run to finish, as ``kcal paths`` does, calls it at its start)."""
    here = Path(__file__).resolve()
    try:
        done = subprocess.run(["git", "-C", str(here.parent), "rev-parse", "--show-toplevel", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    top, commit = done.stdout.splitlines()  # one line each: a folder name may hold spaces
    return commit if Path(top).resolve() == here.parents[3] else "unknown"  # <top>/src/kcal/run/artifacts.py


def save_config(cfg: DictConfig, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, out / layout.CONFIG_FILE, resolve=True)


def save_predictions(preds: dict[str, torch.Tensor], path: Path) -> None:
    """Val/test predictions (float32, labels int64) so figures can be redrawn without training."""
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: (v.float() if v.is_floating_point() else v).cpu().numpy() for k, v in preds.items()}
    np.savez_compressed(path, **arrays)


def save_state(state: dict[str, torch.Tensor], out: Path) -> None:
    """A network's best weights as ``checkpoints/best.pt`` (a plain ``state_dict``)."""
    path = layout.checkpoint_file(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)


def write_history(history: list[dict], path: Path) -> None:
    """Per-epoch values as CSV (columns: the union of keys, epoch first)."""
    keys = sorted({k for row in history for k in row} - {"epoch"})
    lines = [",".join(["epoch", *keys])]
    lines += [
        ",".join([str(row["epoch"]), *(repr(float(row[k])) if k in row else "" for k in keys)])
        for row in history
    ]
    path.write_text("\n".join(lines) + "\n")


def draw_figures(out: Path, cfg: DictConfig, seed: int) -> None:
    """Per-run figures (:mod:`kcal.run.plots`); a figure error is logged, it never fails the run."""
    try:
        draw_run_figures(out, config=cfg, seed=seed)
    except Exception as exc:  # noqa: BLE001
        log.warning("per-run figures failed for %s: %r", out, exc)


def evaluate(prep: Prepared, model: torch.nn.Module, seed: int) -> tuple[dict | None, dict]:
    """(metrics, predictions) of ``model`` on the validation and test splits; metrics None where a prediction is
    not finite (the model diverged: the library's metrics refuse such forecasts, so they are not scored)."""
    data, cfg = prep.data, prep.cfg
    device = next(model.parameters()).device
    on_device = DatasetSplits(data.train.to(device), data.val.to(device), data.test.to(device), data.info)
    preds = (regression_predictions if prep.task == "regression" else classification_predictions)(
        model, on_device
    )
    if not all(bool(torch.isfinite(v).all()) for v in preds.values() if v.is_floating_point()):
        return None, preds
    if prep.task == "regression":
        values = evaluate_regression(model, on_device, prep.recalibrator, prep.threshold,
                                     random_streams.eval_seed(seed), preds)  # fmt: skip
    else:
        values = evaluate_classification(model, on_device, prep.recalibrator, cfg.objective.name, preds)
    return values, preds


def finalize(prep: Prepared, model: torch.nn.Module, result: FitResult, out: Path, seed: int,
             extra_run_info: dict | None = None) -> dict:  # fmt: skip
    """Evaluate the best weights and write the run's files (see the module docstring); return the metrics."""
    cfg, data = prep.cfg, prep.data
    metrics = {
        "dataset": cfg.dataset.name, "protocol": cfg.dataset.protocol, "objective": cfg.objective.name,
        "recalibrator": prep.recalibrator, "seed": int(seed), "epochs": result.epochs,
    }  # fmt: skip
    if result.diverged_epoch is not None or result.best_epoch is None:
        epoch = result.diverged_epoch if result.diverged_epoch is not None else result.epochs - 1
        metrics |= {"status": "diverged", "epoch": epoch}
    elif (found := evaluate(prep, model, seed))[0] is None:  # finite training loss, non-finite forecasts
        metrics |= {"status": "diverged", "epoch": result.best_epoch}
    else:
        values, preds = found
        save_predictions(preds, out / layout.PREDICTIONS_FILE)
        if cfg.get("figures", False):
            draw_figures(out, cfg, seed)
        values |= {f"{k}_best": v for k, v in result.best.items()}
        finite = all(math.isfinite(v) for k, v in values.items() if k.startswith(("test/", "val/")))
        metrics |= {"status": "ok" if finite else "diverged", "best_epoch": result.best_epoch, **values}
        if not finite:
            metrics["epoch"] = result.best_epoch
    out.mkdir(parents=True, exist_ok=True)
    write_history(result.history, out / layout.HISTORY_FILE)
    run_info = {
        "train_seconds": result.train_seconds, "seconds_per_epoch": result.train_seconds / max(result.epochs, 1),
        "device": str(next(model.parameters()).device), "torch": torch.__version__,
        "pytorch_lightning": pl.__version__, "command": " ".join(sys.argv), "commit": checkout_commit(),
        "data_sources": data.info.sources,
        **(extra_run_info or {}),
    }  # fmt: skip
    (out / layout.RUN_INFO_FILE).write_text(json.dumps(run_info, indent=1) + "\n")
    write_metrics(metrics, out)
    return metrics


def write_metrics(metrics: dict, out: Path) -> None:
    """``metrics.json``, atomically (its presence marks a finished run; seed reruns skip such runs)."""
    write_json_atomically(layout.metrics_file(out), metrics, sort_keys=True)


def write_json_atomically(path: Path, obj, **dumps) -> None:
    """``obj`` as indented JSON at ``path``, whole or not at all: written beside it, then renamed over it (a reader,
    or a process killed while writing, never sees half a file); ``dumps``: more :func:`json.dumps` options."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, **dumps) + "\n")
    tmp.replace(path)
