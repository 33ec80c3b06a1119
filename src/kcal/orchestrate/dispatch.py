"""The reproduction's worker processes: a :class:`pebble.ProcessPool` that tasks go into and come back from.

:class:`Dispatcher` hands tasks to the pool, keeps ``QUEUED_PER_WORKER`` waiting per worker beyond the one each
runs, tells when each started (as far as this process can tell: tasks start in the order they went in, each as a
worker finishes its last one), and replaces a pool that pebble stopped. A worker that dies while it runs a task
costs that task only: pebble starts a new worker in its place and the future says ``ProcessExpired``. A worker
that dies while no task of the pool runs makes pebble stop the whole pool; :meth:`Dispatcher.restart` then stops
its workers and starts a new pool, handing back every task it held (those whose result came back first, and
those that never ran).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool

import pebble

from kcal.orchestrate.tasks import init_worker
from kcal.orchestrate.worker_server import worker_context

QUEUED_PER_WORKER = 1
"""Tasks waiting in the pool's queue per worker, beyond the one it runs: a worker that finishes a task starts the
next at once instead of waiting for this process to read the result and submit another (quick reproductions'
trials take ~1 s; the parent's turn-around per result was a good part of that)."""


def stop_pool(pool: pebble.ProcessPool) -> None:
    """Stop ``pool`` now: drop its queued tasks and kill its workers (pebble's own stop sends each worker a
    SIGTERM and waits up to 3 s, one worker after the other, and a seed chunk does not stop on SIGTERM)."""
    pool.stop()
    for child in multiprocessing.active_children():
        child.kill()
    pool.join()


class Dispatcher:
    """``jobs`` worker processes, forked from the fork server (:func:`kcal.orchestrate.worker_server.worker_context`)."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.ctx = worker_context()
        self.pool = self.new_pool()
        self.futures: dict[Future, object] = {}
        self.queued: deque[Future] = deque()
        self.started: dict[Future, float] = {}

    def new_pool(self) -> pebble.ProcessPool:
        return pebble.ProcessPool(
            self.jobs, initializer=init_worker, initargs=(os.getpid(), dict(os.environ)), context=self.ctx
        )

    @property
    def active(self) -> bool:
        """False once pebble stopped the pool (a worker died while none of its tasks ran)."""
        return self.pool.active

    def has_room(self) -> bool:
        """Whether another task may go in: fewer than one running and ``QUEUED_PER_WORKER`` waiting a worker."""
        return self.pool.active and len(self.futures) < self.jobs * (1 + QUEUED_PER_WORKER)

    def submit(self, fn, args: tuple, task) -> bool:
        """Schedule ``fn(*args)`` as ``task``; False when pebble stopped the pool in the meantime."""
        try:
            fut = self.pool.schedule(fn, args=args)
        except RuntimeError:
            if self.pool.active:
                raise
            return False
        self.futures[fut] = task
        self.queued.append(fut)
        self.start_queued()
        return True

    def start_queued(self) -> None:
        while self.queued and len(self.started) < self.jobs:
            self.started[self.queued.popleft()] = time.monotonic()

    def forget(self, fut: Future):
        """Drop a future that came back; its task."""
        self.started.pop(fut, None)
        if fut in self.queued:
            self.queued.remove(fut)
        return self.futures.pop(fut)

    def collect(self, timeout: float) -> list[tuple[object, Future]]:
        """Wait up to ``timeout`` s for a task to come back; (task, future) of every one that did."""
        if not self.futures:
            return []
        done, _ = wait(list(self.futures), timeout=timeout, return_when=FIRST_COMPLETED)
        back = [(self.forget(fut), fut) for fut in done]
        self.start_queued()
        return back

    def running(self) -> list[tuple[object, float]]:
        """(task, when it started) of the tasks the workers run now."""
        return [(self.futures[fut], t) for fut, t in self.started.items()]

    def restart(self) -> list[tuple[object, Future | None]]:
        """pebble stopped the pool: stop its workers and start a new one; (task, its future when its result came
        back before the stop, else None) of every task the old pool held."""
        stop_pool(self.pool)
        held = []
        for fut in list(self.futures):
            task = self.forget(fut)
            came_back = fut.done() and not isinstance(fut.exception(), BrokenProcessPool)
            held.append((task, fut if came_back else None))
        self.pool = self.new_pool()
        return held

    def close(self) -> None:
        self.pool.close()
        self.pool.join()

    def stop(self) -> None:
        stop_pool(self.pool)
