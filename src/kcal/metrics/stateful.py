"""``torchmetrics.Metric`` classes for the regression and classification calibration metrics.

Each class is a thin stateful wrapper over a function of :mod:`kcal.metrics.regression`,
:mod:`kcal.metrics.classification`, :mod:`kcal.baselines` or :mod:`kcal.mmd`, in torchmetrics' split: the
constructor checks the options, ``update`` accumulates per-batch sufficient statistics (or, for the
pairwise kernel metrics, the rows themselves), and ``compute()`` returns the SAME value as the function
applied to all rows at once.

* Regression classes take ``update(forecast, y, x=None)``; ``forecast`` is a ``(mean, std)`` pair or a
  ``torch.distributions.Normal`` (:class:`QuantileCalibrationError`, :class:`DecisionCalibrationError`
  and :class:`NegativeLogLikelihood` accept any forecast with ``cdf``/``log_prob``, e.g. a recalibrated
  one). ``x`` is ignored by all but :class:`KernelCalibrationError`.
* Classification classes take ``update(probs, labels, x=None)``: ``(n, m)`` class probabilities (checked
  by :func:`kcal.inputs.check_probs`, which refuses logits) and ``(n,)`` integer labels. ``x`` is ignored
  by all but :class:`ClassificationKernelCalibrationError` with a form conditioning on x (the default
  ``"individual"``, the paper's KCE).

Classes of one task share one ``update`` signature, so they can sit together in a
``torchmetrics.MetricCollection``.

========================================  =============================================  =====================
class                                     equals, on the whole set                       state
========================================  =============================================  =====================
``QuantileCalibrationError``              ``qce_binned(pit(forecast, y), n_bins)``       bin counts (sum)
``DecisionCalibrationError``              ``dce(forecast, y, threshold)``                three sums
``CRPS``                                  ``crps(forecast, y)``                          sum, count
``NegativeLogLikelihood``                 ``nll(forecast, y)``                           sum, count
``KernelCalibrationError``                ``regression_mmd((mean, std), y, x, ...)``     all rows (cat)
``TopLabelCalibrationError``              ``ece(probs, labels, n_bins, norm)``           per-bin sums
``ClasswiseCalibrationError``             ``classwise_ece(probs, labels, n_bins)``       per-(class, bin) sums
``MaximumMeanCalibrationError``           ``mmce(probs, labels, bandwidth, ...)``        all rows (cat)
``ClassificationKernelCalibrationError``  ``classification_mmd(probs, labels, x, ...)``  all rows (cat)
========================================  =============================================  =====================

States are float64 sums, so the accumulated value matches the functional form to rounding (the binned
classification metrics bin each confidence in the dtype it arrives in, as the functions do, and sum in
float64). States are registered with ``add_state``, so ``.to(device)`` (or a ``LightningModule``) moves
them, and ``reset()`` clears them.

Checks (:mod:`kcal.inputs`): every ``update`` checks its batch as the function checks its arguments:
lengths always, NaN/inf values, std <= 0, probability sums and label range while the constructor's
``validate_args`` is true (the default; one host synchronisation per ``update``). ``compute()`` before any
``update`` (or after ``reset()``) raises a one-line ``ValueError`` instead of a NaN or a ``torch.cat`` error.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchmetrics import Metric

from kcal.baselines import MMCE_SCALINGS, mmce
from kcal.inputs import (
    as_float,
    as_vector,
    check_probs,
    check_values,
    checked_forecast,
    checked_gaussian,
    same_length,
)
from kcal.kernels import check_positive, kernel_key
from kcal.metrics.classification import binned_calibration_error, binned_sums
from kcal.metrics.regression import crps, nll, pit
from kcal.mmd import classification_mmd, get_classification_form, get_regression_form, regression_mmd
from kcal.mmd.fused import check_analytic

__all__ = [
    "CRPS",
    "ClassificationKernelCalibrationError",
    "ClasswiseCalibrationError",
    "DecisionCalibrationError",
    "KernelCalibrationError",
    "MaximumMeanCalibrationError",
    "NegativeLogLikelihood",
    "QuantileCalibrationError",
    "TopLabelCalibrationError",
]

_F64 = torch.float64


class _CalibrationMetric(Metric):
    """Shared torchmetrics flags: lower is better, not differentiable, one update does not need the state.

    ``validate_args`` (keyword, default True): check the values of every batch in ``update``.
    :meth:`compute` raises ``ValueError`` before the first ``update``.
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, validate_args: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.validate_args = bool(validate_args)

    def _check_updated(self) -> None:
        if not self.update_called:
            raise ValueError(
                f"{type(self).__name__}.compute() was called before any update(): call update() with a batch "
                "first (reset() clears every batch)"
            )


