"""What a lost task costs a reproduction's pool: a count of setbacks in a row and the line that names each.

A worker process that dies (SIGKILL, the kernel's OOM killer), a task lost through no fault of its own
(:class:`~kcal.core.errors.TaskLost`: its study storage busy past its timeout) and a failed read or write of the
studies in the parent are setbacks: the task goes back to the schedule (:meth:`kcal.orchestrate.schedule.Schedule.give_back`)
and the others go on. After ``max_deaths * jobs`` setbacks in a row with no task finished in between, the next
ends the run with one line (:class:`~kcal.core.errors.IncompleteError`, exit 2); what finished is kept.
"""

from __future__ import annotations

import signal
from collections import Counter

from pebble import ProcessExpired

from kcal.core.errors import IncompleteError

MAX_DEATHS_PER_WORKER = 10
"""Setbacks in a row per worker (``10 * jobs``) before the run stops: a worker that dies on every task (out of
memory), or workers killed faster than their tasks finish, would otherwise be replaced for ever. Per worker: a
death costs one worker's task while the others go on. A flat 10 stopped the long soak (8 workers, a kill every
20 to 60 s) in its seed reruns: 8 chunks of 7 seeds trained for minutes side by side on 2 cores, and 11 kills
came before the first of them finished."""


def death_cause(exc: ProcessExpired) -> str:
    """``pid 4242, SIGKILL`` (a signal) or ``pid 4242, exit code 1`` of a worker that died."""
    code = exc.exitcode
    if isinstance(code, int) and code < 0:
        try:
            how = signal.Signals(-code).name
        except ValueError:
            how = f"signal {-code}"
    else:
        how = f"exit code {code}"
    return f"pid {exc.pid}, {how}"


class Setbacks:
    """Counts setbacks by kind (``death``, ``lost task``, ``storage``) and in a row; :meth:`finished` resets the
    row when a task finishes."""

    def __init__(self, jobs: int, max_deaths: int = MAX_DEATHS_PER_WORKER):
        self.jobs, self.max_deaths = jobs, max_deaths
        self.by_kind: Counter = Counter()
        self.in_a_row = 0

    def count(self, what: str = "death") -> str:
        """Count one setback of kind ``what``; the note for its line (``death 3, 2 in a row with no task
        finished``). Raises :class:`~kcal.core.errors.IncompleteError` past the limit."""
        self.by_kind[what] += 1
        self.in_a_row += 1
        if self.in_a_row > self.max_deaths * self.jobs:
            raise IncompleteError(
                f"{self.in_a_row} tasks lost in a row ({self.max_deaths} per worker of {self.jobs}) with no task "
                "finished in between: worker processes that died (e.g. out of memory on every task, or killed "
                "faster than their tasks finish) or a study storage that keeps failing; what finished is kept: "
                "rerun the same command to resume (fewer reproduce.jobs if memory is short)"
            )
        row = f", {self.in_a_row} in a row with no task finished" if self.in_a_row > 1 else ""
        return f"{what} {self.by_kind[what]}{row}"

    def finished(self) -> None:
        """A task finished: the row starts again."""
        self.in_a_row = 0
