"""How much the protocol itself varies, and whether the paper's number is what one more run of it would give.

A published cell is the 50-seed mean of ONE selected configuration, and its standard error counts the seeds
only. Running the whole protocol again with another TPE sampler seed (a *replicate*: ``sweep.sampler_seed``
changed, nothing else) can select another configuration. For each cell (table, dataset, row, metric,
flavour) with runs ``m_1 .. m_R`` (each a 50-seed mean, the published run among them):

* ``sd``: their standard deviation (ddof 1): the protocol's spread, seeds and selection together;
* ``sd_low`` .. ``sd_high``: its 95 % confidence interval under normal runs,
  ``sd * sqrt((R - 1) / chi2_{0.975, R-1})`` .. ``sd * sqrt((R - 1) / chi2_{0.025, R-1})`` (x0.52 .. x6.3
  of ``sd`` at R = 3, x0.60 .. x2.9 at R = 5);
* ``ratio``: ``sd`` over the published run's seed SE (how many times the seed SE the protocol varies).

**The rule: a prediction interval for one more run** (:func:`prediction_verdict`). The paper's number is
itself one run of its protocol. If it were one more run of ours, then with ``mean`` the mean of our R runs,
``paper - mean`` would be normal with variance ``sigma^2 (1 + 1/R)`` (sigma the protocol's SD), and
``(paper - mean) / (sd sqrt(1 + 1/R))`` Student's t with R - 1 degrees of freedom. A cell is **"within the
protocol's spread"** when

    |paper - mean| <= t_{R-1} sqrt(sd^2 (1 + 1/R) + max(0, se_paper^2 - se_ours^2))

and **"differs beyond it"** otherwise; ``t_{R-1}`` is the two-sided ``1 - ALPHA`` = 95 % quantile (4.30 at
R = 3, 2.78 at R = 5) and ``se_ours`` the root mean square of our runs' seed SEs. Why this form: ``sd``
already holds our seed noise (``se_ours^2`` is part of ``sigma^2``), and a run of the paper's protocol
carries the paper's seed noise instead, so the paper's seed SE enters only by how much its square exceeds
ours (adding ``se_paper^2`` in full would count seed noise twice and make the interval conservative; the
summary gives that count too). When the paper's seeds vary as ours do, the interval is exact: a cell that
is one more run of our protocol falls outside it with probability ALPHA. The t quantile already pays for
estimating ``sd`` from few runs, so there is no "(uncertain)" mark. A cell whose metric is defined otherwise
than the paper's (:func:`kcal.publish.table_cells.definition_differs`) is not tested: "definition differs".

**By chance alone**, if every tested cell were one more run of our protocol, the number outside the
interval would be Binomial(n, ALPHA): about ``ALPHA n`` (:func:`chance_range` gives its 95 % range). Cells
share runs (Tables 4 and 5 share their accuracy cells, a row's metrics share a model), so the count is a
guide, not an exact test.

**The old rule**, for this release beside the new one (:func:`old_protocol_verdict`), compared the
*published* mean with ``2 sqrt(sd^2 + se_paper^2)``, marked "(uncertain)" when the verdict flipped at either
end of ``sd``'s interval; with ``sd`` from 3 or 5 runs its 2 is far from a 95 % quantile.

**Over whole runs** (:func:`whole_run_text`): the cells of one run share its selected models, so the count
against the binomial is a guide; the test over whole runs ranks the paper's numbers as one more run among ours
(:func:`kcal.publish.whole_runs.paper_runs`), which with one paper run can decide only from many runs of ours.

Per claim and dataset with runs (:func:`claim_counts`): in how many runs the claim holds (each judged by its
seed SEs) and the outcome of the t test over the runs (:mod:`kcal.publish.claims`, :mod:`kcal.publish.verdicts`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kcal.publish import verdicts as V
from kcal.publish import whole_runs
from kcal.publish.claims import CLAIMS, claim_values, evaluate_claim
from kcal.publish.table_cells import (
    DEFINITION_DIFFERS,
    FLAVOURS,
    TABLES,
    cell_frame,
    fmt,
    normalise_results,
)

ALPHA = 0.05
"""Two-sided level of the prediction interval: the share of "differs" that chance alone gives."""
CI_LEVEL = 0.95
WITHIN, BEYOND, UNCERTAIN = "within the protocol's spread", "differs beyond it", " (uncertain)"
NO_PAPER = "no paper value"
OLD_Z = 2.0
"""The old rule's multiple of sqrt(sd^2 + se_paper^2)."""
PUBLISHED = "published"
"""The replicate name of the published run (the others are named after their sampler seed)."""
CELL_KEYS = ["flavour", "table", "dataset", "row", "metric"]
SOURCE_KEYS = ["objective", "recalibrator"]  # where a cell's numbers come from (results.csv's keys)


