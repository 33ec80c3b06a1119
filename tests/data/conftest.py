import pytest

from kcal.data.registry import get_spec
from kcal.data.sources import ChecksumError, DatasetUnavailableError, locate


def mirror_has(name: str) -> bool:
    try:
        locate(get_spec(name), download=False)
        return True
    except (DatasetUnavailableError, ChecksumError):
        return False


def needs(*names: str):
    """Skip unless the offline mirror holds every one of ``names`` (datasets)."""
    missing = [name for name in names if not mirror_has(name)]
    return pytest.mark.skipif(
        bool(missing),
        reason=f"{', '.join(missing)} not available offline (set KCAL_DATA_DIR to the shared mirror)",
    )


_MIRROR_AT_IMPORT = __import__("os").environ.get("KCAL_DATA_DIR")


def real_path(name: str, fname: str):
    """Path of a real mirror file, resolved with the environment the session started with."""
    from pathlib import Path

    return Path(_MIRROR_AT_IMPORT) / name / fname
