"""What every figure shares: headless figures (no pyplot, no global backend), saving, the run files a figure
reads (``config.yaml``, ``predictions.npz``), objective labels and colours."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from kcal.core import layout

FORMATS = ("png", "pdf")
DPI = 100

OBJECTIVE_LABELS = {
    "nll": "NLL",
    "nll_mmd": "NLL + MMD (RBF)",
    "nll_mmd_tanh": "NLL + MMD (tanh)",
    "nll_mmd_local": "NLL + MMD (local)",
    "xe": "XE",
    "xe_mmd": "XE + MMD",
    "xe_mmce": "XE + MMCE",
    "xe_kde": "XE + KDE",
}
OBJECTIVE_ORDER = list(OBJECTIVE_LABELS)
COLORS = {"nll": "#1f77b4", "nll_mmd": "#d62728", "nll_mmd_tanh": "#2ca02c", "nll_mmd_local": "#d62728",
          "xe": "#1f77b4", "xe_mmd": "#d62728", "xe_mmce": "#9467bd", "xe_kde": "#ff7f0e"}  # fmt: skip
#: distinct line styles too, so coinciding curves stay visible
LINESTYLES = {"nll": "-", "nll_mmd": "--", "nll_mmd_tanh": "-.", "nll_mmd_local": "--",
              "xe": "-", "xe_mmd": "--", "xe_mmce": "-.", "xe_kde": ":"}  # fmt: skip


class MissingInputError(FileNotFoundError):
    """An input the figure needs does not exist; the message names the command that produces it."""


def objective_label(name: str) -> str:
    return OBJECTIVE_LABELS.get(name, name)


def objective_sort_key(name: str) -> tuple[int, str]:
    return (OBJECTIVE_ORDER.index(name) if name in OBJECTIVE_ORDER else len(OBJECTIVE_ORDER), name)


def new_figure(width: float, height: float, layout: str | None = None):
    """A matplotlib Figure drawn with the Agg canvas: headless, thread-safe, no pyplot state.

    ``layout=None`` (margins set by the caller with ``subplots_adjust``) keeps per-run figures fast;
    pass ``"constrained"`` where speed does not matter."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, stem: Path) -> list[Path]:
    """Write ``stem.png`` and ``stem.pdf``; return their paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in FORMATS:
        path = stem.with_suffix(f".{fmt}")
        # no creation date in a PDF: a redrawn figure of the same numbers is the same file
        fig.savefig(path, format=fmt, dpi=DPI, metadata={"CreationDate": None} if fmt == "pdf" else None)
        paths.append(path)
    return paths


def load_config(run_dir: Path) -> DictConfig:
    path = Path(run_dir) / layout.CONFIG_FILE
    if not path.is_file():
        raise MissingInputError(f"{path} is missing; it is written by `kcal train` (kcal.run.run)")
    return OmegaConf.load(path)


def load_predictions(run_dir: Path) -> dict[str, np.ndarray]:
    path = Path(run_dir) / layout.PREDICTIONS_FILE
    if not path.is_file():
        raise MissingInputError(
            f"{path} is missing; it is written by `kcal train` for runs that finished with "
            "status ok (a diverged run has no predictions)"
        )
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}


def task_of(preds: dict) -> str:
    if "val_mean" in preds:
        return "regression"
    if "val_logits" in preds:
        return "classification"
    raise ValueError(f"predictions.npz holds neither regression nor classification keys: {sorted(preds)}")
