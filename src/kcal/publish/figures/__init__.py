"""Figures a reader looks at (matplotlib only; PNG and PDF), redrawn from existing results.

* per run (:func:`kcal.run.plots.draw_run_figures`, which :func:`kcal.run.artifacts.finalize` calls when
  ``figures: true``; ``kcal figures run`` redraws them): PIT histogram + quantile calibration
  curve (regression) or reliability diagram (classification), before and after post-hoc recalibration,
  into ``<run_dir>/figures/``;
* over a reproduction root (:func:`draw_reproduction`): DCE vs epoch on train/validation (paper Figures
  3 and 4) and per-dataset calibration comparisons, into ``<root>/figures/``;
* local calibration maps (:func:`draw_local_maps`, from runs that
  :func:`kcal.reruns.local_calibration.train_local` trains; paper §6.3 / Figure 2).

Command line: ``kcal figures {run,reproduction,local,all} ...`` (see ``--help``).
Everything draws on :class:`matplotlib.figure.Figure` with the Agg canvas (no pyplot, no display).
"""

from kcal.core.plotting import MissingInputError
from kcal.publish.figures.local_maps import draw_local_maps, local_map_data
from kcal.publish.figures.reproduction import aggregate_curves, draw_dce_curves, draw_reproduction

__all__ = [
    "MissingInputError",
    "aggregate_curves",
    "draw_dce_curves",
    "draw_local_maps",
    "draw_reproduction",
    "local_map_data",
]
