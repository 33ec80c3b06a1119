"""The MMD regulariser of a training step, its options resolved once.

:func:`kcal.mmd.regression_mmd` and :func:`kcal.mmd.classification_mmd` look up the form, bind the
kernels and check every option on every call: 100-200 microseconds of Python a call on a CPU, as much
as a tiny tabular network's whole step at batch 64. A training loop calls the same regulariser with the
same options thousands of times, so :class:`MMDStep` checks and resolves them when it is built and each
call runs only the tensor operations, for the configurations the paper trains with:

* regression, ``form="individual"`` (Z = x), RBF kernels on y and x with numeric bandwidths, index-paired
  draws ``Yhat_si = mu_i + s_i eps_si``:
  ``MMD^2 = sum_{i != j} W_ij [k(y_i, y_j) + 1/M sum_s (k(f_si, f_sj) - 2 k(y_i, f_sj))] / (n (n - 1))``,
  ``W_ij = exp(-||x_i - x_j||^2 / h_z)`` (:class:`kcal.mmd.fused.GaussianRBFIndexMMD`);
* the same with the relaxed decision kernel ``tanh_decision`` on y (rank one, ``k(a, b) = t(a) t(b)``,
  ``t(v) = tanh((v - c) / s)``): ``MMD^2 = 1/M sum_s d_s^T W d_s / (n (n - 1))`` with
  ``d_s = t(f_s) - t(y)`` (:func:`kcal.mmd.fused.tanh_index_mmd2`), no (M, n, n) tensor;
* classification, forms conditioned on x (``individual``), RBF kernel on x with a numeric bandwidth,
  class kernel ``rbf`` or ``delta``:
  ``MMD^2 = sum((W D K) o D) / (n (n - 1))`` with ``D = onehot(y) - softmax(logits)``
  (:class:`kcal.mmd.fused.AnalyticClassMMD`).

What does not depend on the network's outputs is a batch's :class:`BatchConstants` (the x-kernel ``W``
and, for regression, the target-target sum), which :meth:`MMDStep.prepare` builds for many batches in one
batched call: a training loop builds an epoch's at its start and its validation chunks' once per run
(their x and y never change). A call without them builds its own.

The values and gradients equal the general functions' to rounding (tested; the regression sums use
``exp2``, see :data:`kcal.mmd.fused.LOG2E`, and a stack of x-kernels one batched product). Any other
configuration, and any call the fast path cannot take (a Normal forecast, x that needs a gradient, a
``torch.func`` transform, other shapes), goes to the general function with the same options.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from kcal import kernels
from kcal.inputs import functorch_active
from kcal.mmd.estimators import classification_mmd, regression_mmd
from kcal.mmd.forms import get_classification_form, get_regression_form
from kcal.mmd.fused import AnalyticClassMMD, GaussianRBFIndexMMD, rbf_weighted_sum, tanh_index_mmd2

__all__ = ["BatchConstants", "MMDStep"]

#: options the fast paths' forms do not read (they matter to other forms or kernels only)
UNREAD = frozenset(
    {"threshold", "scale", "upper", "lower", "y0", "alpha", "detach_conditioning", "reduction"}
)


class BatchConstants(NamedTuple):
    """The parts of a batch's regulariser that the network's outputs do not change, for one batch or a
    stack of them (leading dimensions): ``w`` ``(..., n, n)``, the x-kernel with a zero diagonal, and
    ``s_tt`` ``(...)``, the regression target-target sum ``sum_ij W_ij k(y_i, y_j)`` (None for classes)."""

    w: Tensor
    s_tt: Tensor | None = None

    def at(self, *index) -> BatchConstants:
        """The constants of one batch of the stack (``index`` into the leading dimensions)."""
        return BatchConstants(self.w[index], None if self.s_tt is None else self.s_tt[index])


def _as(t: Tensor, dtype) -> Tensor:
    """``t`` in ``dtype`` (``Tensor.to`` costs a dispatch even when nothing changes: once per step here)."""
    return t if t.dtype == dtype else t.to(dtype)


def _rbf(name: str) -> bool:
    return kernels.kernel_key(name) == "rbf"


class MMDStep:
    """The MMD regulariser ``(outputs, y, x, generator=None, eps=None) -> MMD^2`` of one task and options.

    Args:
        task: ``"regression"`` (outputs = ``(mean, std)``) or ``"classification"`` (outputs = logits; the
            probabilities are ``softmax(logits, -1)``).
        options: keywords of :func:`kcal.mmd.regression_mmd` / :func:`kcal.mmd.classification_mmd`, checked
            here once (bandwidths must be numbers or None).
    """

    def __init__(self, task: str, options: dict):
        if task not in ("regression", "classification"):
            raise ValueError(f"unknown task {task!r}; valid: ['classification', 'regression']")
        self.task, self.options = task, dict(options)
        self.fast = self._fast_options()
        self._cache: dict = {}  # class kernels, identity matrices and stack probes, by shape, dtype and device

    def _fast_options(self) -> dict | None:
        """The resolved numbers of the fast path, or None when these options take the general path."""
        o = self.options
        known = {"form", "kernel_y", "bandwidth_y", "kernel_z", "bandwidth_z"} | UNREAD
        if self.task == "regression":
            known |= {"num_samples", "pairing"}
        numbers = all(
            o.get(k) is None or (isinstance(o[k], int | float) and not isinstance(o[k], bool))
            for k in ("bandwidth_y", "bandwidth_z")
        )
        if set(o) - known or o.get("bandwidth_z") is None or not numbers:
            return None  # symbolic bandwidths ("median") are resolved by the caller; the general path says so
        h_z = kernels.check_positive("bandwidth_z", o["bandwidth_z"])
        if not _rbf(o.get("kernel_z", "rbf")):
            return None
        if self.task == "regression":
            fm = get_regression_form(o.get("form", "individual"))
            m = o.get("num_samples", 10)
            if (fm.forecast, fm.target, fm.condition) != ("sample", "y", "x") or o.get(
                "pairing", "index"
            ) != "index":
                return None
            if isinstance(m, bool) or not isinstance(m, int) or m < 1:
                return None  # the general function says what is wrong
            if kernels.kernel_key(o.get("kernel_y", "rbf")) == "tanh_decision":
                c, sc = o.get("threshold", 0.0), o.get("scale", 1.0)
                if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (c, sc)):
                    return None  # "auto" and the like are resolved by the caller
                return {"h_z": h_z, "tanh": (kernels.check_finite("threshold", c), kernels.check_positive("scale", sc)),
                        "m": m}  # fmt: skip
            if o.get("bandwidth_y") is None or not _rbf(o.get("kernel_y", "rbf")):
                return None
            return {"h_z": h_z, "h_y": kernels.check_positive("bandwidth_y", o["bandwidth_y"]), "m": m}
        fm = get_classification_form(o.get("form", "individual"))
        kernel_y = str(o.get("kernel_y", "rbf")).lower()
        if (fm.variable, fm.condition) != ("class", "x") or kernel_y not in (
            "rbf",
            "gaussian",
            "delta",
            "one_hot_delta",
        ):
            return None
        bw_y = o.get("bandwidth_y")
        if kernel_y in ("rbf", "gaussian"):
            if bw_y is None:
                return None
            bw_y = kernels.check_positive("bandwidth_y", bw_y)
        return {"h_z": h_z, "kernel_y": kernel_y, "bw_y": bw_y}

    def prepare(self, x: Tensor, y: Tensor) -> BatchConstants | None:
        """The :class:`BatchConstants` of batches ``x`` ``(..., n, d)``, ``y`` ``(..., n)`` (leading dimensions:
        many batches at once), or None when these options take the general path."""
        if self.fast is None:
            return None
        with torch.no_grad():
            w = kernels.rbf_offdiag(x, self.fast["h_z"])
            if self.task == "classification":
                return BatchConstants(w)
            w = w.to(y.dtype) if y.is_floating_point() else w
            if "tanh" in self.fast:  # a rank-one y-kernel: the MMD needs W only
                return BatchConstants(w)
            return BatchConstants(w, rbf_weighted_sum(y.to(w.dtype), w, self.fast["h_y"]))

    def __call__(self, outputs, y: Tensor, x: Tensor | None = None, generator: torch.Generator | None = None,
                 eps: Tensor | None = None, const: BatchConstants | None = None) -> Tensor:  # fmt: skip
        """MMD^2 of one batch; ``const`` (from :meth:`prepare` for this batch's x and y) skips rebuilding
        the x-kernel and the target-target sum."""
        if self.task == "regression":
            return self._regression(outputs, y, x, generator, eps, const)
        return self._classification(outputs, y, x, const)

    @property
    def stackable(self) -> bool:
        """Whether :meth:`stacked` takes these options: the fast paths (regression with index-paired draws;
        classes with an RBF x-kernel)."""
        return self.fast is not None

    def stack_exact(self, outputs) -> bool:
        """Whether :meth:`stacked` gives each member of ``outputs`` (stacked on dim 0) its own call's
        gradients bit for bit on their device: a probe on random inputs of these shapes, once per shape,
        dtype and device (on this project's CPU it does for the RBF kernels and classes in float32 and float64, and
        not for the decision kernel's batched matmul in float32; a GPU's batched kernels may not)."""
        if not self.stackable:
            return False
        t = outputs[0] if self.task == "regression" else outputs
        k, n = t.shape[:2]
        width = self.fast["m"] if self.task == "regression" else t.shape[-1]
        key = ("probe", self.task, k, n, width, t.dtype, t.device)
        if key not in self._cache:
            with torch.enable_grad():
                self._cache[key] = self._probe(k, n, width, t.dtype, t.device)
        return self._cache[key]

    def _probe(self, k: int, n: int, width: int, dtype, device) -> bool:
        g = torch.Generator().manual_seed(0)

        def rand(*shape):
            return torch.rand(*shape, generator=g, dtype=dtype).to(device)

        x, y = rand(k, n, 3), rand(k, n)
        if self.task == "regression":
            outputs = (rand(k, n).requires_grad_(), (rand(k, n) + 0.5).requires_grad_())
            eps, leaves = rand(k, width, n), outputs
        else:
            outputs = rand(k, n, width).requires_grad_()
            y, eps, leaves = (y * width).long().clamp_(max=width - 1), None, (outputs,)
        const = self.prepare(x, y)
        grads = torch.autograd.grad(self.stacked(outputs, y, eps, const).sum(), leaves)
        for i in range(k):
            own = tuple(t.detach()[i].requires_grad_() for t in leaves)
            one = self(own if self.task == "regression" else own[0], y[i], x[i],
                       eps=None if eps is None else eps[i], const=const.at(i))  # fmt: skip
            if not all(
                torch.equal(a[i], b) for a, b in zip(grads, torch.autograd.grad(one, own), strict=True)
            ):
                return False
        return True

    def stacked(self, outputs, y: Tensor, eps: Tensor | None, const: BatchConstants) -> Tensor:
        """``(K,)`` MMD^2 of K members at once, each on its own batch (a stack of seed reruns): ``outputs`` =
        ``(mean, std)`` ``(K, n)`` or logits ``(K, n, m)``, ``y`` ``(K, n)``, ``eps`` ``(K, M, n)`` (regression:
        each member's own draws), ``const`` the K batches' :meth:`prepare`. Where :meth:`stack_exact`, member
        k's gradients are those of ``self(..., eps=eps[k], const=const.at(k))`` on its own slice bit for bit
        and its value equal to the last bit of a sum's order (tested to rounding), so a stacked member
        trains exactly as alone; only where :attr:`stackable`."""
        if not self.stackable:
            raise ValueError(
                f"MMDStep.stacked takes the fast paths only; options {self.options} take the general one"
            )
        if self.task == "regression":
            mean, std = outputs
            dt = mean.dtype
            s_tt = None if const.s_tt is None else _as(const.s_tt, dt)
            return self._regression_mmd(mean, std, _as(eps, dt), _as(y, dt), _as(const.w, dt), s_tt)
        probs = torch.softmax(outputs, dim=-1)
        n, m = probs.shape[-2:]
        dt, dev = probs.dtype, probs.device
        need = probs.requires_grad and torch.is_grad_enabled()
        onehot = self._eye(m, dt, dev)[y.long()]
        return AnalyticClassMMD.apply(
            probs, onehot, self._class_kernel(m, dt, dev), _as(const.w, dt), need
        ) / (n * (n - 1))

    def _regression_mmd(self, mean, std, eps, y, w, s_tt) -> Tensor:
        """The fast path's MMD^2 of one batch or a stack (leading dimensions), its inputs in one dtype."""
        if "tanh" in self.fast:
            return tanh_index_mmd2(mean, std, eps, y, w, *self.fast["tanh"])
        need = (mean.requires_grad or std.requires_grad) and torch.is_grad_enabled()
        return GaussianRBFIndexMMD.apply(mean, std, eps, y, w, self.fast["h_y"], need, s_tt)

    def _usable(self, x) -> bool:
        return (
            self.fast is not None
            and isinstance(x, Tensor)
            and x.dim() == 2
            and x.is_floating_point()
            and not x.requires_grad
            and not functorch_active()
        )

    def _regression(self, outputs, y, x, generator, eps, const) -> Tensor:
        if isinstance(outputs, (tuple, list)) and len(outputs) == 2 and self._usable(x):
            mean, std = outputs
            n = mean.shape[0]
            if (
                isinstance(mean, Tensor) and isinstance(std, Tensor) and isinstance(y, Tensor)
                and mean.dim() == 1 and std.shape == mean.shape and y.shape == mean.shape and n >= 2
                and not y.requires_grad
                and (eps is None or (isinstance(eps, Tensor) and eps.dim() == 2 and eps.shape[1] == n))
            ):  # fmt: skip
                f = self.fast
                if eps is None:
                    eps = torch.randn((f["m"], n), generator=generator, dtype=mean.dtype, device=mean.device)
                else:
                    eps = _as(eps, mean.dtype)
                yd = _as(y, mean.dtype)
                if const is None:
                    w, s_tt = kernels.rbf_offdiag(x, f["h_z"]).to(mean.dtype), None
                else:
                    w, s_tt = (
                        _as(const.w, mean.dtype),
                        None if const.s_tt is None else _as(const.s_tt, mean.dtype),
                    )
                return self._regression_mmd(mean, std, eps, yd, w, s_tt)
        extra = (
            {"eps": eps} if eps is not None else ({"generator": generator} if generator is not None else {})
        )
        return regression_mmd(outputs, y, x, **(self.options | extra | {"validate_args": False}))

    def _classification(self, logits, labels, x, const) -> Tensor:
        probs = torch.softmax(logits, dim=-1)
        if (
            self._usable(x)
            and isinstance(labels, Tensor)
            and probs.dim() == 2
            and labels.dim() == 1
            and labels.shape[0] == probs.shape[0] >= 2
        ):
            n, m = probs.shape
            dt = probs.dtype
            onehot = self._eye(m, dt, probs.device)[
                labels.long()
            ]  # one_hot without its range check's host sync
            k_y = self._class_kernel(m, dt, probs.device)
            w = kernels.rbf_offdiag(_as(x, dt), self.fast["h_z"]) if const is None else _as(const.w, dt)
            need = probs.requires_grad and torch.is_grad_enabled()
            return AnalyticClassMMD.apply(probs, onehot, k_y, w, need) / (n * (n - 1))
        return classification_mmd(probs, labels, x, **(self.options | {"validate_args": False}))

    def _eye(self, m: int, dtype, device) -> Tensor:
        key = ("eye", m, dtype, device)
        if key not in self._cache:
            self._cache[key] = torch.eye(m, dtype=dtype, device=device)
        return self._cache[key]

    def _class_kernel(self, m: int, dtype, device) -> Tensor:
        key = (m, dtype, device)
        if key not in self._cache:
            if self.fast["kernel_y"] in ("delta", "one_hot_delta"):
                k = kernels.one_hot_delta(m, dtype=dtype, device=device)
            else:
                k = kernels.class_rbf(m, self.fast["bw_y"], dtype=dtype, device=device)
            self._cache[key] = k
        return self._cache[key]
