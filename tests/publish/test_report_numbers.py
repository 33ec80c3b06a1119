"""No hand-typed number goes stale: every number in the prose of the published report occurs in the published data.

What is checked: ``docs/results/full/RESULTS.md`` and the README's results summary (its section *What
reproduces*), outside their generated blocks (``<!-- kcal.report:NAME -->`` .. ``<!-- /kcal.report -->``, which
``kcal report --check`` checks), fenced code blocks, inline code spans, HTML comments and link targets.

**What counts as a number** (:func:`prose_numbers`):

* digits with an optional decimal part and exponent (``0.0127``, ``1.2e-5``, ``13,611`` with thousands commas),
  optionally followed by ``%``; the sign is not part of it (a ``-``/``−``, a ``+``, an ``x``/``×`` before it),
  values are compared by magnitude;
* digits glued to a letter or an underscore on either side are a name, not a number (``R1``, ``C4a``,
  ``float32``, ``k_Y``, ``7d54acb``), except a trailing ``x``/``×`` (``8.8x``, a multiple);
* a count written as a word, ``two`` to ``twelve`` (``the four classification datasets``);
* not numbers: ISO dates and clock times (when something ran), and references to the paper's parts (``Table 3``,
  ``Tables 3, 6 and 7``, ``Figures 3 and 4``, ``§6.2``, ``Appendix B``).

A number is of one of these kinds: a *trial number* (after ``trial``/``trials``), an *SE multiple* (before
``SE``, ``SEs``, ``seed SE``, ``combined SE``, ``x the seed SE``), a *difference* (after ``by`` or ``+``, or before
``points``), a *percentage* (before ``%`` or ``points``: a published accuracy in %, not one trial's), a *count* (no decimal point), else a
*value*. The first number of a range or pair (``1.2–1.8 combined SE``, ``1.2 and 1.7 SE``) is read with what
follows the range.

**Where it must occur** (:func:`published_data`): the published data of the ``full`` profile, by kind:

* a value or percentage: a mean or SE of ``results.csv`` or of the paper's tables (``paper_tables.csv``,
  ``paper_sample_size.csv``), a number of a selected trial's parameters (``studies.csv``), a number of the report's
  generated documents (``claims.md``, ``protocol_spread.md``, ``comparison_*.md``, ``report.json``, the ``.tex``
  tables); and, where its paragraph or headings say so (:data:`CONTEXTS`), of the replicates' results
  (``replicat``, ``runs of the protocol``, ...), the experiments', ablations' and regularisation paths'
  (``experiment``, ``former``, ``λ``, ...), the trials tables (``trial``), the Pareto fronts (``Pareto``, ``front``);
* a count: an integer of that data (seeds, the datasets' registry: rows, features, classes; Table 6's sample
  sizes; the parameters where the paragraph names one; a study's trial counts where it says ``trial``; the
  integers of a generated document's line that names a dataset), or an allowed constant (:data:`ALLOWED`);
* a trial number: a selected trial (``studies.csv``) or a kept trial (the trials tables);
* an SE multiple or a difference: as a value, or derived from two cells of one dataset and metric (two rows of
  one file, the published cell against another file's same cell, or ours against the paper's): their
  difference, or their difference over the combined SE ``sqrt(se1^2 + se2^2)`` or over either SE.

**Scope** (:class:`Number`): a number is looked up among the values of the datasets named in its sentence (else
in its paragraph) and in its headings, else of every dataset; of the metrics named in its paragraph (a list
item, a table), else in its headings, else of every metric; and of the classification rows (``XE``, ``XE + MMCE``,
``XE + ECE-KDE``, ``XE + MMD``) named in its paragraph, else in its headings, else of every row. A percentage is an accuracy. Values that belong to no
dataset, metric or row (a trial's parameters, a generated document's line without names) count for every one.

**To its printed digits** (:func:`occurs`): some value rounds to it at the printed precision, within half a unit
of its last printed digit (``0.0127``: 5e-5; ``1.2e-5``: 5e-7); accuracy values count as fractions and in %; a
count must equal an integer of the data.

**Allowed constants** (:data:`ALLOWED`, each with its reason): conventions of the protocol and the paper that no
data file holds as a value. Every entry must be used (an unused one is removed).
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kcal.data.registry import get_spec
from kcal.publish.report import GENERATED, data_dir, report_info
from kcal.publish.table_cells import FLAVOURS, comparison_frame, normalise_results

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "docs" / "results" / "full"
README_SECTION = "## What reproduces"

ALLOWED: dict[float, str] = {
    2: "the verdicts' multiple (within 2 SE)",
    8: "the authors' evaluation batches of 8 test rows (their per-batch ECE and DCE)",
    10: "the x-bandwidth of the authors' KCE kernel for XE + MMD (their configs)",
}
"""Constants a sentence may use without a data file holding them, each with its reason."""

WORDS = {w: i for i, w in enumerate("two three four five six seven eight nine ten eleven twelve".split(), 2)}
METRICS = {
    "acc": r"accura|\bacc\b", "ece": r"\bECE\b", "classwise_ece": r"classwise", "kce": r"\bKCE\b",
    "entropy": r"entrop|\bsharp(?:er|est)?\b", "nll": r"\bNLL\b", "qce": r"\bQCE\b", "dce": r"\bDCE\b",
    "crps": r"\bCRPS\b", "temperature": r"temperature", "sharpness": r"sharpness",
}  # fmt: skip
ROWS = {  # matched in this order; a match is removed before the next pattern is tried
    "xe_mmce": r"XE\s*\+\s*MMCE|\bMMCE\b", "xe_kde": r"(?:XE\s*\+\s*)?(?:ECE[- ])?KDE\b",
    "xe_mmd": r"XE\s*\+\s*MMD", "xe": r"\bXE\b",
}  # fmt: skip
"""The classification rows, by name; the regression rows are not told apart (their names are also a metric's)."""
CONTEXTS = {
    "replicates": r"replicat|runs? of the protocol|sampler|protocol's (?:own )?spread|sweeps?\b",
    "experiments": r"experiment|former|median_x|authors_first|first search space|kept on|retrain",
    "ablations": r"experiment|ablation|λ|weight|regularisation path|trade-off",
    "trials": r"\btrials?\b",
    "fronts": r"pareto|front",
    "parameters": r"λ|weight|width|batch|bandwidth|learning rate",
}
"""Pools of values a number may come from only where its paragraph or headings match the pattern."""

NUMBER = re.compile(
    r"(?<![\w.])(?P<num>\d{1,3}(?:,\d{3})+(?![\d.])|\d+(?:\.\d+)?(?:e[-+−]?\d+)?)(?P<pct>\s?%)?(?![A-Za-wyz_\d])"
)
WORD = re.compile(r"\b(" + "|".join(WORDS) + r")\s+[a-z]", re.I)
REFERENCE = re.compile(
    r"\b(?:Tables?|Figures?)\s+\d{1,2}(?:(?:,\s*|\s+and\s+|\s*[-–]\s*)\d{1,2}(?!\d|\.\d))*(?!\d|\.\d)"
    r"|(?:§|\bSections?\s+)\s*\d+(?:\.\d+)*|\bAppendix\s+[A-Z](?:\.\d+)*"
)
DATE_TIME = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}(?::\d{2})?\b")
RANGE_END = re.compile(r"^\s*(?:[–-]|\band\b|\bor\b)\s*[\d.]+(?:e[-+]?\d+)?")
SE_AFTER = re.compile(
    r"^\s*(?:x|×|times)?\s*(?:the\s+)?(?:(?:its|our|published)\s+)?(?:combined\s+|seed\s+)?SEs?\b"
)
DIFF_BEFORE = re.compile(r"(?:\bby\s+(?:about\s+|a\s+median\s+|up\s+to\s+)?|\+)$")
POINTS_AFTER = re.compile(r"^\s*(?:%\s*)?points\b")
TRIAL_BEFORE = re.compile(r"\btrials?\s*\(?\s*(?:\d+(?:,\s*|\s+and\s+))*$")


