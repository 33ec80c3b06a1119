"""Every trial of a reproduction's sweeps as one table: what the protocol chose from, kept as package data.

One row per trial of each paper-selection study in a root (its Optuna storage, default ``<root>/sweeps.db``):
the study, the trial's number, state and kcal status, the selection score (``value``: the validation
metric the study optimises, in the study's direction), the sampled parameters (JSON), the per-epoch
validation curve (``curve``: JSON list of :data:`kcal.sweep.search.CURVE_KEY` by epoch, kept for studies run
since curves were recorded; empty before), the epochs trained and the regulariser's share of the loss
(:data:`TRIAL_ATTRS`; ``reg_share_median`` / ``reg_share_at_best``, :func:`kcal.sweep.search.reg_share`), and every number of
the trial's ``metrics.json`` (validation and test metrics in both flavours; empty where the trial left no
file, e.g. a failed one, or one whose files stayed on another machine). ``kcal.publish.report`` writes it per
dataset and objective (:func:`write_trials`) beside the published results, so that budget curves
(:mod:`kcal.publish.budget`) and selection-spread estimates can be recomputed without the run's root.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from kcal.core import layout
from kcal.sweep.search import CPU_SECONDS, REG_SHARE_KEYS
from kcal.sweep.studies import STATUS

KEY_COLUMNS = ["dataset", "objective", "study", "number", "state", "status", "direction", "value", "params",
               "curve"]  # fmt: skip
"""The columns every trials table starts with; each metric of the trials' ``metrics.json`` follows."""
TRIAL_ATTRS = ("epochs", "best_epoch", *REG_SHARE_KEYS, CPU_SECONDS)
"""User attributes of a trial (:mod:`kcal.sweep.search`) the table keeps: how long it trained, and whether its
regulariser acted (what a pruning replay compares), and its CPU seconds (recorded since 2026-11-27)."""
METRIC_PREFIXES = ("val/", "test/", "test_recal/", "official/")
"""Keys of a trial's ``metrics.json`` that the table keeps (numbers only)."""


def trial_metrics(root: Path, dataset: str, objective: str, number: int) -> dict[str, float]:
    """The numbers of a trial's ``metrics.json`` under :data:`METRIC_PREFIXES` (empty when it has none)."""
    path = layout.metrics_file(layout.trial_dir(layout.sweep_dir(root, dataset, objective), number))
    if not path.is_file():
        return {}
    metrics = json.loads(path.read_text())
    return {k: float(v) for k, v in metrics.items()
            if k.startswith(METRIC_PREFIXES) and isinstance(v, int | float) and not isinstance(v, bool)}  # fmt: skip


def curve_text(values: dict[int, float]) -> str | None:
    """A trial's per-epoch validation curve (its Optuna intermediate values, epoch 0 first) as a JSON list with
    7 significant digits, or None when it reported none (trials of studies run before curves were kept)."""
    if not values:
        return None
    return json.dumps([float(f"{values[e]:.7g}") for e in sorted(values)])


def read_curve(text) -> list[float]:
    """The curve of a trials table's ``curve`` cell (empty for a trial without one)."""
    return json.loads(text) if isinstance(text, str) and text else []


def trial_rows(root: Path, storage=None) -> pd.DataFrame:
    """One row per trial of every paper-selection study in ``root``'s storage (``storage``: a URL or an
    Optuna storage; default ``<root>/sweeps.db``), sorted by dataset, objective and trial number."""
    import optuna

    storage = storage or layout.sqlite_url(root)
    rows = []
    for name in sorted(optuna.get_all_study_names(storage)):
        dataset, objective, _, selection = layout.parse_study_name(name)
        if selection != layout.PAPER_SELECTION:
            continue
        study = optuna.load_study(study_name=name, storage=storage)
        direction = study.direction.name.lower()
        for t in study.get_trials(deepcopy=False):
            rows.append({
                "dataset": dataset, "objective": objective, "study": name, "number": t.number,
                "state": t.state.name.lower(), "status": t.user_attrs.get(STATUS, ""), "direction": direction,
                "value": t.value if t.values is not None and len(t.values) == 1 else None,
                "params": json.dumps(t.params, sort_keys=True),
                "curve": curve_text(t.intermediate_values),
                **{k: t.user_attrs[k] for k in TRIAL_ATTRS if k in t.user_attrs},
                **trial_metrics(root, dataset, objective, t.number),
            })  # fmt: skip
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=KEY_COLUMNS)
    metrics = sorted(c for c in frame.columns if c not in KEY_COLUMNS)
    return frame[KEY_COLUMNS + metrics].sort_values(["dataset", "objective", "number"], ignore_index=True)


def write_trials(rows: pd.DataFrame, data: Path) -> list[Path]:
    """Write ``rows`` as one CSV per (dataset, objective) under ``data`` (:func:`kcal.core.layout.trials_table`),
    replacing those pairs' earlier tables; returns the files written."""
    written = []
    for (dataset, objective), group in rows.groupby(["dataset", "objective"], sort=True):
        path = layout.trials_table(data, dataset, objective)
        path.parent.mkdir(parents=True, exist_ok=True)
        group.dropna(axis=1, how="all").to_csv(path, index=False, float_format="%.7g")
        written.append(path)
    return written


def read_trials(data: Path) -> pd.DataFrame:
    """Every trials table under ``data`` (published package data), as one frame."""
    files = layout.trials_tables(data)
    if not files:
        return pd.DataFrame(columns=KEY_COLUMNS)
    return pd.concat([pd.read_csv(p) for p in files], ignore_index=True)


def selection_scores(rows: pd.DataFrame) -> dict[tuple[str, str], tuple[list[float], bool]]:
    """``{(dataset, objective): (scores of complete trials, maximize)}``: what a budget curve is drawn from."""
    out = {}
    for (dataset, objective), group in rows.groupby(["dataset", "objective"], sort=True):
        done = group[(group["state"] == "complete") & group["value"].notna()]
        if len(done):
            out[(dataset, objective)] = (
                done["value"].astype(float).tolist(),
                done["direction"].iloc[0] == "maximize",
            )
    return out
