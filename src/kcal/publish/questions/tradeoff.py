"""What the regulariser does when it acts: the trade-off a user chooses from, read from the published
regularisation paths (:mod:`kcal.reruns.paths`: ``<data>/paths/<dataset>/<objective>.csv`` and ``.json``).

Along each path the calibration error (:data:`CALIBRATION`: ECE for classes, QCE and DCE for regression) is set
against the cost (:data:`COST`: accuracy, NLL), in the exact flavour (the paper's text definitions on the whole
test split), as the mean and SE over the path's seeds. λ = 0 is the unregularised model (the selected XE / NLL
configuration); *post-hoc alone* is that model recalibrated (``recalibrator: auto``: temperature scaling for classes,
conformal quantile recalibration for regression, fitted on the validation split).

**The rules, fixed before any path was read.** Per dataset, path and calibration metric:

* a point λ > 0 is **at no significant cost** when its cost is worse than λ = 0's by at most :data:`COST_SE`
  combined SE: ``s (cost_λ - cost_0) <= COST_SE sqrt(se_λ² + se_0²)``, ``s = +1`` where lower is better (NLL),
  ``-1`` where higher is (accuracy);
* the path's **best point λ*** is the one of lowest calibration error among λ = 0 and the points at no significant
  cost (λ* = 0: no point helps). Its **gain** ``cal_0 - cal_λ*`` counts only beyond a threshold that pays for λ*
  being the best of the path's k points, chosen on the same seeds that test it (:func:`gain_threshold`:
  ``z_k = Φ⁻¹(1 - 0.025 / k)`` combined seed SE, Bonferroni over the k points: with no effect anywhere a path
  shows a false gain with probability at most 2.5 %; 2.8 SE at k = 10, where a plain 2 SE allows up to k x 2.3 %);
* **post-hoc on top** (λ* + post-hoc against λ* alone, same rule): *adds* (better), *keeps* (indistinguishable),
  *loses* (worse); **against post-hoc alone** (λ* + post-hoc against λ = 0 + post-hoc): the paper's
  complementarity claim holds where it is *better*; **post-hoc alone against λ*** (λ = 0 + post-hoc against λ*
  without it) says where post-hoc recalibration alone is as good as the regulariser (*indistinguishable*) or
  better;
* **which regulariser wins at equal cost** (per dataset and metric): the three-outcome rule of
  :mod:`kcal.publish.verdicts` for several compared rows: A, the path whose λ* has the lowest calibration error,
  *wins* when it is better than every other path's λ* (:func:`kcal.publish.verdicts.combine`); otherwise none
  wins.

:func:`tradeoff_blocks` gives the report's generated blocks (:data:`BLOCKS`); :func:`copy_paths` publishes a root's
paths into a data folder; the figures are :mod:`kcal.publish.figures.tradeoff_curves`'.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from kcal.core import layout
from kcal.core.plotting import objective_label, objective_sort_key
from kcal.data.registry import dataset_names, get_spec
from kcal.publish import verdicts as V
from kcal.publish.questions import Published

FLAVOUR = "exact"
CALIBRATION = {"classification": ("ece",), "regression": ("qce", "dce")}
COST = {"classification": "acc", "regression": "nll"}
HIGHER_IS_BETTER = frozenset({"acc"})
FIGURE_KIND = "tradeoff"
"""The figures' kind (:func:`kcal.core.layout.dataset_figure`): ``figures/tradeoff_<dataset>.png``."""
COST_SE = 1.0
"""Combined SEs by which a point's cost may be worse than the unregularised model's and still count as no cost."""
NONE, POSTHOC = "none", "post-hoc"
ON_TOP = {V.BETTER: "adds", V.INDISTINGUISHABLE: "keeps", V.WORSE: "loses"}
"""Post-hoc recalibration on top of λ*, by the outcome of λ* + post-hoc against λ* alone."""
METRIC_LABELS = {"ece": "ECE", "qce": "QCE", "dce": "DCE", "acc": "accuracy", "nll": "NLL"}
BLOCKS = ("paths:answer", "paths:recipe", "paths:<dataset>", "paths:<dataset>:full")
"""The generated blocks :func:`tradeoff_blocks` fills: the practitioner's answer (RESULTS.md, docs/library.md), the
recipe's measured λ ranges (docs/library.md), per dataset the trade-off table (RESULTS.md) and every point of its
paths (DETAILS.md)."""


