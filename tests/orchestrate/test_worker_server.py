"""The workers' fork server: started before a program's own imports, gone when the program exits."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_server_started_before_the_command_line_is_checked_is_killed_when_the_program_exits(tmp_path):
    """``kcal reproduce`` starts the server before it checks its command line; a program that stops at once (a
    bad value: exit 2) must not leave the server importing the training stack for seconds on its own."""
    code = ("import os; from kcal.orchestrate.worker_server import server_pids, start_worker_server; "
            "start_worker_server(stop_at_exit=True); print(*server_pids(os.getpid()))")  # fmt: skip
    out = tmp_path / "pids"
    with out.open("w") as f:  # not a pipe: the server holds the program's stdout too, and a pipe waits for it
        subprocess.run([sys.executable, "-c", code], stdout=f, timeout=120, check=True)
    pids = [int(p) for p in out.read_text().split()]
    assert len(pids) == 1
    deadline = time.monotonic() + 2.0  # the preload alone takes 5-10 s: a server still here did not stop
    while alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pids[0])


def test_the_server_takes_one_thread_env_and_the_program_keeps_its_own():
    from kcal.orchestrate.worker_server import ONE_THREAD_ENV, one_thread_env

    before = {k: os.environ.get(k) for k in ONE_THREAD_ENV}
    with one_thread_env():
        assert all(os.environ[k] == "1" for k in ONE_THREAD_ENV)
    assert {k: os.environ.get(k) for k in ONE_THREAD_ENV} == before
