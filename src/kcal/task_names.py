"""The two prediction tasks, stated once: what the library checks a ``task`` argument against, and what the
pipeline's configs (``task=``) and the paper's grid (:mod:`kcal.paper`) are keyed by. Imports nothing, so that
what needs only the names loads no torch."""

TASKS = ("regression", "classification")
"""The two prediction tasks: Gaussian forecasts of a real target, and class probabilities."""
