"""kcal.publish.questions.tradeoff: the best calibration gain at no significant cost, which regulariser wins at equal cost, the
generated table and answer, the trade-off figure, and the report's check of its blocks."""

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from kcal.core import layout
from kcal.publish import verdicts as V
from kcal.publish.questions.tradeoff import (
    Cell,
    at_no_cost,
    best_point,
    first_costly,
    pm,
    read_paths,
    tradeoff_blocks,
    winners,
)

COLUMNS = [
    "dataset",
    "objective",
    "weight",
    "recalibrator",
    "flavour",
    "metric",
    "mean",
    "se",
    "n",
    "reg_share",
]


def path_frame(objective: str, points: dict, dataset: str = "heart-disease") -> pd.DataFrame:
    """A path table: ``points`` = {λ: {(recalibrator, metric): (mean, se)}}; the official flavour a copy, shifted,
    so that reading the wrong flavour shows; the share 0.01 λ."""
    rows = []
    for weight, cells in points.items():
        for (recal, metric), (mean, se) in cells.items():
            for flavour, shift in (("exact", 0.0), ("official", 0.5)):
                rows.append([dataset, objective, float(weight), recal, flavour, metric, mean + shift, se, 20,
                             0.01 * weight])  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def classes(ece: float, se: float, acc: float, acc_se: float = 0.01, recal_ece: float | None = None) -> dict:
    """One classification point: ECE and accuracy without and with post-hoc (accuracy unchanged by it)."""
    recal = ece * 0.8 if recal_ece is None else recal_ece
    return {("none", "ece"): (ece, se), ("post-hoc", "ece"): (recal, se), ("none", "acc"): (acc, acc_se),
            ("post-hoc", "acc"): (acc, acc_se)}  # fmt: skip


def test_a_spread_that_is_only_rounding_is_shown_as_none():
    # 20 seeds that all forecast one class have the same accuracy; their SE is float rounding (2.5e-17)
    assert pm(Cell(0.524590163934426386, 2.5e-17), "acc") == "52.459 ± 0.000 %"
    assert pm(Cell(0.0512, 0.0017)) == "0.0512 ± 0.0017"
    assert pm(Cell(0.5, 0.0)) == "0.500 ± 0.000"


def test_no_significant_cost_ends_at_one_combined_se_either_way():
    zero = Cell(0.80, 0.03)
    assert at_no_cost(Cell(0.75, 0.04), zero, "acc")  # 0.05 worse, combined SE 0.05: still no cost
    assert not at_no_cost(Cell(0.7499, 0.04), zero, "acc")
    assert at_no_cost(Cell(0.95, 0.04), zero, "acc")  # better is never a cost
    assert at_no_cost(Cell(1.05, 0.04), Cell(1.0, 0.03), "nll")  # lower is better for NLL
    assert not at_no_cost(Cell(1.0501, 0.04), Cell(1.0, 0.03), "nll")


def test_the_gain_pays_for_choosing_the_best_of_the_paths_points():
    """λ* is the best of k points chosen on the seeds that test it: its gain must exceed Φ⁻¹(1 - 0.025 / k)
    combined SE (Bonferroni: at most 2.5 % false gains a path), not a plain 2 SE."""
    from scipy.stats import norm

    from kcal.publish.questions.tradeoff import gain_threshold, naive_false_gain

    assert gain_threshold(1) == pytest.approx(norm.ppf(0.975)) and gain_threshold(10) == pytest.approx(
        norm.ppf(0.9975)
    )
    assert naive_false_gain(10) == pytest.approx(10 * norm.sf(2.0))
    z = gain_threshold(1)  # one point λ > 0: the threshold is 1.96 combined SE
    se = math.hypot(0.003, 0.004)
    at_boundary = path_frame("xe_mmd", {0: classes(0.10, 0.003, 0.8), 10: classes(0.10 - z * se, 0.004, 0.8)})
    beyond = path_frame(
        "xe_mmd", {0: classes(0.10, 0.003, 0.8), 10: classes(0.10 - z * se - 1e-4, 0.004, 0.8)}
    )
    a, b = best_point(at_boundary, "ece", "acc"), best_point(beyond, "ece", "acc")
    assert a.weight == b.weight == 10.0 and a.share == pytest.approx(0.1) and a.points == 1
    assert a.gain == V.INDISTINGUISHABLE and not a.gained
    assert b.gain == V.BETTER and b.gained
    # the same gain of 2.2 SE among ten points falls short of the best-of-10 threshold (2.81 SE)
    many = {0: classes(0.10, 0.003, 0.8), **{w: classes(0.10, 0.004, 0.8) for w in range(1, 10)},
            10: classes(0.10 - 2.2 * se, 0.004, 0.8)}  # fmt: skip
    c = best_point(path_frame("xe_mmd", many), "ece", "acc")
    assert c.weight == 10.0 and c.points == 10 and not c.gained


