"""Tests for kcal.baselines (MMCE, ECE-KDE) against explicit-loop references."""

import math

import numpy as np
import pytest
import torch

from kcal.baselines import (
    AUTHORS_BANDWIDTH_GRID,
    default_bandwidth_grid,
    dirichlet_log_kernel,
    ece_kde,
    ece_kde_stacked,
    logsumexp_truncated,
    loo_log_likelihood,
    mmce,
    mmce_stacked,
    select_bandwidth,
    select_bandwidths,
)

DT = torch.float64


def _rel_close(value, ref, rtol=1e-6, atol=1e-12):
    value = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
    assert abs(value - ref) <= rtol * abs(ref) + atol, (value, ref)


def _inputs(n=9, m=3, seed=0, scale=1.5):
    g = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(n, m, generator=g, dtype=DT)
    labels = torch.randint(0, m, (n,), generator=g)
    return logits, labels


# ----------------------------------------------------------------------------------------------------
# MMCE
# ----------------------------------------------------------------------------------------------------
def ref_mmce(probs, labels, bw, weighted=True):
    n = len(labels)
    conf = [max(probs[i]) for i in range(n)]
    correct = [int(np.argmax(probs[i])) == int(labels[i]) for i in range(n)]

    def k(a, b):
        return math.exp(-abs(a - b) / bw)

    if not weighted:
        tot = 0.0
        for i in range(n):
            for j in range(n):
                tot += (correct[i] - conf[i]) * (correct[j] - conf[j]) * k(conf[i], conf[j])
        return math.sqrt(max(tot / n**2, 0.0) + 1e-10)
    cs = [i for i in range(n) if correct[i]]
    ws = [i for i in range(n) if not correct[i]]
    m_c, m_w = len(cs), len(ws)
    if m_c == 0 or m_w == 0:
        return 0.0
    cc = ii = ci = 0.0
    for i in cs:
        for j in cs:
            cc += (1 - conf[i]) * (1 - conf[j]) * k(conf[i], conf[j])
    for i in ws:
        for j in ws:
            ii += conf[i] * conf[j] * k(conf[i], conf[j])
    for i in cs:
        for j in ws:
            ci += (1 - conf[i]) * conf[j] * k(conf[i], conf[j])
    cc, ii, ci = cc / (m_c * m_c), ii / (m_w * m_w), ci / (m_c * m_w)  # torch.mean over the pair matrix
    v = cc / (m_c * m_c + 1e-5) + ii / (m_w * m_w + 1e-5) - 2.0 * ci / (m_c * m_w + 1e-5)
    return math.sqrt(max(v, 0.0) + 1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("bw", [0.4, 0.1])
def test_mmce_matches_loops(seed, weighted, bw):
    logits, labels = _inputs(n=11, m=4, seed=seed)
    probs = torch.softmax(logits, -1)
    acc = (probs.argmax(-1) == labels).double().mean()
    assert 0 < acc < 1
    _rel_close(
        mmce(probs, labels, bandwidth=bw, weighted=weighted, scaling="authors"),
        ref_mmce(probs.numpy(), labels.numpy(), bw, weighted),
    )


def test_mmce_degenerate_batches_and_zeros():
    probs = torch.tensor([[0.7, 0.3, 0.0], [0.1, 0.9, 0.0], [1.0, 0.0, 0.0]], dtype=DT, requires_grad=True)
    for labels in (torch.tensor([0, 1, 0]), torch.tensor([1, 0, 2])):  # all correct / all wrong
        v = mmce(probs, labels)
        (gp,) = torch.autograd.grad(v, probs)
        assert float(v.detach()) == 0.0 and torch.isfinite(gp).all() and gp.abs().sum() == 0
    v = mmce(
        probs, torch.tensor([0, 0, 0]), scaling="authors"
    )  # mixed, with exact zeros in the probabilities
    (gp,) = torch.autograd.grad(v, probs)
    assert torch.isfinite(v) and torch.isfinite(gp).all()
    _rel_close(v, ref_mmce(probs.detach().numpy(), [0, 0, 0], 0.4))
    assert float(mmce(probs.detach()[:1], torch.tensor([0]))) == 0.0  # a single example is all-correct
    with pytest.raises(ValueError, match="bandwidth"):
        mmce(probs, torch.tensor([0, 0, 0]), bandwidth=0.0)


def ref_mmce_kumar(probs, labels, bw):
    """Weighted MMCE of Kumar, Sarawagi & Jain (2018), written out: with D_c the correct and D_w the wrong
    examples, m = |D_c|, MMCE_w^2 = sum_{i,j in D_c} (1-r_i)(1-r_j) k_ij / m^2
    + sum_{i,j in D_w} r_i r_j k_ij / (N-m)^2 - 2 sum_{i in D_c, j in D_w} (1-r_i) r_j k_ij / (m (N-m))."""
    n = len(labels)
    r = [max(probs[i]) for i in range(n)]
    c = [int(np.argmax(probs[i])) == int(labels[i]) for i in range(n)]
    m = sum(c)
    total = 0.0
    for i in range(n):
        for j in range(n):
            k = math.exp(-abs(r[i] - r[j]) / bw)
            if c[i] and c[j]:
                total += (1 - r[i]) * (1 - r[j]) * k / m**2
            elif not c[i] and not c[j]:
                total += r[i] * r[j] * k / (n - m) ** 2
            elif c[i]:
                total -= 2 * (1 - r[i]) * r[j] * k / (m * (n - m))
    return math.sqrt(max(total, 0.0))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [11, 40])
