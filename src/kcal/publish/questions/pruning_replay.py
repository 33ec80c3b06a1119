"""Pruners replayed over finished studies: what Optuna's Median and SuccessiveHalving pruners would have cut,
and whether the protocol would still have selected what it selected.

    python -m kcal.publish.questions.pruning_replay <data folder> [<data folder> ...] [--out replay.csv]
    python -m kcal.publish.questions.pruning_replay --publish src/kcal/resources/results/full

``--publish <data>`` replays every folder under the published data folder ``<data>`` whose trials carry curves
(its runs on N worker processes, its replicates and experiments) and writes the rows to
``<data>/pruning_replay.csv``, which the report's ``pruning`` blocks read (:func:`pruning_blocks`).

A data folder is a published one (``src/kcal/resources/results/full``, a replicate's or an experiment's
folder) whose trials tables carry the trials' per-epoch validation curves (``curve``,
:mod:`kcal.publish.trials`; studies run before curves were kept have none and are left out).

The replay, per study and pruner setting (:data:`kcal.sweep.pruners.SETTINGS`): a new in-memory Optuna study with that pruner
receives the study's trials in the order they ran (trial number). Each trial reports, epoch by epoch, the
*running best* of its curve (validation NLL, for classes the cross-entropy), signed to the replayed study's
direction, through the class the live pruned sweep reports with (:class:`kcal.sweep.pruners.CurveReporter`),
and stops at the first epoch the pruner prunes it. The final selection is the paper's (the study's own
value: validation NLL, or accuracy with ECE ties), over the trials that were not pruned. The sampler is not
replayed: the same trials run in the same order, as if pruning had not changed what TPE sampled next (a live
pruned sweep samples other trials after the first prune), so this measures the pruner's decisions.

Measured per study (:func:`replay_study`):

* ``survived``: the full protocol's selected trial is not pruned;
* ``regret``: the selection value of the full selection minus that of the selection under pruning, in the
  study's direction (0 when the selected trial survives; > 0 is worse);
* ``epochs_saved``: 1 - epochs trained under pruning / epochs trained in full;
* ``reg_share`` / ``reg_share_full``: the regulariser's share (``reg_share_at_best``) of the trial selected
  under pruning and of the full selection: does pruning favour trials whose regulariser is off?
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import optuna
import pandas as pd

from kcal.core import layout
from kcal.publish.questions import Published
from kcal.publish.trials import read_curve, read_trials
from kcal.sweep.pruners import SETTINGS, CurveReporter

BLOCKS = ("pruning:summary", "pruning")
"""The report's generated blocks that :func:`pruning_blocks` fills: the chosen setting (RESULTS.md), every setting
(DETAILS.md)."""
COLUMNS = ["dataset", "objective", "source", "setting", "trials", "pruned", "survived", "regret",
           "epochs_full", "epochs_pruned", "epochs_saved", "selected_full", "selected_pruned", "reg_share_full",
           "reg_share"]  # fmt: skip


def epochs_under(
    pruner: optuna.pruners.BasePruner, curves: list[list[float]], direction: str = "minimize"
) -> list[int | None]:
    """For each curve, in order: the epochs it trains before the pruner stops it (None: not pruned), in a
    study of the replayed study's ``direction``, each epoch reported as the live sweep reports it
    (:class:`kcal.sweep.pruners.CurveReporter`)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction=direction, pruner=pruner, sampler=optuna.samplers.RandomSampler(0))
    out = []
    for curve in curves:
        trial = study.ask()
        report, stopped = CurveReporter(trial), None
        for epoch, value in enumerate(curve):
            if report(value, epoch):
                stopped = epoch + 1
                break
        if stopped is None:
            study.tell(trial, report.value)
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        out.append(stopped)
    return out


def selected(values: pd.Series, maximize: bool):
    """The index of the best value (the first of ties, as Optuna's best trial is the first)."""
    return values.idxmax() if maximize else values.idxmin()


