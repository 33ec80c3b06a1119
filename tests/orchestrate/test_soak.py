"""The fault soak's short version: a reproduction whose pool workers are SIGKILLed and whose root is moved
twice (export, kill, import, resume) ends with exactly its trials and seeds, and with the results.csv and trials of
the same command run uninterrupted.

The long soak is the same command with the defaults (8 workers, 100 trials, 50 seeds, a kill every 20-60 s):
``python -m kcal.orchestrate.soak --dir <new folder>`` (docs/reproduction.md, "A worker that dies, and the fault soak").
"""

from __future__ import annotations

import re

import optuna
import pytest

from kcal.core import layout
from kcal.orchestrate import soak

from ..data.conftest import needs

SHORT = ["--dataset", "heart-disease", "--objective", "xe_mmd", "--workers", "2", "--trials", "6", "--seeds", "3",
         "--kill-every", "6", "12", "--max-kills", "2", "--moves", "2"]  # fmt: skip
#: one epoch on 128 rows: what the soak counts is trials and seeds, not how well they train
FAST = ["profile=smoke", "trainer.max_epochs=1", "dataset.max_train_rows=128"]


@pytest.mark.slow
@needs("heart-disease")
def test_short_soak_loses_and_duplicates_nothing(tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        soak.main([*SHORT, "--dir", str(tmp_path / "soak"), *FAST])
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert done.value.code == 0, line
    assert "nothing lost or duplicated, results.csv and trials equal to an uninterrupted run's" in line
    assert re.search(r"; [12] workers killed, [0-2] replaced in place, \d+ pool restarts, 2 moves", line)
    assert "2 moves (root0 -> root1 -> root2)" in line
    root = tmp_path / "soak" / "root2"
    assert soak.count_problems(root, "heart-disease", "xe_mmd", 6, 3) == []

    # the checks see a lost seed and a trial too many
    metrics = layout.metrics_file(layout.seed_dir(layout.label_dir(root, "heart-disease", "xe_mmd"), 1))
    metrics.unlink()
    assert soak.count_problems(root, "heart-disease", "xe_mmd", 6, 3) == ["finished seeds [0, 2], not 0..2"]
    study = soak.study_of(root, "heart-disease", "xe_mmd")
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))[0]
    study.add_trial(
        optuna.trial.create_trial(params=done.params, distributions=done.distributions, value=0.5)
    )
    assert "7 counted trials and 0 running, not 6 and 0" in soak.count_problems(
        root, "heart-disease", "xe_mmd", 6, 3
    )
    # and the equality check sees a changed result and a changed trial (against the uninterrupted root it made)
    results = layout.results_file(root)
    results.write_text(results.read_text().replace("heart-disease", "heart-disease ", 1))
    problems = soak.differences(root, tmp_path / "soak" / "uninterrupted", "heart-disease", "xe_mmd")
    assert problems == ["results.csv differs from the uninterrupted run's",
                        "the study's trials differ from the uninterrupted run's from trial #6 on"], problems  # fmt: skip
