"""The paper's trainable calibration metrics: unbiased MMD estimates between a forecast variable and a target
variable given a conditioning variable Z (Marx, Zalouk & Ermon, NeurIPS 2023, Eq. (2)-(3)).

* :mod:`kcal.mmd.forms`: the calibration forms of the paper's Tables 1 and 2 as data;
* :mod:`kcal.mmd.estimators`: the estimators, :func:`regression_mmd` and :func:`classification_mmd`;
* :mod:`kcal.mmd.mmd2`: the generic U-statistics they are built on, :func:`sample_mmd2` and :func:`analytic_mmd2`;
* :mod:`kcal.mmd.fused`: their hot paths as fused forward-and-gradient passes (equal to rounding);
* :mod:`kcal.mmd.steps`: :class:`MMDStep`, the regulariser of a training step with its options resolved once;
* :mod:`kcal.mmd.loss`: :class:`MMDCalibrationLoss`, the same as a ``torch.nn.Module``.

Every public name is importable from here: ``from kcal.mmd import regression_mmd, MMDCalibrationLoss``.
"""

from kcal.mmd.estimators import CLASS_MEDIAN_SQ_DIST, classification_mmd, regression_mmd, resolve_bandwidth
from kcal.mmd.forms import (
    CLASSIFICATION_FORMS,
    REGRESSION_FORMS,
    ClassificationForm,
    RegressionForm,
    get_classification_form,
    get_regression_form,
)
from kcal.mmd.loss import DegenerateKernelWarning, MMDCalibrationLoss
from kcal.mmd.mmd2 import PAIRINGS, analytic_mmd2, mmd2_unbiased, sample_mmd2
from kcal.mmd.steps import BatchConstants, MMDStep

__all__ = [
    "CLASSIFICATION_FORMS",
    "CLASS_MEDIAN_SQ_DIST",
    "PAIRINGS",
    "REGRESSION_FORMS",
    "BatchConstants",
    "ClassificationForm",
    "DegenerateKernelWarning",
    "MMDCalibrationLoss",
    "MMDStep",
    "RegressionForm",
    "analytic_mmd2",
    "classification_mmd",
    "get_classification_form",
    "get_regression_form",
    "mmd2_unbiased",
    "regression_mmd",
    "resolve_bandwidth",
    "sample_mmd2",
]
