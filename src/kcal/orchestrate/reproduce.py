"""The paper's experiments end to end: ``kcal reproduce task=regression profile=quick``.

For every dataset of the task (skipping those whose files are not available, see :func:`check_complete`
for when that is an error: exit status 2 after the others have run) and every
objective: a TPE sweep (:mod:`kcal.sweep.search`), then the best configuration over seeds
(:mod:`kcal.reruns.seeds`); for regression also NLL+MMD with other numbers of forecast samples (Table 6).
With ``reproduce.jobs`` > 1 (default: the CPU count) all of it runs on one pool of worker processes
(:mod:`kcal.orchestrate.workers`); ``reproduce.jobs=1`` runs the stages one after the other in this process.
Then all ``summary.csv`` files are collected into ``<root>/results.csv`` and the tables are written
to ``<root>/tables/`` (:mod:`kcal.publish.tables`). Each stage resumes, so an interrupted command continues.
"""

from __future__ import annotations

from kcal.orchestrate.worker_server import start_worker_server

# the workers' imports (seconds) beside this program's own and its composing, not after them
if __name__ == "__main__":
    start_worker_server(stop_at_exit=True)

import os
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import hydra
from filelock import FileLock, Timeout
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from kcal.configs import CONFIG_PATH, choices
from kcal.core import layout
from kcal.core.errors import ConfigError, DataError, IncompleteError, exits_on_config_error
from kcal.core.progress import Forecast, Progress, Study
from kcal.core.schema import Schema, choice, flag, integer, items
from kcal.core.startup import checks_config
from kcal.core.storage_url import keeps_password_off_disk
from kcal.data import get_spec
from kcal.data.registry import dataset_names
from kcal.data.sources import ChecksumError, DatasetUnavailableError, locate, offline, unavailable_hint
from kcal.orchestrate.workers import Stage, run_workers
from kcal.paper import PAPER_DATASETS as DATASETS
from kcal.paper import PAPER_OBJECTIVES as OBJECTIVES
from kcal.reruns.seeds import SCHEMA as SEEDS_SCHEMA
from kcal.reruns.seeds import chunks, collect, seed_dirs
from kcal.sweep.studies import StorageCache, counted, open_study

OWN_KEYS = ("task=", "reproduce.", "+reproduce.")


def datasets_of_task(cfg: DictConfig) -> str | None:
    """The datasets a reproduction is asked for are of its task."""
    other = [ds for ds in OmegaConf.select(cfg, "reproduce.datasets") or () if get_spec(ds).task != cfg.task]
    if other:
        return (f"reproduce.datasets: {', '.join(other)} not of task={cfg.task}; pass task="
                f"{get_spec(other[0]).task} or datasets among: {', '.join(dataset_names(cfg.task))}")  # fmt: skip
    return None


DATASET, OBJECTIVE = (
    choice(dataset_names, names="dataset"),
    choice(lambda: choices("objective"), names="objective"),
)
#: the keys of ``reproduce.*`` and ``task`` (configs/reproduce.yaml, the profiles' ``reproduce.sample_sizes``)
REPRODUCE_KEYS = Schema({
    "task": choice(lambda: OBJECTIVES),
    "reproduce.datasets": items(DATASET, null="the paper's datasets of the task"),
    "reproduce.objectives": items(OBJECTIVE, null="the paper's objectives of the task"),
    "reproduce.sample_size_datasets": items(DATASET, empty="no reruns with other sample counts"),
    "reproduce.sample_sizes": items(integer(1)),
    "reproduce.tables": flag(),
    "reproduce.jobs": integer(1, null="the CPU count"),
}, relations=(datasets_of_task,))  # fmt: skip
#: what ``kcal reproduce`` checks before it starts (:mod:`kcal.core.startup`)
SCHEMA = SEEDS_SCHEMA | REPRODUCE_KEYS


def available(name: str) -> DataError | None:
    """None when the dataset's files can be had; otherwise why not (missing, or failing its checksum)."""
    try:
        locate(get_spec(name), download=not offline())
        return None
    except (DatasetUnavailableError, ChecksumError) as exc:
        return exc


