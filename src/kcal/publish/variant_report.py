"""Publish a finished run of a protocol variant beside the full protocol's runs:
``kcal variant-report <root> <dest> --commit <sha>``.

A *protocol variant* is one more run of the whole protocol with a sampler seed of the published run or of one of
its replicates (which ran on 1 or 2 workers, every trial to its early stop), changed in how it runs:

* on N worker processes (``reproduce.jobs=N``, N > 2): a *worker-count replicate*, published under
  ``<data>/workers/jobs=<N>/sampler_seed=<k>/`` (:func:`kcal.core.layout.workers_data_dir`); where the sampler's
  parallel setting differs from the protocol's too (a fix tried, ``sweep.startup_by``,
  :mod:`kcal.sweep.samplers`),
  under ``workers/jobs=<N>,<key>=<value>/``; the report compares them in its own section
  (:mod:`kcal.publish.questions.worker_count`);
* with its sweeps pruned (``sweep.pruner=<name>``): a *pruned protocol* run, published under
  ``<data>/pruned/<name>/sampler_seed=<k>/`` (:func:`kcal.core.layout.pruned_data_dir`) and judged against the
  full protocol's runs over whole runs (:mod:`kcal.publish.whole_runs`, :mod:`kcal.publish.questions.pruned_protocol`).

Each folder holds ``results.csv``, ``studies.csv``, ``trials/`` (every trial, its validation and test metrics and
its per-epoch ``curve``; :mod:`kcal.publish.trials`) and ``provenance.json`` (:func:`provenance`: the ``kcal
reproduce`` command of each sitting, from the root's recorded overrides, and the commit of the code that ran it,
which the root does not record and ``--commit`` gives). They never enter the published numbers, the replicates'
protocol spread or the claims. The report is regenerated here.

The settings are read from the root's recorded configs (Hydra's ``logs/*/.hydra/config.yaml``): every sitting of
the root must agree on them. A root that changes nothing (1 or 2 workers, no pruner, the protocol's sampler) is
refused: it is a replicate, published with ``kcal report``. A root whose protocol has not finished is refused in
one line naming what is missing (:func:`unfinished`): a study short of ``sweep.n_trials`` counted trials or with
a trial still running, a seed rerun short of ``seeds_run.n_seeds`` finished seeds, a (dataset, objective) without
rows in ``results.csv``. The root is only read; ``--storage`` points at a copy of its ``sweeps.db`` where the root
must stay untouched (SQLite in WAL mode writes beside a database it opens).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from kcal.core import layout
from kcal.core.errors import ConfigError, IncompleteError, exits_on_user_error
from kcal.paper import PAPER_DATASETS, PAPER_OBJECTIVES
from kcal.publish.report import render, report_info, study_rows
from kcal.publish.trials import trial_rows, write_trials
from kcal.sweep.samplers import parallel_label
from kcal.sweep.studies import counted

COMMIT = re.compile(r"[0-9a-f]{7,40}")


def recorded(root: Path) -> list[dict]:
    """Each ``kcal reproduce`` sitting of ``root`` (first first): its start (the run folder's name), the overrides
    it was given and its composed config (as a plain dict)."""
    out = []
    for config in layout.recorded_configs(root):
        overrides = layout.recorded_overrides(config)
        out.append({
            "started": config.parents[1].name,
            "overrides": [str(o) for o in OmegaConf.load(overrides)] if overrides.is_file() else [],
            "config": OmegaConf.to_container(OmegaConf.load(config), resolve=False),
        })  # fmt: skip
    return out


def run_settings(root: Path) -> dict:
    """What every sitting of ``root`` agrees on: ``jobs``, ``sampler_seed``, ``pruner``, ``sampler`` (the
    sampler's parallel setting where it is not the protocol's, :func:`kcal.sweep.samplers.parallel_label`),
    ``task``, ``profile``, ``datasets``, ``objectives``, ``n_trials``, ``n_seeds``; :class:`ConfigError` where the
    root records no sitting, records no worker count, or its sittings differ in any of them."""
    sittings = recorded(root)
    if not sittings:
        raise ConfigError(f"{root} records no kcal reproduce run (no logs/*/.hydra/config.yaml); is it a "
                          "reproduction root?")  # fmt: skip
    found = []
    for s in sittings:
        cfg = s["config"]
        task = cfg["task"]
        repro = cfg.get("reproduce", {})
        found.append({
            "jobs": repro.get("jobs"), "sampler_seed": cfg["sweep"].get("sampler_seed"),
            "pruner": cfg["sweep"].get("pruner"), "sampler": parallel_label(cfg["sweep"]), "task": task,
            "profile": cfg.get("profile_name"),
            "datasets": list(repro.get("datasets") or PAPER_DATASETS[task]),
            "objectives": list(repro.get("objectives") or PAPER_OBJECTIVES[task]),
            "n_trials": int(cfg["sweep"]["n_trials"]), "n_seeds": int(cfg["seeds_run"]["n_seeds"]),
        })  # fmt: skip
    differ = sorted(k for k in found[0] if any(f[k] != found[0][k] for f in found[1:]))
    if differ:
        raise ConfigError(f"the kcal reproduce runs recorded in {root} differ in {', '.join(differ)}; a "
                          "protocol variant's run is one protocol run with one setting of each")  # fmt: skip
    if found[0]["jobs"] is None:
        raise ConfigError(f"{root} was run without reproduce.jobs (the CPU count of a machine it does not "
                          "record); its number of workers is not known")  # fmt: skip
    return {**found[0], "jobs": int(found[0]["jobs"])}


def unfinished(root: Path, settings: dict, storage: str | None = None) -> list[str]:
    """What the protocol recorded in ``root`` still lacks (empty: it has finished), one phrase per study or seed
    rerun, e.g. ``heart-disease/xe 57 of 100 trials``."""
    import optuna

    url = storage or layout.sqlite_url(root)
    results = layout.results_file(root)
    if not results.is_file():
        return [f"no {layout.RESULTS_FILE} (written when the protocol ends)"]
    if storage is None and not layout.storage_file(root).is_file():
        return [f"no {layout.STORAGE_FILE}"]
    names = {}
    for name in optuna.get_all_study_names(url):
        dataset, objective, _, selection = layout.parse_study_name(name)
        if selection == layout.PAPER_SELECTION:
            names[(dataset, objective)] = name
    rows = pd.read_csv(results)
    has_rows = set(zip(rows["dataset"], rows["objective"], strict=True))
    missing = []
    for dataset in settings["datasets"]:
        for objective in settings["objectives"]:
            pair = f"{dataset}/{objective}"
            if (dataset, objective) not in names:
                missing.append(f"{pair} has no study")
                continue
            done, running = counted(optuna.load_study(study_name=names[(dataset, objective)], storage=url))
            if done < settings["n_trials"] or running:
                missing.append(
                    f"{pair} {done} of {settings['n_trials']} trials"
                    + (f" ({running} running)" if running else "")
                )
            seeds = len(layout.finished_seed_files(layout.label_dir(root, dataset, objective)))
            if seeds < settings["n_seeds"]:
                missing.append(f"{pair} {seeds} of {settings['n_seeds']} seeds")
            elif (dataset, objective) not in has_rows:
                missing.append(f"{pair} has no rows in {layout.RESULTS_FILE}")
    return missing


def provenance(root: Path, settings: dict, commit: str) -> dict:
    """``provenance.json``: the worker count and sampler seed, the budget, the commit, and the command of each
    sitting of the root (``kcal reproduce`` and its recorded overrides)."""
    return {
        "jobs": settings["jobs"], "sampler_seed": settings["sampler_seed"], "pruner": settings["pruner"],
        "sampler": settings["sampler"], "commit": commit,
        "profile": settings["profile"], "task": settings["task"], "datasets": settings["datasets"],
        "objectives": settings["objectives"], "n_trials": settings["n_trials"], "n_seeds": settings["n_seeds"],
        "commands": [{"started": s["started"], "command": "kcal reproduce " + shlex.join(s["overrides"])}
                     for s in recorded(root)],
    }  # fmt: skip


def merged_provenance(earlier: dict | None, new: dict) -> dict:
    """The provenance of a folder that ``new`` (one root's :func:`provenance`) joins: ``new`` alone where the
    folder held nothing else, else ``{jobs, sampler_seed, pruner, sampler, datasets, roots}`` with one entry per
    root (an earlier root whose datasets ``new`` publishes again is dropped)."""
    roots = [r for r in (earlier.get("roots", [earlier]) if earlier else [])
             if not set(r["datasets"]) <= set(new["datasets"])]  # fmt: skip
    if not roots:
        return new
    roots.append(new)
    shared = {k: new[k] for k in ("jobs", "sampler_seed", "pruner", "sampler")}
    return {**shared, "datasets": sorted({d for r in roots for d in r["datasets"]}), "roots": roots}


def replicate_name(settings: dict) -> str:
    """``sampler_seed=<k>``, as the replicates of the published run are named."""
    return f"sampler_seed={settings['sampler_seed']}"


def variant_folder(data: Path, settings: dict) -> Path:
    """Where the run of ``settings`` is published under the data folder ``data`` (module docstring);
    :class:`ConfigError` for a run that changes nothing or changes both the pruner and the worker count."""
    name, jobs, pruner = replicate_name(settings), settings["jobs"], settings["pruner"]
    if pruner and (jobs > 2 or settings["sampler"]):
        raise ConfigError(f"the run prunes (sweep.pruner={pruner}) and runs on {jobs} workers"
                          + (f" with {settings['sampler']}" if settings["sampler"] else "")
                          + "; a protocol variant changes one thing, so compare it with runs that changed that alone")  # fmt: skip
    if pruner:
        return layout.pruned_data_dir(data, pruner, name)
    if jobs <= 2 and not settings["sampler"]:
        raise ConfigError(f"the run is the full protocol on {jobs} worker(s) with its own sampler: a replicate, "
                          "not a variant; publish it with kcal report --replicate")  # fmt: skip
    return layout.workers_data_dir(data, jobs, name, settings["sampler"])


def publish_variant(root: Path, dest: Path, commit: str, storage: str | None = None) -> list[Path]:
    """Publish ``root`` (a finished run of a protocol variant) beside the full protocol's runs of the report in
    ``dest`` (:func:`variant_folder`) and regenerate the report; returns the files written. Refuses (:class:`IncompleteError`, one line) a
    root whose protocol has not finished, and (:class:`ConfigError`) a commit that is not a hexadecimal hash."""
    if not COMMIT.fullmatch(commit):
        raise ConfigError(
            f"--commit {commit!r} is not a git commit hash (7 to 40 lowercase hexadecimal digits)"
        )
    settings = run_settings(root)
    missing = unfinished(root, settings, storage)
    if missing:
        raise IncompleteError(f"{root} has not finished its protocol: {'; '.join(missing)}; finish it with its "
                              "kcal reproduce command (the same overrides), then publish it")  # fmt: skip
    _, data = report_info(dest)
    folder = variant_folder(data, settings)
    folder.mkdir(parents=True, exist_ok=True)
    pairs = {(d, o) for d in settings["datasets"] for o in settings["objectives"]}

    def ran(frame: pd.DataFrame) -> pd.DataFrame:
        keep = [(d, o) in pairs for d, o in zip(frame["dataset"], frame["objective"], strict=True)]
        return frame[keep]

    def merged(new: pd.DataFrame, file: Path) -> pd.DataFrame:
        """``new`` beside the rows of other (dataset, objective) pairs already in ``file``: the runs of one
        variant and sampler seed may come from several roots (one per task, say), published one by one."""
        frames = [ran(new)]
        if file.is_file():
            old = pd.read_csv(file)
            frames.insert(
                0, old[[(d, o) not in pairs for d, o in zip(old["dataset"], old["objective"], strict=True)]]
            )
        out = pd.concat(frames, ignore_index=True)
        return out.sort_values(["dataset", "objective"], kind="stable", ignore_index=True)

    merged(pd.read_csv(layout.results_file(root)), folder / layout.RESULTS_FILE).to_csv(
        folder / layout.RESULTS_FILE, index=False
    )
    merged(study_rows(root, storage), folder / layout.STUDIES_FILE).to_csv(
        folder / layout.STUDIES_FILE, index=False
    )
    for dataset, objective in pairs:
        layout.trials_table(folder, dataset, objective).unlink(missing_ok=True)
    written = write_trials(ran(trial_rows(root, storage)), folder)
    record = folder / layout.PROVENANCE_FILE
    earlier = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None
    record.write_text(json.dumps(merged_provenance(earlier, provenance(root, settings, commit)), indent=1) + "\n",
                      encoding="utf-8")  # fmt: skip
    render(dest, dest)
    return [
        folder / layout.RESULTS_FILE,
        folder / layout.STUDIES_FILE,
        *written,
        folder / layout.PROVENANCE_FILE,
    ]


@exits_on_user_error
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kcal variant-report", description=__doc__.split("\n")[0])
    p.add_argument("root", type=Path, help="the finished reproduction root, e.g. outputs/reproduce/w8-s1")
    p.add_argument("dest", type=Path, help="the report it joins, e.g. docs/results/full")
    p.add_argument(
        "--commit", required=True, help="the git commit of the code that ran the root (it records none)"
    )
    p.add_argument("--storage", help="Optuna storage URL (default: sqlite:///<root>/sweeps.db)")
    args = p.parse_args(argv)
    for path in publish_variant(args.root, args.dest, args.commit, args.storage):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
