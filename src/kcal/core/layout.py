"""Where results live: every output path and study name, built and parsed in this module only.

A reproduction root (``root``; ``outputs/reproduce/<profile>`` for :mod:`kcal.orchestrate.reproduce`) holds::

    sweeps.db                                        the Optuna studies (the default storage)
    results.csv                                      every summary.csv below, collected
    <dataset>/<objective>/sweep<suffix>/             a study's folder: best.json (front.json)
        trials/trial_0007/                           one trial's run directory
    <dataset>/<label><suffix>/                       a seed rerun: summary.csv, fingerprint.json,
        seeds/seed3/                                 best_trial.json; one run directory per seed
    ablations/<dataset>/<objective>[/<k>=<v>,...]/   an ablation: <key>.csv, <key>=<value>/seeds/seed<k>/
    paths/<dataset>/                                 regularisation paths: <objective>.csv and .json,
        <objective>/objective.weight=<λ>/seeds/seed<k>/  one point of a path
    pareto/<dataset>/                                the front comparison: fronts.json, fronts.png
    tables/, figures/                                what publishing writes
    logs/<time>_<task>/.hydra/                       each kcal reproduce's composed config and overrides

``<suffix>`` is empty under ``sweep.selection=paper`` and ``__<selection>`` otherwise (``__pareto``),
so the two selections never share a study or a folder. A study is named
``<dataset>__<objective>__<space>[__<selection>]``; the config composes the first three parts
(``sweep.study_name`` in ``sweep.yaml``), :func:`with_selection` appends the fourth and
:func:`parse_study_name` reads them back. A run directory holds ``config.yaml``, ``metrics.json`` (its
presence marks a finished run), ``history.csv``, ``predictions.npz``, ``run.json``, ``figures/`` and
``checkpoints/best.pt``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

REPRODUCE_ROOT = Path("outputs/reproduce")
LOCAL_ROOT = Path("outputs/local_calibration")
STORAGE_FILE = "sweeps.db"
RESULTS_FILE = "results.csv"
SUMMARY_FILE = "summary.csv"
FINGERPRINT_FILE = "fingerprint.json"
BEST_TRIAL_FILE = "best_trial.json"
BEST_FILE = "best.json"
FRONT_FILE = "front.json"
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.json"
PREDICTIONS_FILE = "predictions.npz"
HISTORY_FILE = "history.csv"
RUN_INFO_FILE = "run.json"
FRONTS_FILE = "fronts.json"
FRONTS_FIGURE = "fronts.png"
SEP = "__"  # between the parts of a study name
PAPER_SELECTION = "paper"  # the selection whose studies and folders carry no suffix


# ---- roots ---------------------------------------------------------------------------------------------


def reproduce_root(profile: str) -> Path:
    """``outputs/reproduce/<profile>``, a reproduction's default root."""
    return REPRODUCE_ROOT / profile


def storage_file(root: Path | str) -> Path:
    """``<root>/sweeps.db``."""
    return Path(root) / STORAGE_FILE


def sqlite_url(root: Path | str) -> str:
    """The SQLAlchemy URL of ``<root>/sweeps.db`` (an absolute path)."""
    return f"sqlite:///{storage_file(root).resolve()}"


def results_file(root: Path | str) -> Path:
    return Path(root) / RESULTS_FILE


def reproduction_lock(root: Path | str) -> tuple[Path, Path]:
    """``(<root>/reproduce.lock, <root>/reproduce.owner)``: the file a ``kcal reproduce`` locks while it runs into
    ``root`` (:class:`filelock.FileLock`, released by the OS when the process ends, killed or not) and the one
    that says who holds it (pid, host, start time), so a second reproduction into the same root is refused."""
    return Path(root) / "reproduce.lock", Path(root) / "reproduce.owner"


def tables_dir(root: Path | str) -> Path:
    """``<root>/tables``: the LaTeX/Markdown tables and claims of a reproduction."""
    return Path(root) / "tables"


def figures_dir(folder: Path | str) -> Path:
    """``<folder>/figures``: the figures of a run directory, a reproduction root or a local-calibration root."""
    return Path(folder) / "figures"


