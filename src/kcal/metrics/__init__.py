"""Evaluation metrics in two flavours computed from the same prediction tensors.

* exact (whole evaluation set at once): :mod:`kcal.metrics.regression`,
  :mod:`kcal.metrics.classification`;
* official (reproduces the authors' logged numbers, with their per-batch computations):
  :mod:`kcal.metrics.official`.
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
    crps_gaussian,
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
    "crps_gaussian",
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
