"""The MMD regulariser as a ``torch.nn.Module`` loss, for use inside any training loop.

:class:`MMDCalibrationLoss` is a thin module over :func:`kcal.mmd.regression_mmd` and
:func:`kcal.mmd.classification_mmd`: the constructor checks the options once (form names, kernel names,
bandwidths), ``forward`` computes the differentiable estimate on one batch (an unbiased MMD² estimate,
can be slightly negative). Calling convention (the library's): ``loss(prediction, target, x=None)``, where
the prediction is

* regression: the Gaussian forecast as ``(mean, std)`` or a ``torch.distributions.Normal``;
* classification: class probabilities ``(n, m)`` (``softmax(logits, -1)``).

Bandwidths left unset are the median heuristic on each batch (see :func:`kcal.mmd.regression_mmd`). A
bandwidth given as a number is checked against the batch on the first call and every ``check_every``
calls after it: a kernel that is numerically the identity or all ones (so the loss and its gradient are
~0) raises one :class:`DegenerateKernelWarning` per loss instance, with the numbers.
"""

from __future__ import annotations

import inspect
import warnings

import torch
from torch import Tensor, nn

from kcal import kernels
from kcal.inputs import TASKS, reject_renamed
from kcal.mmd.estimators import classification_mmd, regression_mmd
from kcal.mmd.forms import get_classification_form, get_regression_form

__all__ = ["DegenerateKernelWarning", "MMDCalibrationLoss"]

#: the estimators' parameters that are the call's data or set by the loss itself, not options
NOT_OPTIONS = ("forecast", "y", "probs", "labels", "x", "former_args", "form")


class DegenerateKernelWarning(UserWarning):
    """A kernel of a calibration loss is numerically the identity or all ones on a batch."""


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
            conditioning variable Z (x for ``individual``). None (the default): the median heuristic on
            each batch, in the kernel's convention (:func:`kcal.kernels.median_heuristic`).
        generator: for regression, the ``torch.Generator`` of the forecast draws (reproducible steps).
        check_kernels: check a bandwidth given as a number against the batch (x, phi(x), the
            probabilities or y, whichever its kernel acts on; one host synchronisation per check) and warn
            once (:class:`DegenerateKernelWarning`) when it makes the kernel degenerate.
        check_every: check on the first call and every ``check_every`` calls after it, until it warns.
        **options: any other keyword of :func:`kcal.mmd.regression_mmd` /
            :func:`kcal.mmd.classification_mmd` (``kernel_y``, ``kernel_z``, ``num_samples``, ``pairing``,
            ``features``, ``threshold``, ``validate_args``, ...). Another keyword
            raises a one-line ``TypeError`` listing the valid ones, here rather than at the first batch.

    ``forward(prediction, target, x=None, **batch_options)``: ``batch_options`` are per-batch inputs such
    as ``groups`` or ``eps``. Every batch is checked by the estimator (:mod:`kcal.inputs`): lengths always,
    NaN/inf values and std <= 0 while ``validate_args`` is true (the default; one host synchronisation per
    batch, pass ``validate_args=False`` once the pipeline is known to be right).
    """

    def __init__(
        self,
        form: str = "individual",
        task: str = "regression",
        bandwidth_y: float | None = None,
        bandwidth_z: float | None = None,
        generator: torch.Generator | None = None,
        check_kernels: bool = True,
        check_every: int = 100,
        **options,
    ):
        super().__init__()
        if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
            raise ValueError(f"check_every must be a positive integer, got {check_every!r}")
        self.check_kernels, self.check_every = bool(check_kernels), check_every
        self.calls, self.warned = 0, False
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; valid: {list(TASKS)}")
        self.task = task
        if task == "regression":
            self.form = get_regression_form(form).name
            self._fn = regression_mmd
        else:
            self.form = get_classification_form(form).name
            self._fn = classification_mmd
        reject_renamed("bandwidth_x", "bandwidth_z", options.pop("bandwidth_x", None))
        valid = [k for k in inspect.signature(self._fn).parameters if k not in NOT_OPTIONS]
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise TypeError(
                f"MMDCalibrationLoss(task={task!r}) got unknown option(s) {unknown}; valid: {valid}"
            )
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
        value = self._fn(
            prediction, target, x, form=self.form, **self.options, **batch_options
        )  # checks first
        if self.check_kernels and not self.warned and self.calls % self.check_every == 0:
            for name, report in self.kernel_reports(prediction, target, x):
                warnings.warn(f"MMDCalibrationLoss, {name}: {report}", DegenerateKernelWarning, stacklevel=2)
                self.warned = True
        self.calls += 1
        return value

    def kernel_reports(self, prediction, target, x: Tensor | None = None) -> list[tuple[str, str]]:
        """``(bandwidth name, diagnosis)`` for each kernel whose numeric bandwidth is degenerate on this
        batch (:func:`kcal.kernels.kernel_report`); kernels on other variables are not checked."""
        checks = []
        bw_z, bw_y = self.options.get("bandwidth_z"), self.options.get("bandwidth_y")
        kernel_z, kernel_y = self.options.get("kernel_z", "rbf"), self.options.get("kernel_y", "rbf")
        if self.task == "regression":
            fm = get_regression_form(self.form)
            if bw_z is not None and x is not None and fm.condition == "x":
                checks.append(("bandwidth_z", x, bw_z, kernel_z))
            features = self.options.get("features")
            if bw_z is not None and x is not None and fm.condition == "features" and features is not None:
                phi = features(x) if callable(features) else torch.as_tensor(x)[:, list(features)]
                checks.append(("bandwidth_z", phi, bw_z, kernel_z))
            if bw_y is not None and fm.target == "y":
                checks.append(("bandwidth_y", torch.as_tensor(target), bw_y, kernel_y))
        elif bw_z is not None:
            fm = get_classification_form(self.form)
            if fm.condition == "x" and x is not None:
                checks.append(("bandwidth_z", x, bw_z, kernel_z))
            elif fm.condition == "probs":
                checks.append(("bandwidth_z", torch.as_tensor(prediction), bw_z, kernel_z))
            elif fm.condition == "top_prob":
                checks.append(("bandwidth_z", torch.as_tensor(prediction).max(-1).values, bw_z, kernel_z))
        out = []
        validate = self.options.get("validate_args", True)
        for name, values, bandwidth, kernel in checks:
            values = torch.as_tensor(values)
            if values.shape[0] >= 2:
                report = kernels.kernel_report(values, bandwidth, kernel, validate_args=validate)
                if report is not None:
                    out.append((name, report))
        return out

    def extra_repr(self) -> str:
        shown = {k: v for k, v in self.options.items() if k != "generator"}
        return f"task={self.task!r}, form={self.form!r}, " + ", ".join(f"{k}={v!r}" for k, v in shown.items())