def dataset_figure(folder: Path | str, kind: str, dataset: str) -> Path:
    """``<folder>/<kind>_<dataset>`` (no suffix): a figure of one dataset (``dce``, ``calibration``, ``lce``,
    ``budget``, ``fronts``, ``tradeoff``) in a figures folder, saved with the suffixes the figure needs."""
    return Path(folder) / f"{kind}_{dataset}"


def pareto_dir(root: Path | str, dataset: str) -> Path:
    """``<root>/pareto/<dataset>``: the front comparison of a dataset's pareto studies."""
    return Path(root) / "pareto" / dataset


# ---- sweeps ----------------------------------------------------------------------------------------------


def selection_suffix(selection: str) -> str:
    """What a study's name and folder get appended: nothing under ``paper``, else ``__<selection>``."""
    return "" if selection == PAPER_SELECTION else f"{SEP}{selection}"


def sweep_folder(selection: str = PAPER_SELECTION) -> str:
    """``sweep<suffix>``, the name of a study's folder."""
    return f"sweep{selection_suffix(selection)}"


def sweep_dir(root: Path | str, dataset: str, objective: str, selection: str = PAPER_SELECTION) -> Path:
    """``<root>/<dataset>/<objective>/sweep<suffix>``: a study's trials, ``best.json`` and ``front.json``."""
    return Path(root) / dataset / objective / sweep_folder(selection)


def trials_dir(sweep: Path) -> Path:
    return sweep / "trials"


def trial_dir(sweep: Path, number: int) -> Path:
    """``<sweep>/trials/trial_0007``."""
    return trials_dir(sweep) / f"trial_{number:04d}"


FINISHED_TRIAL_GLOB = f"sweep*/trials/trial_*/{METRICS_FILE}"  # under a study's <dataset>/<objective>/


def trial_number(run_dir: Path) -> int:
    """``7`` of ``<sweep>/trials/trial_0007``."""
    return int(Path(run_dir).name.removeprefix("trial_"))


STUDIES_FILE = "studies.csv"  # in a published data folder: one row per study (trial hours, seeds' end, ...)
TIMINGS_FILE = "timings.csv"  # in kcal/resources: measured trial and seed-chunk seconds of recorded runs


def published_data(profile: str) -> Path:
    """``kcal/resources/results/<profile>``: the published numbers of a ``profile`` reproduction (package data)."""
    return resources_dir() / "results" / profile


def resources_dir() -> Path:
    """The package data folder ``kcal/resources``."""
    from importlib import resources

    return Path(str(resources.files("kcal.resources")))


TRIALS_FOLDER = "trials"  # in a published data folder: trials/<dataset>__<objective>.csv


def trials_table(data: Path | str, dataset: str, objective: str) -> Path:
    """``<data>/trials/<dataset>__<objective>.csv``: a published study's trials (:mod:`kcal.publish.trials`)."""
    return Path(data) / TRIALS_FOLDER / f"{pair_name(dataset, objective)}.csv"


def trials_tables(data: Path | str) -> list[Path]:
    """Every published trials table under ``data``."""
    return sorted((Path(data) / TRIALS_FOLDER).glob(f"*{SEP}*.csv"))


EXPERIMENTS_FOLDER = "experiments"  # in a published data folder: experiments/<name>/


def experiment_data_dir(data: Path | str, name: str) -> Path:
    """``<data>/experiments/<name>``: a labelled experiment's numbers, kept apart from the published ones."""
    return Path(data) / EXPERIMENTS_FOLDER / name


REPLICATES_FOLDER = "replicates"  # in a published data folder: replicates/<name>/results.csv, ...


def experiment_data_dirs(data: Path | str) -> list[Path]:
    """Every labelled experiment kept under ``data`` that holds a ``results.csv``."""
    return sorted(p.parent for p in (Path(data) / EXPERIMENTS_FOLDER).glob(f"*/{RESULTS_FILE}"))


def replicate_data_dir(data: Path | str, name: str) -> Path:
    """``<data>/replicates/<name>``: one more run of the whole protocol (another sampler seed)."""
    return Path(data) / REPLICATES_FOLDER / name