# ---- prose -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Number:
    text: str  # as printed
    value: float  # its magnitude
    tolerance: float  # half a unit of its last printed digit (0 for a count)
    kind: str  # "value" | "percent" | "count" | "trial" | "se" | "diff"
    datasets: frozenset[str]  # empty: every dataset
    metrics: frozenset[str]  # empty: every metric
    rows: frozenset[str]  # empty: every row
    contexts: frozenset[str]  # the extra pools its paragraph and headings allow
    where: str  # the line it is on, for the failure message


def parse(text: str) -> tuple[float, float]:
    """(magnitude, half a unit of the last printed digit) of a number as printed."""
    text = text.replace(",", "").replace("−", "-")
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    scale = 10.0 ** int(exponent) if exponent else 1.0
    return abs(float(mantissa)) * scale, 0.5 * 10.0**-decimals * scale if "." in mantissa or exponent else 0.0


def prose(text: str) -> str:
    """``text`` without generated blocks, code, comments, link targets, references to the paper's parts, dates and
    times (each replaced by blanks, so lines keep their places)."""

    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    text = GENERATED.sub(blank, text)
    text = re.sub(r"```.*?```", blank, text, flags=re.S)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", blank, text)
    text = re.sub(r"\]\([^)]*\)", blank, text)
    text = REFERENCE.sub(blank, text)
    return DATE_TIME.sub(blank, text)