# ---- reading -----------------------------------------------------------------------------------------------------
def read_paths(data: Path) -> pd.DataFrame:
    """Every published path table under ``data`` in one frame (empty with the columns when none)."""
    frames = [pd.read_csv(p) for p in layout.path_tables(data)]
    if not frames:
        return pd.DataFrame(columns=["dataset", "objective", "weight", "recalibrator", "flavour", "metric", "mean",
                                     "se", "n", "reg_share"])  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def read_records(data: Path) -> dict[tuple[str, str], dict]:
    """Every published path record under ``data``, by (dataset, objective)."""
    out = {}
    for table in layout.path_tables(data):
        record = table.with_suffix(".json")
        if record.is_file():
            out[(table.parent.name, table.stem)] = json.loads(record.read_text())
    return out


def copy_paths(root: Path, data: Path, datasets: list[str] | None = None) -> list[Path]:
    """Copy ``<root>/paths/<dataset>/<objective>.{csv,json}`` (the tables and records ``kcal paths`` wrote) into
    ``<data>/paths/<dataset>/``, replacing those of the same path; returns the files written."""
    written = []
    for table in layout.path_tables(root):
        dataset = table.parent.name
        if datasets and dataset not in datasets:
            continue
        record = table.with_suffix(".json")
        if not record.is_file():
            raise FileNotFoundError(
                f"{table} has no record {record.name}; rerun `kcal paths dataset={dataset}`"
            )
        dest = layout.paths_dir(data, dataset)
        dest.mkdir(parents=True, exist_ok=True)
        for src in (table, record):
            written.append(Path(shutil.copyfile(src, dest / src.name)))
    return written


# ---- the rules ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    mean: float
    se: float

    def minus(self, other: Cell) -> tuple[float, float]:
        """``(self - other, the one-run half-width Z sqrt(se² + se_other²))``."""
        return self.mean - other.mean, V.seed_half_width(self.se, other.se)


def cells(path: pd.DataFrame) -> dict[tuple[float, str, str], Cell]:
    """Every (mean, SE) of a path in the exact flavour by ``(weight, metric, recalibrator)``, the first row of
    each: built once per path, so that a rule looks a point up instead of filtering the frame again."""
    exact = path[path["flavour"] == FLAVOUR]
    out: dict[tuple[float, str, str], Cell] = {}
    for weight, metric, recal, mean, se in zip(exact["weight"], exact["metric"], exact["recalibrator"],
                                               exact["mean"], exact["se"], strict=True):  # fmt: skip
        out.setdefault((float(weight), str(metric), str(recal)), Cell(float(mean), float(se)))
    return out


def cell(
    points: dict[tuple[float, str, str], Cell], weight: float, metric: str, recalibrator: str = NONE
) -> Cell | None:
    """The (mean, SE) of one point's metric in the exact flavour, from :func:`cells` (None where the path lacks it)."""
    return points.get((float(weight), metric, recalibrator))


def sign(metric: str) -> float:
    return -1.0 if metric in HIGHER_IS_BETTER else 1.0


def at_no_cost(cost: Cell, cost_0: Cell, metric: str) -> bool:
    """Whether ``cost`` is worse than ``cost_0`` by at most :data:`COST_SE` combined SE (module docstring)."""
    worse = sign(metric) * (cost.mean - cost_0.mean)
    return worse <= COST_SE * math.hypot(V.se_or_zero(cost.se), V.se_or_zero(cost_0.se)) + 1e-12