def _check_n_bins(n_bins) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    return n_bins


def _cat(parts) -> Tensor:
    """The rows of a ``cat`` state: a list of per-batch tensors before a sync, one tensor after it."""
    return torch.cat(parts) if isinstance(parts, list) else parts


def _split_metric_kwargs(options: dict) -> dict:
    """Pop the torchmetrics ``Metric`` base keyword arguments out of ``options`` and return them."""
    return {k: options.pop(k) for k in list(options) if k in _METRIC_KWARGS}


# ----------------------------------------------------------------------------------------------------
# Regression: update(forecast, y, x=None)
# ----------------------------------------------------------------------------------------------------


class QuantileCalibrationError(_CalibrationMetric):
    """Binned quantile calibration error ``1/2 sum_b |c_b/N - 1/B|`` of the PIT values (equal bins).

    Same definition as :func:`kcal.metrics.regression.qce_binned` (a calibrated forecaster scores ~0).
    """

    def __init__(self, n_bins: int = 20, **kwargs):
        super().__init__(**kwargs)
        self.n_bins = _check_n_bins(n_bins)
        self.add_state("counts", default=torch.zeros(n_bins, dtype=_F64), dist_reduce_fx="sum")

    def update(self, forecast, y, x=None) -> None:
        u = pit(forecast, y, validate_args=self.validate_args).detach().clamp(0.0, 1.0)
        idx = torch.floor(u * self.n_bins).long().clamp_(0, self.n_bins - 1)
        self.counts += torch.bincount(idx, minlength=self.n_bins).to(self.counts)

    def compute(self) -> Tensor:
        self._check_updated()
        return 0.5 * (self.counts / self.counts.sum() - 1.0 / self.n_bins).abs().sum()


