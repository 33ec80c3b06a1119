"""kcal.publish.questions.pruned_protocol: the pruned protocol's runs judged against the full protocol's on the datasets they
hold, the time saved per dataset from the runs' studies, the seven-dataset projection, and the report's blocks.
Synthetic data folders: the published heart-disease rows as the full runs (shifted for the replicates)."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from kcal.core import layout
from kcal.publish.questions import equivalence as E
from kcal.publish.questions import pruned_protocol as P
from kcal.publish.report import data_dir

DATASET = "heart-disease"


def published(file: str) -> pd.DataFrame:
    frame = pd.read_csv(data_dir("full") / file)
    return frame[frame["dataset"] == DATASET].reset_index(drop=True)


def studies(hours: float, start: str = "2026-01-01 00:00:00", span_h: float = 2.0) -> pd.DataFrame:
    """The published heart-disease studies with every study's trial hours ``hours`` and the dataset's protocol
    running from ``start`` for ``span_h`` hours (sweeps the first half, seeds the second)."""
    s = published(layout.STUDIES_FILE)
    t0 = pd.Timestamp(start)
    return s.assign(trial_hours=hours, sweep_start=str(t0), sweep_end=str(t0 + pd.Timedelta(hours=span_h / 2)),
                    seeds_end=str(t0 + pd.Timedelta(hours=span_h)))  # fmt: skip


def write_run(
    folder: Path,
    scale: float,
    hours: float,
    span_h: float,
    epochs: int | None = None,
    cpu: float | None = None,
) -> None:
    """A run: the published rows times ``scale``, ``hours`` trial hours per study and, with ``epochs``, a trials
    table per objective of two complete trials with curves of ``epochs`` epochs each and one failed without (and,
    with ``cpu``, ``cpu`` CPU seconds each)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = published(layout.RESULTS_FILE)
    rows.assign(mean=rows["mean"] * scale).to_csv(folder / layout.RESULTS_FILE, index=False)
    studies(hours, span_h=span_h).to_csv(folder / layout.STUDIES_FILE, index=False)
    if epochs is None:
        return
    curve = json.dumps([0.5] * epochs)
    for objective in published(layout.STUDIES_FILE)["objective"]:
        trials = pd.DataFrame({"dataset": DATASET, "objective": objective, "study": "s", "number": [0, 1, 2],
                               "state": ["complete", "pruned", "fail"], "status": "", "direction": "maximize",
                               "value": 0.5, "params": "{}", "curve": [curve, curve, None]})  # fmt: skip
        if cpu is not None:
            trials["cpu_seconds"] = [cpu, cpu, None]
        path = layout.trials_table(folder, DATASET, objective)
        path.parent.mkdir(parents=True, exist_ok=True)
        trials.to_csv(path, index=False)


@pytest.fixture()
def data(tmp_path) -> Path:
    """Full runs: the published one and two replicates (1 trial hour per study, 2 h per dataset)."""
    data = tmp_path / "numbers"
    for folder, scale in ((data, 1.0), (layout.replicate_data_dir(data, "sampler_seed=1"), 1.01),
                          (layout.replicate_data_dir(data, "sampler_seed=2"), 0.99)):  # fmt: skip
        write_run(folder, scale, hours=1.0, span_h=2.0, epochs=None if folder == data else 10)
    return data


def test_no_pruned_run_says_so_in_both_blocks(data):
    blocks = P.pruned_blocks(data)
    assert blocks == {"pruned:summary": P.NONE_YET, "pruned": P.NONE_YET}


