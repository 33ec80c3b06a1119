"""Local calibration error (kcal.metrics.local): loop reference, input forms, calibrated vs miscalibrated."""

import math

import pytest
import torch
from torch.distributions import Normal

from kcal.metrics import lce as exported_lce
from kcal.metrics.local import lce, lce_calibrated_floor, lce_levels, lce_total


def naive_lce(pit, phi_x, phi_query, levels, bandwidth):
    """Explicit Python loops over query points, data points and levels (paper §6.3 formula)."""
    out = []
    for q in range(len(phi_query)):
        row = []
        for c in levels:
            num = den = 0.0
            for i in range(len(phi_x)):
                d2 = sum((float(phi_query[q][k]) - float(phi_x[i][k])) ** 2 for k in range(len(phi_x[i])))
                k = math.exp(-d2 / bandwidth)
                num += k * (1.0 if float(pit[i]) <= float(c) else 0.0)
                den += k
            row.append(num / den - float(c))
        out.append(row)
    return torch.tensor(out, dtype=torch.float64)


def test_levels_are_i_over_b():
    assert torch.allclose(lce_levels(4), torch.tensor([0.25, 0.5, 0.75, 1.0], dtype=torch.float64))
    with pytest.raises(ValueError):
        lce_levels(0)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lce_matches_loop_reference(p):
    g = torch.Generator().manual_seed(p)
    n, q, bw = 37, 11, 0.7
    phi_x = torch.randn(n, p, generator=g, dtype=torch.float64)
    phi_q = torch.randn(q, p, generator=g, dtype=torch.float64) * 1.5
    pit = torch.rand(n, generator=g, dtype=torch.float64)
    levels = lce_levels(20)
    got = lce(pit, phi_x=phi_x, phi_query=phi_q, levels=20, bandwidth=bw)
    ref = naive_lce(pit, phi_x, phi_q, levels, bw)
    assert got.shape == (q, 20) and got.dtype == torch.float64
    assert torch.allclose(got, ref, rtol=1e-6, atol=1e-12)
    total = lce_total(pit, phi_x=phi_x, phi_query=phi_q, bandwidth=bw)
    assert torch.allclose(total, ref.square().mean(-1), rtol=1e-6, atol=1e-15)
    # c_B = 1 contributes 0 (up to rounding of the weights' sum) with PIT input: every u <= 1
    assert got[:, -1].abs().max() < 1e-12
    assert exported_lce is lce


def test_input_forms_agree_pit_quantiles_forecast_tuple_and_cdf_function():
    g = torch.Generator().manual_seed(0)
    n = 50
    mean, std = (
        torch.randn(n, generator=g, dtype=torch.float64),
        torch.rand(n, generator=g, dtype=torch.float64) + 0.3,
    )
    y = mean + 1.3 * std * torch.randn(n, generator=g, dtype=torch.float64)
    phi = torch.rand(n, 2, generator=g, dtype=torch.float64)
    forecast = Normal(mean, std)
    levels = torch.tensor([0.05, 0.3, 0.5, 0.77, 0.95], dtype=torch.float64)
    from_pit = lce(forecast.cdf(y), phi_x=phi, levels=levels, bandwidth=0.2)
    quantiles = forecast.icdf(levels[None, :].expand(n, -1).T).T  # (n, B): Q_i^{-1}(c_b)
    from_quantiles = lce(quantiles, y, phi_x=phi, levels=levels, bandwidth=0.2)
    from_forecast = lce(forecast, y, phi_x=phi, levels=levels, bandwidth=0.2)
    from_tuple = lce((mean, std), y, phi_x=phi, levels=levels, bandwidth=0.2)
    from_fn = lce(lambda t: forecast.cdf(t), y, phi_x=phi, levels=levels, bandwidth=0.2)
    for other in (from_quantiles, from_forecast, from_tuple, from_fn):
        assert torch.allclose(from_pit, other)
    assert from_pit.shape == (n, 5)  # query points default to the data points


def test_far_queries_and_tiny_bandwidth_stay_finite():
    phi = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    pit = torch.tensor([0.1, 0.9], dtype=torch.float64)
    far = torch.tensor([[100.0, 0.0]], dtype=torch.float64)
    out = lce(pit, phi_x=phi, phi_query=far, levels=4, bandwidth=1e-3)
    assert torch.isfinite(out).all()
    # the nearest data point (u = 0.9) gets all the weight: indicator 1{0.9 <= c} - c
    assert torch.allclose(out[0], torch.tensor([-0.25, -0.5, -0.75, 0.0], dtype=torch.float64))


def test_bad_inputs_raise():
    phi = torch.rand(5, 2)
    with pytest.raises(ValueError, match="bandwidth"):
        lce(torch.rand(5), phi_x=phi, bandwidth=0.0)
    with pytest.raises(ValueError, match="rows"):
        lce(torch.rand(4), phi_x=phi)
    with pytest.raises(ValueError, match="y=None"):
        lce(torch.rand(5), torch.rand(5), phi_x=phi)
    with pytest.raises(ValueError, match="columns"):
        lce(torch.rand(5), phi_x=phi, phi_query=torch.rand(3, 3))


def _simulate(n, seed, miscalibrated):
    """x uniform on [0,1]^2, y ~ N(mu(x), sigma(x)); the forecast is the truth, or (miscalibrated) too
    sharp by 3x on the left half of the square and biased upward on the top half."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=g, dtype=torch.float64)
    mu = torch.sin(6 * x[:, 0]) + x[:, 1]
    sigma = 0.2 + 0.5 * x[:, 1]
    y = mu + sigma * torch.randn(n, generator=g, dtype=torch.float64)
    f_mu, f_sigma = mu.clone(), sigma.clone()
    if miscalibrated:
        f_sigma = torch.where(x[:, 0] < 0.5, sigma / 3, sigma)
        f_mu = torch.where(x[:, 1] > 0.5, mu + 0.5 * sigma, mu)
    return x, Normal(f_mu, f_sigma).cdf(y)


def test_calibrated_forecaster_has_small_lce_and_miscalibrated_one_does_not():
    n, bw = 5000, 0.05  # ~ n_eff in the hundreds per query point
    x, pit = _simulate(n, 0, miscalibrated=False)
    query = torch.rand(400, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    good = lce_total(pit, phi_x=x, phi_query=query, bandwidth=bw)
    assert good.mean() < 0.01 and good.max() < 0.02
    x_bad, pit_bad = _simulate(n, 0, miscalibrated=True)
    bad = lce_total(pit_bad, phi_x=x_bad, phi_query=query, bandwidth=bw)
    assert bad.mean() > 5 * good.mean() and bad.mean() > 0.01
    # locality: the overconfident left half is worse than the calibrated bottom-right quarter
    left = query[:, 0] < 0.4
    calm = (query[:, 0] > 0.6) & (query[:, 1] < 0.4)
    assert bad[left].mean() > 3 * bad[calm].mean()


def test_calibrated_floor_is_the_expected_lce_total_of_uniform_pits():
    g = torch.Generator().manual_seed(7)
    n, reps = 40, 1000
    phi = torch.rand(n, 2, generator=g, dtype=torch.float64)
    query = torch.rand(5, 2, generator=g, dtype=torch.float64)
    floor = lce_calibrated_floor(phi, query, levels=10, bandwidth=0.1)
    pits = torch.rand(reps, n, generator=g, dtype=torch.float64)
    mc = torch.stack([lce_total(u, phi_x=phi, phi_query=query, levels=10, bandwidth=0.1) for u in pits]).mean(
        0
    )
    assert torch.allclose(mc, floor, rtol=0.1)
