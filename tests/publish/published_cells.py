"""The published data as the prose-number checker reads it (tests/publish/test_report_numbers.py): every cell
(ours, the replicates', the experiments', the ablations' and regularisation paths', the paper's) with its dataset,
row, recalibration, flavour, metric, paper tables and λ; every pair of cells a sentence may compare (two cells of
one file, a cell against its counterpart in another file, ours against the paper's) with their difference and its
SE multiples; and the pools of values that are no cell (selected trials' parameters, dataset sizes, the trials
tables, the Pareto fronts, the generated documents' numbers), by dataset, metric and row.

Matching (:func:`cell_ids`, :func:`pair_rows`): a dimension the number names (prose_cells.Number) must hold the
cell's value (a cell's ``*``, a paper cell's flavour, holds every one); a pair is in scope when both cells share
the dataset, metric and flavour the number names and either cell holds its row, recalibration, table and λ.
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

from kcal.data.registry import get_spec
from kcal.data.splits import split_sizes
from kcal.metrics.official import CLASSIFICATION_TEST_BATCH_SIZE, REGRESSION_TEST_BATCH_SIZE, n_used_rows
from kcal.publish.report import data_dir, report_info

from .prose_cells import CONTEXTS, METRICS, NUMBER, ROWS, Number, dataset_patterns, mentions, parse

REPO = Path(__file__).resolve().parents[2]
ANY = "*"
PAPER_ROWS = {  # paper row -> (row, recalibration)
    "XE": ("xe", None), "XE + MMCE": ("xe_mmce", None), "XE + ECE KDE": ("xe_kde", None),
    "XE + MMD": ("xe_mmd", None), "NLL": ("nll", "none"), "NLL + post-hoc": ("nll", "post-hoc"),
    "NLL + MMD": ("nll_mmd", "none"), "NLL + MMD + post-hoc": ("nll_mmd", "post-hoc"),
    "NLL + MMD k_Y=rbf": ("nll_mmd", "none"), "NLL + MMD k_Y=tanh": ("nll_mmd_tanh", "none"),
}  # fmt: skip
CELL_COLUMNS = ["file", "context", "dataset", "row", "objective", "recal", "flavour", "metric", "tables", "lam",
                "samples", "mean", "se"]  # fmt: skip


def row_key(objective: str) -> str:
    """The row of an objective (``xe_mmd``, ``nll_mmd_tanh``); ``*`` for one of no named row."""
    base = str(objective).split("@")[0]
    return base if base in ROWS else ANY


def tables_of(objective: str, recal: str) -> str:
    """The paper tables an objective's cell belongs to, ``|``-joined."""
    base = str(objective).split("@")[0]
    if "@samples=" in str(objective):
        return "|sample_size|"
    if base.startswith("xe"):
        return "|classification_tempscaling|" if recal == "post-hoc" else "|classification|"
    return "|regression|decision_kernel|"


def frame_cells(frame: pd.DataFrame, file: str, context: str) -> pd.DataFrame:
    """The cells of a results-like CSV (results, replicate, experiment, ablation, path); a path's or a weight
    ablation's weight is its λ."""
    fixed = re.search(r"weight=([\d.e+-]+)", file)
    lam = (frame["weight"] if "weight" in frame else frame["value"] if "objective.weight" in file
           else float(fixed.group(1)) if fixed else np.nan)  # fmt: skip
    out = pd.DataFrame({
        "file": file, "context": context, "dataset": frame["dataset"], "row": frame["objective"].map(row_key),
        "objective": frame["objective"].astype(str), "recal": frame["recalibrator"], "flavour": frame["flavour"],
        "metric": frame["metric"].replace({"accuracy": "acc"}), "lam": lam, "mean": frame["mean"], "se": frame["se"],
    })  # fmt: skip
    out["tables"] = [tables_of(o, r) for o, r in zip(out["objective"], out["recal"], strict=True)]
    out["samples"] = out["objective"].str.extract(r"samples=(\d+)")[0].fillna("")
    if "value" in frame and "lam" not in frame and "objective.weight" not in file:  # another varied setting
        out["objective"] = out["objective"] + "@" + frame["value"].astype(str)
    return out[CELL_COLUMNS]


