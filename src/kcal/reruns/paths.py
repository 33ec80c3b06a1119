"""Regularisation paths: what each regulariser does when it acts, ``kcal paths dataset=heart-disease``.

The paper's selection switches the MMD term off; this asks what it does when it is on. The start is the selected
configuration of the dataset's **unregularised** objective (``xe`` for classes, ``nll`` for regression): the
published ``best/<dataset>__<objective>.json`` (``seeds_run.best_file``, by default under ``paths.published``).
From it, each regulariser of the task (``paths.regularisers``; ``paths.objectives`` picks some) is trained with
``objective.weight`` = λ for every λ of its grid (``paths.grids``), everything else fixed: architecture, batch
size and learning rate from the start, the regulariser's own parameters from ``configs/objective/<name>.yaml``
(the library's defaults: ``bandwidth_z: median``, the median squared distance between training rows). λ = 0, the
unregularised model, is trained once and shared by every path. The regulariser must come to dominate: while the
median share of the loss at a path's largest λ is below ``paths.dominant_share``, the path goes on half a decade
further (:func:`next_weight`), at most ``paths.max_extension`` points.

Every point is trained on seeds ``0 .. paths.n_seeds-1`` (vectorised, :func:`kcal.reruns.seeds.train_seeds`) into
``<root>/paths/<dataset>/<objective>/objective.weight=<λ>/seeds/seed<k>/`` (:mod:`kcal.core.layout`); finished seeds
are skipped and a point's seeds of another configuration are refused (:func:`kcal.sweep.fingerprint.check_seeds`),
so the command resumes where it stopped. Progress goes to stderr, one line per point (a point that went on from a
training snapshot also says how long it trained before the stop).

Several processes may run one dataset's paths at once (the same command, one a core, on the same root): a process
trains a point only while it holds the point's claim (:func:`kcal.core.layout.claim_file`, a lock file beside the
point's folder, :class:`filelock.FileLock`; the OS releases it when the process ends, killed or not; on a
filesystem without ``flock`` filelock falls back to a lock file that a killed process leaves behind: delete it). A point
another process holds is passed over: each process goes path by path through the points nobody holds, comes back
to a path once the other process has finished its points, and waits for one only when no path can go on without
it (``paths.wait: false``: it ends there instead, and the other process writes those paths; a core is then free for
the next dataset). Progress then counts the points every process finished. Per regulariser it writes, once its path is complete:

* ``<root>/paths/<dataset>/<objective>.csv``: the tidy columns of :mod:`kcal.reruns.seeds` (both flavours, without
  and with post-hoc recalibration) with ``weight`` (λ; 0 is the unregularised model) and ``reg_share`` (the median
  over seeds of the regulariser's share of the loss at the best epoch, ``train/reg_share`` of ``history.csv``:
  ``λ |reg| / |base|``);
* ``<root>/paths/<dataset>/<objective>.json``: how it was made (:func:`path_record`): the command, the commit, the
  start, the grid, the seeds, the resolved objective parameters (the bandwidths actually used), the kernels'
  check (:func:`kernel_check`) and, per point, the share's quartiles over seeds and the wall seconds and commits
  that trained its seeds, read from their ``run.json`` (:func:`trainings`: a process stopped before a path was
  complete loses neither).

``kcal report --paths <root> docs/results/full`` publishes them (:mod:`kcal.publish.questions.tradeoff`).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import hydra
import pandas as pd
import torch
from filelock import FileLock, Timeout
from omegaconf import DictConfig, OmegaConf, open_dict

from kcal.configs import CONFIG_DIR, CONFIG_PATH, choices
from kcal.core import layout
from kcal.core.errors import ConfigError, exits_on_config_error
from kcal.core.progress import Progress, cpu_note, duration
from kcal.core.schema import Schema, choice, flag, integer, items, number, refusal, text
from kcal.core.startup import checks_config
from kcal.core.storage_url import keeps_password_off_disk
from kcal.data import get_spec
from kcal.kernels import rbf
from kcal.reruns.seeds import SCHEMA as SEEDS_SCHEMA
from kcal.reruns.seeds import aggregate, best_config, train_seeds
from kcal.run.artifacts import checkout_commit, write_json_atomically
from kcal.run.snapshot import resumed_note, resumed_record, resumed_seconds
from kcal.sweep.fingerprint import check_seeds
from kcal.sweep.search import reg_share

BASE_OBJECTIVES = {"classification": "xe", "regression": "nll"}
"""The unregularised objective of each task, whose selected configuration every path starts from."""
KERNEL_ACTIVE = 1e-3
"""An off-diagonal x-kernel value above this counts as a pair the MMD term compares (:func:`kernel_check`)."""


# ---- the configs ----------------------------------------------------------------------------------------
def base_objective(dataset: str) -> str:
    """``xe`` for a classification dataset, ``nll`` for a regression one."""
    return BASE_OBJECTIVES[get_spec(dataset).task]


def regularisers(cfg: DictConfig) -> list[str]:
    """The objectives whose paths run: ``paths.objectives``, else the task's ``paths.regularisers``; each must have
    a grid and suit the task."""
    task = get_spec(cfg.dataset.name).task
    names = list(cfg.paths.objectives) if cfg.paths.objectives else list(cfg.paths.regularisers[task])
    valid = list(cfg.paths.regularisers[task])
    for name in names:
        if name not in valid:
            raise ConfigError(
                f"paths.objectives: {name} is not a regulariser of {task}; valid: {', '.join(valid)}"
            )
        if not cfg.paths.grids.get(name):
            raise ConfigError(
                f"paths.grids has no grid for {name}; give one, e.g. 'paths.grids.{name}=[1,10,100]'"
            )
    return names


def objective_configs() -> list[str]:
    return choices("objective")


#: the keys of ``paths.*`` (configs/paths.yaml)
PATHS_KEYS = Schema({
    "paths.n_seeds": integer(2),  # a standard error needs two seeds
    "paths.published": text(),
    "paths.objectives": items(choice(objective_configs, names="objective"), null="the task's paths.regularisers"),
    "paths.regularisers.*": items(choice(objective_configs, names="objective")),
    "paths.grids.*": items(number(0, above=True)),  # λ = 0 is always run
    "paths.dominant_share": number(0, above=True),
    "paths.max_extension": integer(0),
    "paths.wait": flag(),
    "paths.kernel_batches": integer(1),
}, relations=(refusal(lambda cfg: "paths" in cfg and regularisers(cfg)),))  # fmt: skip
#: what ``kcal paths`` checks before it starts (:mod:`kcal.core.startup`)
SCHEMA = SEEDS_SCHEMA | PATHS_KEYS


def start_file(cfg: DictConfig) -> Path:
    """``seeds_run.best_file``, else the published ``<paths.published>/best/<dataset>__<xe|nll>.json``."""
    given = cfg.seeds_run.get("best_file")
    base = base_objective(cfg.dataset.name)
    return Path(str(given)) if given else layout.published_best(cfg.paths.published, cfg.dataset.name, base)


def with_objective(cfg: DictConfig, name: str) -> DictConfig:
    """A resolved copy of ``cfg`` whose ``objective`` is ``configs/objective/<name>.yaml`` as written."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(out):
        out.objective = OmegaConf.load(Path(CONFIG_DIR) / "objective" / f"{name}.yaml")
    return OmegaConf.create(OmegaConf.to_container(out, resolve=True))


