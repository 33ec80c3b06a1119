"""kcal paths: a dataset's regularisation paths from its unregularised selected configuration, resumable."""

import json
import math

import pandas as pd
import pytest
import torch

from kcal.core import layout
from kcal.core.errors import ConfigError

from ..common import SMOKE, compose_cfg
from ..data.conftest import needs

HEART = [
    *SMOKE,
    "dataset=heart-disease",
    "paths.n_seeds=2",
    "paths.objectives=[xe_mmd]",
    "paths.grids.xe_mmd=[10]",
    "paths.max_extension=0",
]


@needs("heart-disease")
def test_a_path_trains_from_the_unregularised_selection_and_resumes_without_training(tmp_path, capsys):
    from kcal.reruns.paths import run_paths

    cfg = compose_cfg("paths", *HEART, f"root={tmp_path}")
    written = run_paths(cfg)
    out = layout.paths_dir(tmp_path, "heart-disease")
    assert written == {"xe_mmd": layout.path_table(out, "xe_mmd")}
    table = pd.read_csv(written["xe_mmd"])
    assert sorted(set(table["weight"])) == [0.0, 10.0] and set(table["n"]) == {2}
    assert {("none", "exact"), ("post-hoc", "exact"), ("none", "official"), ("post-hoc", "official")} <= set(
        zip(table["recalibrator"], table["flavour"], strict=True)
    )
    shares = table.groupby("weight")["reg_share"].first()
    assert shares[0.0] == 0.0 and shares[10.0] > 0  # the MMD term acts: a share of the loss, from history.csv
    # λ = 0 is the selected XE configuration itself; λ = 10 the same network with the regulariser on
    published = json.loads(layout.published_best("docs/results/full", "heart-disease", "xe").read_text())
    zero = (out / "xe" / "objective.weight=0" / "seeds" / "seed1" / "config.yaml").read_text()
    ten = (out / "xe_mmd" / "objective.weight=10" / "seeds" / "seed0" / "config.yaml").read_text()
    assert "name: xe\n" in zero and "name: xe_mmd\n" in ten and "weight: 10.0" in ten
    assert f"lr: {published['params']['trainer.lr']}" in ten and "bandwidth_z: median" in ten
    record = json.loads(layout.path_record(out, "xe_mmd").read_text())
    assert record["start"]["study"] == "heart-disease__xe__paper" and record["grid"] == [0.0, 10.0]
    assert record["command"].startswith("kcal paths") and record["commit"]
    h = record["objective_params"]["bandwidth_z"]  # the median heuristic, resolved as training resolved it
    assert isinstance(h, float) and h > 1 and record["kernels"]["x"]["bandwidth"] == h
    assert record["kernels"]["x"]["share_above_0.001"] > 0.5 and record["kernels"]["y"]["at_2"] < 1e-6
    ten_point = record["points"][1]
    assert ten_point["finished"] == 2 and ten_point["reg_share"]["median"] == pytest.approx(shares[10.0])
    assert ten_point["train_seconds"] > 0 and ten_point["commits"] == [record["commit"]]
    assert "2 points x 2 seeds, 0 finished, 2 to train" in capsys.readouterr().err

    finished = sorted(layout.finished_seed_files(out / "xe_mmd" / "objective.weight=10"))
    stamps = [p.stat().st_mtime_ns for p in finished]
    run_paths(cfg)  # resumes: every seed is finished, nothing trains again
    assert "2 finished, 0 to train" in capsys.readouterr().err
    assert [p.stat().st_mtime_ns for p in finished] == stamps
    again = json.loads(layout.path_record(out, "xe_mmd").read_text())
    assert again["points"][1]["train_seconds"] == ten_point["train_seconds"]  # kept, not reset
    pd.testing.assert_frame_equal(pd.read_csv(written["xe_mmd"]), table)


