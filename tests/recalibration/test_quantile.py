"""Tests for kcal.recalibration.quantile (regression quantile recalibration)."""

import math

import numpy as np
import pytest
import torch
from sklearn.isotonic import IsotonicRegression

from kcal.recalibration import (
    ConformalQuantileRecalibrator,
    IdentityQuantileRecalibrator,
    IsotonicQuantileRecalibrator,
    OfficialConformalForecast,
    OfficialConformalRecalibrator,
    PiecewiseLinearMap,
    RecalibratedForecast,
    make_quantile_recalibrator,
)

METHODS = ["isotonic", "conformal"]


def _simulate(n, seed, scale=0.4, dtype=torch.float64):
    """y ~ N(mu, 1), forecast N(mu, scale): deliberately overconfident."""
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(n, generator=g, dtype=dtype)
    y = mu + torch.randn(n, generator=g, dtype=dtype)
    return torch.distributions.Normal(mu, torch.full_like(mu, scale)), y


def _qce_equal_bins(pit, bins=20):
    """Exact quantile calibration error with equal bins: 1/2 sum_b |count_b / N - 1/B|."""
    pit = np.asarray(pit, dtype=np.float64)
    idx = np.clip(np.floor(pit * bins).astype(int), 0, bins - 1)
    counts = np.bincount(idx, minlength=bins)
    return 0.5 * np.abs(counts / pit.size - 1.0 / bins).sum()


def _torchuq_linear_cdf(knots, s):
    """Independent reference for the official map: sum of clamped per-segment fractions / (len - 1)."""
    q = np.asarray(knots)
    s = np.asarray(s)[:, None]
    frac = (s - q[None, :-1]) / (q[None, 1:] - q[None, :-1] + 1e-20)
    return np.clip(frac, 0, 1).sum(-1) / (len(q) - 1)


def _fitted(method, seed=1, n=2000):
    base, y = _simulate(n, seed)
    return make_quantile_recalibrator(method).fit(base.cdf(y))


# --------------------------------------------------------------------------- PiecewiseLinearMap


def _random_knots(rng, k=40):
    xs = np.sort(rng.uniform(-0.2, 1.2, size=k))
    ys = np.sort(rng.uniform(0.0, 1.0, size=k))
    return xs, ys


def test_piecewise_map_matches_np_interp_loop():
    rng = np.random.default_rng(0)
    for _ in range(5):
        xs, ys = _random_knots(rng)
        m = PiecewiseLinearMap(xs, ys)
        u = rng.uniform(-0.5, 1.5, size=3000)
        u = np.concatenate([u, xs])  # include the knots themselves and out-of-support points
        ref = np.array([np.interp(v, xs, ys) for v in u])
        got = m(torch.tensor(u, dtype=torch.float64)).numpy()
        assert np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-12)) <= 1e-6
        # inverse vs np.interp on the swapped knots (ys strictly increasing here)
        lv = rng.uniform(ys[0], ys[-1], size=2000)
        ref_inv = np.array([np.interp(v, ys, xs) for v in lv])
        got_inv = m.inverse(torch.tensor(lv, dtype=torch.float64)).numpy()
        assert np.max(np.abs(got_inv - ref_inv) / np.maximum(np.abs(ref_inv), 1e-12)) <= 1e-6
        # inverse clamps to the support ends
        ends = m.inverse(torch.tensor([ys[0] - 0.1, ys[-1] + 0.1], dtype=torch.float64)).numpy()
        np.testing.assert_allclose(ends, [xs[0], xs[-1]])


def test_piecewise_map_derivative_matches_finite_differences():
    rng = np.random.default_rng(1)
    xs, ys = _random_knots(rng)
    m = PiecewiseLinearMap(xs, ys)
    h = 1e-7
    u = rng.uniform(xs[0], xs[-1], size=2000)
    # keep points at least 10 h away from every knot
    far = np.min(np.abs(u[:, None] - xs[None, :]), axis=1) > 10 * h
    u = u[far]
    ut = torch.tensor(u, dtype=torch.float64)
    fd = (m(ut + h) - m(ut - h)) / (2 * h)
    np.testing.assert_allclose(m.derivative(ut).numpy(), fd.numpy(), rtol=1e-5, atol=1e-6)
    # autograd agrees with the documented derivative
    ut.requires_grad_(True)
    m(ut).sum().backward()
    np.testing.assert_allclose(ut.grad.numpy(), m.derivative(ut.detach()).numpy(), rtol=1e-12)
    # 0 outside the support
    out = torch.tensor([xs[0] - 0.1, xs[-1] + 0.1], dtype=torch.float64)
    assert torch.all(m.derivative(out) == 0)