def start_config(cfg: DictConfig) -> tuple[DictConfig, dict]:
    """The unregularised selected configuration (resolved) and the record of the trial it comes from."""
    base = base_objective(cfg.dataset.name)
    plain = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    with open_dict(plain):
        plain.objective = OmegaConf.load(Path(CONFIG_DIR) / "objective" / f"{base}.yaml")
        plain.seeds_run.best_from = base
        plain.seeds_run.best_file = str(start_file(cfg))
        plain.seeds_run.use_best = True
    start, info = best_config(plain)
    start = OmegaConf.create(OmegaConf.to_container(start, resolve=True))
    start.trainer.progress_bar = False
    return start, {"best_file": str(start_file(cfg)), **info}


def point_config(start: DictConfig, objective: str, weight: float) -> DictConfig:
    """``start`` with ``objective`` and ``objective.weight = weight``."""
    out = with_objective(start, objective)
    out.objective.weight = float(weight)
    return out


# ---- the kernels ---------------------------------------------------------------------------------------------
def off_diagonal(gram: torch.Tensor) -> torch.Tensor:
    """The entries ``(i, j)``, ``i != j``, of a square matrix, flattened."""
    n = gram.shape[-1]
    return gram[~torch.eye(n, dtype=torch.bool, device=gram.device)]