def check_complete(cfg: DictConfig, not_run: dict[str, DataError], n_rows: int) -> None:
    """Raise when the reproduction did not run what it was asked for: a file failing its checksum (always),
    a dataset named in ``reproduce.datasets`` that is not available, or no result row at all. Of the
    default datasets (``reproduce.datasets=null``), those not available are only noted."""
    corrupt = [f"{ds}: {exc}" for ds, exc in not_run.items() if isinstance(exc, ChecksumError)]
    missing = [ds for ds, exc in not_run.items() if isinstance(exc, DatasetUnavailableError)]
    if missing and (cfg.reproduce.datasets or n_rows == 0):
        corrupt.append(f"not available: {', '.join(missing)}; {unavailable_hint('<dataset>')}")
    if corrupt:
        raise DataError(f"reproduction incomplete ({n_rows} result rows): " + " | ".join(corrupt))
    if n_rows == 0:
        raise IncompleteError(f"no result rows in {layout.results_file(cfg.root)}: no seed run finished "
                              f"with status ok; see the seeds' metrics.json under {cfg.root}")  # fmt: skip


def stages(cfg: DictConfig) -> list[tuple[str, str, list[str]]]:
    """(dataset, label, extra overrides) for every seed rerun; sweeps are implied by the label."""
    task = cfg.task
    datasets = list(cfg.reproduce.datasets or DATASETS[task])
    objectives = list(cfg.reproduce.objectives or OBJECTIVES[task])
    out = []
    for ds in datasets:
        out += [(ds, obj, [f"objective={obj}"]) for obj in objectives]
        if task == "regression" and ds in cfg.reproduce.sample_size_datasets and "nll_mmd" in objectives:
            for s in cfg.reproduce.sample_sizes:
                label = layout.variant_label("nll_mmd", "samples", s)
                out.append((ds, label, ["objective=nll_mmd", f"objective.params.num_samples={s}",
                                        f"seeds_run.label='{label}'", "seeds_run.best_from=nll_mmd"]))  # fmt: skip
    return out


def protocol_progress(runnable: list[Stage], jobs: int = 1) -> Progress:
    """The protocol's work, every study's trials and every chunk of seeds, each weighed by its predicted
    seconds (:mod:`kcal.orchestrate.costs`), with the forecast of its ETA (:class:`kcal.core.progress.Forecast`:
    the studies in the pool's order, each one's seed chunks, Table 6's reruns included, after its trials).

    The seeds still to train are planned as the last study's rerun trains them (``jobs`` workers split it into
    at least ``jobs`` chunks, :func:`kcal.reruns.seeds.chunks`; a rerun released while other studies sweep
    trains whole, :meth:`kcal.orchestrate.schedule.Schedule.release`), so the plan is the most the chunks can
    weigh: the progress reaches its end with the protocol's last stage, not before."""
    total = done = 0.0
    parts = jobs if jobs > 1 else 1
    forecast = Forecast(workers=jobs, pace=first_pace(jobs))
    plan: dict[tuple[str, str], Study] = {}
    storages = StorageCache()
    for st in runnable:
        if st.sweeps:
            n = int(st.cfg.sweep.n_trials)
            try:
                finished = min(n, counted(open_study(st.cfg, create=False, storage=storages(st.cfg)))[0])
            except KeyError:  # no study yet
                finished = 0
            kind, trial_s = st.piece("trial", 1)
            total, done = total + n * trial_s, done + finished * trial_s
            plan[st.study_key] = Study(kind, n - finished, trial_s)
    for st in runnable:
        dirs = seed_dirs(st.cfg)
        pending = [k for k, d in dirs.items() if not layout.is_finished(d)]
        chunked = [st.piece("seeds", len(c)) for c in chunks(st.cfg, pending, parts=parts)]
        gone = st.piece("seeds", len(dirs) - len(pending))[1] if len(dirs) > len(pending) else 0.0
        total, done = total + sum(s for _, s in chunked) + gone, done + gone
        plan.setdefault(st.study_key, Study(None, 0, 0.0)).chunks.extend(chunked)
    for study in plan.values():
        forecast.add_study(study)
    return Progress(total, "protocol", done=done, forecast=forecast)


