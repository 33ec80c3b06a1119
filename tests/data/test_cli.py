import pytest

from kcal.data.__main__ import main
from kcal.data.registry import dataset_names

from .conftest import mirror_has, needs, real_path


@pytest.mark.skipif(not mirror_has("crime"), reason="mirror not available offline")
def test_cli_lists_all_ten_with_shapes(capsys):
    rc = main([])
    out = capsys.readouterr().out
    assert rc == 0
    for name, d in [("crime", 102), ("blog", 280), ("medical-expenditure", 107), ("superconductivity", 81),
                    ("fb-comment", 53), ("breast-cancer", 30), ("heart-disease", 23),
                    ("online-shoppers", 28), ("dry-bean", 16), ("adult", 104)]:  # fmt: skip
        line = next(line for line in out.splitlines() if line.startswith(name + " "))
        assert f" {d} " in line
    for name in dataset_names():  # what the registry and the mirror say is offline, not a list typed here
        line = next(line for line in out.splitlines() if line.startswith(name + " "))
        assert ("not available offline" in line) == (not mirror_has(name)), line
    heart = next(line for line in out.splitlines() if line.startswith("heart-disease"))
    assert " 920 " in heart and " 299 " in heart


def test_cli_check_passes_when_datasets_are_absent_and_names_them(monkeypatch, tmp_path, capsys):
    """An empty mirror: nothing present is corrupt, so --check exits 0, listing the absent datasets."""
    monkeypatch.setenv("KCAL_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KCAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KCAL_OFFLINE", "1")
    assert main(["--check"]) == 0
    err = capsys.readouterr().err
    assert "unavailable" in err and all(name in err for name in dataset_names())


@needs("breast-cancer")
def test_cli_check_fails_on_a_corrupt_file(monkeypatch, tmp_path, capsys):
    """A copy of breast-cancer's raw file with one byte changed: --check exits 1 and names it."""
    mirror = tmp_path / "mirror"
    dest = mirror / "breast-cancer" / "wdbc.data"
    dest.parent.mkdir(parents=True)
    data = bytearray(real_path("breast-cancer", "wdbc.data").read_bytes())
    data[100] = ord("7") if data[100] != ord("7") else ord("8")
    dest.write_bytes(bytes(data))
    monkeypatch.setenv("KCAL_DATA_DIR", str(mirror))
    monkeypatch.setenv("KCAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KCAL_OFFLINE", "1")
    assert main(["--check"]) == 1
    err = capsys.readouterr().err
    assert str(dest) in err and "corrupt: breast-cancer" in err
    dest.write_bytes(real_path("breast-cancer", "wdbc.data").read_bytes())  # the original: it verifies
    assert main(["--check"]) == 0


def test_cli_help_says_what_check_refuses(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "corrupt" in out and "absent datasets are listed but are not an error" in out
