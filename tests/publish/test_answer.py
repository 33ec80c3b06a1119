"""kcal.publish.answer and kcal.publish.selected_kernels: the report's answer tables and the selected MMD kernels."""

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from kcal.core import layout
from kcal.publish.answer import (
    CELL_CLASSES,
    ClaimSummary,
    Outcome,
    cell_classes,
    cells_table,
    claim_summaries,
    claims_table,
    covered,
    dataset_line,
    readme_summary,
    spread_moves,
    why_sentences,
)
from kcal.publish.claims import CLAIMS
from kcal.publish.protocol_runs import runs_studies
from kcal.publish.protocol_spread import BEYOND, CELL_KEYS, PUBLISHED, WITHIN, replicates_of, spread_frame
from kcal.publish.report import data_dir
from kcal.publish.selected_kernels import kernel_row, kernels_markdown, selected_kernels, switched_off
from kcal.publish.table_cells import FLAVOURS, comparison_frame, load_results
from kcal.publish.verdicts import SUPPORTED

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"


# ---- selected kernels ------------------------------------------------------------------------------------------
def study(dataset: str, objective: str, **params) -> dict:
    return {"dataset": dataset, "objective": objective, "best_trial": 7, "best_params": json.dumps(params)}


def test_kernel_values_follow_the_bandwidths_and_the_dataset_s_features():
    # heart-disease has 23 features: the x-kernel at squared distance 2d = 46 is exp(-46 / h_x)
    row = kernel_row("published", study("heart-disease", "xe_mmd", **{"objective.params.bandwidth_z": 46.0,
                                        "objective.params.bandwidth_y": 2.0, "objective.weight": 3.0}))  # fmt: skip
    assert row["d"] == 23 and row["log10_kx"] == pytest.approx(math.log10(math.exp(-1.0)))
    assert row["ky"] == pytest.approx(math.exp(-1.0)) and row["weight"] == 3.0 and not switched_off(row)
    narrow = kernel_row("published", study("heart-disease", "xe_mmd", **{"objective.params.bandwidth_z": 0.1,
                                           "objective.params.bandwidth_y": 2.0}))  # fmt: skip
    flat = kernel_row("published", study("dry-bean", "xe_mmd", **{"objective.params.bandwidth_z": 50.0,
                                         "objective.params.bandwidth_y": 200.0}))  # fmt: skip
    tanh = kernel_row("published", study("crime", "nll_mmd_tanh", **{"objective.params.bandwidth_z": 1000.0}))
    median = kernel_row(
        "published", study("crime", "nll_mmd", **{"objective.weight": 5.0})
    )  # h_x not searched
    assert math.isnan(median["log10_kx"]) and not switched_off(median)
    assert "| — | 102 | — |" in kernels_markdown(pd.DataFrame([median]))
    assert switched_off(narrow) and narrow["log10_kx"] < -100  # 10^-200: the identity off the diagonal
    assert switched_off(flat) and flat["ky"] > 0.99 and flat["log10_kx"] > -1  # x on, class kernel ~constant
    assert math.isnan(tanh["ky"]) and not switched_off(tanh)


def test_only_mmd_studies_are_read_and_the_table_says_which_are_off():
    studies = pd.DataFrame([
        study("heart-disease", "xe", **{"trainer.lr": 0.01}),
        study("heart-disease", "xe_mmd", **{"objective.params.bandwidth_z": 0.003, "objective.params.bandwidth_y": 1.0,
                                            "objective.weight": 200.0}),
        study("crime", "nll_mmd@samples=10", **{"objective.params.bandwidth_z": 0.7}),
    ])  # fmt: skip
    kernels = selected_kernels({"published": studies, "sampler_seed=1": studies.iloc[1:2]})
    assert list(kernels["run"]) == ["published", "sampler_seed=1"] and set(kernels["objective"]) == {"xe_mmd"}
    table = kernels_markdown(kernels)
    assert table.count("| yes |") == 2 and f"| 1e{round(-2 * 23 / (0.003 * math.log(10)))} |" in table
    assert "off in 1 of 1 selected" in why_sentences(kernels) and "replicates of the protocol it is off in 1 of 1" \
        in why_sentences(kernels)  # fmt: skip


# ---- the answer on the published report ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def published():
    data = data_dir("full")
    results = load_results(data / "results.csv")
    others = {n: load_results(p / layout.RESULTS_FILE) for n, p in layout.replicate_data_dirs(data).items()}
    replicates = replicates_of(results, others)
    spread = spread_frame(replicates)
    return results, replicates, spread, selected_kernels(runs_studies(data))


def test_every_claim_has_one_table_row_with_the_paper_s_verdict_and_ours(published):
    results, replicates, _, _ = published
    summaries = claim_summaries(results, {n: r for n, r in replicates.items() if n != PUBLISHED})
    assert [s.id for s in summaries] == [c.id for c in CLAIMS]
    for s in summaries:
        for outcome in (s.paper, *s.ours.values()):
            assert set(outcome.holds) <= set(outcome.judged)
    rows = [line for line in claims_table(summaries).splitlines()[2:]]
    assert [line.split(" | ")[0].strip("| ") for line in rows] == [c.id for c in CLAIMS]
    assert all("crime" in line for line in rows if line.startswith("| R1 "))  # R1's runs: crime's replicates


