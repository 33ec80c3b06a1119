"""The report's answer, first: does the paper reproduce? Two tables and a few generated sentences.

* :func:`claims_table`: one line per claim of the paper (:mod:`kcal.publish.claims`): the paper's sentence in
  short, its verdict on the paper's own numbers, ours per flavour with the datasets where it holds, and, where
  the protocol was replicated, in how many runs it holds per dataset;
* :func:`cells_table`: per table of the paper and flavour, how many cells of ours lie within 2 seed SE of the
  paper's, how many differ but within the protocol's spread (:mod:`kcal.publish.protocol_spread`), how many
  differ beyond it, and how many differ in cells no replicate ran;
* :func:`why_sentences`: how many selected MMD configurations have their regulariser switched off by their
  kernels (:mod:`kcal.publish.selected_kernels`);
* :func:`dataset_line`, :func:`spread_moves`, :func:`readme_summary`: the same numbers per dataset, the size of
  the protocol's spread, and the README's summary.

**The interface to the claims.** Everything read from :mod:`kcal.publish.claims` and
:mod:`kcal.publish.protocol_spread` goes through two adapters, :func:`claim_summaries` (into
:class:`ClaimSummary`) and :func:`cell_classes` (into one class per cell); the tables are written from their
output only. Read today: ``claims.CLAIMS`` (``Claim.id``, ``.description``, ``.table``),
``claims.evaluate_claim`` (``ClaimResult.per_dataset``, ``.supported``), ``table_cells.cell_frame`` (its input),
``protocol_spread.claim_counts`` (columns ``claim``, ``flavour``, ``dataset``, ``holds``, ``replicates``),
``protocol_spread.spread_frame`` (``CELL_KEYS`` and ``protocol_verdict``) with ``WITHIN`` and ``BEYOND``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from kcal.publish import verdicts as V
from kcal.publish.claims import PAPER, evaluate_all
from kcal.publish.protocol_spread import BEYOND, CELL_KEYS, WITHIN
from kcal.publish.questions.tradeoff import PathCounts
from kcal.publish.selected_kernels import FLAT_KY, OFF_LOG10, switched_off
from kcal.publish.table_cells import FLAVOURS, TABLES, comparison_frame

SUPPORTED, NOT_EVALUATED = V.SUPPORTED, V.NOT_EVALUATED
SEED_WITHIN, SEED_DIFFERS = "within 2 SE", "differs"  # kcal.publish.table_cells.compare_cell's verdicts
CELL_CLASSES = ("within 2 seed SE", "differs, within the protocol's spread", "differs beyond the protocol's spread",
                "differs, not replicated")  # fmt: skip
"""The classes of a compared cell (:func:`cell_classes`), in the cells table's column order."""


# ---- the adapters: the only readers of kcal.publish.claims and kcal.publish.protocol_spread ----------------------
@dataclass(frozen=True)
class Outcome:
    """A claim judged on one source (a flavour of ours, or the paper's numbers) over the datasets it ran on."""

    verdict: str  # SUPPORTED / NOT_SUPPORTED / NOT_EVALUATED (or the claims module's own words)
    holds: tuple[str, ...]  # the datasets where the claim holds
    judged: tuple[str, ...]  # the datasets it was judged on (every row it compares has a number there)


@dataclass(frozen=True)
class ClaimSummary:
    id: str
    says: str  # the paper's sentence in short
    table: int  # the paper's table number
    paper: Outcome  # the rule on the paper's own numbers
    ours: dict[str, Outcome] = field(default_factory=dict)  # flavour -> outcome
    #: flavour -> dataset -> (runs of the protocol in which the claim holds there, runs)
    runs: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)


def _outcome(result) -> Outcome:
    """A :class:`kcal.publish.claims.ClaimResult` as an outcome: its verdict word, the datasets where the claim
    holds (better, or not worse for a "comparable" claim, beyond the noise) and those it was judged on."""
    holds = tuple(d for d, r in result.datasets.items() if result.holds_on(r) is True)
    return Outcome(result.verdict, holds, tuple(result.datasets))


