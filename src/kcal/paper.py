"""The paper's experimental grid and result format, each fact stated once and imported where needed.

* :data:`TASKS`: the two tasks (defined in :mod:`kcal.task_names`, which the library's checks read too);
* :data:`PAPER_DATASETS`: the paper's datasets per task, in the paper's table order (defined with the
  dataset registry, :mod:`kcal.data.registry`, which marks them ``in_paper``);
* :data:`PAPER_OBJECTIVES`: the objectives the paper compares per task (configs in
  ``configs/objective/``), in table order;
* :data:`RESULT_COLUMNS`: the columns of the tidy per-metric results that :mod:`kcal.reruns.seeds` writes and
  :mod:`kcal.publish.tables` reads.
"""

from __future__ import annotations

from kcal.data.registry import PAPER_CLASSIFICATION, PAPER_REGRESSION
from kcal.task_names import TASKS

PAPER_DATASETS: dict[str, tuple[str, ...]] = {
    "regression": PAPER_REGRESSION,
    "classification": PAPER_CLASSIFICATION,
}
PAPER_OBJECTIVES: dict[str, tuple[str, ...]] = {
    "regression": ("nll", "nll_mmd", "nll_mmd_tanh"),
    "classification": ("xe", "xe_mmce", "xe_kde", "xe_mmd"),
}
RESULT_COLUMNS = ("dataset", "objective", "recalibrator", "flavour", "metric", "mean", "se", "n")

__all__ = ["PAPER_DATASETS", "PAPER_OBJECTIVES", "RESULT_COLUMNS", "TASKS"]