def sd_interval(sd: float, n: int, level: float = CI_LEVEL) -> tuple[float, float]:
    """The ``level`` confidence interval of a normal population's standard deviation from a sample SD ``sd``
    of ``n`` values (chi-square with ``n - 1`` degrees of freedom)."""
    from scipy.stats import chi2

    if n < 2 or math.isnan(sd):
        return float("nan"), float("nan")
    alpha = 1.0 - level
    df = n - 1
    return sd * math.sqrt(df / chi2.ppf(1 - alpha / 2, df)), sd * math.sqrt(df / chi2.ppf(alpha / 2, df))


def _sq(x: float | None) -> float:
    return V.se_or_zero(x) ** 2


def prediction_half_width(
    sd: float, runs: int, paper_se: float, ours_se: float, full_paper_se: bool = False
) -> float:
    """``t_{R-1} sqrt(sd^2 (1 + 1/R) + max(0, se_paper^2 - se_ours^2))`` (module docstring); with
    ``full_paper_se`` the conservative ``t_{R-1} sqrt(sd^2 (1 + 1/R) + se_paper^2)``."""
    extra = _sq(paper_se) if full_paper_se else max(0.0, _sq(paper_se) - _sq(ours_se))
    return V.t_quantile(runs, 1.0 - ALPHA) * math.sqrt(sd * sd * (1.0 + 1.0 / runs) + extra)


def prediction_verdict(paper: float, run_mean: float, half_width: float) -> str:
    """*within the protocol's spread* when ``|paper - run_mean| <= half_width``, else *differs beyond it*."""
    return WITHIN if abs(paper - run_mean) <= half_width + 1e-12 else BEYOND


def old_protocol_verdict(diff: float, sd: float, paper_se: float, sd_low: float, sd_high: float) -> str:
    """The old rule (module docstring): within / beyond ``2 sqrt(sd^2 + se_paper^2)`` of the published mean's
    difference ``diff``, "(uncertain)" when the verdict flips at either end of ``sd``'s confidence interval."""

    def within(s: float) -> bool:
        return abs(diff) <= OLD_Z * math.sqrt(s * s + _sq(paper_se)) + 1e-12

    verdict = WITHIN if within(sd) else BEYOND
    if (
        not (math.isnan(sd_low) or math.isnan(sd_high))
        and len({within(sd_low), within(sd), within(sd_high)}) > 1
    ):
        verdict += UNCERTAIN
    return verdict


def chance_range(n: int, alpha: float = ALPHA, level: float = 0.95) -> tuple[float, int, int]:
    """``(expected, low, high)``: how many of ``n`` cells fall outside an ``alpha``-level interval by chance
    alone, ``alpha n``, and the central ``level`` range of Binomial(n, alpha)."""
    from scipy.stats import binom

    if n == 0:
        return 0.0, 0, 0
    tail = (1.0 - level) / 2
    return alpha * n, int(binom.ppf(tail, n, alpha)), int(binom.ppf(1.0 - tail, n, alpha))


