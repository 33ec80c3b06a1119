"""Calibration regularisers as ``torch.nn.Module`` losses, for use inside any training loop.

Thin modules over the functions of :mod:`kcal.mmd` and :mod:`kcal.baselines`: the constructor checks the
options once (form names, kernel names, bandwidths), ``forward`` computes the differentiable estimate
on one batch. Calling convention (the library's): ``loss(prediction, target, x=None)``, where the
prediction is

* regression: the Gaussian forecast as ``(mean, std)`` or a ``torch.distributions.Normal``;
* classification: class probabilities ``(n, m)`` (``softmax(logits, -1)``; logits are refused while
  ``validate_args`` is true, which costs one host synchronisation per call, pass ``validate_args=False``
  once the pipeline is known to be right).

``MMDCalibrationLoss(form=...)`` is the paper's trainable calibration metric (an unbiased MMD² estimate,
can be slightly negative); ``MMCELoss`` and ``ECEKDELoss`` are the baselines.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from kcal import baselines, kernels, mmd

__all__ = ["ECEKDELoss", "MMCELoss", "MMDCalibrationLoss"]

TASKS = ("regression", "classification")


class MMDCalibrationLoss(nn.Module):
    """Unbiased MMD² calibration loss for a named calibration form (paper Tables 1 and 2).

    Args:
        form: a regression form of ``kcal.mmd.REGRESSION_FORMS`` (``individual``, ``quantile``,
            ``marginal``, ``decision``, ``group``, ``distribution``, ``local``, ...) or, with
            ``task="classification"``, one of ``kcal.mmd.CLASSIFICATION_FORMS`` (``canonical``,
            ``top_label``, ``marginal``, ``individual``).
        task: ``"regression"`` (Gaussian forecasts, forecast draws or closed form) or
            ``"classification"`` (probabilities, forecast marginalised analytically).
        bandwidth_y, bandwidth_z: kernel bandwidths on the forecast/target variable and on the
            conditioning variable Z (x for ``individual``).
        generator: for regression, the ``torch.Generator`` of the forecast draws (reproducible steps).
        **options: any other keyword of :func:`kcal.mmd.regression_mmd` /
            :func:`kcal.mmd.classification_mmd` (``kernel_y``, ``kernel_z``, ``num_samples``, ``pairing``,
            ``features``, ``threshold``, ...).

    ``forward(prediction, target, x=None, **batch_options)``: ``batch_options`` are per-batch inputs such
    as ``groups`` or ``eps``.
    """

    def __init__(
        self,
        form: str = "individual",
        task: str = "regression",
        bandwidth_y: float | None = None,
        bandwidth_z: float | None = None,
        generator: torch.Generator | None = None,
        **options,
    ):
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; valid: {list(TASKS)}")
        self.task = task
        if task == "regression":
            self.form = mmd.get_regression_form(form).name
            self._fn = mmd.regression_mmd
        else:
            self.form = mmd.get_classification_form(form).name
            self._fn = mmd.classification_mmd
        for name in ("kernel_y", "kernel_z"):
            if name in options:
                if task == "classification" and name == "kernel_y":
                    continue  # class kernels ("rbf", "delta") are checked by classification_mmd
                kernels.kernel_key(options[name])
        if bandwidth_y is not None:
            options["bandwidth_y"] = kernels.check_positive("bandwidth_y", bandwidth_y)
        if bandwidth_z is not None:
            options["bandwidth_z"] = kernels.check_positive("bandwidth_z", bandwidth_z)
        if generator is not None:
            if task != "regression":
                raise ValueError("generator drives the regression forecast draws; classification has none")
            options["generator"] = generator
        self.options = options

    def forward(self, prediction, target, x: Tensor | None = None, **batch_options) -> Tensor:
        return self._fn(prediction, target, x, form=self.form, **self.options, **batch_options)

    def extra_repr(self) -> str:
        shown = {k: v for k, v in self.options.items() if k != "generator"}
        return f"task={self.task!r}, form={self.form!r}, " + ", ".join(f"{k}={v!r}" for k, v in shown.items())


class MMCELoss(nn.Module):
    """MMCE of Kumar et al. (2018) on class probabilities (:func:`kcal.baselines.mmce`).

    ``scaling="kumar"`` (default) is the paper's weighted MMCE; ``scaling="authors"`` the extra
    ``1/m^2`` of the kernel-calibration authors' code.
    """

    def __init__(
        self, bandwidth: float = 0.4, weighted: bool = True, scaling: str = "kumar", validate_args=True
    ):
        super().__init__()
        if scaling not in baselines.MMCE_SCALINGS:
            raise ValueError(f"unknown MMCE scaling {scaling!r}; valid: {list(baselines.MMCE_SCALINGS)}")
        self.bandwidth = kernels.check_positive("bandwidth", bandwidth)
        self.weighted, self.scaling, self.validate_args = bool(weighted), scaling, bool(validate_args)

    def forward(self, probs, labels, x: Tensor | None = None) -> Tensor:
        return baselines.mmce(
            probs,
            labels,
            self.bandwidth,
            self.weighted,
            scaling=self.scaling,
            validate_args=self.validate_args,
        )


class ECEKDELoss(nn.Module):
    """L_p canonical ECE^KDE of Popordanoska et al. (2022) on class probabilities (``baselines.ece_kde``)."""

    def __init__(self, p: float = 1, bandwidth: float | None = None, validate_args: bool = True, **options):
        super().__init__()
        self.p = kernels.check_positive("p", p)
        self.bandwidth = None if bandwidth is None else kernels.check_positive("bandwidth", bandwidth)
        self.validate_args, self.options = bool(validate_args), options

    def forward(self, probs, labels, x: Tensor | None = None) -> Tensor:
        return baselines.ece_kde(
            probs, labels, self.p, self.bandwidth, validate_args=self.validate_args, **self.options
        )
