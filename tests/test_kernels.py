"""Tests for kcal.kernels: every Gram function against explicit double loops (float64, rel 1e-6)."""

import math

import numpy as np
import pytest
import torch

from kcal import kernels as K

RTOL = 1e-6


def _gram_loop(fn, a, b):
    """Naive reference: explicit loops over i, j (a, b are (n, d) numpy arrays)."""
    out = np.zeros((a.shape[0], b.shape[0]))
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            out[i, j] = fn(a[i], b[j])
    return out


def _close(t, ref, rtol=RTOL, atol=1e-12):
    np.testing.assert_allclose(t.detach().numpy(), ref, rtol=rtol, atol=atol)


@pytest.fixture
def pts():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(7, 3, generator=g, dtype=torch.float64)
    b = torch.randn(5, 3, generator=g, dtype=torch.float64)
    return a, b


@pytest.mark.parametrize("d", [1, 3, 10])
@pytest.mark.parametrize("bw", [0.3, 2.0])
def test_rbf_matches_loops(d, bw):
    g = torch.Generator().manual_seed(d)
    a = torch.randn(6, d, generator=g, dtype=torch.float64) * 2
    b = torch.randn(4, d, generator=g, dtype=torch.float64) * 2

    def ref(u, v):
        s = 0.0
        for c in range(len(u)):
            s += (u[c] - v[c]) ** 2
        return math.exp(-s / bw)  # authors' convention: no factor 2

    _close(K.rbf(a, b, bw), _gram_loop(ref, a.numpy(), b.numpy()))
    # self-Gram: exact ones on the diagonal, symmetric
    kaa = K.rbf(a, a, bw)
    assert torch.equal(kaa.diagonal(), torch.ones(6, dtype=torch.float64))
    _close(kaa, kaa.T.numpy())


def test_rbf_precision_close_points_large_norm():
    # matmul expansion path (d > 4): nearby points far from the origin must keep their small distances
    g = torch.Generator().manual_seed(1)
    base = torch.randn(1, 12, generator=g, dtype=torch.float64) * 100
    a = base + 1e-3 * torch.randn(5, 12, generator=g, dtype=torch.float64)
    direct = ((a[:, None, :] - a[None, :, :]) ** 2).sum(-1)
    _close(K.sq_dist(a, a), direct.numpy(), rtol=1e-6, atol=1e-9)
    _close(K.rbf(a, a, 1e-4), torch.exp(-direct / 1e-4).numpy(), rtol=1e-6, atol=1e-9)


def test_one_dim_inputs_and_batch_dims():
    g = torch.Generator().manual_seed(2)
    a = torch.randn(5, generator=g, dtype=torch.float64)
    b = torch.randn(4, generator=g, dtype=torch.float64)
    ref = np.exp(-((a.numpy()[:, None] - b.numpy()[None, :]) ** 2) / 0.5)
    _close(K.rbf(a, b, 0.5), ref)
    assert K.rbf(a, b, 0.5).shape == (5, 4)
    # leading batch dims broadcast: (3, n, 1) vs (1, m, 1)
    ab = torch.randn(3, 5, 1, generator=g, dtype=torch.float64)
    bb = torch.randn(1, 4, 1, generator=g, dtype=torch.float64)
    out = K.rbf(ab, bb, 0.7)
    assert out.shape == (3, 5, 4)
    for s in range(3):
        _close(out[s], K.rbf(ab[s], bb[0], 0.7).numpy())
    # batched matmul path (d > 4)
    ab = torch.randn(2, 5, 6, generator=g, dtype=torch.float64)
    out = K.rbf(ab, ab, 3.0)
    for s in range(2):
        _close(out[s], K.rbf(ab[s], ab[s].clone(), 3.0).numpy())


def test_laplacian_matches_loops(pts):
    a, b = pts

    def ref(u, v):
        return math.exp(-sum(abs(u[c] - v[c]) for c in range(len(u))) / 0.8)

    _close(K.laplacian(a, b, 0.8), _gram_loop(ref, a.numpy(), b.numpy()))