def paper_cells(resources: Path) -> pd.DataFrame:
    paper = pd.read_csv(resources / "paper_tables.csv")
    rows = [PAPER_ROWS[r] for r in paper["objective"]]
    recal = [r or ("post-hoc" if t == "classification_tempscaling" else "none") for (_, r), t in zip(rows, paper["table"], strict=True)]  # fmt: skip
    acc = paper["metric"].eq("accuracy")
    main = pd.DataFrame({
        "file": "paper", "context": "", "dataset": paper["dataset"], "row": [r for r, _ in rows],
        "objective": paper["objective"], "recal": recal, "flavour": ANY,
        "metric": paper["metric"].replace({"accuracy": "acc"}), "tables": "|" + paper["table"] + "|", "lam": np.nan,
        "samples": "", "mean": paper["mean"].where(~acc, paper["mean"] / 100),
        "se": paper["se"].where(~acc, paper["se"] / 100),
    })  # fmt: skip
    sizes = pd.read_csv(resources / "paper_sample_size.csv")
    table6 = pd.DataFrame({
        "file": "paper", "context": "", "dataset": sizes["dataset"], "row": "nll_mmd",
        "objective": "NLL + MMD", "recal": "none", "flavour": ANY, "metric": sizes["metric"],
        "tables": "|sample_size|", "lam": np.nan, "samples": sizes["num_samples"].astype(str),
        "mean": sizes["value"], "se": np.nan,
    })  # fmt: skip
    return pd.concat([main, table6], ignore_index=True)


def pairs_of(cells: pd.DataFrame) -> pd.DataFrame:
    """Every pair of cells a sentence may compare (module docstring), with their difference and SE multiples."""
    c = cells.assign(cid=np.arange(len(cells)))
    within = c.merge(c, on=["file", "dataset", "flavour", "metric"], suffixes=("_a", "_b"))
    within = within[within["cid_a"] < within["cid_b"]].assign(kind="within")
    ours, others = c[c["file"] == "results"], c[~c["file"].isin(["results", "paper"])]
    key = ["dataset", "objective", "recal", "flavour", "metric"]
    cross = ours.merge(others, on=key, suffixes=("_a", "_b")).assign(kind="cross")
    experiments = c[c["context"] == "experiments"]
    rows = ours.merge(experiments, on=["dataset", "recal", "flavour", "metric"], suffixes=("_a", "_b"))
    rows = rows[
        rows["objective_a"] != rows["objective_b"]
    ]  # a published row against an experiment's other row
    # (``XE + MMD with its kernel kept on improves on XE``), and one experiment's row against another's (a table of
    # rows from two experiments)
    both = experiments.merge(experiments, on=["dataset", "recal", "flavour", "metric"], suffixes=("_a", "_b"))
    both = both[(both["file_a"] != both["file_b"]) & (both["objective_a"] != both["objective_b"])]
    rows = pd.concat([rows, both[both["cid_a"] < both["cid_b"]]], ignore_index=True).assign(kind="within")
    paper = c[c["file"] == "paper"].drop(columns="flavour")
    measured = c[~c["context"].isin(["ablations"]) & (c["file"] != "paper")]
    against = measured.merge(
        paper, on=["dataset", "row", "recal", "metric", "samples"], suffixes=("_a", "_b")
    )
    against = against[[bool(set(a.split("|")) & set(b.split("|")) - {""})
                       for a, b in zip(against["tables_a"], against["tables_b"], strict=True)]].assign(kind="paper")  # fmt: skip
    for frame, shared in (
        (cross, ["objective", "recal"]),
        (rows, ["recal"]),
        (against, ["row", "recal", "samples"]),
    ):
        for column in shared:
            frame[column + "_a"] = frame[column + "_b"] = frame[column]
    pairs = pd.concat([within, cross, rows, against], ignore_index=True)
    d = (pairs["mean_a"] - pairs["mean_b"]).abs().to_numpy(dtype=float)
    sa, sb = pairs["se_a"].abs().to_numpy(dtype=float), pairs["se_b"].fillna(0.0).abs().to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        pairs = pairs.assign(diff=d, combined=d / np.hypot(sa, sb), over_a=d / sa, over_b=d / sb)
    pairs["context"] = [a or b for a, b in zip(pairs["context_a"], pairs["context_b"], strict=True)]
    return pairs.reset_index(drop=True)


