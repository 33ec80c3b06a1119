"""A reproduction root's portable state: what a run continues from on another machine, as small text
files that can be committed to git.

    kcal state export <root> <state_dir> [--datasets crime blog] [--history]
    kcal state import <state_dir> <root>

The state of a dataset is ``<state_dir>/<dataset>/``, laid out like ``<root>/<dataset>/``:

* ``journal.log``: the dataset's sweep studies (every study named ``<dataset>__...``, as kcal names
  them), copied with :func:`optuna.copy_study` from the root's ``sweeps.db`` into Optuna's
  ``JournalStorage`` with a ``JournalFileBackend`` (JSON lines); one larger than :data:`MAX_TEXT_BYTES` is
  cut at line ends into ``journal.log``, ``journal-1.log``, ``journal-2.log``, ... which import joins again. The copy keeps every trial as it is
  (complete, failed, running, waiting; numbers, parameters, values, attributes) and the study's user
  attributes, among them its configuration fingerprint (:mod:`kcal.sweep.fingerprint`);
* ``<objective>/sweep/best.json``;
* ``<label>/fingerprint.json`` and ``best_trial.json`` of every seed rerun (its ``summary.csv`` is
  derived from the seeds, and a resumed run rebuilds it), and of
  each finished seed (one with a ``metrics.json``) ``seeds/seed<k>/metrics.json``, ``run.json`` and
  ``config.yaml``, and its ``predictions.npz`` as ``predictions.json`` (the network's forecasts on the
  validation and test splits, as text that reads back bit for bit, from which ``kcal reevaluate`` evaluates
  it again with later evaluation code; ``--no-predictions``
  leaves them out, for a run as large as blog's); with ``--history`` also its ``history.csv`` (the
  per-epoch curves of the reproduction's figures);
* of each finished trial ``<objective>/sweep/trials/trial_<n>/metrics.json`` (its test metrics, which
  the study does not hold: what ``src/kcal/publish/questions/trial_range.py`` reads to place the paper's value among a
  study's trials; a resumed run does not need them). Checkpoints, figures, the rest of the
  trial folders and logs stay behind;
* ``paths/<dataset>/``, laid out like ``<root>/paths/<dataset>/`` (the regularisation paths of
  :mod:`kcal.reruns.paths`, which span sittings): each path's table and record, each point's fingerprint, and
  each finished seed's files as above with its ``history.csv`` always (a point's regulariser share is read
  from it), so ``kcal paths`` resumes from the import with the finished points skipped.

Every CSV file (``history.csv``, a path's table) is kept as ``<name>.csv.json``, its lines as JSON strings, and
comes back byte for byte on import.

``<state_dir>/kcal-state.json`` marks the folder as such a state. An export replaces the state of the
datasets it exports and keeps the others.

Import lays a state into a root that holds none of its datasets (a new one, typically): the studies
are copied with :func:`optuna.copy_study` into ``<root>/sweeps.db``, opened as :mod:`kcal.sweep.studies` opens
it, and the files next to it. A trial that was running when the state was exported stays asked and is trained
again under its own number (the deterministic sweep, :mod:`kcal.sweep.ask_tell`); in an asynchronous study it is
failed and its parameters are queued again, as for a worker whose heartbeat stopped (:mod:`kcal.sweep.search`). The same
``kcal.orchestrate.reproduce`` (or ``kcal.sweep.search`` / ``kcal.reruns.seeds``) command with ``root=<root>`` then resumes:
finished trials and seeds are kept, and a run with another configuration is refused as usual.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import optuna
from omegaconf import OmegaConf
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState

import kcal
from kcal.configs import CONFIG_DIR
from kcal.core import layout
from kcal.core.errors import ConfigError, exits_on_user_error
from kcal.data import dataset_names, get_spec
from kcal.sweep.ask_tell import study_mode

MARKER = "kcal-state.json"
JOURNAL = "journal.log"
MAX_TEXT_BYTES = 1 << 20
"""A dataset's journal above this size is exported in parts of at most this size (:func:`split_journal`), so that
every file of a state is small text for git (a journal holds every trial's per-epoch curve: heart-disease's four
studies reach 1.4 MB)."""
RERUN_FILES = (
    layout.FINGERPRINT_FILE,
    layout.BEST_TRIAL_FILE,
)  # per <dataset>/<label>/; summary.csv is rebuilt
SEED_FILES = (layout.METRICS_FILE, layout.RUN_INFO_FILE, layout.CONFIG_FILE)  # per finished seed
HISTORY = layout.HISTORY_FILE  # per finished seed, with --history
# per finished seed, unless --no-predictions: the forecasts kcal reevaluate reads
PREDICTIONS = layout.PREDICTIONS_FILE
SWEEP_FILES = (
    f"{layout.sweep_folder('paper')}/{layout.BEST_FILE}",
    f"{layout.sweep_folder('pareto')}/{layout.BEST_FILE}",
    f"{layout.sweep_folder('pareto')}/{layout.FRONT_FILE}",
)  # per <dataset>/<objective>/


def root_storage(root: Path) -> optuna.storages.RDBStorage:
    """``<root>/sweeps.db``, opened as a sweep opens it (:func:`kcal.sweep.studies.open_storage`, ``sweep.yaml``'s
    settings)."""
    from kcal.sweep.studies import open_storage

    sweep = OmegaConf.load(Path(CONFIG_DIR) / "sweep.yaml").sweep
    sweep.storage = None
    return open_storage(OmegaConf.create({"root": str(root), "sweep": sweep}))


PREDICTIONS_TEXT = (
    "predictions.json"  # how a seed's predictions.npz travels: text, like every file of a state
)


def predictions_to_text(npz: Path, out: Path) -> None:
    """``predictions.npz`` as JSON: each array's dtype, shape and values (a float32 value written as the
    shortest decimal that reads back to it, so the arrays come back bit for bit)."""
    with np.load(npz) as arrays:
        data = {
            k: {
                "dtype": str(v.dtype),
                "shape": list(v.shape),
                "values": [
                    float(np.format_float_positional(x, unique=True)) if v.dtype.kind == "f" else int(x)
                    for x in v.reshape(-1)
                ],
            }  # fmt: skip
            for k, v in arrays.items()
        }
    out.write_text(json.dumps(data, separators=(",", ":")) + "\n")


def predictions_from_text(path: Path, out: Path) -> None:
    """The ``predictions.npz`` that :func:`predictions_to_text` wrote as ``path``."""
    data = json.loads(path.read_text())
    arrays = {k: np.asarray(v["values"], dtype=v["dtype"]).reshape(v["shape"]) for k, v in data.items()}
    np.savez(out, **arrays)


def journal(path: Path) -> JournalStorage:
    return JournalStorage(JournalFileBackend(str(path)))


def journal_part(k: int) -> str:
    """The file name of part ``k`` of an exported journal (part 0: ``journal.log``)."""
    return JOURNAL if k == 0 else f"journal-{k}.log"


def split_journal(path: Path, limit: int) -> list[Path]:
    """Cut the journal ``path`` at line ends into parts of at most ``limit`` bytes (a longer line: a part of its
    own), ``path`` itself the first; returns the parts."""
    chunks: list[list[bytes]] = [[]]
    size = 0
    for line in path.read_bytes().splitlines(keepends=True):
        if size + len(line) > limit and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(line)
        size += len(line)
    parts = [path.with_name(journal_part(k)) for k in range(len(chunks))]
    for part, chunk in zip(parts, chunks, strict=True):
        part.write_bytes(b"".join(chunk))
    return parts


def journal_parts(state_dir: Path, ds: str) -> list[Path]:
    """The parts of the exported journal of ``ds``, in order (none: no journal)."""
    parts = []
    while (state_dir / ds / journal_part(len(parts))).is_file():
        parts.append(state_dir / ds / journal_part(len(parts)))
    return parts


def readable_journal(parts: list[Path], tmp: Path, ds: str) -> JournalStorage:
    """A journal storage on the parts joined into one file in ``tmp`` (the backend writes lock files beside it)."""
    joined = tmp / f"{ds}.log"
    with open(joined, "wb") as dst:
        for part in parts:
            dst.write(part.read_bytes())
    return journal(joined)


def studies_of(storage, dataset: str) -> list[str]:
    return sorted(n for n in optuna.get_all_study_names(storage) if layout.dataset_of_study(n) == dataset)


def trial_counts(storage, names: list[str]) -> dict[str, int]:
    """The studies' trials by state (``complete``, ``running``, ...)."""
    counts: dict[str, int] = {}
    for name in names:
        for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False):
            counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    return counts