def test_tanh_decision_matches_loops_and_authors():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(6, generator=g, dtype=torch.float64)
    b = torch.randn(4, generator=g, dtype=torch.float64)

    def ref(u, v, c, s):
        return math.tanh((u[0] - c) / s) * math.tanh((v[0] - c) / s)

    an, bn = a.numpy()[:, None], b.numpy()[:, None]
    _close(
        K.tanh_decision(a, b, threshold=0.3, scale=2.0), _gram_loop(lambda u, v: ref(u, v, 0.3, 2.0), an, bn)
    )
    # authors' tanh_kernel: tanh(u) * tanh(v), no threshold, no bandwidth
    _close(K.tanh_decision(a, b), (torch.tanh(a)[:, None] * torch.tanh(b)[None, :]).numpy())


def test_point_estimate_matches_loops(pts):
    a, b = pts
    a1, b1 = a[:, :1], b[:, :1]
    ref = _gram_loop(lambda u, v: u[0] * v[0] + u[0] ** 2 * v[0] ** 2, a1.numpy(), b1.numpy())
    _close(K.point_estimate(a1, b1), ref)
    ref3 = _gram_loop(
        lambda u, v: sum(u[c] * v[c] + u[c] ** 2 * v[c] ** 2 for c in range(3)), a.numpy(), b.numpy()
    )
    _close(K.point_estimate(a, b), ref3)


def test_threshold_family_min_and_clamping():
    g = torch.Generator().manual_seed(4)
    a = torch.rand(6, generator=g, dtype=torch.float64) * 3.0
    b = torch.rand(5, generator=g, dtype=torch.float64) * 3.0
    ref = _gram_loop(lambda u, v: min(u[0], v[0]), a.numpy()[:, None], b.numpy()[:, None])
    _close(K.threshold_family(a, b, upper=3.0), ref)
    # outside [0, T]: clamped, i.e. the kernel of phi(y) = (1{y >= t})_{t in [0, T]} evaluated at real y
    out = torch.tensor([-1.0, 0.5, 4.0], dtype=torch.float64)
    ref = _gram_loop(
        lambda u, v: min(min(max(u[0], 0), 2), min(max(v[0], 0), 2)),
        out.numpy()[:, None],
        out.numpy()[:, None],
    )
    _close(K.threshold_family(out, out, upper=2.0), ref)
    # numeric check of the feature-map identity: integral over t of 1{y >= t} 1{y' >= t}
    ts = np.linspace(0, 2.0, 200001)
    for u in out.numpy():
        for v in out.numpy():
            integ = np.trapezoid(((u >= ts) & (v >= ts)).astype(float), ts)
            assert abs(integ - min(min(max(u, 0), 2), min(max(v, 0), 2))) < 1e-4
    with pytest.raises(ValueError, match="upper > lower"):
        K.threshold_family(a, b, upper=0.0)


def test_delta_class_kernels_and_product():
    z = torch.tensor([0.0, 1.0, 0.0, 2.0])
    _close(K.delta(z, z), (z[:, None] == z[None, :]).double().numpy())
    m, bw = 4, 0.7
    kc = K.class_rbf(m, bw, dtype=torch.float64)
    eye = torch.eye(m, dtype=torch.float64)
    _close(kc, K.rbf(eye, eye.clone(), bw).numpy())  # RBF between one-hot vectors
    assert kc[0, 1].item() == pytest.approx(math.exp(-2 / bw), rel=1e-12)
    assert torch.equal(K.one_hot_delta(3), torch.eye(3))
    g1, g2 = torch.rand(3, 3), torch.rand(3, 3)
    assert torch.equal(K.product(g1, g2), g1 * g2)
    with pytest.raises(ValueError):
        K.product()


