"""A fault soak of a whole reproduction: random worker deaths and moves to other roots, then a count of what
survived.

    python -m kcal.orchestrate.soak --dataset heart-disease --objective xe_mmd --workers 8 \\
        --kill-every 20 60 --moves 2 --dir /tmp/soak

runs ``kcal reproduce`` for one (dataset, objective) on ``--workers`` pool processes (the profile's trials, then
its seeds) and, while it runs:

* every ``--kill-every LO HI`` seconds (uniform, from ``--seed``; at most ``--max-kills`` times; a kill due
  while the run has no worker yet waits for its first) SIGKILLs one of the pool's worker processes at random
  (:func:`kcal.orchestrate.workers.run_workers` puts a new worker in its place and the others go on: a dead
  trial is trained again under its own number, a dead chunk's unfinished seeds are queued again; a worker
  killed while no task of the pool runs makes pebble stop the pool, and a new pool takes its place);
* ``--moves`` times, the root is moved as ``state/README.md`` tells a user to move one between machines: ``kcal
  state export`` while it runs, SIGKILL of the whole run (its process group), ``kcal state import`` into a new
  root, and the same command resumed there. Move ``i`` of ``m`` happens once ``i / m`` of the profile's
  trials (counted, :func:`kcal.sweep.studies.counted`) are in the study, except the last, which happens once
  the sweep is done, while its seeds train; a run that ends first has fewer moves (reported).

At the end (:func:`check`): the last root's study holds exactly ``sweep.n_trials`` counted trials, no trial
number is there twice, and every seed finished once; then the same command runs once more, uninterrupted, into
a fresh root, and the soaked root must equal it: the same ``results.csv`` byte for byte and the same trials
(number, state, parameters, value) in its study (:func:`equality_problems`). Exit 0 when all holds, 1
otherwise; one line of counts either way: the workers killed, the tasks whose worker died and were taken over by
a new worker ("replaced in place"; a worker killed between tasks is replaced without a line), and the pools
started again. Other ``key=value`` arguments are passed to every ``kcal`` command (e.g. ``profile=smoke``).
Linux only (reads ``/proc``).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from kcal.core import layout
from kcal.data import get_spec
from kcal.orchestrate.worker_server import process_table, server_pids
from kcal.sweep.studies import counted


@dataclass
class Soak:
    """What happened during a soak, and where."""

    roots: list[Path] = field(default_factory=list)
    kills: int = 0
    moves: int = 0
    replaced: int = 0  # tasks whose worker died, taken over by a new worker (its lines in the log)
    restarts: int = 0  # pools pebble stopped and started again
    exit: int = 0  # the last run's exit status


def kcal_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "kcal", *args]


def pool_workers(parent: int) -> list[int]:
    """The pool worker processes of ``parent``: the children of its multiprocessing fork server (or its spawned
    multiprocessing children), not its resource tracker nor the server itself."""
    procs = process_table()
    children = [pid for pid, (ppid, cmd) in procs.items()
                if ppid == parent and "multiprocessing" in cmd and "resource_tracker" not in cmd]  # fmt: skip
    servers = server_pids(parent, procs)
    forked = [pid for pid, (ppid, _) in procs.items() if ppid in servers]
    return sorted([pid for pid in children if pid not in servers] + forked)


def study_of(root: Path, dataset: str, objective: str) -> optuna.Study | None:
    url = layout.sqlite_url(root)
    if not layout.storage_file(root).is_file():
        return None
    for name in optuna.get_all_study_names(url):
        d, o, _, selection = layout.parse_study_name(name)
        if (d, o, selection) == (dataset, objective, layout.PAPER_SELECTION):
            return optuna.load_study(study_name=name, storage=url)
    return None


def trials_done(root: Path, dataset: str, objective: str) -> int:
    """Counted trials of the root's study (0 before it exists, or while its SQLite file is busy)."""
    try:
        study = study_of(root, dataset, objective)
    except Exception:  # noqa: BLE001 - a locked or half-written SQLite file: look again later
        return 0
    return counted(study)[0] if study is not None else 0


def reproduce_command(args: argparse.Namespace, overrides: list[str]) -> list[str]:
    """The soaked ``kcal reproduce`` command, without its root."""
    task = get_spec(args.dataset).task
    return ["reproduce", f"task={task}", f"reproduce.datasets=[{args.dataset}]",
            f"reproduce.objectives=[{args.objective}]", f"reproduce.jobs={args.workers}", "reproduce.tables=false",
            *overrides]  # fmt: skip


