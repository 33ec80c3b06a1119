"""kcal seeds seeds_run.best_file=...: a recorded selected trial rerun over seeds without its study, bit for bit."""

import json

import pytest

from kcal.core.errors import ConfigError

from ..common import SMOKE_REPRODUCTION, compose_cfg
from ..data.conftest import needs

pytestmark = needs("crime")


def test_a_recorded_trial_reruns_its_seeds_as_the_study_did(regression_smoke_root, tmp_path):
    from kcal.reruns.seeds import run_seeds

    record = regression_smoke_root / "crime" / "nll_mmd" / "sweep" / "best.json"
    over = [*SMOKE_REPRODUCTION, "dataset=crime", "objective=nll_mmd", "seeds_run.n_seeds=2", f"root={tmp_path}",
            f"seeds_run.best_file={record}"]  # fmt: skip
    run_seeds(compose_cfg("seeds", *over))
    for k in (0, 1):
        again = json.loads(
            (tmp_path / "crime" / "nll_mmd" / "seeds" / f"seed{k}" / "metrics.json").read_text()
        )
        first = json.loads(
            (regression_smoke_root / "crime" / "nll_mmd" / "seeds" / f"seed{k}" / "metrics.json").read_text()
        )
        assert again == first  # the same configuration and seed: the same numbers, without the study
    used = json.loads((tmp_path / "crime" / "nll_mmd" / "best_trial.json").read_text())
    assert (
        used["study"] == "crime__nll_mmd__paper"
        and used["params"] == json.loads(record.read_text())["params"]
    )
    with pytest.raises(ConfigError, match="records crime/nll_mmd, not crime/nll"):
        run_seeds(
            compose_cfg(
                "seeds",
                *over[:-4],
                "objective=nll",
                f"root={tmp_path / 'b'}",
                f"seeds_run.best_file={record}",
            )
        )
    with pytest.raises(ConfigError, match="no such file"):
        run_seeds(compose_cfg("seeds", *over[:-1], f"seeds_run.best_file={tmp_path / 'none.json'}"))