def lower_is_better(a: Cell, b: Cell) -> str:
    """The three-outcome rule on a calibration error (lower is better): a against b."""
    return V.outcome(*a.minus(b))


@dataclass(frozen=True)
class Best:
    """A path's best point at no significant cost, on one calibration metric (module docstring)."""

    dataset: str
    objective: str
    metric: str
    weight: float  # λ*; 0 where no point helps
    share: float  # the regulariser's share of the loss at λ* (median over seeds at the best epoch)
    zero: Cell  # the calibration error at λ = 0
    posthoc: Cell  # λ = 0 + post-hoc
    best: Cell  # at λ*
    best_posthoc: Cell  # λ* + post-hoc
    cost_metric: str
    cost_zero: Cell
    cost: Cell  # the cost at λ*
    gain: str  # outcome of λ* against λ = 0
    on_top: str  # ON_TOP's word
    vs_posthoc: str  # outcome of λ* + post-hoc against post-hoc alone
    posthoc_alone: str  # outcome of post-hoc alone against λ* without it
    points: int = 0  # the path's points λ > 0 that λ* was chosen among (its gain's threshold: gain_threshold)

    @property
    def gained(self) -> bool:
        return self.weight > 0 and self.gain == V.BETTER

    @property
    def combined_se(self) -> float:
        return math.hypot(V.se_or_zero(self.zero.se), V.se_or_zero(self.best.se))


FALSE_GAIN = 0.025
"""The largest probability with which a path with no effect at any point shows a gain (:func:`gain_threshold`)."""


def gain_threshold(points: int, false_gain: float = FALSE_GAIN) -> float:
    """Combined seed SEs a best-of-``points`` gain must exceed: ``Φ⁻¹(1 - false_gain / points)`` (Bonferroni: the
    chance that any of ``points`` null points looks better by that much is at most ``false_gain``)."""
    from scipy.stats import norm

    return float(norm.ppf(1.0 - false_gain / max(1, points)))


def naive_false_gain(points: int) -> float:
    """The bound of the earlier design, best of ``points`` tested at a plain 2 SE: ``points (1 - Φ(2))``, capped at 1."""
    from scipy.stats import norm

    return min(1.0, points * float(norm.sf(V.Z)))


def best_point(path: pd.DataFrame, metric: str, cost_metric: str) -> Best | None:
    """The rule of the module docstring on one path (one dataset and objective) and calibration metric; None
    where the path lacks λ = 0 or the metric."""
    at = cells(path)
    zero, cost_zero = cell(at, 0.0, metric), cell(at, 0.0, cost_metric)
    posthoc = cell(at, 0.0, metric, POSTHOC)
    if zero is None or cost_zero is None or posthoc is None:
        return None
    best_w, best = 0.0, zero
    points = sorted(set(path["weight"]) - {0.0})
    for weight in points:
        cal, cost = cell(at, weight, metric), cell(at, weight, cost_metric)
        if (
            cal is not None
            and cost is not None
            and at_no_cost(cost, cost_zero, cost_metric)
            and cal.mean < best.mean
        ):
            best_w, best = float(weight), cal
    best_posthoc = cell(at, best_w, metric, POSTHOC) or best
    shares = path.loc[path["weight"] == best_w, "reg_share"]
    return Best(
        dataset=str(path["dataset"].iloc[0]), objective=str(path["objective"].iloc[0]), metric=metric,
        weight=best_w, share=float(shares.iloc[0]) if len(shares) else math.nan, zero=zero, posthoc=posthoc,
        best=best, best_posthoc=best_posthoc, cost_metric=cost_metric, cost_zero=cost_zero,
        cost=cell(at, best_w, cost_metric) or cost_zero,
        gain=V.outcome(best.mean - zero.mean, gain_threshold(len(points)) * math.hypot(V.se_or_zero(best.se),
                                                                                      V.se_or_zero(zero.se))),
        points=len(points),
        on_top=ON_TOP[lower_is_better(best_posthoc, best)], vs_posthoc=lower_is_better(best_posthoc, posthoc),
        posthoc_alone=lower_is_better(posthoc, best),
    )  # fmt: skip


