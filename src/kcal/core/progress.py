"""Progress a user can read in a log file: one line per finished piece of work, on stderr, flushed.

``[crime/nll_mmd] trial 37/100 (#38) done in 41 s (39 s CPU), val_nll -0.71, best -0.78 | protocol 12% ETA 3h10m``

A run of one kind of piece (``kcal sweep``, ``kcal seeds``) extrapolates its own rate. A plan of many kinds
(a reproduction) gives its ETA from a :class:`Forecast`: each piece's predicted CPU seconds, scaled by what
the finished pieces took, laid out on the workers, at the pace the machine gives them now.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Protocol


def duration(seconds: float) -> str:
    """``3h10m``, ``4m05s``, ``12s``."""
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def cpu_note(cpu: float | None) -> str:
    """`` (3.2 s CPU)``, `` (41 s CPU)``: a piece's CPU seconds beside its wall time, where known ("" if not)."""
    if cpu is None:
        return ""
    return f" ({cpu:.1f} s CPU)" if cpu < 10 else f" ({cpu:.0f} s CPU)"


@dataclass
class Measured:
    """Finished pieces: their count, predicted and measured (CPU) seconds."""

    n: int = 0
    predicted: float = 0.0
    seconds: float = 0.0

    def add(self, predicted: float, seconds: float) -> None:
        self.n, self.predicted, self.seconds = self.n + 1, self.predicted + predicted, self.seconds + seconds


@dataclass
class Study:
    """One study's share of a plan: trials of one kind, then the seed chunks its last trial releases."""

    trial_kind: Hashable
    trials: int
    trial_s: float
    chunks: list[tuple[Hashable, float]] = field(default_factory=list)


