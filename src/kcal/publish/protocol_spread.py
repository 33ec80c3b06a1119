"""How much the protocol itself varies: the spread of a cell over whole reruns of the protocol.

A published cell is the 50-seed mean of ONE selected configuration, and its standard error counts the seeds
only. Running the whole protocol again with another TPE sampler seed (a *replicate*: ``sweep.sampler_seed``
changed, nothing else) can select another configuration. For each cell (table, dataset, row, metric,
flavour) with replicates ``m_1 .. m_R`` (each a 50-seed mean, the published run among them):

* ``sd``: their standard deviation (ddof 1): the protocol's spread, seeds and selection together;
* ``sd_low`` .. ``sd_high``: its 95 % confidence interval under normal replicates,
  ``sd * sqrt((R - 1) / chi2_{0.975, R-1})`` .. ``sd * sqrt((R - 1) / chi2_{0.025, R-1})``. Few replicates
  give a wide interval: x0.52 .. x6.3 of ``sd`` at R = 3, x0.60 .. x2.9 at R = 5;
* ``ratio``: ``sd`` over the published run's seed SE (how many times the seed SE the protocol varies).

The rule, fixed here before any replicate was run (:func:`protocol_verdict`): with ``d`` the published
mean minus the paper's and ``tol = 2 sqrt(sd^2 + se_paper^2)`` (the seed verdict's 2, with the protocol's
spread in place of our seed SE), a cell is **"within the protocol's spread"** when ``|d| <= tol`` and
**"differs beyond it"** otherwise; the verdict is marked **"(uncertain)"** when it flips if ``sd`` is
replaced by either end of its confidence interval. A cell needs R >= 2 replicates.

For each claim (:mod:`kcal.publish.claims`) and each dataset with replicates: in how many replicates the claim holds
on that dataset ("holds in all / in some / in none").
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from kcal.publish.claims import CLAIMS, evaluate_claim
from kcal.publish.table_cells import FLAVOURS, TABLES, cell_frame, comparison_frame, fmt, normalise_results

Z = 2.0
"""Multiples of the combined spread a difference may reach and still be "within the protocol's spread"."""
CI_LEVEL = 0.95
WITHIN, BEYOND, UNCERTAIN = "within the protocol's spread", "differs beyond it", " (uncertain)"
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


def protocol_verdict(diff: float, sd: float, paper_se: float, sd_low: float, sd_high: float) -> str:
    """The rule of the module docstring: within / beyond ``Z sqrt(sd^2 + se_paper^2)``, "(uncertain)" when the
    verdict flips at either end of ``sd``'s confidence interval."""
    pse = 0.0 if paper_se is None or math.isnan(paper_se) else paper_se

    def within(s: float) -> bool:
        return abs(diff) <= Z * math.sqrt(s * s + pse * pse) + 1e-12

    verdict = WITHIN if within(sd) else BEYOND
    if (
        not (math.isnan(sd_low) or math.isnan(sd_high))
        and len({within(sd_low), within(sd), within(sd_high)}) > 1
    ):
        verdict += UNCERTAIN
    return verdict