def running_by_mode(storage, names: list[str]) -> tuple[int, int]:
    """The studies' running trials: (of deterministic studies, of asynchronous ones)."""
    found = [0, 0]
    for name in names:
        study = optuna.load_study(study_name=name, storage=storage)
        found[study_mode(study) == "async"] += len(
            study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        )
    return found[0], found[1]


def running_note(own: int, running_async: int, when: str) -> str:
    """``; 2 running trial(s) trained again under their own numbers after the import``: what becomes of the
    trials running at export (:func:`requeue_running`): a deterministic study's (``own``) and an asynchronous
    study's (``running_async``); empty when none ran. ``when``: "after the import" or "on resume"."""
    parts = [f"{own} running trial(s) trained again under their own numbers {when}"] if own else []
    if running_async:
        parts.append(f"{running_async} running trial(s) of asynchronous studies failed and their parameters "
                     f"queued again {when}")  # fmt: skip
    return "".join(f"; {p}" for p in parts)


def state_files(dataset_dir: Path, history: bool, predictions: bool = True) -> list[Path]:
    """The portable files under ``<root>/<dataset>/``, relative to it."""
    out = [p for name in SWEEP_FILES for p in dataset_dir.glob(f"*/{name}")]
    out += [p for name in RERUN_FILES for p in dataset_dir.glob(f"*/{name}")]
    out += list(dataset_dir.glob(f"*/{layout.FINISHED_TRIAL_GLOB}"))
    for metrics in dataset_dir.glob(f"*/{layout.FINISHED_SEED_GLOB}"):
        names = (*SEED_FILES, *((PREDICTIONS,) if predictions else ()), *((HISTORY,) if history else ()))
        out += [metrics.parent / n for n in names if (metrics.parent / n).is_file()]
    return sorted(p.relative_to(dataset_dir) for p in out)


