"""Is a pruned protocol the full one, cheaper? Its runs judged by the rule written before them, and what it saves.

**The runs.** A pruned protocol's runs are published by ``kcal variant-report`` under
``<data>/pruned/<pruner>/sampler_seed=<k>/`` (:func:`kcal.core.layout.pruned_data_dir`): the whole protocol with
``sweep.pruner=<pruner>`` and the sampler seeds of the full protocol's runs, on 2 workers. The *full runs* are
the published run and its replicates (:mod:`kcal.publish.protocol_spread`). Both are restricted to the datasets
the pruned runs hold, so every count compares like with like.

**The verdict** is :func:`kcal.publish.equivalence.judge` (its four counts and their constants were fixed
before any pruned run), *provisional* until :data:`PLANNED_RUNS` runs of each dataset are in (issue 43: 5 on
heart-disease and breast-cancer, 3 on crime). A protocol that is not *equivalent* ships only as an experiment:
the full protocol stays the reference.

**What it saves, measured** (:func:`time_rows`), per dataset, the median over runs of

* the sweeps' trial hours (``studies.csv``'s ``trial_hours``: every trial's wall time, summed over the
  dataset's objectives), pruned runs against full runs;
* the whole protocol's wall time on the dataset (from its first study's ``sweep_start`` to its last
  ``seeds_end``), pruned against full;

both wall times, so they are only as comparable as the machines' loads were (the runs' ``provenance.json``
names the command; DETAILS.md says on which machine they ran).

**The seven datasets, projected** (:func:`projection`): the published run's time per study (``sweep_end -
sweep_start`` for the sweep, ``seeds_end - sweep_end`` for the seeds, both wall, on 2 workers), summed over the
studies, against the same sum with each sweep shortened by the measured share of trial hours saved on its
dataset (where a dataset has no pruned run: the median share of those measured).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kcal.core import layout
from kcal.publish import equivalence as E
from kcal.publish.protocol_spread import PUBLISHED
from kcal.publish.table_cells import load_results

PLANNED_RUNS = {"heart-disease": 5, "breast-cancer": 5, "crime": 3}
"""Runs of the pruned protocol per dataset that issue 43 asks for; the verdict is provisional below these."""
NONE_YET = "(no pruned protocol run published yet: `kcal variant-report <root> <report> --commit <sha>`)"


@dataclass
class Folders:
    results: dict[str, pd.DataFrame]
    studies: dict[str, pd.DataFrame]


def read(folders: Mapping[str, Path], datasets: set[str] | None = None) -> Folders:
    """Each run's ``results.csv`` and ``studies.csv``, by name, restricted to ``datasets`` (None: all)."""
    out = Folders({}, {})
    for name, folder in folders.items():
        results = load_results(layout.results_file(folder))
        studies_file = Path(folder) / layout.STUDIES_FILE
        studies = pd.read_csv(studies_file) if studies_file.is_file() else pd.DataFrame(columns=["dataset"])
        if datasets is not None:
            results = results[results["dataset"].isin(datasets)]
            studies = studies[studies["dataset"].isin(datasets)]
        if len(results):
            out.results[name], out.studies[name] = (
                results.reset_index(drop=True),
                studies.reset_index(drop=True),
            )
    return out


def full_folders(data: Path) -> dict[str, Path]:
    """The full protocol's runs: the published run and its replicates."""
    return {PUBLISHED: Path(data), **layout.replicate_data_dirs(data)}


def _hours(end: pd.Series, start: pd.Series) -> pd.Series:
    return (pd.to_datetime(end) - pd.to_datetime(start)).dt.total_seconds() / 3600


def dataset_times(studies: pd.DataFrame, dataset: str) -> tuple[float, float]:
    """One run on one dataset: (its sweeps' trial hours, its whole protocol's wall hours); NaN where unrecorded."""
    s = studies[studies["dataset"] == dataset]
    if s.empty:
        return np.nan, np.nan
    trial = float(s["trial_hours"].sum()) if s["trial_hours"].notna().all() else np.nan
    span = np.nan
    if s["sweep_start"].notna().all() and s["seeds_end"].notna().all():
        span = float(_hours(pd.Series([s["seeds_end"].max()]), pd.Series([s["sweep_start"].min()])).iloc[0])
    return trial, span


def time_rows(full: Folders, pruned: Folders) -> pd.DataFrame:
    """Per dataset of the pruned runs: the median trial hours and wall hours of the full and the pruned runs
    and the share saved (1 - pruned / full) of each."""
    rows = []
    for ds in sorted({d for s in pruned.studies.values() for d in s["dataset"]}):
        f = np.array([dataset_times(s, ds) for s in full.studies.values()], float).reshape(-1, 2)
        p = np.array([dataset_times(s, ds) for s in pruned.studies.values()], float).reshape(-1, 2)
        f, p = np.nanmedian(f, axis=0), np.nanmedian(p, axis=0)
        rows.append({"dataset": ds, "trial_hours_full": f[0], "trial_hours_pruned": p[0],
                     "trial_saved": 1 - p[0] / f[0], "wall_hours_full": f[1], "wall_hours_pruned": p[1],
                     "wall_saved": 1 - p[1] / f[1]})  # fmt: skip
    return pd.DataFrame(rows)


def projection(published: pd.DataFrame, saved: Mapping[str, float]) -> tuple[float, float]:
    """(full, pruned) wall hours of the published run's studies (module docstring): each sweep's wall time
    times ``1 - saved[dataset]`` (a dataset without a share: the median of ``saved``) plus its seeds' time."""
    s = published.dropna(subset=["sweep_start", "sweep_end", "seeds_end"])
    sweep, seeds = _hours(s["sweep_end"], s["sweep_start"]), _hours(s["seeds_end"], s["sweep_end"])
    default = float(np.median(list(saved.values())))
    share = s["dataset"].map(lambda d: saved.get(d, default))
    return float((sweep + seeds).sum()), float((sweep * (1 - share) + seeds).sum())


