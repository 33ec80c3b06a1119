"""Is a pruned protocol the full one, cheaper? Its runs judged by the rule written before them, and what it saves.

**The runs.** A pruned protocol's runs are published by ``kcal variant-report`` under
``<data>/pruned/<pruner>/sampler_seed=<k>/`` (:func:`kcal.core.layout.pruned_data_dir`): the whole protocol with
``sweep.pruner=<pruner>`` and the sampler seeds of the full protocol's runs, on 2 workers. The *full runs* are
the published run and its replicates (:mod:`kcal.publish.protocol_spread`). Both are restricted to the datasets
the pruned runs hold, so every count compares like with like.

**Runs of the reversed pruner** (:func:`superseded`). Until commit 533776f ("pruners: a trial reports its
running-best validation loss signed to the study's direction") every trial reported its validation cross-entropy,
which is minimised, to a classification study, which maximises accuracy; SuccessiveHalving ranks reports by the
study's direction, so it pruned the trials with the *lowest* cross-entropy and kept the worst. A
regression study minimises its validation NLL, the reported value's own direction, so its pruning was right. A
run folder records the commit of each root it was published from (``provenance.json``); a classification root
recorded on one of :data:`REVERSED_PRUNER_COMMITS` ran the reversed pruner: its datasets are *superseded*, listed
as such and left out of the verdict; its regression datasets are kept.

**The verdict** per dataset is over whole runs (:mod:`kcal.publish.whole_runs`): exact permutation tests of the
pruned runs against the full runs on the best validation score and on the rank score of the cells (every table),
Holm over the pruner's datasets, equivalence at the score's margin, and where neither is shown "inconclusive:
needs N runs". It is *provisional* until :data:`PLANNED_RUNS` runs of each dataset (of the fixed pruner) are in
(issue 43: 5 on heart-disease and breast-cancer, 3 on crime). A protocol that is not *equivalent* on every
dataset ships only as an experiment: the full protocol stays the reference. The four counts of
:func:`kcal.publish.questions.equivalence.judge` (fixed before any pruned run, a per-cell rule) are shown beside
it in DETAILS.md, no longer the verdict.

**What it saves, measured** (:func:`time_rows`), per dataset, the median over runs of

* the sweeps' *CPU hours* (every budget trial's ``cpu_seconds``, recorded since 2026-11-27, summed over the
  dataset's objectives): what the sweeps cost whatever the machine's load, per-trial overheads included;
* the sweeps' *epochs* (the trials' per-epoch curves, :mod:`kcal.publish.trials`): what pruning removes,
  whatever the load, but blind to a trial's fixed costs (setup, evaluation), which a pruned trial pays for
  fewer epochs;
* the sweeps' *trial hours* (``studies.csv``'s ``trial_hours``: the wall time of every trial of the budget,
  summed): a wall time, so only as comparable as the machines' loads were.

The full protocol's epochs come from every run that kept its curves: the full runs that did and the
worker-count runs (the full protocol on N workers; an epoch is an epoch on any machine and worker count). Its CPU
hours come from the full runs alone (1-2 workers, like the pruned runs): a trial's CPU seconds depend on the
machine's cores and on how many processes share them (8 workers on 2 cores contend for caches), and a
worker-count run may have run on another machine in part (``w8fix-s3`` did, on a lent 16-core one).
The *share saved* of a dataset is that of CPU hours where both sides recorded them, else of epochs, else of
trial hours.

**The seven datasets' sweeps, projected** (:func:`projection`): the published run's sweep trial hours
(``studies.csv``'s ``trial_hours``, summed over its studies) over :data:`WORKERS` workers, the full protocol's
cost as the issue counts it (the seed reruns come on top, the same number for both protocols), against the same
sum with each study's trial hours shortened by the share saved on its dataset (where a dataset has no pruned run,
the median share of those measured).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kcal.core import layout
from kcal.publish import verdicts as V
from kcal.publish import whole_runs as W
from kcal.publish.protocol_runs import Runs, read_runs, reference_folders
from kcal.publish.questions import Published
from kcal.publish.questions import equivalence as E
from kcal.publish.trials import read_curve
from kcal.sweep.search import CPU_SECONDS

PLANNED_RUNS = {"heart-disease": 5, "breast-cancer": 5, "crime": 3}
"""Runs of the pruned protocol per dataset that issue 43 asks for; the verdict is provisional below these."""
BLOCKS = ("pruned:summary", "pruned")
"""The report's generated blocks that :func:`pruned_blocks` fills: the verdict (RESULTS.md), its counts (DETAILS.md)."""
NONE_YET = "(no pruned protocol run published yet: `kcal variant-report <root> <report> --commit <sha>`)"
BUDGET_STATES = ("complete", "pruned")
"""The trials of a sweep's budget, whose epochs count."""
WORKERS = 2
"""The worker processes the projection divides the trial hours by (the protocol's runs ran on 2)."""
REVERSED_PRUNER_COMMITS = ("191b484a", "498aff3f")
"""The commits that published pruned classification runs with the reversed pruner (module docstring): both
before 533776f, the direction's fix; every later pruned run ran on a commit after it (f5015f8 and on)."""


