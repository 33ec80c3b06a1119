"""The report's tables in Markdown, generated from the published data: the paper's cells beside ours per dataset
(:func:`side_by_side`), the sweep studies (:func:`studies_table`) and the expected best validation score after k
trials (:func:`budget_table`, :func:`budget_summary`). :mod:`kcal.publish.report` puts them into the documents'
generated blocks."""

from __future__ import annotations

import pandas as pd

from kcal.publish.budget import PLATEAU_SHARE, expected_best, reached_plateau
from kcal.publish.protocol_spread import PUBLISHED
from kcal.publish.table_cells import FLAVOURS, comparison_frame, fmt
from kcal.publish.trials import selection_scores


def _cell(mean, se) -> str:
    if pd.isna(mean):
        return "—"
    return fmt(mean) if pd.isna(se) else f"{fmt(mean)} ± {fmt(se)}"


def side_by_side(results: pd.DataFrame, dataset: str) -> str:
    """The paper's cells next to ours in both flavours, for one dataset (only cells we ran)."""
    keys = ["table", "dataset", "row", "metric"]
    frames = []
    for fl in FLAVOURS:
        comp = comparison_frame(results, fl)
        comp = comp[comp["dataset"] == dataset]
        frames.append(comp.set_index(keys)[["ours_mean", "ours_se", "ours_n", "paper_mean", "paper_se", "verdict"]]
                      .add_prefix(f"{fl}_"))  # fmt: skip
    both = pd.concat(frames, axis=1).reset_index()
    ran = both[[f"{fl}_ours_mean" for fl in FLAVOURS]].notna().any(axis=1)
    both = both[ran]
    lines = ["| table | row | metric | paper | ours, exact | verdict | ours, official | verdict | n |",
             "|---|---|---|---:|---:|---|---:|---|---:|"]  # fmt: skip
    for r in both.to_dict("records"):
        n = r["exact_ours_n"] if not pd.isna(r["exact_ours_n"]) else r["official_ours_n"]
        lines.append(
            f"| {r['table']} | {r['row']} | {r['metric']} | {_cell(r['exact_paper_mean'], r['exact_paper_se'])} "
            f"| {_cell(r['exact_ours_mean'], r['exact_ours_se'])} | {r['exact_verdict']} "
            f"| {_cell(r['official_ours_mean'], r['official_ours_se'])} | {r['official_verdict']} "
            f"| {'—' if pd.isna(n) else int(n)} |"
        )
    return "\n".join(lines)


def studies_table(studies: pd.DataFrame) -> str:
    lines = ["| dataset | objective | trials complete | failed (counted) | best trial | best value | seeds "
             "| sweep start (UTC) | seeds done (UTC) | trial hours |",
             "|---|---|---:|---:|---:|---:|---:|---|---|---:|"]  # fmt: skip
    for r in studies.to_dict("records"):
        best = "—" if pd.isna(r["best_value"]) else f"{r['best_value']:.4f}"
        trial = "—" if pd.isna(r["best_trial"]) else int(r["best_trial"])
        lines.append(f"| {r['dataset']} | {r['objective']} | {r['complete']} | {r['failed']} | {trial} | {best} "
                     f"| {r['seeds']} | {_text(r['sweep_start'])} | {_text(r['seeds_end'])} | {r['trial_hours']} |")  # fmt: skip
    return "\n".join(lines)


def _text(value) -> str:
    return "—" if pd.isna(value) or value == "" else str(value)


def budget_table(runs: dict[str, pd.DataFrame]) -> str:
    """Per study with kept trials, of each run of the protocol (``runs``: ``{run name: its trials}``, the
    published run and its replicates): the expected best selection score after 1, 10, n/2 and n trials
    (:mod:`kcal.publish.budget`) and whether n trials reached the plateau by its rule."""
    scores = {(dataset, objective, run): value for run, trials in runs.items()
              for (dataset, objective), value in selection_scores(trials).items()}  # fmt: skip
    if not scores:
        return "(no trials kept)"
    lines = [f"Expected best validation score (the study's selection score: accuracy or NLL) of k trials drawn "
             f"from the study's own complete trials (Dodge et al. 2019), for each run of the protocol whose "
             f"trials are kept (the published one and its replicates). Plateau: the gain from n/2 to n trials "
             f"is below {PLATEAU_SHARE:g} of the gain from 1 to n (rule in `kcal.publish.budget`).", "",
             "| dataset | objective | run | n | k = 1 | k = 10 | k = n/2 | k = n | plateau at n |",
             "|---|---|---|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for dataset, objective, run in sorted(
        scores, key=lambda key: (key[0], key[1], key[2] != PUBLISHED, key[2])
    ):
        values, maximize = scores[(dataset, objective, run)]
        n = len(values)
        e1, e10, half, last = expected_best(values, [1, min(10, n), max(1, n // 2), n], maximize)
        reached, late, total = reached_plateau(values, maximize)
        verdict = "reached" if reached else f"not reached (late gain {late:.4g} of {total:.4g})"
        lines.append(f"| {dataset} | {objective} | {run} | {n} | {e1:.4f} | {e10:.4f} | {half:.4f} | {last:.4f} "
                     f"| {verdict} |")  # fmt: skip
    return "\n".join(lines)


def budget_summary(runs: dict[str, pd.DataFrame]) -> str:
    """The budget table (:func:`budget_table`) in a sentence: how many studies with kept trials reached the plateau,
    and the largest share of a study's gain that came from its last n/2 trials."""
    scores = {(dataset, objective, run): value for run, trials in runs.items()
              for (dataset, objective), value in selection_scores(trials).items()}  # fmt: skip
    if not scores:
        return "(no trials kept)"
    plateau = {key: reached_plateau(*value) for key, value in scores.items()}
    reached = sum(r for r, _, _ in plateau.values())
    late = {key: (lg / total if total > 0 else 0.0) for key, (_, lg, total) in plateau.items()}
    worst = max(late, key=late.get)
    datasets = ", ".join(sorted({dataset for dataset, _, _ in scores}))
    return (f"{reached} of the {len(scores)} studies with kept trials ({len(runs)} runs of the protocol; {datasets}) "
            f"reached the plateau at n trials (rule: the gain from n/2 to n trials below {PLATEAU_SHARE:g} of the gain from 1 "
            f"to n, `kcal.publish.budget`); the largest late share is {late[worst]:.3f} ({' '.join(worst)}).")  # fmt: skip