# ---- values of no cell ----------------------------------------------------------------------------------------
@dataclass
class Pool:
    """Magnitudes by (dataset, metric, row); ``*`` for a value of every dataset, of no metric or no row.
    ``strict``: a dimension a number names must be named by the value too (a generated document's line)."""

    strict: bool = False
    values: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)

    def add(self, values: Iterable, dataset: str = ANY, metric: str = ANY, row: str = ANY) -> None:
        finite = [abs(float(v)) for v in values if not nan(v)]
        self.values.setdefault((dataset or ANY, metric or ANY, row or ANY), []).extend(finite)

    def freeze(self) -> Pool:
        self.values = {k: sorted(set(v)) for k, v in self.values.items()}
        return self

    def scoped(self, number: Number, metrics: frozenset[str] | None = None) -> Iterator[list[float]]:
        metrics = number.metrics if metrics is None else metrics

        def holds(names: frozenset[str], value: str) -> bool:
            return not names or value in names or (value == ANY and not self.strict)

        for (d, m, r), values in self.values.items():
            if holds(number.datasets, d) and holds(metrics, m) and holds(number.rows, r):
                yield values


def nan(v) -> bool:
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return True


def near(values: list[float], x: float, tol: float) -> bool:
    slack = 1e-9 * max(1.0, x)
    i = bisect.bisect_left(values, x - tol - slack)
    return i < len(values) and values[i] <= x + tol + slack


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
    return {int(float(v)) for v in values if not nan(v) and float(v) == int(float(v))}


LATEX_LAYOUT = re.compile(r"\\(?:multirow|fontsize|begin|end|cmidrule|resizebox|setlength)\S*")
"""LaTeX commands whose numbers are layout (``\\multirow{4}``), not results."""
REPLICATED_DOCUMENTS = ("protocol_spread.md",)
"""Generated documents whose numbers are the replicates' (they count where the replicates' results count)."""
DOCUMENTS = ("claims.md", "report.json", "comparison_*.md", "*.tex")


def generated_lines(
    report: Path, datasets: Iterable[str], names: Iterable[str]
) -> Iterator[tuple[str, str, str, float]]:
    """``(dataset, metric, row, value)`` (``*`` where the line names none or several) of every number of the
    report's generated documents ``names`` (globs); a ``.tex`` line belongs to the last dataset named above it."""
    patterns = dataset_patterns(datasets)
    for path in sorted({p for name in names for p in report.glob(name)}):
        current: set[str] = set()
        for line in path.read_text(encoding="utf-8").splitlines():
            ds = {k for *_, k in mentions(line, patterns)}
            met = {k for *_, k in mentions(line, METRICS)} | {
                m for m in METRICS if re.search(rf"\|\s*{m}\s*\|", line)
            }
            rows = {k for *_, k in mentions(line, ROWS, blank=True)}
            if path.suffix == ".tex":
                current = ds or (set() if "rule" in line else current)
                ds = current
                line = LATEX_LAYOUT.sub(" ", line)
            for value in numbers_of(line):
                for d in ds or {ANY}:
                    yield d, next(iter(met)) if len(met) == 1 else ANY, next(iter(rows)) if len(rows) == 1 else ANY, \
                        value  # fmt: skip


