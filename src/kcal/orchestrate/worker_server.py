"""Where a reproduction's workers come from: one fork server that imported the training stack once.

Importing what a worker trains with (Lightning, which imports ``torch._dynamo``, ``torchmetrics`` and
``scipy.signal``) takes 5-10 s of CPU a process. The pool's workers (:mod:`kcal.orchestrate.dispatch`) are forked
from a :mod:`multiprocessing` ``forkserver`` that imported :data:`WORKER_PRELOAD` once, so each worker, and each
replacement of a dead one, starts in milliseconds. ``kcal reproduce`` starts the server before anything else
(:func:`start_worker_server`), so its imports run beside the program's own imports and config composing instead of
after them. This module imports nothing of kcal's, so that the start costs nothing.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.forkserver
import os
import signal
from contextlib import contextmanager
from pathlib import Path

ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
"""Set in the parent before its workers start (replacements too), read by their libraries as they load."""

WORKER_PRELOAD = ["kcal.orchestrate.tasks", "kcal.run.single", "kcal.run.stacked"]
"""What a worker trains with (Lightning and torch: seconds to import), imported once by the pool's fork server."""


@contextmanager
def one_thread_env():
    """:data:`ONE_THREAD_ENV` in this process's environment while the pool runs (its workers, replacements too,
    read it as they start); the caller's values afterwards."""
    saved = {k: os.environ.get(k) for k in ONE_THREAD_ENV}
    os.environ.update(ONE_THREAD_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def worker_context() -> multiprocessing.context.BaseContext:
    """Workers forked from a fork server (:mod:`multiprocessing`'s ``forkserver``) that imported
    :data:`WORKER_PRELOAD` once. The server is a fresh interpreter that imported torch but never ran it (one
    thread, no thread pool to copy into a fork), started with this process's environment of the moment:
    :func:`one_thread_env` included when :func:`start_worker_server` started it."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(WORKER_PRELOAD)
    return ctx


def start_worker_server(stop_at_exit: bool = False) -> None:
    """Start the workers' fork server now, under :func:`one_thread_env`, so that its imports overlap what this
    process does before its first task. ``stop_at_exit``: kill it when this process exits (a program that starts it
    before checking its command line: a server still importing would otherwise finish its imports, seconds of
    CPU, before it sees that its parent is gone)."""
    worker_context()
    with one_thread_env():
        multiprocessing.forkserver.ensure_running()
    if stop_at_exit:
        atexit.register(stop_worker_server)


def process_table() -> dict[int, tuple[int, str]]:
    """Every process this one can see: ``pid -> (parent pid, command line)``, read from ``/proc`` (empty where
    there is none); a process that ends while it is read is left out."""
    procs = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        procs[int(entry.name)] = (ppid, cmdline)
    return procs


def server_pids(parent: int, procs: dict[int, tuple[int, str]] | None = None) -> set[int]:
    """The multiprocessing fork servers among ``parent``'s children (in ``procs``, by default
    :func:`process_table`)."""
    procs = process_table() if procs is None else procs
    return {
        pid for pid, (ppid, cmd) in procs.items() if ppid == parent and "multiprocessing.forkserver" in cmd
    }


def stop_worker_server() -> None:
    """Kill this process's fork server (its workers have exited with their pool by then)."""
    for pid in server_pids(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
