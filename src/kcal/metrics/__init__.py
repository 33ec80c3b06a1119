"""Evaluation metrics in two flavours computed from the same prediction tensors.

* exact (whole evaluation set at once): :mod:`kcal.metrics.regression`,
  :mod:`kcal.metrics.classification`;
* official (reproduces the authors' logged numbers, with their per-batch computations):
  :mod:`kcal.metrics.official`;
* stateful ``torchmetrics.Metric`` classes that accumulate over batches:
  :mod:`kcal.metrics.stateful` (imported on demand; it needs torchmetrics).

Calling convention (shared with :mod:`kcal.mmd`, :mod:`kcal.baselines` and :mod:`kcal.losses`):

* arguments in the order prediction, target, conditioning features ``x``, then keyword-only options;
* a regression prediction is a forecast: a ``(mean, std)`` pair or a ``torch.distributions.Normal``
  (functions that only need ``cdf``/``log_prob`` accept any forecast object, e.g. a recalibrated one);
  a classification prediction is the ``(n, m)`` probability matrix (logits are refused);
* numpy arrays or torch tensors in, 0-dim torch tensors out; inputs are checked by :mod:`kcal.inputs`;
* ``bandwidth_y`` belongs to the kernel on the forecast/target variable, ``bandwidth_z`` to the kernel
  on the conditioning variable (x for ``kce`` and the individual form).
"""

from kcal.metrics.classification import accuracy, classwise_ece, ece, entropy, kce
from kcal.metrics.local import lce, lce_total
from kcal.metrics.official import (
    official_classification_metrics,
    official_dce,
    official_kce_bandwidths,
    official_qce,
    official_regression_nll,
)
from kcal.metrics.regression import (
    as_forecast,
    crps,
    dce,
    dce_sampled,
    decision_calibration_error,
    gaussian_nll,
    nll,
    pit,
    qce,
    qce_binned,
    qce_ecdf,
    sharpness,
)

__all__ = [
    "accuracy",
    "classwise_ece",
    "ece",
    "entropy",
    "kce",
    "lce",
    "lce_total",
    "as_forecast",
    "crps",
    "dce",
    "dce_sampled",
    "decision_calibration_error",
    "gaussian_nll",
    "nll",
    "pit",
    "qce",
    "qce_binned",
    "qce_ecdf",
    "sharpness",
    "official_classification_metrics",
    "official_dce",
    "official_kce_bandwidths",
    "official_qce",
    "official_regression_nll",
]
