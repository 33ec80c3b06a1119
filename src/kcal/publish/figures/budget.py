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


def draw_budget_curves(
    trials: pd.DataFrame, out: Path, replicates: dict[str, pd.DataFrame] | None = None
) -> list[Path]:
    """``<out>/budget_<dataset>.png`` / ``.pdf`` for every dataset of ``trials`` or of ``replicates`` (other runs
    of the protocol: ``{name: their trials}``): the expected best selection score after k = 1..n trials per
    objective, ± one standard deviation for the published run's studies, a thin line of the same colour for
    each replicate's. Returns the files written."""
    published = selection_scores(trials)
    others = {
        (d, o, name): v
        for name, frame in (replicates or {}).items()
        for (d, o), v in selection_scores(frame).items()
    }
    written = []
    for dataset in sorted({d for d, _ in published} | {d for d, _, _ in others}):
        fig = new_figure(5.5, 3.6, layout="constrained")
        ax = fig.add_subplot()
        maximize, lows, highs, sizes = True, [], [], []
        objectives = {o for d, o in published if d == dataset} | {o for d, o, _ in others if d == dataset}
        for objective in sorted(objectives, key=objective_sort_key):
            color = COLORS.get(objective)
            style = LINESTYLES.get(objective, "-")
            label = objective_label(objective)
            runs = sorted(name for d, o, name in others if (d, o) == (dataset, objective))
            series = [(None, *published[(dataset, objective)])] if (dataset, objective) in published else []
            series += [(name, *others[(dataset, objective, name)]) for name in runs]
            for name, values, maximize in series:  # the published run first (None), then each replicate
                curve = budget_curve(values, maximize)
                if name is None:
                    ax.plot(
                        curve["k"], curve["mean"], style, color=color, label=f"{label} (n = {len(values)})"
                    )
                    ax.fill_between(curve["k"], curve["mean"] - curve["std"], curve["mean"] + curve["std"],
                                    color=color, alpha=0.12, linewidth=0)  # fmt: skip
                else:
                    ax.plot(curve["k"], curve["mean"], style, color=color, linewidth=0.8, alpha=0.55,
                            label=f"{label} ({len(runs)} replicates)" if label else None)  # fmt: skip
                label = None  # one legend entry per objective
                lows.append(curve["mean"].min())
                highs.append(curve["mean"].max())
                sizes.append(len(values))
        ax.set_xscale("log")
        ax.set_xlabel("trials k (log scale)")
        ax.set_ylabel(SCORE_LABELS[maximize])
        title = "expected best of k trials (drawn from the study's own)"
        if any(d == dataset for d, _, _ in others):
            title += "\nthin lines: replicates of the protocol (another sampler seed)"
        ax.set_title(f"{dataset}: {title}", fontsize=8)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, which="both")
        ax.set_xlim(1, max(2, int(np.max(sizes))))
        pad = 0.15 * max(max(highs) - min(lows), 1e-6)  # the curves fill the axes; the k = 1 bands may not
        ax.set_ylim(min(lows) - pad, max(highs) + pad)
        written += save_figure(fig, layout.dataset_figure(out, "budget", dataset))
    return written
