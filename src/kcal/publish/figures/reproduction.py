"""Figures over a reproduction root laid out as ``<root>/<dataset>/<objective>/seeds/seed<k>/``
(each seed directory a :func:`kcal.run.run` output: history.csv, metrics.json, predictions.npz,
config.yaml). Written to ``<root>/figures/``:

* ``dce_<dataset>.{png,pdf,csv}`` (paper Figures 3 and 4): decision calibration error vs epoch on the
  train and validation splits for NLL, NLL + MMD (RBF) and NLL + MMD (tanh); first row the exact DCE
  (``dce`` in history.csv, whole split), second row the authors' curve definition (``dce_official``:
  mean over 128-row batches, 10 samples per forecast), third row the number of seeds still training.
  Lines are the mean over seeds, bands ± one standard deviation over seeds (ddof = 1; no band where a
  single seed remains). Runs stop at different epochs (early stopping), so each epoch aggregates the seeds
  whose history reaches that epoch (and whose value there is finite); a curve stops before the first
  epoch at which fewer than half of its objective's seeds train (:data:`MIN_SHARE_TRAINING`), where the
  mean of a few late seeds would spike. The legend gives the number of seeds and the range of their last
  epochs; the CSV has mean, std and the seed count n for every epoch, drawn or not.
* ``calibration_<dataset>.{png,pdf}``: per objective, the test-split quantile calibration curve
  (regression; mean over seeds ± 1 SD over seeds) or the top-label reliability curve of the bins pooled
  over seeds with each bin's share of the rows in a strip below (classification), before and after
  post-hoc recalibration, with mean ± SD over seeds of QCE / ECE in the legend.
  Objective directories named ``<objective>@<setting>`` (sweep variants such as ``nll_mmd@samples=10``)
  are left out of both figures.
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator, PercentFormatter

from kcal.core import layout
from kcal.core.plotting import (
    COLORS,
    LINESTYLES,
    MissingInputError,
    load_config,
    load_predictions,
    new_figure,
    objective_label,
    objective_sort_key,
    save_figure,
    task_of,
)
from kcal.paper import PAPER_OBJECTIVES
from kcal.run.plots import (
    CURVE_LEVELS,
    N_BINS,
    classification_calibration,
    draw_run_figures,
    quantile_curve,
    regression_calibration,
)

DCE_OBJECTIVES = PAPER_OBJECTIVES["regression"]
DCE_METRICS = {"dce": "exact DCE (whole split)", "dce_official": "DCE, authors' curve (128-row batches)"}
SPLITS = {"train": "train split", "val": "validation split"}
PRODUCER = (
    "`kcal reproduce task=regression|classification profile=<profile>` (make reproduce-regression / "
    "reproduce-classification), whose root is outputs/reproduce/<profile>"
)


def read_history(path: Path) -> dict[str, np.ndarray]:
    """history.csv as float columns (empty cells -> NaN)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return {}
    header, body = rows[0], rows[1:]
    cols = {k: np.full(len(body), np.nan) for k in header}
    for r, row in enumerate(body):
        for k, v in zip(header, row, strict=False):
            if v != "":
                cols[k][r] = float(v)
    return cols


def aggregate_curves(histories: list[dict[str, np.ndarray]], column: str) -> dict[str, np.ndarray]:
    """Mean, std (ddof=1; 0 with one seed) and seed count per epoch over the histories that reach it."""
    usable = [h for h in histories if column in h and "epoch" in h and len(h["epoch"])]
    if not usable:
        return {"epoch": np.zeros(0, int), "mean": np.zeros(0), "std": np.zeros(0), "n": np.zeros(0, int)}
    n_epochs = int(max(h["epoch"].max() for h in usable)) + 1
    table = np.full((len(usable), n_epochs), np.nan)
    for s, h in enumerate(usable):
        table[s, h["epoch"].astype(int)] = h[column]
    n = np.isfinite(table).sum(0)
    keep = n > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(table[:, keep], 0)
        std = np.where(n[keep] >= 2, np.nanstd(table[:, keep], 0, ddof=1), 0.0) if keep.any() else np.zeros(0)
    return {"epoch": np.arange(n_epochs)[keep], "mean": mean, "std": np.nan_to_num(std), "n": n[keep]}


MIN_SHARE_TRAINING = 0.5
"""A DCE curve stops before the first epoch at which fewer than this share of its objective's seeds still train
(early stopping ends seeds at different epochs; a mean over the few that train longest is mostly noise)."""
BAND_OVER_SEEDS = "band: ± 1 SD over seeds"
"""What the band around a mean-over-seeds curve is (standard deviation, ddof = 1, over the seeds: the spread
of one seed's curve, not the standard error of the mean)."""


