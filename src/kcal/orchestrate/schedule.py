"""What a reproduction's pool runs next, in the plan's order: the ordering of its tasks, apart from the
processes that run them (:mod:`kcal.orchestrate.dispatch`) and from what a lost task costs
(:mod:`kcal.orchestrate.recovery`).

A :class:`Schedule` holds the plan's stages (a seed rerun each; the first stage of a (dataset, objective)
owns its sweep). Seed chunks of the studies that finished go first; then the next asked trial of the study with the
most work left that has one. A study is asked for its next batch (:func:`kcal.sweep.ask_tell.next_batch`)
only once none of its trials is queued or in training, so its trials are those of the deterministic sweep
whatever the number of workers; this process asks and tells them all. Of the studies, the one with the most
predicted trial seconds left goes first (:meth:`Schedule.by_work_left`): its trials are the run's critical path. A finished study writes its
``best.json`` (:func:`kcal.sweep.search.finish_study`) and releases its stages' seed chunks; a rerun whose
last chunk came back writes its ``summary.csv`` (:func:`kcal.reruns.seeds.summarize`).
"""

from __future__ import annotations

import sys
from collections import Counter, deque
from dataclasses import dataclass, field
from functools import cached_property

import optuna
from omegaconf import DictConfig, OmegaConf
from optuna.trial import TrialState

from kcal.core import layout
from kcal.core.errors import ConfigError
from kcal.orchestrate.costs import Prediction, predict
from kcal.reruns.seeds import chunks, plan_line, seed_dirs, seed_plan, summarize
from kcal.sweep.ask_tell import Outcome, next_batch, sweep_mode, tell
from kcal.sweep.search import finish_study
from kcal.sweep.search_space import search_space
from kcal.sweep.studies import COUNTED_FAILURES, STATUS, StorageCache, counted, open_checked_study


@dataclass
class Stage:
    """One seed rerun of the plan; ``sweeps``: it also owns the sweep of its (dataset, objective)."""

    dataset: str
    label: str
    cfg: DictConfig
    sweeps: bool

    @property
    def study_key(self) -> tuple[str, str]:
        return self.dataset, str(self.cfg.seeds_run.best_from)

    @cached_property
    def prediction(self) -> Prediction:
        """Its predicted seconds of a trial and of a seed chunk (:func:`kcal.orchestrate.costs.predict`)."""
        return predict(self.cfg, self.label)

    def piece(self, family: str, n: int) -> tuple[tuple[str, str, str], float]:
        """(kind, predicted seconds) of ``n`` of its study's trials (``family="trial"``) or of a chunk of ``n``
        of its seeds (``"seeds"``): what :class:`kcal.core.progress.Progress` weighs and forecasts."""
        if family == "trial":
            return ("trial", self.dataset, str(self.cfg.seeds_run.best_from)), n * self.prediction.trial_s
        return ("seeds", self.dataset, self.label), self.prediction.chunk(n)


@dataclass(eq=False)
class Task:
    """One unit of work for a worker: trial ``number`` of ``stage``'s study, or the chunk ``seeds`` of
    ``stage``'s rerun (with the resolved configs a worker trains them from)."""

    kind: str
    stage: Stage
    number: int | None = None
    seeds: list[int] = field(default_factory=list)
    containers: tuple[dict, dict] | None = None

    def piece(self) -> tuple[tuple[str, str, str], float]:
        """What :class:`kcal.core.progress.Progress` weighs it as."""
        return (
            self.stage.piece("trial", 1)
            if self.kind == "trial"
            else self.stage.piece("seeds", len(self.seeds))
        )

    def span(self) -> str:
        """``trial #3 of crime/nll`` or ``seeds 0-9 of crime/nll``: what it is, in a line."""
        what = f"{self.stage.dataset}/{self.stage.label}"
        if self.kind == "trial":
            return f"trial #{self.number} of {self.stage.study_key[0]}/{self.stage.study_key[1]}"
        seeds = f"seed {self.seeds[0]}" if len(self.seeds) == 1 else f"seeds {self.seeds[0]}-{self.seeds[-1]}"
        return f"{seeds} of {what}"


def counts(trial: optuna.trial.FrozenTrial) -> int:
    """1 when a finished trial uses up a slot of its study's ``sweep.n_trials`` (:func:`kcal.sweep.studies.counted`)."""
    return int(trial.state in (TrialState.COMPLETE, TrialState.PRUNED)
               or trial.user_attrs.get(STATUS) in COUNTED_FAILURES)  # fmt: skip


