"""Moving a reproduction to another machine (kcal.orchestrate.state): a root's sweep studies and finished seeds are
exported as small text files, imported into a new root elsewhere, and the run resumes there."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
from hydra import compose, initialize_config_dir
from optuna.trial import TrialState

from kcal.configs import CONFIG_DIR
from kcal.orchestrate.state import JOURNAL, MARKER, export_state, import_state, journal, main
from kcal.sweep.fingerprint import STUDY_ATTR
from kcal.sweep.studies import counted

from ..common import SMOKE, run_modules
from ..data.conftest import needs
from ..orchestrate.test_reproduce import study_counts, sweep_cmd

needs_crime = needs("crime")
STUDY = "crime__nll__paper"
SEEDS = Path("crime") / "nll" / "seeds"


def state_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "kcal.orchestrate.state", *map(str, args)]


def reproduce_in(root: Path, n_trials: int, n_seeds: int) -> None:
    """``kcal reproduce`` of crime / NLL in this process (one job, no tables)."""
    user = [*SMOKE, f"root={root}", f"sweep.n_trials={n_trials}", f"seeds_run.n_seeds={n_seeds}"]
    own = ["task=regression", "reproduce.datasets=[crime]", "reproduce.objectives=[nll]", "reproduce.jobs=1",
           "reproduce.tables=false"]  # fmt: skip
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        from kcal.orchestrate.reproduce import reproduce

        reproduce(compose("reproduce", overrides=[*user, *own]), user)


def trials(root: Path) -> list[tuple]:
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{root / 'sweeps.db'}")
    return [(t.number, t.state, t.params, t.value) for t in study.trials]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Root A after 2 trials and 2 seeds, and its state exported as docs/reproduction.md shows."""
    root_a = tmp_path_factory.mktemp("machine-a") / "root"
    reproduce_in(root_a, n_trials=2, n_seeds=2)
    state = tmp_path_factory.mktemp("checkout") / "state"
    done = run(state_cmd("export", root_a, state))
    assert done.returncode == 0, done.stderr[-2000:]
    return root_a, state


@needs_crime
def test_state_is_small_text_with_the_studies_and_their_fingerprint(exported):
    root_a, state = exported
    files = [p for p in state.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} <= {".json", ".log", ".csv", ".yaml"}, files
    assert sum(p.stat().st_size for p in files) < 100_000
    seed_files = sorted(
        p.relative_to(state / SEEDS).as_posix() for p in (state / SEEDS).rglob("*") if p.is_file()
    )
    names = ("config.yaml", "metrics.json", "predictions.json", "run.json")  # the forecasts travel, as text
    assert seed_files == [f"seed{k}/{n}" for k in (0, 1) for n in names]
    for name in ("fingerprint.json", "best_trial.json", "sweep/best.json"):
        assert (state / "crime" / "nll" / name).is_file(), name
    trials_dir = state / "crime" / "nll" / "sweep" / "trials"  # each finished trial's test metrics, alone
    trial_files = sorted(p.relative_to(trials_dir).as_posix() for p in trials_dir.rglob("*") if p.is_file())
    assert trial_files == ["trial_0000/metrics.json", "trial_0001/metrics.json"]
    assert not list(state.rglob("*.csv"))  # summary.csv is derived from the seeds and rebuilt on resume
    lines = (state / "crime" / JOURNAL).read_text().splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)  # Optuna's JSON-lines journal
    assert json.loads((state / MARKER).read_text())["datasets"] == ["crime"]
    copied = optuna.load_study(study_name=STUDY, storage=journal(state / "crime" / JOURNAL))
    original = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{root_a / 'sweeps.db'}")
    assert copied.user_attrs[STUDY_ATTR] == original.user_attrs[STUDY_ATTR]
    assert [(t.params, t.value, t.user_attrs) for t in copied.trials] == [
        (t.params, t.value, t.user_attrs) for t in original.trials
    ]


