"""Every random stream of a training run, derived from the run's seed in one place.

A run with seed ``s`` draws (1) its initial weights from ``torch.manual_seed(s)`` inside a forked RNG,
(2) its batch order from a generator seeded with :func:`shuffle_seed`, (3) its MMD forecast samples
from a generator seeded with :func:`noise_seed`, and (4) evaluation samples (official DCE) from
:func:`eval_seed`. Nothing depends on the global RNG state, so K seeds trained side by side (one
vectorised model) can reproduce K single runs draw for draw.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def shuffle_seed(seed: int) -> int:
    return int(seed)


def noise_seed(seed: int) -> int:
    return int(seed) + 1_000_003


def eval_seed(seed: int) -> int:
    return int(seed) + 2_000_003


def generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(int(seed))


def init_with_seed(seed: int, factory: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """Build a module with weights drawn from ``torch.manual_seed(seed)`` without touching the
    caller's global RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return factory()
