"""Budget curves: the expected best validation score after k trials (:mod:`kcal.publish.budget`), one figure per
dataset with one curve per objective, drawn from the published trials tables (:mod:`kcal.publish.trials`).

Every objective is drawn the same way, whichever runs of the protocol kept its trials (the published run, its
replicates with another sampler seed, or both): the line is the mean over those runs of each run's expected best
of k (:func:`runs_band`), the band spans the lowest to the highest run's curve, and the legend gives the number
of runs and of trials. An objective with one run has a line and no band (its legend says so).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kcal.core import layout
from kcal.core.plotting import (
    COLORS,
    LINESTYLES,
    new_figure,
    objective_label,
    objective_sort_key,
    save_figure,
)
from kcal.publish.budget import budget_curve
from kcal.publish.trials import selection_scores

SCORE_LABELS = {True: "validation accuracy (selection score)", False: "validation NLL (selection score)"}
BAND = "band: lowest to highest run of the protocol (sampler seeds)"
"""What the band of a budget curve is; the figure's legend title says it."""
LINE = "line: mean over runs of E[best of k trials]"


def runs_band(runs: list[list[float]], maximize: bool) -> dict[str, np.ndarray | int]:
    """One objective's curve over the runs of the protocol that kept its trials (``runs``: each run's
    selection scores): ``k`` = 1 .. the smallest run's trial count, ``mean`` = the mean over runs of
    E[best of k] (:func:`kcal.publish.budget.budget_curve`), ``low`` / ``high`` = the lowest / highest run's
    E[best of k] (equal to ``mean`` with one run), ``runs`` = the number of runs, ``trials`` = (fewest, most)
    trials of a run."""
    if not runs:
        raise ValueError("a budget band needs at least one run's scores")
    k_max = min(len(v) for v in runs)
    curves = np.stack([budget_curve(v, maximize, k_max=k_max)["mean"] for v in runs])
    return {"k": np.arange(1, k_max + 1), "mean": curves.mean(0), "low": curves.min(0), "high": curves.max(0),
            "runs": len(runs), "trials": (min(len(v) for v in runs), max(len(v) for v in runs))}  # fmt: skip


def _legend_label(objective: str, band: dict) -> str:
    lo, hi = band["trials"]
    if band["runs"] == 1:
        return f"{objective_label(objective)} (1 run of {lo} trial{'' if lo == 1 else 's'}: no band)"
    trials = f"{lo} trials each" if lo == hi else f"{lo}–{hi} trials, drawn to k = {lo}"
    return f"{objective_label(objective)} ({band['runs']} runs; {trials})"


def draw_budget_curves(
    trials: pd.DataFrame, out: Path, replicates: dict[str, pd.DataFrame] | None = None
) -> list[Path]:
    """``<out>/budget_<dataset>.png`` / ``.pdf`` for every dataset of ``trials`` (the published run's) or of
    ``replicates`` (other runs of the protocol: ``{name: their trials}``): per objective the mean over its runs
    of the expected best selection score after k trials, with the runs' range as a band (:func:`runs_band`).
    Returns the files written."""
    scores: dict[tuple[str, str], list[list[float]]] = {}
    direction: dict[str, bool] = {}
    for frame in [trials, *(replicates or {}).values()]:
        for (dataset, objective), (values, maximize) in selection_scores(frame).items():
            scores.setdefault((dataset, objective), []).append(values)
            direction[dataset] = maximize
    written = []
    for dataset in sorted({d for d, _ in scores}):
        fig = new_figure(5.8, 3.9, layout="constrained")
        ax = fig.subplots()
        maximize, lows, highs, k_max = direction[dataset], [], [], 2
        objectives = sorted((o for d, o in scores if d == dataset), key=objective_sort_key)
        for objective in objectives:
            band = runs_band(scores[(dataset, objective)], maximize)
            color = COLORS.get(objective)
            ax.plot(band["k"], band["mean"], LINESTYLES.get(objective, "-"), color=color, lw=1.5,
                    label=_legend_label(objective, band))  # fmt: skip
            if band["runs"] > 1:
                ax.fill_between(band["k"], band["low"], band["high"], color=color, alpha=0.15, linewidth=0)
            lows.append(band["low"].min())
            highs.append(band["high"].max())
            k_max = max(k_max, int(band["k"][-1]))
        ax.set_xscale("log")
        ax.set_xlabel("trials k (log scale)")
        ax.set_ylabel(SCORE_LABELS[maximize])
        ax.set_title(f"{dataset}: expected best selection score of k trials\n(k drawn with replacement from each run's "
                     "own trials, Dodge et al. 2019)", fontsize=8)  # fmt: skip
        ax.legend(fontsize=7, title=f"{LINE}\n{BAND}", title_fontsize=7)
        ax.grid(alpha=0.3, which="both")
        ax.set_xlim(1, k_max)
        pad = 0.08 * max(max(highs) - min(lows), 1e-6)
        ax.set_ylim(min(lows) - pad, max(highs) + pad)
        written += save_figure(fig, layout.dataset_figure(out, "budget", dataset))
    return written
