"""Entry points never lie about what they ran: data and type errors are one line with exit 2, a
reproduction that could not run what it was asked for exits 2, Ctrl-C exits 130 saying how to resume."""

from pathlib import Path

import pytest

from kcal.core.errors import ConfigError, exits_on_config_error
from kcal.data.registry import dataset_names

from ..common import SMOKE, run_modules
from ..data.conftest import mirror_has, needs, real_path


def kcal(calls: dict[str, tuple[str, ...]], env: dict | None = None) -> dict:
    """``kcal <command> *args`` (as ``python -m kcal``) for each ``name: (command, *args)``, in order, in one
    subprocess (tests/common.py); the finished call (returncode, stdout, stderr) by name."""
    runs = run_modules([("kcal", [command, *args]) for command, *args in calls.values()], env=env)
    return dict(zip(calls, runs, strict=True))


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def without_data(tmp_path_factory) -> tuple[Path, dict]:
    """An empty mirror, and on it, in one subprocess: kcal.run.train (first: its check of stderr is the
    strictest), a reproduction asked for an unavailable dataset, a reproduction with no data at all."""
    tmp = tmp_path_factory.mktemp("empty-mirror")
    (tmp / "mirror").mkdir()
    env = {"KCAL_DATA_DIR": str(tmp / "mirror"), "KCAL_CACHE_DIR": str(tmp / "cache")}
    return tmp, kcal({
        "train": ("train", "dataset=crime", f"hydra.run.dir={tmp}/train/run"),
        "unavailable": ("reproduce", "task=regression", "profile=smoke", "reproduce.datasets=[superconductivity]",
                        f"root={tmp}/unavailable/out", f"hydra.run.dir={tmp}/unavailable/logs"),
        "no_data": ("reproduce", "profile=smoke", f"root={tmp}/no_data/out", f"hydra.run.dir={tmp}/no_data/logs"),
    }, env=env)  # fmt: skip


def corrupt_copy(tmp_path: Path, dataset: str, fname: str) -> tuple[dict, Path]:
    """A mirror holding ``dataset``'s file with one byte changed."""
    dest = tmp_path / "mirror" / dataset / fname
    dest.parent.mkdir(parents=True)
    data = bytearray(real_path(dataset, fname).read_bytes())
    data[100] = ord("7") if data[100] != ord("7") else ord("8")
    dest.write_bytes(bytes(data))
    return {"KCAL_DATA_DIR": str(tmp_path / "mirror"), "KCAL_CACHE_DIR": str(tmp_path / "cache")}, dest


# (1) exit 0 after training nothing
def test_reproduction_asked_for_an_unavailable_dataset_exits_2(without_data):
    tmp, runs = without_data
    res = runs["unavailable"]
    assert res.returncode == 2, res.stderr[-2000:]
    line = last_line(res.stderr)
    assert line.startswith(
        "data error: reproduction incomplete (0 result rows): not available: superconductivity"
    )
    assert "Set KCAL_DATA_DIR to a directory holding <dataset>/<file>" in line and line.endswith(".")
    assert not (tmp / "unavailable" / "out" / "tables").exists()  # no table of dashes


def test_reproduction_with_no_data_at_all_exits_2(without_data):
    res = without_data[1]["no_data"]
    assert res.returncode == 2, res.stderr[-2000:]
    assert f"not available: {', '.join(dataset_names('regression')[:5])}" in res.stderr  # the task's first
    assert "export KCAL_DATA_DIR=" in last_line(res.stderr)


@pytest.fixture(scope="module")
def corrupt_breast_cancer(tmp_path_factory) -> tuple[Path, dict]:
    """A mirror whose breast-cancer file has one byte changed, and on it, in one subprocess: kcal.run.train
    (first: its check of stderr is the strictest), then a reproduction."""
    tmp = tmp_path_factory.mktemp("corrupt-mirror")
    env, dest = corrupt_copy(tmp, "breast-cancer", "wdbc.data")
    return dest, kcal({
        "train": ("train", "dataset=breast-cancer", "objective=xe", f"hydra.run.dir={tmp}/run"),
        "reproduce": ("reproduce", "task=classification", "profile=smoke", "reproduce.datasets=[breast-cancer]",
                      f"root={tmp}/out", f"hydra.run.dir={tmp}/logs"),
    }, env=env)  # fmt: skip