def datasets_in(text: str, datasets: Iterable[str]) -> set[str]:
    return {d for d in datasets if re.search(rf"(?<![\w-]){re.escape(d)}(?![\w-])", text)}


def metrics_in(text: str) -> set[str]:
    return {m for m, pattern in METRICS.items() if re.search(pattern, text, re.I)}


def rows_in(text: str) -> set[str]:
    found = set()
    for row, pattern in ROWS.items():
        text, n = re.subn(pattern, " ", text)
        if n:
            found.add(row)
    return found


def contexts_in(text: str) -> set[str]:
    return {name for name, pattern in CONTEXTS.items() if re.search(pattern, text, re.I)}


def paragraphs(text: str) -> Iterator[tuple[list[str], int, str]]:
    """``(headings above, first line number, paragraph)`` for every paragraph of ``text`` (blank-line separated; a
    list item starts a paragraph of its own; a heading is a paragraph too)."""
    headings: list[str] = []
    start, chunk = 0, []
    for i, line in enumerate([*text.split("\n"), ""]):
        new_item = re.match(r"\s*[*-] ", line) is not None and chunk
        if not line.strip() or new_item or line.startswith("#"):
            if chunk:
                yield list(headings), start, "\n".join(chunk)
            chunk = []
            if line.startswith("#"):
                level = len(line) - len(line.lstrip("#"))
                headings = [h for h in headings if len(h) - len(h.lstrip("#")) < level] + [line]
                yield list(headings), i, line
                continue
        if line.strip():
            start = i if not chunk else start
            chunk.append(line)


def sentences(paragraph: str) -> list[str]:
    """A paragraph's sentences (a table's rows count as sentences)."""
    return re.split(r"(?<=[.;!?])\s+(?=[A-Z*(])|\n(?=\|)", paragraph)


def kind_of(sentence: str, m: re.Match, tolerance: float) -> str:
    before, after = sentence[: m.start()], RANGE_END.sub("", sentence[m.end() :], count=1)
    if TRIAL_BEFORE.search(before):
        return "trial"
    if SE_AFTER.match(after):
        return "se"
    if DIFF_BEFORE.search(before) or POINTS_AFTER.match(after):
        return "diff"
    if m.group("pct"):
        return "percent"
    return "value" if tolerance else "count"


