"""The cells of the paper's result tables: the layout of Tables 3-7 as data, our results and the paper's
numbers for every (table, dataset, row, metric), a verdict per cell, and numbers as printed.

* :data:`TABLES` (:class:`Table` of :class:`Row` and :class:`Metric`): the paper's tables as data;
* :func:`load_results` / :func:`normalise_results`: the seed runner's tidy CSV; :func:`paper_numbers`;
* :func:`cell_frame` / :func:`comparison_frame`: ours next to the paper's, with :func:`compare_cell`'s
  verdict ("within 2 SE" when ``|ours - paper| <= 2 sqrt(se_ours^2 + se_paper^2)``, else "differs"; "definition
  differs" where the flavour's metric is defined otherwise than the paper's, :func:`definition_differs`: the
  exact flavour's QCE, DCE, ECE, KCE and post-hoc NLL against numbers the authors' code computed, and KCE in
  both flavours: the paper's KCE has a scaling in neither the authors' code nor the text);
* :func:`fmt` / :func:`best_mask`: a mean as printed (3 decimals) and which printed means are best.

:mod:`kcal.publish.tables` renders these cells (LaTeX, Markdown) and :mod:`kcal.publish.claims` verdicts the claims.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from kcal.configs import CONFIG_DIR
from kcal.core import layout
from kcal.paper import PAPER_DATASETS, RESULT_COLUMNS

FLAVOURS = ("exact", "official")
FLAVOUR_LABEL = {"exact": "exact", "official": "official-compatible"}
FLAVOUR_CAPTION = {
    "exact": "exact metric definitions",
    "official": "official-compatible metrics (the authors' implementation conventions)",
}
REGRESSION, CLASSIFICATION = PAPER_DATASETS["regression"], PAPER_DATASETS["classification"]
#: Table 6's rows: the forecast sample sizes the paper's protocol reruns (``reproduce.sample_sizes`` of profile full)
SAMPLE_SIZES = tuple(
    int(s) for s in OmegaConf.load(Path(CONFIG_DIR) / "profile" / "full.yaml").reproduce.sample_sizes
)
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
    short: str = ""  # its name in prose and Table 6's column headers
    exact: str = ""  # what the exact flavour computes
    official: str = ""  # what the official flavour computes: the authors' code, so the paper's definition
    exact_after: str = ""  # what the exact flavour computes after post-hoc recalibration, where that differs
    official_after: str = ""
    # the recalibrators after which the exact flavour's definition differs from the paper's
    exact_differs: tuple[str, ...] = ()
    # the same for the official flavour: where even the authors' code does not compute the paper's number
    official_differs: tuple[str, ...] = ()


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


# fmt: off
_BOTH = ("none", "post-hoc")
NLL = Metric("nll", "nll", r"NLL $\downarrow$", short="NLL",
             exact="Gaussian NLL over the whole test split", official="the authors' NLL over full 128-row test batches",
             exact_after="the recalibrated map's density in float64",
             official_after="their finite-difference density in float32", exact_differs=("post-hoc",))
QCE = Metric("qce", "qce", r"Quantile Cal. $\downarrow$", short="QCE",
             exact="QCE on the PIT with 20 equal-width bins (about 0 when calibrated)",
             official="the authors' QCE, PIT bins by round(20u) (about 0.025 when calibrated)", exact_differs=_BOTH)
DCE = Metric("dce", "dce", r"Decision Cal. $\downarrow$", short="DCE",
             exact="DCE of the threshold decision in closed form over the whole test split",
             official="the authors' DCE, square root of a sum over 128-row test batches (it grows with the test "
                      "set)", exact_differs=_BOTH)
ACC = Metric("acc", "accuracy", r"Accuracy $\uparrow$", lower_is_better=False, scale=100.0, short="accuracy",
             exact="accuracy over the whole test split", official="accuracy, mean over 8-row test batches")
ECE = Metric("ece", "ece", r"ECE $\downarrow$", short="ECE",
             exact="top-label ECE, 20 equal-width bins, over the whole test split",
             official="mean of the top-label ECE of 8-row test batches (biased upward)", exact_differs=_BOTH)
ENT = Metric("entropy", "entropy", r"Entropy $\downarrow$", short="entropy",
             exact="mean Shannon entropy of the forecast (nats)", official="mean entropy over 8-row test batches")
KCE = Metric("kce", "kce", r"KCE $\downarrow$", short="KCE",
             exact="KCE, MMD squared with one RBF kernel over X x Y for every method",
             official="the authors' KCE with their per-method kernel bandwidths (the paper's numbers imply a scaling "
                      "in neither their code nor the text)", exact_differs=_BOTH, official_differs=_BOTH)
# fmt: on


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
            tuple(Row(str(s), str(s), layout.variant_label("nll_mmd", "samples", s), "none") for s in SAMPLE_SIZES),
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
    return normalise_results(pd.read_csv(path))


def normalise_results(results: pd.DataFrame) -> pd.DataFrame:
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
    pkg = layout.resources_dir()
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


def dataset_info(name: str) -> dict[str, int | None]:
    try:
        from kcal.data import get_spec

        spec = get_spec(name)
        return {"n": int(spec.n_used), "d": int(spec.d), "m": spec.m}
    except Exception:  # an unknown dataset still gets a row, without n/d
        return {"n": None, "d": None, "m": None}


# --------------------------------------------------------------------------------------------------
# The cell frame: ours and the paper's number for every (table, dataset, row, metric)


def by_key(frame: pd.DataFrame, keys: Sequence[str], values: Sequence[str]) -> dict[tuple, tuple]:
    """``{(row's keys): (row's values)}`` of ``frame``'s rows, for looking cells up one by one (``.loc`` per cell
    costs pandas' indexing each time)."""
    k = len(keys)
    # lists: iterating a pandas column boxes each value
    columns = (frame[c].tolist() for c in (*keys, *values))
    return {r[:k]: r[k:] for r in zip(*columns, strict=True)}


