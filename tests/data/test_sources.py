"""Checksums, the mirror -> cache -> download order, and the offline error."""

import shutil

import pytest

from kcal.data import ChecksumError, DatasetUnavailableError, load
from kcal.data.registry import get_spec
from kcal.data.sources import git_blob_file

from .conftest import needs, real_path


@pytest.fixture
def mirror_copy(tmp_path, monkeypatch):
    """An empty mirror and cache under tmp_path; returns the mirror dir."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    monkeypatch.setenv("KCAL_DATA_DIR", str(mirror))
    monkeypatch.setenv("KCAL_CACHE_DIR", str(tmp_path / "cache"))
    return mirror


@needs("breast-cancer")
def test_one_changed_byte_fails_the_checksum(mirror_copy):
    src = real_path("breast-cancer", "wdbc.data")
    dest = mirror_copy / "breast-cancer" / "wdbc.data"
    dest.parent.mkdir()
    data = bytearray(src.read_bytes())
    data[100] = ord("7") if data[100] != ord("7") else ord("8")
    dest.write_bytes(bytes(data))
    with pytest.raises(ChecksumError) as err:
        load("breast-cancer")
    msg = str(err.value)
    assert str(dest) in msg and get_spec("breast-cancer").files[0].forms[0].sha256 in msg


@needs("breast-cancer")
def test_cache_is_used_when_the_mirror_lacks_the_file(mirror_copy, tmp_path):
    src = real_path("breast-cancer", "wdbc.data")
    cached = tmp_path / "cache" / "raw" / "breast-cancer" / "wdbc.data"
    cached.parent.mkdir(parents=True)
    shutil.copy(src, cached)
    ds = load("breast-cancer")
    assert ds.info.sources["wdbc.data"].startswith("cache:")
    assert ds.info.n_used == 569


def test_missing_file_offline_gives_a_clear_error(mirror_copy, monkeypatch):
    monkeypatch.setenv("KCAL_OFFLINE", "1")
    with pytest.raises(DatasetUnavailableError) as err:
        load("superconductivity")
    msg = str(err.value)
    assert "train.csv" in msg and "KCAL_DATA_DIR" in msg and str(mirror_copy) in msg


def test_failed_download_is_reported_not_hidden(mirror_copy, monkeypatch):
    """With downloads allowed but no network, the error names the URL that failed."""
    import urllib.request

    def no_network(*a, **k):
        raise OSError("network is unreachable")

    monkeypatch.delenv("KCAL_OFFLINE", raising=False)
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    with pytest.raises(DatasetUnavailableError, match="network is unreachable"):
        load("fb-comment")


def test_download_is_verified_by_git_blob(mirror_copy, monkeypatch, tmp_path):
    """A downloaded file known only by its git blob id (superconductivity's, from a zip) is accepted only if
    that id matches the registry."""
    import io
    import urllib.request
    import zipfile

    payload = io.BytesIO()
    with zipfile.ZipFile(payload, "w") as zf:
        (form,) = get_spec("superconductivity").files[0].forms
        assert form.git_blob and not form.sha256
        zf.writestr(form.archive_member, "1,2,3\n")

    class Resp(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.delenv("KCAL_OFFLINE", raising=False)
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: Resp(payload.getvalue()))
    with pytest.raises(ChecksumError, match="git blob"):
        load("superconductivity")
    assert not (tmp_path / "cache" / "raw" / "superconductivity" / "train.csv").exists()


def test_git_blob_id_matches_git(tmp_path):
    p = tmp_path / "f.txt"
    p.write_bytes(b"hello\n")
    assert git_blob_file(p) == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object`