def first_pace(jobs: int) -> float:
    """Wall seconds per CPU second a worker can expect before any has finished a piece: the cores shared by
    the jobs already running (the load average) and this reproduction's ``jobs`` workers, 1 on an idle machine."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1.0, (load + min(jobs, cores)) / cores)


def hold_root(root: Path) -> FileLock:
    """The root's reproduction lock (:func:`kcal.core.layout.reproduction_lock`), taken without waiting; a root
    another reproduction holds is refused with one line naming it (pid, host, start), before anything is written."""
    lock_path, owner_path = layout.reproduction_lock(root)
    root.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        owner = owner_path.read_text(encoding="utf-8").strip() if owner_path.is_file() else "another process"
        raise ConfigError(f"root={root} is in use by another kcal reproduce ({owner}): wait for it to finish, or pass "
                          "another root=") from None  # fmt: skip
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    owner_path.write_text(
        f"pid {os.getpid()} on host {socket.gethostname()}, started {started}\n", encoding="utf-8"
    )
    return lock


def reproduce(cfg: DictConfig, user_overrides: list[str]) -> Path:
    """The protocol's stages into ``cfg.root`` (the module docstring); the root is held (:func:`hold_root`) from
    the first stage on, once the datasets are found."""
    start_worker_server()  # when not started yet (a caller other than the program): its imports beside the composing
    root = Path(cfg.root)
    plan = stages(cfg)
    skipped = {}
    t0 = time.perf_counter()
    runnable = []
    for ds, label, extra in plan:
        if ds not in skipped:
            reason = available(ds)
            if reason:
                skipped[ds] = reason
                print(f"[not run] {ds}: {getattr(reason, 'reason', reason)}", file=sys.stderr)
        if ds not in skipped:
            pair = hydra.compose("seeds", overrides=[*user_overrides, f"dataset={ds}", *extra])
            runnable.append(Stage(ds, label, pair, sweeps=not layout.is_variant(label)))
    with hold_root(root):
        return run_stages(cfg, root, runnable, skipped, t0)


def run_stages(cfg: DictConfig, root: Path, runnable: list[Stage], skipped: dict, t0: float) -> Path:
    """:func:`reproduce`'s stages, sweeps and seeds, then its results and tables, the root held."""
    jobs = int(cfg.reproduce.jobs or os.cpu_count() or 1)
    progress = protocol_progress(runnable, jobs)
    print(f"{len(runnable)} seed reruns (and their sweeps) on {jobs} worker process(es) into {root}; "
          f"{progress.status()}", file=sys.stderr, flush=True)  # fmt: skip
    run_workers(
        runnable, jobs, progress
    )  # one worker too: the same processes, threads and trials at any jobs
    results = collect(root)
    results_csv = layout.results_file(root)
    root.mkdir(parents=True, exist_ok=True)
    results.to_csv(results_csv, index=False)
    progress.finish(f"results: {results_csv} ({len(results)} rows) after {time.perf_counter() - t0:.0f} s")
    if skipped:
        print(
            "not run (files not available or failing their checksum): " + ", ".join(skipped), file=sys.stderr
        )
    if cfg.reproduce.tables and len(results):
        from kcal.publish.tables import write_tables

        written = write_tables(results_csv, layout.tables_dir(root), profile=cfg.profile_name)
        print("tables:", *(f"  {k}: {v}" for k, v in written.items()), sep="\n")
    check_complete(cfg, skipped, len(results))
    return results_csv


@keeps_password_off_disk
@checks_config("reproduce", SCHEMA)
@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="reproduce")
@exits_on_config_error
def main(cfg: DictConfig) -> None:
    user = [o for o in HydraConfig.get().overrides.task if not o.startswith(OWN_KEYS)]
    reproduce(cfg, user)


if __name__ == "__main__":
    main()