class Forecast:
    """The wall time left of a plan of pieces run on ``workers`` processes.

    The plan is a list of :class:`Study` in the order a pool takes them. Every piece has a predicted cost in
    CPU seconds (what it takes on a core of its own) and a kind (``("trial", "blog", "nll")``, ``("seeds",
    "blog", "nll@samples=10")``) whose first element is its family. The CPU seconds of finished pieces refine
    the predictions:

    * a family's ratio g = (Σ measured + N0·p̄) / (Σ predicted + N0·p̄) over its finished pieces, pulled
      towards 1 by ``N0`` pieces of their mean prediction p̄: a machine twice as slow shows after a few pieces;
    * a kind's ratio r = (Σ measured + M·g·p̄) / (Σ predicted + M·p̄) over its own pieces, pulled towards its
      family's g by ``M`` pieces: trials of one study vary several-fold with their sampled batch size and
      widths, so a single trial does not set a study's cost.

    A piece left takes its prediction × r of CPU. Its wall time is that times the pace: wall over CPU seconds of
    the pieces that finished lately (weights e^(-age/:attr:`TAU`)), about the load of other jobs over the cores
    on a shared machine (before any piece has finished, the ``pace`` the caller guessed, e.g. from the load). The time left is the end of a greedy schedule of the pieces
    left: each worker, when free, takes a released seed chunk, else the next trial of the first study with trials
    left, else waits for a chunk's release (its study's last trial). So a study's last trials and its long seed
    chunks, which leave other workers idle, count in full instead of divided by the workers.
    """

    N0 = 1.0
    M = 2.0
    OVERDUE = 0.1
    TAU = 180.0

    def __init__(self, workers: int = 1, pace: float = 1.0) -> None:
        self.workers = max(1, int(workers))
        self.first_pace = pace  # before any piece has finished
        self.studies: list[Study] = []
        self.kinds: dict[Hashable, Measured] = {}
        self.families: dict[Hashable, Measured] = {}
        self.paces: list[tuple[float, float, float]] = []  # (when it finished, wall s, CPU s)
        self.done_cpu = 0.0

    def add_study(self, study: Study) -> None:
        self.studies.append(study)

    def finished(
        self,
        kind: Hashable,
        predicted: float,
        seconds: float,
        cpu: float | None = None,
        at: float = 0.0,
        warmup: bool = False,
    ) -> None:
        """A piece of ``kind`` predicted at ``predicted`` CPU seconds took ``seconds``, ``cpu`` of them on a
        CPU (None: all), finishing at ``at`` (the clock of :meth:`seconds_left`'s ``now``): out of the plan,
        into the ratios and the pace. A ``warmup`` piece, the first of its process, also paid for the process's
        imports (Lightning's ~3 s), which no later piece pays: it stays out of the ratios."""
        cpu = seconds if cpu is None else cpu
        self.done_cpu += cpu
        for study in self.studies:
            if study.trial_kind == kind and study.trials > 0:
                study.trials -= 1
                break
            chunk = min(
                (c for c in study.chunks if c[0] == kind), key=lambda c: abs(c[1] - predicted), default=None
            )
            if chunk is not None:
                study.chunks.remove(chunk)
                break
        if not warmup:
            self.kinds.setdefault(kind, Measured()).add(predicted, cpu)
            self.families.setdefault(family(kind), Measured()).add(predicted, cpu)
        if cpu > 0 and seconds > 0:
            self.paces.append((at, seconds, cpu))

    def pace(self, now: float = 0.0) -> float:
        """Wall seconds per CPU second of the pieces that finished lately (before any: the ``pace`` given)."""
        weights = [(math.exp(-max(now - at, 0.0) / self.TAU), wall, cpu) for at, wall, cpu in self.paces]
        cpu = sum(w * c for w, _, c in weights)
        return sum(w * wall for w, wall, _ in weights) / cpu if cpu > 0 else self.first_pace

    def ratio(self, kind: Hashable) -> float:
        """Measured over predicted seconds expected of the pieces of ``kind`` left."""
        fam = self.families.get(family(kind), Measured())
        g = 1.0
        if fam.n:
            mean = fam.predicted / fam.n
            g = (fam.seconds + self.N0 * mean) / (fam.predicted + self.N0 * mean)
        own = self.kinds.get(kind)
        if not own:
            return g
        mean = own.predicted / own.n
        return (own.seconds + self.M * g * mean) / (own.predicted + self.M * mean)

    def work_left(self) -> float:
        """CPU seconds of work left, summed over the pieces (not over the workers)."""
        total = 0.0
        for s in self.studies:
            total += s.trials * s.trial_s * self.ratio(s.trial_kind)
            total += sum(p * self.ratio(k) for k, p in s.chunks)
        return total

    def work_done(self) -> float:
        """CPU seconds of the finished pieces."""
        return self.done_cpu

    def seconds_left(self, running: list[tuple[Hashable, float, float]] = (), now: float = 0.0) -> float:
        """Wall seconds, from ``now``, until the plan's last piece ends (see the class). ``running``: (kind,
        predicted CPU seconds, wall seconds since it started) of the pieces the workers are running now, which
        hold their workers for what they have left of their expected time (at least :attr:`OVERDUE` of it, for
        one that has overrun it)."""
        pace = self.pace(now)
        free = [0.0] * self.workers
        trials = [[s.trials, s.trial_s * self.ratio(s.trial_kind), 0.0] for s in self.studies]
        waiting = [list(s.chunks) for s in self.studies]
        for kind, predicted, elapsed in running[: self.workers]:
            expected = predicted * self.ratio(kind)
            left = max(expected - elapsed / pace, self.OVERDUE * expected)
            free[free.index(0.0)] = left
            for i, s in enumerate(self.studies):
                if s.trial_kind == kind and trials[i][0] > 0:
                    trials[i][0] -= 1
                    trials[i][2] = max(trials[i][2], left)
                    break
                chunk = min(
                    (c for c in waiting[i] if c[0] == kind), key=lambda c: abs(c[1] - predicted), default=None
                )
                if chunk is not None:
                    waiting[i].remove(chunk)
                    break
        heapq.heapify(free)
        released: list[tuple[float, float]] = []  # (release time, seconds)
        for i, study in enumerate(trials):
            if study[0] == 0:
                released += [(study[2], p * self.ratio(k)) for k, p in waiting[i]]
                waiting[i] = []
        end, first = max(free), 0
        while True:
            while first < len(trials) and trials[first][0] == 0:
                first += 1
            if first == len(trials) and not released:
                return end * pace
            now = heapq.heappop(free)
            ready = [j for j, (t, _) in enumerate(released) if t <= now]
            if ready or first == len(trials):
                j = ready[0] if ready else min(range(len(released)), key=lambda j: released[j][0])
                start, cost = released.pop(j)
                finish = max(now, start) + cost
            else:
                study = trials[first]
                study[0] -= 1
                finish = now + study[1]
                study[2] = max(study[2], finish)
                if study[0] == 0:
                    released += [(study[2], p * self.ratio(k)) for k, p in waiting[first]]
                    waiting[first] = []
            end = max(end, finish)
            heapq.heappush(free, finish)


def family(kind: Hashable) -> Hashable:
    return kind[0] if isinstance(kind, tuple) and kind else kind


