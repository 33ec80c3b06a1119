"""The trade-off a user chooses from: per dataset, the calibration error against the cost along every
regularisation path (:mod:`kcal.publish.questions.tradeoff`), drawn from the published path tables.

One column per calibration metric of the task (ECE; QCE and DCE), the cost on the x-axis (accuracy in %, NLL), exact
flavour, mean ± SE over seeds as error bars on both axes. Each path is a solid line from λ = 0 through its grid (λ
written beside each point); its dashed twin is the same points after post-hoc recalibration. The unregularised model
(λ = 0) is the black star, post-hoc recalibration alone (λ = 0 + post-hoc) the black square. The top row shows the
whole paths; the bottom row the same, limited to the points whose cost is near the unregularised model's, where a
user would choose.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kcal.core import layout
from kcal.core.plotting import COLORS, new_figure, objective_label, objective_sort_key, save_figure
from kcal.publish.questions.tradeoff import (
    CALIBRATION,
    COST,
    FIGURE_KIND,
    HIGHER_IS_BETTER,
    METRIC_LABELS,
    NONE,
    POSTHOC,
    cell,
    cells,
    task_of,
    weight_text,
)


def path_points(path: pd.DataFrame, metric: str, cost: str, recalibrator: str) -> pd.DataFrame:
    """``weight, x, xerr, y, yerr`` of one path (cost on x, ``metric`` on y), λ ascending; the cost after post-hoc
    recalibration is the recalibrated model's where the table has it, else the model's own."""
    rows = []
    scale = 100.0 if cost == "acc" else 1.0
    at = cells(path)
    for weight in sorted(set(path["weight"])):
        y = cell(at, weight, metric, recalibrator)
        x = cell(at, weight, cost, recalibrator) or cell(at, weight, cost, NONE)
        if x is not None and y is not None:
            rows.append(
                {"weight": weight, "x": scale * x.mean, "xerr": scale * x.se, "y": y.mean, "yerr": y.se}
            )
    return pd.DataFrame(rows, columns=["weight", "x", "xerr", "y", "yerr"])


ZOOM_SE = 3.0
"""The lower row shows the points whose cost is better than the unregularised model's, or worse by at most this many
of its SEs."""


def draw_panel(ax, part: pd.DataFrame, metric: str, cost: str) -> pd.DataFrame:
    """Every path of ``part`` on one axis (solid as trained, dashed with post-hoc; λ beside the points) and the two
    reference points; returns every point drawn (``x, xerr, y, yerr``) with ``zero``: its cost's λ = 0 twin."""
    drawn = []
    for objective in sorted(set(part["objective"]), key=objective_sort_key):
        path, color = part[part["objective"] == objective], COLORS.get(str(objective), "0.3")
        for recal, style, alpha in ((NONE, "-", 1.0), (POSTHOC, "--", 0.45)):
            pts = path_points(path, metric, cost, recal)
            ax.errorbar(pts["x"], pts["y"], xerr=pts["xerr"], yerr=pts["yerr"], fmt="o", ls=style, ms=3.5, lw=1.1,
                        capsize=2, color=color, alpha=alpha, label=objective_label(str(objective)) if recal == NONE
                        else None)  # fmt: skip
            if recal == NONE:
                for r in pts[pts["weight"] > 0].to_dict("records"):
                    ax.annotate(weight_text(r["weight"]), (r["x"], r["y"]), textcoords="offset points",
                                xytext=(3, 3), fontsize=6, color=color)  # fmt: skip
            zero = pts[pts["weight"] == 0]
            drawn.append(pts.assign(zero_x=float(zero["x"].iloc[0]), zero_xerr=float(zero["xerr"].iloc[0])))
    refs = pd.concat(drawn, ignore_index=True)
    first = part["objective"].iloc[0]
    for recal, marker, text in (
        (NONE, "*", "λ = 0 (unregularised)"),
        (POSTHOC, "s", "λ = 0 + post-hoc (post-hoc alone)"),
    ):
        pts = path_points(part[part["objective"] == first], metric, cost, recal)
        pts = pts[pts["weight"] == 0]
        ax.plot(
            pts["x"], pts["y"], marker, color="black", ms=11 if marker == "*" else 7, zorder=5, label=text
        )
    ax.set_xlabel(f"{METRIC_LABELS[cost]}{' (%)' if cost == 'acc' else ''} "
                  f"({'higher' if cost == 'acc' else 'lower'} is better)")  # fmt: skip
    ax.set_ylabel(f"{METRIC_LABELS[metric]} (exact; lower is better)")
    ax.grid(alpha=0.3)
    return refs


def zoom(ax, drawn: pd.DataFrame, cost: str) -> None:
    """Limit ``ax`` to the points whose cost is better than their λ = 0 twin's, or worse by at most :data:`ZOOM_SE`
    of its SEs (the region a user chooses from; a costly point with a wide SE would otherwise stretch it)."""
    worse = (drawn["zero_x"] - drawn["x"]) if cost in HIGHER_IS_BETTER else (drawn["x"] - drawn["zero_x"])
    near = drawn[worse <= ZOOM_SE * drawn["zero_xerr"] + 1e-12]
    lo_x, hi_x = (near["x"] - near["xerr"]).min(), (near["x"] + near["xerr"]).max()
    lo_y, hi_y = (near["y"] - near["yerr"]).min(), (near["y"] + near["yerr"]).max()
    pad_x, pad_y = 0.08 * (hi_x - lo_x or abs(hi_x) or 1.0), 0.08 * (hi_y - lo_y or abs(hi_y) or 1.0)
    ax.set_xlim(lo_x - pad_x, hi_x + pad_x)
    ax.set_ylim(lo_y - pad_y, hi_y + pad_y)


def draw_tradeoff(paths: pd.DataFrame, dataset: str, out: Path) -> list[Path]:
    """``<out>/tradeoff_<dataset>.png`` / ``.pdf`` from the published paths of ``dataset``; returns the files. The top
    row shows whole paths, the bottom row the points near the unregularised model's cost (:func:`zoom`)."""
    part = paths[paths["dataset"] == dataset]
    if part.empty:
        return []
    task = task_of(dataset)
    metrics, cost = CALIBRATION[task], COST[task]
    fig = new_figure(5.6 * len(metrics), 8.4, layout="constrained")
    axes = fig.subplots(2, len(metrics), squeeze=False)
    for column, metric in enumerate(metrics):
        draw_panel(axes[0][column], part, metric, cost)
        zoom(axes[1][column], draw_panel(axes[1][column], part, metric, cost), cost)
        axes[0][column].set_title(f"{METRIC_LABELS[metric]}: whole paths", fontsize=9)
        axes[1][column].set_title(f"{METRIC_LABELS[metric]}: near the unregularised model's cost", fontsize=9)
    axes[0][0].legend(fontsize=7, title="solid: as trained; dashed: + post-hoc", title_fontsize=7)
    fig.suptitle(f"{dataset}: calibration against cost along each regularisation path\n(λ beside each point; "
                 "mean ± SE over seeds)", fontsize=9)  # fmt: skip
    return save_figure(fig, layout.dataset_figure(out, FIGURE_KIND, dataset))


def draw_tradeoff_figures(paths: pd.DataFrame, out: Path) -> list[Path]:
    """:func:`draw_tradeoff` of every dataset with published paths."""
    return [p for dataset in sorted(set(paths["dataset"])) for p in draw_tradeoff(paths, str(dataset), out)]
