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
enters as 0.

Claim verdict: a claim compares rows of one paper table on one metric, per dataset. A dataset
counts towards the denominator only if every row the claim needs has a mean in our results for that
flavour ("k/m datasets run"). "lower"/"higher": the best of the claim's rows is strictly better than
every compared row (a tie does not count). "comparable": not worse than any compared row by more
than 2 combined SE. "every": holds on all m (m >= 1) datasets; "most": on more than half of them.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from kcal.registry import PAPER_DATASETS, RESULT_COLUMNS

FLAVOURS = ("exact", "official")
FLAVOUR_LABEL = {"exact": "exact", "official": "official-compatible"}
FLAVOUR_CAPTION = {
    "exact": "exact metric definitions",
    "official": "official-compatible metrics (the authors' implementation conventions)",
}
REGRESSION, CLASSIFICATION = PAPER_DATASETS["regression"], PAPER_DATASETS["classification"]
SAMPLE_SIZES = (1, 2, 5, 10, 20, 50, 100, 200)
METRIC_ALIASES = {"accuracy": "acc"}
MISSING_TEX = "---"
MISSING_MD = "—"
DECIMALS = 3


# --------------------------------------------------------------------------------------------------
# Table layout as data


@dataclass(frozen=True)
class Metric:
    name: str  # ours (results CSV)
    paper: str  # paper_tables.csv
    header: str  # LaTeX column header
    lower_is_better: bool = True
    scale: float = 1.0  # ours -> displayed (accuracy: fraction -> %)
    short: str = ""  # Table 6 column header


@dataclass(frozen=True)
class Row:
    key: str  # the paper's objective label (paper_tables.csv) or the sample count (Table 6)
    latex: str
    objective: str  # ours
    recalibrator: str = "none"


@dataclass(frozen=True)
class Table:
    name: str  # paper_tables.csv "table" (and "sample_size")
    number: int
    slug: str
    datasets: tuple[str, ...]
    rows: tuple[Row, ...]
    metrics: tuple[Metric, ...]
    caption: str
    means_only: bool = False

    def row(self, key: str) -> Row:
        return next(r for r in self.rows if r.key == key)

    def metric(self, name: str) -> Metric:
        return next(m for m in self.metrics if m.name == name)


NLL = Metric("nll", "nll", r"NLL $\downarrow$", short="NLL")
QCE = Metric("qce", "qce", r"Quantile Cal. $\downarrow$", short="QCE")
DCE = Metric("dce", "dce", r"Decision Cal. $\downarrow$", short="DCE")
ACC = Metric("acc", "accuracy", r"Accuracy $\uparrow$", lower_is_better=False, scale=100.0)
ECE = Metric("ece", "ece", r"ECE $\downarrow$")
ENT = Metric("entropy", "entropy", r"Entropy $\downarrow$")
KCE = Metric("kce", "kce", r"KCE $\downarrow$")


