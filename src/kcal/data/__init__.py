"""Offline-first data layer for the paper's datasets (registry, sources, parsing, splits).

The registry and the sources import without torch (what ``kcal data``, ``kcal state`` and the schema checks
need); the splits (:mod:`kcal.data.dataset`, torch tensors) are imported on first use of their names."""

from kcal.data.registry import (
    PAPER_CLASSIFICATION,
    PAPER_REGRESSION,
    UnknownDatasetError,
    dataset_names,
    get_spec,
)
from kcal.data.sources import ChecksumError, DatasetUnavailableError

SPLITS = ("DatasetInfo", "DatasetSplits", "Split", "load")
"""The names of :mod:`kcal.data.dataset` that this package gives on first use."""

__all__ = [
    "PAPER_CLASSIFICATION", "PAPER_REGRESSION", "ChecksumError", "DatasetInfo", "DatasetSplits",
    "DatasetUnavailableError", "Split", "UnknownDatasetError", "dataset_names", "get_spec", "load",
]  # fmt: skip


def __getattr__(name: str):
    if name in SPLITS:
        from kcal.data import dataset

        return getattr(dataset, name)
    raise AttributeError(f"module 'kcal.data' has no attribute {name!r}")
