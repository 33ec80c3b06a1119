"""The generic unbiased MMD² estimators the calibration forms are built on: :func:`mmd2_unbiased` from three Gram
matrices, :func:`sample_mmd2` from forecast draws and targets, :func:`analytic_mmd2` for class probabilities, each
with its unchecked core (``*_unchecked``: for callers that validated their arguments once, such as
:func:`kcal.mmd.estimators.regression_mmd`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from kcal.inputs import (
    as_float,
    check_probs,
    check_values,
    functorch_active,
    same_length,
)
from kcal.mmd.fused import AnalyticClassMMD, offdiag_weight

__all__ = ["PAIRINGS", "analytic_mmd2", "analytic_mmd2_unchecked", "mmd2_unbiased", "sample_mmd2",
           "sample_mmd2_unchecked"]  # fmt: skip

PAIRINGS = ("index", "cross")


# ----------------------------------------------------------------------------------------------------
# The U-statistic
# ----------------------------------------------------------------------------------------------------
def _offdiag_sum(k: Tensor) -> Tensor:
    return k.sum((-2, -1)) - k.diagonal(dim1=-2, dim2=-1).sum(-1)


def mmd2_unbiased(k_tt: Tensor, k_tf: Tensor, k_ff: Tensor, *, validate_args: bool = True) -> Tensor:
    """Unbiased MMD^2 U-statistic (paper Eq. (3) with the one-sample statistic h_ij of §4).

    ``MMD^2 = 1/(n(n-1)) * sum_{i != j} h_ij`` with
    ``h_ij = k_tt[i,j] + k_ff[i,j] - k_tf[i,j] - k_tf[j,i]``, where ``k_tt[i,j] = k((y_i,z_i),(y_j,z_j))``,
    ``k_ff[i,j] = k((yhat_i,z_i),(yhat_j,z_j))`` and ``k_tf[i,j] = k((y_i,z_i),(yhat_j,z_j))``.
    The diagonal is excluded in all three terms (as in the authors' HEAD ``mean_no_diag``).

    Inputs have shape ``(..., n, n)`` (leading batch dims are kept: the result has shape ``(...)``).
    ``n < 2`` raises ``ValueError`` (the U-statistic needs at least one pair); NaN or infinite entries do
    when ``validate_args``.
    """
    k_tt, k_tf, k_ff = (as_float(k, name) for k, name in ((k_tt, "k_tt"), (k_tf, "k_tf"), (k_ff, "k_ff")))
    _check_grams(k_tt, k_tf, k_ff)
    check_values(("k_tt", k_tt), ("k_tf", k_tf), ("k_ff", k_ff), validate_args=validate_args)
    return _mmd2_unbiased(k_tt, k_tf, k_ff)


def _check_grams(k_tt: Tensor, k_tf: Tensor, k_ff: Tensor) -> None:
    """The three Gram matrices are square ``(..., n, n)`` with one n (the message names the odd one)."""
    n = k_tt.shape[-1]
    for name, k in (("k_tt", k_tt), ("k_tf", k_tf), ("k_ff", k_ff)):
        if k.ndim < 2 or k.shape[-2:] != (n, n):
            raise ValueError(
                f"{name} has shape {tuple(k.shape)}, k_tt has {tuple(k_tt.shape)}: the Gram matrices must be "
                "square (..., n, n) with one n"
            )
    if n < 2:
        raise ValueError(f"the unbiased MMD^2 estimator needs at least n=2 examples, got n={n}")


def _mmd2_unbiased(k_tt: Tensor, k_tf: Tensor, k_ff: Tensor) -> Tensor:
    """:func:`mmd2_unbiased` of checked Gram matrices."""
    n = k_tt.shape[-1]
    total = _offdiag_sum(k_tt) + _offdiag_sum(k_ff) - 2.0 * _offdiag_sum(k_tf)
    return total / (n * (n - 1))


# ----------------------------------------------------------------------------------------------------
# Generic estimator with Monte-Carlo draws (regression)
# ----------------------------------------------------------------------------------------------------
def _as_draws(v: Tensor, name: str) -> Tensor:
    if v.dim() == 2:
        v = v.unsqueeze(-1)
    if v.dim() != 3:
        raise ValueError(
            f"{name} must have shape (M, n) or (M, n, p) (M draws of n examples), got {tuple(v.shape)}"
        )
    return v


def _cross_mean_gram(kernel: Callable, a: Tensor, b: Tensor) -> Tensor:
    """``G[i, j] = mean_{s, s'} k(a[s, i], b[s', j])`` for draws a (Ma, n, p), b (Mb, n, p)."""
    ma, n, p = a.shape
    mb = b.shape[0]
    if ma == 1 or mb == 1:  # a deterministic side: the cross average is the plain average over the other
        return kernel(a, b).mean(0)
    g = kernel(a.reshape(ma * n, p), b.reshape(mb * n, p))
    return g.reshape(ma, n, mb, n).mean(dim=(0, 2))


def sample_mmd2(
    forecast: Tensor,
    target: Tensor,
    kernel: Callable[[Tensor, Tensor], Tensor],
    k_z: Tensor | None = None,
    pairing: str = "index",
    *,
    z: Tensor | None = None,
    kernel_z: Callable[[Tensor, Tensor], Tensor] | None = None,
    validate_args: bool = True,
) -> Tensor:
    """Generic unbiased MMD^2 between a forecast and a target variable given as Monte-Carlo draws.

    ``forecast`` has shape ``(Mf, n[, p])`` and ``target`` ``(Mt, n[, p])`` (draws first, as
    ``Distribution.sample((M,))`` returns them); a deterministic variable has M = 1. The estimate is
    symmetric in the two variables. ``kernel(a, b)`` is a Gram-matrix kernel on the variable (see
    ``kcal.kernels``). The conditioning variable enters as its ``(n, n)`` Gram matrix ``k_z``, multiplied
    in (product kernel, Lemma 4.1), or, like the variable, as a kernel and its values: ``z`` ``(n[, d])``
    with ``kernel_z(a, b)`` (then ``k_z = kernel_z(z, z)``).
    The forecast randomness is marginalised empirically (paper §4: "resampling the forecasted labels
    multiple times per example"):

    * ``pairing="index"`` (authors): ``k_ff[i,j] = 1/M sum_s k(f_i^s, f_j^s)`` and
      ``k_tf[i,j] = 1/M sum_s k(t_i^s, f_j^s)`` (broadcasting a deterministic side), i.e. the average of M
      single-sample U-statistics. Unbiased because draws of different rows are independent.
    * ``pairing="cross"``: ``k_ff[i,j] = 1/(Mf^2) sum_{s,s'} k(f_i^s, f_j^{s'})`` for i != j (all pairs of
      draws), ``k_tf[i,j] = 1/(Mt Mf) sum_{s,s'} k(t_i^s, f_j^{s'})`` (the average over s when the target
      is deterministic) and likewise ``k_tt``. Lower variance, O(M^2 n^2) cost.

    Returns ``mmd2_unbiased(k_tt * k_z, k_tf * k_z, k_ff * k_z)``. Checked (values when ``validate_args``):
    ``forecast``, ``target``, ``z`` and ``k_z`` finite, with n rows (columns of the draws) each.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; valid: {list(PAIRINGS)}")
    t = _as_draws(as_float(target, "target"), "target")
    f = _as_draws(as_float(forecast, "forecast"), "forecast")
    same_length(("forecast", f.shape[1]), ("target", t.shape[1]))
    if t.shape[2] != f.shape[2]:
        raise ValueError(
            f"target has {t.shape[2]} coordinates per draw, forecast has {f.shape[2]}: pass one variable"
        )
    n = f.shape[1]
    if z is not None or kernel_z is not None:
        if z is None or kernel_z is None or k_z is not None:
            raise ValueError(
                "pass the conditioning variable either as k_z (a Gram matrix) or as z with kernel_z"
            )
        z = as_float(z, "z")
        same_length(("forecast", n), ("z", z))
    if k_z is not None:
        k_z = as_float(k_z, "k_z")
        if k_z.shape[-2:] != (n, n):
            raise ValueError(f"k_z must be ({n}, {n}) for n={n} rows, got {tuple(k_z.shape)}")
    check_values(("forecast", f), ("target", t), ("z", z), ("k_z", k_z), validate_args=validate_args)
    if z is not None:
        k_z = kernel_z(z, z)
    if n < 2:
        raise ValueError(f"the unbiased MMD^2 estimator needs at least n=2 examples, got n={n}")
    return sample_mmd2_unchecked(f, t, kernel, k_z, pairing)


