"""Tests for kcal.mmd: naive double-loop references, unbiasedness, analytic vs sampled, gradients, edges."""

import math
import zlib

import numpy as np
import pytest
import torch
from torch.func import vmap

from kcal import kernels as K
from kcal import mmd
from kcal.mmd import classification_mmd, mmd2_unbiased, regression_mmd

DT = torch.float64
RTOL = 1e-6


def _rel_close(value, ref, rtol=RTOL, atol=1e-12):
    value = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
    assert abs(value - ref) <= rtol * abs(ref) + atol, (value, ref)


# ----------------------------------------------------------------------------------------------------
# naive NumPy references (explicit Python loops over i, j, draws and classes)
# ----------------------------------------------------------------------------------------------------
def _phi(v):
    return 0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))


def _scalar_kernel(name, bw=1.0, c=0.0, s=1.0, upper=None, lower=0.0):
    if name == "rbf":
        return lambda a, b: math.exp(-((a - b) ** 2) / bw)
    if name == "laplacian":
        return lambda a, b: math.exp(-abs(a - b) / bw)
    if name == "tanh_decision":
        return lambda a, b: math.tanh((a - c) / s) * math.tanh((b - c) / s)
    if name == "point_estimate":
        return lambda a, b: a * b + a * a * b * b
    if name == "threshold_family":

        def clip(v):
            return min(max(v, lower), upper)

        return lambda a, b: min(clip(a), clip(b)) - lower
    raise AssertionError(name)


def _vector_kernel(name, bw):
    if name == "rbf":

        def k(u, v):
            acc = 0.0
            for c in range(len(u)):
                acc += (u[c] - v[c]) ** 2
            return math.exp(-acc / bw)

        return k
    if name == "delta":
        return lambda u, v: float(all(u[c] == v[c] for c in range(len(u))))
    raise AssertionError(name)


def ref_regression(
    mean, std, y, x, eps, form, ky, kz, pairing, features=None, groups=None, c=0.0, y0=None, alpha=0.5
):
    n, m = len(mean), eps.shape[0]
    if form in ("quantile", "threshold"):
        fdraws = [[_phi((y[i] - mean[i]) / std[i]) for i in range(n)]]
        tdraws = [[_phi(eps[s, i]) for i in range(n)] for s in range(m)]
    else:
        fdraws = [[mean[i] + std[i] * eps[s, i] for i in range(n)] for s in range(m)]
        tdraws = [[y[i] for i in range(n)]]
    z = None
    if form == "threshold":
        yy0 = c if y0 is None else y0
        z = [[1.0 if _phi((yy0 - mean[i]) / std[i]) <= alpha else 0.0] for i in range(n)]
    elif form == "decision":
        z = [[1.0 if 1.0 - _phi((c - mean[i]) / std[i]) > 0.5 else -1.0] for i in range(n)]
    elif form == "group":
        z = [list(np.atleast_1d(groups[i])) for i in range(n)]
    elif form == "distribution":
        z = [[mean[i], std[i]] for i in range(n)]
    elif form == "individual":
        z = [list(x[i]) for i in range(n)]
    elif form == "local":
        z = [[x[i, f] for f in features] for i in range(n)]
    total = 0.0
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if pairing == "index":
                draws = max(len(tdraws), len(fdraws))
                acc = 0.0
                for s in range(draws):
                    t = tdraws[s if len(tdraws) > 1 else 0]
                    f = fdraws[s if len(fdraws) > 1 else 0]
                    acc += ky(t[i], t[j]) + ky(f[i], f[j]) - ky(t[i], f[j]) - ky(t[j], f[i])
                h = acc / draws
            else:

                def cross(da, db, a_idx, b_idx):
                    acc = 0.0
                    for s in range(len(da)):
                        for s2 in range(len(db)):
                            acc += ky(da[s][a_idx], db[s2][b_idx])
                    return acc / (len(da) * len(db))

                h = (
                    cross(tdraws, tdraws, i, j)
                    + cross(fdraws, fdraws, i, j)
                    - cross(tdraws, fdraws, i, j)
                    - cross(tdraws, fdraws, j, i)
                )
            total += h * (1.0 if z is None else kz(z[i], z[j]))
    return total / (n * (n - 1))


