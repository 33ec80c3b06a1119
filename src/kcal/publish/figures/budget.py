"""Budget curves: the expected best validation score after k trials (:mod:`kcal.publish.budget`), one figure per
dataset with one curve per objective, drawn from the published trials tables (:mod:`kcal.publish.trials`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kcal.core import layout
from kcal.plotting import COLORS, LINESTYLES, new_figure, objective_label, objective_sort_key, save_figure
from kcal.publish.budget import budget_curve
from kcal.publish.trials import selection_scores

SCORE_LABELS = {True: "validation accuracy (selection score)", False: "validation NLL (selection score)"}


def draw_budget_curves(trials: pd.DataFrame, out: Path) -> list[Path]:
    """``<out>/budget_<dataset>.png`` / ``.pdf`` for every dataset of ``trials``: the expected best selection
    score after k = 1..n trials, ± one standard deviation, per objective. Returns the files written."""
    scores = selection_scores(trials)
    written = []
    for dataset in sorted({d for d, _ in scores}):
        fig = new_figure(5.5, 3.6, layout="constrained")
        ax = fig.add_subplot()
        maximize, lows, highs = True, [], []
        for objective in sorted((o for d, o in scores if d == dataset), key=objective_sort_key):
            values, maximize = scores[(dataset, objective)]
            curve = budget_curve(values, maximize)
            color = COLORS.get(objective)
            label = f"{objective_label(objective)} (n = {len(values)})"
            ax.plot(curve["k"], curve["mean"], LINESTYLES.get(objective, "-"), color=color, label=label)
            ax.fill_between(curve["k"], curve["mean"] - curve["std"], curve["mean"] + curve["std"], color=color,
                            alpha=0.12, linewidth=0)  # fmt: skip
            lows.append(curve["mean"].min())
            highs.append(curve["mean"].max())
        ax.set_xscale("log")
        ax.set_xlabel("trials k (log scale)")
        ax.set_ylabel(SCORE_LABELS[maximize])
        ax.set_title(f"{dataset}: expected best of k trials (drawn from the study's own)", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
        ax.set_xlim(1, max(2, int(np.max([len(v) for (d, _), (v, _) in scores.items() if d == dataset]))))
        pad = 0.15 * max(max(highs) - min(lows), 1e-6)  # the curves fill the axes; the k = 1 bands may not
        ax.set_ylim(min(lows) - pad, max(highs) + pad)
        written += save_figure(fig, layout.dataset_figure(out, "budget", dataset))
    return written
