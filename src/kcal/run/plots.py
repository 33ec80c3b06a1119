"""A run's own figures, from its ``config.yaml`` + ``predictions.npz`` (:func:`kcal.run.artifacts.finalize`
draws them when ``figures: true``; ``kcal figures run`` redraws them).

* regression -> ``figures/calibration.{png,pdf}``: the PIT histogram and the quantile calibration curve
  (expected quantile level p vs the observed fraction of test labels below the forecast's p-quantile,
  i.e. of PITs <= p) on the test split, before and after post-hoc recalibration refit on the validation
  PITs with the run's recalibrator (``auto`` = conformal); QCE (:func:`kcal.metrics.qce_binned`, 20
  equal bins) in the legend, the same numbers as ``test/qce`` and ``test_recal/qce`` in metrics.json
  up to the float32 rounding of predictions.npz.
* classification -> ``figures/reliability.{png,pdf}``: top-label reliability diagrams (20 equal-width
  bins, accuracy and mean confidence per bin, each bin's number of test rows below) on the test split,
  before and after temperature scaling fit on the validation logits; ECE (:func:`kcal.metrics.ece`) in the
  legend.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig
from torch.distributions import Normal

from kcal.core import layout
from kcal.core.plotting import (
    load_config,
    load_predictions,
    new_figure,
    objective_label,
    save_figure,
    task_of,
)
from kcal.metrics import classification as cm
from kcal.metrics import regression as rm
from kcal.recalibration import make_class_recalibrator, make_quantile_recalibrator, resolve_recalibrator

N_BINS = 20
CURVE_LEVELS = np.linspace(0.0, 1.0, 201)


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a)).double()


# ---------------------------------------------------------------------------------------------------------
# numbers
# ---------------------------------------------------------------------------------------------------------
def quantile_curve(pit, levels=CURVE_LEVELS) -> np.ndarray:
    """Observed fraction of PITs <= p for each expected level p."""
    u = np.sort(np.clip(np.asarray(pit, dtype=np.float64), 0.0, 1.0))
    return np.searchsorted(u, levels, side="right") / u.shape[0]


def regression_calibration(preds: dict, recalibrator: str, split: str = "test") -> dict:
    """Test PITs and QCE before / after a recalibrator refit on the validation PITs."""
    fv = Normal(_t(preds["val_mean"]), _t(preds["val_std"]), validate_args=False)
    ft = Normal(_t(preds[f"{split}_mean"]), _t(preds[f"{split}_std"]), validate_args=False)
    yv, yt = _t(preds["val_y"]), _t(preds[f"{split}_y"])
    u = rm.pit(ft, yt)
    out = {"n": int(yt.shape[0]), "pit": u.numpy(), "qce": float(rm.qce_binned(u)), "recalibrator": None}
    name = resolve_recalibrator(recalibrator, "regression")
    if name != "none":
        recal = make_quantile_recalibrator(name).fit(rm.pit(fv, yv))
        ur = rm.pit(recal.forecast(ft), yt)
        out |= {"pit_recal": ur.numpy(), "qce_recal": float(rm.qce_binned(ur)), "recalibrator": name}
    return out


def reliability_bins(probs: torch.Tensor, labels: torch.Tensor, n_bins: int = N_BINS) -> dict:
    """Per-bin counts, accuracy and mean confidence (top label), with the bins of :func:`kcal.metrics.ece`."""
    conf, pred = probs.max(-1)
    hit = (pred == labels).double()
    idx = cm.bin_index(conf, n_bins)
    count = torch.bincount(idx, minlength=n_bins).double()
    safe = count.clamp_min(1.0)
    acc = torch.bincount(idx, weights=hit, minlength=n_bins) / safe
    mean_conf = torch.bincount(idx, weights=conf, minlength=n_bins) / safe
    return {"count": count.numpy(), "acc": acc.numpy(), "conf": mean_conf.numpy(),
            "ece": float(cm.ece(probs, labels, n_bins)), "n": int(labels.shape[0])}  # fmt: skip


def classification_calibration(preds: dict, recalibrator: str, split: str = "test") -> dict:
    lv, yv = _t(preds["val_logits"]), torch.as_tensor(preds["val_y"]).long()
    lt, yt = _t(preds[f"{split}_logits"]), torch.as_tensor(preds[f"{split}_y"]).long()
    out = {"before": reliability_bins(torch.softmax(lt, -1), yt), "recalibrator": None}
    name = resolve_recalibrator(recalibrator, "classification")
    if name != "none":
        scaler = make_class_recalibrator(name).fit(lv, yv)
        out |= {"after": reliability_bins(scaler.transform(lt).double(), yt), "recalibrator": name,
                "temperature": float(scaler.temperature)}  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------------------
# drawing
# ---------------------------------------------------------------------------------------------------------
def _title(cfg: DictConfig, seed: int | None = None) -> str:
    ds, obj = cfg.get("dataset", {}).get("name", "?"), cfg.get("objective", {}).get("name", "?")
    return f"{ds} · {objective_label(obj)} · seed {cfg.get('seed', '?') if seed is None else seed}"


def draw_regression(data: dict, title: str, stem: Path) -> list[Path]:
    fig = new_figure(9.0, 3.8)
    ax_h, ax_c = fig.subplots(
        1, 2, gridspec_kw={"left": 0.07, "right": 0.98, "bottom": 0.13, "top": 0.85, "wspace": 0.25}
    )
    bins = np.linspace(0.0, 1.0, N_BINS + 1)
    before = f"before: QCE = {data['qce']:.3f}"
    ax_h.hist(data["pit"], bins=bins, density=True, color="#1f77b4", alpha=0.45, label=before)
    ax_c.plot(CURVE_LEVELS, quantile_curve(data["pit"]), color="#1f77b4", label=before)
    if data["recalibrator"]:
        after = f"after {data['recalibrator']}: QCE = {data['qce_recal']:.3f}"
        ax_h.hist(data["pit_recal"], bins=bins, density=True, histtype="step", color="#d62728", lw=1.8,
                  label=after)  # fmt: skip
        ax_c.plot(CURVE_LEVELS, quantile_curve(data["pit_recal"]), color="#d62728", label=after)
    ax_h.axhline(1.0, color="k", ls="--", lw=1, label="uniform (calibrated)")
    ax_h.set(xlim=(0, 1), xlabel="PIT  F(y | x)", ylabel="density", title=f"PIT histogram ({N_BINS} bins)")
    ax_c.plot([0, 1], [0, 1], color="k", ls="--", lw=1, label="ideal")
    ax_c.set(xlim=(0, 1), ylim=(0, 1), aspect="equal", xlabel="expected quantile level p",
             ylabel="observed fraction  y ≤ F⁻¹(p | x)", title="quantile calibration")  # fmt: skip
    for ax in (ax_h, ax_c):
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{title} · test split (n = {data['n']})", fontsize=10)
    return save_figure(fig, stem)


def _reliability_panel(ax, ax_n, bins: dict, label: str, color: str) -> None:
    from matplotlib.ticker import FuncFormatter

    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    centers = (edges[:-1] + edges[1:]) / 2
    nonempty = bins["count"] > 0
    ax.stairs(np.where(nonempty, bins["acc"], 0.0), edges, fill=True, color=color, alpha=0.6,
              label=f"accuracy per bin · ECE = {bins['ece']:.3f}")  # fmt: skip
    ax.plot(
        bins["conf"][nonempty],
        bins["acc"][nonempty],
        "o",
        ms=3,
        color="k",
        label="(mean confidence, accuracy)",
    )
    ax.plot([0, 1], [0, 1], color="k", ls="--", lw=1)
    ax.set(xlim=(0, 1), ylim=(0, 1), ylabel="accuracy", title=label)
    ax.legend(fontsize=7, loc="upper left")
    ax_n.stairs(bins["count"], edges, fill=True, color="0.55")
    for x, c in zip(centers[nonempty], bins["count"][nonempty], strict=True):
        ax_n.text(x, c, str(int(c)), ha="center", va="bottom", fontsize=5, rotation=90)
    ax_n.set(xlim=(0, 1), yscale="log", xlabel="top-label confidence")
    ax_n.set_ylabel("test rows per bin\n(log scale)", fontsize=8)
    ax_n.set_ylim(0.8, max(float(bins["count"].max()), 1.0) * 8)
    ax_n.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # plain labels, no mathtext


def draw_classification(data: dict, title: str, stem: Path) -> list[Path]:
    panels = [("before recalibration", data["before"], "#1f77b4")]
    if data["recalibrator"]:
        panels.append(
            (f"after temperature scaling (T = {data['temperature']:.2f})", data["after"], "#d62728")
        )
    fig = new_figure(4.6 * len(panels), 4.6)
    axes = fig.subplots(2, len(panels), squeeze=False, height_ratios=[3, 1], sharex="col",
                        gridspec_kw={"left": 0.09, "right": 0.98, "bottom": 0.1, "top": 0.87, "hspace": 0.08,
                                     "wspace": 0.22})  # fmt: skip
    for k, (label, bins, color) in enumerate(panels):
        _reliability_panel(axes[0, k], axes[1, k], bins, label, color)
    fig.suptitle(f"{title} · test split (n = {data['before']['n']}) · top-label, {N_BINS} bins", fontsize=10)
    return save_figure(fig, stem)


def draw_run_figures(run_dir: Path, config: DictConfig | None = None, seed: int | None = None) -> list[Path]:
    """Draw a run's figures into ``run_dir/figures`` from its ``config.yaml`` (or ``config``) and
    ``predictions.npz``; return the written paths (PNG and PDF). ``seed`` (default ``config.seed``) only
    labels the figure (a vectorised multi-seed trainer finalises several seeds under one config)."""
    run_dir = Path(run_dir)
    cfg = config if config is not None else load_config(run_dir)
    preds = load_predictions(run_dir)
    recalibrator = str(cfg.get("recalibrator", {}).get("name", "auto"))
    if task_of(preds) == "regression":
        return draw_regression(
            regression_calibration(preds, recalibrator),
            _title(cfg, seed),
            layout.figures_dir(run_dir) / "calibration",
        )
    return draw_classification(
        classification_calibration(preds, recalibrator),
        _title(cfg, seed),
        layout.figures_dir(run_dir) / "reliability",
    )
