"""Local calibration maps (paper §6.3, Figure 2): LCE_total per location, NLL vs NLL + MMD (local).

Runs live in ``<root>/<dataset>/<objective>/`` (``root`` defaults to :data:`kcal.core.layout.LOCAL_ROOT`),
one :func:`kcal.run.run` output each, objectives ``nll`` and ``nll_mmd_local``
(``configs/experiment/local_calibration.yaml``). :func:`kcal.reruns.local_calibration.train_local` produces them;
:func:`draw_local_maps` redraws from them into ``<root>/figures/``:

* ``lce_<dataset>.{png,pdf}``: the test split's locations on a longitude/latitude scatter coloured by
  ``LCE_total`` (:func:`kcal.metrics.local.lce_total`, B = 20 levels c_b = b/B, data points and query
  points = the test rows, RBF kernel on the standardised phi(x) = the dataset's ``local_features``), the
  two objectives side by side on one colour scale;
* ``lce_summary.json``: per dataset and objective the mean / median / max LCE_total, the same after the
  run's post-hoc recalibrator (refit on validation PITs; global recalibration does not target local
  errors), the test QCE; per dataset the bandwidth, the effective number of neighbours and the
  calibrated noise floor (:func:`kcal.metrics.local.lce_calibrated_floor`: what a perfectly calibrated
  forecaster would score; values near it are sampling noise).

The datasets and their settings are the experiment's (:data:`kcal.reruns.local_calibration.LOCAL_DATASETS`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig

from kcal.core import layout
from kcal.core.layout import LOCAL_ROOT
from kcal.core.plotting import (
    MissingInputError,
    load_config,
    load_predictions,
    new_figure,
    objective_label,
    save_figure,
)
from kcal.kernels import median_heuristic
from kcal.metrics.local import DEFAULT_LCE_LEVELS, lce_calibrated_floor, lce_total, local_weights
from kcal.reruns.local_calibration import LOCAL_DATASETS, LOCAL_OBJECTIVES
from kcal.run.plots import regression_calibration

#: default LCE bandwidth = this factor x the median squared distance between the test rows' phi(x)
#: (standardised coordinates; kernel length scale = half the median inter-point distance). A compromise:
#: small enough to show regional structure, large enough that the estimator's noise floor
#: (:func:`kcal.metrics.local.lce_calibrated_floor`, ~0.16 / n_eff with n_eff the effective number of
#: neighbours) stays well below the values mapped. On crime / crop-yield test rows this gives a median
#: n_eff of ~150 / ~170 (minimum ~14 / ~11 in isolated places); a factor of 0.1 leaves isolated points
#: with n_eff ~5, whose LCE is mostly noise.
LCE_BANDWIDTH_FACTOR = 0.25


def train_command(datasets) -> str:
    return f"kcal figures local --train --datasets {' '.join(datasets)}"


# ---------------------------------------------------------------------------------------------------------
# LCE per location
# ---------------------------------------------------------------------------------------------------------
def _raw_coords(cfg: DictConfig, info, idx_cols: tuple[int, int]) -> np.ndarray | None:
    """Unstandardised (lon, lat) of the test rows, or None if the raw arrays are unavailable."""
    try:
        from kcal.data.dataset import parsed_arrays
        from kcal.data.splits import split_indices

        x, y, _, _ = parsed_arrays(cfg.dataset.name, download=False)
        test_idx = split_indices(len(y), info.split_seed)[2].numpy()
        return x[test_idx][:, list(idx_cols)].astype(np.float64)
    except Exception:
        return None


def local_map_data(run_dir: Path, bandwidth: float | None = None, n_levels: int = DEFAULT_LCE_LEVELS) -> dict:
    """LCE_total at every test row of one run (before and after the run's recalibrator)."""
    from kcal.data import load

    run_dir = Path(run_dir)
    cfg, preds = load_config(run_dir), load_predictions(run_dir)
    if "test_mean" not in preds:
        raise ValueError(f"{run_dir} is not a regression run")
    data = load(cfg.dataset.name, protocol=cfg.dataset.protocol, seed=cfg.seed)
    y_test = data.test.y.double().numpy() * data.info.y_scale
    if len(y_test) != len(preds["test_y"]) or not np.allclose(y_test, preds["test_y"], rtol=1e-5, atol=1e-5):
        raise ValueError(f"{run_dir}: the reloaded test split does not match predictions.npz (data changed?)")
    features = list(cfg.dataset.get("local_features", [0, 1]))
    phi = data.test.x[:, features].double()
    if bandwidth is None:
        bandwidth = LCE_BANDWIDTH_FACTOR * median_heuristic(phi, max_rows=len(phi))
    cal = regression_calibration(preds, str(cfg.recalibrator.name))
    pit = torch.as_tensor(cal["pit"])
    n_eff = 1.0 / local_weights(phi, phi, bandwidth).square().sum(-1)
    out = {"config": cfg, "bandwidth": float(bandwidth), "n": len(y_test), "qce": cal["qce"],
           "lce_total": lce_total(pit, phi_x=phi, levels=n_levels, bandwidth=bandwidth).numpy(),
           "floor": lce_calibrated_floor(phi, levels=n_levels, bandwidth=bandwidth).numpy(),
           "n_eff": n_eff.numpy()}  # fmt: skip
    if cal["recalibrator"]:
        out["lce_total_recal"] = lce_total(torch.as_tensor(cal["pit_recal"]), phi_x=phi, levels=n_levels,
                                           bandwidth=bandwidth).numpy()  # fmt: skip
        out["recalibrator"] = cal["recalibrator"]
    coords = LOCAL_DATASETS.get(cfg.dataset.name, {}).get("coords")
    raw = _raw_coords(cfg, data.info, coords) if coords else None
    if raw is not None:
        out |= {"lon": raw[:, 0], "lat": raw[:, 1], "coord_units": "degrees"}
    else:  # standardised phi(x), first column on the horizontal axis
        out |= {"lon": phi[:, 0].numpy(), "lat": phi[:, 1].numpy(), "coord_units": "standardised"}
    return out


def _stats(v: np.ndarray) -> dict:
    return {"mean": float(v.mean()), "median": float(np.median(v)), "max": float(v.max())}


def draw_local_map(dataset: str, maps: dict[str, dict], out_dir: Path) -> list[Path]:
    from matplotlib.colors import Normalize

    first = next(iter(maps.values()))
    vmax = max(float(m["lce_total"].max()) for m in maps.values())
    norm = Normalize(0.0, vmax if vmax > 0 else 1.0)
    fig = new_figure(5.2 * len(maps) + 1.0, 3.7, layout="constrained")
    axes = fig.subplots(1, len(maps), squeeze=False)[0]
    sc = None
    for ax, (obj, m) in zip(axes, maps.items(), strict=True):
        order = np.argsort(m["lce_total"])  # worst on top
        sc = ax.scatter(m["lon"][order], m["lat"][order], c=m["lce_total"][order], cmap="magma", norm=norm, s=14,
                        edgecolors="none")  # fmt: skip
        ax.set_title(
            f"{objective_label(obj)}: mean LCE$_{{total}}$ = {m['lce_total'].mean():.4f}", fontsize=9
        )
        unit = "°" if m["coord_units"] == "degrees" else " (standardised)"
        ax.set(xlabel=f"longitude{unit}", ylabel=f"latitude{unit}")
        if m["coord_units"] == "degrees":
            ax.set_aspect(1.0 / np.cos(np.deg2rad(np.median(m["lat"]))))
        ax.set_facecolor("0.92")
    fig.colorbar(sc, ax=list(axes), label="LCE$_{total}$ (same scale in both panels)", shrink=0.9)
    title = LOCAL_DATASETS.get(dataset, {}).get("title", dataset)
    fig.suptitle(f"{title}\ntest rows (n = {first['n']}); RBF on standardised φ(x), bandwidth "
                 f"{first['bandwidth']:.3g} (median n_eff {np.median(first['n_eff']):.0f}); B = {DEFAULT_LCE_LEVELS}"
                 f" levels; a calibrated forecaster would score {first['floor'].mean():.4f} on average",
                 fontsize=8)  # fmt: skip
    return save_figure(fig, layout.dataset_figure(out_dir, "lce", dataset))


def draw_local_maps(root: Path = LOCAL_ROOT, datasets=tuple(LOCAL_DATASETS), bandwidth: float | None = None,
                    objectives=LOCAL_OBJECTIVES) -> tuple[list[Path], dict]:  # fmt: skip
    """Draw ``lce_<dataset>`` for each dataset and write ``lce_summary.json``; return (paths, summary)."""
    root = Path(root)
    missing = [root / ds / obj for ds in datasets for obj in objectives
               if not (root / ds / obj / layout.PREDICTIONS_FILE).is_file()]  # fmt: skip
    if missing:
        raise MissingInputError(
            "local-calibration runs are missing: "
            + ", ".join(str(p) for p in missing)
            + f"; produce them with `{train_command(datasets)}`"
            + (f" --root {root}" if root != LOCAL_ROOT else "")
        )
    out_dir, paths = layout.figures_dir(root), []
    summary_path = out_dir / "lce_summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    for ds in datasets:
        maps = {obj: local_map_data(root / ds / obj, bandwidth) for obj in objectives}
        if bandwidth is None:  # one kernel for both panels: the splits are the same, so is the bandwidth
            bws = {m["bandwidth"] for m in maps.values()}
            assert len(bws) == 1, bws
        paths += draw_local_map(ds, maps, out_dir)
        summary[ds] = {
            "title": LOCAL_DATASETS.get(ds, {}).get("title", ds), "n_test": next(iter(maps.values()))["n"],
            "bandwidth": next(iter(maps.values()))["bandwidth"], "levels": DEFAULT_LCE_LEVELS,
            "calibrated_floor": _stats(next(iter(maps.values()))["floor"]),
            "n_eff": {"min": float(next(iter(maps.values()))["n_eff"].min()),
                      "median": float(np.median(next(iter(maps.values()))["n_eff"]))},
            "objectives": {obj: {"lce_total": _stats(m["lce_total"]), "test_qce": m["qce"],
                                 **({"lce_total_recal": _stats(m["lce_total_recal"]), "recalibrator": m["recalibrator"]}
                                    if "lce_total_recal" in m else {}),
                                 "epochs": json.loads(layout.metrics_file(root / ds / obj).read_text()).get("epochs")
                                 if layout.is_finished(root / ds / obj) else None}
                           for obj, m in maps.items()},
        }  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    return [*paths, summary_path], summary


__all__ = ["draw_local_map", "draw_local_maps", "local_map_data", "train_command"]