def superseded(folder: Path) -> set[str]:
    """The datasets of ``folder`` (one pruned run, :func:`kcal.core.layout.pruned_data_dir`) that come from a
    classification root recorded on one of :data:`REVERSED_PRUNER_COMMITS` (module docstring)."""
    record = Path(folder) / layout.PROVENANCE_FILE
    if not record.is_file():
        return set()
    found = json.loads(record.read_text(encoding="utf-8"))
    out = set()
    for root in found.get("roots", [found]):
        commit = str(root.get("commit", ""))
        if root.get("task") == "classification" and any(
            commit.startswith(c) or c.startswith(commit) for c in REVERSED_PRUNER_COMMITS if commit
        ):
            out |= set(root.get("datasets", []))
    return out


def without(runs: Runs, dropped: Mapping[str, set[str]]) -> Runs:
    """``runs`` less each run's ``dropped[run]`` datasets; a run left with no rows is left out."""
    out = Runs({}, {}, {})
    for name, results in runs.results.items():
        drop = dropped.get(name, set())
        if not set(results["dataset"]) - drop:
            continue
        for part, frame in (
            (out.results, results),
            (out.studies, runs.studies[name]),
            (out.trials, runs.trials[name]),
        ):
            part[name] = frame[~frame["dataset"].isin(drop)].reset_index(drop=True) if len(frame) else frame
    return out


def sweep_epochs(trials: pd.DataFrame, dataset: str) -> float:
    """One run on one dataset: the epochs its sweeps trained (the curves' lengths over its complete and pruned
    trials); NaN where the run kept no curves for the dataset."""
    if "curve" not in trials.columns:
        return np.nan
    t = trials[(trials["dataset"] == dataset) & trials["state"].isin(BUDGET_STATES)]
    lengths = t["curve"].map(lambda c: len(read_curve(c)))
    return float(lengths.sum()) if len(t) and (lengths > 0).all() else np.nan


def sweep_cpu_hours(trials: pd.DataFrame, dataset: str) -> float:
    """One run on one dataset: the CPU hours of its sweeps' budget trials; NaN where any trial lacks them."""
    if CPU_SECONDS not in trials.columns:
        return np.nan
    t = trials[(trials["dataset"] == dataset) & trials["state"].isin(BUDGET_STATES)]
    seconds = pd.to_numeric(t[CPU_SECONDS], errors="coerce")
    return float(seconds.sum()) / 3600 if len(t) and seconds.notna().all() else np.nan


def trial_hours(studies: pd.DataFrame, dataset: str) -> float:
    """One run on one dataset: its sweeps' trial hours (NaN where unrecorded)."""
    s = studies[studies["dataset"] == dataset]
    return float(s["trial_hours"].sum()) if len(s) and s["trial_hours"].notna().all() else np.nan


def _median(values) -> float:
    values = [v for v in values if np.isfinite(v)]
    return float(np.median(values)) if values else np.nan