def test_mmce_default_is_kumar_et_al_formula(seed, n):
    logits, labels = _inputs(n=n, m=4, seed=seed)
    probs = torch.softmax(logits, -1)
    ref = ref_mmce_kumar(probs.numpy(), labels.numpy(), 0.4)
    value = float(mmce(probs, labels))
    assert abs(value - ref) <= 1e-6 * ref + 1e-9, (value, ref)  # +1e-10 under the sqrt only
    authors = float(mmce(probs, labels, scaling="authors"))
    assert abs(authors - value) > 1e-6  # the authors' extra 1/m^2 gives another number


def test_mmce_inputs_numpy_logits_and_bad_scaling():
    logits, labels = _inputs(n=12, m=3, seed=5)
    probs = torch.softmax(logits, -1)
    assert float(mmce(probs.numpy(), labels.numpy())) == float(mmce(probs, labels))
    assert float(ece_kde(probs.numpy(), labels.numpy())) == float(ece_kde(probs, labels))
    with pytest.raises(ValueError, match="softmax"):
        mmce(logits, labels)
    with pytest.raises(ValueError, match="softmax"):
        ece_kde(logits, labels)
    with pytest.raises(ValueError, match="kumar"):
        mmce(probs, labels, scaling="paper")


def test_mmce_gradient_wrt_logits():
    logits, labels = _inputs(n=16, m=3, seed=4)
    logits.requires_grad_()
    for weighted in (True, False):
        (gl,) = torch.autograd.grad(mmce(torch.softmax(logits, -1), labels, weighted=weighted), logits)
        assert torch.isfinite(gl).all() and gl.abs().sum() > 0


# ----------------------------------------------------------------------------------------------------
# ECE-KDE
# ----------------------------------------------------------------------------------------------------
def _ref_log_dir(f_i, f_j, h):
    alpha = [f_j[c] / h + 1.0 for c in range(len(f_j))]
    log_b = sum(math.lgamma(a) for a in alpha) - math.lgamma(sum(alpha))
    return sum((alpha[c] - 1.0) * math.log(f_i[c]) for c in range(len(f_i))) - log_b


def ref_ece_kde(probs, labels, h, p, authors=False):
    """ECE-KDE as loops. ``authors``: their arithmetic, K_ij = exp(log Dir) (0 where it underflows, below about
    -745 in float64) and r = num / max(den, 1e-10); otherwise the ratio of the exact kernel sums."""
    n, m = probs.shape
    tot = 0.0
    for i in range(n):
        num = [0.0] * m
        den = 0.0
        for j in range(n):
            if j == i:
                continue
            lk = _ref_log_dir(probs[i], probs[j], h)
            kij = 0.0 if authors and lk < -745 else math.exp(lk)
            den += kij
            num[int(labels[j])] += kij
        for c in range(m):
            tot += abs(num[c] / (max(den, 1e-10) if authors else den) - probs[i][c]) ** p
    return tot / n