def task_of(dataset: str) -> str:
    return get_spec(dataset).task


def best_points(paths: pd.DataFrame) -> list[Best]:
    """:func:`best_point` of every path and calibration metric of its task, by dataset, metric, objective."""
    out = []
    for (dataset, _), path in paths.groupby(["dataset", "objective"], sort=True):
        task = task_of(str(dataset))
        for metric in CALIBRATION[task]:
            found = best_point(path, metric, COST[task])
            if found is not None:
                out.append(found)
    return sorted(out, key=lambda b: (b.dataset, CALIBRATION[task_of(b.dataset)].index(b.metric),
                                      objective_sort_key(b.objective)))  # fmt: skip


@dataclass(frozen=True)
class Winner:
    dataset: str
    metric: str
    lowest: str  # the objective whose λ* has the lowest calibration error
    outcome: str  # combined outcome of it against every other path's λ*
    others: tuple[
        tuple[str, str], ...
    ]  # (objective, outcome of the lowest against its λ*) of every other path

    @property
    def wins(self) -> str | None:
        return self.lowest if self.outcome == V.BETTER else None


def winners(bests: list[Best]) -> list[Winner]:
    """Per dataset and metric with two paths or more: which regulariser wins at equal cost (module docstring)."""
    out = []
    groups: dict[tuple[str, str], list[Best]] = {}
    for b in bests:
        groups.setdefault((b.dataset, b.metric), []).append(b)
    for (dataset, metric), group in groups.items():
        if len(group) < 2:
            continue
        a = min(group, key=lambda b: b.best.mean)
        others = [b for b in group if b is not a]
        each = tuple((b.objective, lower_is_better(a.best, b.best)) for b in others)
        out.append(Winner(dataset, metric, a.objective, V.combine(o for _, o in each), each))
    return out


def first_costly(path: pd.DataFrame, cost_metric: str) -> float | None:
    """The smallest λ whose cost is worse than λ = 0's beyond :data:`COST_SE` combined SE (None: none is)."""
    at = cells(path)
    cost_zero = cell(at, 0.0, cost_metric)
    for weight in sorted(set(path["weight"]) - {0.0}):
        cost = cell(at, weight, cost_metric)
        if cost_zero is not None and cost is not None and not at_no_cost(cost, cost_zero, cost_metric):
            return float(weight)
    return None


# ---- formatting --------------------------------------------------------------------------------------------------
def decimals(se: float, value: float = 0.0) -> int:
    """Decimals that show an SE to two significant digits (3 for a missing or zero SE, or one that is only
    rounding of ``value``: :func:`kcal.publish.verdicts.is_rounding`)."""
    if not se or not math.isfinite(se) or V.is_rounding(se, value):
        return 3
    return max(0, 1 - math.floor(math.log10(abs(se))))


def spread(se: float, value: float) -> float:
    """``se``, or 0 where it is only rounding of ``value`` (:func:`kcal.publish.verdicts.is_rounding`): every seed
    gave the same value, e.g. one class forecast for every row."""
    return 0.0 if V.is_rounding(se, value) else se


def pm(c: Cell, metric: str = "") -> str:
    """``0.0512 ± 0.0021``; an accuracy in %."""
    scale, unit = (100.0, " %") if metric == "acc" else (1.0, "")
    mean, se = scale * c.mean, scale * c.se
    d = decimals(se, mean)
    return f"{mean:.{d}f} ± {spread(se, mean):.{d}f}{unit}"


