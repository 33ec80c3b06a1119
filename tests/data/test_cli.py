import pytest

from kcal.data.__main__ import main
from kcal.data.registry import dataset_names

from .conftest import mirror_has


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


def test_cli_check_fails_when_a_dataset_is_unavailable(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("KCAL_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KCAL_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["--check"]) == 1
    assert "unavailable" in capsys.readouterr().err