def ref_loo(probs, h, authors):
    n = len(probs)
    ll = 0.0
    for i in range(n):
        s = 0.0
        for j in range(n):
            if j != i:
                s += math.exp(_ref_log_dir(probs[i], probs[j], h))
        ll += math.log(s) - (math.log((n - 1) * h) if authors else math.log(n - 1))
    return ll


def test_default_grid_is_authors_exponent_reading():
    g = default_bandwidth_grid()
    assert g.shape == (20,) and len(AUTHORS_BANDWIDTH_GRID) == 20
    np.testing.assert_allclose(g[:15].numpy(), 10.0 ** np.linspace(-5, -1, 15), rtol=1e-12)
    np.testing.assert_allclose(g[15:].numpy(), [0.2, 0.4, 0.6, 0.8, 1.0], rtol=1e-12)


def test_dirichlet_log_kernel_matches_loops():
    logits, _ = _inputs(n=6, m=3, seed=1)
    probs = torch.softmax(logits, -1)
    lk = dirichlet_log_kernel(probs, 0.2)
    for i in range(6):
        for j in range(6):
            if i == j:
                assert lk[i, j] == float("-inf")
            else:
                _rel_close(lk[i, j], _ref_log_dir(probs[i].numpy(), probs[j].numpy(), 0.2))
    # batched over candidate bandwidths: a (2, n, n) product and lgamma over (2, n, m) instead of (n, n) and
    # (n, m), so the CPU's kernels may round otherwise (an AVX-512 Xeon differs in the last bits). Each
    # float64 entry (below 35 in size here) sums m = 3 products and m + 1 lgamma values: a few ulps of 35
    # are ~1e-14, so 1e-12 holds on any CPU, while a wrong bandwidth moves the entries by O(1).
    lk2 = dirichlet_log_kernel(probs, torch.tensor([0.2, 0.5], dtype=DT))
    torch.testing.assert_close(lk2[0], lk, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lk2[1], dirichlet_log_kernel(probs, 0.5), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("h", [0.1, 0.5])
@pytest.mark.parametrize("seed", [0, 1])
def test_ece_kde_fixed_bandwidth_matches_loops(p, h, seed):
    logits, labels = _inputs(n=10, m=3, seed=seed, scale=1.0)
    probs = torch.softmax(logits, -1)
    _rel_close(ece_kde(probs, labels, p=p, bandwidth=h), ref_ece_kde(probs.numpy(), labels.numpy(), h, p))


def test_bandwidth_selection_matches_loops():
    grid = [0.02, 0.05, 0.1, 0.3, 1.0]
    for seed in range(3):
        logits, labels = _inputs(n=12, m=3, seed=seed, scale=2.0)
        probs = torch.softmax(logits, -1)
        for authors in (False, True):
            ll = loo_log_likelihood(probs, grid, authors=authors)
            ref = [ref_loo(probs.numpy(), h, authors) for h in grid]
            np.testing.assert_allclose(ll.numpy(), ref, rtol=1e-6)
        ref_default = grid[int(np.argmax([ref_loo(probs.numpy(), h, False) for h in grid]))]
        assert select_bandwidth(probs, grid) == pytest.approx(ref_default)
        lls = [ref_loo(probs.numpy(), h, True) for h in grid]
        ref_auth = grid[int(np.argmax(lls))] if max(lls) > 0 else 1e-5
        assert select_bandwidth(probs, grid, fallback="authors") == pytest.approx(ref_auth)
        # ece_kde with bandwidth=None uses the selected bandwidth
        _rel_close(
            ece_kde(probs, labels, bandwidth_grid=grid),
            ref_ece_kde(probs.numpy(), labels.numpy(), ref_default, 1),
        )


def test_authors_fallback_when_no_candidate_is_positive():
    # small bandwidths on spread-out forecasts: peaked kernels far apart, every candidate's LOO
    # log-likelihood is negative, so the authors' selector falls back to 1e-5
    logits, labels = _inputs(n=8, m=3, seed=2, scale=1.0)
    probs = torch.softmax(logits, -1)
    grid = [1e-4, 1e-3, 1e-2]
    lls = loo_log_likelihood(probs, grid, authors=True)
    assert bool((lls <= 0).all())
    assert select_bandwidth(probs, grid, fallback="authors") == 1e-5
    assert select_bandwidth(probs, grid) in grid
    # default authors' grid on typical probabilities accepts some candidate
    logits, _ = _inputs(n=32, m=3, seed=3, scale=3.0)
    chosen = select_bandwidth(torch.softmax(logits, -1), fallback="authors")
    assert min(abs(chosen - h) / h for h in AUTHORS_BANDWIDTH_GRID) < 1e-9
    with pytest.raises(ValueError, match="fallback"):
        select_bandwidth(probs, grid, fallback="author")


def test_ece_kde_exact_zeros_no_nan_and_gradients():
    probs = torch.tensor(
        [
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.5, 0.5, 0.0],
            [0.2, 0.3, 0.5],
            [0.0, 0.0, 1.0],
            [0.7, 0.0, 0.3],
        ],
        dtype=DT,
        requires_grad=True,
    )
    labels = torch.tensor([0, 1, 1, 2, 2, 0])
    for kw in [dict(), dict(flavour="authors"), dict(bandwidth=1e-5), dict(bandwidth=0.3), dict(p=2)]:
        v = ece_kde(probs, labels, **kw)
        (gp,) = torch.autograd.grad(v, probs)
        assert torch.isfinite(v) and torch.isfinite(gp).all(), kw
    # float32 softmax underflow to exact zeros
    logits = torch.tensor(
        [[200.0, 0.0, -200.0], [0.0, 150.0, 0.0], [1.0, 2.0, 3.0], [-100.0, 0.0, 100.0]], requires_grad=True
    )
    v = ece_kde(torch.softmax(logits, -1), torch.tensor([0, 1, 2, 2]))
    (gl,) = torch.autograd.grad(v, logits)
    assert torch.isfinite(v) and torch.isfinite(gl).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ece_kde_authors_flavour_matches_loops_and_selects_with_the_authors_rule(seed):
    """flavour="authors": the authors' selector (fallback 1e-5) and the linear-space ratio, whose rows with an
    underflowed kernel give r = 0, where kcal's log-space ratio gives the nearest neighbours' labels."""
    logits, labels = _inputs(n=12, m=3, seed=seed, scale=2.0)
    probs = torch.softmax(logits, -1)
    h = select_bandwidth(probs, fallback="authors")
    _rel_close(
        ece_kde(probs, labels, flavour="authors"),
        ref_ece_kde(probs.numpy(), labels.numpy(), h, 1, authors=True),
    )
    # at h = 1e-5 the kernel underflows in float64 for these rows: the two flavours differ there
    auth = float(ece_kde(probs, labels, bandwidth=1e-5, flavour="authors"))
    _rel_close(auth, ref_ece_kde(probs.numpy(), labels.numpy(), 1e-5, 1, authors=True))
    assert abs(auth - float(ece_kde(probs, labels, bandwidth=1e-5))) > 1e-3
    # without underflow the two ratios are one number
    _rel_close(
        ece_kde(probs, labels, bandwidth=0.5, flavour="authors"), float(ece_kde(probs, labels, bandwidth=0.5))
    )
    with pytest.raises(ValueError, match="valid: \\['kcal', 'authors'\\]"):
        ece_kde(probs, labels, flavour="official")