def prose_numbers(text: str, datasets: Iterable[str]) -> list[Number]:
    """Every number of the prose of ``text`` with its kind and scope (module docstring)."""
    datasets = list(datasets)
    original = text.split("\n")
    out = []
    for headings, start, para in paragraphs(prose(text)):
        heading = " ".join(headings)
        head_ds, para_ds = datasets_in(heading, datasets), datasets_in(para, datasets)
        metrics = frozenset(metrics_in(para) or metrics_in(heading))
        context = frozenset(contexts_in(para + " " + heading))
        rows = frozenset(rows_in(para) or rows_in(heading))
        for sentence in sentences(para):
            ds = frozenset((datasets_in(sentence, datasets) or para_ds) | head_ds)
            first = next((k for k, ln in enumerate(para.split("\n")) if sentence.strip()[:40] in ln), 0)
            where = original[start + first].strip()
            for m in NUMBER.finditer(sentence):
                value, tol = parse(m.group("num"))
                kind = kind_of(sentence, m, tol)
                tol = 0.5 if kind not in ("count", "trial") and not tol else tol  # a whole number, rounded
                out.append(Number(m.group(0).strip(), value, tol, kind, ds, metrics, rows, context, where))
            for m in WORD.finditer(sentence):
                value = float(WORDS[m.group(1).lower()])
                out.append(Number(m.group(1), value, 0.0, "count", ds, metrics, rows, context, where))
    return out


# ---- the published data --------------------------------------------------------------------------------------
ANY = "*"


@dataclass
class Pool:
    """Magnitudes by (dataset, metric, row) scope; ``*`` for a value of every dataset, of no metric or no row."""

    values: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)

    def add(self, values: Iterable, dataset: str = ANY, metric: str = ANY, row: str = ANY) -> None:
        finite = [abs(float(v)) for v in values if not _nan(v)]
        self.values.setdefault((dataset or ANY, metric or ANY, row or ANY), []).extend(finite)

    def freeze(self) -> Pool:
        self.values = {k: sorted(set(v)) for k, v in self.values.items()}
        return self

    def scoped(self, number: Number, metrics: frozenset[str] | None = None) -> Iterator[list[float]]:
        metrics = number.metrics if metrics is None else metrics
        for (d, m, r), values in self.values.items():
            if ((not number.datasets or d == ANY or d in number.datasets) and (not metrics or m == ANY or m in metrics)
                    and (not number.rows or r == ANY or r in number.rows)):  # fmt: skip
                yield values


def _nan(v) -> bool:
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return True


def near(values: list[float], x: float, tol: float) -> bool:
    slack = 1e-9 * max(1.0, x)
    i = bisect.bisect_left(values, x - tol - slack)
    return i < len(values) and values[i] <= x + tol + slack


CELL = ["dataset", "objective", "recalibrator", "flavour", "metric"]


def row_key(objective: str) -> str:
    """The row of a results objective: a classification row by name (:data:`ROWS`), any other ``*``."""
    base = objective.split("@")[0]
    return base if base in ROWS else ANY


def cell_rows(path: Path) -> pd.DataFrame:
    """A results-like CSV (results, replicate, experiment, ablation, regularisation path); an ablation's varied
    value (a path's weight λ) joins its row."""
    frame = pd.read_csv(path)
    frame["row"] = frame["objective"].map(row_key)
    varied = "value" if "value" in frame.columns else "weight" if "weight" in frame.columns else None
    if varied:
        frame["objective"] = frame["objective"] + "@" + frame[varied].astype(str)
        frame["value"] = frame[varied]
    return frame


def add_cells(pool: Pool, frame: pd.DataFrame) -> None:
    for (dataset, metric, row), g in frame.groupby(["dataset", "metric", "row"]):
        values = [*g["mean"], *g["se"]]
        pool.add([*values, *(100 * v for v in values)] if metric == "acc" else values, dataset, metric, row)