def test_runs_like_the_full_ones_at_half_the_sweep_time_are_judged_and_their_saving_measured(data):
    for name, scale in (("sampler_seed=12345", 1.0), ("sampler_seed=1", 1.005), ("sampler_seed=2", 0.995)):
        write_run(layout.pruned_data_dir(data, "sha_min20", name), scale, hours=0.5, span_h=1.5, epochs=4)
    (c,) = P.comparisons(data)
    assert c.pruner == "sha_min20" and c.runs == {
        DATASET: ["sampler_seed=1", "sampler_seed=12345", "sampler_seed=2"]
    }
    assert c.full_runs == {DATASET: ["published", "sampler_seed=1", "sampler_seed=2"]}
    assert c.judgement.verdict in (E.EQUIVALENT, E.UNDECIDED) and not c.final
    (t,) = c.times.itertuples()
    # the replicates kept curves (4 objectives x 2 budget trials x 10 epochs; the failed trial does not count)
    assert (t.epochs_full, t.epochs_pruned, t.epochs_saved) == (80, 32, pytest.approx(0.6))
    assert (t.trial_hours_full, t.trial_hours_pruned) == (
        pytest.approx(4.0),
        pytest.approx(2.0),
    )  # 4 objectives
    assert t.trial_saved == pytest.approx(0.5)
    assert P.saved_shares(c.times) == {DATASET: pytest.approx(0.6)}  # epochs first
    # the projection: the published run's 4 studies of 1 trial hour each, on 2 workers, 60 % saved
    assert c.projected == (pytest.approx(2.0), pytest.approx(0.8))
    blocks = P.pruned_blocks(data)
    line = blocks["pruned:summary"]
    (case,) = c.cases
    # the same best scores on both sides: equivalent at the margin (exact p 1/20 each side), not yet final
    assert case.outcome == "equivalent" and case.best_test.splits == 20  # 3 pruned and 3 full runs
    assert line.startswith(
        f"- **`sha_min20`: heart-disease {case.words}** (judged runs in (of the fixed pruner): heart-disease 3 of 5, "
    )
    assert "provisional until all are in" in line and "ships only as an experiment" in line
    assert "heart-disease 60 %" in line and "2.0 h -> 0.8 h" in line
    assert "| heart-disease | — / — / — | 80 / 32 / 60 % | 4.00 h / 2.00 h / 50 % |" in blocks["pruned"]


def test_runs_far_from_the_full_ones_are_rejected(data):
    for name in ("sampler_seed=1", "sampler_seed=2"):
        write_run(layout.pruned_data_dir(data, "median_warmup5", name), 1.5, hours=0.5, span_h=1.5)
    (c,) = P.comparisons(data)
    assert c.judgement.verdict == E.REJECTED  # the earlier per-cell rule, beside the verdict
    # over whole runs, 2 runs against 3 cannot reach 5 % (10 splits): the verdict says how many runs it needs
    assert "**`median_warmup5`: heart-disease inconclusive: needs " in P.pruned_blocks(data)["pruned:summary"]
    assert "no longer the verdict) on the same runs: rejected." in P.pruned_blocks(data)["pruned"]


def _provenance(folder: Path, roots: list[tuple[str, str, list[str]]]) -> None:
    record = {"roots": [{"task": t, "commit": c, "datasets": d} for t, c, d in roots]}
    (folder / layout.PROVENANCE_FILE).write_text(json.dumps(record), encoding="utf-8")


def test_classification_runs_of_the_reversed_pruner_are_superseded_and_not_judged(data):
    """A classification root recorded on a commit before the direction's fix is listed as superseded and left out;
    a regression root of the same commit is kept (its study minimises the value the pruner ranks); a root of a
    later commit is judged."""
    folders = {}
    for name in ("sampler_seed=1", "sampler_seed=2", "sampler_seed=3"):
        folders[name] = layout.pruned_data_dir(data, "sha_min20", name)
        write_run(folders[name], 1.0, hours=0.5, span_h=1.5)
    _provenance(folders["sampler_seed=1"], [("classification", "191b484a", [DATASET])])
    _provenance(folders["sampler_seed=2"], [("regression", "191b484a", ["crime"]),
                                            ("classification", "f5015f8", [DATASET])])  # fmt: skip
    _provenance(folders["sampler_seed=3"], [("classification", "498aff3f9", [DATASET])])  # a longer hash
    assert (
        P.superseded(folders["sampler_seed=1"]) == {DATASET}
        and P.superseded(folders["sampler_seed=2"]) == set()
    )
    assert P.superseded(folders["sampler_seed=3"]) == {DATASET}
    (c,) = P.comparisons(data)
    assert c.runs == {DATASET: ["sampler_seed=2"]}
    assert c.superseded == {DATASET: ["sampler_seed=1", "sampler_seed=3"]}
    summary = P.pruned_blocks(data)["pruned:summary"]
    assert "Superseded, not judged: the runs of the reversed pruner" in summary
    assert f"{DATASET}: sampler_seed=1, sampler_seed=3." in summary