def test_cells_are_classed_by_the_seed_verdict_then_the_protocol_s_spread(published):
    results, _, spread, _ = published
    classes = cell_classes(results, spread)
    compared = sum(int(comparison_frame(results, fl)["verdict"].isin(["within 2 SE", "differs"]).sum())
                   for fl in FLAVOURS)  # fmt: skip
    assert len(classes) == compared and set(classes["class"]) <= set(CELL_CLASSES)
    within = classes["verdict"] == "within 2 SE"
    assert (classes.loc[within, "class"] == CELL_CLASSES[0]).all()
    verdicts = dict(zip(map(tuple, spread[CELL_KEYS].to_numpy()), spread["protocol_verdict"], strict=True))
    for r in classes[~within].to_dict("records"):
        verdict = verdicts.get(tuple(r[k] for k in CELL_KEYS))
        expected = (CELL_CLASSES[3] if verdict is None else CELL_CLASSES[1] if verdict.startswith(WITHIN)
                    else CELL_CLASSES[2] if verdict.startswith(BEYOND) else verdict)  # fmt: skip
        assert r["class"] == expected
    table = cells_table(classes)
    for flavour in FLAVOURS:  # the "all" line of a flavour sums its tables' lines
        lines = [line.split(" | ") for line in table.splitlines() if f"| {flavour} |" in line]
        assert (
            sum(int(cells[3]) for cells in lines[:-1])
            == int(lines[-1][3])
            == int((classes["flavour"] == flavour).sum())
        )


def test_dataset_line_spread_moves_and_the_readme_summary(published):
    results, replicates, spread, kernels = published
    others = {n: r for n, r in replicates.items() if n != PUBLISHED}
    summaries, classes = claim_summaries(results, others), cell_classes(results, spread)
    line = dataset_line(summaries, classes, "online-shoppers")
    assert re.match(r"\*\*Result\.\*\* exact, \d+ cells: ", line) and "(of C1, C2, C3, C4a, C4b)" in line
    ratio = spread["ratio"].dropna()
    assert f"a median {ratio.median():.2f} times" in spread_moves(spread)
    summary = readme_summary(summaries, classes, kernels, "docs/results/full/RESULTS.md")
    assert "[RESULTS.md](docs/results/full/RESULTS.md)" in summary and len(summary.splitlines()) <= 10
    assert "[claims.md](docs/results/full/claims.md)" in summary  # where the claim IDs are defined
    assert f"on {results['dataset'].nunique()} of the paper's 10 datasets" in summary
    # the "why" counts the published run's selected MMD configurations and, apart, its replicates'
    off, is_pub = kernels.apply(switched_off, axis=1).astype(bool), kernels["run"] == PUBLISHED
    assert (~is_pub).any()
    assert (
        f"in {int(off[is_pub].sum())} of {int(is_pub.sum())} selected MMD configurations of the published run "
        f"(in the replicates of the protocol: {int(off[~is_pub].sum())} of {int((~is_pub).sum())})"
    ) in summary
    # the paper's own numbers: each claim the rules do not support there is named with its verdict, which is
    # not called a rejection when it is only undecided
    for s in summaries:
        if s.paper.verdict != SUPPORTED:
            assert re.search(
                rf"own numbers the same rules give [^.]*{s.paper.verdict} [^.;]*\b{s.id}\b", summary
            )
    assert "reject" not in summary
    for s in summaries:  # a supported claim judged on fewer datasets than the paper's says on how many
        for flavour in FLAVOURS:
            ours, theirs = len(s.ours[flavour].judged), len(s.paper.judged)
            if s.ours[flavour].verdict == SUPPORTED and ours < theirs:
                assert re.search(
                    rf"\*\*Reproduces\*\*[^\n]*{s.id} \(on {ours} of its {theirs} datasets\)", summary
                )


def test_the_first_lines_name_every_claim_under_its_verdict_in_each_flavour(published):
    """The answer first: one line per verdict word, every claim under the verdict each flavour gives it (marked
    with the flavour where the two differ), then why and what to do; RESULTS.md opens with them."""
    from kcal.publish.answer import VERDICT_LINES, first_lines
    from kcal.publish.questions.tradeoff import PathCounts

    results, replicates, _, kernels = published
    summaries = claim_summaries(results, {n: r for n, r in replicates.items() if n != PUBLISHED})
    lines = first_lines(summaries, kernels, PathCounts(23, 7, 4, 1, 3), "claims.md")
    assert len(lines) == len(VERDICT_LINES) + 2 and lines[-1].startswith("- **What to do**")
    assert "4 of 23 paths" in lines[-1] and "as good in 1 of those" in lines[-1]
    for s in summaries:
        for fl in FLAVOURS:
            (line,) = [
                line for (v, _, _), line in zip(VERDICT_LINES, lines, strict=False) if v == s.ours[fl].verdict
            ]
            assert re.search(rf"\b{s.id}\b", line), (s.id, fl, line)
    none = first_lines(summaries, kernels, PathCounts(5, 2, 0, 0, 0), "claims.md")
    assert "none of 5 paths lowers" in none[-1]
    text = (DOCS / "full" / "RESULTS.md").read_text(encoding="utf-8").splitlines()
    assert text[2] == "<!-- kcal.report:answer:first -->" and text[3].startswith("**In short**")
    assert text[10] == "<!-- /kcal.report -->"  # the answer is the first 10 lines


def test_a_supported_claim_judged_on_fewer_datasets_than_the_papers_says_on_how_many():
    five = ("a", "b", "c", "d", "e")
    paper = Outcome(SUPPORTED, five, five)

    def claim(verdict, judged):
        return ClaimSummary("R2", "", 3, paper, {"exact": Outcome(verdict, judged, judged)})

    assert covered(claim(SUPPORTED, five[:2]), "exact") == "R2 (on 2 of its 5 datasets)"
    assert covered(claim(SUPPORTED, five), "exact") == "R2"
    assert covered(claim("undecided", five[:2]), "exact") == "R2"