def ref_regression_analytic(mean, std, y, x, kname, bw, bw_z, form):
    n = len(mean)
    total = 0.0
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if kname == "rbf":
                tt = math.exp(-((y[i] - y[j]) ** 2) / bw)
                v = std[i] ** 2 + std[j] ** 2
                ff = math.sqrt(bw / (bw + 2 * v)) * math.exp(-((mean[i] - mean[j]) ** 2) / (bw + 2 * v))

                def tf(a, b):  # E k(y_a, Yhat_b)
                    return math.sqrt(bw / (bw + 2 * std[b] ** 2)) * math.exp(
                        -((y[a] - mean[b]) ** 2) / (bw + 2 * std[b] ** 2)
                    )
            else:  # point_estimate

                def e1(a):
                    return mean[a]

                def e2(a):
                    return mean[a] ** 2 + std[a] ** 2

                tt = y[i] * y[j] + y[i] ** 2 * y[j] ** 2
                ff = e1(i) * e1(j) + e2(i) * e2(j)

                def tf(a, b):
                    return y[a] * e1(b) + y[a] ** 2 * e2(b)

            h = tt + ff - tf(i, j) - tf(j, i)
            kz = 1.0 if form == "marginal" else _vector_kernel("rbf", bw_z)(x[i], x[j])
            total += h * kz
    return total / (n * (n - 1))


def _case_seed(*parts: str) -> int:
    """A per-case seed that is the same in every process (``hash`` of a str is salted per process)."""
    return zlib.crc32("/".join(parts).encode()) % 1000