def num(c: Cell, metric: str = "") -> str:
    """The mean alone, at :func:`pm`'s precision."""
    scale, unit = (100.0, " %") if metric == "acc" else (1.0, "")
    return f"{scale * c.mean:.{decimals(scale * c.se, scale * c.mean)}f}{unit}"


def weight_text(w: float) -> str:
    return f"{w:g}"


def share_text(s: float) -> str:
    return "—" if s is None or not math.isfinite(s) else f"{s:.2g}"


LABELS = {"xe_kde": "XE + ECE-KDE"}
"""Path names where the report says it otherwise than the figures' legends (:func:`kcal.core.plotting.objective_label`)."""


def label(objective: str) -> str:
    return LABELS.get(objective, objective_label(objective))


def gain_parts(b: Best) -> tuple[str, str]:
    """``("0.0368", "4.4 SE")``: the gain ``cal_0 - cal_λ*`` at the combined SE's precision, and in combined SEs."""
    z = (b.zero.mean - b.best.mean) / b.combined_se if b.combined_se else math.inf
    return f"{b.zero.mean - b.best.mean:.{decimals(b.combined_se, b.zero.mean)}f}", f"{z:.1f} SE"


def gain_text(b: Best) -> str:
    if b.weight == 0:
        return "none"
    diff, z = gain_parts(b)
    return f"{diff} ({z}), {b.gain}"


# ---- the blocks --------------------------------------------------------------------------------------------------
def kernel_line(records: dict[tuple[str, str], dict], dataset: str) -> str:
    """The kernels' check of a dataset's MMD paths (:func:`kcal.reruns.paths.kernel_check`), from their records: the
    x-kernel on training batches, and the y-kernel between two classes (or two targets) at squared distance 2."""
    parts = []
    for (d, objective), record in sorted(records.items(), key=lambda kv: objective_sort_key(kv[0][1])):
        x = record.get("kernels", {}).get("x")
        if d == dataset and x:
            key = next((k for k in x if k.startswith("share_above_")), None)
            above = f", {100 * x[key]:.0f} % of pairs above {key.removeprefix('share_above_')}" if key else ""
            y = record["kernels"].get("y")
            flat = f"; y-kernel at squared distance 2: {y['at_2']:.2g}" if y else ""
            parts.append(f"{label(objective)}: h_x = {x['bandwidth']:.3g}, mean off-diagonal value {x['mean']:.2f}"
                         f"{above}{flat}")  # fmt: skip
    return ("x-kernel on the training batches: " + "; ".join(parts) + ".") if parts else ""


def dataset_table(bests: list[Best], ws: list[Winner], dataset: str, records: dict | None = None) -> str:
    """The trade-off table of one dataset (module docstring), its x-kernel check and its winner line(s)."""
    rows = [b for b in bests if b.dataset == dataset]
    if not rows:
        return f"**{dataset}**: not published yet (`kcal paths dataset={dataset}` runs it)."
    cost_metric, cost_zero = rows[0].cost_metric, rows[0].cost_zero
    figure = layout.dataset_figure(layout.figures_dir("."), FIGURE_KIND, dataset).with_suffix(".png")
    lines = [f"**{dataset}**", "", f"![{dataset}: calibration against cost along each regularisation path]({figure.as_posix()})",
             "", f"Unregularised model (λ = 0): {METRIC_LABELS[cost_metric]} {pm(cost_zero, cost_metric)}. λ*: the point "
             f"of lowest calibration error at no significant cost (≤ {COST_SE:g} combined SE); exact flavour, mean "
             "± SE over seeds.", *([kernel_line(records, dataset)] if records and kernel_line(records, dataset) else []),
             "",
             f"| path | metric | λ = 0 | post-hoc alone | λ* | share at λ* | at λ* | gain (combined SE), outcome "
             f"| {METRIC_LABELS[cost_metric]} at λ* | λ* + post-hoc | post-hoc on top | against post-hoc alone |",
             "|---|---|---|---|---:|---:|---|---|---|---|---|---|"]  # fmt: skip
    for b in rows:
        m = METRIC_LABELS[b.metric]
        if b.weight == 0:
            lines.append(f"| {label(b.objective)} | {m} | {pm(b.zero)} | {pm(b.posthoc)} | — | — | — | none | — | — "
                         "| — | — |")  # fmt: skip
            continue
        lines.append(f"| {label(b.objective)} | {m} | {pm(b.zero)} | {pm(b.posthoc)} | {weight_text(b.weight)} | "
                     f"{share_text(b.share)} | {pm(b.best)} | {gain_text(b)} | {pm(b.cost, cost_metric)} | "
                     f"{pm(b.best_posthoc)} | {b.on_top} | {b.vs_posthoc} |")  # fmt: skip
    for w in (w for w in ws if w.dataset == dataset):
        lines += ["", winner_line(w)]
    return "\n".join(lines)


