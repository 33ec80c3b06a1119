"""Train/validation/test splits as ``torch.utils.data.random_split`` draws them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the sizes are arithmetic: what needs only them (configs, sweeps' checks) loads no torch
    import torch

TRAIN_FRACTION = 0.7
VAL_FRACTION = 0.1


def split_sizes(n: int) -> tuple[int, int, int]:
    """``int(0.7 n)``, ``int(0.1 n)`` and the rest, as the authors' datamodules."""
    n_train, n_val = int(TRAIN_FRACTION * n), int(VAL_FRACTION * n)
    return n_train, n_val, n - n_train - n_val


def split_indices(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Disjoint index sets covering ``range(n)``.

    Identical to ``random_split(range(n), split_sizes(n), generator=Generator().manual_seed(seed))``:
    one ``randperm`` from a fresh generator, sliced in order.
    """
    import torch

    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_train, n_val, _ = split_sizes(n)
    return perm[:n_train], perm[n_train : n_train + n_val], perm[n_train + n_val :]
