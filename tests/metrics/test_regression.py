"""Exact regression metrics vs naive per-row / per-bin references (float64)."""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from kcal.metrics import regression as R

RTOL = 1e-6


def _close(a, b, rtol=RTOL, atol=1e-12):
    a = float(a)
    b = float(b)
    assert abs(a - b) <= rtol * abs(b) + atol, (a, b)


def _gauss_data(n, seed=0, std_scale=1.0):
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(n, generator=g, dtype=torch.float64) * 2.0
    s = torch.rand(n, generator=g, dtype=torch.float64) * 1.5 + 0.2
    y = mu + s * torch.randn(n, generator=g, dtype=torch.float64)
    return mu, s * std_scale, y


# ------------------------------------------------------------------ references
def ref_qce_binned(u, n_bins):
    counts = [0] * n_bins
    for v in u:
        v = min(max(v, 0.0), 1.0)
        b = None
        for k in range(n_bins):
            lo, hi = k / n_bins, (k + 1) / n_bins
            if lo <= v < hi:
                b = k
                break
        if b is None:  # v == 1
            b = n_bins - 1
        counts[b] += 1
    return 0.5 * sum(abs(c / len(u) - 1 / n_bins) for c in counts)


def ref_qce_ecdf(u, p):
    """Interval-by-interval integral of |F_hat(t) - t|^p with explicit case analysis."""
    s = sorted(min(max(v, 0.0), 1.0) for v in u)
    n = len(s)
    edges = [0.0] + s + [1.0]
    total = 0.0
    for k in range(n + 1):
        a, b, h = edges[k], edges[k + 1], k / n
        if p == 1:
            if h <= a:
                total += ((b - h) ** 2 - (a - h) ** 2) / 2
            elif h >= b:
                total += ((h - a) ** 2 - (h - b) ** 2) / 2
            else:
                total += ((h - a) ** 2 + (b - h) ** 2) / 2
        else:  # expand (h - t)^2 and integrate term by term
            total += h * h * (b - a) - h * (b * b - a * a) + (b**3 - a**3) / 3
    return total if p == 1 else math.sqrt(total)


def ref_dce(prob_above, y, c):
    n = len(y)
    out = 0.0
    for a in (-1, 1):
        ep = 0.0
        eq = 0.0
        for i in range(n):
            side = 1 if y[i] >= c else -1
            ep += float(a != side) / n
            # E_Q loss(a) = Q(side(Yhat) != a)
            eq += (prob_above[i] if a == -1 else 1 - prob_above[i]) / n
        out += (ep - eq) ** 2
    return math.sqrt(out)


# ------------------------------------------------------------------ tests vs references
def test_gaussian_nll_and_nll_match_scipy():
    mu, s, y = _gauss_data(500)
    ref = -np.mean([stats.norm.logpdf(y[i].item(), mu[i].item(), s[i].item()) for i in range(500)])
    _close(R.gaussian_nll((mu, s), y), ref)
    _close(R.nll(torch.distributions.Normal(mu, s), y), ref)
    _close(R.nll((mu, s), y), ref)  # tuple forecast accepted
    assert R.gaussian_nll((mu, s), y).ndim == 0 and isinstance(R.gaussian_nll((mu, s), y), torch.Tensor)


def test_pit_and_sharpness():
    mu, s, y = _gauss_data(200)
    u = R.pit(torch.distributions.Normal(mu, s), y)
    ref = [stats.norm.cdf(y[i].item(), mu[i].item(), s[i].item()) for i in range(200)]
    np.testing.assert_allclose(u.numpy(), ref, rtol=RTOL)
    _close(R.sharpness(s), s.numpy().mean())


def test_crps_vs_numerical_integral():
    mu, s, y = _gauss_data(20, seed=3)
    vals = []
    for i in range(20):
        m, sd, yy = mu[i].item(), s[i].item(), y[i].item()
        lo, hi = m - 12 * sd, m + 12 * sd
        f1 = integrate.quad(
            lambda t, m=m, sd=sd: stats.norm.cdf(t, m, sd) ** 2, lo, yy, epsabs=1e-13, epsrel=1e-12
        )[0]
        f2 = integrate.quad(
            lambda t, m=m, sd=sd: (1 - stats.norm.cdf(t, m, sd)) ** 2, yy, hi, epsabs=1e-13, epsrel=1e-12
        )[0]
        vals.append(f1 + f2)
    _close(R.crps((mu, s), y), np.mean(vals))


@pytest.mark.parametrize("n_bins", [20, 7])
def test_qce_binned_vs_loop(n_bins):
    g = torch.Generator().manual_seed(1)
    u = torch.rand(1000, generator=g, dtype=torch.float64) ** 1.5
    u[:5] = torch.tensor([0.0, 1.0, 0.5, 0.05, 0.95], dtype=torch.float64)  # bin edges
    _close(R.qce_binned(u, n_bins), ref_qce_binned(u.tolist(), n_bins))


@pytest.mark.parametrize("p", [1, 2])
def test_qce_ecdf_vs_loop(p):
    g = torch.Generator().manual_seed(2)
    u = torch.rand(700, generator=g, dtype=torch.float64) ** 2
    u[:3] = torch.tensor([0.0, 1.0, u[5].item()], dtype=torch.float64)  # endpoints and a tie
    _close(R.qce_ecdf(u, p=p), ref_qce_ecdf(u.tolist(), p))