def winner_line(w: Winner) -> str:
    """``Winner at equal cost (ECE): **XE + MMD**, better than ...`` or ``...: none; XE + MMD is lowest, ...``."""
    m = METRIC_LABELS[w.metric]
    if w.wins:
        others = " and ".join(label(o) for o, _ in w.others)
        return f"Winner at equal cost ({m}): **{label(w.wins)}**, better than {others}."
    each = ", ".join(versus(outcome, label(o)) for o, outcome in w.others)
    return f"Winner at equal cost ({m}): none; {label(w.lowest)} is lowest, {each}."


def full_table(paths: pd.DataFrame, dataset: str) -> str:
    """Every point of a dataset's paths: λ, the regulariser's share, each calibration metric without and with
    post-hoc recalibration, and the cost (DETAILS.md)."""
    part = paths[paths["dataset"] == dataset]
    if part.empty:
        return f"(not published yet: `kcal paths dataset={dataset}` runs it)"
    task = task_of(dataset)
    cal, cost = CALIBRATION[task], COST[task]
    head = ["path", "λ", "share", *(f"{METRIC_LABELS[m]}{s}" for m in cal for s in ("", " + post-hoc")),
            METRIC_LABELS[cost]]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---|---:|---:|" + "---|" * (len(head) - 3)]
    for objective in sorted(set(part["objective"]), key=objective_sort_key):
        path = part[part["objective"] == objective]
        at = cells(path)
        for weight in sorted(set(path["weight"])):
            row = [cell(at, weight, m, r) for m in cal for r in (NONE, POSTHOC)]
            shares = path.loc[path["weight"] == weight, "reg_share"]
            cost_cell = cell(at, weight, cost)
            lines.append(f"| {label(objective)} | {weight_text(weight)} | {share_text(float(shares.iloc[0]))} | "
                         + " | ".join("—" if c is None else pm(c) for c in row)
                         + f" | {'—' if cost_cell is None else pm(cost_cell, cost)} |")  # fmt: skip
    return "\n".join(lines)


def bandwidth_text(record: dict | None, numbers: bool = True) -> str:
    """The bandwidths a path trained with, from its record: ``h_x = 43.4, the median heuristic, h_y = 0.1``
    (``numbers=False``: the median heuristic's value left out, as it differs between datasets)."""
    if not record:
        return "bandwidths not recorded"
    params, parts = record.get("objective_params", {}), []
    if isinstance(params.get("bandwidth_z"), int | float):
        parts.append(
            f"h_x = {params['bandwidth_z']:.3g}, the median heuristic" if numbers else "h_x: median heuristic"
        )
    if isinstance(params.get("bandwidth_y"), int | float):
        parts.append(f"h_y = {params['bandwidth_y']:g}")
    if params.get("kernel_y") == "tanh_decision":
        parts.append(f"tanh kernel, scale {params.get('scale', 1.0):g}")
    if "bandwidth" in params:
        h = params["bandwidth"]
        parts.append("bandwidth chosen per batch" if h is None else f"bandwidth {h:g}")
    if params.get("scaling"):  # MMCE: kcal.baselines.mmce's scaling (the authors' is 5-1000x below Kumar's)
        parts.append(f"{params['scaling']} scaling")
    if params.get("flavour"):  # ECE-KDE: kcal.baselines.ece_kde's bandwidth selector
        parts.append(f"{params['flavour']} flavour")
    return ", ".join(parts) or "no bandwidth"