def kernel_check(x: torch.Tensor, params: dict, batch_size: int, max_batches: int) -> dict:
    """Whether the resolved kernels of an objective can act, on the training rows ``x`` cut into consecutive
    batches of ``batch_size`` (at most ``max_batches``; training reshuffles them, so these are typical batches):

    * ``x``: the RBF x-kernel ``k(a, b) = exp(-||a - b||^2 / h)`` at ``h = params["bandwidth_z"]`` (an MMD
      objective): the mean and median of its off-diagonal values and their share above :data:`KERNEL_ACTIVE`.
      The MMD term compares a row with the others only through these; near 0 everywhere it is switched off;
    * ``y``: the y-kernel between two different one-hot classes ``exp(-2 / h_y)`` (near 1: nearly constant, the
      term shrinks by ``1 - k``), or between two standardised targets at their mean squared distance 2.

    Empty for an objective without an x-kernel (MMCE, ECE-KDE: their kernels act on the confidence and on the
    simplex, with their own bandwidth)."""
    out: dict = {}
    h = params.get("bandwidth_z")
    if isinstance(h, int | float) and params.get("kernel_z", "rbf") == "rbf":
        rows = x.to(torch.float64)
        batches = [b for b in torch.split(rows, max(2, int(batch_size)))[:max_batches] if len(b) > 1]
        values = torch.cat([off_diagonal(rbf(b, b, bandwidth=float(h))) for b in batches])
        out["x"] = {"bandwidth": float(h), "batches": len(batches), "mean": float(values.mean()),
                    "median": float(values.median()), f"share_above_{KERNEL_ACTIVE:g}":
                    float((values > KERNEL_ACTIVE).double().mean())}  # fmt: skip
    h_y = params.get("bandwidth_y")
    if isinstance(h_y, int | float) and params.get("kernel_y", "rbf") == "rbf":
        out["y"] = {"bandwidth": float(h_y), "at_2": math.exp(-2.0 / float(h_y))}
    return out


# ---- one point -----------------------------------------------------------------------------------------------
def shares(dirs: list[Path]) -> list[float]:
    """Each finished seed's regulariser share at its best epoch (``reg_share_at_best``)."""
    out = []
    for d in dirs:
        path = layout.metrics_file(d)
        if path.is_file():
            best = json.loads(path.read_text()).get("best_epoch")
            share = reg_share(d, best).get("reg_share_at_best")
            if share is not None and math.isfinite(share):
                out.append(float(share))
    return out


def quartiles(values: list[float]) -> dict:
    """``{median, q25, q75}`` of ``values`` (NaN when empty)."""
    if not values:
        return {"median": math.nan, "q25": math.nan, "q75": math.nan}
    if len(values) == 1:
        return {"median": values[0], "q25": values[0], "q75": values[0]}
    q25, median, q75 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": median, "q25": q25, "q75": q75}


def top_share(points: list[Point]) -> float:
    """The median share of the regulariser at the path's largest λ (0 while that point has no finished seed)."""
    share = quartiles(shares(points[-1].dirs))["median"]
    return share if math.isfinite(share) else 0.0


def next_weight(weight: float) -> float:
    """The next λ of a grid half a decade apart, on the 1-3-10 pattern: ``3 -> 10``, ``10 -> 30``, ``0.3 -> 1``."""
    decade = 10.0 ** math.floor(math.log10(weight))
    return float(f"{(3.0 if weight / decade < 2 else 10.0) * decade:.3g}")


class Point:
    """One (objective, λ) of a dataset's paths: its folder and seeds."""

    def __init__(self, paths: Path, objective: str, weight: float, seeds: list[int]):
        self.objective, self.weight = objective, float(weight)
        self.dir = layout.path_point_dir(paths, objective, weight)
        self.dirs = [layout.seed_dir(self.dir, k) for k in seeds]
        self.seeds = seeds

    def pending(self) -> list[int]:
        return [k for k, d in zip(self.seeds, self.dirs, strict=True) if not layout.is_finished(d)]

    def label(self) -> str:
        return f"{self.objective} λ={self.weight:g}"


