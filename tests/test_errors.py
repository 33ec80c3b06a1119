"""Entry points never lie about what they ran: data and type errors are one line with exit 2, a
reproduction that could not run what it was asked for exits 2, Ctrl-C exits 130 saying how to resume."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kcal.errors import ConfigError, exits_on_config_error

from .data.conftest import needs, real_path


def kcal(module: str, *args: str, env: dict | None = None, cwd: Path | None = None):
    return subprocess.run([sys.executable, "-m", f"kcal.{module}", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=300)  # fmt: skip


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


@pytest.fixture
def empty_mirror(tmp_path) -> dict:
    (tmp_path / "mirror").mkdir()
    return {"KCAL_DATA_DIR": str(tmp_path / "mirror"), "KCAL_CACHE_DIR": str(tmp_path / "cache")}


def corrupt_copy(tmp_path: Path, dataset: str, fname: str) -> tuple[dict, Path]:
    """A mirror holding ``dataset``'s file with one byte changed."""
    dest = tmp_path / "mirror" / dataset / fname
    dest.parent.mkdir(parents=True)
    data = bytearray(real_path(dataset, fname).read_bytes())
    data[100] = ord("7") if data[100] != ord("7") else ord("8")
    dest.write_bytes(bytes(data))
    return {"KCAL_DATA_DIR": str(tmp_path / "mirror"), "KCAL_CACHE_DIR": str(tmp_path / "cache")}, dest


# (1) exit 0 after training nothing
def test_reproduction_asked_for_an_unavailable_dataset_exits_2(tmp_path, empty_mirror):
    res = kcal("reproduce", "task=regression", "profile=smoke", "reproduce.datasets=[superconductivity]",
               f"root={tmp_path}/out", f"hydra.run.dir={tmp_path}/logs", env=empty_mirror)  # fmt: skip
    assert res.returncode == 2, res.stderr[-2000:]
    line = last_line(res.stderr)
    assert line.startswith(
        "data error: reproduction incomplete (0 result rows): not available: superconductivity"
    )
    assert "Set KCAL_DATA_DIR to a directory holding <dataset>/<file>" in line and line.endswith(".")
    assert not (tmp_path / "out" / "tables").exists()  # no table of dashes


def test_reproduction_with_no_data_at_all_exits_2(tmp_path, empty_mirror):
    res = kcal("reproduce", "profile=smoke", f"root={tmp_path}/out", f"hydra.run.dir={tmp_path}/logs",
               env=empty_mirror)  # fmt: skip
    assert res.returncode == 2, res.stderr[-2000:]
    assert "not available: crime, blog, medical-expenditure, superconductivity, fb-comment" in res.stderr
    assert "export KCAL_DATA_DIR=" in last_line(res.stderr)


# (2) a corrupt file is refused, not skipped
@needs("breast-cancer")
def test_reproduction_refuses_a_corrupt_file_naming_it(tmp_path):
    env, dest = corrupt_copy(tmp_path, "breast-cancer", "wdbc.data")
    res = kcal("reproduce", "task=classification", "profile=smoke", "reproduce.datasets=[breast-cancer]",
               f"root={tmp_path}/out", f"hydra.run.dir={tmp_path}/logs", env=env)  # fmt: skip
    assert res.returncode == 2, res.stderr[-2000:]
    line = last_line(res.stderr)
    assert line.startswith("data error: ") and f"checksum mismatch for {dest}" in line
    assert "[skip]" not in res.stderr


@needs("breast-cancer")
def test_train_on_a_corrupt_file_is_one_line_exit_2(tmp_path):
    env, dest = corrupt_copy(tmp_path, "breast-cancer", "wdbc.data")
    res = kcal("train", "dataset=breast-cancer", "objective=xe", f"hydra.run.dir={tmp_path}/run", env=env)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().startswith(f"data error: checksum mismatch for {dest}: expected sha256 ")
    assert len(res.stderr.strip().splitlines()) == 1


# (5) errors come in one style
def test_train_without_data_is_one_line_exit_2(tmp_path, empty_mirror):
    res = kcal("train", "dataset=crime", f"hydra.run.dir={tmp_path}/run", env=empty_mirror)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("data error: dataset 'crime': raw file ")
    assert "export KCAL_DATA_DIR=" in lines[0] and "or unset KCAL_OFFLINE to allow a download." in lines[0]


def test_an_override_of_the_wrong_type_is_one_line_exit_2(tmp_path):
    res = kcal("train", "objective=nll_mmd", "objective.weight=abc", f"hydra.run.dir={tmp_path}/run")
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip() == (
        "config error: objective.weight='abc' is not a number; pass a number, e.g. objective.weight=1.0"
    )
    res = kcal("train", "figures=maybe", f"hydra.run.dir={tmp_path}/run")
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        == "config error: figures='maybe' is not a boolean; pass figures=true or figures=false"
    )


def test_ctrl_c_exits_130_saying_how_to_resume(capsys):
    def interrupted():
        raise KeyboardInterrupt

    interrupted.__module__ = "kcal.sweep"
    with pytest.raises(SystemExit) as exc:
        exits_on_config_error(interrupted)()
    assert exc.value.code == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("interrupted (Ctrl-C): run the same command again to resume")
    interrupted.__module__ = "kcal.train"
    with pytest.raises(SystemExit) as exc:
        exits_on_config_error(interrupted)()
    assert exc.value.code == 130
    assert "train it from the start" in capsys.readouterr().err


def test_a_multi_line_config_error_is_reported_on_one_line(capsys):
    def bad():
        raise ConfigError("first\nsecond")

    with pytest.raises(SystemExit) as exc:
        exits_on_config_error(bad)()
    assert exc.value.code == 2
    assert capsys.readouterr().err == "config error: first second\n"


# (4) a study with no usable trial says what happened and what to change
@needs("crime")
def test_a_study_with_no_usable_trial_says_what_happened(tmp_path):
    args = ["dataset=crime", "objective=nll", "profile=smoke", "dataset.max_train_rows=128", "trainer.max_epochs=1",
            "objective.weight=-1", f"root={tmp_path}", "sweep.n_trials=2", f"hydra.run.dir={tmp_path}/logs"]  # fmt: skip
    expected = (
        "error: study 'crime__nll__paper' has no usable trial: all 2 finished trials failed (2 invalid_config; "
        "e.g. objective.weight must be >= 0, got -1). To fix: change hparams_search (or the fixed config) so that "
        "sampled values are valid; then run again with sweep.overwrite=true"
    )
    res = kcal("sweep", *args)
    assert res.returncode == 2 and last_line(res.stderr) == expected, res.stderr[-2000:]
    res = kcal("seeds", *args)
    assert res.returncode == 2 and last_line(res.stderr) == expected, res.stderr[-2000:]