def test_piecewise_map_flat_region_and_jump_conventions():
    # flat on [0.2, 0.5] at 0.4, vertical jump at 0.7 from 0.6 to 0.8
    m = PiecewiseLinearMap([0.0, 0.2, 0.5, 0.7, 0.7, 1.0], [0.0, 0.4, 0.4, 0.6, 0.8, 1.0])
    # inverse of a flat level = left end of the flat region
    assert m.inverse(torch.tensor(0.4, dtype=torch.float64)).item() == pytest.approx(0.2)
    # levels inside the jump map to the jump location
    assert m.inverse(torch.tensor(0.7, dtype=torch.float64)).item() == pytest.approx(0.7)
    # right-continuous at the jump
    assert m(torch.tensor(0.7, dtype=torch.float64)).item() == pytest.approx(0.8)
    assert m(torch.tensor(0.7 - 1e-9, dtype=torch.float64)).item() == pytest.approx(0.6, abs=1e-6)
    # slope 0 on the flat piece
    assert m.derivative(torch.tensor(0.3, dtype=torch.float64)).item() == 0.0
    # dtype is preserved
    assert m(torch.tensor([0.3], dtype=torch.float32)).dtype == torch.float32


def test_piecewise_map_rejects_bad_knots():
    with pytest.raises(ValueError):
        PiecewiseLinearMap([0.0, 1.0], [1.0, 0.0])
    with pytest.raises(ValueError):
        PiecewiseLinearMap([1.0, 0.0], [0.0, 1.0])
    with pytest.raises(ValueError):
        PiecewiseLinearMap([0.0], [0.0])
    with pytest.raises(ValueError):
        PiecewiseLinearMap([0.0, 0.5, 1.0], [0.0, 1.0])


# --------------------------------------------------------------------------- map construction


def test_conformal_map_matches_official_construction():
    pits = np.array([0.6, 0.1, 0.3, 0.2])
    rec = ConformalQuantileRecalibrator().fit(torch.tensor(pits))
    s = np.sort(pits)
    gap = np.mean(np.diff(s))
    np.testing.assert_allclose(rec.map.xs.numpy(), np.r_[s[0] - gap, s, s[-1] + gap])
    np.testing.assert_allclose(rec.map.ys.numpy(), np.arange(6) / 5)
    # compare with an independent sum-of-clamps evaluation (torchuq's formula) on a grid incl. outside
    grid = np.linspace(-0.3, 1.3, 1001)
    np.testing.assert_allclose(
        rec(torch.tensor(grid)).numpy(), _torchuq_linear_cdf(rec.map.xs.numpy(), grid), atol=1e-12
    )
    # icdf: torchuq interpolates the knot array at index level * (N + 1)
    levels = np.linspace(0, 1, 37)
    idx = levels * (len(s) + 1)
    knots = rec.map.xs.numpy()
    lo, hi = np.floor(idx).astype(int), np.ceil(idx).astype(int)
    ratio = np.ceil(idx) - idx
    ref = knots[lo] * ratio + knots[hi] * (1 - ratio)
    np.testing.assert_allclose(rec.map.inverse(torch.tensor(levels)).numpy(), ref, atol=1e-12)


def test_conformal_map_on_realistic_pits_matches_official_formula():
    base, y = _simulate(500, seed=3)
    rec = ConformalQuantileRecalibrator().fit(base.cdf(y))
    grid = np.linspace(-0.01, 1.01, 3001)
    np.testing.assert_allclose(
        rec(torch.tensor(grid)).numpy(), _torchuq_linear_cdf(rec.map.xs.numpy(), grid), atol=1e-9
    )


