"""Does the number of workers change the answer? Runs of the protocol on N worker processes against the runs on
1 or 2.

**The runs.** The *reference runs* are the published run and its replicates (``replicates/sampler_seed=<k>``),
which ran on 1 or 2 worker processes. The *worker runs* are the worker-count replicates
(``workers/jobs=<N>/sampler_seed=<k>``, :mod:`kcal.publish.variant_report`): the same protocol, budget and
sampler seeds with ``reproduce.jobs=N``, run in the asynchronous mode (the sweep's only mode then; since issue 67
the default sweep is deterministic, the same numbers at any worker count, ``tests/orchestrate/test_determinism.py``,
so these runs describe the asynchronous mode, ``sweep.mode=async``, and its history); a run whose sampler's parallel setting differs too (a fix tried,
:mod:`kcal.sweep.samplers`) is its own group, ``workers/jobs=<N>,<setting>/``, compared the same way. With N workers, constant-liar TPE samples each trial while N - 1 others
are unfinished, so the question is whether that changes what the protocol selects. Each (dataset, objective)
is compared over the reference runs that hold it (R of them) and the worker runs of one N that hold it (m).

**The rules**, fixed here before the comparison was first computed on a worker run, are the predictive rule of
:mod:`kcal.publish.protocol_spread` (a 95 % prediction interval from the R reference runs, Student's t with
R - 1 degrees of freedom) and the three outcomes of :mod:`kcal.publish.verdicts`:

1. **Selection score** (each study's best validation score, ``studies.csv``'s ``best_value``: validation
   accuracy less a tie-break by ECE; higher is better), per (dataset, objective). With ``mean`` and ``sd``
   (ddof 1) of the reference values and ``w`` the mean of the m worker values, ``d = mean - w`` (positive: the
   workers score lower) and ``h = t_{R-1} sd sqrt(1/m + 1/R)``, the prediction interval for the mean of m more
   runs (m = 1: the interval for one more run). Outcome (:func:`kcal.publish.verdicts.outcome`): *worse* when
   ``d > h``, *better* when ``d < -h``, *indistinguishable* otherwise (:func:`compare`). Each worker run is
   also placed alone, inside or outside the interval for one run.
2. **Test cells** of the selected configurations (Tables 4 and 5, both flavours): each worker run's cell
   against the reference runs' cells by :func:`kcal.publish.protocol_spread.prediction_half_width`, the worker
   run taking the paper's place there (its seed SE enters by how much its square exceeds the reference runs'
   mean square). Outside the interval, the cell is *better* or *worse* by its metric's direction
   (:func:`cell_checks`). Each side's count over n cells is compared with what chance alone allows: the 95 %
   upper end of Binomial(n, ALPHA / 2) (cells share runs, so this is a guide, not an exact test).
3. **Claim verdicts**: each run judged alone by its seed SEs (:mod:`kcal.publish.claims`, the paper's reading
   of every claim on Tables 4 and 5, both flavours): one outcome per (claim, flavour). Two runs *agree* on the
   share of (claim, flavour) where their outcomes are equal. A reference run's agreement is its mean agreement
   with the other R - 1; a worker run's, its mean agreement with the R reference runs. The worker runs' mean
   agreement is compared with the reference runs' agreements as in rule 1 (higher is better): *worse* means the
   worker runs agree with the reference runs less often than those agree among themselves
   (:func:`agreement_check`).
4. **The rule of 2 on the reference runs themselves** (reported beside the verdict, not in it; added once the
   first worker runs were in, so it cannot change a verdict): each reference run in turn takes the worker
   run's place against the other R - 1 (:func:`reference_null`). Its counts show how often a run of the
   protocol on 1 or 2 workers falls outside the interval: the cells of one selected configuration move
   together, so chance's binomial bound is a guide only. Compare its runs over one run's bound with the worker
   runs' (:func:`flagged_runs`); its intervals come from R - 1 runs (wider), so it flags a little less often
   than the worker runs' R-run intervals would.
5. **The trials' distribution** (reported beside the verdict, not in it): per study, the mean selection score
   of its complete trials, and the share of its complete trials *near the best*: with a score at least
   ``bar - MARGIN``, where ``bar`` is the median of the reference runs' best scores of that (dataset, objective)
   (one bar for every run, so the shares compare) and MARGIN = 0.02, two points of validation accuracy
   (about one validation row on breast-cancer's 56). Both are compared as in rule 1 over the reference runs
   whose trials are kept (:func:`trials_summary`).
6. **The selected learning rates** (a lead to *why*, in DETAILS.md only, :func:`lr_text`): each side's median
   ``trainer.lr`` over its selections, and that of each selection with worse cells.

**The verdict per dataset and setting** is over whole runs (:mod:`kcal.publish.whole_runs`, issue 66): exact
permutation tests of the worker runs against the reference runs on the best validation score (averaged over the
dataset's objectives) and on the rank score of the cells of Tables 4 and 5, Holm over every dataset and setting,
equivalence at the score's margin (the accuracy margin of ``claims.md``), else "inconclusive: needs N runs"
(:func:`judged`). Rules 1 to 6 above are counts beside it, not in it (the cells of one run share its selected
models: a count of cells is not a count of independent tests). It is provisional until PLANNED_RUNS worker runs
are in (issue 43 asks for 5 per dataset). A dataset with fewer than 2 reference runs is *not compared*.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from kcal.core import layout
from kcal.publish import verdicts as V
from kcal.publish import whole_runs as W
from kcal.publish.claims import CLAIMS, evaluate_claim
from kcal.publish.protocol_runs import Runs, read_runs, reference_folders
from kcal.publish.protocol_spread import ALPHA, chance_range, prediction_half_width
from kcal.publish.questions import Published
from kcal.publish.table_cells import FLAVOURS, TABLES, cell_frame, normalise_results

MARGIN = 0.02
"""How far below the reference runs' median best score a trial still counts as near the best (rule 5)."""
PLANNED_RUNS = 5
"""Worker runs per dataset that issue 43 asks for; the verdict is provisional below this."""
CELL_TABLES = ("classification", "classification_tempscaling")
README_ADVICE = "running it on every core, a GPU or a cluster"
README_LIMIT = "the asynchronous mode on more than 2 workers selects worse configurations"
"""What the README says where a dataset's verdict is *worse* and no fix is shown (:func:`readme_must_say`)."""
README_FIX = "in the asynchronous mode on more than 2 workers, add `sweep.startup_by=started`"
"""What the README says where a dataset is *worse* and a fix of the sampler is shown: all its planned runs in, no
dataset *worse* with it."""
"""What the README advises about workers (tests/publish/test_worker_count.py checks that it still says so); the
protocol's default ``reproduce.jobs`` is the CPU count."""
WITHIN, OUTSIDE = "within", "outside"
BLOCKS = ("workers:summary", "workers")
"""The report's generated blocks that :func:`workers_blocks` fills: the verdicts (RESULTS.md), every number (DETAILS.md)."""
NONE_YET = "(no worker-count replicate published yet)"
NOT_COMPARED = "not compared (fewer than 2 reference runs)"


