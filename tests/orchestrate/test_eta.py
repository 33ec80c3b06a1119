"""The ETA a reproduction prints, replayed against a recorded run: ``data/quick_regression_timeline.log`` is
the progress log of ``kcal reproduce task=regression profile=quick`` (crime and blog, ``reproduce.jobs=2``,
on the project's shared 2-core machine), each line stamped with the time it was printed, between the
command's start and its exit (``# start``, ``# end``). Its pieces' measured seconds are fed to the plan's
progress in the order they finished; after each, the forecast (given the pieces then running, which the log
tells by their end and duration) must be within a factor of 1.5 of the time the run actually had left,
from its first minute on. The forecast's prediction comes from ``kcal/resources/timings.csv``, which
another run recorded (see its ``source`` column), so this is not the run fitted to itself."""

import contextlib
import io
import re
from pathlib import Path

from hydra import compose, initialize_config_dir

from kcal.configs import CONFIG_DIR

TIMELINE = Path(__file__).parent / "data" / "quick_regression_timeline.log"
HEAD = r"^(?P<t>[\d.]+) \[(?P<ds>[^/\]]+)/(?P<label>[^\]]+)\] "
DONE = r" done in (?P<s>\d+) s \((?P<cpu>[\d.]+) s CPU\)"
TRIAL = re.compile(HEAD + r"trial (?P<k>\d+)/\d+ \(#\d+\)" + DONE)
SEEDS = re.compile(HEAD + r"seeds? (?P<a>\d+)(-(?P<b>\d+))? of \d+" + DONE)
FACTOR = 1.5
FIRST_MINUTE = 60.0


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
    """(seconds since the start, ETA, seconds the run actually had left) after each finished piece whose
    progress line shows an ETA."""
    from kcal.orchestrate.reproduce import protocol_progress

    start, end, jobs = float(header["start"]), float(header["end"]), int(header["jobs"])
    runnable = plan(header, root)
    stage = {(s.dataset, s.label): s for s in runnable}
    progress = protocol_progress(runnable, jobs)
    out = [(0.0, progress.seconds_left(now=start), end - start)]
    for i, (t, family, dataset, label, n, seconds, cpu) in enumerate(events):
        progress.running = [(*stage[ds, lb].piece(fam, k if fam == "seeds" else 1), t2 - s2)
                            for t2, fam, ds, lb, k, s2, _ in events[i + 1 :] if t2 - s2 < t]  # fmt: skip
        with contextlib.redirect_stderr(io.StringIO()):
            progress.advance(n, f"[{dataset}/{label}]", family, seconds, stage[dataset, label], cpu, now=t)
        eta = progress.seconds_left(now=t)
        if eta is not None:
            out.append((t - start, eta, end - t))
    return out


def test_the_timeline_is_a_whole_recorded_run():
    header, events = timeline(TIMELINE.read_text())
    assert {"start", "end", "jobs", "overrides", "command"} <= set(header)
    trials = [e for e in events if e[1] == "trial" and e[4]]
    assert (
        len(trials) == 60 and sum(e[4] for e in events if e[1] == "seeds") == 12 * 5
    )  # 6 studies, 12 reruns
    assert float(header["start"]) < events[0][0] and events[-1][0] < float(header["end"])


def test_the_eta_of_a_recorded_quick_run_is_within_1_5x_of_the_time_left_from_its_first_minute(tmp_path):
    header, events = timeline(TIMELINE.read_text())
    points = replay(header, events, tmp_path)
    late = [(t, eta, left) for t, eta, left in points if t >= FIRST_MINUTE]
    assert len(late) > 50
    off = [
        (round(t), round(eta), round(left)) for t, eta, left in late if not 1 / FACTOR <= eta / left <= FACTOR
    ]
    assert not off, f"(seconds in, ETA, actually left) beyond {FACTOR}x: {off}"


def test_the_eta_of_the_recorded_run_would_be_far_off_without_its_refinement(tmp_path, monkeypatch):
    """The check above has teeth: the same replay, with the finished pieces not refining the forecast (the
    prediction alone, on a machine busier than the one it was measured on), misses by more than 1.5x."""
    from kcal.core.progress import Forecast

    monkeypatch.setattr(Forecast, "ratio", lambda self, kind: 1.0)
    header, events = timeline(TIMELINE.read_text())
    points = replay(header, events, tmp_path)
    worst = max(max(eta / left, left / eta) for t, eta, left in points if t >= FIRST_MINUTE)
    assert worst > FACTOR
