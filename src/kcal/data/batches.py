"""Batches as index slices of tensors that already live on the training device.

No DataLoader, no worker processes, no per-sample Python: each epoch draws one permutation on the
device, gathers the split once, and yields contiguous slices of it.
"""

from __future__ import annotations

import math

import torch


class TensorBatches:
    """Iterable over ``(x, y)`` batches of one split.

    ``shuffle`` draws a fresh permutation per epoch from a generator seeded with ``seed`` (so a run is
    reproducible and independent of the global RNG); ``drop_last`` drops the final partial batch.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, shuffle: bool = False,
                 drop_last: bool = False, seed: int = 0):  # fmt: skip
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.x, self.y = x, y
        self.batch_size, self.shuffle, self.drop_last = int(batch_size), shuffle, drop_last
        self.generator = torch.Generator(device=x.device).manual_seed(seed) if shuffle else None

    def __len__(self) -> int:
        n = self.x.shape[0]
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        x, y = self.x, self.y
        if self.shuffle:
            perm = torch.randperm(x.shape[0], device=x.device, generator=self.generator)
            x, y = x[perm], y[perm]
        bs = self.batch_size
        for i in range(len(self)):
            yield x[i * bs : (i + 1) * bs], y[i * bs : (i + 1) * bs]