@needs("heart-disease")
def test_processes_share_a_dataset_point_by_point_and_never_train_a_point_twice(
    tmp_path, capsys, monkeypatch
):
    from filelock import FileLock

    from kcal.reruns import paths

    cfg = compose_cfg(
        "paths", *HEART[:-2], "paths.grids.xe_mmd=[10,30]", "paths.max_extension=0", f"root={tmp_path}"
    )
    out = layout.paths_dir(tmp_path, "heart-disease")
    start, info = paths.start_config(cfg)
    ten, thirty = (paths.Point(out, "xe_mmd", w, [0, 1]) for w in (10, 30))
    other = {}  # another process's claims on both points
    for point in (ten, thirty):
        point.dir.parent.mkdir(parents=True, exist_ok=True)
        other[point.weight] = FileLock(layout.claim_file(point.dir), thread_local=False)
        other[point.weight].acquire()
    seen, say = [], paths.say

    def other_process(dataset, text):  # what the other process does when this one reports
        say(dataset, text)
        if "λ=10: another process trains it" in text:  # passed over, untouched; the other process trains it
            seen.append(("passed", 10.0, len(ten.pending())))
            paths.train_point(ten, paths.point_config(start, "xe_mmd", 10.0), info, cfg)
            other[10.0].release()
        elif "λ=30: another process trains it" in text:
            seen.append(("passed", 30.0, len(thirty.pending())))
        elif (
            "λ=30: waiting for the process that trains it" in text
        ):  # no path can go on: it waits, then trains
            seen.append(("waits", 30.0, len(thirty.pending())))
            other[30.0].release()  # the other process stopped without training it

    monkeypatch.setattr(paths, "say", other_process)
    table = pd.read_csv(paths.run_paths(cfg)["xe_mmd"])
    assert seen == [("passed", 10.0, 2), ("passed", 30.0, 2), ("waits", 30.0, 2)]
    err = capsys.readouterr().err
    assert "xe_mmd λ=10: 2 seeds in" not in err  # trained once, by the other process
    assert "xe_mmd λ=30: 2 seeds in" in err and "(+1 by another process) | paths 99%" in err
    assert sorted(set(table["weight"])) == [0.0, 10.0, 30.0] and set(table["n"]) == {2}
    record = json.loads(layout.path_record(out, "xe_mmd").read_text())
    assert "3 points finished" in err
    # every point's seconds and commit, the one the other process trained too: read from its seeds' run.json
    assert [p["train_seconds"] > 0 for p in record["points"]] == [True, True, True]
    assert [p["commits"] for p in record["points"]] == [[record["commit"]]] * 3


@needs("heart-disease")
def test_a_process_told_not_to_wait_leaves_the_other_process_its_last_points(tmp_path, capsys):
    """``paths.wait=false``: when every point left is another process's, the process ends (its core free for the
    next dataset) and writes no path that waits for them; run again once they are free, it trains and writes."""
    from filelock import FileLock

    from kcal.reruns import paths

    cfg = compose_cfg("paths", *HEART, f"root={tmp_path}", "paths.wait=false")
    out = layout.paths_dir(tmp_path, "heart-disease")
    ten = paths.Point(out, "xe_mmd", 10.0, [0, 1])
    ten.dir.parent.mkdir(parents=True, exist_ok=True)
    other = FileLock(layout.claim_file(ten.dir), thread_local=False)  # another process's claim
    other.acquire()
    assert paths.run_paths(cfg) == {}
    err = capsys.readouterr().err
    assert "xe λ=0: 2 seeds in" in err and "ending without waiting (that process writes xe_mmd)" in err
    assert ten.pending() == [0, 1] and not layout.path_table(out, "xe_mmd").exists()
    other.release()
    assert paths.run_paths(cfg) == {"xe_mmd": layout.path_table(out, "xe_mmd")}
    assert "2 points finished\n" in capsys.readouterr().err.replace(" | paths 100%", "")