def train_point(point: Point, run_cfg: DictConfig, start: dict, cfg: DictConfig) -> None:
    """Train the point's pending seeds (its fingerprint checked first)."""
    point.dir.mkdir(parents=True, exist_ok=True)
    check_seeds(point.dir, run_cfg, start, cfg)
    pending = point.pending()
    if pending:
        train_seeds(run_cfg, pending, [point.dirs[point.seeds.index(k)] for k in pending], cfg)


def point_rows(point: Point, dataset: str, objective: str) -> pd.DataFrame:
    """The point's tidy summary (:func:`kcal.reruns.seeds.aggregate`) with ``weight`` and ``reg_share``."""
    rows = aggregate(point.dirs, dataset, objective)
    rows.insert(2, "weight", point.weight)
    rows["reg_share"] = quartiles(shares(point.dirs))["median"] if point.weight > 0 else 0.0
    return rows


# ---- the driver ------------------------------------------------------------------------------------------------
def say(dataset: str, text: str) -> None:
    print(f"[paths {dataset}] {text}", file=sys.stderr, flush=True)


def earlier_commits(out: Path, names: list[str]) -> dict[tuple[str, float], list[str]]:
    """The commits the records of the paths ``names`` (in ``out``) name for each point, by (objective, λ), λ = 0
    under the unregularised objective every path shares; a record that does not read as one is passed over (it is
    written again). They stand for seeds whose ``run.json`` records no commit (trained before it did)."""
    commits: dict[tuple[str, float], list[str]] = {}
    for name in names:
        try:
            record = json.loads(layout.path_record(out, name).read_text())
            points = [(float(p["weight"]), list(p.get("commits", []))) for p in record["points"]]
        except (OSError, ValueError, TypeError, KeyError):
            continue
        for weight, named in points:
            key = (record["base"] if weight == 0 else name, weight)
            commits[key] = [*commits.get(key, []), *named]
    return commits


def trainings(point: Point) -> tuple[float, list[str], bool]:
    """The wall seconds the point's finished seeds took to train, the commits that trained them, and whether some
    seed's ``run.json`` records no commit, read from each seed's ``run.json`` (:mod:`kcal.run.artifacts`),
    whichever process trained them, stopped or not: a stack of seeds (``vectorized``) is counted once, at its
    ``chunk_train_seconds`` (the fit; preparing the data and evaluating are not in it)."""
    seconds, stacks, commits, unknown = 0.0, set(), set(), False
    for d in point.dirs:
        info_file = d / layout.RUN_INFO_FILE
        if not layout.is_finished(d) or not info_file.is_file():
            continue
        info = json.loads(info_file.read_text())
        stack = info.get("vectorized")
        if stack is None:
            seconds += float(info.get("train_seconds", 0.0))
        elif (key := (tuple(stack["seeds"]), stack["chunk_train_seconds"])) not in stacks:
            stacks.add(key)
            seconds += float(stack["chunk_train_seconds"])
        if info.get("commit"):
            commits.add(info["commit"])
        else:
            unknown = True
    return seconds, sorted(commits), unknown


def distinct_commits(commits: list[str]) -> list[str]:
    """The commits, sorted, each once: an abbreviation of another listed (git's short hashes grow with the
    repository: ``6659ffbd`` and ``6659ffbdd`` are one commit) gives way to the longer."""
    unique = set(commits)
    return sorted(c for c in unique if not any(d != c and d.startswith(c) for d in unique))


def point_entry(point: Point, earlier: list[str]) -> dict:
    """A point of a path's record: its finished seeds, the share's quartiles over seeds at the best epoch, and the
    wall seconds and commits of the trainings of its seeds (:func:`trainings`); ``earlier``: the commits the
    dataset's records named for it before (:func:`earlier_commits`), which stand in only when some seed's
    ``run.json`` records none."""
    seconds, commits, unknown = trainings(point)
    commits = distinct_commits([*commits, *(earlier if unknown else [])])
    return {"weight": point.weight, "finished": len(point.seeds) - len(point.pending()),
            "reg_share": quartiles(shares(point.dirs)) if point.weight > 0 else None,
            "train_seconds": round(seconds, 3), "commits": commits}  # fmt: skip