VARIANTS = ("pruned", "workers")
"""The variant protocols' folders (the pruned protocol's runs, the runs on more workers): their cells count where a
paragraph names the variant (prose_cells.CONTEXTS)."""


def split_rows(n: int, task: str) -> dict[str, int]:
    """A dataset's split sizes in rows (splits.split_sizes) and the test rows the official flavour evaluates (full
    batches of the authors' test batch size)."""
    train, val, test = split_sizes(n)
    batch = CLASSIFICATION_TEST_BATCH_SIZE if task == "classification" else REGRESSION_TEST_BATCH_SIZE
    return {"train": train, "validation": val, "test": test, "official test": n_used_rows(test, batch)}


def trial_ranks(frame: pd.DataFrame, cells: pd.DataFrame) -> Iterator[tuple[str, np.ndarray, list[int]]]:
    """``(metric, the study's finished trials' test values, how many of them lie below and above each cell's mean
    of its metric)`` for every test column of a trials table (``above 46 of our 95 trials``)."""
    for column in frame.columns:
        if column.startswith(("test/", "test_recal/", "official/test")):
            metric = column.rsplit("/", 1)[-1]
            v = frame[column].dropna().to_numpy(dtype=float)
            means = cells.loc[cells["metric"].eq(metric), "mean"].to_numpy(dtype=float)
            if len(v) and len(means):
                below = np.searchsorted(np.sort(v), means)
                yield metric, v, [*below.tolist(), *(len(v) - below).tolist()]


@dataclass
class Published:
    """The published data of a report (module docstring)."""

    cells: pd.DataFrame
    pairs: pd.DataFrame
    values: Pool  # parameters, dataset facts: always
    generated: Pool  # the generated documents' numbers: always, strictly scoped
    extra: dict[str, Pool]  # by context name
    counts: dict[str, set[int]]  # dataset (or *) -> integers, always
    extra_counts: dict[str, dict[str, set[int]]]  # context name -> dataset -> integers
    trials: dict[str, set[int]]  # dataset -> trial numbers
    lams: dict[str, set[float]]  # dataset (or *) -> the λ of its paths, ablations and selected trials
    datasets: tuple[str, ...]