def test_ece_kde_gradients_small_batches_and_validation():
    logits, labels = _inputs(n=16, m=4, seed=6)
    logits.requires_grad_()
    (gl,) = torch.autograd.grad(ece_kde(torch.softmax(logits, -1), labels), logits)
    assert torch.isfinite(gl).all() and gl.abs().sum() > 0
    probs = torch.softmax(logits.detach(), -1)
    assert torch.isfinite(ece_kde(probs[:2], labels[:2]))  # n = 2: defined
    assert torch.isfinite(ece_kde(probs, torch.zeros(16, dtype=torch.long)))  # constant labels
    with pytest.raises(ValueError, match="n=2"):
        ece_kde(probs[:1], labels[:1])
    for bad in [0.0, -0.1, float("nan")]:
        with pytest.raises(ValueError, match="bandwidth"):
            ece_kde(probs, labels, bandwidth=bad)
    with pytest.raises(ValueError, match="bandwidth"):
        ece_kde(probs, labels, bandwidth_grid=[0.1, -1.0])
    with pytest.raises(ValueError, match="labels"):
        ece_kde(probs, labels.double())


def test_logsumexp_truncated_is_torch_logsumexp_on_dirichlet_log_kernels():
    """The LOO selector's truncated logsumexp returns torch.logsumexp's numbers on the kernels it sees: every
    candidate bandwidth, sharp and flat forecasts, float32 and float64.

    The raised terms (at most exp(-80) = 1.8e-35 each) change the sum of exponentials (>= 1) by less than
    half an ulp, but the partial sums of a vectorised reduction can meet a rounding tie that such a term
    tips, and which partial sums form depends on the CPU: so 2 ulps of the sum (2 eps relative, which
    ``log`` turns into 2 eps absolute) plus 2 ulps of the maximum that is added back."""
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        eps = torch.finfo(dtype).eps
        for n in (2, 3, 64, 256):
            for scale in (0.1, 3.0, 30.0):
                probs = torch.softmax(torch.randn(n, 7, generator=g, dtype=dtype) * scale, -1)
                logk = dirichlet_log_kernel(probs, default_bandwidth_grid(dtype=dtype))
                torch.testing.assert_close(
                    logsumexp_truncated(logk, -1), torch.logsumexp(logk, -1), rtol=2 * eps, atol=2 * eps
                )
    x = torch.full((3, 4), float("-inf"))
    x[0, 1] = 2.0
    x[2, 0] = float("inf")
    torch.testing.assert_close(logsumexp_truncated(x, -1), torch.logsumexp(x, -1))  # -inf, 2 and inf