def add_pair_values(se: Pool, diff: Pool, both: pd.DataFrame) -> None:
    """Differences and SE multiples of the pairs of cells in ``both`` (``mean_a``, ``se_a``, ``row_a``, ``mean_b``,
    ...), filed under either row."""
    for (dataset, metric, row_a, row_b), g in both.groupby(["dataset", "metric", "row_a", "row_b"]):
        d = (g["mean_a"] - g["mean_b"]).abs().to_numpy(dtype=float)
        sa, sb = g["se_a"].abs().to_numpy(dtype=float), g["se_b"].fillna(0.0).abs().to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            multiples = [*(d / np.hypot(sa, sb)), *(d / sa), *(d / sb)]
        for row in {row_a, row_b}:
            se.add(multiples, dataset, metric, row)
            diff.add([*d, *(100 * d)] if metric == "acc" else d, dataset, metric, row)


def add_pairs(se: Pool, diff: Pool, published: pd.DataFrame, others: list[pd.DataFrame]) -> None:
    """SE multiples and differences of two cells of one dataset and metric: two rows of one file, the published
    cell against another file's same cell, ours against the paper's."""
    for frame in [published, *others]:
        rows = frame.reset_index(drop=True).assign(index=lambda f: np.arange(len(f)))
        both = rows.merge(rows, on=["dataset", "flavour", "metric"], suffixes=("_a", "_b"))
        add_pair_values(se, diff, both[both["index_a"] < both["index_b"]])
    for frame in others:
        add_pair_values(se, diff, published.merge(frame, on=CELL, suffixes=("_a", "_b")))
    for flavour in FLAVOURS:
        comp = comparison_frame(published, flavour).dropna(subset=["ours_mean", "paper_mean"])
        comp = comp.assign(row_a=comp["objective"].map(row_key), row_b=comp["objective"].map(row_key))
        add_pair_values(se, diff, comp.rename(columns={"ours_mean": "mean_a", "ours_se": "se_a",
                                                       "paper_mean": "mean_b", "paper_se": "se_b"}))  # fmt: skip


def numbers_of(text: str) -> list[float]:
    return [parse(m.group("num"))[0] for m in NUMBER.finditer(text.replace("−", "-"))]