def replicate_data_dirs(data: Path | str) -> dict[str, Path]:
    """Every published replicate under ``data``, by name."""
    return {
        p.parent.name: p.parent for p in sorted((Path(data) / REPLICATES_FOLDER).glob(f"*/{RESULTS_FILE}"))
    }


PRUNING_REPLAY_FILE = (
    "pruning_replay.csv"  # in a published data folder: the pruners replayed over its studies
)
WORKERS_FOLDER = "workers"  # in a published data folder: workers/jobs=<n>/<name>/results.csv, ...
PROVENANCE_FILE = "provenance.json"  # in a protocol variant's run: the command and commit that made it


def pruning_replay_file(data: Path | str) -> Path:
    """``<data>/pruning_replay.csv``: the pruners replayed over a published data folder's studies."""
    return Path(data) / PRUNING_REPLAY_FILE


def workers_label(jobs: int, sampler: str = "") -> str:
    """``jobs=<jobs>``, with ``,<sampler>`` where the sampler's parallel setting is not the protocol's (e.g.
    ``jobs=8,constant_liar=false``): the folder of one worker count and sampler setting under ``workers/``."""
    return f"jobs={jobs}" + (f",{sampler}" if sampler else "")


def workers_label_jobs(label: str) -> int:
    """The worker count of a :func:`workers_label`."""
    return int(label.partition(",")[0].partition("=")[2])


def workers_data_dir(data: Path | str, jobs: int, name: str, sampler: str = "") -> Path:
    """``<data>/workers/<label>/<name>`` (:func:`workers_label`): one more run of the whole protocol on ``jobs``
    worker processes (sampler seed ``name``), kept apart from the published run and its replicates (1 or 2
    workers)."""
    return Path(data) / WORKERS_FOLDER / workers_label(jobs, sampler) / name


def workers_data_dirs(data: Path | str) -> dict[tuple[str, str], Path]:
    """Every published worker-count replicate under ``data``, by (:func:`workers_label`, name)."""
    found = sorted((Path(data) / WORKERS_FOLDER).glob(f"jobs=*/*/{RESULTS_FILE}"))
    return {(p.parents[1].name, p.parent.name): p.parent for p in found}


PRUNED_FOLDER = "pruned"  # in a published data folder: pruned/<pruner>/<name>/results.csv, ...


def pruned_data_dir(data: Path | str, pruner: str, name: str) -> Path:
    """``<data>/pruned/<pruner>/<name>``: one run of the protocol with its sweeps pruned (``sweep.pruner``,
    sampler seed ``name``), kept apart from the full protocol's runs."""
    return Path(data) / PRUNED_FOLDER / pruner / name


def pruned_data_dirs(data: Path | str) -> dict[tuple[str, str], Path]:
    """Every published pruned-protocol run under ``data``, by (pruner, name)."""
    found = sorted((Path(data) / PRUNED_FOLDER).glob(f"*/*/{RESULTS_FILE}"))
    return {(p.parents[1].name, p.parent.name): p.parent for p in found}


def recorded_configs(root: Path | str) -> list[Path]:
    """The composed config of every ``kcal reproduce`` that ran in ``root`` (Hydra's ``.hydra/config.yaml`` in
    its run folder ``<root>/logs/<time>_<task>/``, ``configs/reproduce.yaml``), the first run first."""
    return sorted(Path(root).glob("logs/*/.hydra/config.yaml"))


def recorded_overrides(config: Path) -> Path:
    """The command-line overrides recorded beside a :func:`recorded_configs` file."""
    return Path(config).with_name("overrides.yaml")


def best_files(root: Path | str) -> dict[tuple[str, str], Path]:
    """Every paper-selection study's ``best.json`` under ``root``, by (dataset, objective)."""
    found = sorted(Path(root).glob(f"*/*/{sweep_folder()}/{BEST_FILE}"))
    return {(p.parents[2].name, p.parents[1].name): p for p in found}


def pair_name(dataset: str, objective: str) -> str:
    """``<dataset>__<objective>``, the stem of a published ``best/`` file."""
    return f"{dataset}{SEP}{objective}"


