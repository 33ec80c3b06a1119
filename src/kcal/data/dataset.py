"""``load(name, protocol, seed)``: verified raw files -> cached parse -> normalised tensor splits.

The processed cache (``<cache>/processed/<name>-<key>.npz``, the key a digest of the raw files' digests and
``PARSE_VERSION``) is trusted only when it verifies: it records its key and a sha256 of its arrays, and its
arrays are finite. A cache file that fails any of these (edited, copied from another version, truncated, or
holding NaN) is rebuilt from the raw files with one line on stderr naming it. A parse that itself gives NaN or
infinite values raises :class:`ParsedDataError` naming the dataset and its raw files (it would train to
"diverged" without a word).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import torch

from kcal.core.errors import DataError
from kcal.data.parsers import PARSERS
from kcal.data.preprocessing import fit_normalisation, protocol_of
from kcal.data.registry import get_spec
from kcal.data.sources import cache_dir, locate
from kcal.data.splits import split_indices

# bump when a parser or the cache file's format changes (2: the file records its key and its arrays' digest)
PARSE_VERSION = 2


class ParsedDataError(DataError):
    """Parsing a dataset's verified raw files gave NaN or infinite values."""


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    task: str
    protocol: str
    split_seed: int
    n_raw: int
    n_used: int
    d: int
    m: int | None
    y_center: float
    y_scale: float
    sources: dict[str, str]


@dataclass(frozen=True)
class Split:
    x: torch.Tensor  # float32 (n, d)
    y: torch.Tensor  # float32 (n,) regression | int64 (n,) classification

    def __len__(self) -> int:
        return self.x.shape[0]

    def to(self, device) -> Split:
        return Split(self.x.to(device), self.y.to(device))


@dataclass(frozen=True)
class DatasetSplits:
    train: Split
    val: Split
    test: Split
    info: DatasetInfo


def parsed_arrays(name: str, download: bool) -> tuple[np.ndarray, np.ndarray, int, dict[str, str]]:
    """(x, y, raw row count, sources) of dataset ``name``, unnormalised and unsplit, in the raw files' row
    order. Parsed once and cached, keyed by the raw files' digests."""
    spec = get_spec(name)
    found = locate(spec, download=download)
    key = hashlib.sha256(
        "|".join([str(PARSE_VERSION), *(f"{k}:{v.digest}" for k, v in sorted(found.items()))]).encode()
    ).hexdigest()[:20]
    path = cache_dir() / "processed" / f"{name}-{key}.npz"
    sources = {k: f"{v.origin}:{v.path}" for k, v in found.items()}
    if path.is_file():
        cached, fault = read_cache(path, key)
        if cached is not None:
            return (*cached, sources)
        print(
            f"kcal data: rebuilding the processed cache {path} from the raw files: {fault}", file=sys.stderr
        )
        path.unlink(missing_ok=True)
    x, y, n_raw = PARSERS[spec.parser]({k: v.path for k, v in found.items()})
    fault = non_finite(x, y)
    if fault:
        raise ParsedDataError(
            f"parsing {name} from {', '.join(str(v.path) for v in found.values())} gave {fault}: the raw files "
            "are not what the parser expects (replace them with the originals) or the parser is wrong"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
    os.close(fd)
    np.savez(tmp, x=x, y=y, n_raw=n_raw, key=key, digest=arrays_digest(x, y, n_raw))
    os.replace(tmp, path)
    return x, y, n_raw, sources


def arrays_digest(x: np.ndarray, y: np.ndarray, n_raw: int) -> str:
    """sha256 of a parse's arrays (dtypes, shapes and bytes) and raw row count: what a cache file records."""
    h = hashlib.sha256()
    for a in (np.ascontiguousarray(x), np.ascontiguousarray(y)):
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    h.update(str(int(n_raw)).encode())
    return h.hexdigest()


def non_finite(x: np.ndarray, y: np.ndarray) -> str:
    """'' when the features ``x`` and targets ``y`` are finite, else what is not (for a message)."""
    for what, a in (("features", x), ("targets", y)):
        if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
            row = int(np.argwhere(~np.isfinite(a))[0][0])
            return f"NaN or infinite {what} (row {row})"
    return ""


def read_cache(path, key: str) -> tuple[tuple[np.ndarray, np.ndarray, int] | None, str]:
    """``((x, y, n_raw), "")`` from the processed cache file ``path`` when it verifies for ``key`` (the raw
    files' key it records, the digest of its arrays, finite values), else ``(None, what is wrong)``."""
    try:
        with np.load(path) as npz:
            x, y, n_raw = npz["x"], npz["y"], int(npz["n_raw"])
            recorded_key, digest = str(npz["key"]), str(npz["digest"])
    except Exception as exc:  # unreadable, truncated, or without the recorded key and digest
        return (
            None,
            f"it cannot be read as a cache file of this version ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
        )
    if recorded_key != key:
        return None, f"it was written for other raw files (key {recorded_key}, these files' is {key})"
    if arrays_digest(x, y, n_raw) != digest:
        return None, "its arrays do not match the digest recorded with them (the file was changed)"
    fault = non_finite(x, y)
    if fault:
        return None, f"it holds {fault}"
    return (x, y, n_raw), ""


def load(name: str, protocol: str = "official", seed: int = 0, download: bool = True) -> DatasetSplits:
    """Load a registered dataset as train/val/test tensors.

    ``protocol="official"`` uses the split seed 1 whatever ``seed`` is (the authors' fixed split) and
    full-dataset statistics; ``protocol="clean"`` splits with ``seed`` and fits statistics on train.
    See :mod:`kcal.data.preprocessing`.
    """
    rules = protocol_of(protocol)
    spec = get_spec(name)
    x, y, n_raw, sources = parsed_arrays(name, download)
    regression = not spec.is_classification
    split_seed = rules.split_seed(seed)
    idx_train, idx_val, idx_test = (i.numpy() for i in split_indices(len(y), split_seed))
    fit_rows = slice(None) if rules.full_data_statistics else idx_train
    norm = fit_normalisation(x[fit_rows], y[fit_rows], regression, protocol)
    xn = norm.features(x)
    yn = norm.target(y).astype(np.float32) if regression else y.astype(np.int64)

    def split(idx):
        return Split(torch.from_numpy(xn.take(idx, axis=0)), torch.from_numpy(yn.take(idx)))

    info = DatasetInfo(
        name=name, task=spec.task, protocol=protocol, split_seed=split_seed, n_raw=n_raw,
        n_used=len(y), d=x.shape[1], m=spec.m, y_center=norm.y_center, y_scale=norm.y_scale,
        sources=sources,
    )  # fmt: skip
    return DatasetSplits(split(idx_train), split(idx_val), split(idx_test), info)