def claim_summaries(
    results: pd.DataFrame, replicates: Mapping[str, pd.DataFrame] | None = None
) -> list[ClaimSummary]:
    """Every claim of :data:`kcal.publish.claims.CLAIMS`, under the paper's reading (:func:`kcal.publish.claims.
    evaluate_all`), on ``results`` (each flavour), on the paper's numbers, and over ``replicates`` (``{run:
    results}`` of the other runs of the protocol; per dataset, in how many runs, judged alone, it holds)."""
    out = []
    for e in evaluate_all(results, replicates=replicates):
        if e.label:  # kcal's stricter reading: claims.md shows it, the answer does not
            continue
        c, runs = e.claim, {}
        for fl in FLAVOURS:
            for ds, d in e.results[fl].datasets.items():
                if d.runs > 1:
                    k = sum(o == V.HOLDS for o in d.run_outcomes)
                    runs.setdefault(fl, {})[ds] = (k, d.runs)
        out.append(ClaimSummary(c.id, c.summary(), TABLES[c.table].number, _outcome(e.results[PAPER]),
                                {fl: _outcome(e.results[fl]) for fl in FLAVOURS}, runs))  # fmt: skip
    return out


def cell_classes(results: pd.DataFrame, spread: pd.DataFrame) -> pd.DataFrame:
    """Every cell of ours that has a paper value and is defined as it (not "definition differs"), both flavours (:func:`kcal.publish.table_cells.comparison_frame`),
    with its ``class`` (:data:`CELL_CLASSES`): the seed verdict, and for a "differs" the protocol's verdict
    where the cell has replicates (``spread``: :func:`kcal.publish.protocol_spread.spread_frame`)."""
    cells = pd.concat([comparison_frame(results, fl) for fl in FLAVOURS], ignore_index=True)
    cells = cells[cells["verdict"].isin([SEED_WITHIN, SEED_DIFFERS])].copy()
    protocol = {} if spread.empty else dict(zip(map(tuple, spread[CELL_KEYS].to_numpy()),
                                                spread["protocol_verdict"], strict=True))  # fmt: skip

    def cls(row) -> str:
        if row["verdict"] == SEED_WITHIN:
            return CELL_CLASSES[0]
        verdict = protocol.get(tuple(row[k] for k in CELL_KEYS))
        if verdict is None:
            return CELL_CLASSES[3]
        if verdict.startswith(WITHIN):
            return CELL_CLASSES[1]
        return CELL_CLASSES[2] if verdict.startswith(BEYOND) else verdict

    cells["class"] = [cls(r) for r in cells.to_dict("records")]
    return cells.reset_index(drop=True)


# ---- the tables --------------------------------------------------------------------------------------------
def _holds(o: Outcome) -> str:
    where = ", ".join(o.holds) if o.holds else "none"
    return f"{len(o.holds)} of {len(o.judged)}: {where}"


def _runs(per: Mapping[str, tuple[int, int]]) -> str:
    return ", ".join(f"{d} {k}/{n}" for d, (k, n) in sorted(per.items()))


def claims_table(summaries: Sequence[ClaimSummary]) -> str:
    """The answer's table of claims (module docstring)."""
    lines = ["| claim | the paper says (its table) | the paper's own numbers | kcal, exact | kcal, official "
             "| runs of the protocol where it holds |", "|---|---|---|---|---|---|"]  # fmt: skip
    for s in summaries:
        exact = s.runs.get(FLAVOURS[0], {})
        runs = _runs(exact) or "—"
        other = {fl: per for fl, per in s.runs.items() if fl != FLAVOURS[0] and per != exact}
        runs += "".join(f" ({fl}: {_runs(per)})" for fl, per in other.items())
        ours = " | ".join(f"**{s.ours[fl].verdict}**, holds on {_holds(s.ours[fl])}" for fl in FLAVOURS)
        lines.append(f"| {s.id} | {s.says} | {s.paper.verdict}, holds on "
                     f"{len(s.paper.holds)} of {len(s.paper.judged)} | {ours} | {runs} |")  # fmt: skip
    return "\n".join(lines)


