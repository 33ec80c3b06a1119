"""kcal.publish.pareto_report: the front comparison's report is generated from package data and checked."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from kcal.publish import pareto_report
from kcal.publish.pareto_report import check, data_dir, front_verdict, perfect, point_verdicts, publish

REPORT = Path(__file__).resolve().parents[2] / "docs" / "results" / "pareto"


def test_the_committed_report_matches_its_package_data():
    assert check(REPORT) == []
    assert pareto_report.main(["check", "--dest", str(REPORT)]) == 0


def compare(low, estimate, high):
    return {"hv_diff": {"low": low, "estimate": estimate, "high": high, "share_b_greater": 0.5},
            "dominated_a_by_b": {"estimate": 0.0}, "dominated_b_by_a": {"estimate": 0.0}}  # fmt: skip


def test_front_verdicts_follow_the_interval_and_need_the_full_budget():
    assert front_verdict(compare(0.01, 0.05, 0.09)) == "dominates"
    assert front_verdict(compare(-0.09, -0.05, -0.01)) == "loses"
    assert front_verdict(compare(-0.001, 0.05, 0.09)) == "matches"
    assert front_verdict(compare(0.01, 0.05, 0.09), trials=20) == "no verdict (20 trials)"
    tiny = compare(1e-70, 2e-70, 3e-70)  # breast-cancer: every front is one point at NLL ~1e-22, ECE 0
    assert front_verdict(tiny, is_perfect=True) == "none: both fronts are a perfect validation score"
    one = {"front": [3], "rule_nll": {"values": [7e-22, 0.0]}}
    assert perfect(one, one) and not perfect(one, {"front": [3], "rule_nll": {"values": [0.01, 0.0]}})
    assert not perfect(one, {"front": [3, 4], "rule_nll": {"values": [7e-22, 0.0]}})


def rows(label, ece, nll, n=20, se=0.01):
    return [
        ("toy", label, "none", "exact", metric, mean, se, n) for metric, mean in (("ece", ece), ("nll", nll))
    ]


def test_test_split_verdicts_use_two_combined_standard_errors_against_the_same_rule():
    fronts = {"plain": "xe", "objectives": {
        "xe": {"trials": 100, "front": [0], "rule_nll": {"trial": 0, "values": [0, 0], "reg_share": [None, None]},
               "rule_calibration": {"trial": 0, "values": [0, 0], "reg_share": [None, None]}},
        "xe_kde": {"trials": 100, "front": [1], "rule_nll": {"trial": 1, "values": [0, 0], "reg_share": [0.1, 0.1]},
                   "rule_calibration": {"trial": 2, "values": [0, 0], "reg_share": [0.3, 0.3]}},
        "xe_mmd": {"trials": 100, "front": [1], "rule_nll": {"trial": 1, "values": [0, 0], "reg_share": [0, 0]},
                   "rule_calibration": {"trial": 1, "values": [0, 0], "reg_share": [0, 0]}},
    }}  # fmt: skip
    se = 0.01  # combined SE of two points: 0.01 * sqrt(2) = 0.0141
    results = pd.DataFrame(
        rows("xe", 0.10, 0.9) + rows("xe_kde", 0.12, 1.0) + rows("xe_kde@calibration", 0.07, 1.1)
        + rows("xe_mmd", 0.11, 0.9, n=5),
        columns=["dataset", "objective", "recalibrator", "flavour", "metric", "mean", "se", "n"],
    )  # fmt: skip
    lines = point_verdicts(fronts, results)
    assert (
        lines[0].startswith("XE + ECE-KDE, rule 1 (trial 1) is level on calibration")
        and "+1.4 SE" in lines[0]
    )
    assert (
        lines[1].startswith("XE + ECE-KDE, rule 2 (trial 2) improves calibration") and "-2.1 SE" in lines[1]
    )
    assert "+0.200 nats" in lines[1] and se == 0.01
    assert lines[2] == "XE + MMD, rule 1: no verdict (5 seeds)."


def test_publish_copies_a_roots_comparison_and_seeds_and_rewrites_only_the_blocks(tmp_path):
    root, folder, dest = tmp_path / "root", tmp_path / "data", tmp_path / "report"
    source = data_dir() / "heart-disease"
    (root / "pareto" / "heart-disease").mkdir(parents=True)
    shutil.copyfile(source / "fronts.json", root / "pareto" / "heart-disease" / "fronts.json")
    results = pd.read_csv(source / "results.csv")
    for label, part in results.groupby("objective"):
        (root / "heart-disease" / label).mkdir(parents=True)
        part.to_csv(root / "heart-disease" / label / "summary.csv", index=False)
    dest.mkdir()
    (dest / "README.md").write_text("# mine\n\nHand-written words.\n")
    publish(root, ["heart-disease"], dest, folder)
    text = (dest / "README.md").read_text()
    assert (
        text.startswith("# mine\n\nHand-written words.\n") and "| XE + ECE-KDE, 2 (trial 62) | 20 |" in text
    )
    assert check(dest, folder) == []
    published = pd.read_csv(folder / "heart-disease" / "results.csv")
    published.loc[published.metric == "ece", "mean"] += 0.001
    published.to_csv(folder / "heart-disease" / "results.csv", index=False)
    assert check(dest, folder) == ["pareto:heart-disease:test"]
    with pytest.raises(SystemExit, match="run python -m kcal.publish.questions.pareto_compare"):
        publish(root, ["crime"], dest, folder)


def test_the_readme_check_command_passes_from_the_repository_root():
    """`kcal pareto-report check`, as docs/pareto.md writes it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "kcal.publish.pareto_report", "check"], cwd=REPORT.parents[2],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "every generated block matches the package data" in done.stdout


def test_diverged_trials_count_towards_the_budget_of_a_verdict():
    """crime's NLL study: 100 trials of which 36 diverged; the verdict needs the budget, not 100 completions."""
    from kcal.publish.pareto_report import budget, min_trials

    nll = {"trials": 64, "counted": 100}
    assert budget(nll) == 100 and budget({"trials": 100}) == 100
    assert min_trials({"objectives": {"nll": nll, "nll_mmd": {"trials": 100, "counted": 100}}}) == 100
    assert min_trials({"objectives": {"nll": {"trials": 64, "counted": 70}}}) == 70
