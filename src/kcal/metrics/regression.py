"""Exact regression evaluation metrics (whole evaluation set at once).

Every function works on prediction tensors (never on data loaders) and returns a 0-dim torch
tensor; the caller decides when to call ``.item()``.  The "official" flavour that reproduces the
authors' logged numbers (per-batch quirks, rounding-based QCE bins, ...) lives in
:mod:`kcal.metrics.official`; both flavours are computed from the SAME predictions.

Forecasts
---------
A *forecast* is any object with the methods ``cdf(y)``, ``log_prob(y)`` and ``icdf(u)`` acting
elementwise on tensors shaped like its batch ``(n,)``.  ``torch.distributions.Normal(mean, std)`` is
one; a post-hoc recalibrated forecast is another.  For convenience a ``(mean, std)`` tuple is also
accepted wherever a forecast is expected and is turned into ``Normal(mean, std)``.

Conventions
-----------
* No standard-deviation floor is applied here: the model's ``max(sigma, 0.05)`` floor (official
  code) belongs to the model, so pass the floored std.
* The decision threshold ``c`` is a plain number (0 for median-centred targets, as in the official
  code).
* Inputs are checked by :mod:`kcal.inputs`: integer tensors are converted to floats, lengths always
  checked, and with ``validate_args=True`` (the default) NaN or infinite values and a std <= 0 raise a
  one-line ``ValueError`` naming the argument (one host synchronisation). The functions that take any
  forecast object (:func:`nll`, :func:`pit`, :func:`qce`, :func:`dce`) check a ``(mean, std)`` pair's
  parameters and take an object as built (torch checks a ``Normal``'s when it is built, unless told
  ``validate_args=False``); the Gaussian ones (:func:`crps`, :func:`sharpness`, :func:`gaussian_nll`)
  check ``mean`` and ``std`` whatever holds them. What a function derives (PIT values) is not re-checked.
  :func:`gaussian_nll`, the training loss, checks values only when asked (``validate_args=False`` by
  default): the training loop calls it every step and reads a NaN as divergence.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kcal.inputs import (
    as_float,
    as_forecast,
    as_vector,
    check_values,
    checked_forecast,
    checked_gaussian,
    same_length,
)
from kcal.kernels import check_finite

__all__ = [
    "as_forecast",
    "gaussian_nll",
    "nll",
    "pit",
    "qce_binned",
    "qce_ecdf",
    "decision_calibration_error",
    "dce",
    "dce_sampled",
    "crps",
    "qce",
    "sharpness",
]


# --------------------------------------------------------------------------------------------
# likelihood / PIT / sharpness / CRPS
# --------------------------------------------------------------------------------------------
LOG_2PI = math.log(2 * math.pi)


def gaussian_nll(forecast, y, reduction: str = "mean", *, validate_args: bool = False) -> Tensor:
    r"""Gaussian negative log-likelihood in nats, averaged (``reduction="mean"``) or summed over rows.

    :math:`\log\sigma_i + \frac{(y_i-\mu_i)^2}{2\sigma_i^2} + \tfrac12\log(2\pi)` for
    ``forecast = (mean, std)`` (or a ``Normal``). Shapes broadcast (no 1-D requirement), so the same
    function is the training loss of a single model and of a stack of models.

    The one function of the library whose value checks are off by default: it is the training loss,
    called every step, and a NaN it returns is how the training loop sees divergence. Pass
    ``validate_args=True`` to refuse NaN/inf in ``mean``, ``std`` or ``y`` and a std <= 0 (shapes are always
    checked); :func:`nll` checks by default.
    """
    mean, std = checked_gaussian(forecast, "gaussian_nll", validate_args=validate_args, vector=False)
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    y = as_float(y, "y")
    try:
        torch.broadcast_shapes(mean.shape, std.shape, y.shape)
    except RuntimeError:
        raise ValueError(
            f"y has shape {tuple(y.shape)}, mean has {tuple(mean.shape)}: pass one label per forecast"
        ) from None
    check_values(("y", y), validate_args=validate_args)
    nll = torch.log(std) + 0.5 * ((y - mean) / std) ** 2 + 0.5 * LOG_2PI
    return nll.mean() if reduction == "mean" else nll.sum()


def _reduce(values: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return values.mean()
    if reduction == "sum":
        return values.sum()
    if reduction == "none":
        return values
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def nll(forecast, y, reduction: str = "mean", *, validate_args: bool = True) -> Tensor:
    """``-forecast.log_prob(y)`` in nats, averaged over rows (``reduction="sum"``: summed, ``"none"``: per row).

    Any forecast (see :func:`as_forecast`), e.g. a recalibrated one.
    """
    f, y = checked_forecast(forecast, y, "nll", validate_args=validate_args)
    return _reduce(-f.log_prob(y), reduction)


def pit(forecast, y, *, validate_args: bool = True) -> Tensor:
    """Probability integral transform ``u_i = F_i(y_i) = forecast.cdf(y)`` (shape ``(n,)``)."""
    f, y = checked_forecast(forecast, y, "pit", validate_args=validate_args)
    return f.cdf(y)


def sharpness(forecast, *, validate_args: bool = True) -> Tensor:
    """Mean predictive standard deviation ``1/n sum_i sigma_i``, in target units (lower = sharper).

    ``forecast`` is ``(mean, std)`` or a ``Normal``; a bare tensor is taken as the std. Other libraries
    use other definitions under the same name (docs/library.md, "Conventions").
    """
    if isinstance(forecast, (tuple, list, torch.distributions.Normal)):
        std = checked_gaussian(forecast, "sharpness", validate_args=validate_args)[1]
    else:
        std = as_vector(forecast, "std")
        check_values(("std", std), positive=("std",), validate_args=validate_args)
    return std.mean()


def crps(forecast, y, reduction: str = "mean", *, validate_args: bool = True) -> Tensor:
    r"""Mean closed-form CRPS of Gaussian forecasts (Gneiting & Raftery 2007), in target units.

    :math:`\mathrm{CRPS}(\mathcal N(\mu,\sigma^2), y) = \sigma\,[z(2\Phi(z)-1) + 2\varphi(z) - 1/\sqrt\pi]`
    with :math:`z=(y-\mu)/\sigma`; equals :math:`\int (F(t) - 1[t\ge y])^2\,dt`. ``forecast`` is
    ``(mean, std)`` or a ``Normal``; ``reduction="sum"``/``"none"`` sums / returns the per-row values.
    """
    mean, std = checked_gaussian(forecast, "crps", validate_args=validate_args)
    y = as_vector(y, "y")
    same_length(("mean", mean), ("std", std), ("y", y))
    check_values(("y", y), validate_args=validate_args)
    z = (y - mean) / std
    cdf = 0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return _reduce(std * (z * (2.0 * cdf - 1.0) + 2.0 * pdf - 1.0 / math.sqrt(math.pi)), reduction)


def crps_gaussian(*args, **kwargs):
    """The former name of :func:`crps`: raises a one-line ``TypeError`` naming ``crps((mean, std), y)``."""
    raise TypeError("crps_gaussian was removed: pass (mean, std) as one forecast, crps((mean, std), y)")


# --------------------------------------------------------------------------------------------
# quantile calibration
# --------------------------------------------------------------------------------------------
def qce_binned(pit_values, n_bins: int = 20, *, validate_args: bool = True) -> Tensor:
    r"""Binned quantile calibration error with EQUAL-width bins.

    PIT values are clamped to [0, 1] and assigned to bin ``b = min(floor(B u), B-1)`` (bins
    ``[b/B, (b+1)/B)``, the last one closed).  With ``N`` rows and counts ``c_b``:

    .. math:: \mathrm{QCE} = \tfrac12 \sum_{b=1}^{B} \left| c_b / N - 1/B \right|,

    the total-variation distance between the binned PIT histogram and uniform.  This is the
    authors' normalisation, but with equal bins, so a calibrated forecaster scores ~0 (only
    sampling noise, ~sqrt(B/N)); compare :func:`kcal.metrics.official.official_qce` whose
    rounding-based bins give a floor of ~0.025.  Defined for any N >= 1.
    """
    u = as_vector(pit_values, "pit")
    check_values(("pit", u), validate_args=validate_args)
    u = u.clamp(0.0, 1.0)
    if n_bins < 1:
        raise ValueError("n_bins must be >= 1")
    idx = torch.floor(u * n_bins).long().clamp_(0, n_bins - 1)
    counts = torch.bincount(idx, minlength=n_bins).to(u.dtype)
    return 0.5 * (counts / u.shape[0] - 1.0 / n_bins).abs().sum()


def qce(forecast, y, n_bins: int = 20, *, validate_args: bool = True) -> Tensor:
    """:func:`qce_binned` of the forecast's PIT values: ``qce_binned(pit(forecast, y), n_bins)``."""
    u = pit(forecast, y, validate_args=validate_args)
    return qce_binned(u, n_bins, validate_args=False)  # derived from checked arguments