def while_most_train(agg: dict[str, np.ndarray], n_seeds: int, share: float = MIN_SHARE_TRAINING) -> dict:
    """``agg`` (:func:`aggregate_curves`) cut before its first epoch with fewer than ``share`` x ``n_seeds``
    seeds (so with 50 seeds, epochs where 25 or more still train are kept, up to the first with 24)."""
    few = np.flatnonzero(agg["n"] < share * n_seeds)
    stop = int(few[0]) if len(few) else len(agg["epoch"])
    return {key: values[:stop] for key, values in agg.items()}


def draw_dce_curves(dataset: str, runs: dict[str, list[Path]], out_dir: Path,
                    objectives: tuple[str, ...] = DCE_OBJECTIVES) -> list[Path]:  # fmt: skip
    """The DCE-over-training figure (2 metrics x 2 splits, and below each split the number of seeds still
    training) and its CSV (every epoch, with its seed count) for one dataset; [] when no run of ``objectives``
    has DCE columns in its history (e.g. a classification dataset). Each curve is drawn while at least
    :data:`MIN_SHARE_TRAINING` of its objective's seeds train (:func:`while_most_train`)."""
    curves: dict[str, dict] = {}
    for obj in sorted((o for o in runs if o in objectives), key=objective_sort_key):
        hists = [
            read_history(d / layout.HISTORY_FILE) for d in runs[obj] if (d / layout.HISTORY_FILE).is_file()
        ]
        hists = [h for h in hists if any(f"{s}/{m}" in h for s in SPLITS for m in DCE_METRICS)]
        if hists:
            last = [int(h["epoch"].max()) for h in hists]
            curves[obj] = {"n_seeds": len(hists), "last": (min(last), max(last)),
                           **{f"{s}/{m}": aggregate_curves(hists, f"{s}/{m}") for s in SPLITS for m in DCE_METRICS}}  # fmt: skip
    if not curves:
        return []
    fig = new_figure(10.0, 8.6, layout="constrained")
    axes = fig.subplots(3, 2, sharex=True, sharey="row", height_ratios=[3, 3, 1.4])
    lines = ["objective,split,metric,epoch,mean,std,n"]
    for r, (metric, mlabel) in enumerate(DCE_METRICS.items()):
        for c, (split, slabel) in enumerate(SPLITS.items()):
            ax = axes[r, c]
            for obj, cur in curves.items():
                agg = cur[f"{split}/{metric}"]
                if not len(agg["epoch"]):
                    continue
                lines += [f"{obj},{split},{metric},{int(e)},{float(m)!r},{float(s)!r},{int(n)}"
                          for e, m, s, n in zip(agg["epoch"], agg["mean"], agg["std"], agg["n"], strict=True)]  # fmt: skip
                shown = while_most_train(agg, cur["n_seeds"])
                color = COLORS.get(obj)
                lo, hi = cur["last"]
                last = f"last epoch {lo}" if lo == hi else f"last epochs {lo}–{hi}"
                least = int(np.ceil(MIN_SHARE_TRAINING * cur["n_seeds"]))
                ax.plot(shown["epoch"], shown["mean"], color=color, lw=1.4, ls=LINESTYLES.get(obj, "-"),
                        marker="o" if len(shown["epoch"]) <= 20 else None, ms=3,
                        label=f"{objective_label(obj)} ({cur['n_seeds']} seeds, {last}; "
                              f"drawn while ≥ {least} train)")  # fmt: skip
                ax.fill_between(shown["epoch"], shown["mean"] - shown["std"], shown["mean"] + shown["std"],
                                color=color, alpha=0.2, lw=0)  # fmt: skip
                if r == 0:  # the seed count of the split, under its column
                    axes[2, c].plot(agg["epoch"], agg["n"], color=color, lw=1.2, ls=LINESTYLES.get(obj, "-"),
                                    drawstyle="steps-post")  # fmt: skip
            ax.set_title(f"{slabel} · {mlabel}", fontsize=9)
            ax.set_ylabel(f"DCE\n(line: mean over seeds;\n{BAND_OVER_SEEDS})" if c == 0 else None, fontsize=8)
            ax.grid(alpha=0.3)
    for c in range(len(SPLITS)):
        ax = axes[2, c]
        for half in sorted({MIN_SHARE_TRAINING * cur["n_seeds"] for cur in curves.values()}):
            ax.axhline(half, color="0.4", ls=":", lw=1)
        ax.set_ylim(0, 1.1 * max(cur["n_seeds"] for cur in curves.values()))
        ax.set_ylabel("seeds still training\n(dotted: half of them)" if c == 0 else None, fontsize=8)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"{dataset}: decision calibration during training, mean ± 1 SD over the seeds still training at "
                 "each epoch\n(a curve stops where fewer than half of its objective's seeds still train)", fontsize=10)  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = layout.dataset_figure(out_dir, "dce", dataset).with_suffix(".csv")
    csv_path.write_text("\n".join(lines) + "\n")
    return [*save_figure(fig, layout.dataset_figure(out_dir, "dce", dataset)), csv_path]


