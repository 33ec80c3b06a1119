"""The deterministic sweep (``sweep.mode=deterministic``, the default): one process asks and tells, workers train.

A trial's parameters depend only on the study's config and on the trials before it, never on timing, on which
process trains it or on how many do:

* **One asker.** The process that runs the study (``kcal sweep``, or the pool's parent in ``kcal reproduce``)
  asks Optuna for every trial (:func:`ask`) and tells it its outcome (:func:`tell`); a worker only trains the
  trial it is handed (:func:`kcal.sweep.search.train_asked`), reading the parameters the asker stored.
* **Batches of a fixed size.** Trials are asked in batches of ``sweep.batch`` (default 1: the paper's sequential
  TPE), each batch from the trials finished before it (:func:`next_batch`), so a study has at most ``sweep.batch``
  trials in training; parallel speed comes from the protocol's studies and seed chunks side by side. A batch
  above 1 is another protocol (TPE sees fewer finished trials), labelled by its fingerprint.
* **The sampler's randomness per trial.** Trial ``n`` is suggested by a sampler seeded with
  :func:`trial_seed` ``(sweep.sampler_seed, n)``, made for that trial alone, so a resumed study suggests what
  the uninterrupted one would have.
* **Resumed as it was.** A trial that was asked but not told (its worker or the asker was killed) keeps its
  number and its parameters and is trained again (:func:`asked`); nothing goes stale and no trial is
  re-queued under another number. An ask is stored in one write (:func:`ask`), so a kill never leaves a trial
  half-asked; one left by an earlier version, which stored a parameter a write, is failed, counts for nothing
  and its slot is asked again (:func:`slot_of`).

``sweep.mode=async`` is the mode for clusters: independently started workers (``kcal sweep`` on several
machines, Hydra's submitit launcher) share one study, each asks for itself with ``sampler_seed + worker`` and
constant liar, and a dead worker's trial is retried after its heartbeat goes stale (:mod:`kcal.sweep.search`).
Its trials depend on timing; it is not used for published numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import optuna
from omegaconf import DictConfig
from optuna.trial import TrialState

from kcal.core.errors import ConfigError
from kcal.sweep.fingerprint import STUDY_ATTR
from kcal.sweep.samplers import make_sampler
from kcal.sweep.search_space import sample
from kcal.sweep.studies import counted

MODES = ("deterministic", "async")
"""The values of ``sweep.mode``; the first is the default (``configs/sweep.yaml``)."""


@dataclass(frozen=True)
class Outcome:
    """How a trained trial ended, as a worker hands it back to the asker: ``state`` one of ``complete``,
    ``pruned``, ``fail``; ``value`` the study's value (a tuple for a multi-objective study) when complete."""

    state: str
    value: float | tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.state not in ("complete", "pruned", "fail"):
            raise ValueError(f"an outcome is complete, pruned or fail, not {self.state!r}")


def sweep_mode(sweep: Mapping) -> str:
    """``sweep.mode`` (a config made before the key existed: ``async``, how its studies were run)."""
    value = sweep.get("mode") or "async"
    if value not in MODES:
        raise ConfigError(f"sweep.mode={value} is not one of: {', '.join(MODES)}")
    return str(value)


def study_mode(study: optuna.Study) -> str:
    """How a stored study was run, from its fingerprint (:mod:`kcal.sweep.fingerprint`): ``deterministic``, or
    ``async`` (a study made before the key existed, or none stamped)."""
    return str(study.user_attrs.get(STUDY_ATTR, {}).get("sweep.mode") or "async")


def trial_seed(sampler_seed: int, slot: int) -> int:
    """The seed of the sampler that suggests the study's trial ``slot``: the first word of numpy's
    ``SeedSequence((sampler_seed, slot))``, so neighbouring seeds and slots give unrelated streams."""
    return int(np.random.SeedSequence([int(sampler_seed), int(slot)]).generate_state(1)[0])


def expected_params(space: dict[str, dict]) -> set[str]:
    """The parameters every trial of ``space`` holds once asked (its sampled, not derived, entries)."""
    return {path for path, dist in space.items() if "derive" not in dist}


def asked(study: optuna.Study, space: dict[str, dict]) -> list[int]:
    """The numbers of the trials asked but not told, in order: a batch that a stop cut short, to train again.

    A running trial without all of ``space``'s parameters (the asker was killed while it suggested them) is
    failed; its slot is asked again (:func:`slot_of`)."""
    needed, out = expected_params(space), []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if needed <= set(t.params):
            out.append(t.number)
        else:
            study.tell(t.number, state=TrialState.FAIL)
    return out


def slot_of(study: optuna.Study, space: dict[str, dict]) -> int:
    """The slot of the study's next trial: its trials that hold all their parameters (a trial whose ask was cut
    short takes none)."""
    needed = expected_params(space)
    return sum(needed <= set(t.params) for t in study.get_trials(deepcopy=False))


def ask(study: optuna.Study, cfg: DictConfig, space: dict[str, dict]) -> int:
    """Ask the study for its next trial, suggested by that slot's own sampler (:func:`trial_seed`), and store it
    with all its parameters in one write; the trial's number.

    The sampler works on an in-memory copy of the study's trials (the same trials in the same order, so it
    suggests what it would on the stored study), and the asked trial is added to the storage whole, as a
    running trial (one transaction of Optuna's ``add_trial``): a kill leaves the trial stored with every
    parameter or not at all, so no trial is failed half-asked and the numbers after it do not move."""
    scratch = optuna.create_study(
        storage=optuna.storages.InMemoryStorage(),
        directions=study.directions,
        sampler=make_sampler(cfg, seed=trial_seed(int(cfg.sweep.sampler_seed), slot_of(study, space))),
    )
    scratch.add_trials(study.get_trials(deepcopy=False))
    sample(scratch.ask(), space)
    drafted = scratch.get_trials(deepcopy=False)[-1]
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.RUNNING, params=drafted.params, distributions=drafted.distributions
        )
    )
    return study.get_trials(deepcopy=False)[-1].number


def next_batch(study: optuna.Study, cfg: DictConfig, space: dict[str, dict]) -> list[int]:
    """The trials to train now, none of which is in training: those asked and not told (a resumed batch), or
    else a new batch of ``min(sweep.batch, trials still to run)``; empty once the study holds its
    ``sweep.n_trials``."""
    pending = asked(study, space)
    if pending:
        return pending
    finished, _ = counted(study)
    size = min(int(cfg.sweep.get("batch") or 1), int(cfg.sweep.n_trials) - finished)
    return [ask(study, cfg, space) for _ in range(max(0, size))]


def tell(study: optuna.Study, number: int, outcome: Outcome) -> optuna.trial.FrozenTrial:
    """Tell the study how trial ``number`` ended; the finished trial."""
    if outcome.state == "complete":
        return study.tell(number, outcome.value)
    state = TrialState.PRUNED if outcome.state == "pruned" else TrialState.FAIL
    return study.tell(number, state=state)