class Schedule:
    """The plan's tasks in order (the module docstring); ``jobs``: the pool's workers a rerun's seeds are split
    over (:func:`kcal.reruns.seeds.chunks`)."""

    def __init__(self, stages: list[Stage], jobs: int):
        self.stages, self.jobs = stages, jobs
        self.owners = {s.study_key: s for s in stages if s.sweeps}
        storages = StorageCache()  # the studies of a root share its storage: opened once
        self.studies = {key: open_checked_study(s.cfg, storages(s.cfg)) for key, s in self.owners.items()}
        self.spaces = {key: search_space(s.cfg) for key, s in self.owners.items()}
        self.containers = {key: OmegaConf.to_container(s.cfg, resolve=True) for key, s in self.owners.items()}
        self.trials: dict[tuple[str, str], deque[Task]] = {key: deque() for key in self.owners}
        self.in_flight: Counter = Counter()
        self.seed_tasks: deque[Task] = deque()
        self.chunks_left: Counter = Counter()
        self.swept: set[tuple[str, str]] = set()
        # trials each study has still to count, as told here (the order of :meth:`by_work_left`)
        self.left = {
            key: int(s.cfg.sweep.n_trials) - counted(self.studies[key])[0] for key, s in self.owners.items()
        }

    def next_task(self) -> Task | None:
        """The next task to hand a worker, or None while every task left waits on one in training."""
        if self.seed_tasks:
            return self.seed_tasks.popleft()
        for key in self.by_work_left():
            if key in self.swept:
                continue
            if not self.trials[key] and not self.in_flight[key]:
                self.ask(key)
            if self.trials[key]:
                self.in_flight[key] += 1
                return self.trials[key].popleft()
            if self.seed_tasks:  # the study just finished and released its seeds
                return self.seed_tasks.popleft()
        return None

    def by_work_left(self) -> list[tuple[str, str]]:
        """The studies, the one with the most predicted trial seconds left first: a study trains one batch at a time,
        so the longest is the run's critical path and goes first (the order changes no number, only the wall time)."""
        return sorted(self.owners, key=lambda k: -self.left[k] * self.owners[k].prediction.trial_s)

    def ask(self, key: tuple[str, str]) -> None:
        """Queue the study's next batch of asked trials; release its seeds once it holds all its trials. A study of
        the asynchronous mode (``sweep.mode=async``: swept by ``kcal sweep`` workers, e.g. on a cluster) is only
        read: complete, its seeds are released; not yet, the run stops with one line."""
        study, cfg = self.studies[key], self.owners[key].cfg
        if sweep_mode(cfg.sweep) == "async":
            finished = counted(study)[0]
            if finished < int(cfg.sweep.n_trials):
                raise ConfigError(f"study {study.study_name} holds {finished} of its {cfg.sweep.n_trials} trials: with "
                                  "sweep.mode=async its trials come from kcal sweep workers (e.g. a cluster's); let "
                                  "them finish, or reproduce without sweep.mode=async (one process asks every trial)")  # fmt: skip
            numbers = []
        else:
            numbers = next_batch(study, cfg, self.spaces[key])
        self.trials[key].extend(Task("trial", self.owners[key], n) for n in numbers)
        if not numbers:
            self.release(key)

    def release(self, key: tuple[str, str]) -> None:
        """The study is complete: its ``best.json``, then its stages' seed chunks (or their summaries).

        A rerun is split over the workers (:func:`kcal.reruns.seeds.chunks`' ``parts``) only when it is released
        by the last study to finish: while other studies sweep, their trials keep the other workers busy, and
        every extra chunk pays a chunk's fixed cost again (its data, model and evaluation set-up: on a 2-core
        machine, split reruns cost ~50 % more CPU than whole ones). A chunk's size changes no seed's numbers."""
        finish_study(self.studies[key], self.owners[key].cfg)
        self.swept.add(key)
        parts = self.jobs if self.swept >= set(self.owners) else 1
        for st in self.stages:
            if st.study_key != key:
                continue
            base, pending = seed_plan(st.cfg)
            print(plan_line(st.cfg, pending), file=sys.stderr, flush=True)
            both = (OmegaConf.to_container(base), OmegaConf.to_container(st.cfg, resolve=True))
            groups = chunks(st.cfg, pending, parts=parts)
            self.chunks_left[id(st)] = len(groups)
            self.seed_tasks.extend(Task("seeds", st, seeds=g, containers=both) for g in groups)
            if not groups:
                summarize(st.cfg)

    def trial_done(self, task: Task, outcome: Outcome) -> tuple[optuna.trial.FrozenTrial, optuna.Study]:
        """Tell the study how ``task``'s trial ended; the finished trial and its study."""
        study = self.studies[task.stage.study_key]
        self.in_flight[task.stage.study_key] -= 1
        trial = tell(study, task.number, outcome)
        self.left[task.stage.study_key] -= counts(trial)
        return trial, study

    def seeds_done(self, task: Task) -> None:
        """A chunk of seeds came back; the rerun's summary once its last one did."""
        self.chunks_left[id(task.stage)] -= 1
        if self.chunks_left[id(task.stage)] == 0:
            summarize(task.stage.cfg)

    def give_back(self, task: Task) -> tuple[int, int]:
        """``task`` was lost (its worker died, its storage failed): a trial goes back to the front of its study's
        queue under its own number, a chunk's unfinished seeds to the front of the seed queue; (its seeds that
        finished, those queued again)."""
        if task.kind == "trial":
            self.in_flight[task.stage.study_key] -= 1
            self.trials[task.stage.study_key].appendleft(task)
            return 0, 0
        dirs = seed_dirs(task.stage.cfg)
        left = [k for k in task.seeds if not layout.is_finished(dirs[k])]
        if left:
            self.seed_tasks.appendleft(Task("seeds", task.stage, seeds=left, containers=task.containers))
        else:
            self.seeds_done(task)
        return len(task.seeds) - len(left), len(left)

    def complete(self) -> bool:
        """Every study swept and every seed chunk handed out (those in training come back to the caller)."""
        return len(self.swept) == len(self.owners) and not self.seed_tasks

    def counted(self, key: tuple[str, str]) -> int:
        """Finished trials of a study that count towards its ``sweep.n_trials``."""
        return counted(self.studies[key])[0]
