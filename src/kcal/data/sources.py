"""Where raw files come from: the read-only mirror, then the project cache, then a download.

Order for each raw file of a dataset:

1. ``$KCAL_DATA_DIR/<dataset>/`` (the layout of the shared offline mirror);
2. the project cache ``<cache>/raw/<dataset>/`` (``$KCAL_CACHE_DIR``, default ``data/`` at the
   project root);
3. a download from the file's public source into the cache (skipped when ``KCAL_OFFLINE=1``).

Every file is checked against its sha256 (or git blob id when only that is known) before use; a
mismatch raises :class:`ChecksumError`. Nothing falls back silently to other data.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from kcal.core.errors import DataError
from kcal.data.registry import DatasetSpec, FileSpec, RawFile

DATA_DIR_ENV = "KCAL_DATA_DIR"
CACHE_DIR_ENV = "KCAL_CACHE_DIR"
OFFLINE_ENV = "KCAL_OFFLINE"
DOWNLOAD_TIMEOUT_S = 60
FIX_CORRUPT = (
    "The file is corrupt or a different version: delete it if it is in the cache (it is downloaded again), "
    f"or replace it in the mirror (${DATA_DIR_ENV}) with the original"
)


class ChecksumError(DataError):
    """A raw file's bytes do not match the checksum recorded for it."""


class DatasetUnavailableError(DataError, FileNotFoundError):
    """No verified copy of a raw file could be found or downloaded.

    ``reason`` says what is missing, ``hint`` what to do; the message is both.
    """

    def __init__(self, reason: str, hint: str):
        super().__init__(f"{reason}. {hint}")
        self.reason, self.hint = reason, hint


def project_root() -> Path | None:
    """The source checkout holding this package (editable install), or None."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "src" / "kcal").is_dir():
            return parent
    return None


def cache_dir() -> Path:
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    root = project_root()
    return root / "data" if root else Path.home() / ".cache" / "kcal"


def mirror_dir() -> Path | None:
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env).expanduser() if env else None


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in {"1", "true", "yes"}


def _hexdigest(h, path: Path) -> str:
    """Feed a file into hash ``h`` in 1 MiB chunks; return the hex digest."""
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_file(path: Path) -> str:
    return _hexdigest(hashlib.sha256(), path)


def git_blob_file(path: Path) -> str:
    """Git's blob id: sha1(b"blob <size>\\0" + content)."""
    return _hexdigest(hashlib.sha1(f"blob {path.stat().st_size}\0".encode()), path)


def verify(path: Path, form: FileSpec) -> str:
    """Check ``path`` against ``form``; return the digest used as its identity.

    Raises :class:`ChecksumError` naming the file and both hashes on a mismatch.
    """
    if form.sha256:
        got = sha256_file(path)
        if got != form.sha256:
            raise ChecksumError(
                f"checksum mismatch for {path}: expected sha256 {form.sha256}, got {got}. {FIX_CORRUPT}"
            )
        return got
    if form.git_blob:
        got = git_blob_file(path)
        if got != form.git_blob:
            raise ChecksumError(
                f"checksum mismatch for {path}: expected git blob {form.git_blob}, got {got}. {FIX_CORRUPT}"
            )
        return got
    raise ChecksumError(f"no checksum recorded for {form.name}; refusing to use an unverified file")


@dataclass(frozen=True)
class Located:
    path: Path
    origin: str  # "mirror" | "cache" | "download"
    digest: str


def candidate_paths(spec: DatasetSpec, raw: RawFile) -> list[tuple[str, Path, FileSpec]]:
    out = []
    mirror = mirror_dir()
    for form in raw.forms:
        if mirror is not None:
            out.append(("mirror", mirror / spec.name / form.name, form))
        out.append(("cache", cache_dir() / "raw" / spec.name / form.name, form))
    return out


def _download(form: FileSpec, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(form.url, timeout=DOWNLOAD_TIMEOUT_S) as resp:
        payload = resp.read()
    if form.archive_member:
        with zipfile.ZipFile(io.BytesIO(payload)) as zf:
            payload = zf.read(form.archive_member)
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
        tmp.write(payload)
    shutil.move(tmp.name, dest)


def locate_file(spec: DatasetSpec, raw: RawFile, download: bool = True) -> Located:
    """Find a verified copy of one raw file (see module docstring for the order)."""
    looked = []
    for origin, path, form in candidate_paths(spec, raw):
        looked.append(str(path))
        if path.is_file():
            return Located(path, origin, verify(path, form))
    errors = []
    if download and not offline():
        for form in raw.forms:
            if not form.url:
                continue
            dest = cache_dir() / "raw" / spec.name / form.name
            try:
                _download(form, dest)
            except Exception as exc:  # network errors of every kind: report them all below
                errors.append(f"{form.url}: {exc}")
                continue
            try:
                return Located(dest, "download", verify(dest, form))
            except ChecksumError:
                dest.unlink(missing_ok=True)
                raise
    raise DatasetUnavailableError(
        f"dataset {spec.name!r}: raw file {raw.name} not found (looked for {', '.join(looked)})",
        unavailable_hint(spec.name, errors),
    )


def unavailable_hint(dataset: str, download_errors: list[str] = ()) -> str:
    """What to do when a dataset's files are not found: the mirror, the cache, or a download."""
    hint = (
        f"Set {DATA_DIR_ENV} to a directory holding <dataset>/<file>, e.g. the shared offline mirror "
        f"(`export {DATA_DIR_ENV}=$PWD/../shared/datasets` from the project root; now "
        f"{os.environ.get(DATA_DIR_ENV) or 'unset'}), or put the file in {cache_dir() / 'raw' / dataset}/"
    )
    if offline():
        hint += f", or unset {OFFLINE_ENV} to allow a download"
    elif download_errors:
        hint += ". Download failed: " + "; ".join(download_errors)
    return hint + "."


def locate(spec: DatasetSpec, download: bool = True) -> dict[str, Located]:
    """Locate every raw file of a dataset, keyed by the logical file name."""
    return {raw.name: locate_file(spec, raw, download=download) for raw in spec.files}