def replay_study(trials: pd.DataFrame, setting: str) -> dict:
    """One study's replay under one of :data:`SETTINGS` (``trials``: its rows of a trials table)."""
    trials = trials.sort_values("number")
    ran = trials[trials["curve"].map(lambda c: len(read_curve(c)) > 0)]
    curves = [read_curve(c) for c in ran["curve"]]
    stops = epochs_under(SETTINGS[setting](), curves, str(trials["direction"].iloc[0]))
    ran = ran.assign(stop=pd.Series(stops, index=ran.index, dtype=object))
    maximize = trials["direction"].iloc[0] == "maximize"
    done = ran[(ran["state"] == "complete") & ran["value"].notna()]
    kept = done[done["stop"].isna()]
    full, pruned = selected(done["value"], maximize), selected(kept["value"], maximize) if len(kept) else None
    sign = 1.0 if maximize else -1.0
    regret = sign * (done.at[full, "value"] - kept.at[pruned, "value"]) if pruned is not None else math.inf
    epochs_full = sum(len(c) for c in curves)
    epochs_pruned = sum(len(c) if s is None else s for c, s in zip(curves, stops, strict=True))
    share = trials.get("reg_share_at_best")
    return {
        "trials": len(curves), "pruned": sum(s is not None for s in stops), "survived": pruned == full,
        "regret": regret, "epochs_full": epochs_full, "epochs_pruned": epochs_pruned,
        "epochs_saved": 1.0 - epochs_pruned / epochs_full if epochs_full else 0.0,
        "selected_full": int(done.at[full, "number"]),
        "selected_pruned": int(kept.at[pruned, "number"]) if pruned is not None else None,
        "reg_share_full": float(share[full]) if share is not None else math.nan,
        "reg_share": float(share[pruned]) if share is not None and pruned is not None else math.nan,
    }  # fmt: skip


def replay(folders: dict[str, Path], settings: list[str] | None = None) -> pd.DataFrame:
    """Every study with curves in the trials tables of ``folders`` (source name -> data folder), replayed
    under each setting; one row per (study, setting), columns :data:`COLUMNS`."""
    rows = []
    for source, folder in folders.items():
        trials = read_trials(folder)
        if "curve" not in trials.columns:
            continue
        for (dataset, objective), group in trials.groupby(["dataset", "objective"], sort=True):
            if not group["curve"].map(lambda c: len(read_curve(c)) > 0).any():
                continue
            group = group.reset_index(drop=True)
            for setting in settings or list(SETTINGS):
                rows.append({"dataset": dataset, "objective": objective, "source": source, "setting": setting,
                             **replay_study(group, setting)})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per setting: studies, share of studies whose selected trial survives, median and max regret, median
    epochs saved, and median selected regulariser share under pruning and in full."""
    return (
        rows.groupby("setting", sort=False)
        .agg(
            studies=("trials", "size"),
            survived=("survived", "mean"),
            regret_median=("regret", "median"),
            regret_max=("regret", "max"),
            epochs_saved=("epochs_saved", "median"),
            reg_share=("reg_share", "median"),
            reg_share_full=("reg_share_full", "median"),
        )  # fmt: skip
        .reset_index()
    )


MIN_SURVIVAL = 0.8
"""The setting a pruned protocol runs is chosen among those under which the full protocol's selected trial
survives in at least this share of the replayed studies (:func:`choose`)."""


def choose(table: pd.DataFrame) -> str | None:
    """The setting to run as a pruned protocol, by a rule fixed before the pruned runs: the highest share of
    studies whose selected trial survives, then the smallest largest regret, then the most epochs saved,
    among the settings with a survival of at least :data:`MIN_SURVIVAL`; None when no setting reaches it.
    ``table``: :func:`summary`'s."""
    ok = table[table["survived"] >= MIN_SURVIVAL - 1e-12]
    if ok.empty:
        return None
    ranked = ok.assign(neg_survived=-ok["survived"], neg_saved=-ok["epochs_saved"])
    return str(
        ranked.sort_values(["neg_survived", "regret_max", "neg_saved"], kind="stable").iloc[0]["setting"]
    )


def curve_sources(data: Path) -> dict[str, Path]:
    """The folders under the published data folder ``data`` whose trials tables carry curves, by a name
    relative to ``data`` (``.`` for ``data`` itself)."""
    folders = [Path(data), *layout.replicate_data_dirs(data).values(), *layout.experiment_data_dirs(data),
               *layout.workers_data_dirs(data).values()]  # fmt: skip
    out = {}
    for folder in folders:
        trials = read_trials(folder)
        if "curve" in trials.columns and trials["curve"].map(lambda c: len(read_curve(c)) > 0).any():
            out[folder.relative_to(data).as_posix() if folder != Path(data) else "."] = folder
    return out


