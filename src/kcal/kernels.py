"""Kernels (Gram-matrix functions) used by the kernel calibration metrics.

Every kernel here is a plain, differentiable torch function ``k(a, b) -> Gram`` with

* ``a`` of shape ``(..., n, d)`` and ``b`` of shape ``(..., m, d)`` (leading batch dimensions broadcast);
* a 1-D input ``(n,)`` is treated as ``(n, 1)`` (n scalar observations);
* the result has shape ``(..., n, m)`` with ``result[..., i, j] = k(a[..., i, :], b[..., j, :])``.

The kernels are the ones used in Marx, Zalouk & Ermon, "Calibration by Distribution Matching: Trainable
Kernel Calibration Metrics" (NeurIPS 2023):

* ``rbf`` / ``laplacian``: universal kernels over Y, Z and X (paper §4, "On the Choice of the Kernel";
  Lemma 4.1 for products of kernels).
* ``tanh_decision``: the relaxed sign kernel of the decision-calibration experiment (paper §6.3 and
  Appendix B.2).
* ``point_estimate``: the kernel of paper §5, Example 1 (squared-loss point estimates).
* ``threshold_family``: the kernel of paper §5, Example 2 (all threshold decisions on [0, T]).
* ``class_rbf`` / ``one_hot_delta``: m x m kernels between one-hot class vectors (paper §4.1).
* ``product``: the pointwise product kernel k((y, z), (y', z')) = k_y(y, y') k_z(z, z') (paper Lemma 4.1).

``get_kernel(name, **params)`` returns a validated ``callable(a, b)`` from the ``KERNELS`` registry.

Data-driven bandwidths: ``median_heuristic(a, kernel)`` is the median pairwise distance of a batch in the
kernel's own convention (squared Euclidean for ``rbf``, L1 for ``laplacian``); ``kernel_report`` says
whether a bandwidth makes a kernel numerically degenerate on a batch (the identity, or all ones).

Checks: parameters (bandwidths, scales, thresholds) are checked when a kernel is called or bound. The
Gram-matrix kernels check shapes only and let values through as torch's elementwise functions do (a NaN
row gives a NaN row): they run inside every estimator's step, whose caller checks the data once
(:mod:`kcal.inputs`). The functions that reduce a batch to a number, :func:`median_heuristic` and
:func:`kernel_report`, refuse NaN or infinite rows with a one-line ``ValueError`` when ``validate_args``
(the default; they synchronise with the host anyway).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable

import torch
from torch import Tensor

from kcal.inputs import as_float, check_values

__all__ = [
    "KERNELS",
    "as_points",
    "check_finite",
    "check_positive",
    "class_rbf",
    "delta",
    "get_kernel",
    "kernel_key",
    "kernel_param_names",
    "kernel_report",
    "laplacian",
    "median_heuristic",
    "one_hot_delta",
    "point_estimate",
    "product",
    "rbf",
    "rbf_offdiag",
    "sq_dist",
    "tanh_decision",
    "threshold_family",
]

# Up to this many coordinates the squared distance is computed from explicit differences (exact,
# memory (..., n, m, d)); above it the matmul expansion ||a||^2 + ||b||^2 - 2<a, b> is used (clamped at 0).
_DIRECT_MAX_DIM = 4


def as_points(a: Tensor) -> Tensor:
    """Return ``a`` as a ``(..., n, d)`` point set: a 1-D ``(n,)`` tensor becomes ``(n, 1)``."""
    if not isinstance(a, Tensor):
        a = torch.as_tensor(a)
    if a.dim() == 0:
        raise ValueError("kernel inputs must have at least one dimension (n,) or (..., n, d); got a scalar")
    if a.dim() == 1:
        a = a.unsqueeze(-1)
    return a


def check_positive(name: str, value: float) -> float:
    """Return ``value`` as a float if it is a finite number > 0 (a 1-element tensor is accepted).

    Otherwise raise ``ValueError`` naming the parameter ``name``. Used for bandwidths and scales.
    """
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a positive scalar, got a tensor of shape {tuple(value.shape)}")
        value = float(value.detach())
    try:
        value = float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a positive number, got {value!r}") from err
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def check_finite(name: str, value: float) -> float:
    """Return ``value`` as a float if it is a finite number, else raise ``ValueError`` naming ``name``."""
    try:
        value = float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a finite number, got {value!r}") from err
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


def _pair(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    a, b = as_points(a), as_points(b)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"kernel inputs have different feature dimensions: {a.shape[-1]} vs {b.shape[-1]}")
    return a, b


def _no_graph(t: Tensor) -> bool:
    """True when ``t`` is tracked by no autograd graph (eager, no torch.func transform): in-place is safe."""
    if t.requires_grad:
        return False
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    return active is not None and not active()


def sq_dist(a: Tensor, b: Tensor) -> Tensor:
    """Squared Euclidean distances ``||a_i - b_j||^2`` as a ``(..., n, m)`` tensor.

    For ``d <= 4`` coordinates the differences are formed explicitly (exact, no cancellation). For larger
    ``d`` the expansion ``||a||^2 + ||b||^2 - 2 a b^T`` (one matmul) is used and clamped at 0; when ``a`` and
    ``b`` are the same tensor the diagonal is set to exactly 0. In float64 the expansion's absolute error is
    ~1e-16 * ||a||^2, far below the test tolerances; in float32 it is ~1e-7 * ||a||^2.
    """
    a, b = _pair(a, b)
    if a.shape[-1] <= _DIRECT_MAX_DIM:
        diff = a.unsqueeze(-2) - b.unsqueeze(-3)
        return diff.square().sum(-1)
    a2 = a.square().sum(-1, keepdim=True)
    b2 = b.square().sum(-1, keepdim=True)
    if a.dim() == 2 and b.dim() == 2:
        d2 = torch.addmm(a2 + b2.T, a, b.T, alpha=-2.0)
    else:
        d2 = (a2 + b2.transpose(-1, -2)) - 2.0 * (a @ b.transpose(-1, -2))
    if _no_graph(d2):  # no autograd graph: cheaper in-place updates
        d2.clamp_min_(0.0)
        if a is b:
            d2.diagonal(dim1=-2, dim2=-1).zero_()
        return d2
    d2 = d2.clamp_min(0.0)
    if a is b:
        n = a.shape[-2]
        d2 = d2 * (1.0 - torch.eye(n, dtype=d2.dtype, device=d2.device))
    return d2


def rbf(a: Tensor, b: Tensor, bandwidth: float = 1.0) -> Tensor:
    """Gaussian (RBF) kernel ``k(a, b) = exp(-||a - b||^2 / bandwidth)``.

    AUTHORS' CONVENTION: the bandwidth divides the *squared* distance directly (no factor 2, no square),
    as in the official implementation's ``rbf_kernel``. The textbook ``exp(-||a-b||^2 / (2 sigma^2))``
    corresponds to ``bandwidth = 2 sigma^2``. Universal on R^d (paper §4, Lemma 4.1).
    """
    bandwidth = check_positive("bandwidth", bandwidth)
    d2 = sq_dist(a, b)
    if _no_graph(d2):
        return d2.mul_(-1.0 / bandwidth).exp_()
    return torch.exp(d2 / (-bandwidth))


def rbf_offdiag(x: Tensor, bandwidth: float) -> Tensor:
    """``W_ij = exp(-||x_i - x_j||^2 / bandwidth)`` for ``i != j`` and ``W_ii = 0``, for ``x`` of shape ``(n, d)``
    (or ``(..., n, d)``: one matrix per leading index) outside any autograd graph: the off-diagonal weight
    of the MMD U-statistics with an RBF kernel on x.

    For ``(n, d)`` the same operations as ``rbf(x, x, bandwidth)`` (so the same values off the diagonal)
    without its argument checks: for callers that checked ``bandwidth`` once. A stack ``(..., n, d)`` takes
    one batched product for all its matrices, so a training loop can build every batch's weight of an
    epoch at once.
    """
    if x.shape[-1] <= _DIRECT_MAX_DIM:
        d2 = (x.unsqueeze(-2) - x.unsqueeze(-3)).square().sum(-1)
    elif x.dim() == 2:
        x2 = x.square().sum(-1, keepdim=True)
        d2 = torch.addmm(x2 + x2.T, x, x.T, alpha=-2.0).clamp_min_(0.0)
    else:
        flat = x.reshape(-1, *x.shape[-2:])
        x2 = flat.square().sum(-1, keepdim=True)
        d2 = (
            torch.baddbmm(x2 + x2.mT, flat, flat.mT, alpha=-2.0)
            .clamp_min_(0.0)
            .view(*x.shape[:-1], x.shape[-2])
        )
    w = d2.mul_(-1.0 / bandwidth).exp_()
    w.diagonal(dim1=-2, dim2=-1).zero_()
    return w


def laplacian(a: Tensor, b: Tensor, bandwidth: float = 1.0) -> Tensor:
    """Laplacian kernel ``k(a, b) = exp(-||a - b||_1 / bandwidth)`` (L1 distance over the coordinates).

    Used by MMCE (Kumar et al. 2018) on the confidence scale and available as a universal kernel on Y.
    Differences are formed explicitly (memory ``(..., n, m, d)``).
    """
    bandwidth = check_positive("bandwidth", bandwidth)
    a, b = _pair(a, b)
    dist = (a.unsqueeze(-2) - b.unsqueeze(-3)).abs().sum(-1)
    return torch.exp(dist / (-bandwidth))


def tanh_decision(a: Tensor, b: Tensor, threshold: float = 0.0, scale: float = 1.0) -> Tensor:
    """Relaxed decision kernel ``k(y, y') = tanh((y - c)/s) * tanh((y' - c)/s)`` (paper §6.3, App. B.2).

    It relaxes ``sign(y - c) sign(y' - c)`` for the decision loss ``l(a, y) = 1{a != sign(y - c)}``.
    With ``scale=1`` and ``threshold`` equal to the dataset's centre (0 after the official median-centring
    of y) it reproduces the authors' ``tanh_kernel`` exactly (their kernel has no threshold and no
    bandwidth). For ``d > 1`` coordinates it is the inner product of the tanh features.
    """
    threshold = check_finite("threshold", threshold)
    scale = check_positive("scale", scale)
    a, b = _pair(a, b)
    fa = torch.tanh((a - threshold) / scale)
    fb = torch.tanh((b - threshold) / scale)
    return fa @ fb.transpose(-1, -2)


def point_estimate(a: Tensor, b: Tensor) -> Tensor:
    """Point-estimate decision kernel ``k(y, y') = <(y, y^2), (y', y'^2)> = y y' + y^2 y'^2``.

    Paper §5, Example 1: the expected squared loss of any point estimate depends on Y only through E[Y] and
    E[Y^2], so MMD with this feature map is zero iff both moments match. For ``d > 1`` coordinates the
    features of all coordinates are concatenated (sum over coordinates).
    """
    a, b = _pair(a, b)
    return a @ b.transpose(-1, -2) + a.square() @ b.square().transpose(-1, -2)


def threshold_family(a: Tensor, b: Tensor, upper: float = 1.0, lower: float = 0.0) -> Tensor:
    """Threshold-decision kernel ``k(y, y') = min(y, y')`` on ``[0, T]`` (paper §5, Example 2).

    It is the kernel of the feature map ``phi(y) = (1{y >= t})_{t in [lower, upper]}``:
    ``<phi(y), phi(y')> = min(clip(y), clip(y')) - lower`` with ``clip`` = clamp to ``[lower, upper]``.
    Inputs outside ``[lower, upper]`` are therefore CLAMPED, which is exactly this feature map evaluated at
    real-valued y (forecast samples from a Gaussian routinely leave [0, T]); the gradient is 0 outside the
    interval. With the default ``lower=0`` this is ``min(y, y')`` for ``y, y' in [0, T]`` as in the paper.
    For ``d > 1`` coordinates the per-coordinate kernels are summed.
    """
    upper = check_finite("upper", upper)
    lower = check_finite("lower", lower)
    if not upper > lower:
        raise ValueError(f"threshold_family needs upper > lower, got upper={upper}, lower={lower}")
    a, b = _pair(a, b)
    ca = a.clamp(lower, upper) - lower
    cb = b.clamp(lower, upper) - lower
    return torch.minimum(ca.unsqueeze(-2), cb.unsqueeze(-3)).sum(-1)


BANDWIDTH_KERNELS = ("rbf", "laplacian")
"""Kernels whose bandwidth divides a distance, so that the median heuristic applies."""

UNIFORM_MEDIAN_SQ_DIST = (1.0 - 1.0 / math.sqrt(2.0)) ** 2
"""Median of ``(U - U')^2`` for independent ``U, U' ~ U(0, 1)`` (|U - U'| has density 2(1 - t)): the
median heuristic of the uniform target of the PIT forms, ≈ 0.0858."""

DEGENERATE_OFFDIAG = 1e-6
"""A Gram matrix whose mean off-diagonal entry is below this is numerically the identity (each row is
only similar to itself), and one whose off-diagonal entries all lie within this of 1 is numerically all
ones (it cannot tell rows apart). Either way the MMD term built on it, and its gradient, are ~1e-6 of
their size at a working bandwidth or less."""


MEDIAN_MAX_ROWS = 2048
"""The median heuristic looks at the first this many rows (about 2 million pairs)."""


def _pairwise(a: Tensor, kernel: str, max_rows: int = MEDIAN_MAX_ROWS) -> Tensor:
    """Distances between distinct rows of ``a`` (every ordered pair; leading batch dims flattened; the
    first ``max_rows`` rows), in ``kernel``'s convention."""
    p = as_points(a).detach().to(torch.float64)
    p = p.reshape(-1, *p.shape[-2:])[:, :max_rows]
    d = torch.cdist(p, p, p=1.0) if kernel == "laplacian" else torch.cdist(p, p).pow(2)
    n = p.shape[-2]
    off = ~torch.eye(n, dtype=torch.bool, device=p.device)  # both triangles: cdist is symmetric to rounding
    return d[:, off].reshape(-1)


def median_heuristic(
    a: Tensor, kernel: str = "rbf", max_rows: int = MEDIAN_MAX_ROWS, *, validate_args: bool = True
) -> float:
    """The median heuristic bandwidth of ``kernel`` on the rows of ``a`` (``(n,)`` or ``(..., n, d)``).

    ``rbf`` (``exp(-||u - v||^2 / bandwidth)``): the median over pairs ``i != j`` of ``||a_i - a_j||^2``,
    so the median pair has kernel value ``e^-1``. ``laplacian`` (``exp(-||u - v||_1 / bandwidth)``): the
    median L1 distance. Leading batch dimensions pool their pairs. The rows are detached (no gradient
    flows through the bandwidth) and the distances are taken in float64; returning a float is one host
    synchronisation. With n rows there are n(n - 1)/2 pairs: n = 2 gives that pair's distance, and below
    about 20 rows the value moves noticeably from batch to batch; only the first ``max_rows`` rows are used
    (default ``MEDIAN_MAX_ROWS``). The same function resolves the configs' ``bandwidth_z: median`` over the
    training split and the evaluation KCE's bandwidth. When over half the pairs are equal
    rows (a discrete variable), the median is 0 and the mean of the non-zero distances is used instead;
    when all rows are equal, 1.0. NaN or infinite rows are refused when ``validate_args`` (with it off they
    drop out of the non-zero mean, a number that means nothing: the training step's risk).
    """
    key = kernel_key(kernel)
    if key not in BANDWIDTH_KERNELS:
        raise ValueError(f"the median heuristic applies to {list(BANDWIDTH_KERNELS)}, not {key!r}")
    check_values(("a", as_float(a, "a")), validate_args=validate_args)
    d = _pairwise(a, key, max_rows)
    if d.numel() == 0:
        raise ValueError("the median heuristic needs at least 2 rows")
    med = float(d.median())
    if med > 0.0:
        return med
    nonzero = d[d > 0]
    return float(nonzero.mean()) if nonzero.numel() else 1.0


def kernel_report(
    a: Tensor, bandwidth: float, kernel: str = "rbf", *, validate_args: bool = True
) -> str | None:
    """``None`` when ``kernel`` with ``bandwidth`` separates the rows of ``a``, else a one-line diagnosis.

    Degenerate means (see ``DEGENERATE_OFFDIAG``) a mean off-diagonal Gram entry below 1e-6 (numerically
    the identity: the bandwidth is far below the distances between rows) or every off-diagonal entry
    within 1e-6 of 1 (numerically all ones: the bandwidth is far above them). The message gives the
    bandwidth, the batch's median distance and the bandwidth the median heuristic would use. One host
    synchronisation; ``kernel`` must be ``rbf`` or ``laplacian``; NaN or infinite rows of ``a`` are refused
    when ``validate_args``.
    """
    key = kernel_key(kernel)
    if key not in BANDWIDTH_KERNELS:
        return None
    bandwidth = check_positive("bandwidth", bandwidth)
    check_values(("a", as_float(a, "a")), validate_args=validate_args)
    d = _pairwise(a, key)
    if d.numel() == 0:
        return None
    offdiag = torch.exp(-d / float(bandwidth))
    mean, lowest = float(offdiag.mean()), float(offdiag.min())
    if mean >= DEGENERATE_OFFDIAG and lowest <= 1.0 - DEGENERATE_OFFDIAG:
        return None
    what = "squared distance" if key == "rbf" else "L1 distance"
    state = (
        f"numerically the identity (mean off-diagonal value {mean:.1e})"
        if mean < DEGENERATE_OFFDIAG
        else f"numerically all ones (smallest off-diagonal value 1 - {1.0 - lowest:.1e})"
    )
    return (
        f"the {key} kernel with bandwidth {float(bandwidth):.4g} is {state} on a batch of "
        f"{as_points(a).shape[-2]} rows: their median {what} is {median_heuristic(a, key, validate_args=False):.4g}, which is "
        f"the bandwidth the median heuristic would use (leave the bandwidth unset to use it)"
    )


def delta(a: Tensor, b: Tensor) -> Tensor:
    """Delta (exact match) kernel ``k(a, b) = 1{a == b}`` (all coordinates equal).

    The natural kernel for a discrete conditioning variable (group ids, actions, threshold events):
    conditioning on Z then means matching distributions separately within each level. Constant w.r.t. its
    inputs (no gradient).
    """
    a, b = _pair(a, b)
    eq = (a.unsqueeze(-2) == b.unsqueeze(-3)).all(-1)
    dtype = a.dtype if a.is_floating_point() else torch.get_default_dtype()
    return eq.to(dtype)


def class_rbf(num_classes: int, bandwidth: float = 1.0, *, dtype=None, device=None) -> Tensor:
    """m x m RBF kernel between one-hot class vectors: ``K_cd = exp(-||e_c - e_d||^2 / bandwidth)``.

    That is 1 on the diagonal and ``exp(-2 / bandwidth)`` off it (the authors' classification y-kernel,
    ``exp(-||e_c - e_d||^2 / bandwidth)``; paper §4.1). Small bandwidths give (numerically) the identity, see ``one_hot_delta``.
    """
    num_classes = _check_num_classes(num_classes)
    bandwidth = check_positive("bandwidth", bandwidth)
    off = math.exp(-2.0 / bandwidth)
    eye = torch.eye(num_classes, dtype=dtype, device=device)
    return eye + off * (1.0 - eye)


def one_hot_delta(num_classes: int, *, dtype=None, device=None) -> Tensor:
    """m x m delta kernel between classes (the identity matrix): ``K_cd = 1{c == d}``."""
    num_classes = _check_num_classes(num_classes)
    return torch.eye(num_classes, dtype=dtype, device=device)


def _check_num_classes(num_classes: int) -> int:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    return num_classes


def product(*grams: Tensor) -> Tensor:
    """Pointwise product of Gram matrices: the product kernel ``k_y(y, y') k_z(z, z')`` (paper Lemma 4.1).

    Shapes must broadcast. At least one Gram matrix is required.
    """
    if not grams:
        raise ValueError("product() needs at least one Gram matrix")
    out = grams[0]
    for g in grams[1:]:
        out = out * g
    return out


KERNELS: dict[str, Callable[..., Tensor]] = {
    "rbf": rbf,
    "laplacian": laplacian,
    "tanh_decision": tanh_decision,
    "point_estimate": point_estimate,
    "threshold_family": threshold_family,
    "delta": delta,
}
"""Registry of Gram-matrix kernels by name (see ``get_kernel``)."""

_ALIASES = {"gaussian": "rbf", "tanh": "tanh_decision", "laplace": "laplacian"}


def kernel_param_names(name: str) -> tuple[str, ...]:
    """The parameter names accepted by kernel ``name`` (after the two inputs)."""
    return _param_names(kernel_key(name))


@functools.cache
def _param_names(key: str) -> tuple[str, ...]:
    return tuple(list(inspect.signature(KERNELS[key]).parameters)[2:])  # inspect is slow: once per kernel


def kernel_key(name: str) -> str:
    """The registry key of kernel ``name`` (case-insensitive; aliases ``gaussian``, ``tanh``, ``laplace``).

    Unknown names raise ``ValueError`` listing the valid names and aliases.
    """
    if not isinstance(name, str):
        raise ValueError(f"kernel name must be a string, got {name!r}; valid names: {sorted(KERNELS)}")
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in KERNELS:
        raise ValueError(
            f"unknown kernel {name!r}; valid names: {sorted(KERNELS)} (aliases: {sorted(_ALIASES)})"
        )
    return key


def get_kernel(name: str, **params) -> Callable[[Tensor, Tensor], Tensor]:
    """Return the kernel ``name`` from ``KERNELS`` with its parameters bound, as ``callable(a, b)``.

    Unknown names and unknown or invalid parameters raise ``ValueError`` (the message lists the valid
    choices). Parameters are validated eagerly (e.g. ``bandwidth`` must be > 0).
    """
    key = kernel_key(name)
    fn = KERNELS[key]
    allowed = kernel_param_names(key)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"kernel {key!r} got unknown parameter(s) {unknown}; it accepts {list(allowed)}")
    if "bandwidth" in params:
        params["bandwidth"] = check_positive("bandwidth", params["bandwidth"])
    if "scale" in params:
        params["scale"] = check_positive("scale", params["scale"])
    for p in ("threshold", "upper", "lower"):
        if p in params:
            params[p] = check_finite(p, params[p])
    if key == "threshold_family":
        up, lo = params.get("upper", 1.0), params.get("lower", 0.0)
        if not up > lo:
            raise ValueError(f"threshold_family needs upper > lower, got upper={up}, lower={lo}")
    bound = functools.partial(fn, **params)
    functools.update_wrapper(bound, fn)
    bound.kernel_name = key  # type: ignore[attr-defined]
    bound.kernel_params = dict(params)  # type: ignore[attr-defined]
    return bound
