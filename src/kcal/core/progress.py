"""Progress a user can read in a log file: one line per finished piece of work, on stderr, flushed.

``[crime/nll_mmd] trial 37/100 (#38) done in 41 s, val_nll -0.71, best -0.78 | protocol 12% ETA 3h10m``
"""

from __future__ import annotations

import sys
import time


def duration(seconds: float) -> str:
    """``3h10m``, ``4m05s``, ``12s``."""
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Progress:
    """Units of work done out of ``total`` (``done`` already before this run); the ETA extrapolates
    the rate of this run's units. ``unit``: what one unit passed to :meth:`advance` weighs (a stage's
    estimated cost per trial, set by the caller that runs it; 1 by default).

    100 % is printed only by :meth:`finish`, when the work is over: a plan that its work outgrows (a trial
    queued again, a chunk that weighs more than planned) stays at 99 % until then, never 100 % early."""

    def __init__(self, total: float, name: str, done: float = 0.0) -> None:
        self.total, self.name, self.done = float(total), name, float(done)
        self.unit = 1.0
        self.finished = False
        self._start_done, self._t0 = self.done, time.perf_counter()

    def add(self, units: float) -> None:
        """More work than planned (e.g. a re-queued trial)."""
        self.total += units * self.unit

    def status(self) -> str:
        pct = 100.0 * self.done / self.total if self.total else 100.0
        if not self.finished:
            pct = min(pct, 99.0)
        ran = self.done - self._start_done
        eta = ""
        if 0 < ran and self.done < self.total:
            eta = f" ETA {duration((time.perf_counter() - self._t0) / ran * (self.total - self.done))}"
        return f"{self.name} {pct:.0f}%{eta}"

    def advance(self, units: float, line: str) -> None:
        self.done = min(self.total, self.done + units * self.unit)
        print(f"{line} | {self.status()}", file=sys.stderr, flush=True)

    def finish(self, line: str) -> None:
        """The work is over: print ``line`` with 100 %."""
        self.done, self.finished = self.total, True
        print(f"{line} | {self.status()}", file=sys.stderr, flush=True)