def spread_frame(replicates: dict[str, pd.DataFrame], published: str = PUBLISHED) -> pd.DataFrame:
    """One row per cell with at least two runs: the runs' means, their spread and its interval, the ratio to
    the published seed SE, the published cell's seed verdict, the prediction interval's verdict
    (``protocol_verdict``) and the old rule's (``old_protocol_verdict``)."""
    cells = whole_runs.replicate_cells(replicates)
    if cells.empty:
        return pd.DataFrame()
    rows = []
    for key, group in cells.groupby(CELL_KEYS, sort=False):
        if len(group) < 2 or published not in set(group["replicate"]):
            continue
        means = group["ours_mean"].astype(float).to_numpy()
        r = len(means)
        sd = float(np.std(means, ddof=1))
        low, high = sd_interval(sd, r)
        pub = group[group["replicate"] == published].iloc[0]
        paper, paper_se = float(pub["paper_mean"]), float(pub["paper_se"])
        has_paper = not math.isnan(paper)
        seed_se = float(pub["ours_se"])
        seed_rms = math.sqrt(float(np.mean([_sq(s) for s in group["ours_se"].astype(float)])))
        half = prediction_half_width(sd, r, paper_se, seed_rms)
        half_full = prediction_half_width(sd, r, paper_se, seed_rms, full_paper_se=True)
        run_mean = float(np.mean(means))
        # the published cell's seed rule, by its numbers alone (before "definition differs"): the old counts
        seed_differs = has_paper and abs(float(pub["diff"])) > float(pub["tolerance"]) + 1e-12
        if not has_paper:
            verdict = verdict_full = NO_PAPER
        elif pub["verdict"] == DEFINITION_DIFFERS:
            verdict = verdict_full = DEFINITION_DIFFERS
        else:
            verdict = prediction_verdict(paper, run_mean, half)
            verdict_full = prediction_verdict(paper, run_mean, half_full)
        rows.append({
            **dict(zip(CELL_KEYS, key, strict=True)), **{k: pub[k] for k in SOURCE_KEYS},
            "replicates": r,
            "means": " / ".join(fmt(m) for m in means), "sd": sd, "sd_low": low, "sd_high": high,
            "seed_se": seed_se,
            "ratio": float("nan") if V.is_rounding(seed_se, float(pub["ours_mean"])) else sd / seed_se,
            "published_mean": float(pub["ours_mean"]), "run_mean": run_mean, "paper_mean": paper,
            "paper_se": paper_se, "seed_verdict": pub["verdict"], "seed_differs": bool(seed_differs),
            "half_width": half, "protocol_verdict": verdict, "protocol_verdict_full_se": verdict_full,
            "old_protocol_verdict": old_protocol_verdict(float(pub["diff"]), sd, paper_se, low, high)
            if has_paper else NO_PAPER,
        })  # fmt: skip
    return pd.DataFrame(rows)