def published_data(report: Path) -> Published:
    profile, data = report_info(report)
    assert data == data_dir(profile).resolve()
    values, generated = Pool(), Pool(strict=True)
    extra = {name: Pool() for name in CONTEXTS}
    counts: dict[str, set[int]] = {}
    extra_counts: dict[str, dict[str, set[int]]] = {name: {} for name in CONTEXTS}
    trials: dict[str, set[int]] = {}
    lams: dict[str, set[float]] = {}

    def count(target: dict[str, set[int]], dataset: str, numbers: Iterable) -> None:
        target.setdefault(dataset or ANY, set()).update(integers(numbers))

    def rel(p: Path) -> str:
        return p.relative_to(data).as_posix()

    frames = [("results", "", pd.read_csv(data / "results.csv"))]
    frames += [
        (rel(p), "replicates", pd.read_csv(p)) for p in sorted((data / "replicates").glob("*/results.csv"))
    ]
    frames += [
        (rel(p), "experiments", pd.read_csv(p)) for p in sorted((data / "experiments").rglob("results.csv"))
    ]
    frames += [(rel(p), "ablations", pd.read_csv(p))
               for p in [*sorted((data / "ablations").rglob("*.csv")), *sorted((data / "paths").rglob("*.csv"))]]  # fmt: skip
    frames += [(rel(p), variant, pd.read_csv(p)) for variant in VARIANTS
               for p in sorted((data / variant).rglob("results.csv"))]  # fmt: skip
    resources = REPO / "src" / "kcal" / "resources"
    cells = pd.concat([*(frame_cells(f, name, ctx) for name, ctx, f in frames), paper_cells(resources)],
                      ignore_index=True)  # fmt: skip
    for name, ctx, frame in frames:
        for dataset, g in frame.groupby("dataset"):
            count(counts, dataset, g["n"])
            count(
                counts,
                dataset,
                pd.to_numeric(g["objective"].str.extract(r"samples=(\d+)")[0], errors="coerce"),
            )
        if ctx == "ablations":
            varied = frame["weight"] if "weight" in frame else frame["value"]
            extra["ablations"].add(varied)
            extra["ablations"].add(frame.get("reg_share", []))
            count(extra_counts["ablations"], ANY, varied)
            if "weight" in frame or "objective.weight" in name:
                for dataset, g in frame.groupby("dataset"):
                    lams.setdefault(dataset, set()).update(float(v) for v in varied[g.index])
    sizes = pd.read_csv(resources / "paper_sample_size.csv")
    for dataset, g in sizes.groupby("dataset"):
        count(counts, dataset, g["num_samples"])

    for path in [data / "studies.csv", *sorted((data / "replicates").glob("*/studies.csv")),
                 *sorted((data / "experiments").rglob("studies.csv")),
                 *(p for variant in VARIANTS for p in sorted((data / variant).rglob("studies.csv")))]:  # fmt: skip
        for r in pd.read_csv(path).to_dict("records"):
            params = json.loads(r["best_params"]) if isinstance(r["best_params"], str) else {}
            numbers = [v for v in params.values() if isinstance(v, int | float) and not isinstance(v, bool)]
            shares = [r.get(c, np.nan) for c in ("reg_share_median", "reg_share_at_best")]
            values.add([*numbers, r["best_value"], r["trial_hours"], *shares, *(100 * float(v) for v in shares)],
                       r["dataset"], row=row_key(r["objective"]))  # fmt: skip
            lams.setdefault(r["dataset"], set()).update(
                float(v) for k, v in params.items() if "weight" in k and isinstance(v, int | float)
            )
            count(
                extra_counts["parameters"], r["dataset"], [*numbers, *(round(v) for v in numbers if v >= 10)]
            )
            count(
                extra_counts["trials"],
                r["dataset"],
                [r.get(c) for c in ("complete", "failed", "not_counted")],
            )
            count(counts, r["dataset"], [r["seeds"]])
            count(trials, r["dataset"], [r["best_trial"]])

    datasets = tuple(sorted(set(cells["dataset"])))
    for name in datasets:
        spec = get_spec(name)
        facts = [f for f in (spec.d, spec.m, spec.n_paper, spec.n_used) if f is not None] + numbers_of(
            spec.notes
        )
        values.add(facts, name)
        count(counts, name, facts)
        rows = split_rows(spec.n_used, spec.task)
        count(counts, name, rows.values())
        values.add([100 / n for n in (rows["test"], rows["official test"])], name)  # one test row in points
    pairs = pairs_of(cells)
    for dataset, g in cells[cells["samples"].ne("") & cells["file"].eq("results")].groupby("dataset"):
        k = g["samples"].nunique()  # Table 6's rows: how many pairs of them
        count(counts, dataset, [k, k * (k - 1) // 2])
    for (dataset, flavour), g in pairs[pairs["metric"].eq("acc")].groupby(["dataset", "flavour"]):
        if dataset in datasets:  # an accuracy difference in test rows
            n = split_rows(get_spec(dataset).n_used, "classification")[
                "test" if flavour == "exact" else "official test"
            ]
            count(counts, dataset, np.round(g["diff"].to_numpy(dtype=float) * n))

    for path in sorted((data / "trials").glob("*.csv")) + sorted(
        (data / "replicates").glob("*/trials/*.csv")
    ):
        frame = pd.read_csv(path)
        dataset, row = frame["dataset"].iloc[0], row_key(frame["objective"].iloc[0])
        count(trials, dataset, frame["number"])
        for metric, v, against in trial_ranks(
            frame, cells[cells["dataset"].eq(dataset) & cells["row"].isin([row, ANY])]
        ):
            extra["trials"].add(
                [np.median(v), *(100 * np.median(v) for _ in [0] if metric == "acc")], dataset, metric, row
            )
            count(extra_counts["trials"], dataset, [len(v), *against])
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

    for dataset, metric, row, value in generated_lines(report, datasets, DOCUMENTS):
        generated.add([value], dataset, metric, row)
        if dataset != ANY:
            count(counts, dataset, [value])
    for dataset, metric, row, value in generated_lines(report, datasets, REPLICATED_DOCUMENTS):
        extra["replicates"].add([value], dataset, metric, row)
    return Published(cells, pairs, values.freeze(), generated.freeze(),
                     {k: v.freeze() for k, v in extra.items()}, counts, extra_counts, trials, lams, datasets)  # fmt: skip


# ---- matching ---------------------------------------------------------------------------------------------
def holds(column: pd.Series, names: frozenset, dimension: str = "") -> np.ndarray:
    """Where the cells' ``column`` holds one of ``names`` (every cell where none is named; ``*`` holds all)."""
    if not names:
        return np.ones(len(column), dtype=bool)
    if dimension == "tables":
        return np.array([any(f"|{n}|" in t for n in names) for t in column], dtype=bool)
    if dimension == "lam":  # NaN among the names: a cell of no path or weight ablation (no λ) may be meant
        values, lams = column.to_numpy(dtype=float), [n for n in names if n == n]
        close = np.zeros(len(values), dtype=bool)
        for lam in lams:  # to its printed digits (``0.176`` for 0.1763), about three significant ones
            close |= np.isclose(values, lam, rtol=5e-3, atol=0.0)
        return close | (np.isnan(values) & any(n != n for n in names))
    return column.isin(names).to_numpy() | column.eq(ANY).to_numpy()


def in_context(column: pd.Series, number: Number) -> np.ndarray:
    return np.array(column.isin(["", *number.contexts]), dtype=bool)


def cell_ids(number: Number, cells: pd.DataFrame, metrics: frozenset | None = None) -> np.ndarray:
    """The ids of the cells in ``number``'s scope whose mean or SE it prints, to its digits (an accuracy as a
    fraction or in %)."""
    metrics = number.metrics if metrics is None else metrics
    mask = in_context(cells["context"], number)
    for column, names in [("dataset", number.datasets), ("row", number.rows), ("metric", metrics),
                          ("flavour", number.flavours), ("recal", number.recals), ("tables", number.tables),
                          ("lam", number.lams)]:  # fmt: skip
        mask &= holds(cells[column], names, column)
    scoped = cells[mask]
    mean, se = scoped["mean"].abs().to_numpy(dtype=float), scoped["se"].abs().to_numpy(dtype=float)
    scale = np.where(scoped["metric"].eq("acc"), 100.0, 1.0)
    slack = number.tolerance + 1e-9 * max(1.0, number.value)
    hit = np.zeros(len(scoped), dtype=bool)
    for v in (mean, se, mean * scale, se * scale):
        hit |= np.abs(v - number.value) <= slack
    return scoped.index.to_numpy()[hit]


def pair_rows(number: Number, pairs: pd.DataFrame) -> pd.DataFrame:
    """The pairs in ``number``'s scope (module docstring)."""
    mask = in_context(pairs["context"], number)
    for column, names in [
        ("dataset", number.datasets),
        ("metric", number.metrics),
        ("flavour", number.flavours),
    ]:
        mask &= holds(pairs[column], names)
    for column, names in [("row", number.rows), ("recal", number.recals), ("tables", number.tables),
                          ("lam", number.lams)]:  # fmt: skip
        if names:
            mask &= holds(pairs[column + "_a"], names, column) | holds(pairs[column + "_b"], names, column)
    return pairs[mask]