def is_missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


WITHIN_2SE, DIFFERS, DEFINITION_DIFFERS = "within 2 SE", "differs", "definition differs"
NOT_RUN, NO_PAPER_VALUE = "not run", "no paper value"
VERDICTS = (WITHIN_2SE, DIFFERS, DEFINITION_DIFFERS, NOT_RUN, NO_PAPER_VALUE)
SEED_ALPHA = math.erfc(2.0 / math.sqrt(2.0))
"""0.0455, the two-sided tail of a normal beyond 2 SE, 2 (1 - Phi(2)): the share of cells that the seed verdict calls
"differs" by chance alone when ours and the paper's are draws of the same 50-seed mean."""


def definition_differs(flavour: str, metric: Metric, recalibrator: str) -> bool:
    """Whether ``flavour``'s ``metric`` (after ``recalibrator``) is defined otherwise than the paper's number,
    which the authors' code computed (the official flavour reproduces it, :attr:`Metric.exact_differs`, except
    where the paper's number is not what their code computes, :attr:`Metric.official_differs`: KCE)."""
    differs = metric.official_differs if flavour == "official" else metric.exact_differs
    return recalibrator in differs


def compare_cell(
    ours_mean: float, ours_se: float, paper_mean: float, paper_se: float, same_definition: bool = True
) -> dict:
    """Difference, combined SE, 2-SE tolerance and verdict for one cell (see module docstring); a cell whose
    metric is defined otherwise than the paper's (``same_definition`` False) is "definition differs"."""
    ours_mean, ours_se, paper_mean, paper_se = (
        float("nan") if is_missing(v) else float(v) for v in (ours_mean, ours_se, paper_mean, paper_se)
    )
    out = {"diff": np.nan, "combined_se": np.nan, "tolerance": np.nan}
    if math.isnan(ours_mean):
        return {**out, "verdict": NOT_RUN}
    if math.isnan(paper_mean):
        return {**out, "verdict": NO_PAPER_VALUE}
    se_c = math.sqrt(
        (0.0 if math.isnan(ours_se) else ours_se) ** 2 + (0.0 if math.isnan(paper_se) else paper_se) ** 2
    )
    diff = ours_mean - paper_mean
    tol = 2.0 * se_c
    verdict = WITHIN_2SE if abs(diff) <= tol + 1e-12 else DIFFERS
    if not same_definition:
        verdict = DEFINITION_DIFFERS
    return {"diff": diff, "combined_se": se_c, "tolerance": tol, "verdict": verdict}