# (2) a corrupt file is refused, not skipped
@needs("breast-cancer")
def test_reproduction_refuses_a_corrupt_file_naming_it(corrupt_breast_cancer):
    dest, runs = corrupt_breast_cancer
    res = runs["reproduce"]
    assert res.returncode == 2, res.stderr[-2000:]
    line = last_line(res.stderr)
    assert line.startswith("data error: ") and f"checksum mismatch for {dest}" in line
    assert "[skip]" not in res.stderr


@needs("breast-cancer")
def test_train_on_a_corrupt_file_is_one_line_exit_2(corrupt_breast_cancer):
    dest, runs = corrupt_breast_cancer
    res = runs["train"]
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip().startswith(f"data error: checksum mismatch for {dest}: expected sha256 ")
    assert len(res.stderr.strip().splitlines()) == 1


# (5) errors come in one style
def test_train_without_data_is_one_line_exit_2(without_data):
    res = without_data[1]["train"]
    assert res.returncode == 2, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("data error: dataset 'crime': raw file ")
    assert "export KCAL_DATA_DIR=" in lines[0] and "or unset KCAL_OFFLINE to allow a download." in lines[0]


#: a study whose every trial samples an invalid value (a fixed one is refused before the sweep starts)
NO_USABLE_TRIAL = ["dataset=crime", "objective=nll", *SMOKE, "sweep.n_trials=2",
                   "++hparams_search.objectives.nll={objective.weight: {choices: [-1]}}"]  # fmt: skip


@pytest.fixture(scope="module")
def with_data(tmp_path_factory) -> tuple[Path, dict]:
    """In one subprocess on the data mirror: kcal.run.train with an override of the wrong type, twice (first:
    their checks of stderr are the strictest), then a sweep and a seed rerun of a study whose every trial
    is an invalid config (crime)."""
    tmp = tmp_path_factory.mktemp("errors")
    calls = {
        "number": ("train", "objective=nll_mmd", "objective.weight=abc", f"hydra.run.dir={tmp}/run"),
        "boolean": ("train", "figures=maybe", f"hydra.run.dir={tmp}/run"),
    }
    if mirror_has("crime"):
        study = [*NO_USABLE_TRIAL, f"root={tmp}/study", f"hydra.run.dir={tmp}/study/logs"]
        calls |= {"sweep": ("sweep", *study), "seeds": ("seeds", *study)}
    return tmp, kcal(calls)


def test_an_override_of_the_wrong_type_is_one_line_exit_2(with_data):
    res = with_data[1]["number"]
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip() == (
        "config error: objective.weight='abc' is not a number; pass a number, e.g. objective.weight=1.0"
    )
    res = with_data[1]["boolean"]
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        == "config error: figures='maybe' is not a boolean; pass figures=true or figures=false"
    )


def test_ctrl_c_exits_130_saying_how_to_resume(capsys):
    def interrupted():
        raise KeyboardInterrupt

    interrupted.__module__ = "kcal.sweep.search"
    with pytest.raises(SystemExit) as exc:
        exits_on_config_error(interrupted)()
    assert exc.value.code == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("interrupted (Ctrl-C): run the same command again to resume")
    interrupted.__module__ = "kcal.run.train"
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
def test_a_study_with_no_usable_trial_says_what_happened(with_data):
    # kcal sweep, then kcal seeds, with NO_USABLE_TRIAL on one root (with_data)
    expected = (
        "error: study 'crime__nll__paper' has no usable trial: all 2 finished trials failed (2 invalid_config; "
        "e.g. objective.weight must be a finite number >= 0, got -1). To fix: change hparams_search (or the fixed config) so that "
        "sampled values are valid; then run again with sweep.overwrite=true"
    )
    res = with_data[1]["sweep"]
    assert res.returncode == 2 and last_line(res.stderr) == expected, res.stderr[-2000:]
    res = with_data[1]["seeds"]
    assert res.returncode == 2 and last_line(res.stderr) == expected, res.stderr[-2000:]