def soak(args: argparse.Namespace, overrides: list[str]) -> Soak:
    rng = random.Random(args.seed)
    dataset, objective, n_trials = args.dataset, args.objective, args.trials
    command = reproduce_command(args, overrides)
    out = Soak(roots=[args.dir / "root0"])
    log = (args.dir / "soak.log").open("a")
    deadline = time.monotonic() + args.timeout

    def start(root: Path) -> subprocess.Popen:
        print(f"soak: kcal {' '.join(command)} root={root}", file=log, flush=True)
        return subprocess.Popen(kcal_command([*command, f"root={root}"]), stdout=log, stderr=log,
                                start_new_session=True)  # fmt: skip

    proc = start(out.roots[0])
    next_kill = time.monotonic() + rng.uniform(*args.kill_every)
    next_look = 0.0
    while proc.poll() is None:
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise TimeoutError(f"soak: no end after {args.timeout} s; see {args.dir / 'soak.log'}")
        time.sleep(0.5)
        root = out.roots[-1]
        if time.monotonic() >= next_kill and out.kills < args.max_kills:
            workers = pool_workers(proc.pid)
            if workers:  # none yet (a run still starting): the kill is due, look again in half a second
                victim = rng.choice(workers)
                try:
                    os.kill(victim, signal.SIGKILL)
                    out.kills += 1
                    print(f"soak: SIGKILL worker {victim} ({out.kills})", file=log, flush=True)
                except ProcessLookupError:
                    pass
                next_kill = time.monotonic() + rng.uniform(*args.kill_every)
        if out.moves < args.moves and time.monotonic() >= next_look:
            next_look = time.monotonic() + 1.0
            done = trials_done(root, dataset, objective)
            if out.moves + 1 < args.moves:
                due = done >= n_trials * (out.moves + 1) / args.moves
            else:  # the last move: once the sweep is done, while its seeds train
                due = done >= n_trials
            if due:
                state = args.dir / f"state{out.moves}"
                subprocess.run(kcal_command(["state", "export", str(root), str(state)]), check=True,
                               stdout=log, stderr=log)  # fmt: skip
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                out.moves += 1
                new_root = args.dir / f"root{out.moves}"
                subprocess.run(kcal_command(["state", "import", str(state), str(new_root)]), check=True,
                               stdout=log, stderr=log)  # fmt: skip
                print(f"soak: moved {root} -> {new_root} at {done} counted trials", file=log, flush=True)
                out.roots.append(new_root)
                proc = start(new_root)
    log.close()
    out.exit = proc.returncode
    text = (args.dir / "soak.log").read_text()
    out.replaced, out.restarts = text.count("a new worker took its place"), text.count("pool started again")
    return out


def check(args: argparse.Namespace, overrides: list[str], result: Soak) -> list[str]:
    """What the soak lost, duplicated or changed (empty: nothing): :func:`count_problems`, then
    :func:`equality_problems` against the same command run uninterrupted."""
    root, dataset, objective = result.roots[-1], args.dataset, args.objective
    problems = count_problems(root, dataset, objective, args.trials, args.seeds)
    return problems + equality_problems(args, overrides, root)


def count_problems(root: Path, dataset: str, objective: str, n_trials: int, n_seeds: int) -> list[str]:
    """What a finished root lacks or holds twice: its study must hold exactly ``n_trials`` counted trials,
    none running, no trial number twice and no retried trial complete; seeds ``0..n_seeds-1`` finished."""
    study = study_of(root, dataset, objective)
    if study is None:
        return [f"no study of {dataset}/{objective} in {root}"]
    problems = []
    trials = study.get_trials(deepcopy=False)
    numbers = [t.number for t in trials]
    if len(numbers) != len(set(numbers)):
        problems.append(f"trial numbers repeat: {sorted(numbers)}")
    finished, running = counted(study)
    if finished != n_trials or running:
        problems.append(f"{finished} counted trials and {running} running, not {n_trials} and 0")
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    if any(t.number in retried for t in trials if t.state == TrialState.COMPLETE):
        problems.append("a retried trial counts beside its retry")
    seeds = finished_seeds(root, dataset, objective)
    if sorted(seeds) != list(range(n_seeds)):
        problems.append(f"finished seeds {sorted(seeds)}, not 0..{n_seeds - 1}")
    return problems


def finished_seeds(root: Path, dataset: str, objective: str) -> list[int]:
    return [
        layout.seed_number(p.parent.name)
        for p in layout.finished_seed_files(layout.label_dir(root, dataset, objective))
    ]