def cells_table(classes: pd.DataFrame) -> str:
    """The answer's table of the paper's tables: per table and flavour, the cells compared and their classes."""
    if classes.empty:
        return "(no cell of ours has a paper value)"
    names = [c for c in CELL_CLASSES if c in set(classes["class"])]
    names += sorted(set(classes["class"]) - set(names))
    lines = ["| table | flavour | datasets | cells | " + " | ".join(names) + " |",
             "|---|---|---|---:|" + "---:|" * len(names)]  # fmt: skip
    number = {t.name: t.number for t in TABLES.values()}
    keys = sorted({(number[t], fl) for t, fl in zip(classes["table"], classes["flavour"], strict=True)},
                  key=lambda k: (k[0], FLAVOURS.index(k[1])))  # fmt: skip
    for table, flavour in keys:
        part = classes[(classes["table"].map(number) == table) & (classes["flavour"] == flavour)]
        counts = part["class"].value_counts()
        lines.append(f"| {table} | {flavour} | {part['dataset'].nunique()} | {len(part)} | "
                     + " | ".join(str(int(counts.get(n, 0))) for n in names) + " |")  # fmt: skip
    for flavour in FLAVOURS:
        part = classes[classes["flavour"] == flavour]
        counts = part["class"].value_counts()
        lines.append(f"| all | {flavour} | {part['dataset'].nunique()} | {len(part)} | "
                     + " | ".join(str(int(counts.get(n, 0))) for n in names) + " |")  # fmt: skip
    return "\n".join(lines)


# ---- sentences -------------------------------------------------------------------------------------------------
def _pairs(rows: pd.DataFrame) -> str:
    return ", ".join(f"{r['dataset']} {r['objective']}" + ("" if r["run"] == "published" else f" ({r['run']})")
                     for r in rows.to_dict("records"))  # fmt: skip


def why_sentences(kernels: pd.DataFrame, published: str = "published") -> str:
    """How many selected MMD configurations have the regulariser switched off by their kernels, in the published
    run and in the replicates (:mod:`kcal.publish.selected_kernels`)."""
    if kernels.empty:
        return "(no MMD study published)"
    off = kernels.apply(switched_off, axis=1)
    pub = kernels["run"] == published
    text = (f"In the published run, the selection switches the MMD regulariser off in {int(off[pub].sum())} of "
            f"{int(pub.sum())} selected MMD configurations: its x-kernel is below 1e{OFF_LOG10:.0f} at the mean "
            f"squared distance of two rows, or its class kernel above {FLAT_KY:g} between two different classes "
            f"(`kcal.publish.selected_kernels`; the table under *Selected configurations*).")  # fmt: skip
    if (~off[pub]).any():
        text += f" Not off by this rule: {_pairs(kernels[pub & ~off])}."
    if (~pub).any():
        text += (f" In the replicates of the protocol it is off in {int(off[~pub].sum())} of {int((~pub).sum())}; "
                 f"on in {_pairs(kernels[~pub & ~off]) or 'none'}.")  # fmt: skip
    return text


LINE_LABELS = dict(zip(CELL_CLASSES, ("within 2 seed SE", "differ within the protocol's spread",
                                      "differ beyond the protocol's spread", "differ (not replicated)"),
                       strict=True))  # fmt: skip
"""How :func:`dataset_line` names each class of :data:`CELL_CLASSES`."""


def dataset_line(summaries: Sequence[ClaimSummary], classes: pd.DataFrame, dataset: str) -> str:
    """One dataset's result in a line: its cells by class per flavour, and the claims that hold on it."""
    parts = []
    for flavour in FLAVOURS:
        counts = classes[(classes["dataset"] == dataset) & (classes["flavour"] == flavour)][
            "class"
        ].value_counts()
        names = [c for c in CELL_CLASSES if c in counts.index] + sorted(set(counts.index) - set(CELL_CLASSES))
        parts.append(f"{flavour}, {int(counts.sum())} cells: "
                     + ", ".join(f"{int(counts[c])} {LINE_LABELS.get(c, c)}" for c in names))  # fmt: skip
    held = [f"{s.id} ({', '.join(fl for fl in FLAVOURS if dataset in s.ours[fl].holds)})" for s in summaries
            if any(dataset in s.ours[fl].holds for fl in FLAVOURS)]  # fmt: skip
    judged = [s.id for s in summaries if any(dataset in s.ours[fl].judged for fl in FLAVOURS)]
    return (f"**Result.** {'; '.join(parts)}. Claims that hold here: {', '.join(held) or 'none'} "
            f"(of {', '.join(judged)}).")  # fmt: skip