# (6) a misspelt name is one line listing the valid names, exit 2, in every documented command
@pytest.fixture(scope="module")
def misspelt(tmp_path_factory) -> tuple[Path, dict]:
    """Every documented command with a misspelt dataset, objective or config group, in one subprocess (the
    Hydra programs first: Hydra's own error, which they used to print, is the longest output)."""
    tmp = tmp_path_factory.mktemp("misspelt")
    root, dest = tmp / "root", tmp / "dest"
    root.mkdir()
    hydra_run = f"hydra.run.dir={tmp}/logs"
    calls = {
        "train dataset": ("train", "dataset=crme", hydra_run),
        "train objective": ("train", "objective=nll_mdm", hydra_run),
        "train multirun": ("train", "-m", "dataset=crime,crme", f"hydra.sweep.dir={tmp}/many"),
        "sweep profile": ("sweep", "profile=quik", hydra_run, f"root={root}"),
        "seeds objective": ("seeds", "objective=nll_mdm", hydra_run, f"root={root}"),
        "ablation dataset": ("ablation", "dataset=crme", hydra_run, f"root={root}"),
        "reproduce dataset": ("reproduce", "dataset=crme", hydra_run, f"root={root}"),
        "reproduce datasets": ("reproduce", "reproduce.datasets=[crme]", hydra_run, f"root={root}"),
        "reproduce objectives": (
            "reproduce",
            "reproduce.objectives=[nll,nll_mdm]",
            hydra_run,
            f"root={root}",
        ),
        "report datasets": ("report", str(root), str(dest), "--datasets", "crme"),
        "report withdraw dataset": ("report", "--withdraw", "crme/xe", "--keep", "x", str(dest)),
        "report withdraw objective": ("report", "--withdraw", "crime/nll_mdm", "--keep", "x", str(dest)),
        "pareto-report": ("pareto-report", "publish", str(root), "crme", "--dest", str(dest)),
        "figures reproduction": (
            "figures",
            "reproduction",
            str(root),
            "--datasets",
            "crme",
            "--out",
            str(dest),
        ),
        "figures local": ("figures", "local", "--datasets", "blog", "--root", str(dest)),
        "state": ("state", "export", str(root), str(dest), "--datasets", "crme"),
        "reevaluate": ("reevaluate", str(root), "--datasets", "crme"),
        "bench datasets": ("bench", "--datasets", "crme", "--out", str(dest)),
        "bench estimate": ("bench", "--estimate-only", "--estimate-datasets", "crme", "--out", str(dest)),
        "bench objectives": ("bench", "--seed-objectives", "nll_mdm", "--out", str(dest)),
        "sweep-throughput": ("sweep-throughput", "--pairs", "crme:nll"),
    }
    return tmp, kcal(calls)