def time_rows(full: Runs, pruned: Runs, curves: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per dataset of the pruned runs: the median sweep CPU hours of the full runs (``full``'s trials), their
    median sweep epochs (``curves``: the trials of every full-protocol run, by name), the same of the pruned runs,
    and the median trial hours of each; with the share saved (1 - pruned / full) of each."""
    rows = []
    for ds in sorted({d for s in pruned.studies.values() for d in s["dataset"]}):
        cf = _median(sweep_cpu_hours(t, ds) for t in full.trials.values())
        cp = _median(sweep_cpu_hours(t, ds) for t in pruned.trials.values())
        ef = _median(sweep_epochs(t, ds) for t in curves.values())
        ep = _median(sweep_epochs(t, ds) for t in pruned.trials.values())
        hf = _median(trial_hours(s, ds) for s in full.studies.values())
        hp = _median(trial_hours(s, ds) for s in pruned.studies.values())
        rows.append({"dataset": ds, "cpu_hours_full": cf, "cpu_hours_pruned": cp, "cpu_saved": 1 - cp / cf,
                     "epochs_full": ef, "epochs_pruned": ep, "epochs_saved": 1 - ep / ef,
                     "trial_hours_full": hf, "trial_hours_pruned": hp, "trial_saved": 1 - hp / hf})  # fmt: skip
    return pd.DataFrame(rows, columns=["dataset", "cpu_hours_full", "cpu_hours_pruned", "cpu_saved", "epochs_full", "epochs_pruned", "epochs_saved",
                                       "trial_hours_full", "trial_hours_pruned", "trial_saved"])  # fmt: skip


def saved_shares(times: pd.DataFrame) -> dict[str, float]:
    """Per dataset, the share of a sweep that pruning saves: of CPU hours where measured, else of epochs, else of
    trial hours."""
    out = {}
    for r in times.itertuples():
        share = next((x for x in (r.cpu_saved, r.epochs_saved, r.trial_saved) if np.isfinite(x)), np.nan)
        if np.isfinite(share):
            out[r.dataset] = float(share)
    return out


def projection(published: pd.DataFrame, saved: Mapping[str, float]) -> tuple[float, float]:
    """(full, pruned) hours of the published run's sweeps on :data:`WORKERS` workers (module docstring): its
    studies' trial hours, each times ``1 - saved[dataset]`` for the pruned (a dataset without a share: the median
    of ``saved``), summed and divided by the workers."""
    s = published.dropna(subset=["trial_hours"])
    default = float(np.median(list(saved.values())))
    share = s["dataset"].map(lambda d: saved.get(d, default))
    hours = s["trial_hours"].astype(float)
    return float(hours.sum()) / WORKERS, float((hours * (1 - share)).sum()) / WORKERS


@dataclass
class PrunedComparison:
    pruner: str
    runs: dict[str, list[str]]  # dataset -> the pruned runs that hold it and are judged
    full_runs: dict[str, list[str]]
    judgement: E.Judgement
    times: pd.DataFrame
    projected: tuple[float, float]
    final: bool
    cases: list[W.Case]  # the verdict per dataset, over whole runs
    superseded: dict[str, list[str]]  # dataset -> the runs of the reversed pruner, not judged

    @property
    def equivalent(self) -> bool:
        return bool(self.cases) and all(c.outcome == V.EQUIVALENT for c in self.cases)


def compare_pruner(data: Path, pruner: str, folders: Mapping[str, Path]) -> PrunedComparison:
    """The verdict, the time saved and the projection of one pruner's runs (``folders``: by run name), the
    datasets of reversed-pruner roots (:func:`superseded`) left out."""
    dropped = {n: superseded(f) for n, f in folders.items()}
    read = read_runs(folders)
    pruned = without(read, dropped)
    gone = {d: sorted(n for n, r in read.results.items() if d in dropped[n] and d in set(r["dataset"]))
            for d in sorted({d for ds in dropped.values() for d in ds})}  # fmt: skip
    datasets = {d for r in pruned.results.values() for d in r["dataset"]}
    full = read_runs(reference_folders(data), datasets)
    judgement = E.judge(full.results, pruned.results, full.studies, pruned.studies)
    runs = {
        d: sorted(n for n, r in pruned.results.items() if d in set(r["dataset"])) for d in sorted(datasets)
    }
    cases = W.judge([W.dataset_case(({n: full.results[n] for n in full.results}, full.studies),
                                    ({n: pruned.results[n] for n in runs[d]}, pruned.studies), d, pruner)
                     for d in sorted(datasets)])  # fmt: skip
    full_runs = {
        d: sorted(n for n, r in full.results.items() if d in set(r["dataset"])) for d in sorted(datasets)
    }
    workers = read_runs(
        {f"{label}/{n}": f for (label, n), f in layout.workers_data_dirs(data).items()}, datasets
    )
    times = time_rows(full, pruned, {**full.trials, **workers.trials})
    saved = saved_shares(times)
    published = pd.read_csv(Path(data) / layout.STUDIES_FILE)
    projected = projection(published, saved) if saved else (np.nan, np.nan)
    final = all(len(runs.get(d, [])) >= n for d, n in PLANNED_RUNS.items())
    return PrunedComparison(pruner, runs, full_runs, judgement, times, projected, final, cases,
                            {d: r for d, r in gone.items() if r})  # fmt: skip


def comparisons(data: Path) -> list[PrunedComparison]:
    """Every pruner with published runs under ``data``."""
    found = layout.pruned_data_dirs(data)
    out = []
    for pruner in sorted({p for p, _ in found}):
        out.append(compare_pruner(Path(data), pruner, {n: f for (p, n), f in found.items() if p == pruner}))
    return out


# ---- the report's blocks -------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return "—" if not np.isfinite(x) else f"{100 * x:.0f} %"


def _n(x: float, spec: str = ".0f") -> str:
    return "—" if not np.isfinite(x) else format(x, spec)


def _passes(passes: bool | None) -> str:
    return {True: "passes", False: "fails", None: "untested"}[passes]


def _scores(values: Mapping[str, float]) -> str:
    """A side's per-run values (signed: higher is better), in run order."""
    return " / ".join(f"{v:.4g}" for _, v in sorted(values.items())) or "—"


def _h(x: float) -> str:
    return "—" if not np.isfinite(x) else f"{x:.2f} h"


def _runs_in(c: PrunedComparison) -> str:
    parts = [f"{d} {len(c.runs.get(d, []))} of {n}" for d, n in PLANNED_RUNS.items()]
    state = "final" if c.final else "provisional until all are in"
    return f"judged runs in (of the fixed pruner): {', '.join(parts)}; {state}"


def verdicts(c: PrunedComparison) -> str:
    """The verdict per dataset, e.g. ``heart-disease worse, crime inconclusive: needs 40 runs``."""
    return ", ".join(f"{k.dataset} {k.words}" for k in c.cases)


def superseded_text(c: PrunedComparison) -> str:
    """The runs of the reversed pruner, not judged (module docstring)."""
    if not c.superseded:
        return ""
    runs = "; ".join(f"{d}: {', '.join(r)}" for d, r in c.superseded.items())
    return (f"Superseded, not judged: the runs of the reversed pruner (recorded on "
            f"{', '.join(REVERSED_PRUNER_COMMITS)}, before the direction's fix 533776f), {runs}.")  # fmt: skip


def summary_line(c: PrunedComparison) -> str:
    saved = ", ".join(f"{d} {_pct(v)}" for d, v in saved_shares(c.times).items())
    full, pruned = c.projected
    ship = ("it may replace the full protocol" if c.equivalent and c.final
            else "it ships only as an experiment; the full protocol stays the reference")  # fmt: skip
    lines = [f"**`{c.pruner}`: {verdicts(c)}** ({_runs_in(c)}), over whole runs (`kcal.publish.whole_runs`: exact "
             f"permutation tests, Holm over its {len(c.cases)} datasets): {ship}. Share of the sweeps saved (median "
             f"over runs; of CPU hours where both sides recorded them, else of epochs, else of trial hours): {saved}; "
             f"the seven datasets' sweeps on {WORKERS} workers, projected from the published run's trial hours: "
             f"{full:.1f} h -> {pruned:.1f} h. " + superseded_text(c)]  # fmt: skip
    lines += [f"{k.dataset}, {k.words} ({len(k.best[1])} pruned vs {len(k.best[0])} full runs): {W.case_text(k)}."
              for k in c.cases]  # fmt: skip
    return " ".join(line.strip() for line in lines)


def summary_block(found: list[PrunedComparison]) -> str:
    if not found:
        return NONE_YET
    return "\n".join(f"- {summary_line(c)}" for c in found)


def details_block(found: list[PrunedComparison]) -> str:
    if not found:
        return NONE_YET
    out = []
    for c in found:
        j = c.judgement
        out += [f"**`{c.pruner}`: {verdicts(c)}** ({_runs_in(c)}). Pruned runs judged: "
                + "; ".join(f"{d}: {', '.join(r)}" for d, r in c.runs.items())
                + ". Full runs: " + "; ".join(f"{d}: {', '.join(r)}" for d, r in c.full_runs.items()) + ". "
                + superseded_text(c), "",
                "| dataset | best validation score, full runs | pruned runs | rank score of the cells, full runs | "
                "pruned runs | verdict |", "|---|---|---|---|---|---|"]  # fmt: skip
        for k in c.cases:
            out.append(f"| {k.dataset} | {_scores(k.best[0])} | {_scores(k.best[1])} | {_scores(k.rank[0])} | "
                       f"{_scores(k.rank[1])} | {k.words} |")  # fmt: skip
        out += ["", f"The earlier per-cell rule (`kcal.publish.questions.equivalence`, fixed before the runs; no "
                f"longer the verdict) on the same runs: {j.verdict}.", "",
                "| count | measured | passes |", "|---|---|---|"]  # fmt: skip
        for s in j.shifts:
            shift = (f"{s.shift:+.2f} [{s.low:+.2f}, {s.high:+.2f}]" if np.isfinite(s.shift)
                     else "— (each side needs 2 runs)")  # fmt: skip
            out.append(f"| 1. cell shift, {s.dataset} (protocol SDs, 90 % interval, margin ±{E.MARGIN:g}) | "
                       f"{shift}, {s.runs_candidate} vs {s.runs_full} runs | {s.outcome} |")  # fmt: skip
        cells, claims, shares = j.cells, j.claims, j.shares
        out.append(f"| 2. cells differing (Welch, 5 %) | {cells['differing']} of {cells['tested']} (chance: at "
                   f"most {cells['high']}) | {_passes(cells['passes'])} |")  # fmt: skip
        out.append(f"| 3. claim outcomes agree | {claims['across']:.3f} across, {claims['within']:.3f} among the "
                   f"full runs (slack {E.AGREEMENT_SLACK:g}) | {_passes(claims['passes'])} |")  # fmt: skip
        out.append(f"| 4. selected regulariser share shifted | {shares['shifted']} of {shares['tested']} studies "
                   f"(chance: at most {shares['high']}; median shift {_n(shares['median_shift'], '+.2f')} decades) | "
                   f"{_passes(shares['passes'])} |")  # fmt: skip
        out += ["", "Time saved (module docstring; median over runs, full / pruned / saved): CPU hours and epochs, "
                "whatever the load; trial hours, wall time as the machines' loads were (the full runs' in their own "
                "sittings).", "",
                "| dataset | sweep CPU hours | sweep epochs | sweep trial hours |", "|---|---|---|---|"]  # fmt: skip
        for r in c.times.itertuples():
            out.append(f"| {r.dataset} | {_h(r.cpu_hours_full)} / {_h(r.cpu_hours_pruned)} / {_pct(r.cpu_saved)} | "
                       f"{_n(r.epochs_full)} / {_n(r.epochs_pruned)} / {_pct(r.epochs_saved)} | "
                       f"{_h(r.trial_hours_full)} / {_h(r.trial_hours_pruned)} / {_pct(r.trial_saved)} |")  # fmt: skip
        full, pruned = c.projected
        out += ["", f"The seven datasets' sweeps on {WORKERS} workers, projected (module docstring): {full:.1f} h for the "
                f"full protocol, {pruned:.1f} h pruned ({_pct(1 - pruned / full)} less).", ""]  # fmt: skip
    return "\n".join(out).rstrip()


def pruned_blocks(data: Path) -> dict[str, str]:
    """The report's generated blocks :data:`BLOCKS`: ``pruned:summary`` (RESULTS.md) and ``pruned`` (DETAILS.md)."""
    found = comparisons(Path(data))
    return {"pruned:summary": summary_block(found), "pruned": details_block(found)}


def report_blocks(published: Published) -> dict[str, str]:
    """:func:`pruned_blocks` of the published data folder (:mod:`kcal.publish.questions`)."""
    return pruned_blocks(published.data)