class DecisionCalibrationError(_CalibrationMetric):
    """Decision calibration error of the threshold decision at ``threshold`` (see ``dce``).

    ``sqrt(2) |1/n sum_i 1[y_i >= c] - 1/n sum_i Q_i(Yhat > c)|``, accumulated as sums over batches.
    """

    def __init__(self, threshold: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.threshold = float(threshold)
        for name in ("above", "prob_above", "n"):
            self.add_state(name, default=torch.zeros((), dtype=_F64), dist_reduce_fx="sum")

    def update(self, forecast, y, x=None) -> None:
        f, y = checked_forecast(forecast, y, type(self).__name__, validate_args=self.validate_args)
        y = y.detach()
        p = 1.0 - f.cdf(torch.full_like(y, self.threshold)).detach()
        self.above += (y >= self.threshold).sum().to(_F64)
        self.prob_above += p.sum().to(_F64)
        self.n += y.shape[0]

    def compute(self) -> Tensor:
        self._check_updated()
        a, p = self.above / self.n, self.prob_above / self.n
        return torch.sqrt(((1.0 - a) - (1.0 - p)) ** 2 + (a - p) ** 2)


class _RowMean(_CalibrationMetric):
    """The mean over every row seen of a per-row score ``per_row(forecast, y, reduction="none")``."""

    per_row = None  # set by subclasses: a function of (forecast, y, reduction=...)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("total", default=torch.zeros((), dtype=_F64), dist_reduce_fx="sum")
        self.add_state("n", default=torch.zeros((), dtype=_F64), dist_reduce_fx="sum")

    def update(self, forecast, y, x=None) -> None:
        values = self.per_row(forecast, y, reduction="none", validate_args=self.validate_args).detach()
        self.total += values.sum().to(_F64)
        self.n += values.shape[0]

    def compute(self) -> Tensor:
        self._check_updated()
        return self.total / self.n


class CRPS(_RowMean):
    """Mean closed-form CRPS of Gaussian forecasts, in target units (see ``crps``)."""

    per_row = staticmethod(crps)


class NegativeLogLikelihood(_RowMean):
    """Mean ``-forecast.log_prob(y)`` in nats (see ``nll``)."""

    per_row = staticmethod(nll)


class KernelCalibrationError(_CalibrationMetric):
    """Kernel calibration error: the unbiased MMD² of :func:`kcal.mmd.regression_mmd` on all rows.

    A U-statistic over all pairs of rows, so the rows are kept (``cat`` states) and the estimate is
    computed once in ``compute``. The default ``pairing="analytic"`` integrates the Gaussian forecast out
    in closed form (no sampling noise, the same value on every call); the other options are those of
    ``regression_mmd`` (``form``, ``kernel_y``, ``bandwidth_y``, ``kernel_z``, ``bandwidth_z``, ...);
    bandwidths left unset are its median heuristic over all rows seen. Memory: O(n) for the rows, O(n^2) in ``compute``.
    """

    def __init__(
        self,
        form: str = "individual",
        bandwidth_y: float | None = None,
        bandwidth_z: float | None = None,
        pairing: str = "analytic",
        **options,
    ):
        super().__init__(**_split_metric_kwargs(options))
        self.form = get_regression_form(form).name
        if pairing == "analytic":  # here, not in compute() after every update
            check_analytic(get_regression_form(form), kernel_key(options.get("kernel_y", "rbf")))
        self.options = {"form": self.form, "pairing": pairing, **options}
        for name, value in (("bandwidth_y", bandwidth_y), ("bandwidth_z", bandwidth_z)):
            if value is not None:  # None: the function's median heuristic, on all rows in compute()
                self.options[name] = check_positive(name, value)
        self.uses_x = get_regression_form(form).condition in ("x", "features")
        for name in ("mean", "std", "y", "x"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, forecast, y, x=None) -> None:
        mean, std = checked_gaussian(forecast, type(self).__name__, validate_args=False)
        y = as_vector(y, "y")
        if self.uses_x:
            if x is None:
                raise ValueError(f"form {self.form!r} conditions on x: call update(forecast, y, x)")
            x = as_float(x, "x").detach()
            x = x[:, None] if x.ndim == 1 else x
        else:
            x = None
        same_length(("mean", mean), ("std", std), ("y", y), ("x", x))
        check_values(("mean", mean), ("std", std), ("y", y), ("x", x), positive=("std",),
                     validate_args=self.validate_args)  # fmt: skip
        self.mean.append(mean.detach())
        self.std.append(std.detach())
        self.y.append(y.detach())
        if x is not None:
            self.x.append(x)

    def compute(self) -> Tensor:
        self._check_updated()
        x = _cat(self.x) if self.uses_x else None
        return regression_mmd(
            (_cat(self.mean), _cat(self.std)), _cat(self.y), x, **self.options, validate_args=False
        )  # every batch was checked in update


# ----------------------------------------------------------------------------------------------------
# Classification: update(probs, labels, x=None)
# ----------------------------------------------------------------------------------------------------
class TopLabelCalibrationError(_CalibrationMetric):
    """Top-label expected calibration error, equal to :func:`kcal.metrics.classification.ece`.

    Confidence ``r_i = max_c p_ic``, hit ``1[argmax_c p_ic = y_i]``; ``n_bins`` equal-width bins on [0, 1]
    that are right-closed ``(lo, hi]`` as in torchmetrics 0.8.2 (an exact 0 goes to the first bin; see
    :func:`kcal.metrics.classification.bin_index`; torchmetrics >= 1.0's ``CalibrationError`` uses
    ``[lo, hi)``). State: per-bin counts, summed confidences and summed hits (float64), from which every
    ``norm`` is exact: ``"l1"`` (the ECE), ``"l2"`` or ``"max"`` (see ``ece``).
    """

    def __init__(self, n_bins: int = 20, norm: str = "l1", **kwargs):
        super().__init__(**kwargs)
        self.n_bins = _check_n_bins(n_bins)
        zero = torch.zeros(1, dtype=_F64)
        binned_calibration_error(zero, zero, zero, 1, norm)  # ValueError naming the valid norms
        self.norm = norm
        for name in ("counts", "conf_sum", "hit_sum"):
            self.add_state(name, default=torch.zeros(n_bins, dtype=_F64), dist_reduce_fx="sum")

    def update(self, probs, labels, x=None) -> None:
        probs, labels = check_probs(probs, labels, validate_args=self.validate_args)
        conf, pred = probs.detach().max(-1)
        count, csum, hsum = binned_sums(conf, pred == labels, self.n_bins, dtype=_F64)
        self.counts += count[0]
        self.conf_sum += csum[0]
        self.hit_sum += hsum[0]

    def compute(self) -> Tensor:
        self._check_updated()
        return binned_calibration_error(
            self.counts, self.conf_sum, self.hit_sum, self.counts.sum(), self.norm
        )


class ClasswiseCalibrationError(_CalibrationMetric):
    """Class-wise ECE, equal to :func:`kcal.metrics.classification.classwise_ece`.

    For every class k the probabilities ``p_ik`` are binned (equal-width right-closed bins ``(lo, hi]``,
    as :class:`TopLabelCalibrationError`), and the l1 calibration error of the indicators ``1[y_i = k]``
    is averaged over the classes. State: per-(class, bin) counts, summed probabilities and summed
    indicators (float64), shape ``(num_classes, n_bins)``, so ``num_classes`` is fixed in the constructor
    (as in torchmetrics' ``MulticlassCalibrationError``) and ``update`` refuses probabilities with another
    number of columns.
    """

    def __init__(self, num_classes: int, n_bins: int = 20, **kwargs):
        super().__init__(**kwargs)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
        self.num_classes = num_classes
        self.n_bins = _check_n_bins(n_bins)
        for name in ("counts", "conf_sum", "hit_sum"):
            self.add_state(name, default=torch.zeros(num_classes, n_bins, dtype=_F64), dist_reduce_fx="sum")

    def update(self, probs, labels, x=None) -> None:
        probs, labels = check_probs(probs, labels, validate_args=self.validate_args)
        n, m = probs.shape
        if m != self.num_classes:
            raise ValueError(
                f"probs has {m} classes, but the metric was built with num_classes={self.num_classes}"
            )
        conf = probs.detach().reshape(-1)  # row-major: element (i, k) at i*m + k
        hit = torch.nn.functional.one_hot(labels, m).reshape(-1)
        group = torch.arange(m, device=probs.device).repeat(n)
        count, csum, hsum = binned_sums(conf, hit, self.n_bins, n_groups=m, group=group, dtype=_F64)
        self.counts += count
        self.conf_sum += csum
        self.hit_sum += hsum

    def compute(self) -> Tensor:
        self._check_updated()
        n = self.counts.sum(-1)  # every class bins every row
        return binned_calibration_error(self.counts, self.conf_sum, self.hit_sum, n, "l1").mean()


class MaximumMeanCalibrationError(_CalibrationMetric):
    """MMCE of Kumar et al. (2018), equal to :func:`kcal.baselines.mmce` on all rows.

    A V-statistic over all pairs of rows (Laplacian kernel on the top-label confidence), so the rows are
    kept (``cat`` states: ``probs`` and ``labels``) and the value is computed once in ``compute``. Options
    as ``mmce``: ``bandwidth`` (default 0.4), ``weighted`` (MMCE_w, default; ``False`` gives MMCE_m) and
    ``scaling`` (``"kumar"`` or ``"authors"``). Memory: O(n m) for the rows, O(n^2) in ``compute``.
    """

    def __init__(self, bandwidth: float = 0.4, weighted: bool = True, *, scaling: str = "kumar", **kwargs):
        super().__init__(**kwargs)
        if scaling not in MMCE_SCALINGS:
            raise ValueError(f"unknown MMCE scaling {scaling!r}; valid: {list(MMCE_SCALINGS)}")
        self.options = {
            "bandwidth": check_positive("bandwidth", bandwidth),
            "weighted": weighted,
            "scaling": scaling,
        }
        for name in ("probs", "labels"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, probs, labels, x=None) -> None:
        probs, labels = check_probs(probs, labels, validate_args=self.validate_args)
        self.probs.append(probs.detach())
        self.labels.append(labels)

    def compute(self) -> Tensor:
        self._check_updated()
        # every batch was checked in update
        return mmce(_cat(self.probs), _cat(self.labels), **self.options, validate_args=False)


class ClassificationKernelCalibrationError(_CalibrationMetric):
    """Classification kernel calibration error: the unbiased MMD² of :func:`kcal.mmd.classification_mmd`.

    The default ``form="individual"`` (RBF kernels over X × Y) is the paper's KCE and conditions on
    ``x``: call ``update(probs, labels, x)``. The forms ``"canonical"``, ``"top_label"`` and ``"marginal"``
    condition on the forecast and ignore ``x``. ``bandwidth_y`` / ``bandwidth_z`` left at None take
    ``classification_mmd``'s defaults, computed in ``compute`` on all rows (the median heuristic for
    ``bandwidth_z``); the paper's KCE used ``bandwidth_y=0.1``. Other options are those of
    ``classification_mmd`` (``kernel_y``, ``kernel_z``, ``reduction``); every option is checked in the
    constructor by evaluating the function once on two dummy rows. A U-statistic over all pairs of rows,
    so the rows are kept (``cat`` states) and the estimate is computed once in ``compute`` (needs n >= 2).
    Memory: O(n (m + d)) for the rows, O(n^2) in ``compute``.
    """

    def __init__(
        self,
        form: str = "individual",
        bandwidth_y: float | None = None,
        bandwidth_z: float | None = None,
        **options,
    ):
        super().__init__(**_split_metric_kwargs(options))
        preset = get_classification_form(form)
        self.form = preset.name
        self.options = {"form": preset, **options}
        for name, value in (("bandwidth_y", bandwidth_y), ("bandwidth_z", bandwidth_z)):
            if value is not None:
                self.options[name] = check_positive(name, value)
        self.uses_x = preset.condition == "x"
        probe_probs = torch.tensor([[0.8, 0.2], [0.4, 0.6]], dtype=_F64)
        probe_x = torch.tensor([[0.0], [1.0]], dtype=_F64) if self.uses_x else None
        classification_mmd(probe_probs, torch.tensor([0, 1]), probe_x, **self.options)
        for name in ("probs", "labels", "x"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def update(self, probs, labels, x=None) -> None:
        probs, labels = check_probs(probs, labels, validate_args=self.validate_args)
        if self.uses_x:
            if x is None:
                raise ValueError(f"form {self.form!r} conditions on x: call update(probs, labels, x)")
            x = as_float(x, "x").detach()
            same_length(("probs", probs), ("x", x))
            check_values(("x", x), validate_args=self.validate_args)
            self.x.append(x[:, None] if x.ndim == 1 else x)
        self.probs.append(probs.detach())
        self.labels.append(labels)

    def compute(self) -> Tensor:
        self._check_updated()
        x = _cat(self.x) if self.uses_x else None
        return classification_mmd(  # every batch was checked in update
            _cat(self.probs), _cat(self.labels), x, **self.options, validate_args=False
        )


_METRIC_KWARGS = (
    "validate_args",
    "compute_on_cpu",
    "dist_sync_on_step",
    "process_group",
    "dist_sync_fn",
    "distributed_available_fn",
    "sync_on_compute",
    "compute_with_cache",
)
