"""A run's life, from a config to the files in its directory.

* :mod:`kcal.run.setup`: config checks and every parameter resolution (:func:`prepare`);
* :mod:`kcal.run.epoch`: the per-epoch rules (validation metrics, running bests, monitor mode, early
  stopping and best-weights selection, divergence);
* :mod:`kcal.run.engine`: the training loop, once, for K >= 1 members (steps, validation, the rules);
* :mod:`kcal.run.module`: Lightning driving the engine one epoch per step (:func:`fit_members`);
* :mod:`kcal.run.snapshot`: a long training's snapshot, to go on from after a stop;
* :mod:`kcal.run.stacked`: K seeds of one config trained as one batched model (:func:`train_stacked`),
  on the batched network of :mod:`kcal.run.stacked_net`;
* :mod:`kcal.run.artifacts`: evaluation and what a run writes (metrics, history, predictions, figures);
* :mod:`kcal.run.plots`: a run's own figures (calibration curves, reliability diagrams);
* :mod:`kcal.run.single`: one run (:func:`run`) and the members of a chunk (:func:`train_members`).
"""

__all__ = ["run", "train_stacked"]


def __getattr__(name: str):
    """``run`` and ``train_stacked`` load on first use (PEP 562), so that ``kcal.run.setup`` and ``kcal.run.plots``
    (which publishing reads) do not load Lightning: it took ``kcal report`` 5 s to import."""
    if name == "run":
        from kcal.run.single import run

        return run
    if name == "train_stacked":
        from kcal.run.stacked import train_stacked

        return train_stacked
    raise AttributeError(f"module 'kcal.run' has no attribute {name!r}")