def path_state_files(paths: Path, predictions: bool) -> list[Path]:
    """The portable files under ``<root>/paths/<dataset>/``, relative to it: each path's table and record, each
    point's fingerprint, and each finished seed's files with its ``history.csv`` (module docstring)."""
    out = [*paths.glob("*.csv"), *paths.glob("*.json"), *paths.glob(f"*/*/{layout.FINGERPRINT_FILE}")]
    for metrics in paths.glob(f"*/*/{layout.FINISHED_SEED_GLOB}"):
        names = (*SEED_FILES, HISTORY, *((PREDICTIONS,) if predictions else ()))
        out += [metrics.parent / n for n in names if (metrics.parent / n).is_file()]
    return sorted(p.relative_to(paths) for p in out)


#: a CSV file (a seed's ``history.csv``, a path's table) is kept in a state as ``<name>.csv.json``
TABLE_TEXT_SUFFIX = ".json"


def table_to_text(csv_file: Path, out: Path) -> None:
    """A CSV file as JSON, its lines as strings, so that it reads back byte for byte (a state holds text that is
    not mistaken for data files: no ``.csv``)."""
    out.write_text(json.dumps({"lines": csv_file.read_text(encoding="utf-8").split("\n")}), encoding="utf-8")


def table_from_text(text_file: Path, out: Path) -> None:
    """The CSV file that :func:`table_to_text` wrote ``text_file`` from."""
    out.write_text("\n".join(json.loads(text_file.read_text(encoding="utf-8"))["lines"]), encoding="utf-8")


def copy_out(src: Path, files: list[Path], dest: Path) -> None:
    """Copy ``files`` (relative to ``src``) into ``dest``, a seed's ``predictions.npz`` and any CSV file as text."""
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        if rel.name == PREDICTIONS:
            predictions_to_text(src / rel, dest / rel.with_name(PREDICTIONS_TEXT))
        elif rel.suffix == ".csv":
            table_to_text(src / rel, dest / rel.with_name(rel.name + TABLE_TEXT_SUFFIX))
        else:
            shutil.copy2(src / rel, dest / rel)


