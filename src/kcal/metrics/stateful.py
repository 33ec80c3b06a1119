"""``torchmetrics.Metric`` classes for the regression calibration metrics.

Each class is a thin stateful wrapper over the functions of :mod:`kcal.metrics.regression` and
:mod:`kcal.mmd`, in torchmetrics' split: the constructor checks the options, ``update(forecast, y, x=None)``
accumulates per-batch sufficient statistics (or, for the kernel calibration error, the rows themselves),
and ``compute()`` returns the SAME value as the function applied to all rows at once. Every class takes the
same ``update`` arguments (``x`` is ignored by all but :class:`KernelCalibrationError`), so they can sit
together in a ``torchmetrics.MetricCollection``. ``forecast`` is a ``(mean, std)`` pair or a
``torch.distributions.Normal`` (:class:`QuantileCalibrationError`, :class:`DecisionCalibrationError` and
:class:`NegativeLogLikelihood` accept any forecast with ``cdf``/``log_prob``, e.g. a recalibrated one).

==============================  ===============================================  =========================
class                           equals, on the whole set                         state
==============================  ===============================================  =========================
``QuantileCalibrationError``    ``qce_binned(pit(forecast, y), n_bins)``         bin counts (sum)
``DecisionCalibrationError``    ``dce(forecast, y, threshold)``                  three sums
``CRPS``                        ``crps(forecast, y)``                            sum, count
``NegativeLogLikelihood``       ``nll(forecast, y)``                             sum, count
``KernelCalibrationError``      ``regression_mmd((mean, std), y, x, ...)``       all rows (cat)
==============================  ===============================================  =========================

States are float64 sums, so the accumulated value matches the functional form to rounding.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric

from kcal.inputs import as_forecast, as_vector, gaussian_params
from kcal.kernels import check_positive
from kcal.metrics.regression import crps, nll, pit
from kcal.mmd import get_regression_form, regression_mmd

__all__ = [
    "CRPS",
    "DecisionCalibrationError",
    "KernelCalibrationError",
    "NegativeLogLikelihood",
    "QuantileCalibrationError",
]

_F64 = torch.float64


class _RegressionMetric(Metric):
    """Shared torchmetrics flags: lower is better, not differentiable, one update does not need the state."""

    is_differentiable = False
    higher_is_better = False
    full_state_update = False


class QuantileCalibrationError(_RegressionMetric):
    """Binned quantile calibration error ``1/2 sum_b |c_b/N - 1/B|`` of the PIT values (equal bins).

    Same definition as :func:`kcal.metrics.regression.qce_binned` (a calibrated forecaster scores ~0).
    """

    def __init__(self, n_bins: int = 20, **kwargs):
        super().__init__(**kwargs)
        if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
            raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
        self.n_bins = n_bins
        self.add_state("counts", default=torch.zeros(n_bins, dtype=_F64), dist_reduce_fx="sum")

    def update(self, forecast, y, x=None) -> None:
        u = pit(forecast, y).detach().clamp(0.0, 1.0)
        idx = torch.floor(u * self.n_bins).long().clamp_(0, self.n_bins - 1)
        self.counts += torch.bincount(idx, minlength=self.n_bins).to(self.counts)

    def compute(self) -> Tensor:
        return 0.5 * (self.counts / self.counts.sum() - 1.0 / self.n_bins).abs().sum()


class DecisionCalibrationError(_RegressionMetric):
    """Decision calibration error of the threshold decision at ``threshold`` (see ``dce``).

    ``sqrt(2) |1/n sum_i 1[y_i >= c] - 1/n sum_i Q_i(Yhat > c)|``, accumulated as sums over batches.
    """

    def __init__(self, threshold: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.threshold = float(threshold)
        for name in ("above", "prob_above", "n"):
            self.add_state(name, default=torch.zeros((), dtype=_F64), dist_reduce_fx="sum")

    def update(self, forecast, y, x=None) -> None:
        f = as_forecast(forecast)
        y = as_vector(y, "y").detach()
        p = 1.0 - f.cdf(torch.full_like(y, self.threshold)).detach()
        self.above += (y >= self.threshold).sum().to(_F64)
        self.prob_above += p.sum().to(_F64)
        self.n += y.shape[0]

    def compute(self) -> Tensor:
        a, p = self.above / self.n, self.prob_above / self.n
        return torch.sqrt(((1.0 - a) - (1.0 - p)) ** 2 + (a - p) ** 2)


class _RowMean(_RegressionMetric):
    """The mean over every row seen of a per-row score ``per_row(forecast, y, reduction="none")``."""

    per_row = None  # set by subclasses: a function of (forecast, y, reduction=...)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("total", default=torch.zeros((), dtype=_F64), dist_reduce_fx="sum")
        self.add_state("n", default=torch.zeros((), dtype=_F64), dist_reduce_fx="sum")

    def update(self, forecast, y, x=None) -> None:
        values = self.per_row(forecast, y, reduction="none").detach()
        self.total += values.sum().to(_F64)
        self.n += values.shape[0]

    def compute(self) -> Tensor:
        return self.total / self.n


class CRPS(_RowMean):
    """Mean closed-form CRPS of Gaussian forecasts, in target units (see ``crps``)."""

    per_row = staticmethod(crps)


class NegativeLogLikelihood(_RowMean):
    """Mean ``-forecast.log_prob(y)`` in nats (see ``nll``)."""

    per_row = staticmethod(nll)


class KernelCalibrationError(_RegressionMetric):
    """Kernel calibration error: the unbiased MMD² of :func:`kcal.mmd.regression_mmd` on all rows.

    A U-statistic over all pairs of rows, so the rows are kept (``cat`` states) and the estimate is
    computed once in ``compute``. The default ``pairing="analytic"`` integrates the Gaussian forecast out
    in closed form (no sampling noise, the same value on every call); the other options are those of
    ``regression_mmd`` (``form``, ``kernel_y``, ``bandwidth_y``, ``kernel_z``, ``bandwidth_z``, ...).
    Memory: O(n) for the rows, O(n^2) in ``compute``.
    """

    def __init__(
        self,
        form: str = "individual",
        bandwidth_y: float = 1.0,
        bandwidth_z: float = 1.0,
        pairing: str = "analytic",
        **options,
    ):
        metric_kwargs = {k: options.pop(k) for k in list(options) if k in _METRIC_KWARGS}
        super().__init__(**metric_kwargs)
        self.form = get_regression_form(form).name
        self.options = {
            "form": self.form,
            "bandwidth_y": check_positive("bandwidth_y", bandwidth_y),
            "bandwidth_z": check_positive("bandwidth_z", bandwidth_z),
            "pairing": pairing,
            **options,
        }
        self.uses_x = get_regression_form(form).condition in ("x", "features")
        for name in ("mean", "std", "y", "x"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, forecast, y, x=None) -> None:
        mean, std = gaussian_params(forecast)
        self.mean.append(as_vector(mean, "mean").detach())
        self.std.append(as_vector(std, "std").detach())
        self.y.append(as_vector(y, "y").detach())
        if self.uses_x:
            if x is None:
                raise ValueError(f"form {self.form!r} conditions on x: call update(forecast, y, x)")
            x = torch.as_tensor(x).detach()
            self.x.append(x[:, None] if x.ndim == 1 else x)

    def compute(self) -> Tensor:
        def cat(parts):
            return torch.cat(parts) if isinstance(parts, list) else parts

        x = cat(self.x) if self.uses_x else None
        return regression_mmd((cat(self.mean), cat(self.std)), cat(self.y), x, **self.options)


_METRIC_KWARGS = (
    "compute_on_cpu",
    "dist_sync_on_step",
    "process_group",
    "dist_sync_fn",
    "distributed_available_fn",
    "sync_on_compute",
    "compute_with_cache",
)