def sample_mmd2_unchecked(f: Tensor, t: Tensor, kernel: Callable, k_z: Tensor | None, pairing: str) -> Tensor:
    """:func:`sample_mmd2` of checked draws ``f`` ``(Mf, n, p)``, ``t`` ``(Mt, n, p)``."""
    if pairing == "index":
        if t.shape[0] not in (1, f.shape[0]) and f.shape[0] != 1:
            raise ValueError(
                f"index pairing needs equal draw counts (or 1), got {t.shape[0]} and {f.shape[0]}"
            )
        k_tt = kernel(t, t).mean(0)
        k_tf = kernel(t, f).mean(0)
        k_ff = kernel(f, f).mean(0)
    else:
        k_tt = _cross_mean_gram(kernel, t, t)
        k_tf = _cross_mean_gram(kernel, t, f)
        k_ff = _cross_mean_gram(kernel, f, f)
    if k_z is not None:
        k_tt, k_tf, k_ff = k_tt * k_z, k_tf * k_z, k_ff * k_z
    return _mmd2_unbiased(k_tt, k_tf, k_ff)


# ----------------------------------------------------------------------------------------------------
# Generic estimator with analytic marginalisation (classification)
# ----------------------------------------------------------------------------------------------------
def analytic_mmd2(
    probs: Tensor, labels: Tensor, k_y: Tensor, k_z: Tensor | None = None, *, validate_args: bool = True
) -> Tensor:
    """Unbiased MMD^2 for a discrete variable with the forecast marginalised analytically (paper §4.1).

    The one-sample statistic of §4.1 is
    ``h_ij = k((y_i,z_i),(y_j,z_j)) + sum_{c,d} q_i(c) q_j(d) k((c,z_i),(d,z_j))
    - 2 sum_c q_i(c) k((c,z_i),(y_j,z_j))`` with ``k = K_y[c, d] * K_z[i, j]``. In matrix form
    (Q the ``(n, m)`` probability matrix, Y the one-hot labels):

    ``k_ff = (Q K Q^T) o K_z``, ``k_tf = (Y K Q^T) o K_z``, ``k_tt = (Y K Y^T) o K_z``,

    then ``mmd2_unbiased``. With K and K_z symmetric, ``h_ij = (y_i - q_i)^T K (y_j - q_j) K_z[i, j]``, so
    with ``D = Y - Q`` and ``W = K_z`` with a zero diagonal (all ones off it without Z)

    ``MMD^2 = sum((W D K) o D) / (n (n - 1))``,

    which is what is computed: one (n, n) x (n, m) product instead of three (n, n) Gram matrices. Cost
    O(n^2 m + n m^2). Batched: ``probs (..., n, m)``, ``labels (..., n)``, ``k_y (m, m)`` or
    ``(..., m, m)``, ``k_z (..., n, n)``; returns shape ``(...)``. ``n < 2`` raises ``ValueError``. Each
    batch's ``probs`` and ``labels`` are checked as :func:`kcal.inputs.check_probs` checks one, and ``k_y``,
    ``k_z`` finite when ``validate_args``.
    """
    probs, labels = torch.as_tensor(probs), torch.as_tensor(labels)
    k_y = as_float(k_y, "k_y")
    if probs.ndim < 2:
        raise ValueError(f"probs must have shape (..., n, m), got {tuple(probs.shape)}")
    m, n = probs.shape[-1], probs.shape[-2]
    if labels.shape != probs.shape[:-1]:
        raise ValueError(
            f"labels has shape {tuple(labels.shape)}, probs has {tuple(probs.shape)}: pass one label per row"
        )
    if n < 2:
        raise ValueError(f"the unbiased MMD^2 estimator needs at least n=2 examples, got n={n}")
    flat, flat_labels = check_probs(probs.reshape(-1, m), labels.reshape(-1), validate_args=validate_args)
    probs, labels = flat.reshape(probs.shape), flat_labels.reshape(labels.shape)
    if k_y.shape[-2:] != (m, m):
        raise ValueError(f"k_y must be ({m}, {m}) for {m} classes, got {tuple(k_y.shape)}")
    if k_z is not None:
        k_z = as_float(k_z, "k_z")
        if k_z.shape[-2:] != (n, n):
            raise ValueError(f"k_z must be ({n}, {n}) for n={n} rows, got {tuple(k_z.shape)}")
    check_values(("k_y", k_y), ("k_z", k_z), validate_args=validate_args)
    return analytic_mmd2_unchecked(probs, labels, k_y, k_z)


def analytic_mmd2_unchecked(probs: Tensor, labels: Tensor, k_y: Tensor, k_z: Tensor | None) -> Tensor:
    """:func:`analytic_mmd2` of checked inputs."""
    m, n = probs.shape[-1], probs.shape[-2]
    onehot = F.one_hot(labels.long(), m).to(probs.dtype)
    k_y = k_y.to(probs.dtype)
    w = offdiag_weight(k_z, n, probs.dtype, probs.device)
    if not (w.requires_grad or k_y.requires_grad or functorch_active()):
        need = probs.requires_grad and torch.is_grad_enabled()
        return AnalyticClassMMD.apply(probs, onehot, k_y, w, need) / (n * (n - 1))
    diff = onehot - probs
    return ((w @ (diff @ k_y)) * diff).sum((-2, -1)) / (n * (n - 1))