class Weighing(Protocol):
    """What a piece weighs: ``piece(family, n)`` is the (kind, predicted seconds) of ``n`` trials
    (``family="trial"``) or of a chunk of ``n`` seeds (``family="seeds"``)."""

    def piece(self, family: str, n: int) -> tuple[Hashable, float]: ...


class Progress:
    """Units of work done out of ``total`` (``done`` already before this run).

    :meth:`advance` counts ``n`` pieces: ``n`` units, or with a ``stage`` (:class:`Weighing`, passed or set as
    :attr:`stage` by the caller that runs it) their predicted seconds. With a ``forecast`` the ETA and the
    percentage are the forecast's (measured seconds done over those plus the seconds left; :attr:`running`, set
    by a pool: (kind, predicted seconds, ``time.monotonic()`` at its start) of each piece its workers run now);
    without one the ETA extrapolates the rate of this run's units (counting, for a unit that went on from a snapshot,
    the seconds it trained before: :meth:`advance`'s ``before``).

    100 % is printed only by :meth:`finish`, when the work is over: a plan that its work outgrows (a trial
    queued again, a chunk that weighs more than planned) stays at 99 % until then, never 100 % early."""

    def __init__(self, total: float, name: str, done: float = 0.0, forecast: Forecast | None = None) -> None:
        self.total, self.name, self.done = float(total), name, float(done)
        self.stage: Weighing | None = None
        self.forecast = forecast
        self.running: list[tuple[Hashable, float, float]] = []
        self.finished = False
        self._shown = 0.0
        self._start_done, self._t0, self._before = self.done, time.perf_counter(), 0.0

    def seconds_left(self, now: float | None = None) -> float | None:
        """The ETA in seconds (None when there is nothing to tell: nothing left, or no rate yet). ``now``: the
        clock of :attr:`running`'s start times (default ``time.monotonic()``)."""
        if self.finished:
            return None
        if self.forecast is not None:
            if self.forecast.work_left() <= 0:
                return None
            now = time.monotonic() if now is None else now
            return self.forecast.seconds_left([(k, p, now - t) for k, p, t in self.running], now)
        ran = self.done - self._start_done
        if 0 < ran and self.done < self.total:
            return (time.perf_counter() - self._t0 + self._before) / ran * (self.total - self.done)
        return None

    def status(self) -> str:
        if self.forecast is not None:
            done = self.forecast.work_done() + self._start_done  # before this run: their predicted seconds
            whole = done + self.forecast.work_left()
            # never backwards: a finished piece that took less than predicted shrinks its kind's pieces left
            pct = self._shown = max(self._shown, 100.0 * done / whole if whole else 100.0)
        else:
            pct = 100.0 * self.done / self.total if self.total else 100.0
        if not self.finished:
            pct = min(pct, 99.0)
        left = self.seconds_left()
        return f"{self.name} {pct:.0f}%" + (f" ETA {duration(left)}" if left is not None else "")

    def advance(
        self,
        n: float,
        line: str,
        family: str = "trial",
        seconds: float | None = None,
        stage: Weighing | None = None,
        cpu: float | None = None,
        now: float | None = None,
        warmup: bool | None = None,
        before: float = 0.0,
    ) -> None:
        """``n`` pieces of ``family`` finished (trials that count; the seeds of one chunk) in ``seconds``, ``cpu``
        of them on a CPU, at ``now`` (default ``time.monotonic()``); ``warmup``: the first piece of its process
        (:meth:`Forecast.finished`; default: the first piece this progress counts, for pieces run in this
        process); ``before``: seconds these pieces trained before this run (they went on from a snapshot): without a
        forecast the ETA's rate counts them; a forecast keeps such a piece out of its ratios, as a warm-up piece
        (its CPU seconds are this process's only)."""
        stage = stage or self.stage
        kind, units = (None, float(n)) if stage is None or not n else stage.piece(family, int(n))
        self.done = min(self.total, self.done + units)
        self._before += float(before)
        if self.forecast is not None and kind is not None and seconds is not None:
            now = time.monotonic() if now is None else now
            warmup = self.forecast.done_cpu == 0 and not self.forecast.paces if warmup is None else warmup
            self.forecast.finished(kind, units, seconds, cpu, now, warmup or before > 0)
        print(f"{line} | {self.status()}", file=sys.stderr, flush=True)

    def finish(self, line: str) -> None:
        """The work is over: print ``line`` with 100 %."""
        self.done, self.finished = self.total, True
        print(f"{line} | {self.status()}", file=sys.stderr, flush=True)