def qce_ecdf(pit_values, p: int = 1, *, validate_args: bool = True) -> Tensor:
    r"""Bin-free quantile calibration error: distance of the PIT's empirical CDF to uniform.

    With :math:`\hat F(u) = \frac1N \#\{i: u_i \le u\}` (PITs clamped to [0, 1]):

    * ``p=1``: :math:`\int_0^1 |\hat F(u) - u|\,du` (the Wasserstein-1 distance to U(0,1));
    * ``p=2``: :math:`\left(\int_0^1 (\hat F(u) - u)^2\,du\right)^{1/2}` (Cramér–von Mises type).

    Both integrals are computed exactly: with sorted PITs :math:`u_{(1)}\le\dots\le u_{(N)}`,
    :math:`u_{(0)}=0, u_{(N+1)}=1`, :math:`\hat F = k/N` on :math:`[u_{(k)}, u_{(k+1)})`, and on an
    interval :math:`[a,b)` with level h,
    :math:`\int_a^b |u-h|\,du = \tfrac12[\mathrm{sgn}(b-h)(b-h)^2 - \mathrm{sgn}(a-h)(a-h)^2]`,
    :math:`\int_a^b (u-h)^2\,du = \tfrac13[(b-h)^3 - (a-h)^3]`.
    A calibrated forecaster scores O(1/sqrt(N)).  Defined for N >= 1 (N=1, u=0.5 gives 0.25 for p=1).
    """
    u = as_vector(pit_values, "pit")
    check_values(("pit", u), validate_args=validate_args)
    u = u.clamp(0.0, 1.0)
    n = u.shape[0]
    s, _ = torch.sort(u)
    zero, one = s.new_zeros(1), s.new_ones(1)
    edges = torch.cat([zero, s, one])  # (n+2,)
    a, b = edges[:-1], edges[1:]  # n+1 intervals
    h = torch.arange(n + 1, dtype=s.dtype, device=s.device) / n
    if p == 1:
        da, db = a - h, b - h
        return 0.5 * (torch.sign(db) * db * db - torch.sign(da) * da * da).sum()
    if p == 2:
        da, db = a - h, b - h
        return torch.sqrt(((db**3 - da**3) / 3.0).sum().clamp_min(0.0))
    raise ValueError(f"p must be 1 or 2, got {p!r}")