@pytest.mark.parametrize(
    ("call", "kind", "valid"),
    [("train dataset", "dataset 'crme'", "crime"), ("train objective", "objective 'nll_mdm'", "nll_mmd"),
     ("train multirun", "dataset 'crme'", "crime"), ("sweep profile", "profile 'quik'", "quick"),
     ("seeds objective", "objective 'nll_mdm'", "nll_mmd"), ("ablation dataset", "dataset 'crme'", "crime"),
     ("reproduce dataset", "dataset 'crme'", "crime"), ("reproduce datasets", "dataset 'crme'", "crime"),
     ("reproduce objectives", "objective 'nll_mdm'", "nll_mmd"), ("report datasets", "dataset 'crme'", "crime"),
     ("report withdraw dataset", "dataset 'crme'", "crime"),
     ("report withdraw objective", "objective 'nll_mdm'", "nll_mmd"), ("pareto-report", "dataset 'crme'", "crime"),
     ("figures local", "dataset 'blog'", "crop-yield"),
     ("state", "dataset 'crme'", "crime"), ("reevaluate", "dataset 'crme'", "crime"),
     ("bench datasets", "dataset 'crme'", "crime"), ("bench estimate", "dataset 'crme'", "crime"),
     ("bench objectives", "objective 'nll_mdm'", "nll_mmd"), ("sweep-throughput", "dataset 'crme'", "crime")],
)  # fmt: skip
def test_a_misspelt_name_is_one_line_listing_the_valid_names_exit_2(misspelt, call, kind, valid):
    tmp, runs = misspelt
    res = runs[call]
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"config error: unknown {kind}; valid names: "), lines
    assert valid in lines[0].partition("valid names: ")[2].split(", "), lines[0]
    assert not (tmp / "dest").exists() and not (tmp / "many").exists()  # nothing written


def test_figures_of_a_dataset_not_in_the_roots_is_one_line_naming_those_that_are(misspelt):
    """``kcal figures reproduction`` draws what its roots hold, synthetic test datasets included: a name that
    is not there is refused naming the datasets that are (none in this empty root)."""
    tmp, runs = misspelt
    res = runs["figures reproduction"]
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.strip() == f"error: no runs of crme under {tmp / 'root'} (datasets with runs: none)"


def test_group_choices_are_checked_as_hydra_would_read_them(tmp_path):
    from kcal.core.errors import unknown_choices

    assert (
        unknown_choices(["dataset=crime", "+experiment=paper_regression", "~logger", "objective=null"]) == []
    )
    assert unknown_choices(["dataset.max_train_rows=128", "hydra/launcher=submitit_local", "seed=0,1"]) == []
    assert len(unknown_choices(["-m", "dataset=crime,crme,blgo", "objective=nll"])) == 2
    assert unknown_choices(["--cfg", "job", "model=mpl"])[0].startswith("unknown model 'mpl'; valid names: ")
    # a user's --config-dir adds configs to a group; a --config-path replaces kcal's, which Hydra checks
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "mine.yaml").write_text("name: mine\n")
    assert unknown_choices(["dataset=mine"]) != []
    assert unknown_choices(["--config-dir", str(tmp_path), "dataset=mine"]) == []
    assert unknown_choices([f"--config-dir={tmp_path}", "dataset=mine"]) == []
    assert unknown_choices(["--config-path", str(tmp_path), "dataset=anything"]) == []


@needs("crime")
def test_a_second_reproduction_into_a_held_root_is_refused_naming_the_first(tmp_path):
    """A root another kcal reproduce holds (its lock taken here, as a running reproduction takes it) is refused
    with one line naming the holder, exit 2, and nothing trained."""
    from filelock import FileLock

    from kcal.core import layout

    root = tmp_path / "root"
    root.mkdir()
    lock_path, owner_path = layout.reproduction_lock(root)
    owner_path.write_text("pid 4242 on host elsewhere, started 2026-12-02 00:00:00 UTC\n")
    with FileLock(lock_path):
        res = kcal({"second": ("reproduce", "task=regression", *SMOKE, "reproduce.datasets=[crime]",
                               "reproduce.objectives=[nll]", f"root={root}", f"hydra.run.dir={tmp_path}/logs")})  # fmt: skip
    second = res["second"]
    assert second.returncode == 2, second.stderr[-2000:]
    line = last_line(second.stderr)
    assert line.startswith(
        f"config error: root={root} is in use by another kcal reproduce (pid 4242 on host elsewhere"
    )
    assert "pass another root=" in line
    assert sorted(p.name for p in root.iterdir()) == ["reproduce.lock", "reproduce.owner"]  # nothing trained
