"""Exact classification metrics vs naive loop references (float64)."""

import math

import numpy as np
import pytest
import torch

from kcal.metrics import classification as C

RTOL = 1e-6


def _close(a, b, rtol=RTOL, atol=1e-12):
    a, b = float(a), float(b)
    assert abs(a - b) <= rtol * abs(b) + atol, (a, b)


def _calibrated(n, m, seed=0, temp=1.0):
    """Labels drawn from the forecast itself -> perfectly calibrated forecaster."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, m, generator=g, dtype=torch.float64) * 2.0
    probs = torch.softmax(logits, -1)
    labels = torch.multinomial(probs, 1, generator=g)[:, 0]
    probs_shown = torch.softmax(logits * temp, -1)
    return probs_shown, labels


# ------------------------------------------------------------------ references
def ref_bin(v, n_bins):
    """(lo, hi] bins on [0, 1], 0 -> first bin."""
    for k in range(n_bins):
        lo, hi = k / n_bins, (k + 1) / n_bins
        if lo < v <= hi:
            return k
    return 0


def ref_ece(probs, labels, n_bins):
    p = probs.tolist()
    n = len(p)
    cnt = [0] * n_bins
    cs = [0.0] * n_bins
    hs = [0.0] * n_bins
    for i in range(n):
        r = max(p[i])
        pred = p[i].index(r)
        b = ref_bin(r, n_bins)
        cnt[b] += 1
        cs[b] += r
        hs[b] += float(pred == labels[i])
    return sum(cnt[b] / n * abs(hs[b] / cnt[b] - cs[b] / cnt[b]) for b in range(n_bins) if cnt[b])


def ref_classwise(probs, labels, n_bins):
    p = probs.tolist()
    n, m = len(p), len(p[0])
    tot = 0.0
    for k in range(m):
        cnt = [0] * n_bins
        cs = [0.0] * n_bins
        hs = [0.0] * n_bins
        for i in range(n):
            b = ref_bin(p[i][k], n_bins)
            cnt[b] += 1
            cs[b] += p[i][k]
            hs[b] += float(labels[i] == k)
        tot += sum(cnt[b] / n * abs(hs[b] / cnt[b] - cs[b] / cnt[b]) for b in range(n_bins) if cnt[b])
    return tot / m


def ref_kce(probs, labels, x, bw_x, bw_y):
    """Double loop over i != j of k_x * (E k_y(Yhat_i, Yhat_j) - 2 E k_y(Yhat_i, y_j) + k_y(y_i, y_j))."""
    p = probs.tolist()
    xs = x.tolist()
    n, m = len(p), len(p[0])

    def ky(c, d):
        return 1.0 if c == d else math.exp(-2.0 / bw_y)

    tot = 0.0
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            kx = math.exp(-sum((a - b) ** 2 for a, b in zip(xs[i], xs[j], strict=True)) / bw_x)
            pp = sum(p[i][c] * p[j][d] * ky(c, d) for c in range(m) for d in range(m))
            pc = sum(p[i][c] * ky(c, labels[j]) for c in range(m))
            tt = ky(labels[i], labels[j])
            tot += kx * (pp - 2 * pc + tt)
    return tot / (n * (n - 1))


# ------------------------------------------------------------------ vs references
def test_accuracy_vs_loop():
    probs, labels = _calibrated(300, 4, seed=1)
    ref = np.mean([int(np.argmax(probs[i].numpy()) == labels[i].item()) for i in range(300)])
    _close(C.accuracy(probs, labels), ref)


@pytest.mark.parametrize("n_bins", [20, 10])
def test_ece_vs_loop(n_bins):
    probs, labels = _calibrated(800, 3, seed=2, temp=1.7)
    _close(C.ece(probs, labels, n_bins), ref_ece(probs, labels.tolist(), n_bins))


def test_ece_bin_edges_are_right_closed():
    # confidences exactly on the bin edge 0.75 (with 20 bins) belong to bin (0.70, 0.75]
    probs = torch.tensor([[0.75, 0.25], [0.25, 0.75], [0.9, 0.1]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 0])
    _close(C.ece(probs, labels), ref_ece(probs, labels.tolist(), 20))
    assert C.bin_index(torch.tensor([0.0, 0.05, 0.0500001, 1.0], dtype=torch.float64), 20).tolist() == [
        0,
        0,
        1,
        19,
    ]


def test_ece_l2_and_max_vs_loop():
    probs, labels = _calibrated(500, 3, seed=3, temp=2.0)
    p = probs.tolist()
    bins = {}
    for i in range(500):
        r = max(p[i])
        b = ref_bin(r, 20)
        bins.setdefault(b, []).append((r, float(p[i].index(r) == labels[i].item())))
    gaps = {b: abs(np.mean([h for _, h in v]) - np.mean([r for r, _ in v])) for b, v in bins.items()}
    l2 = math.sqrt(sum(len(bins[b]) / 500 * gaps[b] ** 2 for b in bins))
    _close(C.ece(probs, labels, norm="l2"), l2)
    _close(C.ece(probs, labels, norm="max"), max(gaps.values()))
    with pytest.raises(ValueError):
        C.ece(probs, labels, norm="l3")


def test_classwise_ece_vs_loop():
    probs, labels = _calibrated(600, 4, seed=4, temp=0.6)
    _close(C.classwise_ece(probs, labels), ref_classwise(probs, labels.tolist(), 20))


def test_entropy_vs_loop():
    probs, _ = _calibrated(200, 5, seed=5)
    ref = np.mean([-sum(v * math.log(v) for v in row) for row in probs.tolist()])
    _close(C.entropy(probs), ref)


def test_kce_vs_double_loop():
    g = torch.Generator().manual_seed(6)
    probs, labels = _calibrated(40, 3, seed=6)
    x = torch.randn(40, 2, generator=g, dtype=torch.float64)
    for bw_x, bw_y in [(10.0, 0.1), (2.0, 1.0)]:
        _close(
            C.kce(probs, labels, x, bandwidth_z=bw_x, bandwidth_y=bw_y), ref_kce(probs, labels, x, bw_x, bw_y)
        )


def test_kce_batched_helper_vs_double_loop():
    g = torch.Generator().manual_seed(7)
    probs, labels = _calibrated(24, 3, seed=7)
    x = torch.randn(24, 3, generator=g, dtype=torch.float64)
    out = C.kce_batched(probs.view(3, 8, 3), labels.view(3, 8), x.view(3, 8, 3), 10.0, 0.1)
    for b in range(3):
        sl = slice(8 * b, 8 * b + 8)
        _close(out[b], ref_kce(probs[sl], labels[sl].tolist(), x[sl], 10.0, 0.1))


# ------------------------------------------------------------------ textbook cases
def test_calibrated_classifier_small_ece_miscalibrated_large():
    probs, labels = _calibrated(20000, 3, seed=8)
    assert C.ece(probs, labels).item() < 0.02
    assert C.classwise_ece(probs, labels).item() < 0.02
    over, labels2 = _calibrated(20000, 3, seed=8, temp=3.0)  # overconfident
    assert C.ece(over, labels2).item() > 0.05


def test_kce_near_zero_for_calibrated_and_positive_for_wrong_forecasts():
    g = torch.Generator().manual_seed(9)
    n = 400
    x = torch.randn(n, 2, generator=g, dtype=torch.float64)
    logits = torch.stack([x[:, 0] * 3, -x[:, 0] * 3], -1)
    probs = torch.softmax(logits, -1)
    labels = torch.multinomial(probs, 1, generator=g)[:, 0]
    good = C.kce(probs, labels, x, 1.0, 1.0).item()
    bad = C.kce(probs.flip(-1), labels, x, 1.0, 1.0).item()
    assert abs(good) < 0.01 and bad > 0.05


# ------------------------------------------------------------------ edge cases
def test_exact_zero_probabilities():
    probs = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.2, 0.8, 0.0]], dtype=torch.float64)
    labels = torch.tensor([0, 2, 1])
    h = C.entropy(probs)
    assert torch.isfinite(h)
    _close(h, (0.0 + math.log(2) + -(0.2 * math.log(0.2) + 0.8 * math.log(0.8))) / 3)
    assert torch.isfinite(C.ece(probs, labels))
    _close(C.ece(probs, labels), ref_ece(probs, labels.tolist(), 20))
    _close(C.classwise_ece(probs, labels), ref_classwise(probs, labels.tolist(), 20))


def test_single_row():
    probs = torch.tensor([[0.3, 0.7]], dtype=torch.float64)
    _close(C.ece(probs, torch.tensor([1])), 0.3)
    _close(C.ece(probs, torch.tensor([0])), 0.7)
    _close(C.accuracy(probs, torch.tensor([1])), 1.0)
    with pytest.raises(ValueError, match="at least 2 rows"):
        C.kce(probs, torch.tensor([1]), torch.zeros(1, 2))


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        C.ece(torch.rand(5), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError):
        C.ece(torch.rand(5, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError):
        C.accuracy(torch.rand(5, 2), torch.full((5,), 2))
    with pytest.raises(ValueError):
        C.entropy(torch.zeros(0, 3))


def test_nll_logits_equals_cross_entropy_and_separates_confident_forecasts():
    g = torch.Generator().manual_seed(11)
    logits, labels = (
        torch.randn(40, 5, generator=g, dtype=torch.float64),
        torch.randint(0, 5, (40,), generator=g),
    )
    assert torch.allclose(
        C.nll_logits(logits, labels), torch.nn.functional.cross_entropy(logits, labels), rtol=1e-12
    )
    ref = sum(math.log1p(sum(math.exp(v - row[y]) for c, v in enumerate(row) if c != y))
              for row, y in zip(logits.tolist(), labels.tolist(), strict=True)) / 40  # fmt: skip
    assert float(C.nll_logits(logits, labels)) == pytest.approx(ref, rel=1e-12)
    # two confident, correct models: float32 cross-entropy rounds both to 0; nll_logits keeps them apart
    confident = torch.tensor([[60.0, 0.0], [0.0, 60.0]]), torch.tensor([[90.0, 0.0], [0.0, 90.0]])
    y = torch.tensor([0, 1])
    assert all(float(torch.nn.functional.cross_entropy(z, y)) == 0.0 for z in confident)
    a, b = (float(C.nll_logits(z, y)) for z in confident)
    assert (
        a == pytest.approx(math.exp(-60), rel=1e-9)
        and b == pytest.approx(math.exp(-90), rel=1e-9)
        and a > b > 0
    )