@needs("heart-disease")
def test_a_record_keeps_the_seconds_and_commits_of_points_a_stopped_run_trained(tmp_path):
    from kcal.reruns import paths

    cfg = compose_cfg("paths", *HEART, f"root={tmp_path}")
    out = layout.paths_dir(tmp_path, "heart-disease")
    start, info = paths.start_config(cfg)
    ten = paths.Point(out, "xe_mmd", 10.0, [0, 1])
    paths.train_point(ten, paths.point_config(start, "xe_mmd", 10.0), info, cfg)  # a run stopped after λ = 10
    stack = json.loads((ten.dirs[0] / layout.RUN_INFO_FILE).read_text())
    assert stack["commit"] and stack["vectorized"]["seeds"] == [0, 1]
    stale = {"base": "xe", "objective": "xe_mmd", "points": [{"weight": 10, "commits": ["st4le"]}]}
    layout.path_record(out, "xe_mmd").write_text(json.dumps(stale))  # a record of seeds since trained again
    layout.path_record(out, "xe_mmce").write_text("{not json")  # a record that does not read: passed over
    paths.run_paths(cfg)
    zero, point = json.loads(layout.path_record(out, "xe_mmd").read_text())["points"]
    assert point["train_seconds"] == pytest.approx(stack["vectorized"]["chunk_train_seconds"], abs=1e-3)
    assert point["commits"] == [stack["commit"]] and zero["commits"] == [stack["commit"]]  # not the stale one
    # seeds trained before run.json recorded a commit: the commits an earlier record named for the point stand,
    # λ = 0's from any path's record (every path shares it)
    for d in [*ten.dirs, *paths.Point(out, "xe", 0.0, [0, 1]).dirs]:
        info_file = d / layout.RUN_INFO_FILE
        info_file.write_text(
            json.dumps({k: v for k, v in json.loads(info_file.read_text()).items() if k != "commit"})
        )
    other = layout.path_record(out, "xe_kde")
    named = ["0ld", stack["commit"][:-1]]  # the same commit, as a shorter hash: listed once, in full
    other.write_text(
        json.dumps({"base": "xe", "objective": "xe_kde", "points": [{"weight": 0, "commits": named}]})
    )
    paths.run_paths(cfg)
    zero, point = json.loads(layout.path_record(out, "xe_mmd").read_text())["points"]
    assert point["commits"] == [stack["commit"]] and zero["commits"] == sorted(["0ld", stack["commit"]])


@needs("heart-disease")
def test_a_point_goes_on_in_a_run_with_other_paths_settings(tmp_path):
    """Which points a run trains (``paths.*``) shapes no number of a point: a point one process began goes on in a
    process started with other paths settings, also from a fingerprint stored with ``paths`` keys (before they
    were left out); another training config is still refused."""
    from kcal.reruns import paths
    from kcal.sweep.fingerprint import FingerprintMismatch

    out = layout.paths_dir(tmp_path, "heart-disease")
    first = compose_cfg("paths", *HEART, f"root={tmp_path}", "paths.n_seeds=1")
    start, info = paths.start_config(first)
    began = paths.Point(out, "xe_mmd", 10.0, [0])
    paths.train_point(began, paths.point_config(start, "xe_mmd", 10.0), info, first)  # a stop after seed 0
    stored = began.dir / layout.FINGERPRINT_FILE
    fingerprint = json.loads(stored.read_text())
    assert fingerprint and not [k for k in fingerprint if k.startswith("paths.")]
    old = {**fingerprint, "paths.objectives": ["xe_mmd"], "paths.n_seeds": 1}  # as an earlier kcal stored it
    stored.write_text(json.dumps(old))
    other = compose_cfg("paths", *HEART, f"root={tmp_path}", "paths.objectives=[xe_mmd,xe_kde]")
    start, info = paths.start_config(other)
    point = paths.Point(out, "xe_mmd", 10.0, [0, 1])
    assert point.pending() == [1]
    paths.train_point(point, paths.point_config(start, "xe_mmd", 10.0), info, other)
    assert point.pending() == [] and json.loads(stored.read_text()) == old  # resumed, not re-stamped
    longer = compose_cfg("paths", *HEART, f"root={tmp_path}", "trainer.max_epochs=3", "paths.n_seeds=3")
    start, info = paths.start_config(longer)
    with pytest.raises(FingerprintMismatch, match="trainer.max_epochs"):
        paths.train_point(paths.Point(out, "xe_mmd", 10.0, [0, 1, 2]), paths.point_config(start, "xe_mmd", 10.0),
                          info, longer)  # fmt: skip