def _reg_inputs(n=7, m=3, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(n, generator=g, dtype=DT)
    std = 0.3 + torch.rand(n, generator=g, dtype=DT)
    y = torch.randn(n, generator=g, dtype=DT)
    x = torch.randn(n, d, generator=g, dtype=DT)
    eps = torch.randn(m, n, generator=g, dtype=DT)
    groups = torch.randint(0, 3, (n,), generator=g).to(DT)
    return mean, std, y, x, eps, groups


REG_CASES = [
    # (form, kernel_y, y-kernel params, kernel_z)
    ("quantile", "rbf", {"bw": 0.3}, "rbf"),
    ("threshold", "rbf", {"bw": 0.3}, "delta"),
    ("threshold", "laplacian", {"bw": 0.5}, "rbf"),
    ("marginal", "rbf", {"bw": 0.7}, "rbf"),
    ("marginal", "laplacian", {"bw": 0.7}, "rbf"),
    ("marginal", "point_estimate", {}, "rbf"),
    ("marginal", "threshold_family", {"upper": 1.5, "lower": -0.5}, "rbf"),
    ("decision", "tanh_decision", {"c": 0.2, "s": 0.7}, "delta"),
    ("decision", "rbf", {"bw": 0.7}, "rbf"),
    ("decision_marginal", "tanh_decision", {"c": -0.1, "s": 1.0}, "rbf"),
    ("group", "rbf", {"bw": 0.7}, "delta"),
    ("group", "rbf", {"bw": 0.7}, "rbf"),
    ("distribution", "rbf", {"bw": 0.7}, "rbf"),
    ("individual", "rbf", {"bw": 0.7}, "rbf"),
    ("individual", "tanh_decision", {"c": 0.0, "s": 1.0}, "rbf"),
    ("local", "rbf", {"bw": 0.7}, "rbf"),
]


def _call_kwargs(form, kernel_y, p, kernel_z, bw_z):
    kw = dict(
        form=form,
        kernel_y=kernel_y,
        kernel_z=kernel_z,
        bandwidth_z=bw_z,
        features=[0, 2],
        threshold=p.get("c", 0.0),
        scale=p.get("s", 1.0),
    )
    if "bw" in p:
        kw["bandwidth_y"] = p["bw"]
    if "upper" in p:
        kw["upper"], kw["lower"] = p["upper"], p["lower"]
    if form == "threshold":
        kw["y0"], kw["alpha"] = 0.1, 0.5
    return kw


@pytest.mark.parametrize("pairing", ["index", "cross"])
@pytest.mark.parametrize("form,kernel_y,p,kernel_z", REG_CASES)
def test_regression_forms_match_naive_loops(form, kernel_y, p, kernel_z, pairing):
    mean, std, y, x, eps, groups = _reg_inputs(seed=_case_seed(form, kernel_y, kernel_z))
    bw_z = 1.3
    kw = _call_kwargs(form, kernel_y, p, kernel_z, bw_z)
    val = regression_mmd((mean, std), y, x, eps=eps, groups=groups, pairing=pairing, **kw)
    ky = _scalar_kernel(
        kernel_y,
        bw=p.get("bw", 1.0),
        c=p.get("c", 0.0),
        s=p.get("s", 1.0),
        upper=p.get("upper"),
        lower=p.get("lower", 0.0),
    )
    ref = ref_regression(
        mean.numpy(),
        std.numpy(),
        y.numpy(),
        x.numpy(),
        eps.numpy(),
        form,
        ky,
        _vector_kernel(kernel_z, bw_z),
        pairing,
        features=[0, 2],
        groups=groups.numpy(),
        c=p.get("c", 0.0),
        y0=0.1 if form == "threshold" else None,
    )
    _rel_close(val, ref)


def test_threshold_and_decision_conditioning_take_both_values():
    # guard against the conditioning tests above being vacuous (a single level everywhere)
    mean, std, y, x, eps, groups = _reg_inputs(seed=_case_seed("threshold", "rbf", "delta"))
    ev = torch.special.ndtr((0.1 - mean) / std) <= 0.5
    assert 0 < int(ev.sum()) < len(mean)
    assert 0 < int((mean > 0.2).sum()) < len(mean)


@pytest.mark.parametrize("form", ["marginal", "individual"])
@pytest.mark.parametrize("kname", ["rbf", "point_estimate"])
def test_analytic_pairing_matches_closed_form_loops(form, kname):
    mean, std, y, x, eps, _ = _reg_inputs(seed=11)
    val = regression_mmd(
        (mean, std), y, x, form=form, kernel_y=kname, bandwidth_y=0.6, bandwidth_z=1.7, pairing="analytic"
    )
    ref = ref_regression_analytic(mean.numpy(), std.numpy(), y.numpy(), x.numpy(), kname, 0.6, 1.7, form)
    _rel_close(val, ref)


def test_analytic_pairing_is_expectation_of_sampled_estimators():
    mean, std, y, x, _, _ = _reg_inputs(n=12, seed=5)
    g = torch.Generator().manual_seed(0)
    reps = 1500
    eps = torch.randn(reps, 4, 12, generator=g, dtype=DT)
    kw = dict(form="individual", bandwidth_y=0.5, bandwidth_z=2.0)
    target = float(regression_mmd((mean, std), y, x, pairing="analytic", **kw))
    for pairing in ["index", "cross"]:
        vals = vmap(lambda e, pr=pairing: regression_mmd((mean, std), y, x, eps=e, pairing=pr, **kw))(eps)
        se = float(vals.std() / math.sqrt(reps))
        assert abs(float(vals.mean()) - target) < 3 * se, (pairing, float(vals.mean()), target, se)


def test_fast_index_path_equals_generic_values_and_gradients():
    mean, std, y, x, eps, _ = _reg_inputs(n=9, m=4, seed=3)
    for form, kz in [("individual", K.rbf(x, x, 1.5)), ("marginal", None)]:
        m_ = mean.clone().requires_grad_()
        s_ = std.clone().requires_grad_()
        fast = regression_mmd((m_, s_), y, x, form=form, bandwidth_y=0.4, bandwidth_z=1.5, eps=eps)
        g_fast = torch.autograd.grad(fast, [m_, s_])
        gen = mmd.sample_mmd2(
            (m_ + s_ * eps).unsqueeze(-1),
            y.reshape(1, -1, 1),
            K.get_kernel("rbf", bandwidth=0.4),
            kz,
            "index",
        )
        g_gen = torch.autograd.grad(gen, [m_, s_])
        _rel_close(fast.detach(), float(gen.detach()), rtol=1e-10)
        for a, b in zip(g_fast, g_gen, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-14)
        with torch.no_grad():
            _rel_close(
                regression_mmd((mean, std), y, x, form=form, bandwidth_y=0.4, bandwidth_z=1.5, eps=eps),
                float(gen),
                rtol=1e-10,
            )
    # gradcheck of the fused paths (first order)
    m_ = mean.clone().requires_grad_()
    s_ = std.clone().requires_grad_()
    for pairing in ("index", "analytic"):
        assert torch.autograd.gradcheck(
            lambda a, b, pr=pairing: regression_mmd(
                (a, b), y, x, bandwidth_y=0.4, bandwidth_z=1.5, eps=eps, pairing=pr
            ),
            (m_, s_),
        )


@pytest.mark.parametrize("form", ["individual", "marginal", "group"])
def test_fused_analytic_path_equals_autograd_formulation(form):
    mean, std, y, x, _, groups = _reg_inputs(n=11, seed=12)
    kw = dict(form=form, bandwidth_y=0.6, bandwidth_z=1.4, pairing="analytic", groups=groups)
    m_, s_ = mean.clone().requires_grad_(), std.clone().requires_grad_()
    fused = regression_mmd((m_, s_), y, x, **kw)
    g_fused = torch.autograd.grad(fused, [m_, s_])
    y_req = y.clone().requires_grad_()  # a label that needs a gradient forces the autograd formulation
    plain = regression_mmd((m_, s_), y_req, x, **kw)
    g_plain = torch.autograd.grad(plain, [m_, s_])
    _rel_close(fused, float(plain.detach()), rtol=1e-10)
    for a, b in zip(g_fused, g_plain, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-14)


def test_vmap_over_noise_matches_loop_and_generator_reproducible():
    mean, std, y, x, _, _ = _reg_inputs(n=8, seed=4)
    eps = torch.randn(5, 3, 8, generator=torch.Generator().manual_seed(1), dtype=DT)
    batched = vmap(lambda e: regression_mmd((mean, std), y, x, eps=e, bandwidth_z=2.0))(eps)
    looped = torch.stack([regression_mmd((mean, std), y, x, eps=e, bandwidth_z=2.0) for e in eps])
    np.testing.assert_allclose(batched.numpy(), looped.numpy(), rtol=1e-10)
    # torch.func.grad (functional autograd) agrees with eager autograd
    g_func = torch.func.grad(lambda mm: regression_mmd((mm, std), y, x, eps=eps[0], bandwidth_z=2.0))(mean)
    m_ = mean.clone().requires_grad_()
    (g_eager,) = torch.autograd.grad(regression_mmd((m_, std), y, x, eps=eps[0], bandwidth_z=2.0), m_)
    np.testing.assert_allclose(g_func.numpy(), g_eager.numpy(), rtol=1e-9, atol=1e-14)
    a = regression_mmd((mean, std), y, x, num_samples=6, generator=torch.Generator().manual_seed(7))
    b = regression_mmd((mean, std), y, x, num_samples=6, generator=torch.Generator().manual_seed(7))
    assert float(a) == float(b)


# ----------------------------------------------------------------------------------------------------
# unbiasedness under a perfect forecaster, and detection of miscalibration
# ----------------------------------------------------------------------------------------------------
def _simulate(reps, n, m, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(reps, n, 2, generator=g, dtype=DT)
    mu = torch.sin(1.5 * x[..., 0]) + 0.5 * x[..., 1]
    s = 0.3 + 0.4 * torch.sigmoid(2.0 * x[..., 1])
    y = mu + s * torch.randn(reps, n, generator=g, dtype=DT)
    eps = torch.randn(reps, m, n, generator=g, dtype=DT)
    groups = (x[..., 0] > 0).to(DT)
    return x, mu, s, y, eps, groups


UNBIASED_CASES = [
    ("quantile", dict(kernel_y="rbf", bandwidth_y=0.1)),
    ("threshold", dict(kernel_y="rbf", bandwidth_y=0.1, kernel_z="delta", y0=0.0)),
    ("marginal", dict(kernel_y="rbf", bandwidth_y=1.0)),
    ("decision", dict(kernel_y="tanh_decision", threshold=0.0, kernel_z="delta")),
    ("group", dict(kernel_y="rbf", bandwidth_y=1.0, kernel_z="delta")),
    ("distribution", dict(kernel_y="rbf", bandwidth_y=1.0, bandwidth_z=0.5)),
    ("individual", dict(kernel_y="rbf", bandwidth_y=1.0, bandwidth_z=2.0)),
    ("individual", dict(kernel_y="rbf", bandwidth_y=1.0, bandwidth_z=2.0, pairing="cross")),
    ("individual", dict(kernel_y="rbf", bandwidth_y=1.0, bandwidth_z=2.0, pairing="analytic")),
    ("individual", dict(kernel_y="point_estimate", bandwidth_z=2.0)),
    ("local", dict(kernel_y="rbf", bandwidth_y=1.0, features=[1], bandwidth_z=0.5)),
]


@pytest.mark.parametrize("form,kw", UNBIASED_CASES)
def test_regression_unbiased_and_detects_miscalibration(form, kw):
    reps, n, m = 200, 64, 3
    x, mu, s, y, eps, groups = _simulate(reps, n, m, seed=len(form) + 7 * len(kw))

    def run(mean, std):
        f = vmap(
            lambda a, b, yy, xx, e, gr: regression_mmd((a, b), yy, xx, form=form, eps=e, groups=gr, **kw)
        )
        v = f(mean, std, y, x, eps, groups)
        return float(v.mean()), float(v.std() / math.sqrt(reps))

    m0, se0 = run(mu, s)
    assert abs(m0) < 3 * se0, (m0, se0)
    if form in ("decision", "decision_marginal") or kw.get("kernel_y") == "point_estimate":
        bad = [(mu + 0.5, s), (mu - 0.5, s)]  # these kernels see moments / sides of c, not the spread
    else:
        bad = [(mu, 2.0 * s), (mu, 0.5 * s)]
    for mean_b, std_b in bad:
        m1, se1 = run(mean_b, std_b)
        assert m1 - 3 * se1 > m0 + 3 * se0, (form, m0, m1, se1)


# ----------------------------------------------------------------------------------------------------
# gradients
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pairing", ["index", "cross"])
@pytest.mark.parametrize("form,kernel_y,p,kernel_z", REG_CASES)
def test_regression_gradients_finite_nonzero(form, kernel_y, p, kernel_z, pairing):
    mean, std, y, x, eps, groups = _reg_inputs(n=10, seed=21)
    mean.requires_grad_()
    std.requires_grad_()
    kw = _call_kwargs(form, kernel_y, p, kernel_z, 1.3)
    val = regression_mmd((mean, std), y, x, eps=eps, groups=groups, pairing=pairing, **kw)
    gm, gs = torch.autograd.grad(val, [mean, std])
    for gr in (gm, gs):
        assert torch.isfinite(gr).all() and gr.abs().sum() > 0


def test_regression_float32_runs_and_backprops():
    mean, std, y, x, eps, _ = _reg_inputs(n=32, seed=8)
    mean = mean.float().requires_grad_()
    val = regression_mmd((mean, std.float()), y.float(), x.float(), eps=eps.float(), bandwidth_z=3.0)
    assert val.dtype == torch.float32
    (gm,) = torch.autograd.grad(val, mean)
    assert torch.isfinite(gm).all()


# ----------------------------------------------------------------------------------------------------
# classification
# ----------------------------------------------------------------------------------------------------
def ref_classification(probs, labels, x, form, bw_y, bw_z, kernel_y="rbf", reduction="sum"):
    n, m = probs.shape

    def class_k(a, b, size):
        if kernel_y == "delta":
            return 1.0 if a == b else 0.0
        return 1.0 if a == b else math.exp(-2.0 / bw_y)

    kz = _vector_kernel("rbf", bw_z)

    def ustat(q, lab, z, size):
        # q: list of per-example pmfs over `size` values, lab: labels, z: conditioning vectors
        total = 0.0
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                tt = class_k(lab[i], lab[j], size)
                ff = 0.0
                for c in range(size):
                    for d in range(size):
                        ff += q[i][c] * q[j][d] * class_k(c, d, size)
                tf = 0.0
                for c in range(size):
                    tf += q[i][c] * class_k(c, lab[j], size)
                ft = 0.0
                for c in range(size):
                    ft += q[j][c] * class_k(c, lab[i], size)
                total += (tt + ff - tf - ft) * kz(z[i], z[j])
        return total / (n * (n - 1))

    if form == "individual":
        return ustat(probs, labels, x, m)
    if form == "canonical":
        return ustat(probs, labels, probs, m)
    if form == "top_label":
        top = [int(np.argmax(probs[i])) for i in range(n)]
        conf = [probs[i][top[i]] for i in range(n)]
        return ustat(
            [[1 - conf[i], conf[i]] for i in range(n)],
            [int(labels[i] == top[i]) for i in range(n)],
            [[conf[i]] for i in range(n)],
            2,
        )
    if form == "marginal":
        vals = []
        for c in range(m):
            vals.append(
                ustat(
                    [[1 - probs[i][c], probs[i][c]] for i in range(n)],
                    [int(labels[i] == c) for i in range(n)],
                    [[probs[i][c]] for i in range(n)],
                    2,
                )
            )
        return sum(vals) if reduction == "sum" else sum(vals) / m
    raise AssertionError(form)


def _cls_inputs(n=7, m=3, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = 1.5 * torch.randn(n, m, generator=g, dtype=DT)
    labels = torch.randint(0, m, (n,), generator=g)
    x = torch.randn(n, d, generator=g, dtype=DT)
    return logits, labels, x


CLS_CASES = [
    ("individual", "rbf", "sum"),
    ("individual", "delta", "sum"),
    ("canonical", "rbf", "sum"),
    ("top_label", "rbf", "sum"),
    ("top_label", "delta", "sum"),
    ("marginal", "rbf", "sum"),
    ("marginal", "rbf", "mean"),
]


@pytest.mark.parametrize("form,kernel_y,reduction", CLS_CASES)
def test_classification_forms_match_naive_loops(form, kernel_y, reduction):
    logits, labels, x = _cls_inputs(seed=len(form))
    probs = torch.softmax(logits, -1)
    val = classification_mmd(
        probs, labels, x, form=form, bandwidth_y=0.8, bandwidth_z=0.5, kernel_y=kernel_y, reduction=reduction
    )
    ref = ref_classification(probs.numpy(), labels.numpy(), x.numpy(), form, 0.8, 0.5, kernel_y, reduction)
    _rel_close(val, ref)


def _sampled_classification(probs, labels, x, form, yhat, bw_y, bw_z):
    """Plain U-statistic with sampled labels yhat (R, n): one-hot kernels, batched over R draws."""
    m = probs.shape[1]
    if form in ("individual", "canonical"):
        kc = K.class_rbf(m, bw_y, dtype=DT)
        kz = K.rbf(x, x, bw_z) if form == "individual" else K.rbf(probs, probs, bw_z)
        k_tt = kc[labels][:, labels] * kz
        k_ff = kc[yhat.unsqueeze(-1), yhat.unsqueeze(-2)] * kz
        k_tf = kc[labels.unsqueeze(-1), yhat.unsqueeze(-2)] * kz
        return mmd2_unbiased(k_tt.expand_as(k_ff), k_tf, k_ff)
    k2 = K.class_rbf(2, bw_y, dtype=DT)
    conf, top = probs.max(-1)
    if form == "top_label":
        b_t, b_f, z = (labels == top).long(), (yhat == top).long(), conf
    else:  # marginal: batch over classes c as well -> (m, R, n)
        cls = torch.arange(m).reshape(m, 1, 1)
        b_t = (labels == cls[:, 0]).long()  # (m, n)
        b_f = (yhat.unsqueeze(0) == cls).long()  # (m, R, n)
        z = probs.T.unsqueeze(1)  # (m, 1, n)
        kz = K.rbf(z.unsqueeze(-1), z.unsqueeze(-1), bw_z)  # (m, 1, n, n)
        k_tt = k2[b_t.unsqueeze(-1), b_t.unsqueeze(-2)].unsqueeze(1) * kz
        k_ff = k2[b_f.unsqueeze(-1), b_f.unsqueeze(-2)] * kz
        k_tf = k2[b_t.unsqueeze(1).unsqueeze(-1), b_f.unsqueeze(-2)] * kz
        return mmd2_unbiased(k_tt.expand_as(k_ff), k_tf, k_ff).sum(0)
    kz = K.rbf(z, z, bw_z)
    k_tt = k2[b_t][:, b_t] * kz
    k_ff = k2[b_f.unsqueeze(-1), b_f.unsqueeze(-2)] * kz
    k_tf = k2[b_t.unsqueeze(-1), b_f.unsqueeze(-2)] * kz
    return mmd2_unbiased(k_tt.expand_as(k_ff), k_tf, k_ff)


@pytest.mark.parametrize("form", ["individual", "canonical", "top_label", "marginal"])
def test_classification_analytic_equals_sampled_in_expectation(form):
    logits, labels, x = _cls_inputs(n=10, m=3, seed=3)
    probs = torch.softmax(logits, -1)
    reps = 4000
    g = torch.Generator().manual_seed(1)
    yhat = torch.multinomial(probs, reps, replacement=True, generator=g).T  # (R, n), yhat[r, i] ~ q_i
    sampled = _sampled_classification(probs, labels, x, form, yhat, 0.8, 0.5)
    analytic = float(classification_mmd(probs, labels, x, form=form, bandwidth_y=0.8, bandwidth_z=0.5))
    se = float(sampled.std() / math.sqrt(reps))
    assert abs(float(sampled.mean()) - analytic) < 3 * se, (float(sampled.mean()), analytic, se)


@pytest.mark.parametrize("form", ["individual", "canonical", "top_label", "marginal"])
def test_classification_unbiased_for_true_forecast_and_detects_overconfidence(form):
    reps, n, m = 300, 48, 3
    g = torch.Generator().manual_seed(17)
    x = torch.randn(reps, n, 2, generator=g, dtype=DT)
    w = torch.tensor([[1.0, -1.0, 0.0], [0.5, 0.5, -1.0]], dtype=DT)
    probs = torch.softmax(x @ w, -1)  # the true conditional pmf
    labels = torch.multinomial(probs.reshape(-1, m), 1, generator=g).reshape(reps, n)
    over = torch.softmax(3.0 * (x @ w), -1)  # overconfident forecast of the same labels

    def run(q):
        f = vmap(
            lambda pq, lab, xx: classification_mmd(pq, lab, xx, form=form, bandwidth_y=1.0, bandwidth_z=1.0)
        )
        v = f(q, labels, x)
        return float(v.mean()), float(v.std() / math.sqrt(reps))

    m0, se0 = run(probs)
    assert abs(m0) < 3 * se0, (m0, se0)
    m1, se1 = run(over)
    assert m1 - 3 * se1 > m0 + 3 * se0, (m0, m1)


@pytest.mark.parametrize("form", ["individual", "canonical", "top_label", "marginal"])
def test_classification_gradients_wrt_logits(form):
    logits, labels, x = _cls_inputs(n=12, m=4, seed=9)
    logits.requires_grad_()
    val = classification_mmd(
        torch.softmax(logits, -1), labels, x, form=form, bandwidth_y=0.8, bandwidth_z=0.5
    )
    (gl,) = torch.autograd.grad(val, logits)
    assert torch.isfinite(gl).all() and gl.abs().sum() > 0


def test_kce_is_individual_form_with_authors_formula():
    # the authors' ClassificationKernelLoss (HEAD): mean_no_diag(P) - 2 mean_no_diag(C) + mean_no_diag(T)
    logits, labels, x = _cls_inputs(n=9, m=3, seed=2)
    q = torch.softmax(logits, -1)
    kx = K.rbf(x, x, 10.0)
    kyy = K.rbf(torch.eye(3, dtype=DT), torch.eye(3, dtype=DT), 0.1)
    p = torch.einsum("ic,jd,cd->ij", q, q, kyy) * kx
    c = torch.einsum("ic,jc->ij", q, kyy[:, labels].T) * kx
    t = kyy[labels][:, labels] * kx
    n = 9
    off = 1 - torch.eye(n, dtype=DT)
    ref = ((p * off).sum() - 2 * (c * off).sum() + (t * off).sum()) / (n * (n - 1))
    _rel_close(classification_mmd(q, labels, x, bandwidth_z=10.0, bandwidth_y=0.1), float(ref))


# ----------------------------------------------------------------------------------------------------
# edge cases and validation
# ----------------------------------------------------------------------------------------------------
def test_mmd2_unbiased_batch_and_small_n():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(3, 4, 4, generator=g, dtype=DT)
    out = mmd2_unbiased(a, a * 0.5, a * 0.25)
    assert out.shape == (3,)
    for b in range(3):
        ref = 0.0
        for i in range(4):
            for j in range(4):
                if i != j:
                    ref += a[b, i, j] + 0.25 * a[b, i, j] - 0.5 * a[b, i, j] - 0.5 * a[b, j, i]
        _rel_close(out[b], float(ref) / 12)
    with pytest.raises(ValueError, match="n=2"):
        mmd2_unbiased(torch.ones(1, 1), torch.ones(1, 1), torch.ones(1, 1))


def test_small_batches_constant_targets_and_errors():
    mean, std, y, x, eps, groups = _reg_inputs(n=2, seed=1)
    for form in mmd.REGRESSION_FORMS:
        v = regression_mmd((mean, std), y, x, form=form, eps=eps, groups=groups, features=[0])
        assert torch.isfinite(v)
    with pytest.raises(ValueError, match="n=2"):
        regression_mmd((mean[:1], std[:1]), y[:1], x[:1])
    logits, labels, xc = _cls_inputs(n=2, seed=1)
    for form in mmd.CLASSIFICATION_FORMS:
        assert torch.isfinite(classification_mmd(torch.softmax(logits, -1), labels, xc, form=form))
    with pytest.raises(ValueError, match="n=2"):
        classification_mmd(torch.softmax(logits, -1)[:1], labels[:1], xc[:1])
    # constant targets: finite values and gradients
    mean, std, y, x, eps, groups = _reg_inputs(n=6, seed=2)
    mean.requires_grad_()
    for form in mmd.REGRESSION_FORMS:
        v = regression_mmd(
            (mean, std), torch.zeros(6, dtype=DT), x, form=form, eps=eps, groups=groups, features=[1]
        )
        (gm,) = torch.autograd.grad(v, mean)
        assert torch.isfinite(v) and torch.isfinite(gm).all()
    v = classification_mmd(torch.softmax(logits, -1), torch.zeros(2, dtype=torch.long), xc, form="canonical")
    assert torch.isfinite(v)
    # probabilities with exact zeros
    q = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.2, 0.8, 0.0]], dtype=DT)
    for form in mmd.CLASSIFICATION_FORMS:
        assert torch.isfinite(
            classification_mmd(q, torch.tensor([0, 1, 2]), torch.randn(3, 2, dtype=DT), form=form)
        )