def _classification_rows(recalibrator: str) -> tuple[Row, ...]:
    return (
        Row("XE", "XE", "xe", recalibrator),
        Row("XE + MMCE", "XE + MMCE", "xe_mmce", recalibrator),
        Row("XE + ECE KDE", "XE + ECE KDE", "xe_kde", recalibrator),
        Row("XE + MMD", r"XE + MMD (\emph{Ours})", "xe_mmd", recalibrator),
    )


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table(
            "regression", 3, "table3_regression", REGRESSION,
            (
                Row("NLL", "NLL", "nll", "none"),
                Row("NLL + post-hoc", r"\quad + Post-hoc", "nll", "post-hoc"),
                Row("NLL + MMD", r"NLL + MMD (\emph{Ours})", "nll_mmd", "none"),
                Row("NLL + MMD + post-hoc", r"\quad + Post-hoc", "nll_mmd", "post-hoc"),
            ),
            (NLL, QCE, DCE),
            "Regression: models trained with NLL and NLL + MMD (Ours), test metrics with and without "
            "post-hoc quantile recalibration fit on the validation set (cf.\\ the paper's Table 3).",
        ),
        Table(
            "classification", 4, "table4_classification", CLASSIFICATION, _classification_rows("none"),
            (ACC, ECE, ENT, KCE),
            "Classification without post-hoc recalibration: XE, XE + MMCE, XE + ECE KDE and "
            "XE + MMD (Ours) (cf.\\ the paper's Table 4).",
        ),
        Table(
            "classification_tempscaling", 5, "table5_classification_tempscaling", CLASSIFICATION,
            _classification_rows("post-hoc"), (ACC, ECE, ENT, KCE),
            "Classification with temperature scaling fit on the validation set "
            "(cf.\\ the paper's Table 5).",
        ),
        Table(
            "sample_size", 6, "table6_sample_size", REGRESSION,
            tuple(Row(str(s), str(s), f"nll_mmd@samples={s}", "none") for s in SAMPLE_SIZES),
            (NLL, QCE, DCE),
            "NLL + MMD versus the number of simulated samples per forecast in the plug-in MMD "
            "estimate; means only (cf.\\ the paper's Table 6).",
            means_only=True,
        ),
        Table(
            "decision_kernel", 7, "table7_decision_kernel", REGRESSION,
            (
                Row("NLL + MMD k_Y=rbf", r"$\mathrm{RBF}$", "nll_mmd", "none"),
                Row("NLL + MMD k_Y=tanh", r"$\tanh$", "nll_mmd_tanh", "none"),
            ),
            (NLL, DCE),
            "NLL + MMD with an RBF kernel versus the decision-tailored $\\tanh$ kernel as $k_Y$ "
            "(cf.\\ the paper's Table 7).",
        ),
    )
}  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Inputs


def load_results(path: Path | str) -> pd.DataFrame:
    """Read and validate the seed runner's tidy CSV."""
    return _normalise_results(pd.read_csv(path))


