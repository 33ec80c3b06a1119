"""How much of the MMD regulariser the selection leaves on: the kernels of each selected MMD configuration.

The MMD objectives compare forecasts and labels through a kernel on the inputs and one on the labels
(:func:`kcal.kernels.rbf`, ``k(a, b) = exp(-||a - b||^2 / h)``, the authors' convention). A study's selected
trial fixes both bandwidths (``objective.params.bandwidth_z`` for x, ``objective.params.bandwidth_y`` for y;
the tanh decision kernel has no y-bandwidth), and the regulariser can only act through pairs of rows whose
kernel values are not ~0 (x) and not ~constant (y). From the published ``studies.csv`` (and each replicate's)
and the dataset's number of features ``d`` (:mod:`kcal.data.registry`), per selected MMD configuration:

* ``log10_kx``: log10 of the x-kernel at squared distance ``2 d``, the mean squared distance between two rows
  whose d features are standardised to unit variance: ``-2 d / (h_x ln 10)``. Far below 0 (say below
  :data:`OFF_LOG10`), the kernel is the identity off near-duplicate rows, and the U-statistic's term is
  ~0 with its gradient: the regulariser is switched off by the kernel, whatever λ is.
* ``ky``: the y-kernel at squared distance 2: between two different one-hot classes (classification), or
  between two standardised regression targets at their mean squared distance (2, as for one feature). Near 1,
  the y-kernel is nearly constant: for classes, every row of ``D = Y - Q`` sums to 0, so ``D K = (1 - ky) D``
  and the term shrinks by ``1 - ky``.
* ``reg_share``: where ``studies.csv`` records it (``reg_share_median``, the selected trial's weighted
  regulariser over its loss, median over epochs), that measured share; empty otherwise.

These are read from the selection's own parameters: no rerun, so they hold for every published number.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import pandas as pd

from kcal.data.registry import get_spec

OFF_LOG10 = -10.0
"""An x-kernel below 10^OFF_LOG10 at the mean squared distance counts as switched off (far below any
float32 gradient the training sees; the published selections are at 10^-65 and below, or above 10^-1)."""
FLAT_KY = 0.9
"""A y-kernel above FLAT_KY between different labels counts as nearly constant (the term shrinks by 1 - ky)."""
COLUMNS = ["run", "dataset", "objective", "trial", "weight", "bandwidth_x", "d", "log10_kx", "bandwidth_y", "ky",
           "reg_share"]  # fmt: skip
SHARE_COLUMN = "reg_share_median"


def is_mmd(objective: str) -> bool:
    """Whether a published objective trains the MMD regulariser (``xe_mmd``, ``nll_mmd``, ``nll_mmd_tanh``)."""
    return "_mmd" in objective and "@" not in objective


def kernel_row(run: str, study: Mapping) -> dict:
    """One row of :func:`selected_kernels` from one ``studies.csv`` record."""
    params = json.loads(study["best_params"]) if isinstance(study["best_params"], str) else {}
    d = get_spec(study["dataset"]).d
    h_x = float(params.get("objective.params.bandwidth_z", math.nan))
    h_y = params.get("objective.params.bandwidth_y")
    share = study.get(SHARE_COLUMN, math.nan)
    return {
        "run": run, "dataset": study["dataset"], "objective": study["objective"], "trial": study["best_trial"],
        "weight": float(params.get("objective.weight", math.nan)), "bandwidth_x": h_x, "d": d,
        "log10_kx": -2.0 * d / (h_x * math.log(10.0)),
        "bandwidth_y": math.nan if h_y is None else float(h_y),
        "ky": math.nan if h_y is None else math.exp(-2.0 / float(h_y)),
        "reg_share": math.nan if share is None or share == "" else float(share),
    }  # fmt: skip


def selected_kernels(studies: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per run (``{run name: its studies.csv}``, the published run first) and selected MMD configuration: the
    columns :data:`COLUMNS` (module docstring)."""
    rows = [kernel_row(run, r) for run, frame in studies.items() for r in frame.to_dict("records")
            if is_mmd(r["objective"]) and not pd.isna(r["best_trial"])]  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def switched_off(row: Mapping) -> bool:
    """The regulariser is off in effect: the x-kernel below 10^OFF_LOG10 at the mean distance, or a class kernel
    above FLAT_KY between different labels."""
    return row["log10_kx"] < OFF_LOG10 or (not math.isnan(row["ky"]) and row["ky"] > FLAT_KY)


def power_of_ten(log10: float) -> str:
    """``1e-6371`` for log10 = -6370.9 (rounded to the nearest power), ``0.16`` above 1e-3, ``—`` for NaN (a
    bandwidth the study did not search, e.g. fixed by the median heuristic)."""
    if math.isnan(log10):
        return "—"
    if log10 > -3:
        return f"{10**log10:.2g}"
    return f"1e{round(log10)}"


def _g(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.3g}"


def kernels_markdown(kernels: pd.DataFrame) -> str:
    """The table of :func:`selected_kernels`, one line per run and selected configuration."""
    if kernels.empty:
        return "(no MMD study published)"
    share = kernels["reg_share"].notna().any()
    head = "| run | dataset | objective | trial | λ | h_x | d | k_x at 2d | h_y | k_y at 2 | off |"
    lines = [head + (" reg. share |" if share else ""), "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
             + ("---:|" if share else "")]  # fmt: skip
    for r in kernels.to_dict("records"):
        h_x, h_y, k_y = (_g(r[k]) for k in ("bandwidth_x", "bandwidth_y", "ky"))
        line = (f"| {r['run']} | {r['dataset']} | {r['objective']} | {int(r['trial'])} | {_g(r['weight'])} | {h_x} "
                f"| {r['d']} | {power_of_ten(r['log10_kx'])} | {h_y} | {k_y} | {'yes' if switched_off(r) else 'no'} |")  # fmt: skip
        if share:
            line += " — |" if math.isnan(r["reg_share"]) else f" {r['reg_share']:.2g} |"
        lines.append(line)
    return "\n".join(lines)
