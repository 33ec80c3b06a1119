"""kcal.sweep.ask_tell: a trial's parameters depend only on the study's config and the trials before it."""

import optuna
import pytest
from omegaconf import OmegaConf
from optuna.trial import TrialState

from kcal.sweep.ask_tell import Outcome, ask, asked, next_batch, slot_of, sweep_mode, tell, trial_seed

SPACE = {"trainer.lr": {"low": 1e-4, "high": 1e-1, "log": True}, "model.width": {"choices": [16, 32, 64]},
         "objective.weight": {"low": 0.0, "high": 5.0}}  # fmt: skip


def config(batch: int = 1, n_trials: int = 12, seed: int = 7):
    return OmegaConf.create({"sweep": {"sampler_seed": seed, "n_startup_trials": 3, "startup_by": "finished",
                                       "batch": batch, "n_trials": n_trials, "worker": 0}})  # fmt: skip


def value(params: dict) -> float:
    return (params["trainer.lr"] - 0.01) ** 2 + params["objective.weight"] / params["model.width"]


def run(study: optuna.Study, cfg, stop_after: int | None = None) -> None:
    """The study's trials asked in batches and told in order (``stop_after``: tell that many, then stop)."""
    told = 0
    while numbers := next_batch(study, cfg, SPACE):
        for n in numbers:
            if stop_after is not None and told == stop_after:
                return
            tell(study, n, Outcome("complete", value(study.trials[n].params)))
            told += 1


def params(study: optuna.Study) -> list[tuple]:
    return [(t.number, t.state.name, t.params, t.value) for t in study.get_trials(deepcopy=False)]


def test_the_same_config_gives_the_same_trials_and_another_seed_others():
    first, second, other = (optuna.create_study() for _ in range(3))
    run(first, config())
    run(second, config())
    run(other, config(seed=8))
    assert params(first) == params(second) and len(first.trials) == 12
    assert [t.params for t in other.trials] != [t.params for t in first.trials]


@pytest.mark.parametrize("batch", [1, 3])
def test_a_stopped_study_resumed_from_its_storage_suggests_what_the_uninterrupted_one_did(tmp_path, batch):
    url = f"sqlite:///{tmp_path}/s.db"
    whole = optuna.create_study(study_name="whole", storage=url)
    run(whole, config(batch))
    cut = optuna.create_study(study_name="cut", storage=url)
    run(cut, config(batch), stop_after=5)  # trials asked and not told: their process was killed
    assert any(t.state == TrialState.RUNNING for t in cut.trials)
    again = optuna.load_study(study_name="cut", storage=url)  # a new process: a new study object and sampler
    run(again, config(batch))
    assert params(again) == params(whole)


def test_a_batch_is_asked_from_the_trials_finished_before_it():
    study, cfg = optuna.create_study(), config(batch=3, n_trials=7)
    assert next_batch(study, cfg, SPACE) == [0, 1, 2]
    assert next_batch(study, cfg, SPACE) == [0, 1, 2]  # not told yet: the same batch, nothing new asked
    for n in (0, 1, 2):
        tell(study, n, Outcome("complete", 1.0))
    assert next_batch(study, cfg, SPACE) == [3, 4, 5]
    for n in (3, 4, 5):
        tell(study, n, Outcome("fail" if n == 4 else "pruned"))
    assert next_batch(study, cfg, SPACE) == [
        6,
        7,
    ]  # a failed trial of no reason of its own counts for nothing


def test_a_cut_short_ask_is_failed_and_its_slot_asked_again():
    study, cfg = optuna.create_study(), config()
    cut = study.ask()  # the asker killed before it stored the trial's parameters
    cut.suggest_float("trainer.lr", 1e-4, 1e-1, log=True)
    assert slot_of(study, SPACE) == 0 and asked(study, SPACE) == []
    assert study.trials[0].state == TrialState.FAIL
    number = ask(study, cfg, SPACE)
    fresh = optuna.create_study()
    ask(fresh, cfg, SPACE)
    assert number == 1 and study.trials[1].params == fresh.trials[0].params


def test_trial_seeds_differ_by_slot_and_by_sampler_seed():
    seeds = {trial_seed(s, n) for s in (0, 1, 12345) for n in range(100)}
    assert len(seeds) == 300 and trial_seed(12345, 3) == trial_seed(12345, 3)


def test_the_mode_is_checked_and_a_config_without_it_is_asynchronous():
    assert sweep_mode({"mode": "deterministic"}) == "deterministic" and sweep_mode({}) == "async"
    with pytest.raises(Exception, match="sweep.mode=fast is not one of: deterministic, async"):
        sweep_mode({"mode": "fast"})
    with pytest.raises(ValueError, match="complete, pruned or fail"):
        Outcome("done")


class CountingStorage(optuna.storages.InMemoryStorage):
    """An in-memory storage that counts its writes to trials."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = []

    def create_new_trial(self, study_id, template_trial=None):
        self.writes.append("create_new_trial")
        return super().create_new_trial(study_id, template_trial)

    def set_trial_param(self, *args, **kwargs):
        self.writes.append("set_trial_param")
        return super().set_trial_param(*args, **kwargs)


def test_an_ask_stores_its_trial_with_every_parameter_in_one_write():
    storage = CountingStorage()
    study, cfg = optuna.create_study(storage=storage), config()
    for n in range(5):
        storage.writes.clear()
        assert ask(study, cfg, SPACE) == n
        assert storage.writes == ["create_new_trial"]  # a kill leaves the trial whole or absent
        assert study.trials[n].state == TrialState.RUNNING and set(study.trials[n].params) == set(SPACE)
        tell(study, n, Outcome("complete", value(study.trials[n].params)))


def test_an_ask_suggests_what_the_slots_sampler_suggests_on_the_stored_study():
    """Sampling on an in-memory copy changes nothing: the same parameters as the sampler asked directly on the
    stored study, one parameter a write (how a study run before the one-write ask was asked)."""
    from kcal.sweep.samplers import make_sampler
    from kcal.sweep.search_space import sample

    cfg, direct = config(), optuna.create_study()
    for n in range(8):  # past the 3 random start-up trials
        direct.sampler = make_sampler(cfg, seed=trial_seed(7, n))
        trial = direct.ask()
        tell(direct, trial.number, Outcome("complete", value(sample(trial, SPACE))))
    asked_whole = optuna.create_study()
    run(asked_whole, config(n_trials=8))
    assert params(asked_whole) == params(direct)