def test_isotonic_map_matches_sklearn_and_has_fixed_ends():
    base, y = _simulate(800, seed=4)
    pits = base.cdf(y).numpy()
    rec = IsotonicQuantileRecalibrator().fit(pits)
    xs, ys = rec.map.xs.numpy(), rec.map.ys.numpy()
    assert xs[0] == 0.0 and ys[0] == 0.0 and xs[-1] == 1.0 and ys[-1] == 1.0
    # Kuleshov construction fit directly with sklearn
    ecdf = np.array([np.mean(pits <= p) for p in pits])
    iso = IsotonicRegression(out_of_bounds="clip").fit(pits, ecdf)
    # identical on [smallest positive p, max p] (R is forced to 0 at p == 0, where a base CDF may underflow)
    grid = np.linspace(pits[pits > 0].min(), pits.max(), 2001)
    np.testing.assert_allclose(rec(torch.tensor(grid)).numpy(), iso.predict(grid), atol=1e-9)
    # R(0) = 0 and R(1) = 1 are enforced even with PITs exactly at 0 / 1
    r0 = rec(torch.tensor([0.0, 1.0], dtype=torch.float64)).numpy()
    np.testing.assert_allclose(r0, [0.0, 1.0])
    tied = np.r_[np.zeros(5), np.linspace(0.1, 0.9, 90), np.ones(5)]
    rec_tied = IsotonicQuantileRecalibrator().fit(tied)
    np.testing.assert_allclose(
        rec_tied(torch.tensor([0.0, 0.1, 0.9, 1.0], dtype=torch.float64)).numpy(), [0.0, 0.06, 0.95, 1.0]
    )
    assert torch.all(rec_tied.map.xs[1:] > rec_tied.map.xs[:-1])  # no jump left at 0


def test_identity_recalibrator_leaves_forecast_unchanged():
    base, y = _simulate(300, seed=5)
    rec = make_quantile_recalibrator("none").fit(base.cdf(y))
    assert isinstance(rec, IdentityQuantileRecalibrator)
    f = rec.forecast(base)
    torch.testing.assert_close(f.cdf(y), base.cdf(y))
    torch.testing.assert_close(f.log_prob(y), base.log_prob(y))
    lv = torch.linspace(0.01, 0.99, 300, dtype=torch.float64)
    torch.testing.assert_close(f.icdf(lv), base.icdf(lv))


# --------------------------------------------------------------------------- recalibration quality


@pytest.mark.parametrize("method", METHODS)
def test_recalibration_lowers_quantile_calibration_error_on_held_out_data(method):
    base_val, y_val = _simulate(2000, seed=10)
    base_test, y_test = _simulate(5000, seed=11)
    rec = make_quantile_recalibrator(method).fit(base_val.cdf(y_val))
    qce_before = _qce_equal_bins(base_test.cdf(y_test).numpy())
    qce_after = _qce_equal_bins(rec.forecast(base_test).cdf(y_test).numpy())
    assert qce_before > 0.3  # the overconfident model really is miscalibrated
    assert qce_after < 0.5 * qce_before
    assert qce_after < 0.06  # close to the sampling-noise level
    # samples drawn from the recalibrated forecast are calibrated w.r.t. that forecast too
    f = rec.forecast(base_test)
    s = f.sample(generator=torch.Generator().manual_seed(0))
    assert s.shape == y_test.shape
    assert _qce_equal_bins(f.cdf(s).numpy()) < 0.06