@pytest.mark.parametrize("chunk", [1, 3 * 16 * 16, 1 << 20])
def test_loo_log_likelihood_in_blocks_equals_the_whole_dirichlet_log_kernel(monkeypatch, chunk):
    """The blocked G / h - log B form gives the LOO log-likelihood of dirichlet_log_kernel + logsumexp,
    whatever the block size (1 candidate, 3 candidates and a partial last block, all 20 at once)."""
    import kcal.baselines as baselines

    monkeypatch.setattr(baselines, "LOO_CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(3)
    for m, scale in ((2, 0.5), (7, 4.0)):
        probs = torch.softmax(torch.randn(16, m, generator=g, dtype=DT) * scale, -1)
        grid = default_bandwidth_grid(dtype=DT)
        direct = torch.logsumexp(dirichlet_log_kernel(probs, grid), -1) - math.log(15)
        for authors in (False, True):
            norm = torch.log(grid).unsqueeze(-1) if authors else 0.0
            expected = (direct - norm).sum(-1)
            torch.testing.assert_close(loo_log_likelihood(probs, grid, authors=authors), expected, rtol=1e-10,
                                       atol=1e-8)  # fmt: skip


@pytest.mark.parametrize("scaling", ["kumar", "authors"])
@pytest.mark.parametrize("weighted", [True, False])
def test_mmce_stacked_is_mmce_of_each_batch(scaling, weighted):
    """K batches at once (a stack of seeds): each batch's value and gradient are mmce's of it alone, to rounding
    (float64 here, so 1e-10 is generous), a batch with no wrong prediction (MMCE exactly 0) beside the others."""
    g = torch.Generator().manual_seed(3)
    scales = torch.tensor([0.3, 1.0, 4.0, 12.0], dtype=DT).reshape(-1, 1, 1)
    logits = torch.randn(4, 16, 3, generator=g, dtype=DT) * scales
    labels = torch.randint(0, 3, (4, 16), generator=g)
    labels[2] = logits[2].argmax(-1)  # every prediction right: the degenerate branch
    logits.requires_grad_()
    values = mmce_stacked(
        torch.softmax(logits, -1), labels, bandwidth=0.3, weighted=weighted, scaling=scaling
    )
    (grads,) = torch.autograd.grad(values.sum(), logits)
    assert values.shape == (4,) and (float(values[2]) == 0.0) == weighted
    for k in range(4):
        own = logits.detach()[k].requires_grad_()
        one = mmce(torch.softmax(own, -1), labels[k], bandwidth=0.3, weighted=weighted, scaling=scaling)
        torch.testing.assert_close(values[k], one, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(grads[k], torch.autograd.grad(one, own)[0], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match=r"probs \(K, n, m\) and labels \(K, n\), got \(16, 3\)"):
        mmce_stacked(torch.softmax(logits, -1)[0], labels[0])
    with pytest.raises(ValueError, match="unknown MMCE scaling 'paper'"):
        mmce_stacked(torch.softmax(logits, -1), labels, scaling="paper")


@pytest.mark.parametrize("chunk", [3 * 16 * 16, 1 << 20])
@pytest.mark.parametrize("flavour", ["kcal", "authors"])
def test_ece_kde_stacked_is_ece_kde_of_each_batch(monkeypatch, chunk, flavour):
    """K batches at once (a stack of seeds): each batch's value, selected bandwidth and gradient are ece_kde's
    of it alone, to rounding (batched kernels may sum in another order; float64 here, so 1e-10 is generous),
    whether the LOO scores are computed in several blocks or one; batches whose selector falls back (the
    authors' 1e-5, below) and batches that select a candidate sit side by side."""
    import kcal.baselines as baselines

    monkeypatch.setattr(baselines, "LOO_CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(5)
    scales = torch.tensor([0.3, 1.0, 4.0, 12.0], dtype=DT).reshape(-1, 1, 1)
    logits = (torch.randn(4, 16, 3, generator=g, dtype=DT) * scales).requires_grad_()
    labels = torch.randint(0, 3, (4, 16), generator=g)
    fallback = "authors" if flavour == "authors" else "none"
    probs = torch.softmax(logits, -1)
    chosen = select_bandwidths(probs, None, fallback)
    assert chosen.shape == (4,) and chosen.dtype == DT
    values = ece_kde_stacked(probs, labels, flavour=flavour)
    (grads,) = torch.autograd.grad(values.sum(), logits)
    for k in range(4):
        own = logits.detach()[k].requires_grad_()
        one = ece_kde(torch.softmax(own, -1), labels[k], flavour=flavour)
        assert float(chosen[k]) == pytest.approx(
            select_bandwidth(probs[k].detach(), None, fallback), rel=1e-12
        )
        torch.testing.assert_close(
            loo_log_likelihood(probs.detach(), default_bandwidth_grid(dtype=DT))[k],
            loo_log_likelihood(probs[k].detach(), default_bandwidth_grid(dtype=DT)), rtol=1e-10, atol=1e-10)  # fmt: skip
        torch.testing.assert_close(values[k], one, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(grads[k], torch.autograd.grad(one, own)[0], rtol=1e-10, atol=1e-12)
    fixed = ece_kde_stacked(probs.detach(), labels, p=2, bandwidth=0.3, flavour=flavour)
    for k in range(4):
        torch.testing.assert_close(fixed[k], ece_kde(probs[k].detach(), labels[k], p=2, bandwidth=0.3, flavour=flavour),
                                   rtol=1e-10, atol=1e-12)  # fmt: skip
    spread, _ = _inputs(n=8, m=3, seed=2, scale=1.0)  # every candidate's authors' score is negative: 1e-5
    pair = torch.stack([torch.softmax(spread, -1), torch.softmax(0.05 * spread, -1)])
    grid = [1e-4, 1e-3, 1e-2]
    assert select_bandwidths(pair, grid, "authors").tolist() == pytest.approx([1e-5, 1e-4])
    assert [select_bandwidth(q, grid, "authors") for q in pair] == pytest.approx([1e-5, 1e-4])
    pair_logits = torch.stack(
        [spread, 0.05 * spread]
    ).requires_grad_()  # a fallback member beside a selecting one
    pair_labels = torch.randint(0, 3, (2, 8), generator=g)
    values = ece_kde_stacked(
        torch.softmax(pair_logits, -1), pair_labels, bandwidth_grid=grid, flavour=flavour
    )
    (grads,) = torch.autograd.grad(values.sum(), pair_logits)
    for k in range(2):
        own = pair_logits.detach()[k].requires_grad_()
        one = ece_kde(torch.softmax(own, -1), pair_labels[k], bandwidth_grid=grid, flavour=flavour)
        torch.testing.assert_close(values[k], one, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(grads[k], torch.autograd.grad(one, own)[0], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match=r"probs \(K, n, m\) and labels \(K, n\), got \(16, 3\)"):
        ece_kde_stacked(probs[0], labels[0])
    with pytest.raises(ValueError, match="pass torch.softmax"):
        ece_kde_stacked(logits.detach(), labels)
