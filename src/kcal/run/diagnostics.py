"""Per-epoch diagnostics recorded in a run's ``history.csv`` (paper Figures 3 and 4: DCE over training).

``dce`` is the exact decision calibration error on the whole split
(:func:`kcal.metrics.regression.dce`); ``dce_official`` is the authors' training/validation-curve
definition, the mean over 128-row batches of the per-batch sqrt(sum_a gap^2) with 10 samples per
forecast (the authors' ``train/dcal``/``val/dcal`` logs). Samples come from a generator re-seeded each epoch, so the
curves change only through the weights.
"""

from __future__ import annotations

import torch
from torch.distributions import Normal

from kcal.metrics import regression as rm

CURVE_BATCH = 128
CURVE_SAMPLES = 10


def official_curve_dce(mean, std, y, threshold: float, generator: torch.Generator) -> torch.Tensor:
    """Mean over consecutive 128-row batches (drop_last) of sqrt(sum_a (E_P,b(a) - E_Q,b(a))^2),
    labels at the threshold counting for neither action (the authors' ``train/dcal``, ``val/dcal``)."""
    n = (y.shape[0] // CURVE_BATCH) * CURVE_BATCH
    if n == 0:
        return torch.tensor(float("nan"))
    mean, std, y = (t[:n].reshape(-1, CURVE_BATCH) for t in (mean, std, y))
    eps = torch.randn((CURVE_SAMPLES, *mean.shape), generator=generator, device=mean.device, dtype=mean.dtype)
    samples = mean + std * eps  # (S, batches, B)
    gaps = []
    for a in (1.0, -1.0):
        p = (torch.sign(y - threshold) == a).to(mean.dtype).mean(-1)
        q = (torch.sign(samples - threshold) == a).to(mean.dtype).mean(dim=(0, 2))
        gaps.append((p - q) ** 2)
    return torch.sqrt(gaps[0] + gaps[1]).mean()


def decision_curves(outputs, y: torch.Tensor, threshold: float, prefix: str, seed: int) -> dict[str, float]:
    """``{prefix/dce, prefix/dce_official}`` for Gaussian outputs ``(mean, std)`` on a whole split."""
    mean, std = (t.detach().double() for t in outputs)
    y = y.double()
    g = torch.Generator(device=mean.device).manual_seed(seed)
    exact = rm.dce(Normal(mean, std, validate_args=False), y, threshold)
    return {
        f"{prefix}/dce": float(exact),
        f"{prefix}/dce_official": float(official_curve_dce(mean, std, y, threshold, g)),
    }
