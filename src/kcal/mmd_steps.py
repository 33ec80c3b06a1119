"""The MMD regulariser of a training step, its options resolved once.

:func:`kcal.mmd.regression_mmd` and :func:`kcal.mmd.classification_mmd` look up the form, bind the
kernels and check every option on every call: 100-200 microseconds of Python a call on a CPU, as much
as a tiny tabular network's whole step at batch 64. A training loop calls the same regulariser with the
same options thousands of times, so :class:`MMDStep` checks and resolves them when it is built and each
call runs only the tensor operations, for the configurations the paper trains with:

* regression, ``form="individual"`` (Z = x), RBF kernels on y and x with numeric bandwidths, index-paired
  draws ``Yhat_si = mu_i + s_i eps_si``:
  ``MMD^2 = sum_{i != j} W_ij [k(y_i, y_j) + 1/M sum_s (k(f_si, f_sj) - 2 k(y_i, f_sj))] / (n (n - 1))``,
  ``W_ij = exp(-||x_i - x_j||^2 / h_z)`` (:class:`kcal.mmd_fused.RBFIndexMMD`);
* classification, forms conditioned on x (``individual``), RBF kernel on x with a numeric bandwidth,
  class kernel ``rbf`` or ``delta``:
  ``MMD^2 = sum((W D K) o D) / (n (n - 1))`` with ``D = onehot(y) - softmax(logits)``
  (:class:`kcal.mmd_fused.AnalyticClassMMD`).

Both run exactly the operations of the general functions, so the values and gradients are the same bit
for bit (tested). Any other configuration, and any call the fast path cannot take (a Normal forecast,
x that needs a gradient, a ``torch.func`` transform, other shapes), goes to the general function with the
same options.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kcal import kernels
from kcal.calibration_forms import get_classification_form, get_regression_form
from kcal.inputs import functorch_active
from kcal.mmd import classification_mmd, regression_mmd
from kcal.mmd_fused import AnalyticClassMMD, RBFIndexMMD

__all__ = ["MMDStep"]

#: options the fast paths' forms do not read (they matter to other forms or kernels only)
UNREAD = frozenset(
    {"threshold", "scale", "upper", "lower", "y0", "alpha", "detach_conditioning", "reduction"}
)


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
        self._class_kernels: dict = {}

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
            if o.get("bandwidth_y") is None or not _rbf(o.get("kernel_y", "rbf")):
                return None
            if isinstance(m, bool) or not isinstance(m, int) or m < 1:
                return None  # the general function says what is wrong
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

    def __call__(self, outputs, y: Tensor, x: Tensor | None = None, generator: torch.Generator | None = None,
                 eps: Tensor | None = None) -> Tensor:  # fmt: skip
        if self.task == "regression":
            return self._regression(outputs, y, x, generator, eps)
        return self._classification(outputs, y, x)

    def _usable(self, x) -> bool:
        return (
            self.fast is not None
            and isinstance(x, Tensor)
            and x.dim() == 2
            and x.is_floating_point()
            and not x.requires_grad
            and not functorch_active()
        )

    def _regression(self, outputs, y, x, generator, eps) -> Tensor:
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
                    eps = eps.to(mean.dtype)
                draws = mean + std * eps
                w = kernels.rbf_offdiag(x, f["h_z"]).to(mean.dtype)
                need = draws.requires_grad and torch.is_grad_enabled()
                return RBFIndexMMD.apply(draws, y.to(mean.dtype), w, f["h_y"], need) / (n * (n - 1))
        extra = (
            {"eps": eps} if eps is not None else ({"generator": generator} if generator is not None else {})
        )
        return regression_mmd(outputs, y, x, **self.options, **extra)

    def _classification(self, logits, labels, x) -> Tensor:
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
            onehot = torch.nn.functional.one_hot(labels.long(), m).to(dt)
            k_y = self._class_kernel(m, dt, probs.device)
            w = kernels.rbf_offdiag(x.to(dt), self.fast["h_z"])
            need = probs.requires_grad and torch.is_grad_enabled()
            return AnalyticClassMMD.apply(probs, onehot, k_y, w, need) / (n * (n - 1))
        return classification_mmd(probs, labels, x, **self.options, validate_args=False)

    def _class_kernel(self, m: int, dtype, device) -> Tensor:
        key = (m, dtype, device)
        if key not in self._class_kernels:
            if self.fast["kernel_y"] in ("delta", "one_hot_delta"):
                k = kernels.one_hot_delta(m, dtype=dtype, device=device)
            else:
                k = kernels.class_rbf(m, self.fast["bw_y"], dtype=dtype, device=device)
            self._class_kernels[key] = k
        return self._class_kernels[key]
