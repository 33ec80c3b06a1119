"""Pruners replayed over recorded trials (kcal.publish.questions.pruning_replay), on constructed studies."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from kcal.publish.questions.pruning_replay import replay_study, summary
from kcal.sweep.pruners import running_best


def test_running_best_ignores_non_finite_values():
    assert running_best([3.0, math.nan, 2.0, 2.5, math.inf, 1.0]) == [3.0, 3.0, 2.0, 2.0, 2.0, 1.0]
    assert running_best([math.nan, 1.0]) == [math.inf, 1.0]


def study(late_start: int) -> pd.DataFrame:
    """12 trials of 30 epochs descending from 1.0 by 0.01 an epoch (values 0.5 + number / 100, minimised);
    trial 8 is the selected one: its curve stays at 2.0 until epoch ``late_start``, then 0.5."""
    rows = []
    for n in range(12):
        curve = [1.0 - 0.01 * e for e in range(30)]
        value = 0.5 + n / 100
        if n == 8:
            curve = [2.0 if e < late_start else 0.5 for e in range(30)]
            value = 0.4
        rows.append({"number": n, "state": "complete", "direction": "minimize", "value": value,
                     "curve": json.dumps(curve), "reg_share_at_best": 1e-6 if n == 8 else 1e-2})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_slow_starting_selection_is_pruned_before_the_warm_up_ends_and_kept_after():
    cut = replay_study(study(late_start=15), "median_warmup5")
    # trials 0-4 are the startup trials; 5-7 and 9-11 follow the median exactly (not worse): never pruned;
    # trial 8 is worse than the median at epoch 5 (after the 5 warm-up steps): it stops after 6 epochs
    assert cut["pruned"] == 1 and not cut["survived"]
    assert cut["selected_full"] == 8 and cut["selected_pruned"] == 0
    assert cut["regret"] == pytest.approx(0.5 - 0.4)  # minimised: full 0.4, pruned selection 0.5
    assert cut["epochs_full"] == 12 * 30 and cut["epochs_pruned"] == 11 * 30 + 6
    assert cut["epochs_saved"] == pytest.approx(24 / 360)
    assert (cut["reg_share_full"], cut["reg_share"]) == (1e-6, 1e-2)
    kept = replay_study(study(late_start=15), "median_warmup20")  # by epoch 20 trial 8 is at 0.5: best
    assert kept["survived"] and kept["pruned"] == 0 and kept["regret"] == 0 and kept["epochs_saved"] == 0


def test_a_study_without_curves_has_no_replay_rows(tmp_path):
    from kcal.publish.questions.pruning_replay import replay

    trials = tmp_path / "trials"
    trials.mkdir()
    frame = study(late_start=15).assign(dataset="crime", objective="nll", study="s", status="ok", params="{}")
    frame.assign(curve="").to_csv(trials / "crime__nll.csv", index=False)
    assert replay({"none": tmp_path}).empty
    frame.to_csv(trials / "crime__nll.csv", index=False)
    rows = replay({"kept": tmp_path}, ["median_warmup5", "sha_min5"])
    assert list(rows["setting"]) == ["median_warmup5", "sha_min5"] and set(rows["trials"]) == {12}
    assert summary(rows).loc[0, "survived"] == 0.0


def _summary(survived, regret_max, saved) -> pd.DataFrame:
    return pd.DataFrame({"setting": ["a", "b", "c"], "studies": 20, "survived": survived, "regret_median": 0.0,
                         "regret_max": regret_max, "epochs_saved": saved, "reg_share": 0.0, "reg_share_full": 0.0})  # fmt: skip


def test_the_setting_is_chosen_by_survival_then_largest_regret_then_epochs_saved():
    from kcal.publish.questions.pruning_replay import MIN_SURVIVAL, choose

    assert choose(_summary([0.9, 0.85, 0.95], [0.0, 0.0, 0.1], [0.9, 0.9, 0.1])) == "c"  # survival first
    assert choose(_summary([0.9, 0.9, 0.5], [0.02, 0.01, 0.0], [0.9, 0.1, 0.9])) == "b"  # then largest regret
    assert choose(_summary([0.9, 0.9, 0.5], [0.01, 0.01, 0.0], [0.4, 0.6, 0.9])) == "b"  # then epochs saved
    at = MIN_SURVIVAL
    assert (
        choose(_summary([at, at - 0.01, 0.0], [0.0, 0.0, 0.0], [0.5, 0.9, 0.9])) == "a"
    )  # at the bar: allowed
    assert choose(_summary([at - 0.01] * 3, [0.0] * 3, [0.5] * 3)) is None


def test_published_replay_feeds_the_report_blocks(tmp_path):
    from kcal.core import layout
    from kcal.publish.questions.pruning_replay import main, pruning_blocks

    assert "no replay published yet" in pruning_blocks(tmp_path)["pruning"]
    run = layout.workers_data_dir(tmp_path, 8, "sampler_seed=1")
    (run / "trials").mkdir(parents=True)
    (run / layout.RESULTS_FILE).write_text("dataset\n")
    frame = study(late_start=15).assign(dataset="crime", objective="nll", study="s", status="ok", params="{}")
    frame.to_csv(run / "trials" / "crime__nll.csv", index=False)
    main(["--publish", str(tmp_path)])
    rows = pd.read_csv(layout.pruning_replay_file(tmp_path))
    assert (
        set(rows["source"]) == {"workers/jobs=8/sampler_seed=1"} and len(rows) == 6
    )  # one study, 6 settings
    blocks = pruning_blocks(tmp_path)
    # median_warmup20 and the sha settings that do not cut trial 8 keep it (survival 100 %): one is chosen
    assert "Pruners replayed over 1 studies" in blocks["pruning:summary"] and "(chosen)" in blocks["pruning"]
    with pytest.raises(SystemExit):
        main(["--publish", str(tmp_path), str(tmp_path)])  # folders and --publish: one or the other