def study_trials(root: Path, dataset: str, objective: str) -> list[tuple]:
    """(number, state, parameters, value) of every trial of the root's study."""
    study = study_of(root, dataset, objective)
    return (
        [(t.number, t.state.name, t.params, t.value) for t in study.get_trials(deepcopy=False)]
        if study
        else []
    )


def equality_problems(args: argparse.Namespace, overrides: list[str], root: Path) -> list[str]:
    """How the soaked ``root`` differs from the same command run uninterrupted into ``<dir>/uninterrupted``: its
    ``results.csv`` (byte for byte) and its study's trials."""
    dataset, objective = args.dataset, args.objective
    fresh = args.dir / "uninterrupted"
    with (args.dir / "soak.log").open("a") as log:
        print(f"soak: the same command uninterrupted into {fresh}", file=log, flush=True)
        done = subprocess.run(kcal_command([*reproduce_command(args, overrides), f"root={fresh}"]), stdout=log,
                              stderr=log, check=False)  # fmt: skip
    if done.returncode != 0:
        return [f"the uninterrupted run exited {done.returncode}; see {args.dir / 'soak.log'}"]
    return differences(root, fresh, dataset, objective)


def differences(root: Path, fresh: Path, dataset: str, objective: str) -> list[str]:
    """How ``root`` differs from ``fresh`` (the uninterrupted run's root): ``results.csv`` byte for byte, then the
    trials of their ``dataset``/``objective`` study (empty: not at all)."""
    problems = []
    if layout.results_file(root).read_bytes() != layout.results_file(fresh).read_bytes():
        problems.append("results.csv differs from the uninterrupted run's")
    soaked, again = study_trials(root, dataset, objective), study_trials(fresh, dataset, objective)
    if soaked != again:
        first = next(
            (a[0] for a, b in zip(soaked, again, strict=False) if a != b), min(len(soaked), len(again))
        )
        problems.append(f"the study's trials differ from the uninterrupted run's from trial #{first} on")
    return problems


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kcal.orchestrate.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="heart-disease")
    p.add_argument("--objective", default="xe_mmd")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--trials", type=int, default=100, help="the profile's sweep.n_trials")
    p.add_argument("--seeds", type=int, default=50, help="the profile's seeds_run.n_seeds")
    p.add_argument("--kill-every", type=float, nargs=2, default=(20.0, 60.0), metavar=("LO", "HI"))
    p.add_argument("--max-kills", type=int, default=10**9, help="stop killing after this many kills")
    p.add_argument("--moves", type=int, default=2, help="exports and imports into a new root during the run")
    p.add_argument("--seed", type=int, default=0, help="the kill schedule's random seed")
    p.add_argument("--timeout", type=float, default=4 * 3600.0, help="give up after this many seconds")
    p.add_argument("--dir", type=Path, required=True, help="a new folder for the roots, states and log")
    return p


def main(argv: list[str] | None = None) -> None:
    args, overrides = parser().parse_known_args(argv)
    bad = [o for o in overrides if "=" not in o]
    if bad:
        parser().error(f"unknown arguments {bad}: options are --name, config overrides key=value")
    overrides += [f"sweep.n_trials={args.trials}", f"seeds_run.n_seeds={args.seeds}"]
    args.dir.mkdir(parents=True, exist_ok=False)
    t0 = time.monotonic()
    result = soak(args, overrides)
    if result.exit != 0:
        last = [ln for ln in (args.dir / "soak.log").read_text().splitlines() if ln.startswith("error")]
        print(f"soak: {args.dataset}/{args.objective} on {args.workers} workers: the run exited {result.exit} after "
              f"{time.monotonic() - t0:.0f} s, {result.kills} workers killed, {result.replaced} replaced in place, "
              f"{result.restarts} pool restarts, {result.moves} moves ({last[-1] if last else 'see ' + str(args.dir / 'soak.log')})")  # fmt: skip
        sys.exit(1)
    problems = check(args, overrides, result)
    print(f"soak: {args.dataset}/{args.objective} on {args.workers} workers: {args.trials} trials and {args.seeds} "
          f"seeds in {time.monotonic() - t0:.0f} s; {result.kills} workers killed, {result.replaced} replaced in place, "
          f"{result.restarts} pool restarts, {result.moves} moves ({' -> '.join(p.name for p in result.roots)}); "
          + ("nothing lost or duplicated, results.csv and trials equal to an uninterrupted run's" if not problems else "; ".join(problems)))  # fmt: skip
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