def test_qce_ecdf_p1_is_wasserstein1_to_uniform_quantile_form():
    # W1 = int_0^1 |F^-1(t) - t| dt; sample the quantile form on a fine midpoint grid
    u = torch.tensor([0.1, 0.35, 0.8], dtype=torch.float64)
    t = (np.arange(300000) + 0.5) / 300000
    q = np.sort(u.numpy())[np.minimum((t * 3).astype(int), 2)]
    assert abs(R.qce_ecdf(u, 1).item() - np.mean(np.abs(q - t))) < 1e-6


def test_dce_vs_loop_and_forecast_paths():
    mu, s, y = _gauss_data(400, seed=4)
    c = 0.3
    y[:3] = c  # ties: counted as the +1 side in the exact flavour
    f = torch.distributions.Normal(mu, s)
    prob_above = 1 - torch.tensor([stats.norm.cdf(c, mu[i].item(), s[i].item()) for i in range(400)])
    ref = ref_dce(prob_above.tolist(), y.tolist(), c)
    _close(R.decision_calibration_error(prob_above.double(), y, c), ref)
    _close(R.dce(f, y, c), ref)
    _close(R.dce((mu, s), y, c), ref)
    # closed form sqrt(2)|mean 1[y>=c] - mean p|
    _close(R.dce(f, y, c), math.sqrt(2) * abs((y >= c).double().mean() - prob_above.mean()))


def test_dce_sampled_matches_loop_on_its_own_estimate():
    mu, s, y = _gauss_data(300, seed=5)
    g = torch.Generator().manual_seed(0)
    samples = mu + s * torch.randn(50, 300, generator=g, dtype=torch.float64)
    pa = [(samples[:, i] >= 0.0).double().mean().item() for i in range(300)]
    _close(R.dce_sampled(samples, y, 0.0), ref_dce(pa, y.tolist(), 0.0))
    # and approaches the closed form as S grows
    big = mu + s * torch.randn(4000, 300, generator=g, dtype=torch.float64)
    assert abs(R.dce_sampled(big, y, 0.0).item() - R.dce((mu, s), y, 0.0).item()) < 0.01


# ------------------------------------------------------------------ textbook cases
def test_calibrated_gaussian_forecaster_scores_near_zero():
    mu, s, y = _gauss_data(20000, seed=10)
    f = torch.distributions.Normal(mu, s)
    u = R.pit(f, y)
    assert R.qce_binned(u).item() < 0.02
    assert R.qce_ecdf(u, 1).item() < 0.01
    assert R.qce_ecdf(u, 2).item() < 0.01
    assert R.dce(f, y, 0.0).item() < 0.02
    assert R.dce(f, y, 1.0).item() < 0.02


def test_overconfident_forecaster_has_larger_qce():
    mu, s, y = _gauss_data(20000, seed=10)
    u_good = R.pit(torch.distributions.Normal(mu, s), y)
    u_bad = R.pit(torch.distributions.Normal(mu, 0.5 * s), y)
    assert R.qce_binned(u_bad).item() > 0.1 > 5 * R.qce_binned(u_good).item()
    assert R.qce_ecdf(u_bad, 1).item() > 0.05 > 5 * R.qce_ecdf(u_good, 1).item()


def test_biased_forecaster_has_large_dce():
    mu, s, y = _gauss_data(20000, seed=11)
    assert R.dce((mu + 2.0, s), y, 0.0).item() > 0.2


# ------------------------------------------------------------------ edge cases
def test_single_row_values_are_defined():
    u = torch.tensor([0.5], dtype=torch.float64)
    _close(R.qce_ecdf(u, 1), 0.25)
    _close(R.qce_ecdf(u, 2), math.sqrt(1 / 12))
    _close(R.qce_binned(u, 20), 0.5 * (19 / 20 + 19 / 20))
    y = torch.tensor([0.2], dtype=torch.float64)
    _close(R.decision_calibration_error(torch.tensor([0.7], dtype=torch.float64), y, 0.0), math.sqrt(2) * 0.3)
    _close(
        R.gaussian_nll((torch.zeros(1), torch.ones(1)), torch.zeros(1)),
        0.5 * math.log(2 * math.pi),
        rtol=1e-6,
    )


def test_constant_targets():
    y = torch.full((100,), 2.0, dtype=torch.float64)
    mu = torch.full((100,), 2.0, dtype=torch.float64)
    s = torch.ones(100, dtype=torch.float64)
    u = R.pit((mu, s), y)  # all PIT = 0.5
    _close(R.qce_binned(u, 20), ref_qce_binned(u.tolist(), 20))
    _close(R.qce_ecdf(u, 1), 0.25)
    # threshold equal to the constant target: all labels on the +1 side, forecast 50/50
    _close(R.dce((mu, s), y, 2.0), math.sqrt(2) * 0.5)
    assert torch.isfinite(R.crps((mu, s), y))


def test_empty_and_bad_inputs_raise():
    with pytest.raises(ValueError):
        R.qce_binned(torch.tensor([], dtype=torch.float64))
    with pytest.raises(ValueError):
        R.qce_ecdf(torch.rand(5), p=3)
    with pytest.raises(ValueError):
        R.decision_calibration_error(torch.rand(4), torch.rand(5))
    with pytest.raises(ValueError):
        R.dce_sampled(torch.rand(3, 4), torch.rand(5))
    with pytest.raises(TypeError):
        R.nll(object(), torch.rand(3))
