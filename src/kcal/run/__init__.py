"""A run's life, from a config to the files in its directory.

* :mod:`kcal.run.setup`: config checks and every parameter resolution (:func:`prepare`);
* :mod:`kcal.run.epoch`: the per-epoch rules both trainers share (validation metrics, running bests,
  monitor mode, early stopping and best-weights selection, divergence);
* :mod:`kcal.run.module`: the Lightning module and its :func:`fit`;
* :mod:`kcal.run.stacked`: K seeds of one config trained as one batched model (:func:`run_seeds`),
  on the batched network of :mod:`kcal.run.stacked_net`;
* :mod:`kcal.run.artifacts`: evaluation and what a run writes (metrics, history, predictions, figures);
* :mod:`kcal.run.single`: one run (:func:`run`);
* :mod:`kcal.run.local`: the local-calibration experiment's runs.
"""

from kcal.run.single import run
from kcal.run.stacked import run_seeds

__all__ = ["run", "run_seeds"]