def publish(data: Path) -> pd.DataFrame:
    """Replay every folder of :func:`curve_sources` and write ``<data>/pruning_replay.csv``; return its rows."""
    rows = replay(curve_sources(Path(data)))
    rows.to_csv(layout.pruning_replay_file(data), index=False, float_format="%.6g")
    return rows


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def pruning_blocks(data: Path) -> dict[str, str]:
    """The report's generated blocks :data:`BLOCKS`, ``pruning:summary`` (RESULTS.md) and ``pruning``
    (DETAILS.md), from the published ``pruning_replay.csv`` (none yet: a line saying so)."""
    path = layout.pruning_replay_file(data)
    if not path.is_file():
        none = "(no replay published yet: `python -m kcal.publish.questions.pruning_replay --publish <data>`)"
        return {"pruning:summary": none, "pruning": none}
    rows = pd.read_csv(path)
    table = summary(rows)
    n = int(rows.groupby(["source", "dataset", "objective"]).ngroups)
    sources = sorted(set(rows["source"]))
    pick = choose(table)
    lines = ["| pruner setting | studies | selected trial survives | median regret | largest regret | "
             "epochs saved (median) | selected share, pruned / full (median) |",
             "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in table.itertuples(index=False):
        mark = " (chosen)" if r.setting == pick else ""
        lines.append(f"| `{r.setting}`{mark} | {r.studies} | {_pct(r.survived)} | {r.regret_median:.3g} | "
                     f"{r.regret_max:.3g} | {_pct(r.epochs_saved)} | {r.reg_share:.2g} / {r.reg_share_full:.2g} |")  # fmt: skip
    datasets = ", ".join(sorted(set(rows["dataset"])))
    details = (f"{n} studies ({datasets}; from {', '.join(f'`{s}`' for s in sources)}) replayed under each "
               "setting; regret in the study's selection score (validation accuracy for classes), 0 when the "
               f"selected trial survives.\n\n" + "\n".join(lines))  # fmt: skip
    if pick is None:
        verdict = (
            f"no setting keeps the full protocol's selected trial in {_pct(MIN_SURVIVAL)} of the studies"
        )
    else:
        r = table.set_index("setting").loc[pick]
        verdict = (f"the chosen setting, `{pick}`, keeps the full protocol's selected trial in "
                   f"{_pct(r['survived'])} of them (largest regret {r['regret_max']:.3g}) and saves a median "
                   f"{_pct(r['epochs_saved'])} of the sweeps' epochs")  # fmt: skip
    short = (f"Pruners replayed over {n} studies' per-epoch curves: {verdict}. Whether a pruned protocol gives "
             "the same answer is judged on its own replicates over whole runs by `kcal.publish.whole_runs` (below); the "
             "full protocol stays the reference unless one is shown equal.")  # fmt: skip
    return {"pruning:summary": short, "pruning": details}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m kcal.publish.questions.pruning_replay", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("folders", nargs="*", type=Path, help="published data folders with trials/ tables")
    p.add_argument("--out", type=Path, help="write the per-study rows here (CSV)")
    p.add_argument("--publish", type=Path, metavar="DATA", help="replay every folder of a published data folder "
                   "with curves into DATA/pruning_replay.csv")  # fmt: skip
    args = p.parse_args(argv)
    if bool(args.folders) == bool(args.publish):
        p.error("give data folders to replay, or --publish DATA (not both)")
    if args.publish:
        rows = publish(args.publish)
        print(f"wrote {layout.pruning_replay_file(args.publish)} ({len(rows)} rows)")
    else:
        rows = replay({str(f): f for f in args.folders})
    if rows.empty:
        raise SystemExit("no study with per-epoch curves in " + ", ".join(map(str, args.folders)))
    if args.out:
        rows.to_csv(args.out, index=False, float_format="%.6g")
        print(f"wrote {args.out} ({len(rows)} rows)")
    print(summary(rows).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(json.dumps({"studies": int(rows.groupby(["source", "dataset", "objective"]).ngroups)}))


if __name__ == "__main__":
    main()


def report_blocks(published: Published) -> dict[str, str]:
    """:func:`pruning_blocks` of the published data folder (:mod:`kcal.publish.questions`)."""
    return pruning_blocks(published.data)