def published_best(dest: Path | str, dataset: str, objective: str) -> Path:
    """``<dest>/best/<dataset>__<objective>.json``: a published study's selected trial."""
    return Path(dest) / "best" / f"{pair_name(dataset, objective)}.json"


class StudyName(NamedTuple):
    dataset: str
    objective: str
    space: str | None
    selection: str


def study_name(dataset: str, objective: str, space: str, selection: str = PAPER_SELECTION) -> str:
    """``<dataset>__<objective>__<space>[__<selection>]``, as ``sweep.yaml`` composes it."""
    return with_selection(SEP.join((dataset, objective, space)), selection)


def with_selection(name: str, selection: str) -> str:
    """``name`` with the selection's suffix, appended once."""
    suffix = selection_suffix(selection)
    return name if name.endswith(suffix) else name + suffix


def parse_study_name(name: str) -> StudyName:
    """The parts of ``<dataset>__<objective>__<space>[__<selection>]``; a name of fewer parts (one given
    as ``sweep.study_name``) gives ``<dataset>`` / ``<objective>`` / None for the parts it lacks."""
    parts = name.split(SEP)
    dataset = parts[0] or "<dataset>"
    objective = parts[1] if len(parts) > 1 else "<objective>"
    space = parts[2] if len(parts) > 2 else None
    selection = parts[3] if len(parts) > 3 else PAPER_SELECTION
    return StudyName(dataset, objective, space, selection)


def dataset_of_study(name: str) -> str:
    return parse_study_name(name).dataset


def with_objective(name: str, objective: str, other: str) -> str:
    """The name of the study of ``other`` beside the study ``name`` of ``objective`` (same dataset, space
    and selection)."""
    return name.replace(f"{SEP}{objective}{SEP}", f"{SEP}{other}{SEP}")


# ---- seed reruns ----------------------------------------------------------------------------------------


def label_dir(root: Path | str, dataset: str, label: str, selection: str = PAPER_SELECTION) -> Path:
    """``<root>/<dataset>/<label><suffix>``: one seed rerun's seeds, summary and fingerprint."""
    return Path(root) / dataset / f"{label}{selection_suffix(selection)}"


def seeds_dir(parent: Path) -> Path:
    return Path(parent) / "seeds"


def seed_dir(parent: Path, seed: int) -> Path:
    """``<parent>/seeds/seed<k>``: the run directory of seed ``k``."""
    return seeds_dir(parent) / f"seed{seed}"


FINISHED_SEED_GLOB = f"seeds/seed*/{METRICS_FILE}"  # under a seed rerun's folder


def seed_number(name: str) -> int | None:
    """``k`` of a folder named ``seed<k>``; None for any other name."""
    digits = name[len("seed") :]
    return int(digits) if name.startswith("seed") and digits.isdigit() else None


def seed_runs(root: Path | str) -> dict[str, dict[str, list[Path]]]:
    """``{dataset: {label: [seed folders by k]}}`` for every ``<root>/<dataset>/<label>/seeds/seed<k>/``."""
    out: dict[str, dict[str, list[Path]]] = {}
    for seeds in sorted(Path(root).glob("*/*/seeds")):
        dirs = [d for d in seeds.iterdir() if d.is_dir() and seed_number(d.name) is not None]
        if dirs:
            out.setdefault(seeds.parent.parent.name, {})[seeds.parent.name] = sorted(
                dirs, key=lambda d: seed_number(d.name)
            )
    return out


def finished_seed_files(parent: Path) -> list[Path]:
    """The ``metrics.json`` of every finished seed under ``<parent>/seeds/``."""
    return sorted(Path(parent).glob(FINISHED_SEED_GLOB))


def seed_trained_at(metrics: Path) -> float:
    """When the seed whose ``metrics.json`` is ``metrics`` finished training (a POSIX time): the time its
    ``predictions.npz`` was written, where it has one, else its ``metrics.json``'s. Evaluating a seed again
    (``kcal reevaluate``) rewrites ``metrics.json`` and ``run.json`` but never the forecasts it reads."""
    forecasts = Path(metrics).with_name(PREDICTIONS_FILE)
    return (forecasts if forecasts.exists() else Path(metrics)).stat().st_mtime


