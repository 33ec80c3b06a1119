"""Three hidden ReLU layers plus a linear head, as in the authors' networks.

``Linear -> [BatchNorm1d] -> ReLU`` three times (widths set per layer), then a head:

* :class:`GaussianMLP` outputs ``(mean, std)`` with ``std = max(exp(raw), min_std)`` (the authors'
  log-std head floored at 0.05 in target units; the gradient is zero below the floor);
* :class:`SoftmaxMLP` outputs logits for all ``m`` classes.

PyTorch default initialisation, no dropout.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

MODEL_KINDS = ("auto", "gaussian_mlp", "softmax_mlp")


def body(d_in: int, widths: Sequence[int], batchnorm: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for w in widths:
        layers.append(nn.Linear(d_in, w))
        if batchnorm:
            layers.append(nn.BatchNorm1d(w))
        layers.append(nn.ReLU())
        d_in = w
    return nn.Sequential(*layers)


class GaussianMLP(nn.Module):
    def __init__(self, d_in: int, widths: Sequence[int] = (64, 64, 64), batchnorm: bool = False,
                 min_std: float = 0.05):  # fmt: skip
        super().__init__()
        self.body = body(d_in, widths, batchnorm)
        self.head = nn.Linear(widths[-1], 2)
        self.min_std = float(min_std)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.head(self.body(x))
        mean, raw = out[:, 0], out[:, 1]
        return mean, torch.exp(raw).clamp_min(self.min_std)


class SoftmaxMLP(nn.Module):
    def __init__(self, d_in: int, num_classes: int, widths: Sequence[int] = (64, 64, 64),
                 batchnorm: bool = False):  # fmt: skip
        super().__init__()
        self.body = body(d_in, widths, batchnorm)
        self.head = nn.Linear(widths[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def build_model(kind: str, task: str, d_in: int, num_classes: int | None, widths: Sequence[int],
                batchnorm: bool = False, min_std: float = 0.05) -> nn.Module:  # fmt: skip
    """Build the network for ``task``; ``kind="auto"`` picks the one that fits the task."""
    if kind not in MODEL_KINDS:
        raise ValueError(f"unknown model kind {kind!r}; valid: {', '.join(MODEL_KINDS)}")
    if kind == "auto":
        kind = "gaussian_mlp" if task == "regression" else "softmax_mlp"
    expected = "gaussian_mlp" if task == "regression" else "softmax_mlp"
    if kind != expected:
        raise ValueError(f"model {kind!r} does not fit a {task} dataset; use model={expected} or model=mlp")
    widths = [int(w) for w in widths]
    if len(widths) == 0 or min(widths) < 1:
        raise ValueError(f"model widths must be positive integers, got {widths}")
    if kind == "gaussian_mlp":
        if min_std < 0:
            raise ValueError(f"model.min_std must be >= 0, got {min_std}")
        return GaussianMLP(d_in, widths, batchnorm, min_std)
    return SoftmaxMLP(d_in, int(num_classes), widths, batchnorm)
