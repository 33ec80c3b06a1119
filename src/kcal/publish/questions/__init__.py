"""The report's questions: one-question studies of the published runs, beside the report engine of
:mod:`kcal.publish` (tables, cells, claims, verdicts, the answer, the report).

A question is one module: the question (its docstring, with the rules fixed before its runs), the reader of the
data it answers from, and the blocks it renders. A question with generated blocks in the report names them in
its ``BLOCKS`` (``<dataset>``: one block per dataset of the report) and fills them in its
``report_blocks(published)`` from what was published (:class:`Published`); the report lists such questions once,
in :data:`kcal.publish.report.QUESTIONS`, and renders each with :func:`filled_blocks`. The others are programs of
their own (``python -m kcal.publish.questions.<name>``) or rules another question applies:

* :mod:`~kcal.publish.questions.worker_count`: does the number of workers change the answer? (``workers:*``);
* :mod:`~kcal.publish.questions.pruning_replay`: what would pruners have cut of the finished sweeps?
  (``pruning:*``);
* :mod:`~kcal.publish.questions.pruned_protocol`: is a pruned protocol the full one, cheaper? (``pruned:*``),
  over whole runs (:mod:`kcal.publish.whole_runs`, as the worker count), the earlier per-cell rule of
  :mod:`~kcal.publish.questions.equivalence` beside it;
* :mod:`~kcal.publish.questions.selection_bootstrap`: the protocol's spread estimated from one run
  (``protocol:estimate``);
* :mod:`~kcal.publish.questions.tradeoff`: what the regulariser trades along its regularisation paths
  (``paths:*``);
* :mod:`~kcal.publish.questions.pareto_compare` (over :mod:`~kcal.publish.questions.fronts`): the plain
  objective's validation front against each regularised one's, which ``kcal pareto-report`` publishes;
* :mod:`~kcal.publish.questions.trial_range`: where a value lies among a study's own trials.

A question reads the published runs through :mod:`kcal.publish.protocol_runs` and the engine's modules, and
another question only through its public rule (the pruned protocol's earlier counts come from
:func:`kcal.publish.questions.equivalence.judge`).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import pandas as pd


class Published(NamedTuple):
    """What the report hands its questions: the data folder, the report's datasets (in the registry's order),
    the replicated runs' results (:func:`kcal.publish.protocol_spread.replicates_of`), their spread
    (:func:`kcal.publish.protocol_spread.spread_frame`) and every reference run's kept trials
    (:func:`kcal.publish.protocol_runs.runs_trials`)."""

    data: Path
    datasets: list[str]
    replicates: dict[str, pd.DataFrame]
    spread: pd.DataFrame
    kept: dict[str, pd.DataFrame]


def block_names(question: ModuleType, datasets: list[str]) -> list[str]:
    """The generated blocks ``question`` fills in a report of ``datasets``: its ``BLOCKS``, a ``<dataset>`` in a
    name once per dataset."""
    names = []
    for block in question.BLOCKS:
        names += [block.replace("<dataset>", d) for d in datasets] if "<dataset>" in block else [block]
    return names


def filled_blocks(question: ModuleType, published: Published) -> dict[str, str]:
    """``question``'s ``report_blocks(published)``; :class:`ValueError` where it fills other blocks than it
    names (:func:`block_names`)."""
    filled = question.report_blocks(published)
    names = block_names(question, published.datasets)
    if sorted(filled) != sorted(names):
        raise ValueError(
            f"{question.__name__} fills the blocks {sorted(filled)}, not those it names, {sorted(names)}"
        )
    return filled