# ---- the rules ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """Rule 1 on one quantity: the reference runs' values against the worker runs' (higher is better)."""

    reference: tuple[float, ...]
    workers: tuple[float, ...]
    mean: float
    sd: float
    half_one: float  # the prediction half-width for one more run
    half: float  # for the mean of the m worker runs
    outcome: str
    each: tuple[str, ...]  # each worker run alone: WITHIN or OUTSIDE mean ± half_one


def mean_half_width(sd: float, runs: int, more: int = 1) -> float:
    """``t_{R-1} sd sqrt(1/m + 1/R)``: the 95 % prediction half-width for the mean of ``more`` (m) further runs
    from ``runs`` (R) runs of SD ``sd``; at m = 1 it is :func:`kcal.publish.protocol_spread.prediction_half_width`
    without a paper SE."""
    if more < 1:
        raise ValueError(f"more must be at least 1, got {more}")
    return V.t_quantile(runs, 1.0 - ALPHA) * sd * math.sqrt(1.0 / more + 1.0 / runs)


def compare(
    reference: Sequence[float], workers: Sequence[float], higher_is_better: bool = True
) -> Comparison:
    """Rule 1: the worker runs' mean against the prediction interval of the reference runs (module docstring)."""
    ref, wrk = [float(x) for x in reference], [float(x) for x in workers]
    if len(ref) < 2 or not wrk:
        raise ValueError(
            f"compare needs at least 2 reference values and 1 worker value, got {len(ref)} and {len(wrk)}"
        )
    mean, sd = float(np.mean(ref)), float(np.std(ref, ddof=1))
    half_one, half = mean_half_width(sd, len(ref)), mean_half_width(sd, len(ref), len(wrk))
    s = -1.0 if higher_is_better else 1.0
    each = tuple(WITHIN if abs(w - mean) <= half_one + 1e-12 else OUTSIDE for w in wrk)
    return Comparison(tuple(ref), tuple(wrk), mean, sd, half_one, half,
                      V.outcome(s * (float(np.mean(wrk)) - mean), half), each)  # fmt: skip