def copy_in(src: Path, dest: Path, skip: Sequence[Path] = ()) -> int:
    """Copy every file under ``src`` (but ``skip``) into ``dest``, a seed's forecasts back as ``predictions.npz``;
    return the number of finished seeds copied."""
    n_seeds = 0
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.is_file() and path not in skip:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            if rel.name == PREDICTIONS_TEXT:
                predictions_from_text(path, dest / rel.with_name(PREDICTIONS))
            elif rel.name.endswith(".csv" + TABLE_TEXT_SUFFIX):
                table_from_text(path, dest / rel.with_name(rel.name[: -len(TABLE_TEXT_SUFFIX)]))
            else:
                shutil.copy2(path, dest / rel)
            n_seeds += is_seed_metrics(rel)
    return n_seeds


def export_paths(root: Path, state_dir: Path, ds: str, predictions: bool) -> int:
    """Replace ``<state_dir>/paths/<ds>/`` by the portable files of ``<root>/paths/<ds>/``; return its finished
    seeds (0 and nothing written when the root has no paths of ``ds``)."""
    src, dest = layout.paths_dir(root, ds), layout.paths_dir(state_dir, ds)
    shutil.rmtree(dest, ignore_errors=True)
    if not src.is_dir():
        return 0
    files = path_state_files(src, predictions)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{ds}.", dir=dest.parent))
    try:
        copy_out(src, files, staging)
        staging.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sum(is_seed_metrics(rel) for rel in files)


def is_seed_metrics(rel: Path) -> bool:
    """Whether ``rel`` (under a dataset's folder) is a finished seed's ``metrics.json``."""
    return rel.match(f"*/{layout.FINISHED_SEED_GLOB}")


def describe(studies: list[str], counts: dict[str, int], n_seeds: int, path_seeds: int = 0) -> str:
    trials = sum(counts.values())
    states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    paths = f", {path_seeds} finished seeds of regularisation paths" if path_seeds else ""
    return (f"{len(studies)} {'study' if len(studies) == 1 else 'studies'} ({trials} trials{': ' + states if states else ''}), "
            f"{n_seeds} finished seeds{paths}")  # fmt: skip


def read_marker(state_dir: Path) -> dict:
    path = state_dir / MARKER
    if not path.is_file():
        raise ConfigError(f"{state_dir} is not a kcal state (no {MARKER}); make one with "
                          "`kcal state export <root> <state_dir>`")  # fmt: skip
    return json.loads(path.read_text())


