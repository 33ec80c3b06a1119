"""The ETA a reproduction prints, replayed against a recorded run.

``data/quick_regression_timeline.log`` is the progress log of ``kcal reproduce task=regression profile=quick``
(crime and blog, ``reproduce.jobs=2``, on the project's shared 2-core machine), each line stamped with the
time it was printed, between the command's start and its exit (``# start``, ``# end``). Its pieces' wall and
CPU seconds are fed to the plan's progress in the order they finished; after each, the forecast (given the
pieces then running, which the log tells by their end and duration) is compared with the time the run had
left.

Other jobs on the machine ended during that run (load average 19 at its start, 4 at its end), so its pieces
went about twice as fast at the end, per CPU second, as at the start: no forecast made at the start could
know that. So the time left it is compared with is the one at a steady pace: the rest of the run with each
moment's pace (wall over CPU seconds of the pieces running then, which the log gives) replaced by the pace the
forecast saw when it spoke. What the run itself printed (with the prediction of two earlier runs) against its
real time left is in the closing note of issue 44 and the README.

``data/quick_regression_quiet_timeline.log`` is the same command on a fresh clone with the machine quiet (load
average under 2, nothing else running; times in whole seconds since the start): what it printed was 0.91, 0.98
and 0.97 of the time it had left at 1, 5 and 10 min.

``kcal/resources/timings.csv`` holds this run's own mean CPU seconds per kind of piece, so the replay with
them checks the forecast's machinery (the schedule, the pieces running, the pace), not the prediction; the
replays with the prediction off by 2x check that the finished pieces correct it.
"""

import contextlib
import io
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from kcal.configs import CONFIG_DIR

TIMELINE = Path(__file__).parent / "data" / "quick_regression_timeline.log"
#: the same command on a fresh clone with the machine quiet (load < 2): there the time left at a steady pace is
#: the time it actually had left
QUIET_TIMELINE = Path(__file__).parent / "data" / "quick_regression_quiet_timeline.log"
TIMELINES = pytest.mark.parametrize("recorded", [TIMELINE, QUIET_TIMELINE], ids=["busy", "quiet"])
HEAD = r"^(?P<t>[\d.]+) \[(?P<ds>[^/\]]+)/(?P<label>[^\]]+)\] "
DONE = r" done in (?P<s>\d+) s \((?P<cpu>[\d.]+) s CPU\)"
TRIAL = re.compile(HEAD + r"trial (?P<k>\d+)/\d+ \(#\d+\)" + DONE)
SEEDS = re.compile(HEAD + r"seeds? (?P<a>\d+)(-(?P<b>\d+))? of \d+" + DONE)
FACTOR = 1.5
FIRST_MINUTE = 60.0
#: in the run's last minutes one or two trials are what is left, and one blog trial takes 0.5 to 3 times another
#: (its sampled batch size and widths): there an ETA within this many seconds of the time left counts as right
LAST_PIECES_S = 90.0


def timeline(text: str) -> tuple[dict, list[tuple]]:
    """The ``# key value`` header, and (time, family, dataset, label, n, seconds, CPU seconds) per finished piece:
    a trial counts (n = 1) when its line moves the study's count, a chunk has n seeds."""
    header, events, counted = {}, [], {}
    for line in text.splitlines():
        if line.startswith("# "):
            key, _, value = line[2:].partition(" ")
            header[key] = value
        elif m := TRIAL.match(line):
            study, k = (m["ds"], m["label"]), int(m["k"])
            counts = int(k > counted.get(study, 0))
            events.append(
                (float(m["t"]), "trial", m["ds"], m["label"], counts, float(m["s"]), float(m["cpu"]))
            )
            counted[study] = max(counted.get(study, 0), k)
        elif m := SEEDS.match(line):
            n = int(m["b"]) - int(m["a"]) + 1 if m["b"] else 1
            events.append((float(m["t"]), "seeds", m["ds"], m["label"], n, float(m["s"]), float(m["cpu"])))
    return header, events