def leaves(tree) -> Iterator[float]:
    if isinstance(tree, dict):
        for v in tree.values():
            yield from leaves(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from leaves(v)
    elif isinstance(tree, int | float) and not isinstance(tree, bool):
        yield float(tree)


def integers(values: Iterable) -> set[int]:
    return {int(float(v)) for v in values if not _nan(v) and float(v) == int(float(v))}


PAPER_ROWS = {"XE": "xe", "XE + MMCE": "xe_mmce", "XE + ECE KDE": "xe_kde", "XE + MMD": "xe_mmd"}


@dataclass
class Published:
    """The published data of a report, as pools of values (module docstring)."""

    values: Pool  # values and percentages, always
    extra: dict[str, Pool]  # by context name
    se: Pool
    diff: Pool
    counts: dict[str, set[int]]  # dataset (or *) -> integers, always
    extra_counts: dict[str, dict[str, set[int]]]  # context name -> dataset -> integers
    trials: dict[str, set[int]]  # dataset -> trial numbers
    datasets: tuple[str, ...]

    def pools(self, number: Number) -> list[Pool]:
        pools = [self.values, *(self.extra[c] for c in number.contexts if c in self.extra)]
        return (
            pools
            + ([self.se] if number.kind == "se" else [])
            + ([self.diff] if number.kind == "diff" else [])
        )


LATEX_LAYOUT = re.compile(r"\\(?:multirow|fontsize|begin|end|cmidrule|resizebox|setlength)\S*")
"""LaTeX commands whose numbers are layout (``\\multirow{4}``), not results."""
REPLICATED_DOCUMENTS = ("protocol_spread.md",)
"""Generated documents whose numbers are the replicates' (they count where the replicates' results count)."""


def generated_lines(
    report: Path, datasets: Iterable[str], names: Iterable[str]
) -> Iterator[tuple[str, str, str, float]]:
    """``(dataset, metric, row, value)`` (``*`` where the line names none or several) of every number of the
    report's generated documents ``names`` (globs); a ``.tex`` line belongs to the last dataset named above it."""
    datasets = list(datasets)
    for path in sorted({p for name in names for p in report.glob(name)}):
        current: set[str] = set()
        for line in path.read_text(encoding="utf-8").splitlines():
            ds = datasets_in(line, datasets)
            met = metrics_in(line) | {m for m in METRICS if re.search(rf"\|\s*{m}\s*\|", line)}
            rows = rows_in(line)
            if path.suffix == ".tex":
                current = ds or (set() if "rule" in line else current)
                ds = current
                line = LATEX_LAYOUT.sub(" ", line)
            for value in numbers_of(line):
                for d in ds or {ANY}:
                    yield d, next(iter(met)) if len(met) == 1 else ANY, next(iter(rows)) if len(rows) == 1 else ANY, \
                        value  # fmt: skip


def published_data(report: Path = REPORT) -> Published:
    profile, data = report_info(report)
    assert data == data_dir(profile).resolve()
    values, se, diff = Pool(), Pool(), Pool()
    extra = {name: Pool() for name in CONTEXTS}
    counts: dict[str, set[int]] = {}
    extra_counts: dict[str, dict[str, set[int]]] = {name: {} for name in CONTEXTS}
    trials: dict[str, set[int]] = {}

    def count(target: dict[str, set[int]], dataset: str, numbers: Iterable) -> None:
        target.setdefault(dataset or ANY, set()).update(integers(numbers))

    results = normalise_results(pd.read_csv(data / "results.csv")).assign(
        row=lambda f: f["objective"].map(row_key))  # fmt: skip
    replicates = [cell_rows(p / "results.csv") for p in sorted((data / "replicates").glob("*")) if p.is_dir()]
    experiments = [cell_rows(p) for p in sorted((data / "experiments").rglob("results.csv"))]
    ablations = [
        cell_rows(p)
        for p in [*sorted((data / "ablations").rglob("*.csv")), *sorted((data / "paths").rglob("*.csv"))]
    ]
    add_cells(values, results)
    for frame in replicates:
        add_cells(extra["replicates"], frame)
    for frame in experiments:
        add_cells(extra["experiments"], frame)
    for frame in ablations:
        add_cells(extra["ablations"], frame)
        extra["ablations"].add(frame["value"])
        extra["ablations"].add(frame.get("reg_share", []))
        count(extra_counts["ablations"], ANY, frame["value"])
    for frame in [results, *replicates, *experiments, *ablations]:
        for dataset, g in frame.groupby("dataset"):
            count(counts, dataset, g["n"])
            count(
                counts,
                dataset,
                pd.to_numeric(g["objective"].str.extract(r"samples=(\d+)")[0], errors="coerce"),
            )
    add_pairs(se, diff, results, [*replicates, *experiments, *ablations])

    resources = REPO / "src" / "kcal" / "resources"
    paper = pd.read_csv(resources / "paper_tables.csv")
    for (dataset, metric, row), g in paper.groupby(["dataset", "metric", "objective"]):
        values.add(
            [*g["mean"], *g["se"]], dataset, "acc" if metric == "accuracy" else metric, PAPER_ROWS.get(row)
        )
    sizes = pd.read_csv(resources / "paper_sample_size.csv")
    for (dataset, metric), g in sizes.groupby(["dataset", "metric"]):
        values.add(g["value"], dataset, metric)
        count(counts, dataset, g["num_samples"])

    for path in [data / "studies.csv", *sorted((data / "replicates").glob("*/studies.csv")),
                 *sorted((data / "experiments").rglob("studies.csv"))]:  # fmt: skip
        for r in pd.read_csv(path).to_dict("records"):
            params = json.loads(r["best_params"]) if isinstance(r["best_params"], str) else {}
            numbers = [v for v in params.values() if isinstance(v, int | float) and not isinstance(v, bool)]
            values.add(
                [*numbers, r["best_value"], r["trial_hours"]], r["dataset"], row=row_key(r["objective"])
            )
            count(extra_counts["parameters"], r["dataset"], numbers)
            count(
                extra_counts["trials"],
                r["dataset"],
                [r.get(c) for c in ("complete", "failed", "not_counted")],
            )
            count(counts, r["dataset"], [r["seeds"]])
            count(trials, r["dataset"], [r["best_trial"]])

    datasets = tuple(sorted(set(paper["dataset"]) | set(results["dataset"])))
    for name in datasets:
        spec = get_spec(name)
        facts = [f for f in (spec.d, spec.m, spec.n_paper, spec.n_used) if f is not None]
        values.add(facts, name)
        count(counts, name, facts)

    for path in sorted((data / "trials").glob("*.csv")) + sorted(
        (data / "replicates").glob("*/trials/*.csv")
    ):
        frame = pd.read_csv(path)
        dataset, row = frame["dataset"].iloc[0], row_key(frame["objective"].iloc[0])
        count(trials, dataset, frame["number"])
        for column in frame.columns:
            if column.startswith(("val/", "test/", "test_recal/", "official/")) or column == "value":
                metric = column.rsplit("/", 1)[-1]
                v = frame[column].to_numpy(dtype=float)
                extra["trials"].add([*v, *(100 * v)] if metric == "acc" else v, dataset, metric, row)
        params = [v for text in frame["params"].dropna() for v in json.loads(text).values()
                  if isinstance(v, int | float) and not isinstance(v, bool)]  # fmt: skip
        extra["trials"].add(params, dataset, row=row)

    for path in sorted((data / "experiments").rglob("fronts.json")):
        front = json.loads(path.read_text())
        extra["fronts"].add(leaves(front), front["dataset"])

    documents = ("claims.md", "report.json", "comparison_*.md", "*.tex")
    for dataset, metric, row, value in generated_lines(report, datasets, documents):
        values.add([value], dataset, metric, row)
        if dataset != ANY:
            count(counts, dataset, [value])
    for dataset, metric, row, value in generated_lines(report, datasets, REPLICATED_DOCUMENTS):
        extra["replicates"].add([value], dataset, metric, row)
    return Published(values.freeze(), {k: v.freeze() for k, v in extra.items()}, se.freeze(), diff.freeze(), counts,
                     extra_counts, trials, datasets)  # fmt: skip


def occurs(number: Number, data: Published) -> bool:
    """Whether ``number`` occurs in ``data`` to its printed digits (module docstring)."""
    scopes = (number.datasets or set(data.counts) | set(data.trials)) | {ANY}
    if number.kind == "trial":
        return any(int(number.value) in data.trials.get(d, set()) for d in scopes)
    if number.kind == "count":
        pools = [data.counts, *(data.extra_counts[c] for c in number.contexts if c in data.extra_counts)]
        return number.value in ALLOWED or any(
            int(number.value) in p.get(d, set()) for p in pools for d in scopes
        )
    metrics, pools = None, data.pools(number)
    if number.kind == "percent":  # an accuracy of a published cell (a run, an experiment), not of one trial
        metrics, pools = frozenset({"acc"}), [p for p in pools if p is not data.extra["trials"]]
    return any(near(values, number.value, number.tolerance) for pool in pools
               for values in pool.scoped(number, metrics))  # fmt: skip


def stale(text: str, data: Published) -> list[Number]:
    return [n for n in prose_numbers(text, data.datasets) if not occurs(n, data)]


def readme_summary_text() -> str:
    """The README's section :data:`README_SECTION`, up to the next heading."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert README_SECTION in text, f"README.md has no section {README_SECTION!r}"
    return README_SECTION + text.split(README_SECTION, 1)[1].split("\n## ", 1)[0]


def report_failure(numbers: list[Number]) -> str:
    lines = [f"  {n.text!r} ({n.kind}; datasets {sorted(n.datasets) or 'all'}, metrics {sorted(n.metrics) or 'all'}, "
             f"rows {sorted(n.rows) or 'all'}) in: {n.where[:160]}" for n in numbers]  # fmt: skip
    return ("numbers that occur nowhere in the published data (replace each by a generated block or the data's "
            "number, or drop it):\n" + "\n".join(lines))  # fmt: skip


@pytest.fixture(scope="module")
def data() -> Published:
    return published_data()


# ---- the tests -----------------------------------------------------------------------------------------------
def test_every_number_of_results_md_occurs_in_the_published_data(data):
    numbers = stale((REPORT / "RESULTS.md").read_text(encoding="utf-8"), data)
    assert not numbers, report_failure(numbers)


def test_the_readme_results_summary_has_no_number_outside_the_data(data):
    numbers = stale(readme_summary_text(), data)
    assert not numbers, report_failure(numbers)


def test_every_allowed_constant_is_used_and_says_why():
    texts = [(REPORT / "RESULTS.md").read_text(encoding="utf-8"), readme_summary_text()]
    used = {n.value for text in texts for n in prose_numbers(text, ()) if n.kind == "count"}
    assert all(reason.strip() for reason in ALLOWED.values())
    assert set(ALLOWED) <= used, f"allowed constants no document uses: {sorted(set(ALLOWED) - used)}"


def test_what_counts_as_a_number():
    text = "\n".join([
        "# Heading with Table 3 and §6.2",
        "<!-- kcal.report:x -->",
        "0.123 inside a block",
        "<!-- /kcal.report -->",
        "R1 and C4a and float32 and k_Y and `0.456` and [link](figures/a_1.png), on 2026-11-26 at 12:43 UTC.",
        "```",
        "0.789",
        "```",
        "Accuracy 58.66 %, ECE −0.0127, 1.2e-5, 13,611 rows, 8.8x, by 0.34 points, 1.2–1.7 combined SE, trial 84; "
        "the four classification datasets of XE + MMD; Tables 3, 6 and 7.",
    ])  # fmt: skip
    numbers = prose_numbers(text, ["adult"])
    kinds = {n.text: n.kind for n in numbers}
    assert kinds == {"58.66 %": "percent", "0.0127": "value", "1.2e-5": "value", "13,611": "count", "8.8": "value",
                     "0.34": "diff", "1.2": "se", "1.7": "se", "84": "trial", "four": "count"}  # fmt: skip
    assert [n.text for n in numbers][:3] == ["58.66 %", "0.0127", "1.2e-5"]
    assert next(n for n in numbers if n.text == "1.2e-5").tolerance == pytest.approx(5e-7)
    four = next(n for n in numbers if n.text == "four")
    assert four.metrics == {"acc", "ece"} and four.rows == {"xe_mmd"} and not four.datasets


def test_stale_numbers_are_caught_and_the_data_s_numbers_pass(data):
    """Numbers RESULTS.md once printed and the data no longer holds (the text was not updated after a rerun) fail;
    the data's own numbers pass."""
    assert (
        stale("On heart-disease, XE + ECE-KDE's accuracy is 58.656 % against the paper's 50.036 %.", data)
        == []
    )
    assert [n.text for n in stale("On heart-disease, XE + ECE-KDE's accuracy is 59.6 %.", data)] == ["59.6 %"]
    assert [n.text for n in stale("On breast-cancer, the accuracy of XE is 94.4 (the paper's 95.4).", data)] == \
        ["94.4"]  # fmt: skip
    assert [n.text for n in stale("## online-shoppers\n\nXE + MMD reaches 12.3456 % accuracy there.", data)] \
        == ["12.3456 %"]  # fmt: skip
    assert [n.text for n in stale("Rerunning the sweep moves 47 % of cells by more than 2 SE.", data)] == [
        "47 %"
    ]