def test_registry_and_validation():
    assert set(K.KERNELS) >= {
        "rbf",
        "laplacian",
        "tanh_decision",
        "point_estimate",
        "threshold_family",
        "delta",
    }
    k = K.get_kernel("rbf", bandwidth=0.5)
    a = torch.randn(4, 2, dtype=torch.float64)
    assert torch.equal(k(a, a), K.rbf(a, a, 0.5))
    assert K.get_kernel("tanh")(a, a).shape == (4, 4)  # alias of tanh_decision
    with pytest.raises(ValueError, match="valid names") as err:
        K.get_kernel("gausian")
    assert "rbf" in str(err.value) and "laplacian" in str(err.value)
    for bad in [0.0, -1.0, float("nan"), float("inf")]:
        with pytest.raises(ValueError, match="bandwidth"):
            K.get_kernel("rbf", bandwidth=bad)
        with pytest.raises(ValueError, match="bandwidth"):
            K.rbf(a, a, bad)
    with pytest.raises(ValueError, match="scale"):
        K.get_kernel("tanh_decision", scale=0.0)
    with pytest.raises(ValueError, match="unknown parameter"):
        K.get_kernel("point_estimate", bandwidth=1.0)
    with pytest.raises(ValueError, match="num_classes"):
        K.class_rbf(0, 1.0)
    with pytest.raises(ValueError, match="bandwidth"):
        K.class_rbf(3, -2.0)
    with pytest.raises(ValueError, match="feature dimensions"):
        K.rbf(torch.zeros(3, 2), torch.zeros(3, 4))


def test_kernel_gradients_finite():
    a = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    for name, params in [
        ("rbf", {"bandwidth": 0.5}),
        ("laplacian", {"bandwidth": 0.5}),
        ("tanh_decision", {}),
        ("point_estimate", {}),
        ("threshold_family", {"upper": 1.0}),
    ]:
        k = K.get_kernel(name, **params)
        (gr,) = torch.autograd.grad(k(a, a).sum(), a)
        assert torch.isfinite(gr).all(), name
    # self-Gram via the matmul path has exact zero self-distances and finite gradients
    x = torch.randn(6, 8, dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(K.rbf(x, x, 2.0).sum(), x)
    assert torch.isfinite(gx).all() and gx.abs().sum() > 0


# ----------------------------------------------------------------------------------------------------
# data-driven bandwidths
# ----------------------------------------------------------------------------------------------------
def _pair_distances(a, kernel):
    """Naive double loop over pairs i < j: squared Euclidean (rbf) or L1 (laplacian) distances."""
    rows = a.tolist() if a.dim() == 2 else [[v] for v in a.tolist()]
    out = []
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            diffs = [u - v for u, v in zip(rows[i], rows[j], strict=True)]
            out.append(sum(d * d for d in diffs) if kernel == "rbf" else sum(abs(d) for d in diffs))
    return out


@pytest.mark.parametrize("kernel", ["rbf", "laplacian"])
@pytest.mark.parametrize("shape", [(2, 3), (9,), (31, 5)])
def test_median_heuristic_is_the_median_pair_distance(kernel, shape):
    a = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)), dtype=torch.float64)
    d = sorted(_pair_distances(a, kernel))
    # torch.median of an even count is the lower of the two middle values
    assert K.median_heuristic(a, kernel) == pytest.approx(d[(len(d) - 1) // 2], rel=1e-12)


def test_median_heuristic_of_discrete_rows_falls_back_to_the_nonzero_distances():
    a = torch.tensor([0.0] * 6 + [1.0, 3.0])  # 15 of 28 pairs equal: median 0
    assert K.median_heuristic(a) == pytest.approx((6 * 1.0 + 6 * 9.0 + 4.0) / 13)
    assert K.median_heuristic(torch.zeros(5, 2)) == 1.0
    with pytest.raises(ValueError, match="at least 2 rows"):
        K.median_heuristic(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="applies to"):
        K.median_heuristic(torch.zeros(4), "tanh_decision")


def test_uniform_median_constant_is_the_median_of_uniform_pairs():
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    empirical = float(((u[:100_000] - u[100_000:]) ** 2).median())
    assert K.UNIFORM_MEDIAN_SQ_DIST == pytest.approx(empirical, rel=0.02)


def test_kernel_report_names_identity_and_flat_kernels_with_their_numbers():
    x = torch.randn(64, 100, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    med = K.median_heuristic(x)
    assert K.kernel_report(x, med) is None and K.kernel_report(x, 10 * med) is None
    identity = K.kernel_report(x, 1.0)
    assert "numerically the identity" in identity and "bandwidth 1 " in identity
    assert f"{med:.4g}" in identity and "\n" not in identity
    flat = K.kernel_report(x, 1e12)
    assert "numerically all ones" in flat
    assert K.kernel_report(x, 1.0, "tanh_decision") is None  # no bandwidth: nothing to diagnose