def spread_moves(spread: pd.DataFrame) -> str:
    """How far rerunning the whole protocol moves a cell, in the published run's seed SEs: the median ratio of the
    replicates' SD to the seed SE, overall and per dataset, and the share of cells above 2."""
    if spread.empty:
        return "(no cell has replicates)"
    ratio = spread["ratio"].dropna()
    per = ", ".join(f"{d} {g.median():.2f}" for d, g in ratio.groupby(spread["dataset"], sort=True))
    constant = len(spread) - len(ratio)
    left_out = (f"; {constant} more have no ratio: every seed gave them one number, up to float rounding"
                if constant else "")  # fmt: skip
    return (f"Over the {len(ratio)} cells with replicates (both flavours{left_out}), the protocol's SD is a median "
            f"{ratio.median():.2f} times the published run's seed SE (per dataset: {per}); in "
            f"{100 * (ratio > 2).mean():.0f} % of cells it is more than 2 times.")  # fmt: skip


def ids_by_verdict(pairs) -> str:
    """``(verdict, claim id)`` pairs as "verdict id, id; verdict id", verdicts in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for verdict, cid in pairs:
        groups.setdefault(verdict, []).append(cid)
    return "; ".join(f"{w} {', '.join(ids)}" for w, ids in groups.items())


def covered(s: ClaimSummary, flavour: str) -> str:
    """A claim's id, and for a supported claim judged on fewer datasets than the paper's, on how many: support on
    the datasets that run is not support on the paper's."""
    ours, theirs = len(s.ours[flavour].judged), len(s.paper.judged)
    partial = s.ours[flavour].verdict == SUPPORTED and ours < theirs
    return f"{s.id} (on {ours} of its {theirs} datasets)" if partial else s.id


def not_run_note(ran: Sequence[str], paper: Sequence[str]) -> str:
    """Why the paper's other datasets have no rows, from the registry: those whose data the offline mirror
    holds are not published yet, the others are not in the offline mirror."""
    from kcal.data import get_spec

    rest = [d for d in paper if d not in ran]
    pending = [d for d in rest if get_spec(d).in_mirror]
    absent = [d for d in rest if not get_spec(d).in_mirror]
    parts = ([f"{', '.join(pending)}: in the offline mirror, not published yet"] if pending else []) + (
        [f"{', '.join(absent)}: not in the offline mirror"] if absent else []
    )
    return f"; {'; '.join(parts)}" if parts else ""


VERDICT_LINES = (
    (V.SUPPORTED, "Reproduces", ""),
    (
        V.NOT_REPRODUCED,
        "The paper's effect excluded",
        " (our 95 % interval rules out the paper's own gain on a dataset the claim needs)",
    ),
    (V.CONTRADICTED, "Contradicted", " (ours worse)"),
    (
        V.INCONCLUSIVE,
        "Cannot be decided",
        " (the interval holds both no effect and the paper's; claims.md gives "
        "the runs that would decide each comparison)",
    ),
)
"""The answer's verdict lines, in order: the verdict, its label, what it means."""


def claims_by_verdict(summaries: Sequence[ClaimSummary], verdict: str) -> str:
    """The claims with ``verdict`` in some flavour, each marked with the flavours where it has it when not all,
    and with how many of the paper's datasets it was judged on where it is supported on fewer."""
    out = []
    for s in summaries:
        flavours = [fl for fl in FLAVOURS if s.ours[fl].verdict == verdict]
        if not flavours:
            continue
        text = covered(s, flavours[0]) if verdict == V.SUPPORTED else s.id
        if len(flavours) < len(FLAVOURS):
            others = "; ".join(f"{fl}: {s.ours[fl].verdict}" for fl in FLAVOURS if fl not in flavours)
            text += f" ({', '.join(flavours)}; {others})"
        out.append(text)
    return ", ".join(out) or "none"