def _mean_std(values: list[float]) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.3f} ± {v.std(ddof=1):.3f}" if len(v) > 1 else f"{v.mean():.3f}"


def bin_shares(items: list[dict]) -> np.ndarray:
    """Share of the rows in each reliability bin, pooled over seeds (``items``: each seed's
    :func:`kcal.run.plots.reliability_bins`); sums to 1."""
    count = np.sum([b["count"] for b in items], 0)
    return count / max(float(count.sum()), 1.0)


def draw_dataset_calibration(dataset: str, runs: dict[str, list[Path]], out_dir: Path) -> list[Path]:
    """Per objective, calibration before/after recalibration on the test split, over seeds. Regression: the
    mean quantile calibration curve with a ± 1 SD band over seeds. Classification: the reliability curve of
    the bins pooled over seeds, with each bin's share of the rows (pooled over seeds) in a strip below."""
    per_obj: dict[str, list[dict]] = {}
    task = None
    for obj in sorted((o for o in runs if not layout.is_variant(o)), key=objective_sort_key):
        for d in runs[obj]:
            if not (d / layout.PREDICTIONS_FILE).is_file() or not (d / layout.CONFIG_FILE).is_file():
                continue  # diverged runs have no predictions
            preds, cfg = load_predictions(d), load_config(d)
            task = task_of(preds)
            recal = str(cfg.get("recalibrator", {}).get("name", "auto"))
            calc = regression_calibration if task == "regression" else classification_calibration
            per_obj.setdefault(obj, []).append(calc(preds, recal))
    if not per_obj:
        return []
    if task == "regression":
        fig = new_figure(9.0, 4.4, layout="constrained")
        axes = fig.subplots(1, 2, sharey=True)[None, :]
    else:
        fig = new_figure(9.0, 5.8, layout="constrained")
        axes = fig.subplots(2, 2, sharex=True, sharey="row", height_ratios=[3, 1.2])
    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    for k, (phase, title) in enumerate(
        [("before", "before recalibration"), ("after", "after recalibration")]
    ):
        ax = axes[0, k]
        for obj, items in per_obj.items():
            color = COLORS.get(obj)
            if task == "regression":
                key, qkey = ("pit", "qce") if phase == "before" else ("pit_recal", "qce_recal")
                items_k = [it for it in items if key in it]
                if not items_k:
                    continue
                cur = np.stack([quantile_curve(it[key]) for it in items_k])
                mean, std = cur.mean(0), cur.std(0, ddof=1) if len(cur) > 1 else np.zeros(cur.shape[1])
                ax.plot(CURVE_LEVELS, mean, color=color, ls=LINESTYLES.get(obj, "-"),
                        label=f"{objective_label(obj)}: QCE {_mean_std([it[qkey] for it in items_k])}")  # fmt: skip
                ax.fill_between(CURVE_LEVELS, mean - std, mean + std, color=color, alpha=0.2, lw=0)
            else:
                items_k = [it[phase] for it in items if phase in it]
                if not items_k:
                    continue
                count = np.sum([b["count"] for b in items_k], 0)
                hits = np.sum([b["acc"] * b["count"] for b in items_k], 0)
                confs = np.sum([b["conf"] * b["count"] for b in items_k], 0)
                ok = count > 0
                ax.plot(confs[ok] / count[ok], hits[ok] / count[ok], marker="o", ls=LINESTYLES.get(obj, "-"), ms=3,
                        color=color,
                        label=f"{objective_label(obj)}: ECE {_mean_std([b['ece'] for b in items_k])}")  # fmt: skip
                axes[1, k].stairs(
                    bin_shares(items_k), edges, color=color, lw=1.2, ls=LINESTYLES.get(obj, "-")
                )
        ax.plot([0, 1], [0, 1], color="k", ls="--", lw=1)
        if task == "regression":
            ax.set(
                xlabel="expected quantile level p",
                ylabel="observed fraction y ≤ F⁻¹(p | x)" if k == 0 else None,
            )
            legend_title = f"QCE: mean ± SD over seeds\nline: mean over seeds; {BAND_OVER_SEEDS}"
        else:
            ax.set(ylabel="accuracy (bins pooled over seeds)" if k == 0 else None)
            legend_title = "ECE: mean ± SD over seeds\npoints: (mean confidence, accuracy) per bin"
            share = axes[1, k]
            share.set(xlabel=f"top-label confidence ({N_BINS} bins)", ylim=(0, None),
                      ylabel="share of test rows\nper bin (all seeds)" if k == 0 else None)  # fmt: skip
            share.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            share.grid(alpha=0.3)
        ax.set(xlim=(0, 1), ylim=(0, 1), title=title)
        ax.legend(fontsize=7, loc="upper left", title=legend_title, title_fontsize=7)
    n_seeds = {len(v) for v in per_obj.values()}
    seeds = f"{min(n_seeds)}–{max(n_seeds)}" if len(n_seeds) > 1 else str(n_seeds.pop())
    band = "mean ± 1 SD over seeds" if task == "regression" else "bins pooled over seeds"
    fig.suptitle(f"{dataset}: test-split calibration ({seeds} seeds per objective; {band})", fontsize=10)
    return save_figure(fig, layout.dataset_figure(out_dir, "calibration", dataset))


