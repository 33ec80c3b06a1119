"""kcal.stack_bound: the plain batched loop computes what K separate regularisers compute, and times every
objective it covers on a small stack."""

import pytest
import torch

from kcal import bench
from kcal.mmd import regression_mmd
from kcal.stack_bound import (
    BOUND_OBJECTIVES,
    StackedIndexRBFMMD,
    plain_stack_epoch_seconds,
    stacked_rbf_weight,
)

from .data.conftest import needs


def test_batched_regression_mmd_equals_each_members_regulariser():
    g = torch.Generator().manual_seed(0)
    k, m, n, d = 3, 5, 12, 7
    x, y = (
        torch.randn(k, n, d, generator=g, dtype=torch.float64),
        torch.randn(k, n, generator=g, dtype=torch.float64),
    )
    mean = torch.randn(k, n, generator=g, dtype=torch.float64).requires_grad_()
    std = torch.rand(k, n, generator=g, dtype=torch.float64) + 0.5
    eps = torch.randn(k, m, n, generator=g, dtype=torch.float64)
    value = StackedIndexRBFMMD.apply(
        mean.unsqueeze(1) + std.unsqueeze(1) * eps, y, stacked_rbf_weight(x, 4.0), 1.5, True
    ) / (n * (n - 1))
    grad = torch.autograd.grad(value.sum(), mean)[0]
    for i in range(k):
        ref = regression_mmd((mean[i], std[i]), y[i], x[i], bandwidth_y=1.5, bandwidth_z=4.0, eps=eps[i])
        assert torch.allclose(value[i], ref, rtol=1e-12)
        assert torch.allclose(grad[i], torch.autograd.grad(ref, mean)[0][i], rtol=1e-10)


@needs("crime", "breast-cancer")
@pytest.mark.parametrize("objective", [*BOUND_OBJECTIVES, "xe_mmce"])
def test_plain_stack_times_each_objective_it_covers(objective):
    dataset = "crime" if objective.startswith("nll") else "breast-cancer"
    cfg = bench.compose_cfg(f"dataset={dataset}", f"objective={objective}", "dataset.max_train_rows=128")
    prep = bench.prepare_or_synthetic(cfg)
    if objective not in BOUND_OBJECTIVES:
        with pytest.raises(ValueError, match="no plain batched loop for objective 'xe_mmce'"):
            plain_stack_epoch_seconds(prep, 3, epochs=1)
        return
    assert 0 < plain_stack_epoch_seconds(prep, 3, epochs=1) < 60
