"""Calibration regularisers as ``torch.nn.Module`` losses, for use inside any training loop.

Thin modules over the functions of :mod:`kcal.mmd` and :mod:`kcal.baselines`: the constructor checks the
options once, ``forward`` computes the differentiable estimate on one batch. Calling convention (the
library's): ``loss(prediction, target, x=None)``, where the prediction is

* regression: the Gaussian forecast as ``(mean, std)`` or a ``torch.distributions.Normal``;
* classification: class probabilities ``(n, m)`` (``softmax(logits, -1)``; logits are refused while
  ``validate_args`` is true, which costs one host synchronisation per call, pass ``validate_args=False``
  once the pipeline is known to be right).

``MMDCalibrationLoss(form=...)`` is the paper's trainable calibration metric, defined with the MMD
estimators in :mod:`kcal.mmd.loss` and handed on here beside the baselines ``MMCELoss`` and
``ECEKDELoss``.
"""

from __future__ import annotations

from torch import Tensor, nn

from kcal import baselines, kernels
from kcal.mmd import DegenerateKernelWarning, MMDCalibrationLoss

__all__ = ["DegenerateKernelWarning", "ECEKDELoss", "MMCELoss", "MMDCalibrationLoss"]


class MMCELoss(nn.Module):
    """MMCE of Kumar et al. (2018) on class probabilities (:func:`kcal.baselines.mmce`).

    ``scaling="kumar"`` (default) is the paper's weighted MMCE; ``scaling="authors"`` the extra
    ``1/m^2`` of the kernel-calibration authors' code.
    """

    def __init__(
        self, bandwidth: float = 0.4, weighted: bool = True, scaling: str = "kumar", validate_args=True
    ):
        super().__init__()
        if scaling not in baselines.MMCE_SCALINGS:
            raise ValueError(f"unknown MMCE scaling {scaling!r}; valid: {list(baselines.MMCE_SCALINGS)}")
        self.bandwidth = kernels.check_positive("bandwidth", bandwidth)
        self.weighted, self.scaling, self.validate_args = bool(weighted), scaling, bool(validate_args)

    def forward(self, probs, labels, x: Tensor | None = None) -> Tensor:
        return baselines.mmce(
            probs,
            labels,
            self.bandwidth,
            self.weighted,
            scaling=self.scaling,
            validate_args=self.validate_args,
        )


class ECEKDELoss(nn.Module):
    """L_p canonical ECE^KDE of Popordanoska et al. (2022) on class probabilities (``baselines.ece_kde``).

    ``flavour="kcal"`` (default) selects the bandwidth by the proper leave-one-out likelihood;
    ``flavour="authors"`` is the kernel-calibration authors' regulariser (their selector and arithmetic).
    """

    def __init__(self, p: float = 1, bandwidth: float | None = None, validate_args: bool = True,
                 flavour: str = "kcal", **options):  # fmt: skip
        super().__init__()
        if flavour not in baselines.ECE_KDE_FLAVOURS:
            raise ValueError(
                f"unknown ECE-KDE flavour {flavour!r}; valid: {list(baselines.ECE_KDE_FLAVOURS)}"
            )
        self.p = kernels.check_positive("p", p)
        self.bandwidth = None if bandwidth is None else kernels.check_positive("bandwidth", bandwidth)
        self.validate_args, self.flavour, self.options = bool(validate_args), flavour, options

    def forward(self, probs, labels, x: Tensor | None = None) -> Tensor:
        return baselines.ece_kde(probs, labels, self.p, self.bandwidth, flavour=self.flavour,
                                 validate_args=self.validate_args, **self.options)  # fmt: skip
