"""Test-wide settings: never touch the network, keep caches out of the project tree."""

import os

import pytest
import torch

os.environ["KCAL_OFFLINE"] = "1"
if os.environ.get("KCAL_DATA_DIR"):  # absolute, so subprocesses with another cwd see the same mirror
    os.environ["KCAL_DATA_DIR"] = os.path.abspath(os.environ["KCAL_DATA_DIR"])


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """A session cache dir, so tests neither depend on nor pollute ``data/``."""
    old = os.environ.get("KCAL_CACHE_DIR")
    os.environ["KCAL_CACHE_DIR"] = str(tmp_path_factory.mktemp("kcal-cache"))
    torch.set_num_threads(min(2, torch.get_num_threads()))
    yield
    if old is None:
        os.environ.pop("KCAL_CACHE_DIR", None)
    else:
        os.environ["KCAL_CACHE_DIR"] = old
