"""What a reproduction's pieces of work cost, in CPU seconds (the wall time of a piece with a core of its own):
one trial of a study, one chunk of k seeds.

The predictions are measured times:

* a profile with a published reproduction (``full``: ``kcal/resources/results/full/studies.csv``): a study's
  trial hours over its trials; a chunk of :data:`SEEDS_PER_CHUNK_FULL` seeds, its mean trial times the median,
  over the published studies, of the time from a sweep's end to its last seed over that study's mean trial
  (one number for all: a study resumed in a later session shows the pause in its own). These are wall
  times of two workers on the 2-core machine, mostly alone on it, so close to CPU seconds;
* otherwise a recorded run of the profile (``kcal/resources/timings.csv``, one row per (profile, dataset,
  label): its trials' and seed chunks' mean CPU seconds and the chunks' mean seeds, and how they were measured);
* a profile measured in neither is scaled from the measured profile of the nearest epoch cap: a trial's
  :data:`FIXED_S` seconds outside its epochs stay, the rest scales with the epoch cap (``trainer.max_epochs``)
  and the training rows (``dataset.max_train_rows``).

An objective measured in no profile takes a measured objective of the same dataset times the ratio of their
regularisers' costs (:data:`REGULARISER_COST`; Table 6's draws :data:`DRAWS_COST`); a dataset measured nowhere
takes crime's times its training rows over crime's. A chunk of k seeds costs the measured chunk times
(1 + k) / (1 + k̄), k̄ the measured chunk's seeds (50 vectorised seeds train in about 10 times a single run's
time, not 50).

The reproduction refines all of this as its pieces finish (:class:`kcal.core.progress.Forecast`); the
predictions matter most before the first piece of each kind has finished, e.g. a blog trial's cost against
a crime trial's in a reproduction's first minute.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from datetime import datetime
from functools import cache

from omegaconf import DictConfig, OmegaConf

from kcal.configs import CONFIG_DIR
from kcal.core import layout
from kcal.data import get_spec
from kcal.data.splits import split_sizes

REGULARISER_COST = {"mmd": 1.6, "mmce": 1.6, "kde": 2.6}
"""A trial with each calibration regulariser costs about this many trials without one: the geometric
mean, over the four classification datasets run at the full budget (heart-disease, breast-cancer,
dry-bean, online-shoppers), of the study's trial hours over XE's (``studies.csv``; for online-shoppers
its complete trials only, as trials stopped by a session's end count the pause there): XE + MMD 2.5,
1.8, 0.92, 1.6; XE + MMCE 3.3, 0.72, 2.8, 1.1; XE + ECE-KDE 5.6, 1.5, 3.0, 1.9. The per-epoch costs
alone (``kcal.bench.speed``: MMD 1.4-1.7) are mixed with how long the selected configurations train, so one
dataset's ratio can be off by 2x either way; ECE-KDE's bandwidth selection grows with the batch size."""

DRAWS_COST = 1.0 / 40
"""A regression MMD with M forecast draws costs ``1 + (M - 10) * DRAWS_COST`` times one with the default
10 (Table 6's reruns; fewer draws count as 10): fitted to the 50-seed stack epochs of blog that ``python -m
kcal.bench.speed --estimate-only --estimate-datasets blog`` measured on ``d073cab``, NLL 9.8 s, M = 10 15.5 s,
50 31.9 s, 100 47.9 s, 200 76.0 s (this rule: 15.5, 31, 50, 89; the regulariser's (M, n, n) kernel
tensors grow with M)."""

FIXED_S = 0.5
"""CPU seconds of a trial outside its epochs (its start, data, evaluation, writing): the shortest crime trials
of the recorded quick run (``timings.csv``) took under 1 s of CPU with their few epochs."""


SEED_SIZE = 1.0
"""A chunk of k seeds costs a measured chunk of k̄ seeds times ``(SEED_SIZE + k) / (SEED_SIZE + k̄)``: the
stack's epochs and evaluations grow with its seeds, its start and data do not (a quick run's chunks of 2 and
3 seeds and the full run's of 25 take about 1.5 and 10 of their study's mean trials)."""

SEEDS_PER_CHUNK_FULL = 25
"""The published ``full`` studies' 50 seeds ran as two chunks of 25 (``reproduce.jobs=2`` on 2 cores)."""


@dataclass(frozen=True)
class Measured:
    """One (profile, dataset, label)'s measured mean seconds: a trial, and a chunk of ``chunk_seeds`` seeds."""

    trial_s: float | None
    chunk_s: float | None
    chunk_seeds: float


def profile_epochs(profile: str) -> int:
    """``trainer.max_epochs`` of ``configs/profile/<profile>.yaml`` (the trainer's default where it sets none)."""
    cfg = OmegaConf.load(f"{CONFIG_DIR}/profile/{profile}.yaml")
    default = OmegaConf.load(f"{CONFIG_DIR}/trainer/default.yaml")
    return int(OmegaConf.select(cfg, "trainer.max_epochs", default=default.max_epochs))


@cache
def published(profile: str) -> dict[tuple[str, str], Measured]:
    """(dataset, objective) -> measured times of the published ``profile`` reproduction (empty: none)."""
    path = layout.published_data(profile) / layout.STUDIES_FILE
    if not path.is_file():
        return {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    trial = {}
    seeds_ratio = []
    for r in rows:
        n = sum(int(r[k] or 0) for k in ("complete", "failed", "not_counted"))
        if not n or not float(r["trial_hours"] or 0):
            continue
        trial[r["dataset"], r["objective"]] = float(r["trial_hours"]) * 3600 / n
        if r["sweep_end"] and r["seeds_end"]:
            wall = (_time(r["seeds_end"]) - _time(r["sweep_end"])).total_seconds()
            if wall > 0:
                seeds_ratio.append(wall / trial[r["dataset"], r["objective"]])
    in_trials = statistics.median(seeds_ratio) if seeds_ratio else 10.0
    return {key: Measured(t, t * in_trials, SEEDS_PER_CHUNK_FULL) for key, t in trial.items()}


def _time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S")


@cache
def recorded(profile: str) -> dict[tuple[str, str], Measured]:
    """(dataset, label) -> measured times of ``profile`` in ``kcal/resources/timings.csv`` (empty: none)."""
    path = layout.resources_dir() / layout.TIMINGS_FILE
    out = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["profile"] == profile:
                number = {k: float(r[k]) if r[k] else None for k in ("trial_s", "chunk_s", "chunk_seeds")}
                out[r["dataset"], r["label"]] = Measured(
                    number["trial_s"], number["chunk_s"], number["chunk_seeds"] or 1.0
                )
    return out


def measured(profile: str) -> dict[tuple[str, str], Measured]:
    """The measured times of ``profile``: its published reproduction's, else its recorded run's."""
    return published(profile) or recorded(profile)


def reference(profile: str) -> tuple[str, dict[tuple[str, str], Measured]]:
    """``profile`` itself when it is measured, else the measured profile of the nearest epoch cap."""
    own = measured(profile)
    if own:
        return profile, own
    with open(layout.resources_dir() / layout.TIMINGS_FILE, newline="") as f:
        names = {r["profile"] for r in csv.DictReader(f)}
    names |= {p for p in ("full",) if published(p)}
    epochs = profile_epochs(profile)
    best = min(sorted(names), key=lambda p: abs(profile_epochs(p) - epochs))
    return best, measured(best)


def regulariser_factor(cfg: DictConfig) -> float:
    """What the objective's regulariser (and its number of draws) multiplies a trial's epochs by."""
    reg = cfg.objective.get("regularizer")
    if not reg or not float(cfg.objective.weight):
        return 1.0
    draws = cfg.objective.get("params", {}).get("num_samples") if reg == "mmd" else None
    if draws is None or get_spec(cfg.dataset.name).task != "regression":  # classes: no draws
        draws = 10
    return REGULARISER_COST[reg] * (1.0 + max(int(draws) - 10, 0) * DRAWS_COST)


def full_rows(dataset: str) -> int:
    return split_sizes(get_spec(dataset).n_used)[0]


def rows(cfg: DictConfig) -> int:
    cap = cfg.dataset.get("max_train_rows")
    return min(full_rows(cfg.dataset.name), int(cap)) if cap else full_rows(cfg.dataset.name)


@dataclass(frozen=True)
class Prediction:
    """A stage's predicted seconds: one trial, and a chunk of ``chunk_seeds`` seeds."""

    trial_s: float
    chunk_s: float
    chunk_seeds: float

    def chunk(self, k: int) -> float:
        """A chunk of ``k`` seeds."""
        return self.chunk_s * (SEED_SIZE + k) / (SEED_SIZE + self.chunk_seeds)


def predict(cfg: DictConfig, label: str | None = None) -> Prediction:
    """The predicted seconds of a trial of ``cfg``'s study and of a chunk of its seed rerun ``label`` (default
    the objective's own; ``nll_mmd@samples=100`` for a Table 6 rerun) under ``cfg``'s profile."""
    profile = str(cfg.get("profile_name") or "full")
    ref, table = reference(profile)
    dataset, objective = cfg.dataset.name, str(cfg.objective.name)
    label = label or objective
    trial = lookup(table, cfg, objective, "trial_s")
    chunk = lookup(table, cfg, label, "chunk_s")
    own = table.get((dataset, label)) or table.get((dataset, objective))
    sizes = [m.chunk_seeds for m in table.values() if m.chunk_s is not None]
    seeds = own.chunk_seeds if own is not None else statistics.median(sizes)
    if ref != profile:  # scaled by the epoch cap and the training rows
        scale = int(cfg.trainer.max_epochs) / profile_epochs(ref) * rows(cfg) / full_rows(dataset)
        trial = FIXED_S + max(trial - FIXED_S, 0.0) * scale
        chunk = FIXED_S + max(chunk - FIXED_S, 0.0) * scale
    return Prediction(trial, chunk, seeds)


def lookup(table: dict[tuple[str, str], Measured], cfg: DictConfig, label: str, field: str) -> float:
    """The measured ``field`` (``trial_s``, ``chunk_s``) of (``cfg``'s dataset, ``label``); else that of a
    measured objective, the label's own first, of the same dataset, else of crime (else of any dataset) times
    the training rows' ratio; times the regularisers' ratio (:func:`regulariser_factor`) in both cases."""
    dataset = cfg.dataset.name
    own = table.get((dataset, label))
    if own is not None and getattr(own, field) is not None:
        return getattr(own, field)
    known = [(ds, obj, getattr(m, field)) for (ds, obj), m in table.items()
             if getattr(m, field) is not None and not layout.is_variant(obj)]  # fmt: skip
    if not known:
        raise LookupError(f"no measured {field} at all")
    same = [k for k in known if k[0] == dataset] or known
    base = label.split("@", 1)[0]
    ds, obj, seconds = min(same, key=lambda k: (k[1] != base, k[0] != "crime", k[0], k[1]))
    return seconds / objective_factor(obj, ds) * regulariser_factor(cfg) * full_rows(dataset) / full_rows(ds)


def objective_factor(objective: str, dataset: str) -> float:
    """:func:`regulariser_factor` of the config ``objective`` as it stands in ``configs/objective/``."""
    obj = OmegaConf.load(f"{CONFIG_DIR}/objective/{objective}.yaml")
    return regulariser_factor(
        OmegaConf.create({"objective": OmegaConf.to_container(obj), "dataset": {"name": dataset}})
    )
