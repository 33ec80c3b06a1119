"""Resuming never mixes configurations: seed reruns and sweep studies carry a fingerprint of what shapes
their numbers, and a resume with another one is refused unless a new root or the overwrite flag is given."""

import json

import optuna
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from kcal.configs import CONFIG_DIR
from kcal.sweep.fingerprint import (
    STUDY_ATTR,
    FingerprintMismatch,
    differences,
    shaping_config,
    stamp_study,
)

from ..common import SMOKE
from ..data.conftest import needs


def test_what_does_not_shape_a_number_is_not_in_the_fingerprint():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        a = shaping_config(compose("seeds", overrides=["seed=1", "root=/a", "sweep.n_trials=3", "figures=false",
                                                       "trainer.num_threads=4", "sweep.worker=2",
                                                       "trainer.snapshot_minutes=1"]))  # fmt: skip
        b = shaping_config(compose("seeds", overrides=["seed=2", "root=/b", "trainer.progress_bar=false"]))
        c = shaping_config(compose("seeds", overrides=["trainer.max_epochs=7", "dataset.protocol=clean"]))
    assert a == b
    assert differences(a, c) == ['dataset.protocol ("official" -> "clean")', "trainer.max_epochs (200 -> 7)"]


def test_xe_kde_fingerprint_changes_under_the_official_protocol_only():
    """The official protocol's xe_kde trains the authors' ECE-KDE: its studies and seeds (made with kcal's rule)
    are refused on resume; under clean the fingerprint is what it was before the flavour existed."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        official = shaping_config(compose("seeds", overrides=["objective=xe_kde", "dataset=breast-cancer"]))
        clean = shaping_config(compose("seeds", overrides=["objective=xe_kde", "dataset=breast-cancer",
                                                           "dataset.protocol=clean"]))  # fmt: skip
        mmce = shaping_config(compose("seeds", overrides=["objective=xe_mmce", "dataset=breast-cancer"]))
    assert official["objective.params.flavour"] == "authors"
    assert not [k for k in clean if "flavour" in k]  # as stored by every clean study made so far
    assert not [k for k in mmce if "flavour" in k]
    before = {
        k: v for k, v in official.items() if k != "objective.params.flavour"
    }  # the official key set until now
    assert differences(before, official) == ['objective.params.flavour (- -> "authors")']


@needs("crime")
def test_seed_rerun_with_another_config_is_refused_unless_overwritten(tmp_path):
    base = ["dataset=crime", "objective=nll", *SMOKE, f"root={tmp_path}", "seeds_run.use_best=false",
            "seeds_run.vectorized=false"]  # fmt: skip
    seeds_dir = tmp_path / "crime" / "nll" / "seeds"
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        from kcal.reruns.seeds import run_seeds

        run_seeds(compose("seeds", overrides=[*base, "seeds_run.n_seeds=1"]))
        assert (tmp_path / "crime" / "nll" / "fingerprint.json").is_file()
        other = [*base, "seeds_run.n_seeds=2", "trainer.max_epochs=2", "dataset.protocol=clean"]
        with pytest.raises(FingerprintMismatch) as err:
            run_seeds(compose("seeds", overrides=other))
        msg = str(err.value)
        assert "trainer.max_epochs (1 -> 2)" in msg and 'dataset.protocol ("official" -> "clean")' in msg
        assert "new root=..." in msg and "seeds_run.overwrite=true" in msg
        assert not (seeds_dir / "seed1").exists()  # nothing trained into the old directory
        summary = run_seeds(compose("seeds", overrides=[*other, "seeds_run.overwrite=true"]))
        assert set(summary["n"]) == {2}
        for k in (0, 1):
            assert OmegaConf.load(seeds_dir / f"seed{k}" / "config.yaml").trainer.max_epochs == 2
        # a seed directory from before fingerprints: refused as unknown, adopted on request
        (tmp_path / "crime" / "nll" / "fingerprint.json").unlink()
        with pytest.raises(FingerprintMismatch, match="no configuration fingerprint.*seeds_run.adopt=true"):
            run_seeds(compose("seeds", overrides=other))
        before = (seeds_dir / "seed0" / "metrics.json").stat().st_mtime_ns
        run_seeds(compose("seeds", overrides=[*other, "seeds_run.adopt=true"]))
        assert (seeds_dir / "seed0" / "metrics.json").stat().st_mtime_ns == before
        assert (tmp_path / "crime" / "nll" / "fingerprint.json").is_file()


def load(tmp_path, name="crime__nll__paper") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'sweeps.db'}")


@needs("crime")
def test_sweep_with_another_config_is_refused_unless_overwritten(tmp_path):
    base = ["dataset=crime", "objective=nll", *SMOKE, f"root={tmp_path}", "sweep.n_trials=1"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        from kcal.sweep.search import sweep

        sweep(compose("sweep", overrides=base))
        stored = load(tmp_path).user_attrs[STUDY_ATTR]
        assert stored["trainer.max_epochs"] == 1 and "search_space.trainer.batch_size.choices" in stored
        sweep(compose("sweep", overrides=[*base, "sweep.n_trials=2"]))  # same config: resumes
        assert len(load(tmp_path).trials) == 2
        other = [*base, "trainer.max_epochs=2"]
        with pytest.raises(FingerprintMismatch) as err:
            sweep(compose("sweep", overrides=other))
        assert str(err.value).startswith("sweep study 'crime__nll__paper' was made with a different configuration: "
                                         "trainer.max_epochs (1 -> 2);")  # fmt: skip
        assert "sweep.overwrite=true" in str(err.value) and "new root=..." in str(err.value)
        assert len(load(tmp_path).trials) == 2
        sweep(compose("sweep", overrides=[*other, "sweep.overwrite=true"]))
        study = load(tmp_path)
        assert len(study.trials) == 1 and study.user_attrs[STUDY_ATTR]["trainer.max_epochs"] == 2
        run_dir = study.trials[0].user_attrs["run_dir"]
        assert OmegaConf.load(f"{run_dir}/config.yaml").trainer.max_epochs == 2


@needs("crime")
def test_a_study_without_fingerprint_is_refused_until_adopted_or_stamped(tmp_path):
    base = ["dataset=crime", "objective=nll", *SMOKE, f"root={tmp_path}", "sweep.n_trials=1"]
    old = optuna.create_study(study_name="crime__nll__paper", storage=f"sqlite:///{tmp_path / 'sweeps.db'}")
    old.enqueue_trial({"trainer.lr": 1e-3})  # a trial of a study made before fingerprints
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        from kcal.sweep.search import sweep

        cfg = compose("sweep", overrides=base)
        with pytest.raises(FingerprintMismatch, match="no configuration fingerprint.*sweep.adopt=true"):
            sweep(cfg)
        stamp_study(load(tmp_path), cfg)
        assert json.dumps(load(tmp_path).user_attrs[STUDY_ATTR])  # stored, JSON
        sweep(cfg)  # stamped with this config: resumes


def _objective_configs():
    from kcal.run.setup import objective_names

    return [(name, "breast-cancer" if name.startswith("xe") else "crime") for name in objective_names()]


@pytest.mark.parametrize("objective, dataset", _objective_configs())
def test_the_base_weight_at_its_default_leaves_every_fingerprint_as_it_was(objective, dataset):
    """objective.base_weight (every objective config holds it, at 1.0) is left out of the fingerprint at 1.0,
    so studies and seed reruns stored before the key existed still resume; any other value is in it."""
    from kcal.sweep.fingerprint import LEFT_OUT_AT

    assert LEFT_OUT_AT["objective.base_weight"] == 1.0
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for entry in ("train", "seeds"):  # seeds: sweep.yaml (and the full profile) with seeds_run
            base = [f"dataset={dataset}", f"objective={objective}"]
            cfg = compose(entry, overrides=base)
            assert cfg.objective.base_weight == 1.0
            now = shaping_config(cfg)
            before = shaping_config(
                compose(entry, overrides=[*base, "~objective.base_weight"])
            )  # the old configs
            assert now == before and not [k for k in now if "base_weight" in k]
            other = shaping_config(compose(entry, overrides=[*base, "objective.base_weight=0.5"]))
            assert differences(now, other) == ["objective.base_weight (- -> 0.5)"]