def test_bad_path_settings_are_refused_in_one_line(tmp_path):
    from kcal.reruns.paths import SCHEMA, regularisers

    with pytest.raises(ConfigError, match="nll_mmd is not a regulariser of classification; valid: xe_mmd"):
        SCHEMA.validate(compose_cfg("paths", "dataset=heart-disease", "paths.objectives=[nll_mmd]"))
    with pytest.raises(
        ConfigError, match=r"paths.grids.xe_mmd must be a non-empty list of finite numbers > 0, got \[0, 10\]"
    ):
        SCHEMA.validate(compose_cfg("paths", "dataset=heart-disease", "paths.grids.xe_mmd=[0,10]"))
    assert regularisers(compose_cfg("paths", "dataset=crime")) == ["nll_mmd", "nll_mmd_tanh"]
    with pytest.raises(ConfigError, match="paths.n_seeds must be an integer >= 2"):
        SCHEMA.validate(compose_cfg("paths", "dataset=heart-disease", "paths.n_seeds=1", f"root={tmp_path}"))


def test_the_kernel_check_tells_an_active_x_kernel_from_the_identity():
    from kcal.reruns.paths import kernel_check

    x = torch.randn(256, 20, generator=torch.Generator().manual_seed(0))
    median = 2.0 * 20  # squared distance of two rows of unit-variance features, on average
    active = kernel_check(x, {"bandwidth_z": median, "bandwidth_y": 0.1}, batch_size=64, max_batches=4)
    off = kernel_check(x, {"bandwidth_z": 1e-3}, batch_size=64, max_batches=4)
    assert active["x"]["batches"] == 4 and active["x"]["mean"] == pytest.approx(math.exp(-1), abs=0.05)
    assert active["x"]["share_above_0.001"] > 0.99 and off["x"]["share_above_0.001"] == 0.0
    assert active["y"]["at_2"] == pytest.approx(math.exp(-20)) and "y" not in off
    assert kernel_check(x, {"bandwidth": 0.4, "scaling": "authors"}, 64, 4) == {}  # MMCE: no x-kernel


@needs("heart-disease")
def test_progress_counts_the_seeds_left_so_a_half_trained_point_is_half_the_work(tmp_path, capsys):
    """A stopped run leaves points with some seeds finished; the next run's percentage and ETA count the seeds it
    has left, not whole points (else a point two thirds done counts as a whole one, and the ETA runs fast)."""
    from kcal.reruns.paths import run_paths

    run_paths(compose_cfg("paths", *HEART, f"root={tmp_path}"))  # λ = 0 and 10, seeds 0 and 1
    capsys.readouterr()
    more = [*HEART, "paths.n_seeds=3", "paths.grids.xe_mmd=[10,30]", f"root={tmp_path}"]
    run_paths(compose_cfg("paths", *more))  # seeds left: 1 at λ = 0, 1 at λ = 10, 3 at λ = 30
    err = capsys.readouterr().err
    assert "3 points x 3 seeds, 0 finished, 3 to train" in err
    assert "xe λ=0: 1 seeds in" in err and "| paths 20%" in err  # 1 of 5 seeds, not 1 of 3 points
    assert "xe_mmd λ=10: 1 seeds in" in err and "| paths 40%" in err
    assert "xe_mmd λ=30: 3 seeds in" in err and "paths 33%" not in err and "paths 67%" not in err