@pytest.mark.parametrize("method", METHODS)
def test_recalibrated_cdf_monotone_bounded_and_icdf_inverts(method):
    rec = _fitted(method)
    f = rec.forecast(
        torch.distributions.Normal(
            torch.tensor([0.3], dtype=torch.float64), torch.tensor([0.4], dtype=torch.float64)
        )
    )
    grid = torch.linspace(-6, 6, 20001, dtype=torch.float64).unsqueeze(-1)
    c = f.cdf(grid).squeeze(-1)
    assert torch.all(c >= 0) and torch.all(c <= 1)
    assert torch.all(c[1:] >= c[:-1])
    # icdf(cdf(y)) = y where R(F(y)) is strictly inside (0, 1) and F(y) not in the icdf clamp
    ys = torch.linspace(-1.0, 1.6, 501, dtype=torch.float64).unsqueeze(-1)
    back = f.icdf(f.cdf(ys))
    torch.testing.assert_close(back, ys, atol=1e-8, rtol=1e-8)
    # cdf(icdf(level)) = level on the interior
    # (levels whose R^{-1} falls below 1e-6 / above 1 - 1e-6 are clamped before the base icdf)
    lv = torch.linspace(0.05, 0.95, 91, dtype=torch.float64).unsqueeze(-1)
    torch.testing.assert_close(f.cdf(f.icdf(lv)), lv, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_proper_log_prob_integrates_to_one(method):
    rec = _fitted(method)
    base = torch.distributions.Normal(
        torch.tensor([0.0], dtype=torch.float64), torch.tensor([0.4], dtype=torch.float64)
    )
    f = rec.forecast(base)
    # fine uniform grid plus both sides of every knot of R (in y space), so the trapezoid rule does not
    # smear the density's jumps (segments narrower than the grid step would otherwise bias the sum)
    xs = rec.map.xs
    xs = xs[(xs > 1e-12) & (xs < 1 - 1e-12)]
    y_knots = base.icdf(xs.unsqueeze(-1)).squeeze(-1)
    grid = torch.cat([torch.linspace(-8, 8, 200001, dtype=torch.float64), y_knots, y_knots - 1e-11])
    grid = torch.sort(grid).values.unsqueeze(-1)
    dens = f.log_prob(grid).exp().squeeze(-1).numpy()
    total = np.trapezoid(dens, grid.squeeze(-1).numpy())
    mass = (rec(torch.tensor(1.0, dtype=torch.float64)) - rec(torch.tensor(0.0, dtype=torch.float64))).item()
    assert total == pytest.approx(mass, abs=2e-4)
    assert total == pytest.approx(1.0, abs=2e-3)  # conformal: R(1) - R(0) >= 1 - 2/(N+1)


@pytest.mark.parametrize("method", METHODS)
def test_proper_log_prob_matches_finite_difference_away_from_knots(method):
    rec = _fitted(method)
    base = torch.distributions.Normal(
        torch.tensor([0.0], dtype=torch.float64), torch.tensor([0.4], dtype=torch.float64)
    )
    f = rec.forecast(base)
    h = 1e-4
    y = torch.linspace(-0.9, 0.9, 4001, dtype=torch.float64).unsqueeze(-1)
    u0, u1 = base.cdf(y), base.cdf(y + h)
    same_segment = (rec.map.segment(u0) == rec.map.segment(u1)).squeeze(-1)
    assert same_segment.sum() > 500
    proper = f.log_prob(y).squeeze(-1)[same_segment]
    fd = f.log_prob_finite_difference(y, h=h).squeeze(-1)[same_segment]
    np.testing.assert_allclose(proper.numpy(), fd.numpy(), atol=5e-3)
    # autograd of the recalibrated cdf gives the same density
    yy = y.clone().requires_grad_(True)
    f.cdf(yy).sum().backward()
    np.testing.assert_allclose(yy.grad.squeeze(-1)[same_segment].numpy(), proper.exp().numpy(), rtol=1e-9)


def test_log_prob_floor_and_finite_difference_cap():
    rec = ConformalQuantileRecalibrator().fit(torch.linspace(0.3, 0.7, 101, dtype=torch.float64))
    base = torch.distributions.Normal(
        torch.tensor([0.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
    )
    f = rec.forecast(base)
    y_out = torch.tensor([[-3.0]], dtype=torch.float64)  # F(y) ~ 0.0013, outside the map support
    assert rec.map.derivative(base.cdf(y_out)).item() == 0.0
    expected = math.log(1e-12) + base.log_prob(y_out).item()
    assert f.log_prob(y_out).item() == pytest.approx(expected)
    assert torch.isfinite(f.log_prob(y_out)).all()
    # the official finite-difference version caps the per-point NLL at -log(1e-10 / 1e-4) ~ 13.8
    assert f.log_prob_finite_difference(y_out).item() == pytest.approx(
        math.log(1e-10) - math.log(1e-4), rel=1e-6
    )
    # custom floor
    f2 = RecalibratedForecast(base, rec, slope_floor=1e-3)
    assert f2.log_prob(y_out).item() == pytest.approx(math.log(1e-3) + base.log_prob(y_out).item())


def test_float32_forecast_batch_and_sample_shapes():
    base, y = _simulate(400, seed=7, dtype=torch.float32)
    rec = make_quantile_recalibrator("conformal").fit(base.cdf(y))
    f = rec.forecast(base)
    assert f.cdf(y).dtype == torch.float32
    assert f.log_prob(y).dtype == torch.float32
    assert f.icdf(torch.rand(400)).dtype == torch.float32
    assert f.batch_shape == torch.Size([400])
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    s1 = f.sample(generator=g1, sample_shape=(10,))
    s2 = f.sample(generator=g2, sample_shape=(10,))
    assert s1.shape == (10, 400)
    torch.testing.assert_close(s1, s2)
    assert torch.isfinite(f.log_prob(y)).all()
    assert torch.isfinite(f.log_prob_finite_difference(y)).all()


# --------------------------------------------------------------------------- official flavour (conformal)

FD_CAP = math.log(1e-10) - math.log(1e-4)  # the finite-difference log density of a row whose CDF did not move


def test_official_conformal_knots_and_map_agree_with_the_exact_map_away_from_ties():
    """In float64 and without ties the segment sum is the exact map's interpolation (to rounding)."""
    base, y = _simulate(500, seed=3)
    pits = base.cdf(y)
    official = make_quantile_recalibrator("conformal", flavour="official").fit(pits)
    exact = make_quantile_recalibrator("conformal").fit(pits)
    assert isinstance(official, OfficialConformalRecalibrator) and official.knots.dtype == torch.float64
    np.testing.assert_allclose(official.knots.numpy() + 0.5, exact.map.xs.numpy(), atol=1e-15)
    np.testing.assert_allclose(official.map.xs.numpy(), exact.map.xs.numpy(), atol=1e-15)
    grid = torch.linspace(-0.01, 1.01, 3001, dtype=torch.float64)
    np.testing.assert_allclose(official(grid).numpy(), exact(grid).numpy(), atol=1e-12)
    levels = torch.linspace(0, 1, 37, dtype=torch.float64)
    np.testing.assert_allclose(
        official.inverse_score(levels).numpy() + 0.5, exact.map.inverse(levels).numpy(), atol=1e-12
    )


def test_official_conformal_takes_the_left_limit_at_tied_pits():
    """Repeated validation rows tie their PITs: R jumps there; the official map takes the value below the jump
    (the exact map the value above), and PITs of exactly 1.0 tie at the top in the same way."""
    pits = torch.tensor([0.1, 0.2, 0.2, 0.2, 0.5, 0.8, 1.0, 1.0], dtype=torch.float32)
    official = make_quantile_recalibrator("conformal", flavour="official").fit(pits)
    exact = make_quantile_recalibrator("conformal").fit(pits)
    at = torch.tensor([0.2, 1.0])
    # knots: s0, 0.1, 0.2 x3, 0.5, 0.8, 1.0 x2, s9 (N + 1 = 9)
    torch.testing.assert_close(official(at), torch.tensor([2 / 9, 7 / 9]))
    torch.testing.assert_close(exact(at.double()), torch.tensor([4 / 9, 8 / 9], dtype=torch.float64))
    # just off the tie both agree (to float32)
    off = torch.tensor([0.2 + 1e-3, 0.2 - 1e-3])
    torch.testing.assert_close(official(off).double(), exact(off.double()), atol=1e-6, rtol=0)


def test_official_conformal_works_in_the_forecasts_float32():
    """float32 PITs keep the arithmetic in float32: labels ~4 sd out cost the 13.8-nat cap because F(y + 1e-4)
    and F(y) round to the same float32, and PITs round to exactly 1.0 beyond ~5.4 sd; the exact map on float64
    forecasts resolves both."""
    pit32 = torch.distributions.Normal(0.0, 1.0).cdf(torch.linspace(-5, 5, 41))
    official = make_quantile_recalibrator("conformal", flavour="official").fit(pit32)
    assert official.knots.dtype == torch.float32
    y = torch.tensor([4.2, 4.5, 6.0])
    b32 = torch.distributions.Normal(torch.zeros(3), torch.ones(3))
    assert b32.cdf(y)[-1] == 1.0
    f = official.forecast(b32)
    assert isinstance(f, OfficialConformalForecast)
    lp = f.log_prob(y)
    assert lp.dtype == torch.float32
    torch.testing.assert_close(lp, torch.full((3,), FD_CAP))
    torch.testing.assert_close(f.log_prob_finite_difference(y), lp, rtol=0, atol=0)
    exact = make_quantile_recalibrator("conformal").fit(pit32.double())
    b64 = torch.distributions.Normal(torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))
    lp64 = exact.forecast(b64).log_prob_finite_difference(y.double())
    assert (lp64[:2] > -3.0).all()  # ~ -2.7 and -1.9 nats: the float64 difference resolves the density


def test_official_conformal_rows_do_not_depend_on_their_batch():
    """Rows are evaluated in chunks of 128 (the authors' test batch); any row's value is the same alone."""
    base, y = _simulate(300, seed=8, dtype=torch.float32)
    rec = make_quantile_recalibrator("conformal", flavour="official").fit(base.cdf(y))
    f = rec.forecast(base)
    whole = f.cdf(y)
    alone = torch.cat([rec(base.cdf(y)[i : i + 1]) for i in range(0, 300, 37)])
    assert torch.equal(whole[::37], alone)
    assert torch.equal(rec(base.cdf(y).reshape(20, 15)), whole.reshape(20, 15))


def test_official_conformal_icdf_and_samples():
    base, y = _simulate(400, seed=9, dtype=torch.float32)
    rec = make_quantile_recalibrator("conformal", flavour="official").fit(base.cdf(y))
    f = rec.forecast(base)
    assert f.batch_shape == torch.Size([400])
    # the knot-index interpolation at level * (N + 1)
    levels = torch.rand(400, generator=torch.Generator().manual_seed(0))
    t = levels * 401
    k = rec.knots
    expected = k[t.floor().long()] * (t.ceil() - t) + k[t.ceil().long()] * (1 - (t.ceil() - t))
    assert torch.equal(rec.inverse_score(levels), expected)
    icdf = f.icdf(levels)
    assert icdf.dtype == torch.float32
    assert torch.equal(icdf, base.icdf((expected + 0.5).clamp(1e-6, 1 - 1e-6)))
    # cdf(icdf(level)) = level in the interior, to float32 (the base's icdf/cdf round trip near its tails
    # costs ~1e-4)
    inner = torch.linspace(0.05, 0.95, 400)
    torch.testing.assert_close(f.cdf(f.icdf(inner)), inner, atol=3e-4, rtol=0)
    s1 = f.sample(generator=torch.Generator().manual_seed(3), sample_shape=(10,))
    s2 = f.sample(generator=torch.Generator().manual_seed(3), sample_shape=10)
    assert s1.shape == (10, 400) and s1.dtype == torch.float32 and torch.equal(s1, s2)


def test_official_conformal_errors():
    rec = make_quantile_recalibrator("conformal", flavour="official")
    with pytest.raises(RuntimeError):
        rec(torch.tensor([0.5]))
    with pytest.raises(RuntimeError):
        rec.forecast(torch.distributions.Normal(0.0, 1.0))
    with pytest.raises(ValueError):
        rec.fit(torch.tensor([0.5]))
    with pytest.raises(ValueError):
        rec.fit(torch.tensor([0.5, float("nan")]))
    # the authors ran no other recalibrator: isotonic and none are the same in both flavours
    assert isinstance(
        make_quantile_recalibrator("isotonic", flavour="official"), IsotonicQuantileRecalibrator
    )
    assert isinstance(make_quantile_recalibrator("none", flavour="official"), IdentityQuantileRecalibrator)
    with pytest.raises(ValueError, match="flavour"):
        make_quantile_recalibrator("conformal", flavour="authors")


def test_factory_and_errors():
    assert isinstance(make_quantile_recalibrator("isotonic"), IsotonicQuantileRecalibrator)
    assert isinstance(make_quantile_recalibrator("conformal"), ConformalQuantileRecalibrator)
    with pytest.raises(ValueError) as exc:
        make_quantile_recalibrator("platt")
    msg = str(exc.value)
    for name in ("isotonic", "conformal", "none"):
        assert name in msg
    with pytest.raises(RuntimeError):
        _ = make_quantile_recalibrator("conformal").map
    with pytest.raises(ValueError):
        ConformalQuantileRecalibrator().fit(torch.tensor([0.5]))
    with pytest.raises(ValueError):
        IsotonicQuantileRecalibrator().fit(torch.tensor([0.5, float("nan")]))
    with pytest.raises(TypeError):
        RecalibratedForecast(torch.distributions.Normal(0.0, 1.0), object())


def test_forecast_usable_with_autograd_after_first_use_in_inference_mode():
    base, y = _simulate(300, seed=8)
    rec = make_quantile_recalibrator("conformal").fit(base.cdf(y))
    f = rec.forecast(base)
    with torch.inference_mode():  # e.g. a Lightning test hook touches the map first
        lp_inf = f.log_prob(y)
        _ = f.icdf(torch.full_like(y, 0.3))
    mu = base.loc.clone().requires_grad_(True)
    f2 = rec.forecast(torch.distributions.Normal(mu, base.scale))
    f2.cdf(y).sum().backward()
    assert mu.grad is not None and torch.isfinite(mu.grad).all()
    torch.testing.assert_close(f2.log_prob(y).detach(), lp_inf.clone())
