"""The claims' verdicts as text: each claim's line (its sentence, reading and verdict per source), the rules,
the margins and the per-comparison table of ``claims.md``, from :mod:`kcal.publish.claims`'s evaluation."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from kcal.publish import verdicts as V
from kcal.publish.claims import (
    CLAIMS,
    PAPER,
    Comparison,
    Evaluated,
    Margin,
    evaluate_all,
    pm,
)
from kcal.publish.table_cells import FLAVOUR_LABEL, FLAVOURS, TABLES


def profile_note(profile: str | None) -> str:
    """Which profile produced the results; a profile other than ``full`` is marked as not evidence."""
    if profile is None:
        return "Profile: not recorded (only profile=full follows the paper's protocol)."
    if profile == "full":
        return "Profile: full (the paper's protocol)."
    return (f"Profile: {profile}, a reduced run (fewer trials, seeds or epochs than the paper): its numbers and "
            "verdicts are NOT evidence for or against the paper's claims.")  # fmt: skip


def verdict_mark(profile: str | None) -> str:
    """Mark of each verdict of a reduced profile (none for ``full`` or an unrecorded one)."""
    return "" if profile in ("full", None) else f"[profile {profile}: not evidence] "


def _sources(e: Evaluated) -> str:
    parts = [f"paper's own numbers: {e.results[PAPER].phrase()}"]
    parts += [f"{FLAVOUR_LABEL.get(s, s)}: {r.phrase()}" for s, r in e.results.items() if s != PAPER]
    return ". ".join(parts)


def summary_line(e: Evaluated, profile: str | None = None) -> str:
    """A claim's line: its ID, the paper's sentence, the reading and the verdict per source; a stricter
    reading's line says so after the ID."""
    c = e.claim
    if e.label:
        return f"{c.id}, {verdict_mark(profile)}kcal's stricter reading ({e.label}): {c.summary()}. {_sources(e)}."
    reading = f" ({c.reading})" if c.reading else ""
    return (f'{c.id} {verdict_mark(profile)}({c.section}) "{c.quote}" Read as: {c.summary()}{reading}. '
            f"{_sources(e)}.")  # fmt: skip


def claims_summary(
    results: pd.DataFrame,
    flavours: Sequence[str] = FLAVOURS,
    profile: str | None = None,
    replicates: Mapping[str, pd.DataFrame] | None = None,
) -> list[str]:
    """One line per claim and reading (:func:`summary_line`), the paper's reading first."""
    return [summary_line(e, profile) for e in evaluate_all(results, flavours, replicates)]


RULES = (
    "Per dataset, the claim's row is compared with each compared row: d is their difference, signed so that d < 0 "
    "is better, with its 95 % interval [lo, hi] and a margin δ per metric, a difference a reader would not care "
    "about (the table below: half the median of the paper's own claimed gains in that metric, fixed from the "
    "paper's numbers before ours were judged). *better* when hi < 0, *worse* when lo > 0, *equivalent* when the "
    "90 % interval lies within ±δ (two one-sided tests), else *inconclusive*. The interval: over R >= 2 runs of "
    "the protocol, a t interval of the runs' mean difference (SD floored at the seed SE); on a dataset of ours with "
    "one run, the combined seed SE times the run-to-run SD over seed SE measured on the replicated datasets (the "
    "spread ratio below), or the seed SE alone labelled 'protocol spread unknown'; the paper's numbers, its "
    "seed SEs. A comparison *holds* when better (for 'comparable or better', R2: when the 90 % interval's upper "
    "end is below δ, non-inferiority at δ), is *contradicted* when worse (R2: worse by more than δ), has *the "
    "paper's effect excluded* when the paper's own gain on that dataset lies below our interval, else is *open*. "
    "Against several rows: holds when all hold, contradicted when one is, excluded when one is. A claim is "
    "*supported* when it holds on every dataset (*every*) or on more than half (*most*); *contradicted* when "
    "contradicted on one (*most*: on half, once a majority is out of reach); *not reproduced: the paper's effect "
    "excluded* when excluded on one (*most*: once a majority is out of reach); else *inconclusive*. Beside each "
    "comparison: the minimum detectable effect at 80 % power and how many runs of the protocol would detect the "
    "paper's gain (or, without one, δ) at that power. Rules: `kcal.publish.verdicts`. \"paper's own numbers\" "
    "applies the same rule to the paper's printed numbers and SEs: where it is not supported, the paper's own "
    "counter-example is named."
)