@dataclass
class PrunedComparison:
    pruner: str
    runs: dict[str, list[str]]  # dataset -> the pruned runs that hold it
    full_runs: dict[str, list[str]]
    judgement: E.Judgement
    times: pd.DataFrame
    projected: tuple[float, float]
    final: bool


def compare_pruner(data: Path, pruner: str, folders: Mapping[str, Path]) -> PrunedComparison:
    """The verdict, the time saved and the projection of one pruner's runs (``folders``: by run name)."""
    pruned = read(folders)
    datasets = {d for r in pruned.results.values() for d in r["dataset"]}
    full = read(full_folders(data), datasets)
    judgement = E.judge(full.results, pruned.results, full.studies, pruned.studies)
    runs = {
        d: sorted(n for n, r in pruned.results.items() if d in set(r["dataset"])) for d in sorted(datasets)
    }
    full_runs = {
        d: sorted(n for n, r in full.results.items() if d in set(r["dataset"])) for d in sorted(datasets)
    }
    times = time_rows(full, pruned)
    saved = {r.dataset: r.trial_saved for r in times.itertuples() if np.isfinite(r.trial_saved)}
    published = pd.read_csv(Path(data) / layout.STUDIES_FILE)
    projected = projection(published, saved) if saved else (np.nan, np.nan)
    final = all(len(runs.get(d, [])) >= n for d, n in PLANNED_RUNS.items())
    return PrunedComparison(pruner, runs, full_runs, judgement, times, projected, final)


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


def _h(x: float) -> str:
    return "—" if not np.isfinite(x) else f"{x:.2f} h"


def _runs_in(c: PrunedComparison) -> str:
    parts = [f"{d} {len(c.runs.get(d, []))} of {n}" for d, n in PLANNED_RUNS.items()]
    state = "final" if c.final else "provisional until all are in"
    return f"runs in: {', '.join(parts)}; {state}"


def summary_line(c: PrunedComparison) -> str:
    j = c.judgement
    saved = ", ".join(f"{r.dataset} {_pct(r.trial_saved)}" for r in c.times.itertuples())
    full, pruned = c.projected
    ship = ("it may replace the full protocol" if j.verdict == E.EQUIVALENT and c.final
            else "it ships only as an experiment; the full protocol stays the reference")  # fmt: skip
    return (f"**`{c.pruner}`: {j.verdict}** ({_runs_in(c)}) by the rule of `kcal.publish.equivalence`, fixed "
            f"before the runs: {ship}. Sweep trial hours saved (median over runs): {saved}; the seven datasets' "
            f"protocol, projected from the published run's study times: {full:.1f} h -> {pruned:.1f} h.")  # fmt: skip


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
        out += [f"**`{c.pruner}`: {j.verdict}** ({_runs_in(c)}). Pruned runs: "
                + "; ".join(f"{d}: {', '.join(r)}" for d, r in c.runs.items())
                + ". Full runs: " + "; ".join(f"{d}: {', '.join(r)}" for d, r in c.full_runs.items()) + ".", "",
                "| count | measured | passes |", "|---|---|---|"]  # fmt: skip
        for s in j.shifts:
            out.append(f"| 1. cell shift, {s.dataset} (protocol SDs, 90 % interval, margin ±{E.MARGIN:g}) | "
                       f"{s.shift:+.2f} [{s.low:+.2f}, {s.high:+.2f}], {s.runs_candidate} vs {s.runs_full} runs | "
                       f"{s.outcome} |")  # fmt: skip
        cells, claims, shares = j.cells, j.claims, j.shares
        out.append(f"| 2. cells differing (Welch, 5 %) | {cells['differing']} of {cells['tested']} (chance: at "
                   f"most {cells['high']}) | {cells['passes']} |")  # fmt: skip
        out.append(f"| 3. claim outcomes agree | {claims['across']:.3f} across, {claims['within']:.3f} among the "
                   f"full runs (slack {E.AGREEMENT_SLACK:g}) | {claims['passes']} |")  # fmt: skip
        out.append(f"| 4. selected regulariser share shifted | {shares['shifted']} of {shares['tested']} studies "
                   f"(chance: at most {shares['high']}; median shift {shares['median_shift']:+.2f} decades) | "
                   f"{shares['passes']} |")  # fmt: skip
        out += ["", "| dataset | sweep trial hours, full | pruned | saved | protocol wall hours, full | pruned | "
                "saved |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in c.times.itertuples():
            out.append(f"| {r.dataset} | {_h(r.trial_hours_full)} | {_h(r.trial_hours_pruned)} | "
                       f"{_pct(r.trial_saved)} | {_h(r.wall_hours_full)} | {_h(r.wall_hours_pruned)} | "
                       f"{_pct(r.wall_saved)} |")  # fmt: skip
        full, pruned = c.projected
        out += ["", f"The seven datasets, projected (module docstring): {full:.1f} h for the full protocol, "
                f"{pruned:.1f} h pruned ({_pct(1 - pruned / full)} less).", ""]  # fmt: skip
    return "\n".join(out).rstrip()


def pruned_blocks(data: Path) -> dict[str, str]:
    """The report's generated blocks ``pruned:summary`` (RESULTS.md) and ``pruned`` (DETAILS.md)."""
    found = comparisons(Path(data))
    return {"pruned:summary": summary_block(found), "pruned": details_block(found)}