@needs("heart-disease")
def test_a_path_goes_on_until_the_regulariser_dominates(tmp_path, capsys):
    from kcal.reruns.paths import next_weight, run_paths

    assert [next_weight(w) for w in (1, 3, 10, 0.3, 0.001, 3000)] == [3, 10, 30, 1, 0.003, 10000]
    over = [*HEART[:-1], "paths.max_extension=1", f"root={tmp_path}"]
    table = pd.read_csv(run_paths(compose_cfg("paths", *over, "paths.dominant_share=1e9"))["xe_mmd"])
    assert sorted(set(table["weight"])) == [0.0, 10.0, 30.0]  # one point further, at most max_extension
    assert "xe_mmd: share" in capsys.readouterr().err
    record = json.loads(layout.path_record(layout.paths_dir(tmp_path, "heart-disease"), "xe_mmd").read_text())
    assert record["grid"] == [0.0, 10.0, 30.0] and record["grid_config"] == [10]
    further = [*HEART[:-1], "paths.max_extension=2", f"root={tmp_path}", "paths.dominant_share=1e9"]
    run_paths(compose_cfg("paths", *further))  # resumed: λ = 30, finished before, is not this run's new work
    err = capsys.readouterr().err
    assert "xe_mmd λ=100: 2 seeds in" in err and "by another process" not in err and "paths 50%" not in err
    table = pd.read_csv(run_paths(compose_cfg("paths", *over, "paths.dominant_share=1e-9"))["xe_mmd"])
    assert sorted(set(table["weight"])) == [0.0, 10.0]  # dominant at λ = 10 already: no further point


@needs("heart-disease")
def test_a_path_moved_with_kcal_state_resumes_on_the_other_machine_without_training(tmp_path, capsys):
    from kcal.orchestrate.state import main as state
    from kcal.reruns.paths import run_paths

    root_a, root_b = tmp_path / "machine-a", tmp_path / "machine-b"
    table = pd.read_csv(run_paths(compose_cfg("paths", *HEART, f"root={root_a}"))["xe_mmd"])
    state(["export", str(root_a), str(tmp_path / "state"), "--no-predictions"])
    assert (
        "heart-disease: 0 studies (0 trials), 0 finished seeds, 4 finished seeds of regularisation paths"
        in (capsys.readouterr().out)
    )
    moved = {
        p.relative_to(tmp_path / "state").as_posix() for p in (tmp_path / "state").rglob("*") if p.is_file()
    }
    point = "paths/heart-disease/xe_mmd/objective.weight=10"
    assert {
        f"{point}/fingerprint.json",
        f"{point}/seeds/seed1/history.csv.json",
        "paths/heart-disease/xe_mmd.json",
        "paths/heart-disease/xe_mmd.csv.json",
    } <= moved
    assert not any(p.endswith(("predictions.json", ".pt", ".csv")) for p in moved)  # CSV files travel as text
    assert not any(p.endswith(".lock") for p in moved)  # a point's claim stays on its machine
    history = f"{point}/seeds/seed1/history.csv"
    before = (root_a / history).read_bytes()
    state(["import", str(tmp_path / "state"), str(root_b)])
    assert "4 finished seeds of regularisation paths" in capsys.readouterr().out
    assert (root_b / history).read_bytes() == before  # the seed's history back byte for byte
    written = run_paths(compose_cfg("paths", *HEART, f"root={root_b}"))
    assert "2 points x 2 seeds, 2 finished, 0 to train" in capsys.readouterr().err
    pd.testing.assert_frame_equal(pd.read_csv(written["xe_mmd"]), table)
    with pytest.raises(SystemExit):  # the paths are there now: a second import is refused
        state(["import", str(tmp_path / "state"), str(root_b)])
    assert "paths/heart-disease/" in capsys.readouterr().err