def export_state(root: Path, state_dir: Path, datasets: list[str] | None = None, history: bool = False,
                 predictions: bool = True) -> list[str]:  # fmt: skip
    """Write the portable state of ``root`` (its datasets, or ``datasets``) to ``state_dir``; return one
    line per dataset."""
    root, state_dir = Path(root), Path(state_dir)
    if not root.is_dir():
        raise ConfigError(f"no reproduction root at {root}")
    storage = root_storage(root) if layout.storage_file(root).is_file() else None
    in_storage = (
        {layout.dataset_of_study(n) for n in optuna.get_all_study_names(storage)} if storage else set()
    )
    known = set(dataset_names())
    for name in datasets or []:
        get_spec(name)  # a misspelt name: one line listing the valid ones
    with_paths = {d.name for d in (root / layout.PATHS_FOLDER).glob("*") if d.is_dir()}
    found = sorted(known & (in_storage | {d.name for d in root.iterdir() if d.is_dir()} | with_paths))
    if datasets:
        unknown = sorted(set(datasets) - set(found))
        if unknown:
            raise ConfigError(
                f"{root} holds no state of {', '.join(unknown)}; it holds: {', '.join(found) or 'none'}"
            )
        found = sorted(set(datasets))
    if not found:
        raise ConfigError(f"{root} holds no sweep study, seed rerun or regularisation path of any dataset")
    if state_dir.exists() and any(state_dir.iterdir()) and not (state_dir / MARKER).is_file():
        raise ConfigError(f"{state_dir} is not empty and not a kcal state (no {MARKER}); choose a new folder")
    state_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for ds in found:
        staging = Path(tempfile.mkdtemp(prefix=f".{ds}.", dir=state_dir))
        try:
            names = studies_of(storage, ds) if storage else []
            if names:
                target = journal(staging / JOURNAL)
                for name in names:
                    optuna.copy_study(from_study_name=name, from_storage=storage, to_storage=target)
            files = state_files(root / ds, history, predictions) if (root / ds).is_dir() else []
            copy_out(root / ds, files, staging)
            for lock in staging.glob(f"{JOURNAL}.lock*"):
                lock.unlink()
            if names and (staging / JOURNAL).stat().st_size > MAX_TEXT_BYTES:
                split_journal(staging / JOURNAL, MAX_TEXT_BYTES)
            shutil.rmtree(state_dir / ds, ignore_errors=True)
            staging.rename(state_dir / ds)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        path_seeds = export_paths(root, state_dir, ds, predictions)
        counts = trial_counts(storage, names) if names else {}
        written = [state_dir / ds, layout.paths_dir(state_dir, ds)]
        size = sum(p.stat().st_size for d in written for p in d.rglob("*") if p.is_file())
        n_seeds = sum(is_seed_metrics(rel) for rel in files)
        note = (
            running_note(*running_by_mode(storage, names), "after the import")
            if counts.get("running")
            else ""
        )
        lines.append(f"{ds}: {describe(names, counts, n_seeds, path_seeds)} -> {state_dir / ds} "
                     f"({size / 1024:.0f} KB){note}")  # fmt: skip
    marker = json.loads((state_dir / MARKER).read_text()) if (state_dir / MARKER).is_file() else {}
    kept = set(marker.get("datasets", ())) | set(found)
    (state_dir / MARKER).write_text(json.dumps({"format": 1, "kcal": kcal.__version__,
                                                "datasets": sorted(d for d in kept if (state_dir / d).is_dir())},
                                               indent=1) + "\n")  # fmt: skip
    return lines


def requeue_running(study: optuna.Study, storage: optuna.storages.RDBStorage) -> int:
    """The study's trials running at export: a deterministic study's stay as they are, asked and not told, and the
    resumed run trains them again under their own numbers (:mod:`kcal.sweep.ask_tell`); an asynchronous study's are
    failed and their parameters queued again (Optuna's retry of a trial whose heartbeat stopped: their workers ran
    on the machine the state came from). Their count."""
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if study_mode(study) == "deterministic":
        return len(running)
    retry = storage.get_heartbeat_stale_trial_callback()
    study_id = storage.get_study_id_from_name(study.study_name)
    for trial in running:
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        if storage.set_trial_state_values(trial_id, state=TrialState.FAIL) and retry is not None:
            retry(study, storage.get_trial(trial_id))
    return len(running)


def import_state(state_dir: Path, root: Path) -> list[str]:
    """Lay the state in ``state_dir`` into ``root``, which must hold none of its datasets; return one
    line per dataset."""
    state_dir, root = Path(state_dir), Path(root)
    datasets = list(read_marker(state_dir).get("datasets", ()))
    journals = {ds: parts for ds in datasets if (parts := journal_parts(state_dir, ds))}
    taken = [f"{root / ds}/" for ds in datasets if (root / ds).exists()]
    taken += [f"{layout.paths_dir(root, ds)}/" for ds in datasets
              if layout.paths_dir(state_dir, ds).is_dir() and layout.paths_dir(root, ds).exists()]  # fmt: skip
    storage = root_storage(root) if journals or layout.storage_file(root).is_file() else None
    existing = set(optuna.get_all_study_names(storage)) if storage else set()
    with tempfile.TemporaryDirectory() as tmp:  # read copies: the journal backend writes lock files
        sources = {}
        for ds, parts in journals.items():
            sources[ds] = readable_journal(parts, Path(tmp), ds)
        taken += [f"study {n}" for ds in sources for n in studies_of(sources[ds], ds) if n in existing]
        if taken:
            raise ConfigError(f"{root} already holds {', '.join(taken)}; import into a new root "
                              "(the state is laid into a root that has none of it)")  # fmt: skip
        lines = []
        for ds in datasets:
            names = studies_of(sources[ds], ds) if ds in sources else []
            requeued = [0, 0]  # running at export: of deterministic studies, of asynchronous ones
            for name in names:
                optuna.copy_study(from_study_name=name, from_storage=sources[ds], to_storage=storage)
                study = optuna.load_study(study_name=name, storage=storage)
                requeued[study_mode(study) == "async"] += requeue_running(study, storage)
            n_seeds = copy_in(state_dir / ds, root / ds, journals.get(ds, []))
            path_seeds = copy_in(layout.paths_dir(state_dir, ds), layout.paths_dir(root, ds))
            counts = trial_counts(storage, names) if names else {}
            note = running_note(*requeued, "on resume")
            lines.append(f"{ds}: {describe(names, counts, n_seeds, path_seeds)} -> {root / ds}{note}")
    return lines