@needs_crime
def test_no_predictions_leaves_the_forecasts_behind(exported, tmp_path):
    root_a, _ = exported
    done = run([*state_cmd("export", root_a, tmp_path / "state"), "--no-predictions"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert not list((tmp_path / "state").rglob("predictions.*")) and list(
        (tmp_path / "state").rglob("metrics.json")
    )


@needs_crime
def test_imported_root_resumes_without_redoing_trials_or_seeds(exported, tmp_path, capsys):
    root_a, state = exported
    root_b = tmp_path / "machine-b" / "root"
    # the import, a question about its trials and the evaluation from the forecasts that travelled, as commands,
    # in one interpreter (tests/common.py); each only reads what the one before wrote
    done, ranged, evaluated = run_modules(
        [("kcal.orchestrate.state", ["import", str(state), str(root_b)]),
         ("kcal.publish.questions.trial_range", [str(root_b), "crime", "nll", "test/nll", "0"]),
         ("kcal", ["reevaluate", str(root_b)])], env={"PYTHONUNBUFFERED": "1"}, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert (
        "crime: 1 study (2 trials: 2 complete), 2 finished seeds" in done.stdout
    )  # trials' metrics aren't seeds
    assert trials(root_b) == trials(root_a) and len(trials(root_a)) == 2
    assert ranged.returncode == 0, ranged.stderr[-2000:]
    assert re.search(r"test/nll over 2 finished trials: min \S+, median \S+, max \S+\n  the selected trial #[01]: ",
                     ranged.stdout), ranged.stdout  # fmt: skip
    assert re.search(r"0 is above [012] of 2 trials", ranged.stdout)
    for k in (0, 1):  # the forecasts come back bit for bit
        with (
            np.load(root_a / SEEDS / f"seed{k}" / "predictions.npz") as a,
            np.load(root_b / SEEDS / f"seed{k}" / "predictions.npz") as b,
        ):
            assert sorted(a) == sorted(b) and all(
                a[n].dtype == b[n].dtype and np.array_equal(a[n], b[n]) for n in a
            )
    assert evaluated.returncode == 0 and "crime/nll: 2 seeds evaluated again (0 official values moved)" in (
        evaluated.stdout
    ), evaluated.stderr[-2000:]
    finished = {k: (root_b / SEEDS / f"seed{k}" / "metrics.json").stat().st_mtime_ns for k in (0, 1)}

    reproduce_in(root_b, n_trials=2, n_seeds=3)  # the study is complete; one more seed
    assert "crime/nll: 2 of 3 seeds already finished, 1 to train" in capsys.readouterr().err
    assert {k: (root_b / SEEDS / f"seed{k}" / "metrics.json").stat().st_mtime_ns for k in (0, 1)} == finished
    assert (root_b / SEEDS / "seed2" / "metrics.json").is_file()
    assert len(trials(root_b)) == 2

    resumed = run(sweep_cmd(root_b, 3))  # one more trial
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = trials(root_b)
    assert after[:2] == trials(root_a) and len(after) == 3 and after[2][1] == TrialState.COMPLETE
    assert study_counts(root_b, STUDY)[:2] == (3, 0)


@needs_crime
def test_resume_of_an_imported_state_with_another_config_is_refused(exported, tmp_path):
    _, state = exported
    root_c = tmp_path / "root"
    import_state(state, root_c)
    refused = run(sweep_cmd(root_c, 3, "trainer.max_epochs=2"))
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "was made with a different configuration: trainer.max_epochs (1 -> 2)" in refused.stderr
    assert len(trials(root_c)) == 2


def test_a_trial_running_at_export_is_queued_again_by_the_import(tmp_path):
    root_a, state, root_b = tmp_path / "a", tmp_path / "state", tmp_path / "b"
    root_a.mkdir()
    study = optuna.create_study(study_name=STUDY, storage=f"sqlite:///{root_a / 'sweeps.db'}")
    x = {"x": optuna.distributions.FloatDistribution(0, 1)}
    study.add_trial(optuna.create_trial(params={"x": 0.25}, distributions=x, value=1.0,
                                        user_attrs={"kcal_status": "ok"}))  # fmt: skip
    study.ask(x)  # a worker's trial, cut off by the end of the sitting: RUNNING
    (exported_line,) = export_state(root_a, state)
    (imported_line,) = import_state(state, root_b)
    moved = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{root_b / 'sweeps.db'}").trials
    assert [t.state for t in moved] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.WAITING]
    assert moved[2].params == moved[1].params and moved[2].system_attrs["failed_trial"] == 1
    assert counted(optuna.load_study(study_name=STUDY, storage=f"sqlite:///{root_b / 'sweeps.db'}")) == (1, 0)
    # a study without the deterministic fingerprint is an asynchronous one: its lines say what becomes of the trial
    said = "1 running trial(s) of asynchronous studies failed and their parameters queued again"
    assert exported_line.endswith(f"{said} after the import") and imported_line.endswith(f"{said} on resume")
    assert "under their own numbers" not in exported_line + imported_line


def test_a_deterministic_trial_running_at_export_stays_asked_and_the_lines_say_so(tmp_path):
    root_a, state, root_b = tmp_path / "a", tmp_path / "state", tmp_path / "b"
    root_a.mkdir()
    study = optuna.create_study(study_name=STUDY, storage=f"sqlite:///{root_a / 'sweeps.db'}")
    study.set_user_attr(STUDY_ATTR, {"sweep.mode": "deterministic"})
    study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})  # asked, not told when the sitting ended
    (exported_line,) = export_state(root_a, state)
    (imported_line,) = import_state(state, root_b)
    moved = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{root_b / 'sweeps.db'}").trials
    assert [(t.number, t.state) for t in moved] == [(0, TrialState.RUNNING)]
    said = "1 running trial(s) trained again under their own numbers"
    assert exported_line.endswith(f"{said} after the import") and imported_line.endswith(f"{said} on resume")


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    root = tmp_path / "root"
    root.mkdir()
    optuna.create_study(study_name=STUDY, storage=f"sqlite:///{root / 'sweeps.db'}")
    main(["export", str(root), str(tmp_path / "state")])
    cases = [
        ["import", str(tmp_path / "state"), str(root)],  # the root already holds the study
        ["import", str(tmp_path / "nothing"), str(tmp_path / "new")],  # not a state
        ["export", str(tmp_path / "nothing"), str(tmp_path / "state2")],  # not a root
        ["export", str(root), str(tmp_path / "state"), "--datasets", "blog"],  # not in the root
        ["move", "a", "b"],  # not a command
    ]
    for argv in cases:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, (argv, err)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:  # --datasets before the folders takes them as datasets
        main(["export", "--no-predictions", "--datasets", "blog", str(root), str(tmp_path / "state")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "put it after the folders" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "kcal state import state outputs/reproduce/full" in capsys.readouterr().out


def test_a_journal_above_the_text_limit_travels_in_text_parts_and_reads_back_the_same(tmp_path, monkeypatch):
    from kcal.orchestrate import state as S

    root_a, state, root_b = tmp_path / "a", tmp_path / "state", tmp_path / "b"
    root_a.mkdir()
    study = optuna.create_study(study_name=STUDY, storage=f"sqlite:///{root_a / 'sweeps.db'}")
    x = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for k in range(30):
        study.add_trial(optuna.create_trial(params={"x": k / 30}, distributions=x, value=float(k),
                                            intermediate_values={e: k + e / 10 for e in range(20)}))  # fmt: skip
    monkeypatch.setattr(S, "MAX_TEXT_BYTES", 4096)
    export_state(root_a, state)
    parts = S.journal_parts(state, "crime")
    assert len(parts) > 2 and parts[0].name == JOURNAL and parts[1].name == "journal-1.log"
    assert all(p.stat().st_size <= 4096 for p in parts)
    assert all(p.read_text().endswith("\n") for p in parts)  # cut at line ends: every part is JSON lines
    import_state(state, root_b)
    moved = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{root_b / 'sweeps.db'}").trials
    assert [(t.params, t.value, t.intermediate_values) for t in moved] == [
        (t.params, t.value, t.intermediate_values) for t in study.trials
    ]
    assert not any(p.name.startswith("journal") for p in (root_b / "crime").rglob("*"))
    export_state(root_a, state)  # a smaller export later leaves no stale part behind
    monkeypatch.setattr(S, "MAX_TEXT_BYTES", 1 << 20)
    export_state(root_a, state)
    assert S.journal_parts(state, "crime") == [state / "crime" / JOURNAL]
    assert not (state / "crime" / "journal-1.log").exists()