def cell_checks(reference: dict[str, pd.DataFrame], workers: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Rule 2: one row per table cell of Tables 4 and 5 and worker run (``{name: results}``) that at least two
    reference runs (``{name: results}``) hold: the worker's value, the reference mean and half-width, ``verdict``
    (WITHIN / OUTSIDE) and ``outcome`` (better / indistinguishable / worse by the metric's direction)."""
    return checks_of_cells(W.replicate_cells(reference), W.replicate_cells(workers))


def checks_of_cells(ref: pd.DataFrame, wrk: pd.DataFrame) -> pd.DataFrame:
    """:func:`cell_checks` on the runs' cells (:func:`kcal.publish.whole_runs.replicate_cells`)."""
    columns = [
        "flavour",
        "table",
        "dataset",
        "row",
        "metric",
        "run",
        "value",
        "mean",
        "half",
        "verdict",
        "outcome",
    ]
    if ref.empty or wrk.empty:
        return pd.DataFrame(columns=columns)
    key = ["flavour", "table", "dataset", "row", "metric"]
    ref, wrk = ref[ref["table"].isin(CELL_TABLES)], wrk[wrk["table"].isin(CELL_TABLES)]
    groups = {k: g for k, g in ref.groupby(key, sort=False)}
    rows = []
    for r in wrk.to_dict("records"):
        group = groups.get(tuple(r[k] for k in key))
        if group is None or len(group) < 2:
            continue
        means = group["ours_mean"].astype(float).to_numpy()
        rms = math.sqrt(float(np.mean([V.se_or_zero(s) ** 2 for s in group["ours_se"].astype(float)])))
        half = prediction_half_width(float(np.std(means, ddof=1)), len(means), float(r["ours_se"]), rms)
        mean = float(np.mean(means))
        s = 1.0 if TABLES[r["table"]].metric(r["metric"]).lower_is_better else -1.0
        outcome = V.outcome(s * (float(r["ours_mean"]) - mean), half)
        rows.append({**{k: r[k] for k in key}, "run": r["replicate"], "value": float(r["ours_mean"]),
                     "mean": mean, "half": half, "verdict": WITHIN if outcome == V.INDISTINGUISHABLE else OUTSIDE,
                     "outcome": outcome})  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


class Null(NamedTuple):
    """Rule 4's counts over the reference runs, each against the others."""

    cells: int = 0
    worse: int = 0
    better: int = 0
    flagged: int = 0  # runs with more worse cells than chance allows one run


def reference_null(reference: dict[str, pd.DataFrame]) -> Null:
    """Rule 4: rule 2 with each reference run (``{name: results}`` of one dataset) in the worker run's place
    against the others. Needs 3 reference runs (an interval from at least 2); else zeros."""
    if len(reference) < 3:
        return Null()
    n = worse = better = flagged = 0
    each = {name: W.replicate_cells({name: results}) for name, results in reference.items()}
    for name in reference:
        others = pd.concat([c for k, c in each.items() if k != name], ignore_index=True)
        cells = checks_of_cells(others, each[name])
        w = int((cells["outcome"] == V.WORSE).sum())
        n, worse = n + len(cells), worse + w
        better += int((cells["outcome"] == V.BETTER).sum())
        flagged += w > side_bound(len(cells))
    return Null(n, worse, better, flagged)


def flagged_runs(cells: pd.DataFrame) -> int:
    """How many runs of rule 2's ``cells`` have more worse cells than chance allows one run."""
    per_run = cells.groupby("run")["outcome"]
    return int(sum((g == V.WORSE).sum() > side_bound(len(g)) for _, g in per_run))


def side_bound(n: int) -> int:
    """The most cells of n that chance alone puts outside the interval on one side: the 95 % upper end of
    Binomial(n, ALPHA / 2)."""
    return chance_range(n, ALPHA / 2)[2]


def claim_outcomes(results: pd.DataFrame, dataset: str) -> dict[tuple[str, str], str]:
    """Rule 3: ``{(claim, flavour): outcome}`` of one run alone on ``dataset``, for every claim on Tables 4 and 5
    (the paper's reading) whose rows the run holds there."""
    res = normalise_results(results)
    out = {}
    for flavour in FLAVOURS:
        cells = {t: cell_frame(res, flavour, TABLES[t]) for t in CELL_TABLES}
        for claim in CLAIMS:
            if claim.table not in CELL_TABLES:
                continue
            found = evaluate_claim(claim, [cells[claim.table]], flavour).datasets
            if dataset in found:
                out[(claim.id, flavour)] = found[dataset].outcome
    return out


def agreement(a: dict, b: dict) -> float:
    """The share of the keys both hold on which ``a`` and ``b`` give the same outcome (NaN: none shared)."""
    shared = sorted(set(a) & set(b))
    return float(np.mean([a[k] == b[k] for k in shared])) if shared else float("nan")


def agreement_check(reference: Sequence[dict], workers: Sequence[dict]) -> Comparison:
    """Rule 3: each reference run's mean agreement with the other reference runs against each worker run's mean
    agreement with every reference run, compared as in rule 1 (higher is better)."""
    if len(reference) < 2:
        raise ValueError(f"agreement_check needs at least 2 reference runs, got {len(reference)}")
    ref = [float(np.mean([agreement(r, o) for j, o in enumerate(reference) if j != i]))
           for i, r in enumerate(reference)]  # fmt: skip
    wrk = [float(np.mean([agreement(w, r) for r in reference])) for w in workers]
    return compare(ref, wrk)


def trials_summary(trials: pd.DataFrame, bar: float) -> tuple[float, float, int]:
    """Rule 5 on one study's trials (a trials table's rows): ``(mean selection score, share with a score at least
    bar - MARGIN, complete trials)`` over its complete trials with a score."""
    done = trials[(trials["state"] == "complete") & trials["value"].notna()]["value"].astype(float)
    if done.empty:
        return float("nan"), float("nan"), 0
    return float(done.mean()), float((done >= bar - MARGIN - 1e-12).mean()), len(done)


# ---- the published runs --------------------------------------------------------------------------------------
def _pair(frame: pd.DataFrame, dataset: str, objective: str) -> pd.DataFrame:
    return frame[(frame["dataset"] == dataset) & (frame["objective"] == objective)]


def selected_lr(studies: pd.DataFrame, dataset: str, objective: str) -> float | None:
    """The learning rate (``trainer.lr``) of the configuration a run selected for (dataset, objective), from its
    ``studies.csv``'s ``best_params``; None where the run does not hold it."""
    rows = _pair(studies, dataset, objective)
    if not len(rows) or "best_params" not in rows or pd.isna(rows["best_params"].iloc[0]):
        return None
    lr = json.loads(rows["best_params"].iloc[0]).get("trainer.lr")
    return None if lr is None else float(lr)


def learning_rates(runs: Runs, names: Sequence[str], dataset: str) -> dict[tuple[str, str], float]:
    """``{(run, table row): selected learning rate}`` of every classification objective the runs hold."""
    out = {}
    for name in names:
        for row in TABLES["classification"].rows:
            lr = selected_lr(runs.studies[name], dataset, row.objective)
            if lr is not None:
                out[(name, row.key)] = lr
    return out


def _best(studies: pd.DataFrame, dataset: str, objective: str) -> float | None:
    rows = _pair(studies, dataset, objective)
    return float(rows["best_value"].iloc[0]) if len(rows) and pd.notna(rows["best_value"].iloc[0]) else None


def selection_rows(ref: Runs, wrk: Runs, dataset: str) -> list[dict]:
    """Rules 1 and 4 per objective of ``dataset`` that the worker runs hold."""
    rows = []
    objectives = sorted({o for s in wrk.studies.values() for o in s[s["dataset"] == dataset]["objective"]})
    for objective in objectives:
        bests = {n: _best(s, dataset, objective) for n, s in ref.studies.items()}
        bests = {n: b for n, b in bests.items() if b is not None}
        wbests = {n: _best(s, dataset, objective) for n, s in wrk.studies.items()}
        wbests = {n: b for n, b in wbests.items() if b is not None}
        if len(bests) < 2 or not wbests:
            continue
        bar = float(np.median(list(bests.values())))
        row = {"dataset": dataset, "objective": objective, "bar": bar,
               "best": compare(list(bests.values()), list(wbests.values()))}  # fmt: skip
        ref_trials = {n: trials_summary(_pair(t, dataset, objective), bar) for n, t in ref.trials.items()}
        wrk_trials = {n: trials_summary(_pair(t, dataset, objective), bar) for n, t in wrk.trials.items()}
        ref_trials = {n: v for n, v in ref_trials.items() if v[2]}
        wrk_trials = {n: v for n, v in wrk_trials.items() if v[2]}
        if len(ref_trials) >= 2 and wrk_trials:
            row["trials_mean"] = compare(
                [v[0] for v in ref_trials.values()], [v[0] for v in wrk_trials.values()]
            )
            row["near_best"] = compare(
                [v[1] for v in ref_trials.values()], [v[1] for v in wrk_trials.values()]
            )
        rows.append(row)
    return rows


@dataclass
class DatasetComparison:
    dataset: str
    label: str  # layout.workers_label: the worker count and the sampler setting
    worker_runs: list[str]
    reference_runs: list[str]
    objectives: list[dict]
    cells: pd.DataFrame
    claims: Comparison | None
    claim_table: list[tuple[str, str, list[str], list[str]]]  # (claim, flavour, reference outcomes, workers')
    verdict: str
    null: Null = Null()  # reference_null
    # the selected configurations' learning rates, {(run, row): lr}: the reference runs', the worker runs'
    lrs: tuple[dict, dict] = ({}, {})
    case: W.Case | None = None  # the verdict's tests over whole runs (None: not compared)


def compare_dataset(ref: Runs, wrk: Runs, dataset: str, label: str) -> DatasetComparison:
    """Rules 1 to 4 and the verdict on ``dataset`` for the worker runs of one worker count and sampler setting
    (``wrk``, ``label``: :func:`kcal.core.layout.workers_label`)."""
    wnames = sorted(n for n, r in wrk.results.items() if dataset in set(r["dataset"]))
    rnames = [n for n, r in ref.results.items() if dataset in set(r["dataset"])]
    mine = Runs(*({n: runs[n] for n in wnames} for runs in (wrk.results, wrk.studies, wrk.trials)))
    objectives = selection_rows(ref, mine, dataset)
    only = {n: r[r["dataset"] == dataset] for n, r in ref.results.items() if n in rnames}
    cells = cell_checks(only, {n: wrk.results[n][wrk.results[n]["dataset"] == dataset] for n in wnames})
    r_out = [claim_outcomes(ref.results[n], dataset) for n in rnames]
    w_out = [claim_outcomes(wrk.results[n], dataset) for n in wnames]
    claims = agreement_check(r_out, w_out) if len(r_out) >= 2 and w_out else None
    keys = sorted({k for o in r_out + w_out for k in o})
    table = [
        (c, f, [o.get((c, f), "—") for o in r_out], [o.get((c, f), "—") for o in w_out]) for c, f in keys
    ]
    case = None
    if len(rnames) >= 2 and wnames:
        wonly = {n: wrk.results[n][wrk.results[n]["dataset"] == dataset] for n in wnames}
        case = W.dataset_case((only, ref.studies), (wonly, wrk.studies), dataset, label, CELL_TABLES)
        W.judge([case])  # alone; :func:`comparisons` judges it again within its family
    lrs = (learning_rates(ref, rnames, dataset), learning_rates(wrk, wnames, dataset))
    return DatasetComparison(dataset, label, wnames, rnames, objectives, cells, claims, table,
                             case.words if case else NOT_COMPARED, reference_null(only), lrs, case)  # fmt: skip


def judged(found: list[DatasetComparison]) -> list[DatasetComparison]:
    """``found`` with every compared dataset's verdict from its tests judged within one family, every dataset
    and setting (Holm, :func:`kcal.publish.whole_runs.judge`)."""
    W.judge([c.case for c in found if c.case])
    for c in found:
        if c.case:
            c.verdict = c.case.words
    return found


def comparisons(data: Path) -> list[DatasetComparison]:
    """Every dataset of every worker count published under ``data``, compared with the reference runs."""
    workers = layout.workers_data_dirs(data)
    if not workers:
        return []
    ref = read_runs(reference_folders(data))
    out = []
    labels = sorted({label for label, _ in workers}, key=lambda x: (layout.workers_label_jobs(x), x))
    for label in labels:
        wrk = read_runs({name: folder for (lab, name), folder in workers.items() if lab == label})
        for dataset in sorted({d for r in wrk.results.values() for d in r["dataset"]}):
            out.append(compare_dataset(ref, wrk, dataset, label))
    return judged(out)


# ---- the report's blocks -----------------------------------------------------------------------------------
def _f(x: float) -> str:
    return f"{x:.3f}"


def _values(values: Sequence[float]) -> str:
    return " / ".join(_f(v) for v in values)


def _runs_values(sides: tuple[dict, dict]) -> str:
    return "; ".join(" / ".join(f"{v:.5g}" for _, v in sorted(side.items())) for side in sides)


def _range(c: Comparison) -> str:
    return f"{_f(c.mean)} ± {_f(c.half_one)}"


def _side_counts(cells: pd.DataFrame) -> tuple[int, int, int]:
    return len(cells), int((cells["outcome"] == V.WORSE).sum()), int((cells["outcome"] == V.BETTER).sum())


def setting(label: str) -> str:
    """``8 workers``, or ``8 workers with constant_liar=false`` where the sampler's setting differs too."""
    sampler = label.partition(",")[2]
    return f"{layout.workers_label_jobs(label)} workers" + (
        f" with {sampler.replace(',', ', ')}" if sampler else ""
    )


def _runs_in(c: DatasetComparison) -> str:
    k = len(c.worker_runs)
    state = "final" if k >= PLANNED_RUNS else f"provisional until all {PLANNED_RUNS} are in"
    return f"{k} of {PLANNED_RUNS} planned runs at {setting(c.label)} in: {', '.join(c.worker_runs)}; {state}"


def selections(cells: pd.DataFrame, outcome: str) -> str:
    """Which selected configurations (run, table row) the cells of ``outcome`` come from, e.g. ``3 of the 20
    selected configurations (sampler_seed=2 XE 6, ...)``: the cells of one selection (two flavours, with and
    without post-hoc recalibration, several metrics) share its model, so they move together."""
    hit = cells[cells["outcome"] == outcome].groupby(["run", "row"], sort=True).size()
    total = len(cells.groupby(["run", "row"]))
    parts = ", ".join(f"{run} {row} {n}" for (run, row), n in hit.items())
    return f"{len(hit)} of the {total} selected configurations" + (f" ({parts})" if parts else "")


def null_text(c: DatasetComparison) -> str:
    """Rule 4 in words, beside the worker runs' own count of runs over one run's bound."""
    null = c.null
    if not null.cells:
        return ""
    r = len(c.reference_runs)
    return (f"runs with more worse cells than chance allows one run: {flagged_runs(c.cells)} of "
            f"{len(c.worker_runs)} at {setting(c.label)}, {null.flagged} of {r} at 1-2 workers (the same rule on "
            f"each against the other {r - 1}: {null.worse} worse, {null.better} better of {null.cells})")  # fmt: skip


def lr_text(c: DatasetComparison) -> str:
    """The selected configurations' learning rates of both sides, and those of the selections with worse cells
    (a lead to why they are worse: recorded, not part of any rule)."""
    ref, wrk = c.lrs
    worse = c.cells[c.cells["outcome"] == V.WORSE].groupby(["run", "row"], sort=True).size()
    hit = ", ".join(f"{run} {row} {wrk[(run, row)]:.3g}" for run, row in worse.index if (run, row) in wrk)
    return (f"Learning rates of the selected configurations (`trainer.lr`, every objective): median "
            f"{np.median(list(ref.values())):.3g} over {len(ref)} selections at 1-2 workers, "
            f"{np.median(list(wrk.values())):.3g} over {len(wrk)} at {setting(c.label)}"
            + (f"; the selections with worse cells: {hit}" if hit else ""))  # fmt: skip


def summary_line(c: DatasetComparison) -> str:
    """One dataset's verdict in a line, with the whole-run tests it rests on."""
    tests = f": {W.case_text(c.case)}" if c.case else ""
    return f"**{c.dataset} at {setting(c.label)}: {c.verdict}** ({_runs_in(c)}){tests}."


ASYNC = ("These runs measured the asynchronous mode (`sweep.mode=async`: each worker asks constant-liar TPE for a "
         "trial while the others' are unfinished), the sweep's only mode when they ran. Since issue 67 the default "
         "sweep is deterministic: one process asks for every trial and tells every result in a fixed order, so a "
         "reproduction gives the same numbers at any worker count (`tests/orchestrate/test_determinism.py`); the "
         "verdicts describe the asynchronous mode and its history, not a default reproduction.")  # fmt: skip


def advice(found: list[DatasetComparison]) -> str:
    """What the README advises about workers, whether the verdicts change that, and where a fix of the sampler's
    parallel setting stands (its own group of runs, :func:`setting`)."""
    plain = [c for c in found if "," not in c.label]
    fixes = [c for c in found if "," in c.label]
    text = (f'{ASYNC} The README advises "{README_ADVICE}" (`docs/reproduction.md`; `reproduce.jobs` defaults to the '
            f"CPU count). ")  # fmt: skip
    worse = [c.dataset for c in plain if c.verdict == V.WORSE]
    if plain and min(len(c.worker_runs) for c in plain) < PLANNED_RUNS:
        text += (f"With {min(len(c.worker_runs) for c in plain)} of {PLANNED_RUNS} worker runs in, the verdicts "
                 "are provisional and the README is unchanged")  # fmt: skip
        text += (f"; if the verdict on {', '.join(worse)} stays *worse* at {PLANNED_RUNS} runs, the README "
                 "states the measured limit." if worse else ".")  # fmt: skip
    elif worse and shown_fixes(found):
        text += f"The verdict is *worse* on {', '.join(worse)} with the protocol's sampler."
    elif worse:
        text += (f"The verdict is *worse* on {', '.join(worse)}: the README states the measured limit "
                 f'("{README_LIMIT}") until a fix is shown with the same replicates.')  # fmt: skip
    elif plain:
        text += ("No dataset is *worse* over whole runs: the advice stands, and the README states no limit on "
                 "the number of workers.")  # fmt: skip
    for label in sorted({c.label for c in fixes}):
        runs = [c for c in fixes if c.label == label]
        done = min(len(c.worker_runs) for c in runs)
        verdicts = ", ".join(f"{c.dataset} {c.verdict}" for c in runs)
        state = "final" if done >= PLANNED_RUNS else f"provisional, {done} of {PLANNED_RUNS} runs in"
        text += f" The fix tried, {setting(label)}: {verdicts} ({state})."
        if label in shown_fixes(found) and worse:
            text += f' It is shown: the README says "{README_FIX}".'
    return text


def shown_fixes(found: list[DatasetComparison]) -> list[str]:
    """The sampler settings (labels with a setting) whose runs are all in and *worse* on no dataset."""
    labels = sorted({c.label for c in found if "," in c.label})
    return [label for label in labels
            if all(len(c.worker_runs) >= PLANNED_RUNS and c.verdict != V.WORSE for c in found if c.label == label)]  # fmt: skip


def readme_must_say(found: list[DatasetComparison]) -> str | None:
    """What the README has to state about workers given the published verdicts: where the plain runs are *worse*
    on some dataset with all their runs in, :data:`README_FIX` once a fix of ``startup_by=started`` is shown, else
    :data:`README_LIMIT`; nothing where no dataset is *worse* (tests/publish/test_worker_count.py checks the
    README against the published verdicts)."""
    plain = [c for c in found if "," not in c.label]
    if not any(c.verdict == V.WORSE and len(c.worker_runs) >= PLANNED_RUNS for c in plain):
        return None
    return README_FIX if "jobs=8,startup_by=started" in shown_fixes(found) else README_LIMIT


def summary_block(found: list[DatasetComparison]) -> str:
    if not found:
        return NONE_YET
    lines = [f"- {summary_line(c)}" for c in found]
    return "\n".join([*lines, "", advice(found) + " Rules and every number: DETAILS.md."])


def details_block(found: list[DatasetComparison]) -> str:
    if not found:
        return NONE_YET
    out = [
        "Reference runs: the published run and its replicates (1 or 2 worker processes); worker runs: "
        "`workers/jobs=<N>/sampler_seed=<k>` in the published data (command and commit in each "
        "`provenance.json`). The verdict: over whole runs (`kcal.publish.whole_runs`; per run, the best validation "
        "score averaged over the objectives and the rank score of the cells). The counts below it, not in it: "
        "`kcal.publish.questions.worker_count` (a 95 % prediction interval from the reference runs, "
        f"t with R - 1 degrees of freedom; near the best: a score at least the reference runs' median best "
        f"score less {MARGIN:g}).", "",
        "| dataset | objective | best score, 1-2 workers | mean ± prediction (one run) | N workers | each | "
        "outcome | trials' mean score, 1-2 workers | N workers | outcome | share near the best (bar), 1-2 "
        "workers | N workers | outcome |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for c in found:
        for o in c.objectives:
            b = o["best"]
            cells = [c.dataset, o["objective"], _values(b.reference), _range(b),
                     f"{_values(b.workers)} ({setting(c.label)})", ", ".join(b.each), b.outcome]  # fmt: skip
            for key in ("trials_mean", "near_best"):
                t = o.get(key)
                label = f" ({_f(o['bar'])})" if key == "near_best" else ""
                cells += (
                    [f"{_values(t.reference)}{label}", _values(t.workers), t.outcome]
                    if t
                    else ["—", "—", "—"]
                )
            out.append("| " + " | ".join(cells) + " |")
    for c in found:
        n, worse, better = _side_counts(c.cells)
        out += ["", f"**{c.dataset}, {setting(c.label)}: {c.verdict}** ({_runs_in(c)}).", ""]
        if c.case:
            out.append(f"- Over whole runs, per run (higher is better; 1-2 workers, then {setting(c.label)}): best "
                       f"validation score {_runs_values(c.case.best)}; rank score of the cells "
                       f"{_runs_values(c.case.rank)}.")  # fmt: skip
        out += [f"- Test cells (Tables 4 and 5, both flavours; a count, not the verdict) outside the prediction interval of the "
                f"{len(c.reference_runs)} reference runs: {worse} worse, {better} better of {n} (chance alone: at "
                f"most {side_bound(n)} each side)" + "".join(f"; {t}" for t in [null_text(c)] if t) + "."]  # fmt: skip
        if c.lrs[0] and c.lrs[1]:
            out.append(f"- {lr_text(c)}.")
        beyond = c.cells[c.cells["verdict"] == OUTSIDE]
        for r in beyond.to_dict("records"):
            out.append(f"  - {r['run']}: {r['flavour']} Table {TABLES[r['table']].number} {r['row']} {r['metric']} "
                       f"{_f(r['value'])} against {_f(r['mean'])} ± {_f(r['half'])}: {r['outcome']}")  # fmt: skip
        if c.claims:
            out.append(f"- Claims: each run's agreement with the others, 1-2 workers {_values(c.claims.reference)}, "
                       f"{setting(c.label)} {_values(c.claims.workers)}: {c.claims.outcome}. Outcomes per run "
                       f"(reference runs {', '.join(c.reference_runs)}; then the worker runs):")  # fmt: skip
            for claim, flavour, r_out, w_out in c.claim_table:
                out.append(f"  - {claim} {flavour}: {', '.join(r_out)}; {', '.join(w_out)}")
    return "\n".join(out)


def workers_blocks(data: Path) -> dict[str, str]:
    """The report's generated blocks :data:`BLOCKS`: ``workers:summary`` (RESULTS.md) and ``workers`` (DETAILS.md)."""
    found = comparisons(Path(data))
    return {"workers:summary": summary_block(found), "workers": details_block(found)}


def report_blocks(published: Published) -> dict[str, str]:
    """:func:`workers_blocks` of the published data folder (:mod:`kcal.publish.questions`)."""
    return workers_blocks(published.data)
