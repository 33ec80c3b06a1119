"""The paper's experiments end to end: ``python -m kcal.reproduce task=regression profile=quick``.

For every dataset of the task (skipping, with a note, those whose files are not available) and every
objective: a TPE sweep (:mod:`kcal.sweep`), then the best configuration over seeds
(:mod:`kcal.seeds`); for regression also NLL+MMD with other numbers of forecast samples (Table 6).
With ``reproduce.jobs`` > 1 (default: the CPU count) all of it runs on one pool of worker processes
(:mod:`kcal.workers`); ``reproduce.jobs=1`` runs the stages one after the other in this process.
Then all ``summary.csv`` files are collected into ``<root>/results.csv`` and the tables are written
to ``<root>/tables/`` (:mod:`kcal.tables`). Each stage resumes, so an interrupted command continues.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from kcal.data import PAPER_CLASSIFICATION, PAPER_REGRESSION, get_spec
from kcal.data.sources import ChecksumError, DatasetUnavailableError, locate, offline
from kcal.errors import ConfigError, exits_on_config_error
from kcal.progress import Progress
from kcal.seeds import chunk_units, chunks, collect, run_seeds, seed_dirs
from kcal.sweep import counted, open_study, sweep
from kcal.train import CONFIG_DIR
from kcal.workers import Stage, run_pool

OBJECTIVES = {
    "regression": ["nll", "nll_mmd", "nll_mmd_tanh"],
    "classification": ["xe", "xe_mmce", "xe_kde", "xe_mmd"],
}
DATASETS = {"regression": list(PAPER_REGRESSION), "classification": list(PAPER_CLASSIFICATION)}
OWN_KEYS = ("task=", "reproduce.", "+reproduce.")


def available(name: str) -> str | None:
    """None when the dataset's files can be had; otherwise the reason."""
    try:
        locate(get_spec(name), download=not offline())
        return None
    except (DatasetUnavailableError, ChecksumError) as exc:
        return str(exc).split(". ")[0]


def stages(cfg: DictConfig) -> list[tuple[str, str, list[str]]]:
    """(dataset, label, extra overrides) for every seed rerun; sweeps are implied by the label."""
    task = cfg.task
    if task not in OBJECTIVES:
        raise ConfigError(f"task={task} is not one of: {', '.join(OBJECTIVES)}")
    datasets = list(cfg.reproduce.datasets or DATASETS[task])
    objectives = list(cfg.reproduce.objectives or OBJECTIVES[task])
    out = []
    for ds in datasets:
        out += [(ds, obj, [f"objective={obj}"]) for obj in objectives]
        if task == "regression" and ds in cfg.reproduce.sample_size_datasets and "nll_mmd" in objectives:
            for s in cfg.reproduce.sample_sizes:
                label = f"nll_mmd@samples={s}"
                out.append((ds, label, ["objective=nll_mmd", f"objective.params.num_samples={s}",
                                        f"seeds_run.label='{label}'", "seeds_run.best_from=nll_mmd"]))  # fmt: skip
    return out


def protocol_progress(runnable: list[Stage]) -> Progress:
    """The protocol's work in sweep-trial units: every study's trials and every chunk of seeds."""
    total = done = 0.0
    for st in runnable:
        if st.sweeps:
            n = int(st.cfg.sweep.n_trials)
            total += n
            try:
                done += min(n, counted(open_study(st.cfg, create=False))[0])
            except KeyError:  # no study yet
                pass
        dirs = seed_dirs(st.cfg)
        finished = sum((d / "metrics.json").is_file() for d in dirs.values())
        total += sum(chunk_units(len(c)) for c in chunks(st.cfg, list(dirs)))
        done += sum(chunk_units(len(c)) for c in chunks(st.cfg, list(range(finished))))
    return Progress(total, "protocol", done=done)


def reproduce(cfg: DictConfig, user_overrides: list[str]) -> Path:
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
                print(f"[skip] {ds}: {reason}", file=sys.stderr)
        if ds not in skipped:
            pair = hydra.compose("seeds", overrides=[*user_overrides, f"dataset={ds}", *extra])
            runnable.append(Stage(ds, label, pair, sweeps="@" not in label))
    jobs = int(cfg.reproduce.jobs or os.cpu_count() or 1)
    progress = protocol_progress(runnable)
    print(f"{len(runnable)} seed reruns (and their sweeps) on {jobs} worker process(es); {progress.status()}",
          file=sys.stderr, flush=True)  # fmt: skip
    if jobs == 1:  # one process: the stages in order, each sweep then its seeds
        for i, st in enumerate(runnable, 1):
            print(f"[{i}/{len(runnable)}] {st.dataset} / {st.label}  ({time.perf_counter() - t0:.0f} s so far)",
                  file=sys.stderr)  # fmt: skip
            if st.sweeps:
                sweep(st.cfg, progress)
            run_seeds(st.cfg, progress)
    else:
        run_pool(runnable, jobs, progress)
    results = collect(root)
    results_csv = root / "results.csv"
    results.to_csv(results_csv, index=False)
    print(
        f"results: {results_csv} ({len(results)} rows) after {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    if skipped:
        print("not run (files not available): " + ", ".join(skipped), file=sys.stderr)
    if cfg.reproduce.tables:
        from kcal.tables import write_tables

        written = write_tables(results_csv, root / "tables")
        print("tables:", *(f"  {k}: {v}" for k, v in written.items()), sep="\n")
    return results_csv


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="reproduce")
@exits_on_config_error
def main(cfg: DictConfig) -> None:
    user = [o for o in HydraConfig.get().overrides.task if not o.startswith(OWN_KEYS)]
    reproduce(cfg, user)


if __name__ == "__main__":
    main()
