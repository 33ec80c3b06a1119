"""Lock errors of Optuna storages under N concurrent writers on one machine.

    python -m kcal.bench.storage_locks [--workers 8] [--trials 20] [--repeats 2]

Every round starts N processes at the same moment on a NEW storage file (each creates the storage and
the study itself, as N independently started ``kcal.sweep.search`` workers do) and lets each run ``--trials``
trials of a dummy objective (a few suggestions, a 10 ms sleep). It counts the errors raised by the
storage (creating it, creating the study, or inside a trial), the finished trials, and the wall time.
Backends: SQLite with Optuna's defaults, SQLite as ``kcal.sweep.search`` opens it (WAL journal, 60 s busy
timeout, heartbeats), and Optuna's JournalStorage on a JournalFileBackend.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sqlite3
import tempfile
import time
import traceback
from pathlib import Path

import optuna


def make_storage(backend: str, path: Path):
    if backend == "sqlite-default":
        return optuna.storages.RDBStorage(f"sqlite:///{path}.db")
    if backend == "sqlite-kcal":
        from omegaconf import OmegaConf

        from kcal.sweep.studies import open_storage

        cfg = OmegaConf.create({"sweep": {"storage": f"sqlite:///{path}.db", "heartbeat_interval": 60,
                                          "grace_period": None, "max_retry": 2}})  # fmt: skip
        return open_storage(cfg)
    if backend == "journal":
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(f"{path}.journal"))
    raise ValueError(backend)


def objective(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", -1, 1)
    y = trial.suggest_int("y", 0, 10)
    time.sleep(0.01)
    return x * x + y


def worker(backend: str, path: str, n_trials: int, barrier, results) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    errors: list[str] = []
    barrier.wait()
    study = None
    for _ in range(3):  # a worker whose storage/study creation fails tries again
        try:
            storage = make_storage(backend, Path(path))
            study = optuna.create_study(study_name="s", storage=storage, load_if_exists=True,
                                        sampler=optuna.samplers.TPESampler(n_startup_trials=5))  # fmt: skip
            break
        except Exception as exc:  # noqa: BLE001 - counting every storage error is the point
            errors.append(f"create: {type(exc).__name__}: {str(exc).splitlines()[0][:90]}")
    done = 0
    if study is not None:
        for _ in range(n_trials):
            try:
                study.optimize(objective, n_trials=1)
                done += 1
            except Exception as exc:  # noqa: BLE001
                errors.append(f"trial: {type(exc).__name__}: {str(exc).splitlines()[0][:90]}")
    results.put((done, errors))


def one_round(backend: str, n_workers: int, n_trials: int) -> tuple[int, list[str], float, int]:
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "study")
        barrier, results = ctx.Barrier(n_workers), ctx.Queue()
        procs = [ctx.Process(target=worker, args=(backend, path, n_trials, barrier, results))
                 for _ in range(n_workers)]  # fmt: skip
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        out = [results.get(timeout=600) for _ in procs]
        for p in procs:
            p.join()
        wall = time.perf_counter() - t0
        crashed = sum(p.exitcode != 0 for p in procs)
        try:
            stored = len(optuna.load_study(study_name="s", storage=make_storage(backend, Path(path))).trials)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            stored = -1
    done = sum(o[0] for o in out)
    errors = [e for o in out for e in o[1]]
    return done, errors, wall, stored + 1000 * crashed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--backends", nargs="+", default=["sqlite-default", "sqlite-kcal", "journal"])
    args = ap.parse_args()
    print(f"{args.workers} workers x {args.trials} trials, {args.repeats} rounds per backend, "
          f"sqlite {sqlite3.sqlite_version}, optuna {optuna.__version__}")  # fmt: skip
    for backend in args.backends:
        total_err, kinds, walls, ok = 0, {}, [], 0
        for _ in range(args.repeats):
            done, errors, wall, stored = one_round(backend, args.workers, args.trials)
            total_err += len(errors)
            walls.append(wall)
            ok += done
            for e in errors:
                kinds[e] = kinds.get(e, 0) + 1
            print(f"  {backend}: {done}/{args.workers * args.trials} trials ok, {len(errors)} errors, "
                  f"{stored} trials stored, {wall:.1f} s", flush=True)  # fmt: skip
        print(f"{backend}: {total_err} errors in {args.repeats} rounds; trials ok {ok}/"
              f"{args.repeats * args.workers * args.trials}; wall {min(walls):.1f}-{max(walls):.1f} s")  # fmt: skip
        for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]):
            print(f"    {v} x {k}")


if __name__ == "__main__":
    main()
