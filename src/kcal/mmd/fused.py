"""Fused forward-and-gradient passes of the MMD estimators' hot paths, each equal to the autograd
formulation of :mod:`kcal.mmd.estimators` (tested) with fewer passes over the (n, n) and (M, n, n) tensors.

* :class:`RBFIndexMMD` / :func:`rbf_sample_mmd2_index`: index-paired RBF MMD^2 of forecast draws vs y,
  and :class:`GaussianRBFIndexMMD`, the same of the draws ``mean + std * eps`` (the training step's, for
  one model or a stack of them); both from :func:`index_rbf_sums` and :func:`rbf_weighted_sum`, with
  ``exp2`` (:data:`LOG2E`), so equal to the autograd formulation to rounding;
* :class:`AnalyticRBFMMD` / :func:`analytic_gaussian_mmd2`: the Gaussian draws integrated out in
  closed form (``pairing="analytic"``);
* :class:`AnalyticClassMMD`: the classification estimator ``sum((W D K) o D)`` with ``D = Y - Q``;
* :func:`offdiag_weight`: K_z (or ones) with a zero diagonal, the weight all of them use.

Each is used only where no input other than the forecast needs a gradient and no ``torch.func``
transform is active; :mod:`kcal.mmd.estimators` and :mod:`kcal.mmd.steps` decide.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from kcal.inputs import functorch_active
from kcal.mmd.forms import REGRESSION_FORMS

__all__ = [
    "ANALYTIC_KERNELS",
    "AnalyticClassMMD",
    "AnalyticRBFMMD",
    "GaussianRBFIndexMMD",
    "LOG2E",
    "RBFIndexMMD",
    "analytic_gaussian_mmd2",
    "check_analytic",
    "index_rbf_sums",
    "offdiag_weight",
    "rbf_sample_mmd2_index",
    "rbf_weighted_sum",
    "tanh_index_mmd2",
]


class AnalyticClassMMD(torch.autograd.Function):
    """``S = sum((W D K) o D)`` with ``D = Y - Q`` (``analytic_mmd2``) and, in the same pass, its gradient
    ``dS/dQ = -2 W D K`` (W and K symmetric, neither needing a gradient): one product chain forward,
    one multiplication backward."""

    @staticmethod
    def forward(ctx, probs, onehot, k_y, w, need):
        diff = onehot - probs
        g = w @ (diff @ k_y)
        if need:
            ctx.save_for_backward(g)
        return (g * diff).sum((-2, -1))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        (g,) = ctx.saved_tensors
        return g * (-2.0 * grad_out)[..., None, None], None, None, None, None


ANALYTIC_KERNELS = ("point_estimate", "rbf")
"""The kernels on y whose expectation over a Gaussian forecast ``pairing="analytic"`` has in closed form."""


def check_analytic(fm, kernel_y: str) -> None:
    """Raise a one-line ``ValueError`` unless ``pairing="analytic"`` supports the regression form ``fm`` (a
    form with forecast Yhat and target y) with the kernel on y named ``kernel_y``."""
    if fm.forecast != "sample" or fm.target != "y" or kernel_y not in ANALYTIC_KERNELS:
        raise ValueError(
            "pairing='analytic' supports the forms with forecast Yhat and target y "
            f"({sorted(k for k, v in REGRESSION_FORMS.items() if v.forecast == 'sample')}) with kernel_y in "
            f"{list(ANALYTIC_KERNELS)}; got form {fm.name!r} with kernel {kernel_y!r}"
        )


def analytic_gaussian_mmd2(fm, mean, std, y, k_v, k_z):
    """MMD^2 with the Gaussian forecast randomness integrated out in closed form (``pairing="analytic"``).

    Paper §4: the variance "can be reduced by marginalizing out the simulated randomness ... either
    analytically, or empirically". For Yhat_i ~ N(mu_i, s_i^2) independent across rows and the authors'
    RBF ``k(a, b) = exp(-(a - b)^2 / h)``, with D ~ N(m, v): ``E exp(-D^2/h) = sqrt(h/(h+2v)) exp(-m^2/(h+2v))``:

    * ``k_ff[i,j] = sqrt(h/(h + 2(s_i^2 + s_j^2))) exp(-(mu_i - mu_j)^2 / (h + 2(s_i^2 + s_j^2)))`` (i != j)
    * ``k_tf[i,j] = sqrt(h/(h + 2 s_j^2)) exp(-(y_i - mu_j)^2 / (h + 2 s_j^2))``
    * ``k_tt[i,j] = exp(-(y_i - y_j)^2 / h)``

    For ``point_estimate`` (phi(y) = (y, y^2)): ``E phi(Yhat_i) = (mu_i, mu_i^2 + s_i^2)``. This is the
    M -> infinity limit of both sampled pairings: still unbiased, no Monte-Carlo noise, O(n^2) cost.
    Supported: sample forecast forms with kernel_y in {rbf, point_estimate}.
    """
    name = getattr(k_v, "kernel_name", "")
    check_analytic(fm, name)
    n = mean.shape[-1]
    if (
        name == "rbf"
        and not y.requires_grad
        and (k_z is None or not k_z.requires_grad)
        and not functorch_active()
    ):
        w0 = offdiag_weight(k_z, n, mean.dtype, mean.device)
        need = (mean.requires_grad or std.requires_grad) and torch.is_grad_enabled()
        h = float(k_v.kernel_params.get("bandwidth", 1.0))
        return AnalyticRBFMMD.apply(mean, std, y.to(mean.dtype), w0, h, need) / (n * (n - 1))
    var = std.square()
    if name == "rbf":
        h = k_v.kernel_params.get("bandwidth", 1.0)
        neg_a = var.mul(-2.0).sub(0.5 * h)  # -(h/2 + 2 s_i^2), so -(h + 2(s_i^2 + s_j^2)) = neg_a_i + neg_a_j
        neg_den = neg_a.unsqueeze(-1) + neg_a.unsqueeze(-2)
        dm = mean.unsqueeze(-1) - mean.unsqueeze(-2)
        k_ff = torch.exp(dm.square() / neg_den) * torch.rsqrt(neg_den * (-1.0 / h))
        neg_den_f = neg_a - 0.5 * h  # -(h + 2 s_j^2)
        dt = y.unsqueeze(-1) - mean.unsqueeze(-2)
        k_tf = torch.exp(dt.square() / neg_den_f) * torch.rsqrt(neg_den_f * (-1.0 / h))
        dy = y.unsqueeze(-1) - y.unsqueeze(-2)
        k_tt = torch.exp(dy.square() * (-1.0 / h))
    else:
        phi_f = torch.stack([mean, mean.square() + var], dim=-1)
        phi_t = torch.stack([y, y.square()], dim=-1)
        k_ff = phi_f @ phi_f.T
        k_tf = phi_t @ phi_f.T
        k_tt = phi_t @ phi_t.T
    # sum_{i != j} W_ij (k_tt + k_ff - k_tf - k_tf^T) = sum_ij W0_ij (k_tt + k_ff - 2 k_tf) for symmetric
    # W (= K_z, or all ones) with zeroed diagonal W0: one fused weighted sum instead of three.
    h_mat = torch.add(k_ff, k_tf, alpha=-2.0).add_(k_tt)
    w0 = offdiag_weight(k_z, n, mean.dtype, mean.device)
    return torch.dot(h_mat.reshape(-1), w0.reshape(-1)) / (n * (n - 1))


class AnalyticRBFMMD(torch.autograd.Function):
    """Fused closed-form (``pairing="analytic"``) RBF MMD^2 sum; gradients w.r.t. mean and std in forward.

    With ``D_ij = h + 2(s_i^2 + s_j^2)``, ``m_ij = mu_i - mu_j``, ``B_j = h + 2 s_j^2``, ``t_ij = y_i - mu_j``:
    ``S = sum_ij W_ij [exp(-(y_i-y_j)^2/h) + sqrt(h/D_ij) e^{-m_ij^2/D_ij} - 2 sqrt(h/B_j) e^{-t_ij^2/B_j}]``
    for a symmetric, zero-diagonal ``W``. Writing ``P = W o k_ff / D`` and ``R = W o k_tf``:
    ``dS/dmu_k = -4 sum_j P_kj m_kj - 2 (2/B_k) sum_i R_ik t_ik`` and
    ``dS/ds_k = 8 s_k sum_j P_kj (m_kj^2/D_kj - 1/2) - 2 (4 s_k/B_k) sum_i R_ik (t_ik^2/B_k - 1/2)``.
    Same value as the autograd formulation (tested); about a third of its passes over (n, n) tensors.
    """

    @staticmethod
    def forward(ctx, mean, std, y, w, h, need):
        var = std * std
        neg_a = var * -2.0 - 0.5 * h  # -(h/2 + 2 s^2)
        # forecast-forecast
        nd = neg_a.unsqueeze(-1) + neg_a.unsqueeze(-2)  # -D
        dm = mean.unsqueeze(-1) - mean.unsqueeze(-2)
        r = torch.mul(dm, dm).div_(nd)  # -m^2/D
        k = torch.exp(r).mul_(torch.rsqrt(nd * (-1.0 / h))).mul_(w)  # W o k_ff
        s_ff = k.sum()
        if need:
            k.div_(nd)  # -P
            g_mu = k.mul(dm).sum(-1).mul_(4.0)  # -4 sum_j P m
            g_sd = k.mul_(r.add_(0.5)).sum(-1).mul_(8.0 * std)  # -P (1/2 - m^2/D) = P (m^2/D - 1/2)
        del nd, dm, r, k
        # target-forecast: [i, j] = E k(y_i, Yhat_j)
        nb = neg_a - 0.5 * h  # -B
        dt = y.unsqueeze(-1) - mean.unsqueeze(-2)
        q = torch.mul(dt, dt).div_(nb)  # -t^2/B
        k = torch.exp(q).mul_(torch.rsqrt(nb * (-1.0 / h))).mul_(w)  # R = W o k_tf
        s_tf = k.sum()
        if need:
            b = -nb
            g_mu = g_mu - (4.0 / b) * k.mul(dt).sum(-2)
            g_sd = g_sd + (8.0 * std / b) * k.mul_(q.add_(0.5)).sum(-2)  # -(t^2/B - 1/2) = q + 1/2
            ctx.save_for_backward(g_mu, g_sd)
        del dt, q, k
        dy = y.unsqueeze(-1) - y.unsqueeze(-2)
        s_tt = torch.dot(torch.mul(dy, dy).mul_(-1.0 / h).exp_().reshape(-1), w.reshape(-1))
        return s_tt + s_ff - 2.0 * s_tf

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        g_mu, g_sd = ctx.saved_tensors
        return g_mu * grad_out, g_sd * grad_out, None, None, None, None


def offdiag_weight(k_z: Tensor | None, n: int, dtype, device) -> Tensor:
    """``K_z`` (``(..., n, n)``, or a matrix of ones) with its diagonal set to 0."""
    if k_z is None:
        return 1.0 - torch.eye(n, dtype=dtype, device=device)
    if k_z.requires_grad or functorch_active():
        return k_z.to(dtype) * (1.0 - torch.eye(n, dtype=dtype, device=device))
    w = k_z.to(dtype).clone()
    w.diagonal(dim1=-2, dim2=-1).zero_()  # leading batch dimensions too
    return w


#: ``exp(t) = 2 ** (t * LOG2E)``: torch's ``exp2`` is 2.5-3.5x faster than its ``exp`` on a CPU (measured on
#: (10, 64, 64) and (10, 256, 256) float32 tensors, AVX-512), and the RBF sums of the regression MMD are
#: mostly exponentials. The extra rounding of ``t * LOG2E`` is a relative error of about ``|t|`` ulps.
LOG2E = 1.0 / math.log(2.0)


def rbf_weighted_sum(v: Tensor, w: Tensor, h: float) -> Tensor:
    """``sum_ij W_ij exp(-(v_i - v_j)^2 / h)`` over the last dimension of ``v`` ``(..., n)`` with ``w``
    ``(..., n, n)``; shape ``(...)``. The target-target term of :class:`RBFIndexMMD`, which depends on the
    batch only (``y`` and the x-kernel), so a training loop can compute it once per batch ahead of time."""
    d = v.unsqueeze(-1) - v.unsqueeze(-2)
    return (torch.mul(d, d).mul_(-LOG2E / h).exp2_() * w).sum((-2, -1))


#: elements of one (..., M, n, n) pass of :func:`index_rbf_sums`: a stack's members are taken in groups that
#: fit (at least one member), and without a gradient one member's draws too. Table 6's M = 200 makes a
#: 50-member stack's pass (50, 200, 64, 64), 164 MB, and a validation chunk's (200, 256, 256), 52 MB: every
#: operation over them streams through memory. One member at a time, the same call took 80 instead of 451
#: ms (one thread, this project's CPU), with every member's values and gradients bit for bit the same.
PASS_ELEMENTS = 1 << 19


def index_rbf_sums(draws: Tensor, y: Tensor, w: Tensor, h: float, need: bool):
    """``(S, G)`` of M index-paired draws ``(..., M, n)`` against targets ``y`` ``(..., n)`` with the symmetric,
    zero-diagonal weight ``w`` ``(..., n, n)`` and ``k(a, b) = exp(-(a - b)^2 / h)`` (leading dimensions: a
    stack of members, each its own sums):

    ``S = (S_ff - 2 S_tf) / M`` with ``S_ff = sum_s sum_ij W_ij k(f_si, f_sj)`` and
    ``S_tf = sum_s sum_ij W_ij k(y_i, f_sj)``, and, when ``need``, ``G_sk = dS/df_sk`` (else None):
    ``G_sk = -4/(h M) [sum_j W_kj k(f_sk, f_sj) (f_sk - f_sj) + sum_i W_ik k(y_i, f_sk) (y_i - f_sk)]``.
    Each (M, n, n) pass is one eager operation (a (2M, n, n) tensor holding both costs as much), over as
    many members (and, without ``need``, draws) at a time as :data:`PASS_ELEMENTS` holds."""
    m, n = draws.shape[-2:]
    lead = torch.broadcast_shapes(draws.shape[:-2], y.shape[:-1], w.shape[:-2])
    k, group = math.prod(lead), PASS_ELEMENTS // (m * n * n)
    if k <= max(group, 1) and (need or group >= 1):
        return _index_rbf_pass(draws, y, w, h, need)
    draws, y, w = draws.expand(*lead, m, n).reshape(k, m, n), y.expand(*lead, n), w.expand(*lead, n, n)
    y, w = y.reshape(k, n), w.reshape(k, n, n)
    if need or group >= 1:  # whole members: a member's sums over its draws stay one reduction
        group = max(group, 1)
        parts = [_index_rbf_pass(draws[i : i + group], y[i : i + group], w[i : i + group], h, need)
                 for i in range(0, k, group)]  # fmt: skip
        s = torch.cat([p[0] for p in parts]).reshape(lead)
        return s, torch.cat([p[1] for p in parts]).reshape(*lead, m, n) if need else None
    # no gradient, and one member's (M, n, n) too large: its draws a few at a time, each draw's sums kept
    # apart until the one sum over the draws, as in one pass
    per = max(PASS_ELEMENTS // (n * n), 1)
    out = []
    for i in range(k):
        sums = [_draw_sums(draws[i, j : j + per], y[i], w[i], h) for j in range(0, m, per)]
        s_ff, s_tf = (torch.cat(part, -2).sum((-2, -1)) for part in zip(*sums, strict=True))
        out.append((s_ff - 2.0 * s_tf) / m)
    return torch.stack(out).reshape(lead), None


def _draw_sums(draws: Tensor, y: Tensor, w: Tensor, h: float) -> tuple[Tensor, Tensor]:
    """``(..., M, 1)`` each: every draw's ``sum_ij W_ij k(f_i, f_j)`` and ``sum_ij W_ij k(y_i, f_j)`` (no
    gradient; leading dimensions: members)."""
    c, flat_w = -LOG2E / h, w.flatten(-2).unsqueeze(-1)
    d = draws.unsqueeze(-1) - draws.unsqueeze(-2)
    ff = torch.matmul(torch.mul(d, d).mul_(c).exp2_().flatten(-2), flat_w)
    d = y.unsqueeze(-2).unsqueeze(-1) - draws.unsqueeze(-2)
    return ff, torch.matmul(torch.mul(d, d).mul_(c).exp2_().flatten(-2), flat_w)


def _index_rbf_pass(draws: Tensor, y: Tensor, w: Tensor, h: float, need: bool):
    """:func:`index_rbf_sums` in one pass over all of ``draws``."""
    m = draws.shape[-2]
    if not need:
        ff, tf = _draw_sums(draws, y, w, h)
        return (ff.sum((-2, -1)) - 2.0 * tf.sum((-2, -1))) / m, None
    c = -LOG2E / h
    wb = w.unsqueeze(-3)  # (..., 1, n, n): the same weight for every draw
    d = draws.unsqueeze(-1) - draws.unsqueeze(-2)  # forecast-forecast
    e = torch.mul(d, d).mul_(c).exp2_().mul_(wb)
    s_ff = e.sum((-3, -2, -1))
    g = e.mul_(d).sum(-1)
    d = y.unsqueeze(-2).unsqueeze(-1) - draws.unsqueeze(-2)  # target-forecast: [s, i, j] = k(y_i, f_sj)
    e = torch.mul(d, d).mul_(c).exp2_().mul_(wb)
    s_tf = e.sum((-3, -2, -1))
    g = g.add_(e.mul_(d).sum(-2)).mul_(-4.0 / (h * m))
    return (s_ff - 2.0 * s_tf) / m, g


class RBFIndexMMD(torch.autograd.Function):
    """Fused index-paired RBF MMD^2 sum with the gradient w.r.t. the draws computed in the forward pass.

    ``S = sum_ij W_ij [ k(y_i, y_j) + 1/M sum_s k(f_si, f_sj) - 2/M sum_s k(y_i, f_sj) ]`` with
    ``k(a, b) = exp(-(a - b)^2 / h)`` and a symmetric weight ``W`` (zero diagonal). Only ``draws`` may need a
    gradient (:func:`index_rbf_sums` gives it). Doing this in one pass avoids storing (M, n, n) tensors for
    autograd and roughly halves the number of passes over them. ``s_tt``, when given, is the target-target
    sum (:func:`rbf_weighted_sum` of ``y``) computed ahead of time.
    """

    @staticmethod
    def forward(ctx, draws, y, w, h, need, s_tt=None):
        s, g = index_rbf_sums(draws, y, w, h, need)
        if s_tt is None:
            s_tt = rbf_weighted_sum(y, w, h)
        if need:
            ctx.save_for_backward(g)
        return s_tt + s

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        (g,) = ctx.saved_tensors
        return g * grad_out, None, None, None, None, None


class GaussianRBFIndexMMD(torch.autograd.Function):
    """:class:`RBFIndexMMD` of the reparameterised draws ``f_s = mean + std * eps_s`` divided by ``n (n - 1)``
    (the unbiased MMD^2 of the training step), with the draws formed inside: ``dMMD^2/dmean = sum_s G_s`` and
    ``dMMD^2/dstd = sum_s G_s eps_s`` (``G`` from :func:`index_rbf_sums`, scaled), so autograd records one
    node instead of three. ``mean``, ``std``, ``y`` ``(..., n)``, ``eps`` ``(..., M, n)``, ``w`` ``(..., n, n)``,
    ``s_tt`` ``(...)``: leading dimensions give one MMD^2 per member of a stack."""

    @staticmethod
    def forward(ctx, mean, std, eps, y, w, h, need, s_tt=None):
        n = eps.shape[-1]
        s, g = index_rbf_sums(torch.addcmul(mean.unsqueeze(-2), std.unsqueeze(-2), eps), y, w, h, need)
        if s_tt is None:
            s_tt = rbf_weighted_sum(y, w, h)
        scale = 1.0 / (n * (n - 1))
        if need:
            g.mul_(scale)
            ctx.save_for_backward(g.sum(-2), g.mul_(eps).sum(-2))
        return (s_tt + s) * scale

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        g_mean, g_std = ctx.saved_tensors
        grad_out = grad_out.unsqueeze(-1)
        return g_mean * grad_out, g_std * grad_out, None, None, None, None, None, None


def tanh_index_mmd2(mean: Tensor, std: Tensor, eps: Tensor, y: Tensor, w: Tensor, threshold: float,
                    scale: float) -> Tensor:  # fmt: skip
    """Index-paired MMD^2 of the draws ``f_s = mean + std * eps_s`` against ``y`` with the decision kernel
    ``k(a, b) = t(a) t(b)``, ``t(v) = tanh((v - threshold) / scale)``, and the symmetric, zero-diagonal
    weight ``w``. The kernel has rank one, so ``sum_{i != j} W_ij [k(y_i, y_j) + 1/M sum_s (k(f_si, f_sj) -
    2 k(y_i, f_sj))] = 1/M sum_s d_s^T W d_s`` with ``d_s = t(f_s) - t(y)``: divided by ``n (n - 1)``, the
    unbiased estimate of :func:`kcal.mmd.regression_mmd` (``kernel_y="tanh_decision"``, ``pairing="index"``;
    tested), in O(M n^2) multiply-adds and no (M, n, n) tensor. Plain autograd operations; leading
    dimensions (``mean`` ``(..., n)``, ``eps`` ``(..., M, n)``, ``w`` ``(..., n, n)``) give one value per member
    of a stack."""
    m, n = eps.shape[-2:]
    draws = torch.addcmul(mean.unsqueeze(-2), std.unsqueeze(-2), eps)
    d = torch.tanh((draws - threshold) / scale) - torch.tanh((y.unsqueeze(-2) - threshold) / scale)
    return (d * torch.matmul(d, w)).sum((-2, -1)) / (m * n * (n - 1))


def rbf_sample_mmd2_index(y: Tensor, draws: Tensor, bw: float, k_z: Tensor | None) -> Tensor:
    """Fast path of ``sample_mmd2`` for (rbf on y, deterministic target y, index pairing).

    Same value as the generic path (tested): the off-diagonal weight ``W = K_z o (1 - I)`` is folded into
    one fused weighted sum (``RBFIndexMMD``). Used only when neither y nor K_z needs a gradient and no
    functorch transform (vmap/grad) is active; otherwise ``regression_mmd`` uses ``sample_mmd2``.
    """
    m, n = draws.shape
    w = offdiag_weight(k_z, n, draws.dtype, draws.device)
    need = draws.requires_grad and torch.is_grad_enabled()
    return RBFIndexMMD.apply(draws, y, w, float(bw), need) / (n * (n - 1))