def path_record(cfg: DictConfig, objective: str, start: dict, points: list[dict], params: dict,
                kernels: dict, commit: str) -> dict:  # fmt: skip
    """The ``<objective>.json`` record of one path (module docstring); ``points``: :func:`point_entry` each;
    ``commit``: the checkout's of the run that writes it (each point lists the commits that trained its seeds)."""
    return {
        "dataset": cfg.dataset.name, "objective": objective, "base": base_objective(cfg.dataset.name),
        "command": " ".join(["kcal paths", *sys.argv[1:]]), "commit": commit,
        "written": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "start": start, "grid": [p["weight"] for p in points], "seeds": int(cfg.paths.n_seeds),
        "grid_config": list(cfg.paths.grids[objective]), "dominant_share": float(cfg.paths.dominant_share),
        "objective_params": params, "kernels": kernels, "points": points,
    }  # fmt: skip


def run_paths(cfg: DictConfig) -> dict[str, Path]:
    """Train every pending point of the dataset's paths, λ = 0 first, then path by path; each path's table and
    record are written as soon as its last point is trained (an interrupted run leaves the finished paths written).
    Points another process holds are passed over and come back to, or with ``paths.wait: false`` left to it once
    they are all that is left (module docstring). Returns the tables written, by objective."""
    dataset = cfg.dataset.name
    names = regularisers(cfg)
    n_seeds = int(cfg.paths.n_seeds)
    seeds = list(range(n_seeds))
    start, info = start_config(cfg)
    commit = checkout_commit()  # of the code that trains, read before any point is
    out = layout.paths_dir(cfg.root, dataset)
    zero = Point(out, base_objective(dataset), 0.0, seeds)
    paths = {name: [zero, *(Point(out, name, w, seeds) for w in cfg.paths.grids[name])] for name in names}
    todo = [zero, *(p for pts in paths.values() for p in pts[1:])]
    left = [p for p in todo if p.pending()]
    say(dataset, f"start: {info['best_file']} (study {info.get('study')}, trial {info.get('trial')}); "
                 f"{len(todo)} points x {n_seeds} seeds, {len(todo) - len(left)} finished, {len(left)} to train; "
                 f"writing to {out}")  # fmt: skip
    # progress counts seeds, not points: a point a stopped run left half trained is half a point's work
    seeds_left = {(p.objective, p.weight): len(p.pending()) for p in todo}
    progress = Progress(sum(seeds_left.values()), "paths")
    counted = {(p.objective, p.weight) for p in todo if not p.pending()}
    told: set[Path] = set()  # the points said to be another process's (said once)

    def train(point: Point, wait: bool) -> bool:
        """Train the point's pending seeds under its claim; False when another process holds it and not ``wait``."""
        if not point.pending():
            return True
        claim = take_claim(point, wait, dataset, told)
        if claim is None:
            return False
        try:
            if not point.pending():  # another process finished it while this one waited
                return True
            t0, cpu, pending = time.perf_counter(), time.process_time(), point.pending()
            run_cfg = point_config(start, point.objective, point.weight)
            train_point(point, run_cfg, info, cfg)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu
        finally:
            claim.release()
        finished = [p for pts in paths.values() for p in pts if not p.pending()]  # this process's and others'
        new = {(p.objective, p.weight) for p in finished} - counted
        counted.update(new)
        elsewhere = f" (+{len(new) - 1} by another process)" if len(new) > 1 else ""
        trained = [point.dirs[point.seeds.index(k)] for k in pending]
        line = (f"[paths {dataset}] {point.label()}: {len(pending)} seeds in {duration(seconds)}{cpu_note(cpu)}"
                f"{resumed_note(resumed_record(trained[0]))}{elsewhere}")  # fmt: skip
        progress.advance(sum(seeds_left.get(k, n_seeds) for k in new), line, "seeds", seconds, cpu=cpu,
                         before=resumed_seconds(trained))  # fmt: skip
        return True

    base = {name: len(points) for name, points in paths.items()}

    def complete(name: str, wait: bool) -> bool:
        """Train the path's points, extend it while the regulariser does not dominate; False when a point another
        process holds stops it (and not ``wait``)."""
        points = paths[name]
        if not all([train(point, wait) for point in points]):  # a list: every point nobody holds trains
            return False
        dominant = float(cfg.paths.dominant_share)
        while len(points) - base[name] < int(cfg.paths.max_extension) and top_share(points) < dominant:
            points.append(Point(out, name, next_weight(points[-1].weight), seeds))
            if points[-1].pending():
                seeds_left[(name, points[-1].weight)] = len(points[-1].pending())
                progress.total += seeds_left[(name, points[-1].weight)]
            else:  # finished before this run, or by another process before this one came to it: not new work
                counted.add((name, points[-1].weight))
            say(dataset, f"{name}: share {top_share(points[:-1]):.2g} at λ={points[-2].weight:g}, below "
                         f"{dominant:g}: the path goes on to λ={points[-1].weight:g}")  # fmt: skip
            if not train(points[-1], wait):
                return False
        return True

    train(zero, wait=False)
    written: dict[str, Path] = {}
    waiting = list(paths)
    while waiting:  # one process: a single round, path by path; beside others: until their points are done
        for name in waiting:
            if complete(name, wait=False):
                written[name] = write_path(cfg, name, paths[name], start, info, commit)
                say(dataset, f"{name}: {written[name]} and {layout.path_record(out, name).name}")
        if all(name not in written for name in waiting):  # every path waits for another process
            if not cfg.paths.wait:  # it writes them once its points are done
                say(dataset, f"every point left is another process's; ending without waiting (that process writes "
                             f"{', '.join(waiting)})")  # fmt: skip
                break
            complete(waiting[0], wait=True)  # wait on one
        waiting = [name for name in waiting if name not in written]
    progress.finish(f"[paths {dataset}] {1 + sum(len(points) - 1 for points in paths.values())} points "
                    + ("finished" if not waiting else "finished or another process's"))  # fmt: skip
    return written