def test_a_dataset_without_a_pruned_run_is_projected_with_the_median_share():
    s = pd.DataFrame({"dataset": ["a", "b", "c"], "trial_hours": [2.0, 2.0, 2.0]})
    full, pruned = P.projection(s, {"a": 0.5, "b": 0.25})
    assert full == pytest.approx(3.0)
    assert pruned == pytest.approx((2 * 0.5 + 2 * 0.75 + 2 * (1 - 0.375)) / 2)
    assert math.isnan(P.trial_hours(s.assign(trial_hours=[1.0, None, 1.0]), "b"))
    assert math.isnan(
        P.sweep_epochs(pd.DataFrame({"dataset": ["a"], "state": ["complete"]}), "a")
    )  # no curves


def test_cpu_hours_come_first_where_both_sides_recorded_them(data):
    for name in ("sampler_seed=1", "sampler_seed=2"):  # the replicates' trials again, with their CPU seconds
        write_run(layout.replicate_data_dir(data, name), 1.0, hours=1.0, span_h=2.0, epochs=10, cpu=900.0)
        write_run(
            layout.pruned_data_dir(data, "sha_min20", name), 1.0, hours=0.5, span_h=1.5, epochs=4, cpu=450.0
        )
    (c,) = P.comparisons(data)
    (t,) = c.times.itertuples()
    # 4 objectives x 2 budget trials x 900 s = 2 h; the failed trial's missing CPU does not count
    assert (t.cpu_hours_full, t.cpu_hours_pruned, t.cpu_saved) == (
        pytest.approx(2.0),
        pytest.approx(1.0),
        0.5,
    )
    assert P.saved_shares(c.times) == {DATASET: pytest.approx(0.5)}  # not the epochs' 60 %
    assert "| heart-disease | 2.00 h / 1.00 h / 50 % | 80 / 32 / 60 % |" in P.pruned_blocks(data)["pruned"]


def test_a_worker_count_runs_epochs_count_but_not_its_cpu_seconds(data):
    """CPU seconds depend on the machine and on how many processes share its cores: the full side's CPU hours come
    from the full runs (1-2 workers) alone. A worker-count run (here 8 workers, with cheap CPU seconds, as on a
    faster machine) adds its epochs to the full side and leaves the CPU comparison out when no full run recorded
    CPU seconds; the share is then of epochs."""
    write_run(
        layout.workers_data_dir(data, 8, "sampler_seed=3"), 1.0, hours=1.0, span_h=2.0, epochs=10, cpu=100.0
    )
    for name in ("sampler_seed=1", "sampler_seed=2"):
        write_run(
            layout.pruned_data_dir(data, "sha_min20", name), 1.0, hours=0.5, span_h=1.5, epochs=4, cpu=450.0
        )
    (c,) = P.comparisons(data)
    (t,) = c.times.itertuples()
    assert math.isnan(t.cpu_hours_full) and math.isnan(t.cpu_saved)  # not 1 - 1.0 h / 0.22 h < 0
    assert (t.epochs_full, t.epochs_pruned) == (80, 32)
    assert P.saved_shares(c.times) == {DATASET: pytest.approx(0.6)}