def merged_seed_runs(roots: list[Path]) -> dict[str, dict[str, list[Path]]]:
    """:func:`kcal.core.layout.seed_runs` of several roots in one mapping (e.g. a dataset whose objectives were
    trained in different roots); a (dataset, objective) found in two roots is a :class:`MissingInputError`
    naming both, since a figure mixes no two runs of one objective."""
    merged: dict[str, dict[str, list[Path]]] = {}
    where: dict[tuple[str, str], Path] = {}
    for root in roots:
        for dataset, runs in layout.seed_runs(root).items():
            for label, dirs in runs.items():
                if (dataset, label) in where:
                    raise MissingInputError(
                        f"{dataset}/{label} has seeds under both {where[dataset, label]} and {root}; "
                        "give the roots so that each objective of a dataset comes from one of them"
                    )
                where[dataset, label] = root
                merged.setdefault(dataset, {})[label] = dirs
    return merged


def draw_reproduction(
    root: Path | list[Path], runs_too: bool = False, objectives: tuple[str, ...] = DCE_OBJECTIVES,
    out_dir: Path | None = None, datasets: list[str] | None = None,
) -> list[Path]:  # fmt: skip
    """All reproduction figures under ``root/figures`` (and per-run figures when ``runs_too``). ``root`` may be
    several roots (their seed runs merged, :func:`merged_seed_runs`; figures under the first one's
    ``figures/``); ``out_dir`` writes the dataset figures elsewhere (e.g. a published report's folder);
    ``datasets`` draws only those."""
    roots = [Path(r) for r in ([root] if isinstance(root, (str, Path)) else root)]
    for r in roots:
        if not r.is_dir():
            raise MissingInputError(f"reproduction root {r} does not exist; it is produced by {PRODUCER}")
    found = merged_seed_runs(roots)
    if datasets:
        missing = sorted(set(datasets) - set(found))
        if missing:
            raise MissingInputError(
                f"no runs of {', '.join(missing)} under {', '.join(map(str, roots))} (datasets with runs: "
                f"{', '.join(sorted(found)) or 'none'})"
            )
        found = {d: runs for d, runs in found.items() if d in datasets}
    if not found:
        raise MissingInputError(
            f"no runs under {', '.join(map(str, roots))} (expected <root>/<dataset>/<objective>/seeds/seed<k>/"
            f"history.csv); they are produced by {PRODUCER}"
        )
    out_dir, paths = Path(out_dir) if out_dir is not None else layout.figures_dir(roots[0]), []
    for dataset, runs in sorted(found.items()):
        paths += draw_dce_curves(dataset, runs, out_dir, objectives)
        paths += draw_dataset_calibration(dataset, runs, out_dir)
        if runs_too:
            for dirs in runs.values():
                for d in dirs:
                    if (d / layout.PREDICTIONS_FILE).is_file():
                        paths += draw_run_figures(d)
    return paths