def test_the_best_point_is_the_lowest_calibration_error_among_the_points_at_no_cost():
    path = path_frame("xe_mmd", {
        0: classes(0.10, 0.002, 0.80, recal_ece=0.06), 1: classes(0.099, 0.002, 0.80),
        10: classes(0.07, 0.002, 0.795, recal_ece=0.05), 100: classes(0.02, 0.002, 0.70),  # lowest, but costs
    })  # fmt: skip
    best = best_point(path, "ece", "acc")
    assert best.weight == 10.0 and best.best == Cell(0.07, 0.002) and best.cost == Cell(0.795, 0.01)
    assert best.gained and best.posthoc == Cell(0.06, 0.002) and best.best_posthoc == Cell(0.05, 0.002)
    assert best.on_top == "adds" and best.vs_posthoc == V.BETTER  # complementary: better than post-hoc alone
    assert best.posthoc_alone == V.BETTER  # post-hoc alone (0.06) is better than λ* alone (0.07)
    assert first_costly(path, "acc") == 100.0
    costly = path_frame("xe_mmd", {0: classes(0.10, 0.002, 0.80), 10: classes(0.05, 0.002, 0.70)})
    none = best_point(costly, "ece", "acc")
    assert none.weight == 0.0 and not none.gained and none.gain == V.INDISTINGUISHABLE


def test_a_regulariser_wins_only_when_better_than_every_other_path():
    def path(objective, ece):
        return path_frame(objective, {0: classes(0.10, 0.002, 0.8), 10: classes(ece, 0.002, 0.8)})

    def outcome(eces):
        bests = [best_point(path(o, e), "ece", "acc") for o, e in eces.items()]
        (w,) = winners(bests)
        return w.lowest, w.outcome, w.wins

    # A 0.05, the others 0.06 and 0.08: 0.01 apart, beyond 2 sqrt(2) 0.002 = 0.0057
    assert outcome({"xe_mmd": 0.05, "xe_mmce": 0.06, "xe_kde": 0.08}) == ("xe_mmd", V.BETTER, "xe_mmd")
    # MMCE within 0.005 of MMD: indistinguishable from one compared path, so none wins
    assert outcome({"xe_mmd": 0.05, "xe_mmce": 0.055, "xe_kde": 0.08}) == (
        "xe_mmd",
        V.INDISTINGUISHABLE,
        None,
    )


def write_paths(data: Path) -> None:
    out = layout.paths_dir(data, "heart-disease")
    out.mkdir(parents=True)
    mmd = path_frame("xe_mmd", {0: classes(0.10, 0.002, 0.80, recal_ece=0.06), 1: classes(0.099, 0.002, 0.80),
                                10: classes(0.07, 0.002, 0.795, recal_ece=0.05), 100: classes(0.02, 0.002, 0.70)})  # fmt: skip
    mmce = path_frame(
        "xe_mmce", {0: classes(0.10, 0.002, 0.80, recal_ece=0.06), 3: classes(0.09, 0.002, 0.80)}
    )
    for frame, params in ((mmd, {"form": "individual", "bandwidth_y": 0.1, "bandwidth_z": 43.4}),
                          (mmce, {"bandwidth": 0.4, "scaling": "authors"})):  # fmt: skip
        objective = frame["objective"].iloc[0]
        frame.to_csv(layout.path_table(out, objective), index=False)
        kernels = {"x": {"bandwidth": 43.4, "mean": 0.38, "share_above_0.001": 1.0}, "y": {"at_2": 2e-9}}
        record = {
            "objective_params": params,
            "points": [],
            "kernels": kernels if "bandwidth_z" in params else {},
        }
        layout.path_record(out, objective).write_text(json.dumps(record))