def first_lines(
    summaries: Sequence[ClaimSummary], kernels: pd.DataFrame, paths: PathCounts | None, claims_link: str
) -> list[str]:
    """The answer in a few bullets a reader of the paper understands without the glossary: which claims
    reproduce, which are excluded, contradicted or undecided, why, and what a practitioner should do."""
    lines = [f"- **{label}**{meaning}: {claims_by_verdict(summaries, verdict)}." for verdict, label, meaning
             in VERDICT_LINES]  # fmt: skip
    lines[0] = lines[0].replace(
        ":", f" (of the paper's {len(summaries)} claims, [claims.md]({claims_link})):", 1
    )
    if not kernels.empty:
        is_pub = kernels["run"] == "published"
        off = kernels.apply(switched_off, axis=1).astype(bool)
        others = (f" (in the replicates of the protocol: {int(off[~is_pub].sum())} of {int((~is_pub).sum())})"
                  if (~is_pub).any() else "")  # fmt: skip
        lines.append(f"- **Why**: in {int(off[is_pub].sum())} of {int(is_pub.sum())} selected MMD configurations of the "
                     f"published run{others} the kernels switch the regulariser off (an x-kernel below 1e-10 "
                     "between two rows, or a class kernel above 0.9 between two classes), so each such regularised "
                     "row is in effect its baseline with other hyperparameters.")  # fmt: skip
    if paths is not None and paths.paths:
        if paths.gained:
            advice = (f"{paths.gained} of {paths.paths} paths (regulariser, dataset, calibration metric) lower the "
                      f"calibration error beyond 2 SE at no significant cost, and post-hoc recalibration alone is as "
                      f"good in {paths.alone} of those: recalibrate post hoc first, and add the MMD term only with "
                      "λ and bandwidths set so that it acts (the paths' recipe), not chosen by the paper's selection")  # fmt: skip
        else:
            advice = (f"none of {paths.paths} paths lowers the calibration error beyond 2 SE at no significant cost: "
                      "recalibrate post hoc")  # fmt: skip
        lines.append(
            f"- **What to do**: where the regulariser is made to act (the regularisation paths), {advice}."
        )
    return lines


def readme_summary(
    summaries: Sequence[ClaimSummary],
    classes: pd.DataFrame,
    kernels: pd.DataFrame,
    link: str,
    paths: PathCounts | None = None,
) -> str:
    """The README's results summary (a few lines, every number generated), linking to the report at ``link``:
    the answer's first lines (:func:`first_lines`), the paper's own numbers and the cells."""
    ran = sorted(set(classes["dataset"]))
    paper = sorted({d for t in TABLES.values() for d in t.datasets})
    claims = f"{link.rsplit('/', 1)[0]}/claims.md" if "/" in link else "claims.md"
    lines = [f"kcal ran the paper's protocol at its budget on {len(ran)} of the paper's {len(paper)} datasets "
             f"({', '.join(ran)}){not_run_note(ran, paper)}. The answer, each dataset's causes and the conventions: "
             f"[RESULTS.md]({link}); *exact*: the paper's definitions, *official*: the authors' code's, on the "
             "same predictions."]  # fmt: skip
    lines += first_lines(summaries, kernels, paths, claims)
    own = ids_by_verdict((s.paper.verdict, s.id) for s in summaries if s.paper.verdict != SUPPORTED)
    if own:
        lines.append(f"- On the paper's own numbers the same rules give {own} (the paper's counter-examples: "
                     f"[claims.md]({claims})).")  # fmt: skip
    cells = []
    for flavour in FLAVOURS:
        part = classes[classes["flavour"] == flavour]
        counts = part["class"].value_counts()
        cells.append(f"{flavour} {int(counts.get(CELL_CLASSES[0], 0))} of {len(part)} within 2 combined seed SE, "
                     f"{int(counts.get(CELL_CLASSES[1], 0))} more within the protocol's spread")  # fmt: skip
    lines.append(
        f"- **The paper's tables**, cell by cell (each cell whose metric is defined as the paper's number; "
        f"the others are left out): {'; '.join(cells)}."
    )
    return "\n".join(lines)