def summary_files(root: Path | str) -> list[Path]:
    """Every seed rerun's ``summary.csv`` under a reproduction root."""
    return sorted(Path(root).glob(f"*/*/{SUMMARY_FILE}"))


def variant_label(objective: str, key: str, value) -> str:
    """``<objective>@<key>=<value>``: the label of a seed rerun of ``objective``'s best trial with one setting
    changed (e.g. ``nll_mmd@samples=10``, Table 6); it has no sweep of its own."""
    return f"{objective}@{key}={value}"


def is_variant(label: str) -> bool:
    return "@" in label


def variant_base(label: str) -> str:
    """The objective whose best trial a :func:`variant_label` reruns (``label`` itself when not a variant)."""
    return label.split("@", 1)[0]


def ablation_dir(root: Path | str, dataset: str, objective: str, fixed: dict | None = None) -> Path:
    """``<root>/ablations/<dataset>/<objective>``, plus one folder naming the fixed keys if any."""
    out = Path(root) / "ablations" / dataset / objective
    return out / ",".join(f"{k}={v}" for k, v in sorted(fixed.items())) if fixed else out


def ablation_value_dir(ablation: Path, key: str, value) -> Path:
    return ablation / f"{key}={value}"


# ---- regularisation paths -------------------------------------------------------------------------------

PATHS_FOLDER = "paths"  # in a root and in a published data folder: paths/<dataset>/<objective>.{csv,json}


def paths_dir(folder: Path | str, dataset: str) -> Path:
    """``<folder>/paths/<dataset>``: a dataset's regularisation paths (:mod:`kcal.reruns.paths`), in a root where
    they are trained and in a published data folder (the same files, copied by ``kcal report --paths``)."""
    return Path(folder) / PATHS_FOLDER / dataset


def path_point_dir(paths: Path, objective: str, weight: float) -> Path:
    """``<paths>/<objective>/objective.weight=<λ>``: one point of a path (λ printed by ``%g``), its seeds under
    ``seeds/``."""
    return Path(paths) / objective / f"objective.weight={float(weight):g}"


def path_table(paths: Path, objective: str) -> Path:
    """``<paths>/<objective>.csv``: a path's tidy results, one block of rows per λ."""
    return Path(paths) / f"{objective}.csv"


def path_record(paths: Path, objective: str) -> Path:
    """``<paths>/<objective>.json``: how a path was made (command, commit, start, grid, kernels, shares)."""
    return Path(paths) / f"{objective}.json"


def claim_file(path: Path) -> Path:
    """``<path>.lock`` beside a path point's folder or a path's record: the file a process locks
    (:class:`filelock.FileLock`) while it trains that point or writes that record, so processes running one
    dataset's paths at once never train a point twice; the OS releases the lock when its process ends."""
    return Path(path).with_name(Path(path).name + ".lock")


def path_tables(folder: Path | str) -> list[Path]:
    """Every path table under ``<folder>/paths/``, by dataset then objective."""
    return sorted((Path(folder) / PATHS_FOLDER).glob("*/*.csv"))


# ---- run directories ------------------------------------------------------------------------------------


def metrics_file(run_dir: Path) -> Path:
    return Path(run_dir) / METRICS_FILE


def checkpoint_file(run_dir: Path) -> Path:
    """``<run_dir>/checkpoints/best.pt``: the best weights' ``state_dict``."""
    return Path(run_dir) / "checkpoints" / "best.pt"


def snapshot_file(run_dir: Path) -> Path:
    """``<run_dir>/snapshot.ckpt``: an unfinished training's last snapshot (:mod:`kcal.run.snapshot`), in the folder of
    its first member; deleted when the training ends."""
    return Path(run_dir) / "snapshot.ckpt"


def is_finished(run_dir: Path) -> bool:
    """Whether a run directory holds a finished run (its ``metrics.json``, written last)."""
    return metrics_file(run_dir).is_file()
