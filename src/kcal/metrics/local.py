r"""Local calibration error (LCE) for regression forecasts (paper §6.3, after Luo et al. 2022).

For a CDF forecaster :math:`Q_{Y|X}`, a feature embedding :math:`\phi` and an RBF kernel
:math:`k(u, v) = \exp(-\|u - v\|^2 / \mathrm{bw})` (the project's convention, :func:`kcal.kernels.rbf`),
evaluated on data :math:`(x_i, y_i)_{i=1..n}` and at a query point :math:`x`:

.. math::
    \mathrm{LCE}(x; c) = \frac{\sum_i 1\{y_i \le Q^{-1}_{Y|x_i}(c)\}\, k(\phi(x), \phi(x_i))}
                              {\sum_i k(\phi(x), \phi(x_i))} - c,
    \qquad
    \mathrm{LCE}_{\text{total}}(x) = \frac1B \sum_{b=1}^{B} \mathrm{LCE}(x; c_b)^2,\quad c_b = b/B.

For a forecast with a continuous, strictly increasing CDF :math:`F_i`,
:math:`1\{y_i \le F_i^{-1}(c)\} = 1\{F_i(y_i) \le c\}`, so the probability integral transform (PIT)
values :math:`u_i = F_i(y_i)` are all that is needed; PITs, explicit quantiles, or a forecast object
(anything with ``cdf``, e.g. ``Normal(mean, std)`` or a recalibrated forecast, or a ``(mean, std)``
tuple) are accepted.

The last level :math:`c_B = 1`: kept, as the paper writes the average over :math:`b = 1..B` with
divisor B. With PIT input its term is 0 up to rounding (every :math:`u_i \le 1`; PITs are clamped to
[0, 1]), i.e. for an unbounded forecast :math:`Q^{-1}(1) = +\infty`; so :math:`\mathrm{LCE}_{\text{total}}`
is :math:`\frac1B\sum_{b<B}\mathrm{LCE}(x; c_b)^2`. With explicit quantiles the indicator at
:math:`c_B = 1` is evaluated literally (a finite ``Q^{-1}(1)`` below some ``y_i`` gives a nonzero
term). Pass ``levels`` to use another grid (e.g. ``(b - 1/2)/B``).

The kernel weights are normalised per query point with a softmax of :math:`-\|\phi(x) - \phi(x_i)\|^2/\mathrm{bw}`,
which equals the ratio above exactly and stays finite when every raw kernel value underflows (far
from the data, small bandwidth). Everything is vectorised: one (q, n) weight matrix times one (n, B)
indicator matrix.

Inputs are checked by :mod:`kcal.inputs`: integer arrays become floats, every argument has one row per
data point, and with ``validate_args=True`` (the default) NaN or infinite PITs, quantiles, labels or
features raise a one-line ``ValueError`` naming the argument.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kcal.inputs import as_float, check_values, same_length
from kcal.kernels import sq_dist

__all__ = ["DEFAULT_LCE_LEVELS", "lce", "lce_calibrated_floor", "lce_levels", "lce_total", "local_weights"]

DEFAULT_LCE_LEVELS = 20


def lce_levels(n_levels: int = DEFAULT_LCE_LEVELS, dtype=torch.float64, device=None) -> Tensor:
    """The paper's levels ``c_b = b / B`` for ``b = 1..B`` (so ``c_B = 1``)."""
    if int(n_levels) < 1:
        raise ValueError(f"n_levels must be >= 1, got {n_levels}")
    return torch.arange(1, int(n_levels) + 1, dtype=dtype, device=device) / int(n_levels)


def _points(phi: Tensor, name: str, dtype) -> Tensor:
    phi = as_float(phi, name)
    if phi.ndim == 1:
        phi = phi[:, None]
    if phi.ndim != 2 or phi.shape[0] == 0:
        raise ValueError(f"{name} must have shape (n, p) with n >= 1, got {tuple(phi.shape)}")
    return phi.to(dtype)


def local_weights(phi_x: Tensor, phi_query: Tensor, bandwidth: float) -> Tensor:
    """``W[q, i] = k(phi_query[q], phi_x[i]) / sum_j k(phi_query[q], phi_x[j])``, shape ``(q, n)``."""
    bandwidth = float(bandwidth)
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth}")
    if phi_x.shape[-1] != phi_query.shape[-1]:
        raise ValueError(f"phi_x has {phi_x.shape[-1]} columns but phi_query has {phi_query.shape[-1]}")
    return torch.softmax(sq_dist(phi_query, phi_x) / (-bandwidth), dim=-1)


