"""Sweep throughput: finished trials per hour of a real reproduction on J worker processes.

    kcal sweep-throughput                                   # crime NLL + MMD, adult XE + MMD
    kcal sweep-throughput --pairs crime:nll_mmd --trials 6 --jobs 2 --max-epochs 25
    kcal sweep-throughput --src ../kcal-before/src --src src   # before and after, one run

For each ``dataset:objective`` pair and each source tree, it starts ``kcal reproduce`` in a new
root exactly as a user would (the paper's search space and TPE sampler, ``profile=full`` with the epochs
capped at ``--max-epochs``, ``reproduce.jobs=J``), stops it once the study holds ``--trials`` finished
trials, and reads the trials' start and end times from the study's storage: throughput is
``trials / (last end - first start)`` in trials per hour, and ``wall`` also counts the processes'
start-up (interpreter, imports, data). The sampler is seeded, so both source trees train the same first
configurations. ``--src`` runs the command with that tree on ``PYTHONPATH`` (default: the kcal this
interpreter imports); comparing two trees in one invocation measures them under the same load.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import optuna

from kcal.core import layout
from kcal.core.errors import ConfigError, check_choices, exits_on_user_error
from kcal.data import get_spec

DEFAULT_PAIRS = ("crime:nll_mmd", "adult:xe_mmd")


@dataclass
class Throughput:
    pair: str
    src: str
    trials: int
    span_s: float  # first trial start -> last trial end (the storage's clock)
    wall_s: float  # command start -> last trial end

    @property
    def per_hour(self) -> float:
        return 3600.0 * self.trials / self.span_s


def command(dataset: str, objective: str, trials: int, jobs: int, max_epochs: int, root: Path) -> list[str]:
    task = get_spec(dataset).task
    return [sys.executable, "-m", "kcal.orchestrate.reproduce", f"task={task}", "profile=full",
            f"reproduce.datasets=[{dataset}]", f"reproduce.objectives=[{objective}]", f"sweep.n_trials={trials}",
            f"reproduce.jobs={jobs}", f"trainer.max_epochs={max_epochs}", "reproduce.sample_size_datasets=[]",
            "reproduce.tables=false", f"root={root}"]  # fmt: skip


def finished(root: Path) -> list[optuna.trial.FrozenTrial]:
    db = layout.storage_file(root)
    if not db.is_file():
        return []
    storage = f"sqlite:///{db}"
    try:
        studies = optuna.get_all_study_summaries(storage, include_best_trial=False)
        trials = [t for s in studies for t in optuna.load_study(study_name=s.study_name, storage=storage)
                  .get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))]  # fmt: skip
    except Exception:  # the schema is being created by the run: look again at the next poll
        return []
    return sorted(trials, key=lambda t: t.datetime_complete)


def measure(pair: str, trials: int, jobs: int, max_epochs: int, src: str | None = None, poll_s: float = 2.0,
            timeout_s: float = 3600.0) -> Throughput:  # fmt: skip
    """Run the reproduction of ``pair`` until its study holds ``trials`` finished trials; its throughput."""
    dataset, objective = pair.split(":")
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(src).resolve()), env.get("PYTHONPATH")) if p)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="kcal-throughput-") as tmp:
        root = Path(tmp) / "root"
        t0 = time.time()
        proc = subprocess.Popen(command(dataset, objective, trials, jobs, max_epochs, root), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
        try:
            done = []
            while len(done) < trials:
                if proc.poll() is not None and len(finished(root)) < trials:
                    err = proc.stderr.read().decode(errors="replace").strip().splitlines()
                    raise RuntimeError(f"{pair}: the reproduction exited {proc.returncode} before {trials} "
                                       f"trials: {err[-1] if err else 'no output'}")  # fmt: skip
                if time.time() - t0 > timeout_s:
                    raise RuntimeError(f"{pair}: fewer than {trials} trials after {timeout_s:.0f} s")
                time.sleep(poll_s)
                done = finished(root)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
        done = done[:trials]
        first = min(t.datetime_start for t in done).timestamp()
        last = max(t.datetime_complete for t in done).timestamp()
        return Throughput(pair, src or "installed", trials, last - first, last - t0)


@exits_on_user_error
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kcal sweep-throughput", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", nargs="+", default=list(DEFAULT_PAIRS), help="dataset:objective")
    ap.add_argument("--trials", type=int, default=8, help="finished trials to time per pair (8)")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (2)")
    ap.add_argument("--max-epochs", type=int, default=25, help="epoch cap of every trial (25)")
    ap.add_argument("--src", action="append", default=None, help="source tree to run (repeatable)")
    args = ap.parse_args(argv)
    for pair in args.pairs:
        dataset, sep, objective = pair.partition(":")
        if not sep:
            raise ConfigError(f"--pairs takes DATASET:OBJECTIVE, e.g. crime:nll_mmd; got {pair!r}")
        get_spec(dataset)
        check_choices("objective", [objective])
    print("| pair | source | trials | trials/hour | span (s) | wall (s) |\n|---|---|---:|---:|---:|---:|")
    for pair in args.pairs:
        for src in args.src or [None]:
            r = measure(pair, args.trials, args.jobs, args.max_epochs, src)
            print(f"| {r.pair} | {r.src} | {r.trials} | {r.per_hour:.0f} | {r.span_s:.1f} | {r.wall_s:.1f} |",
                  flush=True)  # fmt: skip
    print(f"jobs {args.jobs}, epochs capped at {args.max_epochs}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