def cell_frame(results: pd.DataFrame, flavour: str, table: Table) -> pd.DataFrame:
    """One row per (dataset, row, metric) of ``table``: ours (display units) next to the paper.

    A report asks for the same run's cells many times (each question over every run): the frame is computed
    once per content of ``results`` (:func:`content_key`), flavour and table, and each caller gets a copy."""
    return remembered(("cells", content_key(results), flavour, table.name),
                      lambda: compute_cell_frame(results, flavour, table))  # fmt: skip


def compute_cell_frame(results: pd.DataFrame, flavour: str, table: Table) -> pd.DataFrame:
    """:func:`cell_frame` computed."""
    res = results[results["flavour"] == flavour]
    ours = by_key(res, ("dataset", "objective", "recalibrator", "metric"), ("mean", "se", "n"))
    pap = _paper_cells(table.name)
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
                    **compare_cell(m, s, pm, s_p, not definition_differs(flavour, met, row.recalibrator)),
                })  # fmt: skip
    return pd.DataFrame.from_records(recs)


@functools.cache
def _paper_cells(table: str) -> dict[tuple[str, str, str], tuple[float, float]]:
    """``{(dataset, row, paper metric): (mean, se)}`` of the paper's numbers in ``table``."""
    paper = _paper_numbers()
    return by_key(paper[paper["table"] == table], ("dataset", "row", "metric"), ("mean", "se"))


def comparison_frame(results: pd.DataFrame, flavour: str) -> pd.DataFrame:
    """Every table's :func:`cell_frame` of ``results`` (any results.csv frame, normalised here), one after the
    other; computed once per content of ``results`` and flavour, like :func:`cell_frame`."""

    def compute() -> pd.DataFrame:
        normal = normalise_results(results)
        return pd.concat([compute_cell_frame(normal, flavour, t) for t in TABLES.values()], ignore_index=True)

    return remembered(("comparison", content_key(results), flavour), compute)


REMEMBERED: dict[tuple, pd.DataFrame | list] = {}
"""The frames and lists :func:`remembered` keeps, at most :data:`REMEMBER_AT_MOST` (the oldest go first)."""
REMEMBER_AT_MOST = 256


def content_key(frame: pd.DataFrame) -> tuple:
    """What ``frame`` holds, as a key: its columns, dtypes and a 64-bit hash of each row (pandas'
    ``hash_pandas_object``; the index is left out)."""
    rows = pd.util.hash_pandas_object(frame, index=False).tolist()
    return tuple(frame.columns), tuple(map(str, frame.dtypes)), tuple(rows)


def remembered(key: tuple, compute):
    """A copy of the frame (or list) ``compute()`` gave for ``key`` (computed now if it is not kept)."""
    if key not in REMEMBERED:
        if len(REMEMBERED) >= REMEMBER_AT_MOST:
            del REMEMBERED[next(iter(REMEMBERED))]
        REMEMBERED[key] = compute()
    return REMEMBERED[key].copy()


# --------------------------------------------------------------------------------------------------
# Formatting


def fmt(x: float, decimals: int = DECIMALS) -> str:
    s = f"{x:.{decimals}f}"
    return s[1:] if s.startswith("-") and float(s) == 0.0 else s  # no "-0.000"


def best_mask(values: Sequence[float], lower_is_better: bool, decimals: int = DECIMALS) -> list[bool]:
    """True for every entry whose printed mean ties the best printed mean (NaN never bold)."""
    printed = [np.nan if is_missing(v) or math.isnan(v) else float(fmt(v, decimals)) for v in values]
    finite = [p for p in printed if not math.isnan(p)]
    if not finite:
        return [False] * len(values)
    best = min(finite) if lower_is_better else max(finite)
    return [(not math.isnan(p)) and p == best for p in printed]
