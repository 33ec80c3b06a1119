"""The runs of the protocol published in one data folder, read by name: the report and its questions
(:mod:`kcal.publish.questions`) read them here.

The *reference runs* are the published run (:data:`kcal.publish.protocol_spread.PUBLISHED`) and its replicates
(``replicates/sampler_seed=<k>/``, 1 or 2 worker processes): :func:`reference_folders`. A protocol variant's runs
(``workers/``, ``pruned/``: :mod:`kcal.publish.variant_report`) sit in folders of the same shape, which
:func:`read_runs` reads alike. Each folder holds ``results.csv``, ``studies.csv`` and ``trials/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kcal.core import layout
from kcal.publish.protocol_spread import PUBLISHED
from kcal.publish.table_cells import load_results
from kcal.publish.trials import read_trials


@dataclass
class Runs:
    """Every run's results, studies and kept trials, by run name."""

    results: dict
    studies: dict
    trials: dict


def reference_folders(data: Path) -> dict[str, Path]:
    """The folders of the reference runs published in ``data``, the published run first."""
    return {PUBLISHED: Path(data), **layout.replicate_data_dirs(data)}


def read_runs(folders: Mapping[str, Path], datasets: set[str] | None = None) -> Runs:
    """Each run's results, studies (empty where the folder has no ``studies.csv``) and kept trials, restricted to
    ``datasets`` (None: all); with ``datasets``, a run without rows of them is left out."""
    runs = Runs({}, {}, {})
    for name, folder in folders.items():
        runs.results[name] = load_results(layout.results_file(folder))
        studies = Path(folder) / layout.STUDIES_FILE
        runs.studies[name] = pd.read_csv(studies) if studies.is_file() else pd.DataFrame(columns=["dataset"])
        runs.trials[name] = read_trials(folder)
    if datasets is None:
        return runs
    out = Runs({}, {}, {})
    for name, results in runs.results.items():
        results = results[results["dataset"].isin(datasets)].reset_index(drop=True)
        if len(results):
            out.results[name] = results
            for part, frame in ((out.studies, runs.studies[name]), (out.trials, runs.trials[name])):
                part[name] = frame[frame["dataset"].isin(datasets)].reset_index(drop=True)
    return out


def runs_trials(data: Path) -> dict[str, pd.DataFrame]:
    """The kept trials of every reference run published in ``data``: ``{PUBLISHED: ..., <replicate>: ...}``."""
    return {name: read_trials(folder) for name, folder in reference_folders(data).items()}


def runs_studies(data: Path) -> dict[str, pd.DataFrame]:
    """The ``studies.csv`` of every reference run published in ``data`` that has one, the published run first."""
    return {name: pd.read_csv(folder / layout.STUDIES_FILE) for name, folder in reference_folders(data).items()
            if name == PUBLISHED or (folder / layout.STUDIES_FILE).is_file()}  # fmt: skip