def take_claim(point: Point, wait: bool, dataset: str, told: set[Path]) -> FileLock | None:
    """The point's claim, held (:func:`kcal.core.layout.claim_file`); None when another process holds it and not
    ``wait``, else wait until it lets go. ``told``: the points already said to be held (said once each)."""
    path = layout.claim_file(point.dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    claim = FileLock(path)
    try:
        claim.acquire(timeout=0)
    except Timeout:
        if not wait:
            if point.dir not in told:
                say(dataset, f"{point.label()}: another process trains it ({path}); on to the next point")
                told.add(point.dir)
            return None
        say(dataset, f"{point.label()}: waiting for the process that trains it ({path})")
        claim.acquire()
    return claim


def write_path(cfg: DictConfig, name: str, points: list[Point], start: DictConfig, info: dict,
               commit: str) -> Path:  # fmt: skip
    """Write one finished path's table and record (module docstring); return the table's path."""
    out = layout.paths_dir(cfg.root, cfg.dataset.name)
    table = pd.concat([point_rows(p, cfg.dataset.name, name) for p in points], ignore_index=True)
    table_path, record_path = layout.path_table(out, name), layout.path_record(out, name)
    prep = prepare_point(point_config(start, name, points[1].weight))
    kernels = kernel_check(prep.data.train.x, prep.objective.params, int(start.trainer.batch_size),
                           int(cfg.paths.kernel_batches))  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    with FileLock(layout.claim_file(record_path)):  # another process may write the same path: one at a time
        task = get_spec(cfg.dataset.name).task
        earlier = earlier_commits(out, list(cfg.paths.regularisers[task]))  # each written whole: atomically
        entries = [point_entry(p, earlier.get((p.objective, p.weight), [])) for p in points]
        table.to_csv(table_path, index=False)
        record = path_record(cfg, name, info, entries, prep.objective.params, kernels, commit)
        # whole or absent: the other paths' writers read it
        write_json_atomically(record_path, record, default=str)
    return table_path


def prepare_point(run_cfg: DictConfig):
    """The point's resolved run (:func:`kcal.run.setup.prepare`): its data and the objective's parameters as
    training resolves them (``median`` bandwidths as numbers)."""
    from kcal.run.setup import prepare

    return prepare(run_cfg)


@keeps_password_off_disk
@checks_config("paths", SCHEMA)
@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="paths")
@exits_on_config_error
def main(cfg: DictConfig) -> None:
    written = run_paths(cfg)
    for name, path in written.items():
        table = pd.read_csv(path)
        shown = table[(table.flavour == "exact") & (table.recalibrator == "none")]
        metrics = ["acc", "ece"] if "acc" in set(shown.metric) else ["nll", "qce", "dce"]
        print(f"{name}:\n" + shown[shown.metric.isin(metrics)].pivot_table(
            index="weight", columns="metric", values="mean").to_string())  # fmt: skip
    print(f"paths: {layout.paths_dir(cfg.root, cfg.dataset.name)}")


if __name__ == "__main__":
    main()
