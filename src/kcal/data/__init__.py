"""Offline-first data layer for the paper's datasets (registry, sources, parsing, splits)."""

from kcal.data.dataset import DatasetInfo, DatasetSplits, Split, load
from kcal.data.registry import (
    PAPER_CLASSIFICATION,
    PAPER_REGRESSION,
    UnknownDatasetError,
    dataset_names,
    get_spec,
)
from kcal.data.sources import ChecksumError, DatasetUnavailableError

__all__ = [
    "PAPER_CLASSIFICATION", "PAPER_REGRESSION", "ChecksumError", "DatasetInfo", "DatasetSplits",
    "DatasetUnavailableError", "Split", "UnknownDatasetError", "dataset_names", "get_spec", "load",
]  # fmt: skip
