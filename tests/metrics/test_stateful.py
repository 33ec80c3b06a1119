"""The torchmetrics classes accumulate over batches and equal their functions on the whole set."""

import pytest
import torch
from torchmetrics import MetricCollection

from kcal.metrics import regression as R
from kcal.metrics.stateful import (
    CRPS,
    DecisionCalibrationError,
    KernelCalibrationError,
    NegativeLogLikelihood,
    QuantileCalibrationError,
)
from kcal.mmd import regression_mmd

DT = torch.float64


def _data(n=97, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=DT)
    mean = x[:, 0] + 0.3 * torch.randn(n, generator=g, dtype=DT)
    std = 0.5 + torch.rand(n, generator=g, dtype=DT)
    y = x[:, 0] + torch.randn(n, generator=g, dtype=DT)
    return mean, std, y, x


def _batches(n, seed):
    """Random batch boundaries (uneven sizes, at least one row each)."""
    g = torch.Generator().manual_seed(100 + seed)
    cuts = sorted(set(torch.randint(1, n, (5,), generator=g).tolist()))
    edges = [0, *cuts, n]
    return list(zip(edges[:-1], edges[1:], strict=True))


CASES = [
    (lambda: QuantileCalibrationError(n_bins=10), lambda m, s, y, x: R.qce_binned(R.pit((m, s), y), 10)),
    (lambda: DecisionCalibrationError(threshold=0.2), lambda m, s, y, x: R.dce((m, s), y, 0.2)),
    (CRPS, lambda m, s, y, x: R.crps((m, s), y)),
    (NegativeLogLikelihood, lambda m, s, y, x: R.nll((m, s), y)),
    (
        lambda: KernelCalibrationError(form="individual", bandwidth_y=1.0, bandwidth_z=2.0),
        lambda m, s, y, x: regression_mmd((m, s), y, x, bandwidth_y=1.0, bandwidth_z=2.0, pairing="analytic"),
    ),
    (
        lambda: KernelCalibrationError(form="marginal", bandwidth_y=0.5),
        lambda m, s, y, x: regression_mmd(
            (m, s), y, None, form="marginal", bandwidth_y=0.5, pairing="analytic"
        ),
    ),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_metric_class_accumulates_to_the_function_on_the_whole_set(case, seed):
    make, fn = CASES[case]
    mean, std, y, x = _data(seed=seed)
    metric = make()
    for s, e in _batches(len(y), seed):
        metric.update((mean[s:e], std[s:e]), y[s:e], x[s:e])
    expected = fn(mean, std, y, x)
    assert torch.allclose(metric.compute().to(DT), expected.to(DT), rtol=1e-10, atol=1e-12)
    metric.reset()
    metric.update(torch.distributions.Normal(mean, std), y.numpy(), x.numpy())  # Normal + numpy inputs
    assert torch.allclose(metric.compute().to(DT), expected.to(DT), rtol=1e-10, atol=1e-12)


def test_metric_collection_shares_one_update_signature():
    mean, std, y, x = _data()
    metrics = MetricCollection(
        {
            "qce": QuantileCalibrationError(),
            "dce": DecisionCalibrationError(),
            "crps": CRPS(),
            "nll": NegativeLogLikelihood(),
            "kce": KernelCalibrationError(bandwidth_z=2.0),
        }
    )
    for s, e in _batches(len(y), 0):
        metrics.update((mean[s:e], std[s:e]), y[s:e], x[s:e])
    out = metrics.compute()
    assert set(out) == {"qce", "dce", "crps", "nll", "kce"}
    assert all(torch.isfinite(v) for v in out.values())


def test_metric_options_are_checked_in_the_constructor():
    with pytest.raises(ValueError, match="n_bins"):
        QuantileCalibrationError(n_bins=0)
    with pytest.raises(ValueError, match="valid names"):
        KernelCalibrationError(form="indivdual")
    with pytest.raises(ValueError, match="bandwidth_z"):
        KernelCalibrationError(bandwidth_z=0.0)
    metric = KernelCalibrationError()
    mean, std, y, _ = _data(n=8)
    with pytest.raises(ValueError, match="conditions on x"):
        metric.update((mean, std), y)