def versus(outcome: str, what: str) -> str:
    """``better than <what>``, ``indistinguishable from <what>``, ``worse than <what>``."""
    return f"{outcome} {'from' if outcome == V.INDISTINGUISHABLE else 'than'} {what}"


def helped_text(b: Best, record: dict | None) -> str:
    """``XE + MMD at λ = 30 (h_x = ..., share 0.12) lowers ECE from 0.051 to 0.042 (by 0.009, 3.3 SE); ...``."""
    m, name = METRIC_LABELS[b.metric], label(b.objective)
    if not b.gained:
        near = f" (best: λ = {weight_text(b.weight)}, by {', '.join(gain_parts(b))})" if b.weight else ""
        return f"{name}: no {m} gain at no significant cost{near}"
    alone = versus(b.posthoc_alone, "the regulariser alone")
    complement = versus(b.vs_posthoc, "post-hoc alone")
    return (
        f"{name} at λ = {weight_text(b.weight)} ({bandwidth_text(record)}; share {share_text(b.share)}) lowers "
        f"{m} from {num(b.zero)} to {num(b.best)} (by {', '.join(gain_parts(b))}); post-hoc alone gives "
        f"{num(b.posthoc)} ({alone}), λ* + post-hoc {num(b.best_posthoc)} ({complement})"
    )


@dataclass(frozen=True)
class PathCounts:
    """The paths' answer in numbers: paths (and calibration metrics), datasets, those that lower the calibration
    error beyond the best-of-k threshold at no significant cost, of those where post-hoc recalibration alone is as good, and where
    the regulariser improves on post-hoc recalibration alone."""

    paths: int
    datasets: int
    gained: int
    alone: int
    complement: int
    points: int = 0  # the most points λ > 0 of a path


def path_counts(bests: list[Best]) -> PathCounts:
    gained = [b for b in bests if b.gained]
    return PathCounts(len(bests), len({b.dataset for b in bests}), len(gained),
                      sum(b.posthoc_alone != V.WORSE for b in gained), sum(b.vs_posthoc == V.BETTER for b in gained),
                      max((b.points for b in bests), default=0))  # fmt: skip


def answer(paths: pd.DataFrame, records: dict[tuple[str, str], dict], datasets: list[str]) -> str:
    """The practitioner's answer: per dataset where a regulariser helps, by how much, at what λ and bandwidth, and
    where post-hoc recalibration alone is as good; then the ``datasets`` not yet run."""
    bests = best_points(paths)
    ws = winners(bests)
    lines = []
    if bests:
        c = path_counts(bests)
        lines += [f"Over {c.paths} paths and calibration metrics on {c.datasets} dataset{'s' if c.datasets > 1 else ''}, "
                  f"{c.gained} lower the calibration error at no significant cost beyond the threshold that pays for "
                  f"choosing λ* among a path's points on the seeds that test it (at most {FALSE_GAIN:.1%} false gains "
                  f"a path; at a plain 2 SE, up to {naive_false_gain(c.points):.0%} for {c.points} points). Post-hoc "
                  f"recalibration alone is as good as or better than the regulariser alone in {c.alone} of "
                  f"those {c.gained}; the regulariser improves on post-hoc recalibration alone (λ* + post-hoc "
                  f"better than post-hoc alone) in {c.complement}.", ""]  # fmt: skip
    for dataset in [d for d in datasets if d in {b.dataset for b in bests}]:
        rows = [b for b in bests if b.dataset == dataset]
        parts = [helped_text(b, records.get((dataset, b.objective))) for b in rows]
        parts += [f"post-hoc alone takes {METRIC_LABELS[b.metric]} from {num(b.zero)} to {num(b.posthoc)} "
                  f"({versus(lower_is_better(b.posthoc, b.zero), 'λ = 0')})" for b in {b.metric: b for b in rows}.values()]  # fmt: skip
        wins = " ".join(winner_line(w) for w in ws if w.dataset == dataset)
        lines.append(f"- **{dataset}** ({METRIC_LABELS[rows[0].cost_metric]} at λ = 0: "
                     f"{pm(rows[0].cost_zero, rows[0].cost_metric)}): " + "; ".join(parts) + ". " + wins)  # fmt: skip
    missing = [d for d in datasets if d not in set(paths["dataset"])]
    if missing:
        lines.append(f"- not published yet: {', '.join(missing)} (`kcal paths dataset=<dataset>`)")
    return "\n".join(lines).strip()