def test_the_table_answer_and_recipe_are_generated_from_the_path_tables(tmp_path):
    write_paths(tmp_path)
    blocks = tradeoff_blocks(tmp_path, ["heart-disease", "crime"])
    table = blocks["paths:heart-disease"]
    assert "accuracy 80.0 ± 1.0 %" in table and "(figures/tradeoff_heart-disease.png)" in table
    assert "XE + MMD: h_x = 43.4, mean off-diagonal value 0.38, 100 % of pairs above 0.001; y-kernel at squared " \
        "distance 2: 2e-09." in table  # fmt: skip
    row = next(line for line in table.splitlines() if line.startswith("| XE + MMD |"))
    assert "| 10 | 0.1 | 0.0700 ± 0.0020 | 0.0300 (10.6 SE), better | 79.5 ± 1.0 % |" in row
    assert row.endswith("| 0.0500 ± 0.0020 | adds | better |")
    assert "Winner at equal cost (ECE): **XE + MMD**, better than XE + MMCE." in table
    answer = blocks["paths:answer"]
    assert "XE + MMD at λ = 10 (h_x = 43.4, the median heuristic, h_y = 0.1; share 0.1) lowers ECE from 0.1000 to " \
        "0.0700" in answer  # fmt: skip
    assert "post-hoc alone gives 0.0600 (better than the regulariser alone)" in answer
    assert "- not published yet: crime" in answer and "not published yet" in blocks["paths:crime"]
    assert "- **XE + MMD** (λ from 1 to 100; h_x: median heuristic, h_y = 0.1): heart-disease: ECE at λ = 10 " \
        "(share 0.1); accuracy costs from λ = 100." in blocks["paths:recipe"]  # fmt: skip
    assert blocks["paths:heart-disease:full"].count("| XE + MMD |") == 4


def test_the_tradeoff_figure_is_drawn_per_dataset(tmp_path):
    from kcal.publish.figures.tradeoff_curves import draw_tradeoff_figures

    write_paths(tmp_path)
    crime = path_frame("nll_mmd", {w: {(r, m): (v + 0.01 * w, 0.01) for r in ("none", "post-hoc")
                                       for m, v in (("qce", 0.2), ("dce", 0.05), ("nll", -0.7))}
                                   for w in (0, 10, 100)}, dataset="crime")  # fmt: skip
    layout.paths_dir(tmp_path, "crime").mkdir(parents=True)
    crime.to_csv(layout.path_table(layout.paths_dir(tmp_path, "crime"), "nll_mmd"), index=False)
    drawn = draw_tradeoff_figures(read_paths(tmp_path), tmp_path / "figures")
    names = sorted(p.name for p in drawn)
    assert names == ["tradeoff_crime.pdf", "tradeoff_crime.png", "tradeoff_heart-disease.pdf",
                     "tradeoff_heart-disease.png"]  # fmt: skip
    assert all(p.stat().st_size > 5000 for p in drawn)


REPORT = Path(__file__).resolve().parents[2] / "docs" / "results" / "full"


def test_the_report_check_finds_a_stale_paths_block(tmp_path):
    """A copy of the published report whose data gains a path: the committed paths blocks of RESULTS.md and the
    library guide no longer match, and `kcal report --check` names both."""
    from kcal.publish.report import check, report_info

    _, data = report_info(REPORT)
    dest, numbers = tmp_path / "full", tmp_path / "data"
    shutil.copytree(REPORT, dest)
    shutil.copytree(data, numbers)
    library = tmp_path / "library.md"
    shutil.copyfile(REPORT.parents[1] / "library.md", library)
    info = json.loads((dest / "report.json").read_text())
    info.update(data=str(numbers), documents=["../library.md"])
    (dest / "report.json").write_text(json.dumps(info))
    target = layout.paths_dir(numbers, "heart-disease")
    shutil.rmtree(layout.paths_dir(numbers, "*").parent, ignore_errors=True)
    write_paths(numbers)
    assert target.is_dir()
    stale = check(dest)
    assert "RESULTS.md" in stale and "../library.md" in stale
