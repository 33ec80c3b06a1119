"""Paper-style result tables, paper-vs-ours comparisons and claim verdicts.

Input is the tidy CSV written by the seed runner, one row per aggregated cell::

    dataset, objective, recalibrator, flavour, metric, mean, se, n

(``acc`` is a fraction in [0, 1]; tables show it x100 like the paper). For each flavour (``exact``
and ``official``) this module writes

* LaTeX tables laid out like the paper's Tables 3-7 (``table3_regression_<fl>.tex`` ...), plus a
  standalone document ``tables_<fl>.tex`` holding all five (booktabs + multirow);
* ``comparison_<fl>.csv`` / ``comparison_<fl>.md``: ours next to the paper's published numbers for
  every (table, dataset, row, metric) with a verdict per cell;

and once, ``claims.md``: a verdict per claim of the paper's text under both flavours (and on the
paper's own numbers, as a sanity check of how each claim is encoded).

Definitions
-----------
Bold (LaTeX): within one dataset block (Table 3: all four rows, Tables 4/5: all four objectives,
Table 6: all sample sizes, Table 7: both kernels), per column, every entry whose mean *as printed*
(3 decimals, accuracy in %) equals the best printed mean: highest for accuracy, lowest for every
other metric (including KCE, which can be negative, as in the paper).

Cell verdict: with ``diff = ours - paper`` and the combined standard error
``se_c = sqrt(se_ours^2 + se_paper^2)``, "within 2 SE" if ``|diff| <= 2 se_c`` else "differs".
Where the paper gives no SE (Table 6) ``se_paper = 0``, i.e. only our SE counts; a missing SE of
ours (a single seed) likewise counts as 0. "not run": no mean of ours; "no paper value": the paper
has no number for that cell. Note the paper prints SEs rounded to 3 decimals, so a printed 0.000
enters as 0. "definition differs": the flavour's metric is defined otherwise than the paper's number
(:func:`kcal.publish.table_cells.definition_differs`), so the two are not compared.

Under each LaTeX table, notes say which definition each column uses (and where it differs from the
paper's), why cells show as not run (data not available offline, or not run in this profile), and why two
rows coincide in every printed digit where they do (the selected configurations and the regulariser's share
of the loss, from studies.csv); each tabular is scaled down to the text width where it is wider.

Claim verdicts (:mod:`kcal.publish.claims`) and the cells with their verdicts (:mod:`kcal.publish.table_cells`) live in
their own modules; this one renders them and is the command line (``kcal tables``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from kcal.core import layout
from kcal.paper import PAPER_OBJECTIVES
from kcal.publish.claims_text import claims_markdown, claims_summary, profile_note
from kcal.publish.table_cells import (
    CLASSIFICATION,
    DIFFERS,
    FLAVOUR_CAPTION,
    FLAVOUR_LABEL,
    FLAVOURS,
    MISSING_MD,
    MISSING_TEX,
    REGRESSION,
    SEED_ALPHA,
    TABLES,
    VERDICTS,
    Table,
    best_mask,
    cell_frame,
    comparison_frame,
    dataset_info,
    definition_differs,
    fmt,
    is_missing,
    load_results,
    normalise_results,
)
from kcal.sweep.search import REG_SHARE_MEDIAN

__all__ = [
    "comparison_markdown",
    "latex_table",
    "main",
    "write_tables",
]  # the cells: kcal.publish.table_cells; claims: kcal.publish.claims


# --------------------------------------------------------------------------------------------------
# LaTeX


def _tex_cell(mean: float, se: float, bold: bool, means_only: bool) -> str:
    if math.isnan(mean):
        return MISSING_TEX
    body = fmt(mean) if means_only or math.isnan(se) else f"{fmt(mean)} $\\pm$ {fmt(se)}"
    return f"\\textbf{{{body}}}" if bold else body


_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _tex_escape(s: str) -> str:
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in s)


def _seed_phrase(cells: pd.DataFrame) -> str:
    ns = sorted({int(n) for n in cells["ours_n"] if not is_missing(n) and not math.isnan(n)})
    if not ns:
        return "no results of ours"
    return f"{ns[0]} seeds" if len(ns) == 1 else f"{ns[0]}--{ns[-1]} seeds"


def _dataset_tex(ds: str, table: Table, inline: bool = False) -> str:
    info = dataset_info(ds)
    name = f"\\textsc{{{_tex_escape(ds)}}}"
    parts = [f"$n={info['n']}$", f"$d={info['d']}$"] if info["n"] is not None else []
    if info["n"] is not None and table.name.startswith("classification") and info["m"] is not None:
        parts.append(f"$m={info['m']}$")
    if inline:
        lines = [name] + ([f"({', '.join(parts)})"] if parts else [])
    else:
        lines = [name] + [f"\\quad{p}" for p in parts]
    return "\\begin{tabular}[c]{@{}l@{}}" + "\\\\ ".join(lines) + "\\end{tabular}"


def _caption(table: Table, flavour: str, cells: pd.DataFrame) -> str:
    unit = "mean" if table.means_only else "mean $\\pm$ standard error"
    classification = table.name.startswith("classification")
    parts = [
        f"{table.caption} Ours: {unit} over {_seed_phrase(cells)}, {FLAVOUR_CAPTION.get(flavour, 'flavour ' + _tex_escape(flavour))}"
    ]
    if classification:
        parts.append("accuracy in \\%")
    if table.name != "sample_size":
        parts.append(
            "$n$ is the number of examples we use, $d$ the number of features"
            + (", $m$ the number of classes" if classification else "")
        )
    return (
        "; ".join(parts)
        + ". Bold: best per column within a dataset, ties at the printed precision included. "
        "Notes under the table: the columns' definitions, cells not run and why, coinciding rows and why."
    )


PLAIN_OBJECTIVES = {objectives[0] for objectives in PAPER_OBJECTIVES.values()}
"""The objectives without a regulariser (NLL, XE); every other row of the tables trains with one."""
OBJECTIVE_NAME = dict(reversed([(r.objective, r.key) for t in TABLES.values() for r in t.rows
                                  if r.recalibrator == "none" and not layout.is_variant(r.objective)]))  # fmt: skip
"""An objective as the tables name it (its row without post-hoc recalibration, the first table's)."""


def fit_width(tabular: str) -> str:
    """``tabular`` scaled down to the text width where it is wider (never up): the tables fit a standard
    article page."""
    return "\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%\n" + tabular + "%\n}"


def _shares(studies: pd.DataFrame | None) -> dict[tuple[str, str], float]:
    """``{(dataset, objective): the selected trial's reg_share_median}`` where studies.csv records one."""
    if studies is None or REG_SHARE_MEDIAN not in studies.columns:
        return {}
    return {(r["dataset"], r["objective"]): float(r[REG_SHARE_MEDIAN])
            for r in studies.to_dict("records") if not is_missing(r[REG_SHARE_MEDIAN])}  # fmt: skip


def _params(studies: pd.DataFrame | None) -> dict[tuple[str, str], dict]:
    if studies is None or "best_params" not in studies.columns:
        return {}
    return {(r["dataset"], r["objective"]): json.loads(r["best_params"])
            for r in studies.to_dict("records") if isinstance(r["best_params"], str) and r["best_params"]}  # fmt: skip


def _share_text(share: float) -> str:
    return "0" if share == 0 else f"{share:.2g}"


def columns_note(table: Table, flavour: str) -> str:
    """Which definition each column uses in ``flavour``, and where it differs from the paper's."""
    parts = []
    recalibrators = {row.recalibrator for row in table.rows}
    for met in table.metrics:
        text = met.official if flavour == "official" else met.exact
        if not text:
            continue
        after = met.official_after if flavour == "official" else met.exact_after
        if after and "post-hoc" in recalibrators:
            text += f" (after post-hoc recalibration: {after})"
        differs = [r for r in recalibrators if definition_differs(flavour, met, r)]
        if differs:
            when = "" if set(differs) >= recalibrators else " after post-hoc recalibration"
            text += f" [definition differs from the paper's{when}: not compared with its numbers]"
        parts.append(f"{met.short}: {text}")
    if not parts:
        return ""
    which = ("official-compatible flavour: the paper's definitions, as the authors' code computes them"
             if flavour == "official" else f"{flavour} flavour: kcal's definitions")  # fmt: skip
    return f"Columns ({which}): " + "; ".join(parts) + "."


def missing_note(table: Table, cells: pd.DataFrame, ran: set[str] = frozenset()) -> str:
    """Why cells show as not run: a dataset whose data are not in the offline mirror (and that has no result
    in any table, ``ran``), or what this profile did not run."""
    from kcal.data import get_spec

    offline, not_run, rows = [], [], []
    for ds in table.datasets:
        sub = cells[cells["dataset"] == ds]
        if sub["ours_mean"].isna().all():
            (offline if not get_spec(ds).in_mirror and ds not in ran else not_run).append(ds)
            continue
        missing = [r.key for r in table.rows if sub[sub["row"] == r.key]["ours_mean"].isna().all()]
        if missing:
            rows.append(f"{ds} ({', '.join(missing)})")
    parts = []
    if offline:
        parts.append(
            f"{', '.join(offline)}: not available offline (their data are not in the offline mirror)"
        )
    if not_run:
        parts.append(f"{', '.join(not_run)}: not run in this profile")
    if rows:
        parts.append(f"rows not run in this profile: {'; '.join(rows)}")
    return f"{MISSING_TEX} marks a cell not run: " + "; ".join(parts) + "." if parts else ""


def coincide_note(table: Table, cells: pd.DataFrame, studies: pd.DataFrame | None) -> str:
    """Rows of one dataset that coincide in every printed cell, and why (the selected configurations and the
    regulariser's share of the loss, from studies.csv)."""
    shares, params = _shares(studies), _params(studies)
    idx = cells.set_index(["dataset", "row", "metric"])
    out = []
    for ds in table.datasets:
        printed = {}
        for row in table.rows:
            vals = [idx.loc[(ds, row.key, m.name)] for m in table.metrics]
            if any(math.isnan(v["ours_mean"]) for v in vals):
                continue
            printed[row.key] = tuple(
                _tex_cell(v["ours_mean"], v["ours_se"], False, table.means_only) for v in vals
            )
        keys = list(printed)
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                if printed[a] == printed[b]:
                    out.append(f"on {ds}, rows {a} and {b} coincide in every printed digit: "
                               + _coincide_reason(ds, table.row(a), table.row(b), shares, params))  # fmt: skip
    return ("Coinciding rows: " + "; ".join(out) + ".") if out else ""


def _coincide_reason(ds, a, b, shares, params) -> str:
    obj_a, obj_b = layout.variant_base(a.objective), layout.variant_base(b.objective)
    if obj_a == obj_b:
        return (f"the same selected configuration of {obj_a}"
                + (" (post-hoc recalibration left the printed numbers as they were)"
                   if a.recalibrator != b.recalibrator else ""))  # fmt: skip
    regularised = [o for o in (obj_a, obj_b) if o not in PLAIN_OBJECTIVES]
    pa, pb = params.get((ds, obj_a)), params.get((ds, obj_b))
    parts = []
    if pa is not None and pb is not None:
        common = sorted(set(pa) & set(pb))
        same = [k for k in common if pa[k] == pb[k]]
        parts.append("the two selected configurations share every common hyperparameter" if len(same) == len(common)
                     else f"the selected configurations differ in {', '.join(k for k in common if k not in same)}")  # fmt: skip
    known = [
        f"{OBJECTIVE_NAME.get(o, o)} {_share_text(shares[(ds, o)])}" for o in regularised if (ds, o) in shares
    ]
    if known:
        parts.append("the regulariser's share of the selected configuration's loss (median over its epochs) is "
                     + ", ".join(known) + ": a share near 0 means the regulariser is in effect off")  # fmt: skip
    unknown = [OBJECTIVE_NAME.get(o, o) for o in regularised if (ds, o) not in shares]
    if unknown:
        parts.append(f"the regulariser's share of the loss is not recorded for {', '.join(unknown)} (studies.csv), so "
                     "whether it acted is not known from the published data")  # fmt: skip
    return "; ".join(parts) if parts else "no study of theirs is recorded"


def share_note(table: Table, cells: pd.DataFrame, studies: pd.DataFrame | None) -> str:
    """The regulariser's share of the loss of each regularised row's selected configuration, where recorded
    (nothing without ``studies``)."""
    if studies is None:
        return ""
    shares = _shares(studies)
    run = {(r.dataset, layout.variant_base(r.objective)) for r in cells.itertuples(index=False)
           if not math.isnan(r.ours_mean)}  # fmt: skip
    regularised = sorted({(ds, o) for ds, o in run if o not in PLAIN_OBJECTIVES},
                         key=lambda k: (table.datasets.index(k[0]), k[1]))  # fmt: skip
    if not regularised:
        return ""
    known = [f"{ds} {OBJECTIVE_NAME.get(o, o)} {_share_text(shares[(ds, o)])}" for ds, o in regularised
             if (ds, o) in shares]  # fmt: skip
    unknown = [f"{ds} {OBJECTIVE_NAME.get(o, o)}" for ds, o in regularised if (ds, o) not in shares]
    text = ("Regulariser share of the loss of each selected configuration (weight times |regulariser| over the "
            "base loss, median over the trial's epochs; near 0: in effect unregularised): ")  # fmt: skip
    text += "; ".join(known) if known else "none recorded"
    if unknown:
        text += f"; not recorded in studies.csv: {', '.join(unknown)}"
    return text + "."


def table_notes(
    table: Table,
    flavour: str,
    cells: pd.DataFrame,
    studies: pd.DataFrame | None = None,
    ran: set[str] = frozenset(),
) -> str:
    """The notes printed under a table: column definitions, missing cells, coinciding rows, regulariser shares
    (``ran``: the datasets with a result in any table)."""
    notes = [columns_note(table, flavour), missing_note(table, cells, ran), coincide_note(table, cells, studies),
             share_note(table, cells, studies)]  # fmt: skip
    body = " ".join(_tex_escape(n) for n in notes if n)
    return f"\\par\\smallskip{{\\footnotesize\\raggedright {body}\\par}}" if body else ""


def _block_table_tex(
    table: Table,
    flavour: str,
    cells: pd.DataFrame,
    studies: pd.DataFrame | None = None,
    ran: set[str] = frozenset(),
) -> str:
    colspec = "@{}ll" + "c" * len(table.metrics) + "@{}"
    if table.name == "classification_tempscaling":
        second = (
            r"\begin{tabular}[l]{@{}l@{}}Training Objective\\ \quad \textbf{with Temp. Scaling}\end{tabular}"
        )
    elif table.name == "decision_kernel":
        second = r"\textbf{Kernel} ($k_Y$)"
    else:
        second = "Training Objective"
    header = " & ".join([r"\textbf{Dataset}", second] + [m.header for m in table.metrics]) + r" \\"
    lines = [
        "\\begin{table}[t]", "\\centering", "\\fontsize{8pt}{10pt}\\selectfont",
        f"\\caption{{{_caption(table, flavour, cells)}}}",
        f"\\label{{tab:kcal-{table.slug}-{flavour}}}",
    ]  # fmt: skip
    start = len(lines)  # the tabular, scaled to the text width where wider
    lines += [f"\\begin{{tabular}}{{{colspec}}}", "\\toprule", header, "\\midrule"]
    idx = cells.set_index(["dataset", "row", "metric"])
    for i, ds in enumerate(table.datasets):
        bold = {}
        for met in table.metrics:
            vals = [idx.loc[(ds, r.key, met.name), "ours_mean"] for r in table.rows]
            bold[met.name] = best_mask(vals, met.lower_is_better)
        for j, row in enumerate(table.rows):
            first = (
                f"\\multirow{{{len(table.rows)}}}{{*}}{{{_dataset_tex(ds, table, inline=table.name == 'decision_kernel')}}}"
                if j == 0 else ""
            )  # fmt: skip
            vals = []
            for met in table.metrics:
                c = idx.loc[(ds, row.key, met.name)]
                vals.append(_tex_cell(c["ours_mean"], c["ours_se"], bold[met.name][j], table.means_only))
            lines.append(" & ".join([first, row.latex, *vals]) + r" \\")
        lines.append("\\midrule" if i < len(table.datasets) - 1 else "\\bottomrule")
    lines.append("\\end{tabular}")
    lines[start:] = [fit_width("\n".join(lines[start:]))]
    lines += [n for n in [table_notes(table, flavour, cells, studies, ran)] if n] + ["\\end{table}"]
    return "\n".join(lines) + "\n"


def _sample_size_tex(
    table: Table,
    flavour: str,
    cells: pd.DataFrame,
    studies: pd.DataFrame | None = None,
    ran: set[str] = frozenset(),
    per_tabular: int = 3,
) -> str:
    idx = cells.set_index(["dataset", "row", "metric"])
    k = len(table.metrics)
    lines = [
        "\\begin{table}[h]", "\\centering", "\\fontsize{8.5pt}{8.5pt}\\selectfont",
        f"\\caption{{{_caption(table, flavour, cells)}}}", f"\\label{{tab:kcal-{table.slug}-{flavour}}}",
    ]  # fmt: skip
    chunks = [table.datasets[i : i + per_tabular] for i in range(0, len(table.datasets), per_tabular)]
    for chunk in chunks:
        colspec = "c|" + "|".join(["c" * k] * len(chunk))
        heads = [
            f"\\multicolumn{{{k}}}{{c{'|' if j < len(chunk) - 1 else ''}}}{{\\textsc{{{_tex_escape(ds)}}}}}"
            for j, ds in enumerate(chunk)
        ]
        rules = " ".join(f"\\cmidrule(lr){{{2 + j * k}-{1 + (j + 1) * k}}}" for j in range(len(chunk)))
        sub = [r"\textbf{\# Samples}"] + [m.short for _ in chunk for m in table.metrics]
        start = len(lines)
        lines += [f"\\begin{{tabular}}{{{colspec}}}", "\\toprule", " & ".join(["", *heads]) + r" \\", rules,
                  " & ".join(sub) + r" \\", "\\midrule"]  # fmt: skip
        bold = {
            (ds, m.name): dict(zip([r.key for r in table.rows],
                                   best_mask([idx.loc[(ds, r.key, m.name), "ours_mean"] for r in table.rows],
                                             m.lower_is_better), strict=True))
            for ds in chunk for m in table.metrics
        }  # fmt: skip
        for row in table.rows:
            vals = [
                _tex_cell(
                    idx.loc[(ds, row.key, m.name), "ours_mean"], np.nan, bold[(ds, m.name)][row.key], True
                )
                for ds in chunk
                for m in table.metrics
            ]
            lines.append(" & ".join([row.latex, *vals]) + r" \\")
        lines += ["\\bottomrule", "\\end{tabular}"]
        lines[start:] = [fit_width("\n".join(lines[start:]))]
        if chunk is not chunks[-1]:
            lines.append("")
    lines += [n for n in [table_notes(table, flavour, cells, studies, ran)] if n] + ["\\end{table}"]
    return "\n".join(lines) + "\n"


def latex_table(
    results: pd.DataFrame, flavour: str, table: Table | str, studies: pd.DataFrame | None = None
) -> str:
    """One table in ``flavour``; ``studies`` (studies.csv, optional) explains coinciding rows in its notes."""
    table = TABLES[table] if isinstance(table, str) else table
    results = normalise_results(results)
    cells = cell_frame(results, flavour, table)
    ran = set(results.loc[results["mean"].notna(), "dataset"])
    return (
        _sample_size_tex(table, flavour, cells, studies, ran)
        if table.name == "sample_size"
        else _block_table_tex(table, flavour, cells, studies, ran)
    )


STANDALONE_PREAMBLE = r"""\documentclass{article}
\usepackage[T1]{fontenc}
\usepackage{booktabs}
\usepackage{multirow}
\usepackage{graphicx}
\begin{document}
"""


# --------------------------------------------------------------------------------------------------
# Markdown / CSV comparison


def _md_num(x: float, signed: bool = False) -> str:
    if is_missing(x) or math.isnan(x):
        return MISSING_MD
    s = fmt(x)
    return ("+" + s) if signed and not s.startswith("-") and float(s) != 0 else s


def comparison_markdown(comp: pd.DataFrame, flavour: str) -> str:
    out = [
        f"# Ours vs the paper — flavour `{flavour}` ({FLAVOUR_LABEL.get(flavour, flavour)})",
        "",
        "Ours: mean and standard error of the mean over seeds (`n`). Accuracy in % (ours ×100). "
        "diff = ours − paper. Verdict: **within 2 SE** if |diff| ≤ 2·sqrt(se_ours² + se_paper²) "
        "(the combined SE), else **differs**; where the paper gives no SE (Table 6) only our SE counts "
        "(a missing SE counts as 0). **not run**: no result of ours; **no paper value**: the paper has "
        "no number for that cell. The paper's SEs are printed to 3 decimals, so its 0.000 enters as 0. "
        "**definition differs**: this flavour's metric is defined otherwise than the paper's number (which the "
        "authors' code computed), so the two are not compared (kcal's exact QCE, DCE, ECE, KCE and post-hoc NLL; "
        "the official flavour computes the paper's definitions, except KCE, whose paper values imply a scaling in "
        "neither the authors' code nor the text).",
        "",
        chance_line(comp),
        "",
    ]
    for t in TABLES.values():
        sub = comp[comp["table"] == t.name]
        counts = sub["verdict"].value_counts()
        summary = ", ".join(f"{v}: {int(counts.get(v, 0))}" for v in VERDICTS)
        out += [f"## Table {t.number} — {t.name}", "", summary, "",
                "| dataset | row | metric | ours | ours SE | n | paper | paper SE | diff | verdict |",
                "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
        for r in sub.itertuples(index=False):
            n = MISSING_MD if is_missing(r.ours_n) or math.isnan(r.ours_n) else str(int(r.ours_n))
            out.append(
                f"| {r.dataset} | {r.row} | {t.metric(r.metric).paper} | {_md_num(r.ours_mean)} | {_md_num(r.ours_se)} "
                f"| {n} | {_md_num(r.paper_mean)} | {_md_num(r.paper_se)} | {_md_num(r.diff, signed=True)} | {r.verdict} |"
            )
        out.append("")
    return "\n".join(out)


def comparison_counts(comp: pd.DataFrame) -> dict:
    """The cells per verdict, and over the cells compared (both numbers, the same definition) how many "differs"
    chance alone would give if ours and the paper's were draws of the same 50-seed mean (:data:`SEED_ALPHA`)."""
    from scipy.stats import binom

    n = int(comp["verdict"].isin(["within 2 SE", DIFFERS]).sum())
    low, high = (int(binom.ppf(q, n, SEED_ALPHA)) for q in (0.025, 0.975)) if n else (0, 0)
    per = comp["verdict"].value_counts()
    return {**{v: int(per.get(v, 0)) for v in VERDICTS}, "compared": n, "alpha": round(SEED_ALPHA, 4),
            "chance_expected": round(SEED_ALPHA * n, 3), "chance_low": low, "chance_high": high}  # fmt: skip


def chance_line(comp: pd.DataFrame) -> str:
    """:func:`comparison_counts` in a sentence."""
    c = comparison_counts(comp)
    return (f"Over the {c['compared']} cells compared (both numbers, the same definition), {c[DIFFERS]} differ; "
            f"chance alone, if every cell reproduced the paper's mean, would give about {c['chance_expected']:.1f} "
            f"(95 % range {c['chance_low']}–{c['chance_high']}). The seed SE does not count the selection's noise: "
            "`protocol_spread.md` tests the replicated cells against the protocol's own spread.")  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Entry points


def _flavours(results: pd.DataFrame) -> list[str]:
    """Both paper flavours always (an absent one renders as "not run"), then any extra ones."""
    return list(FLAVOURS) + sorted(set(results["flavour"]) - set(FLAVOURS))


def write_tables(
    results_csv: Path | str,
    out_dir: Path | str,
    echo_claims: bool = True,
    profile: str | None = None,
    csv: bool = True,
    studies: pd.DataFrame | None = None,
    replicates: dict[str, pd.DataFrame] | None = None,
) -> dict[str, Path]:
    """Write every table, comparison and the claims file; return ``{name: path}``. Every caption and
    the claims state ``profile`` (the reproduction profile that produced ``results_csv``). Without
    ``csv`` the comparisons are written as Markdown only. ``studies`` (studies.csv) explains coinciding rows
    in the tables' notes; ``replicates`` (``{name: results}`` of other runs of the protocol) enter the
    claims' verdicts (:mod:`kcal.publish.claims`).

    With ``echo_claims`` the claims summary is also printed, so every command that ends a
    reproduction (``kcal.orchestrate.reproduce``, ``kcal.publish.tables``) shows it."""
    results = load_results(results_csv)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    known = set(REGRESSION + CLASSIFICATION)
    ignored = sorted(set(results["dataset"]) - known)
    if ignored:
        print(
            f"kcal tables: ignoring datasets not in the paper's tables: {', '.join(ignored)}",
            file=sys.stderr,
        )
    flavours = _flavours(results)
    written: dict[str, Path] = {}

    def put(key: str, name: str, text: str) -> None:
        if name.endswith(".tex"):  # every caption states the profile
            text = text.replace("\\caption{", "\\caption{" + _tex_escape(profile_note(profile)) + " ")
        elif name.startswith("comparison") and name.endswith(".md"):
            text = f"*{profile_note(profile)}*\n\n{text}"
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written[key] = path

    for fl in flavours:
        texs = []
        for t in TABLES.values():
            tex = latex_table(results, fl, t, studies)
            texs.append(tex)
            put(f"{t.slug}_{fl}", f"{t.slug}_{fl}.tex", tex)
        put(f"tables_{fl}", f"tables_{fl}.tex", STANDALONE_PREAMBLE + "\n".join(texs) + "\\end{document}\n")
        comp = comparison_frame(results, fl)
        put(f"comparison_{fl}_md", f"comparison_{fl}.md", comparison_markdown(comp, fl))
        if csv:
            put(f"comparison_{fl}_csv", f"comparison_{fl}.csv", comp.to_csv(index=False, float_format="%.6g"))
    put("claims", "claims.md", claims_markdown(results, flavours, profile, replicates))
    if echo_claims:
        print(f"\nClaims (also in {written['claims']}); {profile_note(profile)}")
        for line in claims_summary(results, flavours, profile, replicates):
            print(f"- {line}")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kcal tables", description=__doc__.split("\n")[0])
    p.add_argument("--results", required=True, type=Path, help="tidy aggregated results CSV")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument(
        "--profile", default=None, help="the profile that produced the results (full, quick, smoke)"
    )
    args = p.parse_args(argv)
    written = write_tables(args.results, args.out, echo_claims=False, profile=args.profile)
    print(f"kcal tables: wrote {len(written)} files to {args.out}")
    for name, path in written.items():
        print(f"  {name}: {path}")
    results = load_results(args.results)
    print(f"\nClaims (also in {written['claims']}); {profile_note(args.profile)}")
    for line in claims_summary(results, _flavours(results), args.profile):
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