class Parser(argparse.ArgumentParser):
    """argparse, reporting bad arguments in one line (exit status 2). ``--datasets`` takes every word after it, so
    ``export --datasets blog <root> <state_dir>`` reads the folders as datasets: a missing folder says so."""

    def error(self, message: str):
        export_folders = message.endswith(("are required: root, state_dir", "are required: state_dir"))
        hint = "; --datasets takes every word after it: put it after the folders" if export_folders else ""
        self.exit(2, f"{self.prog}: error: {message}{hint} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    top = Parser(
        prog="kcal state",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Move a reproduction to another machine: export a root's sweep studies and finished "
        "seeds as small text files (commit them), import them into a new root there, and resume with the "
        "same kcal reproduce command and root=<that root>.",
        epilog="examples:\n"
        "  kcal state export outputs/reproduce/full state\n"
        "  kcal state export outputs/reproduce/full state --datasets crime blog\n"
        "  kcal state import state outputs/reproduce/full",
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="{export,import}")
    exp = sub.add_parser("export", help="write a root's portable state to a folder",
                         description="Write <root>'s sweep studies (an Optuna journal per dataset) and finished "
                         "seed results (metrics.json, run.json, config.yaml, the fingerprints) to <state_dir>/"
                         "<dataset>/, and its regularisation paths' finished seeds to <state_dir>/paths/<dataset>/; "
                         "other datasets already in <state_dir> are kept.")  # fmt: skip
    exp.add_argument("root", type=Path, help="reproduction root, e.g. outputs/reproduce/full")
    exp.add_argument("state_dir", type=Path, help="folder to write (new, or an earlier export)")
    exp.add_argument("--datasets", nargs="+", metavar="DATASET", help="only these (default: all in root)")
    exp.add_argument("--history", action="store_true", help="also each seed's history.csv (per-epoch curves)")
    exp.add_argument("--no-predictions", dest="predictions", action="store_false",
                     help="leave out each seed's predictions.npz (its forecasts, which kcal reevaluate reads; "
                     "a large dataset's run: blog's 550 seeds hold ~95 MB)")  # fmt: skip
    imp = sub.add_parser("import", help="lay an exported state into a new root",
                         description="Copy <state_dir>'s studies into <root>/sweeps.db and its seed results "
                         "into <root>/<dataset>/; <root> must hold none of its datasets.")  # fmt: skip
    imp.add_argument("state_dir", type=Path, help="folder written by export")
    imp.add_argument("root", type=Path, help="reproduction root to resume in, e.g. outputs/reproduce/full")
    return top


@exits_on_user_error
def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.command == "export":
        lines = export_state(args.root, args.state_dir, args.datasets, args.history, args.predictions)
        print(*lines, f"commit {args.state_dir}; on the other machine: kcal state import "
              f"{args.state_dir} <root>", sep="\n")  # fmt: skip
    else:
        lines = import_state(args.state_dir, args.root)
        print(*lines, f"resume with the same kcal reproduce (or kcal sweep / kcal seeds) command and "
              f"root={args.root}", sep="\n")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