# --------------------------------------------------------------------------------------------
# decision calibration (paper section 6.2 / appendix)
# --------------------------------------------------------------------------------------------
def decision_calibration_error(
    prob_above, y, threshold: float = 0.0, *, validate_args: bool = True
) -> Tensor:
    r"""Exact decision calibration error for the threshold decision problem.

    Actions :math:`a\in\{-1,+1\}`, loss :math:`\ell(a,y) = 1[a \ne \mathrm{sign}(y-c)]`.  The
    forecast expectation is in closed form: ``prob_above[i]`` :math:`= Q_i(\hat Y > c)` (for a
    Gaussian :math:`1-\Phi((c-\mu_i)/\sigma_i)`, for any forecast ``1 - forecast.cdf(c)``), so
    :math:`E_{Q_i}\ell(+1,\hat Y) = 1-p_i` and :math:`E_{Q_i}\ell(-1,\hat Y) = p_i`.

    .. math:: \mathrm{DCE} = \Big(\sum_{a} \big(\tfrac1n\sum_i \ell(a,y_i)
              - \tfrac1n\sum_i E_{Q_i}\ell(a,\hat Y)\big)^2\Big)^{1/2}
              \;=\; \sqrt2\,\big|\tfrac1n\sum_i 1[y_i\ge c] - \tfrac1n\sum_i p_i\big|.

    Ties: a label exactly equal to ``c`` counts as the ``+1`` side (``y >= c``), since
    :math:`P(Y=c)=0` for a continuous target.  This DIFFERS from the official flavour
    (:func:`kcal.metrics.official.official_dce`), where ``sign(0)=0`` puts such labels on neither
    action.  Defined for n >= 1.
    """
    p, y = as_vector(prob_above, "prob_above"), as_vector(y, "y")
    same_length(("prob_above", p), ("y", y))
    threshold = check_finite("threshold", threshold)
    check_values(("prob_above", p), ("y", y), validate_args=validate_args)
    above = (y >= threshold).to(p.dtype)
    # loss matrices over actions (+1, -1): loss(+1, y) = 1[y < c], loss(-1, y) = 1[y >= c]
    e_p = torch.stack([(1.0 - above).mean(), above.mean()])
    e_q = torch.stack([(1.0 - p).mean(), p.mean()])
    return torch.sqrt(((e_p - e_q) ** 2).sum())


def dce(forecast, y, threshold: float = 0.0, *, validate_args: bool = True) -> Tensor:
    """:func:`decision_calibration_error` with ``prob_above = 1 - forecast.cdf(c)``."""
    f, y = checked_forecast(forecast, y, "dce", validate_args=validate_args)
    c = torch.full_like(y, check_finite("threshold", threshold))
    prob_above = 1.0 - f.cdf(c)
    return decision_calibration_error(prob_above, y, threshold, validate_args=False)  # y checked above


def dce_sampled(samples, y, threshold: float = 0.0, *, validate_args: bool = True) -> Tensor:
    """Sampling fallback for forecasts without a cdf: ``samples`` has shape ``(S, n)``.

    ``prob_above[i]`` is estimated as the fraction of the S samples of row i with ``ŷ >= c``
    (same tie convention as :func:`decision_calibration_error`).
    """
    s = as_float(samples, "samples")
    y = as_vector(y, "y")
    if s.ndim == 1:
        s = s[None]
    if s.ndim != 2:
        raise ValueError(
            f"samples must have shape (S, n={y.shape[0]}) (one column per label), got {tuple(s.shape)}"
        )
    same_length(("samples", s.shape[1]), ("y", y))
    check_values(("samples", s), validate_args=validate_args)
    prob_above = (s >= check_finite("threshold", threshold)).to(y.dtype).mean(0)
    return decision_calibration_error(prob_above, y, threshold, validate_args=validate_args)
