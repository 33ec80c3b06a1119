"""kcal.bench.stack_bound: the plain batched loop times every objective it covers on a small stack (its batched
regression MMD is the library's, tested against each member's regulariser in tests/mmd/test_steps.py)."""

import pytest

from kcal.bench import workloads
from kcal.bench.stack_bound import BOUND_OBJECTIVES, plain_stack_epoch_seconds

from ..data.conftest import needs


@needs("crime", "breast-cancer")
@pytest.mark.parametrize("objective", [*BOUND_OBJECTIVES, "xe_mmce"])
def test_plain_stack_times_each_objective_it_covers(objective):
    dataset = "crime" if objective.startswith("nll") else "breast-cancer"
    cfg = workloads.compose_cfg(f"dataset={dataset}", f"objective={objective}", "dataset.max_train_rows=128")
    prep = workloads.prepare_or_synthetic(cfg)
    if objective not in BOUND_OBJECTIVES:
        with pytest.raises(ValueError, match="no plain batched loop for objective 'xe_mmce'"):
            plain_stack_epoch_seconds(prep, 3, epochs=1)
        return
    assert 0 < plain_stack_epoch_seconds(prep, 3, epochs=1) < 60