def _normalise_results(results: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in RESULT_COLUMNS if c not in results.columns]
    if missing:
        raise ValueError(f"results lack column(s) {missing}; expected {list(RESULT_COLUMNS)}")
    df = results.loc[:, list(RESULT_COLUMNS)].copy()
    for c in ("dataset", "objective", "recalibrator", "flavour", "metric"):
        df[c] = df[c].astype(str).str.strip()
    df["metric"] = df["metric"].replace(METRIC_ALIASES)
    for c in ("mean", "se", "n"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    key = ["dataset", "objective", "recalibrator", "flavour", "metric"]
    dup = df[df.duplicated(key, keep=False)]
    if len(dup):
        raise ValueError(
            f"results have {len(dup)} duplicated cells, e.g.\n{dup.head(6).to_string(index=False)}"
        )
    return df


def paper_numbers() -> pd.DataFrame:
    return _paper_numbers().copy()


@functools.cache
def _paper_numbers() -> pd.DataFrame:
    """The paper's numbers as ``table, dataset, row, metric, mean, se`` (paper metric names; Table 6
    rows are the sample counts as strings, with se NaN)."""
    pkg = resources.files("kcal.resources")
    with pkg.joinpath("paper_tables.csv").open() as f:
        main = pd.read_csv(f)
    with pkg.joinpath("paper_sample_size.csv").open() as f:
        ss = pd.read_csv(f)
    main = main.rename(columns={"objective": "row"})
    ss = pd.DataFrame({
        "table": "sample_size", "dataset": ss["dataset"], "row": ss["num_samples"].astype(int).astype(str),
        "metric": ss["metric"], "mean": ss["value"].astype(float), "se": np.nan,
    })  # fmt: skip
    return pd.concat([main, ss], ignore_index=True)


def _dataset_info(name: str) -> dict[str, int | None]:
    try:
        from kcal.data import get_spec

        spec = get_spec(name)
        return {"n": int(spec.n_used), "d": int(spec.d), "m": spec.m}
    except Exception:  # an unknown dataset still gets a row, without n/d
        return {"n": None, "d": None, "m": None}


# --------------------------------------------------------------------------------------------------
# The cell frame: ours and the paper's number for every (table, dataset, row, metric)


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def compare_cell(ours_mean: float, ours_se: float, paper_mean: float, paper_se: float) -> dict:
    """Difference, combined SE, 2-SE tolerance and verdict for one cell (see module docstring)."""
    ours_mean, ours_se, paper_mean, paper_se = (
        float("nan") if _nan(v) else float(v) for v in (ours_mean, ours_se, paper_mean, paper_se)
    )
    out = {"diff": np.nan, "combined_se": np.nan, "tolerance": np.nan}
    if math.isnan(ours_mean):
        return {**out, "verdict": "not run"}
    if math.isnan(paper_mean):
        return {**out, "verdict": "no paper value"}
    se_c = math.sqrt(
        (0.0 if math.isnan(ours_se) else ours_se) ** 2 + (0.0 if math.isnan(paper_se) else paper_se) ** 2
    )
    diff = ours_mean - paper_mean
    tol = 2.0 * se_c
    verdict = "within 2 SE" if abs(diff) <= tol + 1e-12 else "differs"
    return {"diff": diff, "combined_se": se_c, "tolerance": tol, "verdict": verdict}


def cell_frame(results: pd.DataFrame, flavour: str, table: Table) -> pd.DataFrame:
    """One row per (dataset, row, metric) of ``table``: ours (display units) next to the paper."""
    res = results[results["flavour"] == flavour]
    ours = {
        (r.dataset, r.objective, r.recalibrator, r.metric): (r.mean, r.se, r.n)
        for r in res.itertuples(index=False)
    }
    paper = _paper_numbers()
    paper = paper[paper["table"] == table.name]
    pap = {(r.dataset, r.row, r.metric): (r.mean, r.se) for r in paper.itertuples(index=False)}
    recs = []
    for ds in table.datasets:
        for row in table.rows:
            for met in table.metrics:
                m, s, n = ours.get((ds, row.objective, row.recalibrator, met.name), (np.nan, np.nan, np.nan))
                pm, ps = pap.get((ds, row.key, met.paper), (np.nan, np.nan))
                m, s = float(m) * met.scale, float(s) * met.scale
                s_p = np.nan if table.means_only else ps
                recs.append({
                    "flavour": flavour, "table": table.name, "paper_table": table.number, "dataset": ds,
                    "row": row.key, "objective": row.objective, "recalibrator": row.recalibrator,
                    "metric": met.name, "ours_mean": m, "ours_se": s, "ours_n": n,
                    "paper_mean": pm, "paper_se": s_p,
                    **compare_cell(m, s, pm, s_p),
                })  # fmt: skip
    return pd.DataFrame.from_records(recs)


def comparison_frame(results: pd.DataFrame, flavour: str) -> pd.DataFrame:
    results = _normalise_results(results)
    return pd.concat([cell_frame(results, flavour, t) for t in TABLES.values()], ignore_index=True)


# --------------------------------------------------------------------------------------------------
# Formatting


def fmt(x: float, decimals: int = DECIMALS) -> str:
    s = f"{x:.{decimals}f}"
    return s[1:] if s.startswith("-") and float(s) == 0.0 else s  # no "-0.000"


def best_mask(values: Sequence[float], lower_is_better: bool, decimals: int = DECIMALS) -> list[bool]:
    """True for every entry whose printed mean ties the best printed mean (NaN never bold)."""
    printed = [np.nan if _nan(v) or math.isnan(v) else float(fmt(v, decimals)) for v in values]
    finite = [p for p in printed if not math.isnan(p)]
    if not finite:
        return [False] * len(values)
    best = min(finite) if lower_is_better else max(finite)
    return [(not math.isnan(p)) and p == best for p in printed]


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
    ns = sorted({int(n) for n in cells["ours_n"] if not _nan(n) and not math.isnan(n)})
    if not ns:
        return "no results of ours"
    return f"{ns[0]} seeds" if len(ns) == 1 else f"{ns[0]}--{ns[-1]} seeds"


def _dataset_tex(ds: str, table: Table, inline: bool = False) -> str:
    info = _dataset_info(ds)
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
    parts.append(f"{MISSING_TEX} marks a cell not run")
    if table.name != "sample_size":
        parts.append(
            "$n$ is the number of examples we use, $d$ the number of features"
            + (", $m$ the number of classes" if classification else "")
        )
    return (
        "; ".join(parts) + ". Bold: best per column within a dataset, ties at the printed precision included."
    )


def _block_table_tex(table: Table, flavour: str, cells: pd.DataFrame) -> str:
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
        f"\\begin{{tabular}}{{{colspec}}}", "\\toprule", header, "\\midrule",
    ]  # fmt: skip
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
    lines += ["\\end{tabular}", "\\end{table}"]
    return "\n".join(lines) + "\n"