def _indicators(forecast, y, levels: Tensor, dtype, validate_args: bool) -> Tensor:
    """``I[i, b] = 1{y_i <= Q_i^{-1}(c_b)}`` as a float ``(n, B)`` matrix."""
    if isinstance(forecast, (tuple, list)) or hasattr(forecast, "cdf"):
        if y is None:
            raise ValueError("a forecast object needs the labels y")
        from kcal.metrics.regression import pit

        u, name = pit(forecast, as_float(y, "y"), validate_args=validate_args), "pit"
    elif callable(forecast) and not torch.is_tensor(forecast):  # a CDF function y -> (F_i(y_i))_i
        if y is None:
            raise ValueError("a CDF function needs the labels y")
        y = as_float(y, "y")
        check_values(("y", y), validate_args=validate_args)
        u, name = as_float(forecast(y), "forecast(y)"), "forecast(y)"
    else:
        values = as_float(forecast, "forecast")
        if values.ndim == 2 and values.shape[1] == levels.shape[0] and y is not None:
            yv = as_float(y, "y").reshape(-1).to(dtype)
            same_length(("quantiles", values), ("y", yv))
            check_values(("quantiles", values), ("y", yv), validate_args=validate_args)
            return (yv[:, None] <= values.to(dtype)).to(dtype)
        if values.ndim == 2 and values.shape[1] == 1:
            values = values[:, 0]
        if values.ndim != 1:
            raise ValueError(
                f"expected PIT values (n,), quantiles (n, B={levels.shape[0]}) with y, or a forecast with cdf; "
                f"got a tensor of shape {tuple(values.shape)}"
            )
        if y is not None:
            raise ValueError(
                "PIT values already include the labels: pass y=None (or quantiles of shape (n, B))"
            )
        u, name = values, "forecast"
    u = u.reshape(-1).to(dtype)
    check_values((name, u), validate_args=validate_args and name != "pit")  # pit: derived from checked args
    u = u.clamp(0.0, 1.0)
    return (u[:, None] <= levels[None, :]).to(dtype)


def lce(
    forecast,
    y=None,
    phi_x=None,
    phi_query=None,
    levels: Tensor | int | None = None,
    bandwidth: float = 1.0,
    *,
    validate_args: bool = True,
) -> Tensor:
    """Local calibration errors ``LCE(x_q; c_b)``, shape ``(q, B)`` (rows: query points, columns: levels).

    Args:
        forecast: one of
            * PIT values ``u_i = F_i(y_i)``, shape ``(n,)`` (then ``y`` must be None);
            * quantiles ``Q_i^{-1}(c_b)``, shape ``(n, B)`` matching ``levels``, together with ``y``;
            * a forecast with ``cdf`` (``Normal``, :class:`kcal.recalibration.RecalibratedForecast`), a
              ``(mean, std)`` tuple, or a callable ``y -> (F_i(y_i))_i``, together with ``y``.
        y: labels ``(n,)`` for quantile / forecast input.
        phi_x: features ``phi(x_i)`` of the data points, ``(n, p)`` (or ``(n,)``).
        phi_query: features of the query points ``(q, p)``; default ``phi_x`` (LCE at every data point).
        levels: the levels ``c_b`` as a tensor, or an int B for ``c_b = b/B`` (default B = 20).
        bandwidth: RBF bandwidth ``bw`` in ``exp(-||u - v||^2 / bw)`` (same units as ``phi``).

    Computed in float64 unless the inputs are float64 already (they then stay float64).
    """
    if phi_x is None:
        raise ValueError("phi_x (the data points' features) is required")
    dtype = torch.float64
    if levels is None or isinstance(levels, int):
        c = lce_levels(DEFAULT_LCE_LEVELS if levels is None else levels, dtype=dtype)
    else:
        c = torch.as_tensor(levels).reshape(-1).to(dtype)
    px = _points(phi_x, "phi_x", dtype)
    pq = px if phi_query is None else _points(phi_query, "phi_query", dtype)
    check_values(("phi_x", px), ("phi_query", None if phi_query is None else pq), validate_args=validate_args)
    ind = _indicators(forecast, y, c, dtype, validate_args)
    same_length(("forecast", ind), ("phi_x", px))
    return local_weights(px, pq, bandwidth) @ ind - c[None, :]


def lce_total(
    forecast,
    y=None,
    phi_x=None,
    phi_query=None,
    levels: Tensor | int | None = None,
    bandwidth: float = 1.0,
    *,
    validate_args: bool = True,
) -> Tensor:
    """``LCE_total(x_q) = mean_b LCE(x_q; c_b)^2``, shape ``(q,)`` (same arguments as :func:`lce`)."""
    return (
        lce(forecast, y, phi_x, phi_query, levels, bandwidth, validate_args=validate_args).square().mean(-1)
    )


def lce_calibrated_floor(
    phi_x, phi_query=None, levels: Tensor | int | None = None, bandwidth: float = 1.0
) -> Tensor:
    r"""Expected ``LCE_total(x_q)`` of a perfectly calibrated forecaster, shape ``(q,)``: the estimator's
    noise floor at each query point.

    With PITs i.i.d. uniform and independent of phi(x), :math:`E[\mathrm{LCE}(x_q; c)^2] =
    c(1-c)\sum_i w_{qi}^2` (:math:`w_{qi}` the normalised kernel weights, :math:`1/\sum_i w_{qi}^2` the
    effective number of neighbours), so :math:`E[\mathrm{LCE}_{\text{total}}(x_q)] =
    \big(\frac1B\sum_b c_b(1-c_b)\big) \sum_i w_{qi}^2`. Values of ``lce_total`` near this floor are
    indistinguishable from sampling noise.
    """
    dtype = torch.float64
    if levels is None or isinstance(levels, int):
        c = lce_levels(DEFAULT_LCE_LEVELS if levels is None else levels, dtype=dtype)
    else:
        c = torch.as_tensor(levels).reshape(-1).to(dtype)
    px = _points(phi_x, "phi_x", dtype)
    pq = px if phi_query is None else _points(phi_query, "phi_query", dtype)
    w = local_weights(px, pq, bandwidth)
    return w.square().sum(-1) * (c * (1.0 - c)).mean()
