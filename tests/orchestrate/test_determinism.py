"""Every number a function of the config alone: a reproduction's ``results.csv`` and its studies' trials are the
same at any ``reproduce.jobs`` and after kills (:mod:`kcal.sweep.ask_tell`, :mod:`kcal.orchestrate.workers`).

Two datasets x two objectives, with more trials than random start-up trials, so that TPE's suggestions depend on
the trials before them; three seeds, which one worker trains as one stack and three workers as three."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing

import pytest

from ..data.conftest import needs

#: 4 trials a study, 2 of them random start-up trials; one epoch on 128 rows: what is compared is which trial and
#: seed gets which numbers, not how good they are
TRIALS = 4
RUN = ["task=classification", "reproduce.datasets=[heart-disease,breast-cancer]", "reproduce.objectives=[xe,xe_mmd]",
       "profile=smoke", f"sweep.n_trials={TRIALS}", "sweep.n_startup_trials=2", "seeds_run.n_seeds=3",
       "trainer.max_epochs=1", "dataset.max_train_rows=128", "reproduce.tables=false"]  # fmt: skip


def reproduce(root, jobs: int, **popen):
    cmd = [sys.executable, "-m", "kcal", "reproduce", *RUN, f"reproduce.jobs={jobs}", f"root={root}"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)  # fmt: skip


def finish(proc) -> None:
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]


def trials(root) -> dict[str, list[tuple]]:
    """Every study's trials: (number, state, params, value), by study name."""
    import optuna

    url = f"sqlite:///{root}/sweeps.db"
    out = {}
    for name in sorted(optuna.get_all_study_names(url)):
        study = optuna.load_study(study_name=name, storage=url)
        out[name] = [(t.number, t.state.name, t.params, t.value) for t in study.get_trials(deepcopy=False)]
    return out


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory):
    root = tmp_path_factory.mktemp("jobs1")
    finish(reproduce(root, 1))
    return root


@pytest.mark.slow
@needs("heart-disease", "breast-cancer")
def test_one_worker_and_three_write_the_same_results_and_trials(one_worker, tmp_path):
    finish(reproduce(tmp_path, 3))
    assert (tmp_path / "results.csv").read_bytes() == (one_worker / "results.csv").read_bytes()
    assert trials(tmp_path) == trials(one_worker)
    assert all(len(ts) == TRIALS for ts in trials(tmp_path).values())  # no surplus, retried or failed trial


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"no {what} after {timeout} s")


def complete_trials(root) -> int:
    """Complete trials of all studies, read with one SQL query (loading every study each poll took CPU from the
    run it watches)."""
    if not (root / "sweeps.db").is_file():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{root / 'sweeps.db'}?mode=ro", uri=True, timeout=1)) as db:
            return db.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
    except sqlite3.Error:  # no table yet, or busy
        return 0


def finished_seeds(root) -> int:
    return len(list(root.glob("*/*/seeds/*/metrics.json")))


@pytest.mark.slow
@needs("heart-disease", "breast-cancer")
def test_a_reproduction_killed_twice_writes_what_an_uninterrupted_one_does(one_worker, tmp_path):
    """SIGKILL of the whole run (parent and workers) in the middle of its sweeps, then again once its first seeds
    finished; each time the same command resumes. The result equals one uninterrupted run's byte for byte."""
    half = 4 * TRIALS // 2  # of the 4 studies' trials
    for until in (lambda: complete_trials(tmp_path) >= half, lambda: finished_seeds(tmp_path) >= 1):
        proc = reproduce(tmp_path, 2)
        try:
            wait_for(lambda u=until, p=proc: u() or p.poll() is not None, 600, "progress to kill at")
            assert proc.poll() is None, "the run ended before the kill"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    finish(reproduce(tmp_path, 2))
    assert (tmp_path / "results.csv").read_bytes() == (one_worker / "results.csv").read_bytes()
    # an ask is stored in one write (kcal.sweep.ask_tell.ask), so a kill leaves no half-asked trial: the same
    # trials under the same numbers, with the same parameters and values
    assert trials(tmp_path) == trials(one_worker)