def plan(header: dict, root: Path):
    """The stages the recorded command ran (:func:`kcal.orchestrate.reproduce.stages`), in a fresh root."""
    from kcal.core import layout
    from kcal.orchestrate.reproduce import stages
    from kcal.orchestrate.workers import Stage

    own = header["overrides"].split() + [f"root={root}"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("reproduce", overrides=own)
        user = [o for o in own if not o.startswith(("task=", "reproduce."))]
        return [Stage(ds, label, compose("seeds", overrides=[*user, f"dataset={ds}", *extra]), sweeps=not layout.is_variant(label))
                for ds, label, extra in stages(cfg)]  # fmt: skip


def replay(header: dict, events: list[tuple], root: Path) -> list[tuple[float, float, float]]:
    """(seconds since the start, ETA, seconds left at a steady pace) after each finished piece whose progress
    line shows an ETA, from the first minute on, while more than half a minute is left (an ETA of seconds,
    when the last results are being written, is not read as a forecast)."""
    from kcal.orchestrate.reproduce import protocol_progress

    start, end, jobs = float(header["start"]), float(header["end"]), int(header["jobs"])
    runnable = plan(header, root)
    stage = {(s.dataset, s.label): s for s in runnable}
    progress = protocol_progress(runnable, jobs)
    # each worker's first piece paid for its imports: the first ``jobs`` pieces to start
    warmup = set(sorted(range(len(events)), key=lambda i: events[i][0] - events[i][5])[:jobs])
    out = []
    for i, (t, family, dataset, label, n, seconds, cpu) in enumerate(events):
        progress.running = [(*stage[ds, lb].piece(fam, k if fam == "seeds" else 1), t2 - s2)
                            for t2, fam, ds, lb, k, s2, _ in events[i + 1 :] if t2 - s2 < t]  # fmt: skip
        with contextlib.redirect_stderr(io.StringIO()):
            progress.advance(
                n, f"[{dataset}/{label}]", family, seconds, stage[dataset, label], cpu, t, i in warmup
            )
        eta = progress.seconds_left(now=t)
        if eta is not None and t - start >= FIRST_MINUTE and end - t > 30:
            out.append((t - start, eta, steady_left(events, t, end, progress.forecast.pace(t))))
    return out


def steady_left(events: list[tuple], t: float, end: float, pace: float) -> float:
    """The seconds from ``t`` to ``end``, each stretched by ``pace`` over the pace the machine gave the pieces
    running at that moment (their wall over CPU seconds; the last known pace where none ran)."""
    spans = [(t2 - s2, t2, s2 / c2) for t2, _, _, _, _, s2, c2 in events if c2 > 0]
    total, now, last = 0.0, t, pace
    while now < end:
        step = min(2.0, end - now)
        running = [p for a, b, p in spans if a <= now + step / 2 < b]
        last = sum(running) / len(running) if running else last
        total += step * pace / last
        now += step
    return total


def beyond(
    points: list[tuple[float, float, float]], since: float = FIRST_MINUTE
) -> list[tuple[int, int, int]]:
    """The points from ``since`` seconds on whose ETA is neither within :data:`FACTOR` of the time left nor
    within :data:`LAST_PIECES_S` of it."""
    return [(round(t), round(eta), round(left)) for t, eta, left in points
            if t >= since and not 1 / FACTOR <= eta / left <= FACTOR and abs(eta - left) > LAST_PIECES_S]  # fmt: skip


@TIMELINES
def test_the_timeline_is_a_whole_recorded_run(recorded):
    header, events = timeline(recorded.read_text())
    assert {"start", "end", "jobs", "overrides", "command"} <= set(header)
    trials = [e for e in events if e[1] == "trial" and e[4]]
    assert (
        len(trials) == 60 and sum(e[4] for e in events if e[1] == "seeds") == 12 * 5
    )  # 6 studies, 12 reruns
    assert float(header["start"]) < events[0][0] and events[-1][0] < float(header["end"])
    assert all(0 < cpu <= seconds + 1 for *_, seconds, cpu in events)  # CPU seconds: at most the wall time


@TIMELINES
def test_at_a_steady_pace_the_eta_is_within_1_5x_of_the_time_left_from_the_first_minute(tmp_path, recorded):
    header, events = timeline(recorded.read_text())
    points = replay(header, events, tmp_path)
    assert len(points) >= 40  # the quiet run's 84 pieces: 42 from its first minute to its last half-minute
    assert not beyond(points), f"(seconds in, ETA, left at a steady pace) beyond {FACTOR}x: {beyond(points)}"


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_a_prediction_off_by_2x_is_corrected_by_the_finished_pieces(tmp_path, monkeypatch, factor):
    """Every predicted cost halved or doubled (a machine twice as fast or slow as the measured one): the
    pieces that finish in the first two minutes correct it (crime's trials vary ten-fold with their sampled
    configuration, so its first few are a rough sample), and the check above holds from then on."""
    from kcal.orchestrate import costs

    measured = costs.recorded("quick")
    scaled = {k: costs.Measured(m.trial_s and m.trial_s * factor, m.chunk_s and m.chunk_s * factor, m.chunk_seeds)
              for k, m in measured.items()}  # fmt: skip
    monkeypatch.setattr(costs, "recorded", lambda profile: scaled)
    header, events = timeline(TIMELINE.read_text())
    points = replay(header, events, tmp_path)
    off = beyond(points, since=2 * FIRST_MINUTE)
    assert not off, f"(seconds in, ETA, left at a steady pace) beyond {FACTOR}x: {off}"


@pytest.mark.parametrize("without", ["refinement", "pace"])
def test_without_the_refinement_or_the_pace_the_eta_misses(tmp_path, monkeypatch, without):
    """The checks above have teeth: with a prediction off by 2x and the finished pieces not refining it, or
    with the machine's pace taken as 1 (a busy machine's wall seconds counted as CPU seconds), the same replay
    misses by more than 1.5x."""
    from kcal.core.progress import Forecast
    from kcal.orchestrate import costs

    if without == "refinement":
        measured = costs.recorded("quick")
        halved = {k: costs.Measured(m.trial_s and m.trial_s / 2, m.chunk_s and m.chunk_s / 2, m.chunk_seeds)
                  for k, m in measured.items()}  # fmt: skip
        monkeypatch.setattr(costs, "recorded", lambda profile: halved)
        monkeypatch.setattr(Forecast, "ratio", lambda self, kind: 1.0)
    else:
        monkeypatch.setattr(Forecast, "pace", lambda self, now=0.0: 1.0)
    header, events = timeline(TIMELINE.read_text())
    points = replay(header, events, tmp_path)
    if without == "pace":  # against the real time left: a pace of 1 is what a busy machine breaks
        start = float(header["start"])
        end = float(header["end"])
        points = [(t, eta, end - start - t) for t, eta, _ in points]
    assert len(beyond(points)) > len(points) / 2