def test_validation_messages():
    mean, std, y, x, eps, groups = _reg_inputs(n=5, seed=1)
    with pytest.raises(ValueError, match="valid names") as err:
        regression_mmd((mean, std), y, x, form="indivdual")
    assert "individual" in str(err.value) and "quantile" in str(err.value)
    with pytest.raises(ValueError, match="valid names") as err:
        classification_mmd(
            torch.softmax(torch.randn(5, 3), -1), torch.zeros(5, dtype=torch.long), form="canon"
        )
    assert "canonical" in str(err.value) and "top_label" in str(err.value)
    with pytest.raises(ValueError, match="valid names") as err:
        regression_mmd((mean, std), y, x, kernel_y="gauss")
    assert "rbf" in str(err.value)
    with pytest.raises(ValueError, match="valid names"):
        regression_mmd((mean, std), y, x, kernel_z="nope")
    with pytest.raises(ValueError, match="pairing"):
        regression_mmd((mean, std), y, x, pairing="diagonal")
    for bad in [0.0, -1.0, float("nan")]:
        with pytest.raises(ValueError, match="bandwidth_y"):
            regression_mmd((mean, std), y, x, bandwidth_y=bad)
        with pytest.raises(ValueError, match="bandwidth_z"):
            regression_mmd((mean, std), y, x, bandwidth_z=bad)
        with pytest.raises(ValueError, match="bandwidth_y"):
            classification_mmd(
                torch.softmax(torch.randn(5, 3), -1), torch.zeros(5, dtype=torch.long), x, bandwidth_y=bad
            )
    with pytest.raises(ValueError, match="upper"):
        regression_mmd((mean, std), y, x, kernel_y="threshold_family")
    with pytest.raises(ValueError, match="pass x"):
        regression_mmd((mean, std), y, None, form="individual")
    with pytest.raises(ValueError, match="groups"):
        regression_mmd((mean, std), y, x, form="group")
    with pytest.raises(ValueError, match="features"):
        regression_mmd((mean, std), y, x, form="local")
    with pytest.raises(ValueError, match="analytic"):
        regression_mmd((mean, std), y, x, form="quantile", pairing="analytic")
    with pytest.raises(ValueError, match="eps"):
        regression_mmd((mean, std), y, x, eps=torch.randn(3, 4, dtype=DT))
    with pytest.raises(ValueError, match="num_samples"):
        regression_mmd((mean, std), y, x, num_samples=0)
    with pytest.raises(ValueError, match="labels"):
        classification_mmd(torch.softmax(torch.randn(5, 3), -1), torch.full((5,), 3), x)
    # presets are discoverable and complete (paper Tables 1 and 2)
    assert {
        "quantile",
        "threshold",
        "marginal",
        "decision",
        "group",
        "distribution",
        "individual",
        "local",
    } <= set(mmd.REGRESSION_FORMS)
    assert {"canonical", "top_label", "marginal", "individual"} <= set(mmd.CLASSIFICATION_FORMS)
    assert mmd.get_regression_form("quantile").forecast == "pit"
