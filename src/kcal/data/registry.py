"""Registry of the paper's datasets: task, shapes, raw files with checksums, parser name.

The facts live in ``kcal/resources/datasets.json`` (checksums copied from the offline mirror's
``manifest.json`` and the authors' repository); this module turns them into typed specs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache

from kcal.core import layout
from kcal.core.errors import ConfigError, unknown_name

PAPER_REGRESSION = ("crime", "blog", "medical-expenditure", "superconductivity", "fb-comment")
PAPER_CLASSIFICATION = ("breast-cancer", "heart-disease", "online-shoppers", "dry-bean", "adult")


class UnknownDatasetError(ConfigError):
    """Raised for a dataset name that is not in the registry; the message lists valid names."""


@dataclass(frozen=True)
class FileSpec:
    """One acceptable form of a raw file.

    ``sha256`` and/or ``git_blob`` (sha1 of ``b"blob <size>\\0" + content``) verify the bytes;
    ``url`` (optionally with ``archive_member`` inside a zip) is where a download comes from.
    """

    name: str
    sha256: str | None = None
    git_blob: str | None = None
    bytes: int | None = None
    url: str | None = None
    archive_member: str | None = None


@dataclass(frozen=True)
class RawFile:
    """A logical raw file: the preferred form first, then accepted alternatives."""

    forms: tuple[FileSpec, ...]

    @property
    def name(self) -> str:
        return self.forms[0].name


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    task: str  # "regression" | "classification"
    d: int
    m: int | None
    n_paper: int | None
    n_used: int
    parser: str
    files: tuple[RawFile, ...]
    uci_id: int | None = None
    notes: str = ""
    in_paper: bool = field(default=True)
    in_mirror: bool = (
        True  # its raw files are in the shared offline mirror (else: a download, not available offline)
    )

    @property
    def is_classification(self) -> bool:
        return self.task == "classification"


def _file(entry: dict) -> RawFile:
    alts = entry.pop("alternatives", [])
    return RawFile(forms=(FileSpec(**entry), *(FileSpec(**a) for a in alts)))


@cache
def _registry() -> dict[str, DatasetSpec]:
    raw = json.loads(layout.resources_dir().joinpath("datasets.json").read_text())
    specs = {}
    for name, e in raw["datasets"].items():
        e = dict(e)
        files = tuple(_file(dict(f)) for f in e.pop("files"))
        specs[name] = DatasetSpec(
            name=name,
            files=files,
            in_paper=name in PAPER_REGRESSION + PAPER_CLASSIFICATION,
            **e,
        )
    return specs


def dataset_names(task: str | None = None) -> list[str]:
    """All registered dataset names (optionally only one task), paper order first."""
    order = list(PAPER_REGRESSION + PAPER_CLASSIFICATION)
    names = sorted(_registry(), key=lambda n: (order.index(n) if n in order else len(order), n))
    return [n for n in names if task is None or _registry()[n].task == task]


def get_spec(name: str) -> DatasetSpec:
    try:
        return _registry()[name]
    except KeyError:
        raise UnknownDatasetError(unknown_name("dataset", name, dataset_names())) from None