def _sample_size_tex(table: Table, flavour: str, cells: pd.DataFrame, per_tabular: int = 3) -> str:
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
        if chunk is not chunks[-1]:
            lines.append("")
    lines.append("\\end{table}")
    return "\n".join(lines) + "\n"


def latex_table(results: pd.DataFrame, flavour: str, table: Table | str) -> str:
    table = TABLES[table] if isinstance(table, str) else table
    cells = cell_frame(_normalise_results(results), flavour, table)
    return (
        _sample_size_tex(table, flavour, cells)
        if table.name == "sample_size"
        else _block_table_tex(table, flavour, cells)
    )


STANDALONE_PREAMBLE = r"""\documentclass{article}
\usepackage[T1]{fontenc}
\usepackage[margin=2cm]{geometry}
\usepackage{booktabs}
\usepackage{multirow}
\begin{document}
"""


# --------------------------------------------------------------------------------------------------
# Markdown / CSV comparison


def _md_num(x: float, signed: bool = False) -> str:
    if _nan(x) or math.isnan(x):
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
        "no number for that cell. The paper's SEs are printed to 3 decimals, so its 0.000 enters as 0.",
        "",
    ]
    for t in TABLES.values():
        sub = comp[comp["table"] == t.name]
        counts = sub["verdict"].value_counts()
        summary = ", ".join(
            f"{v}: {int(counts.get(v, 0))}" for v in ("within 2 SE", "differs", "not run", "no paper value")
        )
        out += [f"## Table {t.number} — {t.name}", "", summary, "",
                "| dataset | row | metric | ours | ours SE | n | paper | paper SE | diff | verdict |",
                "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
        for r in sub.itertuples(index=False):
            n = MISSING_MD if _nan(r.ours_n) or math.isnan(r.ours_n) else str(int(r.ours_n))
            out.append(
                f"| {r.dataset} | {r.row} | {t.metric(r.metric).paper} | {_md_num(r.ours_mean)} | {_md_num(r.ours_se)} "
                f"| {n} | {_md_num(r.paper_mean)} | {_md_num(r.paper_se)} | {_md_num(r.diff, signed=True)} | {r.verdict} |"
            )
        out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# Claims


@dataclass(frozen=True)
class Claim:
    id: str
    description: str
    table: str  # a key of TABLES
    metric: str  # ours metric name
    ours: tuple[str, ...]  # row keys; the best of them is compared
    others: tuple[str, ...]  # row keys that must each be beaten (or matched, for "comparable")
    direction: str  # "lower" | "higher" | "comparable" (not worse by > 2 combined SE)
    quantifier: str  # "every" | "most"
    source: str = ""


CLAIMS: tuple[Claim, ...] = (
    Claim("R1", "NLL + MMD has lower QCE than NLL on every regression dataset", "regression", "qce",
          ("NLL + MMD",), ("NLL",), "lower", "every", "§6 Results"),
    Claim("R2", "NLL + MMD has comparable or better NLL than NLL (not worse by > 2 combined SE) on every "
          "regression dataset", "regression", "nll", ("NLL + MMD",), ("NLL",), "comparable", "every", "§6 Results"),
    Claim("R3", "with post-hoc recalibration, NLL + MMD has lower NLL than NLL (smaller sharpness penalty) "
          "on most regression datasets", "regression", "nll", ("NLL + MMD + post-hoc",), ("NLL + post-hoc",),
          "lower", "most", "§6 Results"),
    Claim("R4", "NLL + MMD + post-hoc has the best QCE of the four Table 3 rows on most regression datasets",
          "regression", "qce", ("NLL + MMD + post-hoc",), ("NLL", "NLL + post-hoc", "NLL + MMD"), "lower", "most",
          "§6 Results"),
    Claim("R5", "NLL + MMD (with or without post-hoc) has the best DCE in Table 3 on every regression dataset",
          "regression", "dce", ("NLL + MMD", "NLL + MMD + post-hoc"), ("NLL", "NLL + post-hoc"), "lower", "every",
          "§6.3 Results"),
    Claim("C1", "XE + MMD has higher accuracy than XE + MMCE and XE + ECE KDE on every classification dataset",
          "classification", "acc", ("XE + MMD",), ("XE + MMCE", "XE + ECE KDE"), "higher", "every", "§6 Results"),
    Claim("C2", "XE + MMD has lower ECE than XE, XE + MMCE and XE + ECE KDE on every classification dataset",
          "classification", "ece", ("XE + MMD",), ("XE", "XE + MMCE", "XE + ECE KDE"), "lower", "every",
          "§6 Results"),
    Claim("C3", "XE + MMD has lower entropy than XE, XE + MMCE and XE + ECE KDE on every classification dataset",
          "classification", "entropy", ("XE + MMD",), ("XE", "XE + MMCE", "XE + ECE KDE"), "lower", "every",
          "§6 Results"),
    Claim("C4a", "with temperature scaling, XE + MMD has lower ECE than all baselines on most classification "
          "datasets", "classification_tempscaling", "ece", ("XE + MMD",), ("XE", "XE + MMCE", "XE + ECE KDE"),
          "lower", "most", "§6 Results, Table 5"),
    Claim("C4b", "with temperature scaling, XE + MMD has higher accuracy than all baselines on most "
          "classification datasets", "classification_tempscaling", "acc", ("XE + MMD",),
          ("XE", "XE + MMCE", "XE + ECE KDE"), "higher", "most", "§6 Results, Table 5"),
    Claim("D1", "the tanh kernel k_Y gives lower DCE than the RBF kernel on every regression dataset",
          "decision_kernel", "dce", ("NLL + MMD k_Y=tanh",), ("NLL + MMD k_Y=rbf",), "lower", "every",
          "§6.3 Results, Appendix B"),
)  # fmt: skip


@dataclass
class ClaimResult:
    claim: Claim
    source: str  # a flavour or "paper"
    per_dataset: dict[str, bool] = field(default_factory=dict)  # datasets run -> holds there
    detail: dict[str, str] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return sum(self.per_dataset.values())

    @property
    def m(self) -> int:
        return len(self.per_dataset)

    @property
    def supported(self) -> bool | None:
        if self.m == 0:
            return None
        return self.k == self.m if self.claim.quantifier == "every" else self.k > self.m / 2

    def phrase(self) -> str:
        if self.m == 0:
            return "0 datasets run → not evaluated"
        word = {True: "supported", False: "not supported"}[self.supported]
        run = "datasets" if self.source == "paper" else "datasets run"
        return f"holds on {self.k}/{self.m} {run} → {word}"


def evaluate_claim(claim: Claim, cells: pd.DataFrame, source: str, use_paper: bool = False) -> ClaimResult:
    """Evaluate ``claim`` on the cell frame of its table (ours, or the paper's numbers)."""
    table = TABLES[claim.table]
    met = table.metric(claim.metric)
    mcol, scol = ("paper_mean", "paper_se") if use_paper else ("ours_mean", "ours_se")
    sub = cells[(cells["table"] == claim.table) & (cells["metric"] == claim.metric)]
    idx = sub.set_index(["dataset", "row"])
    out = ClaimResult(claim, source)
    sign = 1.0 if met.lower_is_better else -1.0  # compare sign*value: lower is better
    for ds in table.datasets:
        try:
            vals = {
                r: (float(idx.loc[(ds, r), mcol]), float(idx.loc[(ds, r), scol]))
                for r in claim.ours + claim.others
            }
        except KeyError:
            continue
        if any(math.isnan(v[0]) for v in vals.values()):
            continue
        best_key = min(claim.ours, key=lambda r: sign * vals[r][0])
        bm, bs = vals[best_key]
        ok = True
        for o in claim.others:
            om, os_ = vals[o]
            if claim.direction == "comparable":
                se_c = math.sqrt((0 if math.isnan(bs) else bs) ** 2 + (0 if math.isnan(os_) else os_) ** 2)
                ok &= sign * (bm - om) <= 2 * se_c + 1e-12
            else:
                ok &= sign * bm < sign * om
        out.per_dataset[ds] = bool(ok)
        out.detail[ds] = f"{best_key} {fmt(bm)} vs " + ", ".join(
            f"{o} {fmt(vals[o][0])}" for o in claim.others
        )
    return out


def _claim_results(
    results: pd.DataFrame, flavours: Iterable[str]
) -> list[tuple[Claim, dict[str, ClaimResult]]]:
    results = _normalise_results(results)
    frames = {
        fl: {t: cell_frame(results, fl, TABLES[t]) for t in {c.table for c in CLAIMS}} for fl in flavours
    }
    paper_cells = (
        next(iter(frames.values()))
        if frames
        else {t: cell_frame(results, "exact", TABLES[t]) for t in {c.table for c in CLAIMS}}
    )
    out = []
    for c in CLAIMS:
        per = {fl: evaluate_claim(c, frames[fl][c.table], fl) for fl in frames}
        per["paper"] = evaluate_claim(c, paper_cells[c.table], "paper", use_paper=True)
        out.append((c, per))
    return out


def _claim_line(c: Claim, per: dict[str, ClaimResult]) -> str:
    parts = [f"{FLAVOUR_LABEL.get(s, s)}: {r.phrase()}" for s, r in per.items() if s != "paper"]
    parts.append(f"paper's own numbers: {per['paper'].phrase()}")
    quant = "every dataset" if c.quantifier == "every" else "most datasets"
    return f"{c.id} ({quant}) {c.description} — " + "; ".join(parts)


def profile_note(profile: str | None) -> str:
    """Which profile produced the results; a profile other than ``full`` is marked as not evidence."""
    if profile is None:
        return "Profile: not recorded (only profile=full follows the paper's protocol)."
    if profile == "full":
        return "Profile: full (the paper's protocol)."
    return (f"Profile: {profile}, a reduced run (fewer trials, seeds or epochs than the paper): its numbers and "
            "verdicts are NOT evidence for or against the paper's claims.")  # fmt: skip


def verdict_mark(profile: str | None) -> str:
    """Prefix of each verdict of a reduced profile (none for ``full`` or an unrecorded one)."""
    return "" if profile in ("full", None) else f"[profile {profile}: not evidence] "


def claims_summary(
    results: pd.DataFrame, flavours: Sequence[str] = FLAVOURS, profile: str | None = None
) -> list[str]:
    """One line per claim of the paper's text with its verdict under each flavour (and on the paper's
    own numbers), e.g. ``R1 (every dataset) NLL + MMD has lower QCE than NLL on every regression
    dataset — exact: holds on 2/2 datasets run → supported; official-compatible: ...``."""
    return [verdict_mark(profile) + _claim_line(c, per) for c, per in _claim_results(results, flavours)]


def claims_markdown(
    results: pd.DataFrame, flavours: Sequence[str] = FLAVOURS, profile: str | None = None
) -> str:
    evaluated = _claim_results(results, flavours)
    out = [
        "# The paper's claims, checked against our results",
        "",
        f"**{profile_note(profile)}**",
        "",
        "Each claim compares rows of one table on one metric, per dataset. A dataset counts (denominator "
        'm, "datasets run") only if every row the claim needs has a result of ours in that flavour. '
        "*lower/higher*: the best of the claim's rows is strictly better than every compared row (ties do "
        "not count); *comparable*: not worse than a compared row by more than 2·sqrt(se₁² + se₂²). "
        '*every*: holds on all m ≥ 1 datasets run; *most*: on more than half. "paper\'s own numbers" '
        "applies the same test to the paper's printed numbers (all 5 datasets), as a check of the encoding.",
        "",
    ]
    out += [f"- {verdict_mark(profile)}{_claim_line(c, per)}" for c, per in evaluated]
    out += [
        "",
        "## Per dataset",
        "",
        "| claim | source | dataset | holds | values |",
        "|---|---|---|---|---|",
    ]
    for c, per in evaluated:
        for src, r in per.items():
            for ds, ok in r.per_dataset.items():
                out.append(
                    f"| {c.id} | {FLAVOUR_LABEL.get(src, src)} | {ds} | {'yes' if ok else 'no'} | {r.detail[ds]} |"
                )
    out += ["", "## Claim definitions", "", "| id | table | metric | rows | compared with | direction | quantifier | paper |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in CLAIMS:
        out.append(f"| {c.id} | {TABLES[c.table].number} ({c.table}) | {c.metric} | {' / '.join(c.ours)} | "
                   f"{', '.join(c.others)} | {c.direction} | {c.quantifier} | {c.source} |")  # fmt: skip
    return "\n".join(out) + "\n"


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
) -> dict[str, Path]:
    """Write every table, comparison and the claims file; return ``{name: path}``. Every caption and
    the claims state ``profile`` (the reproduction profile that produced ``results_csv``). Without
    ``csv`` the comparisons are written as Markdown only.

    With ``echo_claims`` the claims summary is also printed, so every command that ends a
    reproduction (``kcal.reproduce``, ``kcal.tables``) shows it."""
    results = load_results(results_csv)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    known = set(REGRESSION + CLASSIFICATION)
    ignored = sorted(set(results["dataset"]) - known)
    if ignored:
        print(
            f"kcal.tables: ignoring datasets not in the paper's tables: {', '.join(ignored)}", file=sys.stderr
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
            tex = latex_table(results, fl, t)
            texs.append(tex)
            put(f"{t.slug}_{fl}", f"{t.slug}_{fl}.tex", tex)
        put(f"tables_{fl}", f"tables_{fl}.tex", STANDALONE_PREAMBLE + "\n".join(texs) + "\\end{document}\n")
        comp = comparison_frame(results, fl)
        put(f"comparison_{fl}_md", f"comparison_{fl}.md", comparison_markdown(comp, fl))
        if csv:
            put(f"comparison_{fl}_csv", f"comparison_{fl}.csv", comp.to_csv(index=False, float_format="%.6g"))
    put("claims", "claims.md", claims_markdown(results, flavours, profile))
    if echo_claims:
        print(f"\nClaims (also in {written['claims']}); {profile_note(profile)}")
        for line in claims_summary(results, flavours, profile):
            print(f"- {line}")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kcal.tables", description=__doc__.split("\n")[0])
    p.add_argument("--results", required=True, type=Path, help="tidy aggregated results CSV")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument(
        "--profile", default=None, help="the profile that produced the results (full, quick, smoke)"
    )
    args = p.parse_args(argv)
    written = write_tables(args.results, args.out, echo_claims=False, profile=args.profile)
    print(f"kcal.tables: wrote {len(written)} files to {args.out}")
    for name, path in written.items():
        print(f"  {name}: {path}")
    results = load_results(args.results)
    print(f"\nClaims (also in {written['claims']}); {profile_note(args.profile)}")
    for line in claims_summary(results, _flavours(results), args.profile):
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