def margins_markdown(evaluated: Sequence[Evaluated]) -> list[str]:
    """The margins, one row per metric, with their reason."""
    seen: dict[str, Margin] = {}
    for e in evaluated:
        if e.margin is not None:
            seen.setdefault(e.margin.metric, e.margin)
    lines = ["| metric | margin δ | reason |", "|---|---:|---|"]
    lines += [f"| {m.metric} | {m.value:g} | {m.reason()} |" for m in seen.values()]
    return lines


def spread_markdown(evaluated: Sequence[Evaluated]) -> list[str]:
    """How each flavour judges a dataset of ours with one run."""
    found = {}
    for e in evaluated:
        for src, r in e.results.items():
            if src != PAPER:
                found.setdefault(src, r.spread)
    return [f"- {FLAVOUR_LABEL.get(src, src)}: {sp.phrase()}" for src, sp in found.items()]


def _mde(c: Comparison) -> str:
    need = c.runs_needed()
    runs = (
        "—"
        if c.status in (V.HOLDS, V.CONTRADICTED, V.EXCLUDED)
        else (f"{need}" if need else f"> {V.MAX_RUNS}")
    )
    return f"{c.interval.mde():.2g} | {runs}"


def claims_markdown(
    results: pd.DataFrame,
    flavours: Sequence[str] = FLAVOURS,
    profile: str | None = None,
    replicates: Mapping[str, pd.DataFrame] | None = None,
) -> str:
    evaluated = evaluate_all(results, flavours, replicates)
    out = ["# The paper's claims, checked against our results", "", f"**{profile_note(profile)}**", "", RULES, "",
           "One line per claim, beginning with its ID; kcal's stricter reading, where it has one, follows as a "
           "labelled line.", ""]  # fmt: skip
    for e in evaluated:
        out += [("  - " if e.label else "") + summary_line(e, profile), ""]
    out += ["## Margins", "", *margins_markdown(evaluated), "", "## A dataset with one run", "",
            "A dataset of ours with one run of the protocol is judged with the protocol's spread measured where "
            "the protocol was replicated:", "", *spread_markdown(evaluated), ""]  # fmt: skip
    out += ["## Per dataset", "",
            "| claim | reading | source | dataset | runs | basis | status | compared row | paper's d | our d | 95 % "
            "interval | MDE (80 %) | runs to decide | values |",
            "|---|---|---|---|---:|---|---|---|---:|---:|---|---:|---:|---|"]  # fmt: skip
    for e in evaluated:
        for src, r in e.results.items():
            for d in r.datasets.values():
                for c in d.comparisons:
                    lo, hi = c.interval.ci()
                    paper = "—" if math.isnan(c.paper_diff) else f"{c.paper_diff:.3g}"
                    out.append(f"| {e.claim.id} | {'stricter' if e.label else 'paper'} | {FLAVOUR_LABEL.get(src, src)} "
                               f"| {d.dataset} | {d.runs} | {c.basis} | {d.status} | {c.other}: {c.outcome}, {c.status} "
                               f"| {paper} | {c.diff:.3g} | [{lo:.3g}, {hi:.3g}] | {_mde(c)} | "
                               f"{d.best} {pm(*d.values[d.best])} vs {c.other} {pm(*d.values[c.other])} |")  # fmt: skip
    out += ["", "## Claim definitions", "",
            "| id | section | table | metric | rows | compared with | direction | quantifier | stricter reading |",
            "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in CLAIMS:
        strict = f"{', '.join(c.strict_others)}; {c.strict_quantifier}" if c.strict_others else "—"
        out.append(f"| {c.id} | {c.section} | {TABLES[c.table].number} ({c.table}) | {c.metric} | {' / '.join(c.ours)} "
                   f"| {', '.join(c.others)} | {c.direction} | {c.quantifier} | {strict} |")  # fmt: skip
    return "\n".join(out) + "\n"