def recipe(paths: pd.DataFrame, records: dict[tuple[str, str], dict]) -> str:
    """Per regulariser, the measured λ ranges: where it gained at no significant cost (λ*, share), where the cost
    set in (the first λ beyond :data:`COST_SE` combined SE), and the bandwidths it used."""
    if paths.empty:
        return "(no path published yet: `kcal paths dataset=<dataset>`)"
    bests = best_points(paths)
    lines = []
    for objective in sorted(set(paths["objective"]), key=objective_sort_key):
        part = paths[paths["objective"] == objective]
        said = []
        for dataset, path in part.groupby("dataset", sort=True):
            cost_metric = COST[task_of(str(dataset))]
            helped = [b for b in bests if b.dataset == dataset and b.objective == objective and b.gained]
            text = ", ".join(f"{METRIC_LABELS[b.metric]} at λ = {weight_text(b.weight)} (share {share_text(b.share)})"
                             for b in helped) or "no gain"  # fmt: skip
            costly, grid = first_costly(path, cost_metric), sorted(set(path["weight"]) - {0.0})
            text += (f"; {METRIC_LABELS[cost_metric]} costs from λ = {weight_text(costly)}" if costly is not None
                     else f"; no cost up to λ = {weight_text(grid[-1])}")  # fmt: skip
            said.append(f"{dataset}: {text}")
        record = next((r for (_, o), r in sorted(records.items()) if o == objective), None)
        grid = sorted(set(part["weight"]) - {0.0})
        lines.append(f"- **{label(objective)}** (λ from {weight_text(grid[0])} to {weight_text(grid[-1])}; "
                     f"{bandwidth_text(record, numbers=False)}): " + "; ".join(said) + ".")  # fmt: skip
    return "\n".join(lines)


def tradeoff_blocks(data: Path, datasets: list[str]) -> dict[str, str]:
    """The generated blocks :data:`BLOCKS` from the paths published in ``data``, for ``datasets`` (those of the
    report, in its order)."""
    paths, records = read_paths(data), read_records(data)
    bests = best_points(paths)
    ws = winners(bests)
    datasets = sorted(datasets, key=lambda d: (task_of(d) != "classification", dataset_names().index(d)))
    out = {"paths:answer": answer(paths, records, datasets) or "(no path published yet)",
           "paths:recipe": recipe(paths, records)}  # fmt: skip
    for dataset in datasets:
        out[f"paths:{dataset}"] = dataset_table(bests, ws, dataset, records)
        out[f"paths:{dataset}:full"] = full_table(paths, dataset)
    return out


def report_blocks(published: Published) -> dict[str, str]:
    """:func:`tradeoff_blocks` of the published data folder, for the report's datasets
    (:mod:`kcal.publish.questions`)."""
    return tradeoff_blocks(published.data, published.datasets)