def replicate_cells(replicates: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every table cell of every replicate (its results, as ``results.csv``), both flavours, with a
    ``replicate`` column; cells a replicate did not run are left out."""
    frames = []
    for name, results in replicates.items():
        for flavour in FLAVOURS:
            comp = comparison_frame(results, flavour)
            comp = comp[comp["ours_mean"].notna()]
            frames.append(comp.assign(replicate=name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def spread_frame(replicates: dict[str, pd.DataFrame], published: str = PUBLISHED) -> pd.DataFrame:
    """One row per cell with at least two replicates: the replicates' means, their spread and its interval,
    the ratio to the published seed SE, and the seed and protocol verdicts of the published mean."""
    cells = replicate_cells(replicates)
    if cells.empty:
        return pd.DataFrame()
    rows = []
    for key, group in cells.groupby(CELL_KEYS, sort=False):
        if len(group) < 2 or published not in set(group["replicate"]):
            continue
        means = group["ours_mean"].astype(float).to_numpy()
        sd = float(np.std(means, ddof=1))
        low, high = sd_interval(sd, len(means))
        pub = group[group["replicate"] == published].iloc[0]
        diff = float(pub["ours_mean"]) - float(pub["paper_mean"])
        has_paper = not math.isnan(float(pub["paper_mean"]))
        seed_se = float(pub["ours_se"])
        rows.append({
            **dict(zip(CELL_KEYS, key, strict=True)), **{k: pub[k] for k in SOURCE_KEYS},
            "replicates": len(means),
            "means": " / ".join(fmt(m) for m in means), "sd": sd, "sd_low": low, "sd_high": high,
            "seed_se": seed_se, "ratio": sd / seed_se if seed_se > 0 else float("nan"),
            "published_mean": float(pub["ours_mean"]), "paper_mean": float(pub["paper_mean"]),
            "paper_se": float(pub["paper_se"]), "seed_verdict": pub["verdict"],
            "protocol_verdict": protocol_verdict(diff, sd, float(pub["paper_se"]), low, high)
            if has_paper else "no paper value",
        })  # fmt: skip
    return pd.DataFrame(rows)


def claim_counts(replicates: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per claim, flavour and dataset that some replicate ran: in how many of the replicates that ran it the
    claim holds there, and "all" / "some" / "none"."""
    normalised = {name: normalise_results(r) for name, r in replicates.items()}
    tables = {c.table for c in CLAIMS}
    holds: dict[tuple[str, str, str], list[bool]] = {}
    for results in normalised.values():
        for flavour in FLAVOURS:
            cells = {t: cell_frame(results, flavour, TABLES[t]) for t in tables}
            for claim in CLAIMS:
                res = evaluate_claim(claim, cells[claim.table], flavour)
                for dataset, ok in res.per_dataset.items():
                    holds.setdefault((claim.id, flavour, dataset), []).append(ok)
    rows = []
    for (claim, flavour, dataset), oks in holds.items():
        k, r = sum(oks), len(oks)
        rows.append({"claim": claim, "flavour": flavour, "dataset": dataset, "holds": k, "replicates": r,
                     "verdict": "all" if k == r else ("none" if k == 0 else "some")})  # fmt: skip
    return pd.DataFrame(rows, columns=["claim", "flavour", "dataset", "holds", "replicates", "verdict"])


def spread_markdown(spread: pd.DataFrame) -> str:
    """The spread table, one line per cell."""
    if spread.empty:
        return "(no cell has two replicates yet)"
    lines = ["| flavour | table | dataset | row | metric | R | replicate means | protocol SD (95 % CI) | / seed SE "
             "| ours (published) | paper | seed verdict | protocol verdict |",
             "|---|---|---|---|---|---:|---|---|---:|---:|---:|---|---|"]  # fmt: skip
    for r in spread.to_dict("records"):
        paper = "—" if math.isnan(r["paper_mean"]) else fmt(r["paper_mean"])
        lines.append(
            f"| {r['flavour']} | {r['table']} | {r['dataset']} | {r['row']} | {r['metric']} | {r['replicates']} "
            f"| {r['means']} | {fmt(r['sd'])} ({fmt(r['sd_low'])}–{fmt(r['sd_high'])}) | {r['ratio']:.1f} "
            f"| {fmt(r['published_mean'])} | {paper} | {r['seed_verdict']} | {r['protocol_verdict']} |"
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
        "| claim | flavour | dataset | holds in | of replicates | verdict |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in counts.sort_values(["claim", "flavour", "dataset"]).to_dict("records"):
        lines.append(f"| {r['claim']} | {r['flavour']} | {r['dataset']} | {r['holds']} | {r['replicates']} "
                     f"| holds in {r['verdict']} |")  # fmt: skip
    return "\n".join(lines)


def summary_markdown(replicates: dict[str, pd.DataFrame], spread: pd.DataFrame) -> str:
    """The report's generated block: which replicates exist, the rule, the counts of surviving "differs"."""
    if len(replicates) < 2:
        return "(no replicate of the protocol published yet)"
    names = ", ".join(sorted(n for n in replicates if n != PUBLISHED))
    datasets = ", ".join(f"{d} ({r} runs)" for d, r in runs_per_dataset(replicates).items())
    lines = [f"Replicates of the whole protocol beside the published run: {names} (datasets, with the number of "
             f"runs of the protocol each has, the published one included: {datasets}). "
             f"Rule (`kcal.publish.protocol_spread`): a published cell is *within the protocol's spread* when |ours - "
             f"paper| <= {Z:g} sqrt(sd^2 + se_paper^2), sd the replicates' SD; *(uncertain)* when that flips "
             f"at either end of sd's 95 % interval. Cells per flavour: `protocol_spread.md`.", ""]  # fmt: skip
    for flavour in FLAVOURS:
        part = spread[spread["flavour"] == flavour] if not spread.empty else spread
        c = survivors(part)
        lines.append(f"- {flavour}: {c['cells']} cells with replicates; {c['differs']} \"differs\" by the seed SE, of "
                     f"which {c['beyond']} differ beyond the protocol's spread ({c['beyond_certain']} certain)")  # fmt: skip
        if not part.empty and part["dataset"].nunique() > 1:
            per = []
            for dataset, group in part.groupby("dataset", sort=True):
                g = survivors(group)
                per.append(f"{dataset} {g['beyond']} of {g['differs']} ({g['beyond_certain']} certain)")
            lines.append(f'  - per dataset, "differs" beyond the protocol\'s spread: {"; ".join(per)}')
        noise = selection_noise(part)
        if noise:
            lines.append(f'  - "differs" by the seed SE, within the protocol\'s spread: {"; ".join(noise)}')
    return "\n".join(lines)


def runs_per_dataset(replicates: dict[str, pd.DataFrame]) -> dict[str, int]:
    """``{dataset: how many of the replicates (the published run included) hold it}``, by dataset name: a
    replicate may cover fewer datasets than another (crime's replicates run apart from the others)."""
    counts: dict[str, int] = {}
    for results in replicates.values():
        for dataset in set(results["dataset"]):
            counts[dataset] = counts.get(dataset, 0) + 1
    return dict(sorted(counts.items()))


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
        entries.append((ratio, f"{dataset} {row} {metric} ({tables}; SD {ratio:.1f}x the seed SE)"))
    return [text for _, text in sorted(entries, key=lambda e: -e[0])]


def survivors(spread: pd.DataFrame) -> dict[str, int]:
    """Counts over the cells with replicates: seed-"differs" cells, and how many of them stay "differs beyond
    the protocol's spread" (certain or uncertain)."""
    if spread.empty:
        return {"cells": 0, "differs": 0, "beyond": 0, "beyond_certain": 0}
    differs = spread[spread["seed_verdict"] == "differs"]
    beyond = differs["protocol_verdict"].str.startswith(BEYOND)
    return {"cells": len(spread), "differs": len(differs), "beyond": int(beyond.sum()),
            "beyond_certain": int((differs["protocol_verdict"] == BEYOND).sum())}  # fmt: skip
