"""``sweep.selection=pareto``: a multi-objective study of its own next to the paper's, its front and selected
trial in ``front.json``/``best.json``; every trial records the regulariser's share of the loss; and
optuna-dashboard serves such a study."""

import csv
import json
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir
from optuna.study import StudyDirection
from optuna.trial import TrialState

from kcal.configs import CONFIG_DIR
from kcal.core.errors import ConfigError
from kcal.sweep.fingerprint import STUDY_ATTR, shaping_config, study_fingerprint
from kcal.sweep.search import sweep, trial_line
from kcal.sweep.studies import study_name

from .. import common
from ..data.conftest import mirror_has, needs
from ..sweep.test_sweep_storage import postgres_server

SMOKE = [*common.SMOKE, "trainer.max_epochs=2", "sweep.n_trials=3"]  # two epochs, three trials
CRIME = ["dataset=crime", "objective=nll_mmd", *SMOKE]
PARETO = "sweep.selection=pareto"


def sweep_cfg(*overrides):
    return common.compose_cfg("sweep", *overrides)


def load(root: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{root / 'sweeps.db'}")


@pytest.fixture(scope="module")
def crime_root(tmp_path_factory):
    """One root holding crime/nll_mmd's paper study, then its pareto study (3 smoke trials each)."""
    if not mirror_has("crime"):
        pytest.skip("crime not available offline (set KCAL_DATA_DIR to the shared mirror)")
    root = tmp_path_factory.mktemp("pareto")
    sweep(sweep_cfg(*CRIME, f"root={root}"))
    sweep(sweep_cfg(*CRIME, f"root={root}", PARETO))
    return root


def test_selection_key_is_in_the_fingerprint_only_when_not_paper():
    assert "sweep.selection" not in shaping_config(sweep_cfg("dataset=crime"))
    assert shaping_config(sweep_cfg("dataset=crime", PARETO))["sweep.selection"] == "pareto"
    assert study_name(sweep_cfg("dataset=crime", "objective=nll_mmd")) == "crime__nll_mmd__paper"
    assert (
        study_name(sweep_cfg("dataset=crime", "objective=nll_mmd", PARETO)) == "crime__nll_mmd__paper__pareto"
    )
    with pytest.raises(ConfigError, match="sweep.selection=best is not one of: paper, pareto"):
        study_name(sweep_cfg("dataset=crime", "sweep.selection=best"))


def test_pareto_study_has_two_objectives_a_front_and_its_files(crime_root):
    study = load(crime_root, "crime__nll_mmd__paper__pareto")
    assert study.directions == [StudyDirection.MINIMIZE, StudyDirection.MINIMIZE]
    assert study.metric_names == ["val/nll", "val/qce"]
    assert study.user_attrs[STUDY_ATTR]["sweep.selection"] == "pareto"
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    for t in complete:  # the values are the run's validation NLL and QCE
        assert t.values == [t.user_attrs["val/nll"], t.user_attrs["val/qce"]]
    front_numbers = {t.number for t in study.best_trials}
    assert front_numbers

    out = crime_root / "crime" / "nll_mmd" / "sweep__pareto"
    assert sorted(p.name for p in (out / "trials").iterdir()) == [
        f"trial_{t.number:04d}" for t in study.trials
    ]
    best = json.loads((out / "best.json").read_text())
    front = json.loads((out / "front.json").read_text())
    assert {row["trial"] for row in front["front"]} == front_numbers
    lowest_nll = min(study.best_trials, key=lambda t: (*t.values, t.number))
    assert best["trial"] == front["selected"] == front["front"][0]["trial"] == lowest_nll.number
    assert lowest_nll.values[0] == min(t.values[0] for t in complete)  # the lowest NLL of all trials
    assert best["selection"] == "pareto" and best["metrics"] == ["val/nll", "val/qce"]
    assert best["value"] == lowest_nll.values and front["front"][0]["values"] == {
        "val/nll": lowest_nll.values[0],
        "val/qce": lowest_nll.values[1],
    }

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        from kcal.reruns.seeds import best_config

        seeds_cfg = compose("seeds", overrides=[*CRIME, f"root={crime_root}", PARETO])
        _, source = best_config(seeds_cfg)
    assert source["study"] == "crime__nll_mmd__paper__pareto" and source["trial"] == best["trial"]

    line = trial_line(sweep_cfg(*CRIME, f"root={crime_root}", PARETO), complete[-1], study)
    assert f"val/nll {complete[-1].values[0]:.4g}, val/qce" in line
    assert line.endswith(f"front of {len(front_numbers)}") and f"best #{best['trial']} (val/nll " in line


def test_command_line_resumes_the_complete_pareto_study(crime_root):
    done = subprocess.run([sys.executable, "-m", "kcal.sweep.search", *CRIME, PARETO, f"root={crime_root}",
                           f"hydra.run.dir={crime_root}/logs"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    best = json.loads((crime_root / "crime" / "nll_mmd" / "sweep__pareto" / "best.json").read_text())
    assert done.stdout.startswith(
        "study crime__nll_mmd__paper__pareto: 3 finished trials (0 running elsewhere); "
    )
    assert f"selected #{best['trial']} (val/nll " in done.stdout and "front of " in done.stdout
    assert (
        done.stdout.strip().splitlines()[-1]
        == f"trials: {crime_root / 'crime' / 'nll_mmd' / 'sweep__pareto'}"
    )


def test_paper_study_in_the_same_root_keeps_its_name_fingerprint_and_values(crime_root):
    assert sorted(optuna.get_all_study_names(f"sqlite:///{crime_root / 'sweeps.db'}")) == [
        "crime__nll_mmd__paper",
        "crime__nll_mmd__paper__pareto",
    ]
    cfg = sweep_cfg(*CRIME, f"root={crime_root}")
    study = load(crime_root, "crime__nll_mmd__paper")
    assert study.directions == [StudyDirection.MINIMIZE] and study.metric_names is None
    stored = study.user_attrs[STUDY_ATTR]
    assert stored == study_fingerprint(cfg) and "sweep.selection" not in stored
    for t in study.get_trials(states=(TrialState.COMPLETE,)):
        assert t.value == t.user_attrs["val/nll"]  # the paper's value: validation NLL
    sweep(cfg)  # resumes: the same fingerprint, no new trial
    assert load(crime_root, "crime__nll_mmd__paper").user_attrs[STUDY_ATTR] == stored
    assert len(load(crime_root, "crime__nll_mmd__paper").trials) == len(study.trials)
    paper_dir = crime_root / "crime" / "nll_mmd" / "sweep"
    assert json.loads((paper_dir / "best.json").read_text())["study"] == "crime__nll_mmd__paper"
    assert not (paper_dir / "front.json").exists()


def test_every_trial_records_the_regularisers_share(crime_root):
    for name in ("crime__nll_mmd__paper", "crime__nll_mmd__paper__pareto"):
        for t in load(crime_root, name).get_trials(states=(TrialState.COMPLETE,)):
            with open(Path(t.user_attrs["run_dir"]) / "history.csv", newline="") as f:
                shares = {int(r["epoch"]): float(r["train/reg_share"]) for r in csv.DictReader(f)}
            assert t.user_attrs["reg_share_median"] == statistics.median(shares.values())
            assert t.user_attrs["reg_share_at_best"] == shares[t.user_attrs["best_epoch"]]
            # 0 where the sampled x-kernel is so narrow that the MMD term vanishes
            assert t.user_attrs["reg_share_median"] >= 0


def test_every_trial_keeps_its_validation_curve(crime_root):
    """Each finished trial of a paper-selection study reports history.csv's val/nll per epoch to Optuna, and
    the published trials table carries it (what a pruning replay reads)."""
    from kcal.publish.trials import read_curve, trial_rows

    rows = trial_rows(crime_root)
    name = "crime__nll_mmd__paper"
    for t in load(crime_root, name).get_trials(states=(TrialState.COMPLETE,)):
        with open(Path(t.user_attrs["run_dir"]) / "history.csv", newline="") as f:
            curve = {int(r["epoch"]): float(r["val/nll"]) for r in csv.DictReader(f)}
        assert curve and t.intermediate_values == curve
        row = rows[(rows["study"] == name) & (rows["number"] == t.number)]
        assert read_curve(row["curve"].item()) == pytest.approx([curve[e] for e in sorted(curve)], rel=1e-6)
        for key in ("epochs", "best_epoch", "reg_share_at_best"):  # what a pruning replay compares
            assert row[key].item() == pytest.approx(t.user_attrs[key], rel=1e-6)
        assert (
            row["cpu_seconds"].item() == pytest.approx(t.user_attrs["cpu_seconds"])
            and row["cpu_seconds"].item() > 0
        )


@needs("breast-cancer")
def test_classification_pareto_sweep(tmp_path):
    sweep(sweep_cfg("dataset=breast-cancer", "objective=xe", *SMOKE, f"root={tmp_path}", PARETO))
    study = load(tmp_path, "breast-cancer__xe__paper__pareto")
    assert study.directions == [StudyDirection.MINIMIZE, StudyDirection.MINIMIZE]
    assert study.metric_names == ["val/nll", "val/ece"]
    assert study.best_trials
    for t in study.get_trials(states=(TrialState.COMPLETE,)):
        assert t.values == [t.user_attrs["val/nll"], t.user_attrs["val/ece"]]
        assert t.user_attrs["reg_share_median"] == 0  # xe has no regulariser
    out = tmp_path / "breast-cancer" / "xe" / "sweep__pareto"
    assert (
        json.loads((out / "best.json").read_text())["trial"]
        == json.loads((out / "front.json").read_text())["selected"]
    )


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@contextmanager
def dashboard(storage: str):
    """``optuna-dashboard <storage>`` on a free loopback port, stopped at the end; yields its base URL once
    its API answers (at most 60 s)."""
    cli = shutil.which("optuna-dashboard", path=str(Path(sys.executable).parent)) or shutil.which(
        "optuna-dashboard"
    )
    assert cli, "optuna-dashboard is installed but its command is not on PATH"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([cli, storage, "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get_json(f"{base}/api/studies")
                break
            except OSError:
                assert server.poll() is None, server.stderr.read()[-2000:]
                assert time.monotonic() < deadline, "optuna-dashboard did not answer within 60 s"
                time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def shows_the_pareto_study(base: str) -> None:
    by_name = {s["study_name"]: s for s in get_json(f"{base}/api/studies")["study_summaries"]}
    summary = by_name["crime__nll_mmd__paper__pareto"]
    assert summary["directions"] == ["minimize", "minimize"]
    detail = get_json(f"{base}/api/studies/{summary['study_id']}")
    assert detail["directions"] == ["minimize", "minimize"]
    assert detail["objective_names"] == ["val/nll", "val/qce"]
    assert detail["best_trials"] and len(detail["trials"]) == 3


def test_optuna_dashboard_serves_the_pareto_study_from_sqlite(crime_root):
    pytest.importorskip("optuna_dashboard", reason="optuna-dashboard not installed (pip install -e '.[dev]')")
    with dashboard(f"sqlite:///{crime_root / 'sweeps.db'}") as base:  # as docs/pareto.md prints it
        shows_the_pareto_study(base)
        names = {s["study_name"] for s in get_json(f"{base}/api/studies")["study_summaries"]}
        assert names == {"crime__nll_mmd__paper", "crime__nll_mmd__paper__pareto"}


def test_optuna_dashboard_serves_the_pareto_study_from_postgresql(crime_root):
    pytest.importorskip("optuna_dashboard", reason="optuna-dashboard not installed (pip install -e '.[dev]')")
    with postgres_server() as url:
        server = url.replace("postgresql://", "postgresql+psycopg2://")  # as docs/pareto.md gives it
        optuna.copy_study(from_study_name="crime__nll_mmd__paper__pareto",
                          from_storage=f"sqlite:///{crime_root / 'sweeps.db'}", to_storage=server)  # fmt: skip
        with dashboard(server) as base:
            shows_the_pareto_study(base)


def test_seeds_rerun_a_chosen_front_trial(crime_root):
    """seeds_run.trial reruns that trial's parameters (e.g. a second front point) under its own label."""
    from kcal.reruns.seeds import best_config

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("seeds", overrides=[*CRIME, f"root={crime_root}", PARETO, "seeds_run.trial=1"])
    study = load(crime_root, "crime__nll_mmd__paper__pareto")
    chosen, info = best_config(cfg)
    assert info["trial"] == 1 and info["params"] == study.trials[1].params
    assert chosen.trainer.batch_size == study.trials[1].params["trainer.batch_size"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        bad = compose("seeds", overrides=[*CRIME, f"root={crime_root}", PARETO, "seeds_run.trial=99"])
    with pytest.raises(ConfigError, match="no completed trial of that number"):
        best_config(bad)
