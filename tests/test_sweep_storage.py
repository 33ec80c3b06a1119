"""Sweeps on shared storage: counting with retried trials, progress lines, several workers on a real
PostgreSQL server, and workers started by Hydra's submitit launcher (its local executor)."""

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from kcal.progress import Progress, duration
from kcal.sweep import STATUS, counted

from .data.conftest import mirror_has
from .test_reproduce import SMOKE, study_counts, sweep_cmd

needs_crime = pytest.mark.skipif(not mirror_has("crime"), reason="crime not available offline")


def test_counted_skips_retried_stale_trials_and_surplus():
    study = optuna.create_study()
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}

    def add(state, status=None, **system):
        user = {STATUS: status} if status else {}
        value = 1.0 if state == TrialState.COMPLETE else None
        study.add_trial(optuna.create_trial(state=state, value=value, params={"x": 0.5}, distributions=dist,
                                            user_attrs=user, system_attrs=system))  # fmt: skip

    add(TrialState.COMPLETE, "ok")  # 0
    add(TrialState.FAIL, "diverged")  # 1: counts (a result of its own)
    add(TrialState.FAIL)  # 2: killed; retried by 4
    add(TrialState.FAIL, "surplus")  # 3
    add(TrialState.COMPLETE, "ok", failed_trial=2, retry_history=[2])  # 4
    add(TrialState.FAIL, "diverged")  # 5: diverged, but its worker died before telling: retried by 6
    add(TrialState.RUNNING, failed_trial=5, retry_history=[5])  # 6
    assert counted(study) == (3, 1)


def test_progress_lines_carry_percent_and_eta(capsys):
    progress = Progress(10, "protocol", done=2)
    progress.advance(1, "[crime/nll] trial 3/10 done")
    err = capsys.readouterr().err
    assert err.startswith("[crime/nll] trial 3/10 done | protocol 30% ETA ")
    assert duration(3 * 3600 + 600) == "3h10m" and duration(65) == "1m05s" and duration(4) == "4s"


def postgres_bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


@pytest.fixture
def postgres_url():
    """A PostgreSQL server of its own on a free loopback port, stopped at the end."""
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl); `apt-get install postgresql` (.ci/run does)")
    tmp = Path(tempfile.mkdtemp(prefix="kcal-pg-"))
    as_postgres = []
    if os.geteuid() == 0:  # the server refuses to run as root
        shutil.chown(tmp, "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp / "data"
    subprocess.run([*as_postgres, bindir / "initdb", "-D", data, "-A", "trust", "-U", "postgres", "-N"],
                   check=True, capture_output=True)  # fmt: skip
    opts = f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run([*as_postgres, bindir / "pg_ctl", "-D", data, "-l", tmp / "log", "-o", opts, "-w", "start"],
                   check=True, capture_output=True)  # fmt: skip
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_postgres, bindir / "pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(tmp, ignore_errors=True)


@needs_crime
def test_two_workers_on_one_postgresql_study_finish_exactly_n_trials(tmp_path, postgres_url):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = sweep_cmd(tmp_path, 4, f"sweep.storage={postgres_url}")
    workers = [subprocess.Popen([*cmd, f"sweep.worker={w}"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True) for w in (0, 1)]  # fmt: skip
    for w in workers:
        _, err = w.communicate(timeout=400)
        assert w.returncode == 0, err[-2000:]
    study = optuna.load_study(study_name="crime__nll__paper", storage=postgres_url)
    assert counted(study) == (4, 0), [
        (t.number, t.state.name, t.user_attrs.get(STATUS)) for t in study.trials
    ]
    assert not (tmp_path / "sweeps.db").exists()


@needs_crime
def test_submitit_local_jobs_join_one_study(tmp_path):
    pytest.importorskip(
        "hydra_plugins.hydra_submitit_launcher", reason="hydra-submitit-launcher not installed"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "kcal.sweep", "-m", "hydra/launcher=submitit_local", "sweep.worker=0,1",
           "dataset=crime", "objective=nll", *SMOKE, f"root={tmp_path}", "sweep.n_trials=4",
           f"hydra.sweep.dir={tmp_path}/multirun", "hydra.launcher.timeout_min=10"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    finished, running, statuses = study_counts(tmp_path, "crime__nll__paper")
    assert (finished, running) == (4, 0), statuses
    assert len(list((tmp_path / "multirun" / ".submitit").glob("*/*_result.pkl"))) == 2