def claim_counts(replicates: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per claim (the paper's reading), flavour and dataset that some run holds: in how many of its runs the
    claim holds there (each run by its seed SEs) and the outcome of the t test over the runs."""
    runs = [normalise_results(r) for r in replicates.values()]
    tables = {c.table for c in CLAIMS}
    rows = []
    for flavour in FLAVOURS:
        frames = {t: [cell_frame(r, flavour, TABLES[t]) for r in runs] for t in tables}
        for claim in CLAIMS:
            per_run = [claim_values(claim, f) for f in frames[claim.table]]
            for ds in sorted({ds for v in per_run for ds in v}):  # each from the runs that hold it, in order
                held = [frames[claim.table][i] for i, v in enumerate(per_run) if ds in v]
                d = evaluate_claim(claim, held, flavour).datasets[ds]
                k = sum(o == V.HOLDS for o in d.run_outcomes)
                rows.append({"claim": claim.id, "flavour": flavour, "dataset": ds, "holds": k, "replicates": d.runs,
                             "outcome": d.outcome if d.runs > 1 else "—"})  # fmt: skip
    return pd.DataFrame(rows, columns=["claim", "flavour", "dataset", "holds", "replicates", "outcome"])


def spread_markdown(spread: pd.DataFrame) -> str:
    """The spread table, one line per cell."""
    if spread.empty:
        return "(no cell has two replicates yet)"
    lines = ["| flavour | table | dataset | row | metric | R | run means | protocol SD (95 % CI) | / seed SE "
             "| ours (published) | mean of runs | paper | ± prediction | seed verdict | protocol verdict | old rule |",
             "|---|---|---|---|---|---:|---|---|---:|---:|---:|---:|---:|---|---|---|"]  # fmt: skip
    for r in spread.to_dict("records"):
        paper = "—" if math.isnan(r["paper_mean"]) else fmt(r["paper_mean"])
        lines.append(
            f"| {r['flavour']} | {r['table']} | {r['dataset']} | {r['row']} | {r['metric']} | {r['replicates']} "
            f"| {r['means']} | {fmt(r['sd'])} ({fmt(r['sd_low'])}–{fmt(r['sd_high'])}) | {r['ratio']:.3g} "
            f"| {fmt(r['published_mean'])} | {fmt(r['run_mean'])} | {paper} | {fmt(r['half_width'])} "
            f"| {r['seed_verdict']} | {r['protocol_verdict']} | {r['old_protocol_verdict']} |"
        )
    return "\n".join(lines)


def replicates_of(published: pd.DataFrame, others: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """``{PUBLISHED: the published rows of the (dataset, objective) pairs some replicate ran, **others}``."""
    if not others:
        return {}
    pairs = pd.concat([r[["dataset", "objective"]] for r in others.values()]).drop_duplicates()
    mine = published.merge(pairs, on=["dataset", "objective"])
    return {PUBLISHED: mine, **others}


def claims_markdown(counts: pd.DataFrame) -> str:
    if counts.empty:
        return "(no claim evaluated on a replicated dataset)"
    lines = [
        "| claim | flavour | dataset | holds in | of runs | outcome over the runs (t test) |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in counts.sort_values(["claim", "flavour", "dataset"]).to_dict("records"):
        lines.append(f"| {r['claim']} | {r['flavour']} | {r['dataset']} | {r['holds']} | {r['replicates']} "
                     f"| {r['outcome']} |")  # fmt: skip
    return "\n".join(lines)


def counts(spread: pd.DataFrame) -> dict[str, int]:
    """The counts the summary and ``protocol_spread.md`` give, over the cells with runs and a paper value:

    * ``cells``, ``with_paper``: cells with runs; those with a paper value;
    * ``seed_differs``: published cells outside 2 combined seed SE, by their numbers (the old count);
    * ``old_beyond`` / ``old_certain``: of those, beyond the old rule (certain: without "(uncertain)");
    * ``new_beyond_of_seed_differs``: of the same cells, outside the prediction interval;
    * ``tested``: cells with a paper value whose definition matches the paper's; ``definition_differs``;
    * ``new_beyond`` / ``new_beyond_full_se``: tested cells outside the prediction interval (with
      ``se_paper^2`` added in full, the conservative variant).
    """
    if spread.empty:
        return dict.fromkeys(("cells", "with_paper", "seed_differs", "old_beyond", "old_certain",
                              "new_beyond_of_seed_differs", "tested", "definition_differs", "new_beyond",
                              "new_beyond_full_se"), 0)  # fmt: skip
    paper = spread[spread["protocol_verdict"] != NO_PAPER]
    differs = paper[paper["seed_differs"]]
    tested = paper[paper["protocol_verdict"] != DEFINITION_DIFFERS]
    # the new rule on the old rule's cells: also where the definition differs, as the old rule did
    new_on_old = [
        prediction_verdict(r["paper_mean"], r["run_mean"], r["half_width"]) == BEYOND
        for r in differs.to_dict("records")
    ]
    return {
        "cells": len(spread), "with_paper": len(paper), "seed_differs": len(differs),
        "old_beyond": int(differs["old_protocol_verdict"].str.startswith(BEYOND).sum()),
        "old_certain": int((differs["old_protocol_verdict"] == BEYOND).sum()),
        "new_beyond_of_seed_differs": int(sum(new_on_old)),
        "tested": len(tested), "definition_differs": len(paper) - len(tested),
        "new_beyond": int((tested["protocol_verdict"] == BEYOND).sum()),
        "new_beyond_full_se": int((tested["protocol_verdict_full_se"] == BEYOND).sum()),
    }  # fmt: skip


def counts_data(spread: pd.DataFrame) -> dict[str, dict]:
    """:func:`counts` per flavour with what chance alone gives over the cells tested (``report.json``)."""
    out = {}
    for flavour in FLAVOURS:
        c = counts(spread[spread["flavour"] == flavour] if not spread.empty else spread)
        expected, low, high = chance_range(c["tested"])
        out[flavour] = {**c, "alpha": ALPHA, "chance_expected": round(expected, 3), "chance_low": low,
                        "chance_high": high}  # fmt: skip
    return out


def counts_markdown(spread: pd.DataFrame) -> str:
    """The old rule's counts beside the new ones, per flavour, and what chance alone would give."""
    lines = ["| flavour | cells with runs (with a paper value) | seed \"differs\" | old rule: beyond (certain) "
             "| new rule, same cells: beyond | cells tested (definition differs) | new rule: beyond "
             f"| by chance alone at {ALPHA:g} (95 % range) | new rule with se_paper² in full |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for flavour in FLAVOURS:
        part = spread[spread["flavour"] == flavour] if not spread.empty else spread
        c = counts(part)
        expected, low, high = chance_range(c["tested"])
        lines.append(f"| {flavour} | {c['cells']} ({c['with_paper']}) | {c['seed_differs']} "
                     f"| {c['old_beyond']} ({c['old_certain']}) | {c['new_beyond_of_seed_differs']} "
                     f"| {c['tested']} ({c['definition_differs']}) | {c['new_beyond']} | {expected:.1f} ({low}–{high}) "
                     f"| {c['new_beyond_full_se']} |")  # fmt: skip
    return "\n".join(lines)


def summary_markdown(replicates: dict[str, pd.DataFrame], spread: pd.DataFrame) -> str:
    """The report's generated block: which runs exist, the rule, the counts under the new and the old rule."""
    if len(replicates) < 2:
        return "(no replicate of the protocol published yet)"
    names = ", ".join(sorted(n for n in replicates if n != PUBLISHED))
    datasets = ", ".join(f"{d} ({r} runs)" for d, r in runs_per_dataset(replicates).items())
    lines = [f"Replicates of the whole protocol beside the published run: {names} (datasets, with the number of "
             f"runs of the protocol each has, the published one included: {datasets}). "
             f"Rule (`kcal.publish.protocol_spread`): a cell is *within the protocol's spread* when the paper's number "
             f"lies in the {1 - ALPHA:.0%} prediction interval for one more run, |paper - mean of runs| <= "
             f"t_(R-1) sqrt(sd^2 (1 + 1/R) + max(0, se_paper^2 - se_ours^2)); cells whose metric is defined otherwise "
             f"than the paper's are not tested. The old rule (|published - paper| <= {OLD_Z:g} sqrt(sd^2 + "
             f"se_paper^2)) is counted beside it for this release. Cells: `protocol_spread.md`.", "",
             counts_markdown(spread), ""]  # fmt: skip
    for flavour in FLAVOURS:
        part = spread[spread["flavour"] == flavour] if not spread.empty else spread
        c = counts(part)
        expected, low, high = chance_range(c["tested"])
        lines.append(f"- {flavour}: of {c['tested']} cells tested, {c['new_beyond']} differ beyond the protocol's "
                     f"spread; chance alone would give about {expected:.1f} ({low}–{high})")  # fmt: skip
        if not part.empty and part["dataset"].nunique() > 1:
            per = []
            for dataset, group in part.groupby("dataset", sort=True):
                g = counts(group)
                per.append(f"{dataset} {g['new_beyond']} of {g['tested']}")
            lines.append(
                f"  - per dataset, beyond the protocol's spread of the cells tested: {'; '.join(per)}"
            )
        noise = selection_noise(part)
        if noise:
            lines.append(f'  - "differs" by the seed SE, within the protocol\'s spread: {"; ".join(noise)}')
    whole = whole_run_text(replicates, spread)
    return "\n".join([*lines, *([whole] if whole else [])])


def whole_run_text(replicates: dict[str, pd.DataFrame], spread: pd.DataFrame) -> str:
    """The paper's numbers as one more run, over whole runs (:func:`kcal.publish.whole_runs.paper_runs`), on the
    cells tested."""
    if spread.empty:
        return ""
    tested = spread[spread["protocol_verdict"].isin([WITHIN, BEYOND])]
    return whole_runs.paper_runs_markdown(whole_runs.paper_runs(replicates, tested))


def runs_per_dataset(replicates: dict[str, pd.DataFrame]) -> dict[str, int]:
    """``{dataset: how many of the replicates (the published run included) hold it}``, by dataset name: a
    replicate may cover fewer datasets than another (crime's replicates run apart from the others)."""
    out: dict[str, int] = {}
    for results in replicates.values():
        for dataset in set(results["dataset"]):
            out[dataset] = out.get(dataset, 0) + 1
    return dict(sorted(out.items()))


def selection_noise(spread: pd.DataFrame) -> list[str]:
    """The cells whose seed verdict is "differs" and whose protocol verdict is "within the protocol's spread"
    (the gap to the paper is the size of what rerunning the protocol moves), one entry per (dataset, row,
    metric) with its tables and the protocol SD over the seed SE, largest ratio first."""
    if spread.empty:
        return []
    moved = spread[(spread["seed_verdict"] == "differs") & spread["protocol_verdict"].str.startswith(WITHIN)]
    entries = []
    for (dataset, row, metric), group in moved.groupby(["dataset", "row", "metric"], sort=False):
        tables = ", ".join(f"Table {TABLES[t].number}" if t in TABLES else t for t in group["table"])
        ratio = float(group["ratio"].max())
        times = f"{ratio:.1f}" if ratio < 1000 else f"{ratio:.1e}"  # a seed SE of ~0 (a constant metric)
        entries.append((ratio, f"{dataset} {row} {metric} ({tables}; SD {times}x the seed SE)"))
    return [text for _, text in sorted(entries, key=lambda e: -e[0])]
