"""Sweeps on shared storage: counting with retried trials, progress lines, several workers on a real
PostgreSQL server, and workers started by Hydra's submitit launcher (its local executor)."""

import glob
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import optuna
import pytest
from omegaconf import OmegaConf
from optuna.trial import TrialState
from sqlalchemy.engine import make_url

from kcal.core.progress import Progress, duration
from kcal.core.storage_url import engine_url
from kcal.sweep.search_space import apply
from kcal.sweep.studies import STATUS, StorageUnavailable, counted, open_storage, use_wal

from ..common import SMOKE
from ..data.conftest import needs
from ..orchestrate.test_reproduce import study_counts, sweep_cmd

needs_crime = needs("crime")
SECRET = "s3cret-Pw"  # a storage password no file or message of a run may hold


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


@contextmanager
def postgres_server(password: str | None = None):
    """A PostgreSQL server of its own on a free loopback port, stopped at the end; it asks for
    ``password`` when one is given. Yields the URL in docs/reproduction.md's form ``postgresql://user@host/db``."""
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl); `apt-get install postgresql` (.ci/run does)")
    tmp = Path(tempfile.mkdtemp(prefix="kcal-pg-"))
    auth = ["-A", "trust"]
    if password:
        (tmp / "pw").write_text(password + "\n")
        auth = ["-A", "scram-sha-256", f"--pwfile={tmp / 'pw'}"]
    as_postgres = []
    if os.geteuid() == 0:  # the server refuses to run as root
        for path in (tmp, *tmp.iterdir()):
            shutil.chown(path, "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp / "data"
    subprocess.run([*as_postgres, bindir / "initdb", "-D", data, *auth, "-U", "postgres", "-N"],
                   check=True, capture_output=True)  # fmt: skip
    opts = f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run([*as_postgres, bindir / "pg_ctl", "-D", data, "-l", tmp / "log", "-o", opts, "-w", "start"],
                   check=True, capture_output=True)  # fmt: skip
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_postgres, bindir / "pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def postgres_url():
    with postgres_server() as url:
        yield url


@pytest.fixture
def postgres_password_url():
    """A server that asks for :data:`SECRET`, and its URL with the password in it."""
    with postgres_server(password=SECRET) as url:
        yield url.replace("postgres@", f"postgres:{SECRET}@")


@needs_crime
def test_two_workers_on_one_postgresql_study_finish_exactly_n_trials(tmp_path, postgres_url):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = sweep_cmd(tmp_path, 4, f"sweep.storage={postgres_url}")
    workers = [subprocess.Popen([*cmd, f"sweep.worker={w}", "sweep.mode=async"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True) for w in (0, 1)]  # fmt: skip
    for w in workers:
        _, err = w.communicate(timeout=400)
        assert w.returncode == 0, err[-2000:]
    study = optuna.load_study(study_name="crime__nll__paper", storage=engine_url(postgres_url))
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
    cmd = [sys.executable, "-m", "kcal.sweep.search", "-m", "hydra/launcher=submitit_local", "sweep.worker=0,1", "sweep.mode=async",
           "dataset=crime", "objective=nll", *SMOKE, f"root={tmp_path}", "sweep.n_trials=4",
           f"hydra.sweep.dir={tmp_path}/multirun", "hydra.launcher.timeout_min=10"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    finished, running, statuses = study_counts(tmp_path, "crime__nll__paper")
    assert (finished, running) == (4, 0), statuses
    assert len(list((tmp_path / "multirun" / ".submitit").glob("*/*_result.pkl"))) == 2


def files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_a_bare_postgresql_url_connects_with_the_installed_driver():
    url = make_url(engine_url("postgresql://user@host/db"))
    assert url.drivername == "postgresql+psycopg2"
    url.get_dialect().import_dbapi()  # psycopg2-binary, a dependency of kcal
    assert engine_url("postgresql+psycopg://user@host/db") == "postgresql+psycopg://user@host/db"
    assert engine_url("sqlite:////tmp/a b/sweeps.db") == "sqlite:////tmp/a b/sweeps.db"


def test_the_saved_config_of_a_run_masks_the_storage_password():
    cfg = OmegaConf.create({"sweep": {"storage": f"postgresql://u:{SECRET}@host/db"}, "trainer": {"lr": 0.1}})
    saved = apply(cfg, {"trainer.lr": 0.01})
    assert saved.sweep.storage == "postgresql://u:***@host/db" and saved.trainer.lr == 0.01


def test_a_storage_that_cannot_be_opened_is_one_line_without_the_password(tmp_path):
    with socket.socket() as s:  # a port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run(sweep_cmd(tmp_path, 2, f"sweep.storage=postgresql://kcal:{SECRET}@127.0.0.1:{port}/kcal"),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert done.stderr.startswith(
        f"config error: cannot open sweep.storage=postgresql://kcal@127.0.0.1:{port}/kcal: "
    )
    assert SECRET not in done.stdout + done.stderr and files_holding(tmp_path, SECRET) == []
    cfg = OmegaConf.create({"root": str(tmp_path), "sweep": {"storage": "postgresql+nodriver://u@host/db",
                            "heartbeat_interval": 60, "grace_period": None, "max_retry": 2}})  # fmt: skip
    with pytest.raises(
        StorageUnavailable, match="cannot open sweep.storage=postgresql.nodriver://u@host/db: "
    ):
        open_storage(cfg)


@needs_crime
def test_a_password_in_the_storage_url_is_never_written_or_printed(tmp_path, postgres_password_url):
    """The server asks for the password, so the run (sweep, then seeds on two worker processes)
    succeeds only if the password reaches every process; no file of the run and no line it prints holds it."""
    cmd = [sys.executable, "-m", "kcal.orchestrate.reproduce", "task=regression", "reproduce.datasets=[crime]",
           "reproduce.objectives=[nll]", "reproduce.jobs=2", "reproduce.tables=false", *SMOKE, f"root={tmp_path}",
           "sweep.n_trials=2", "seeds_run.n_seeds=2", f"sweep.storage={postgres_password_url}"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:].replace(SECRET, "***")
    assert SECRET not in done.stdout + done.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "overrides.yaml" for p in written) and any(p.name == "run.json" for p in written)
    assert files_holding(tmp_path, SECRET) == []
    study = optuna.load_study(study_name="crime__nll__paper", storage=engine_url(postgres_password_url))
    assert counted(study) == (2, 0)


def test_workers_that_create_the_schema_at_once_on_postgresql_all_open_it(postgres_url):
    """Two workers on a fresh database race to create Optuna's schema: the one that loses sees the winner's
    enum type appear between its existence check and its ``CREATE TYPE`` ("type ... already exists", a
    ``ProgrammingError``, as CI met it). The race is made to happen here: just before this process creates
    the type, another connection (the other worker) creates and commits it; opening must still succeed."""
    import psycopg2
    import sqlalchemy

    won = []

    def other_worker_first(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("CREATE TYPE") and not won:
            name = statement.split()[2]
            other = psycopg2.connect(postgres_url)
            with other, other.cursor() as cur:
                cur.execute(statement)
            other.close()
            won.append(name)

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", other_worker_first)
    try:
        cfg = OmegaConf.create({"root": "unused", "sweep": {"storage": postgres_url, "heartbeat_interval": 60,
                                "grace_period": None, "max_retry": 2}})  # fmt: skip
        storage = open_storage(cfg)
    finally:
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", other_worker_first)
    assert won, "the race was not staged: no CREATE TYPE ran"
    study = optuna.create_study(storage=storage, study_name="raced")
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == [study.study_name]


def _pop_queued(root: str, start, out) -> None:
    """A worker process: ask until the study has no queued trial left; put the numbers of those it got."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    cfg = OmegaConf.create({"root": root, "sweep": {"storage": None, "heartbeat_interval": 60, "grace_period": None,
                                                      "max_retry": 2}})  # fmt: skip
    study = optuna.load_study(study_name="queue", storage=open_storage(cfg))
    start.wait(timeout=600)  # start together: once every worker has its study open, however long spawns take
    got = []
    while True:
        trial = study.ask()
        if "fixed_params" not in study._storage.get_trial_system_attrs(trial._trial_id):
            study.tell(trial, state=TrialState.FAIL)
            break
        got.append(trial.number)
    out.put(got)


def test_workers_popping_queued_trials_from_sqlite_never_get_the_same_one(tmp_path):
    """Re-queued trials (a dead worker's, retried) are popped by several workers at once: each must go to
    one worker only. Without a transaction that takes SQLite's write lock before Optuna reads the trial's
    state, 8 processes popped 40 queued trials 50-55 times (two workers training one trial into one folder;
    the later one's tell fails: 'Cannot tell a COMPLETE trial')."""
    import multiprocessing as mp

    cfg = OmegaConf.create({"root": str(tmp_path), "sweep": {"storage": None, "heartbeat_interval": 60,
                                                            "grace_period": None, "max_retry": 2}})  # fmt: skip
    study = optuna.create_study(study_name="queue", storage=open_storage(cfg))
    n = 40
    for i in range(n):
        study.enqueue_trial({"x": i})
    # forked from this process, which has imported optuna already (spawned, each of the 6 took seconds of CPU to
    # import it and this module again); each opens its own connection to the study (open_storage)
    ctx = mp.get_context("fork")
    out, start = ctx.Queue(), ctx.Barrier(6)
    procs = [ctx.Process(target=_pop_queued, args=(str(tmp_path), start, out)) for _ in range(6)]
    for p in procs:
        p.start()
    got = [x for _ in procs for x in out.get(timeout=600)]
    for p in procs:
        p.join(timeout=30)
    assert sorted(got) == list(range(n))  # every queued trial popped once, none twice


def test_wal_switch_waits_for_a_writer_that_sqlite_would_refuse_at_once(tmp_path):
    # SQLite refuses the switch to WAL at once ("database is locked", no busy timeout) while another
    # connection holds a write lock: two workers opening a new study file together met it in CI
    path = str(tmp_path / "sweeps.db")
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE t(x)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sqlite3.connect(path, timeout=5).execute("PRAGMA journal_mode=WAL")  # what the retry is for
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        use_wal(path, timeout_s=0.3)  # a writer that never finishes: the error, after the timeout
    threading.Timer(0.3, writer.execute, args=("COMMIT",)).start()
    use_wal(path, timeout_s=30)
    writer.close()
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
