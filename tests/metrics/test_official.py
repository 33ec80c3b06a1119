"""Official-flavour metrics vs explicit per-batch loop references, and the documented quirks."""

import math

import numpy as np
import pytest
import torch

from kcal.metrics import classification as C
from kcal.metrics import official as O
from kcal.metrics import regression as R

from .test_classification import _calibrated, ref_ece, ref_kce

RTOL = 1e-6


def _close(a, b, rtol=RTOL, atol=1e-12):
    a, b = float(a), float(b)
    assert abs(a - b) <= rtol * abs(b) + atol, (a, b)


def _gauss_data(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(n, generator=g, dtype=torch.float64)
    s = torch.rand(n, generator=g, dtype=torch.float64) + 0.3
    y = mu + s * torch.randn(n, generator=g, dtype=torch.float64)
    return mu, s, y


class ShiftedForecast:
    """A duck-typed non-Normal forecast (Normal shifted by +delta) exposing cdf/log_prob/icdf."""

    def __init__(self, mu, s, delta):
        self.d = torch.distributions.Normal(mu + delta, s)

    def cdf(self, y):
        return self.d.cdf(y)

    def log_prob(self, y):
        return self.d.log_prob(y)

    def icdf(self, u):
        assert u.shape == self.d.loc.shape  # called with batch-shaped tensors only
        return self.d.icdf(u)


# ------------------------------------------------------------------ references
def ref_official_qce(u, n_bins, batch_size):
    used = batch_size * (len(u) // batch_size) if batch_size else len(u)
    counts = [0] * n_bins
    for v in u[:used]:
        b = min(round(n_bins * v), n_bins - 1)  # Python round = half-to-even, like torch.round
        counts[b] += 1
    return 0.5 * sum(abs(c / used - 1 / n_bins) for c in counts)


def ref_official_dce(samples, y, c, batch_size):
    S = len(samples)
    nb = len(y) // batch_size
    total = 0.0
    for b in range(nb):
        rows = range(b * batch_size, (b + 1) * batch_size)
        for a in (-1, 1):
            ep = sum(float(np.sign(y[i] - c) == a) for i in rows) / batch_size
            eq = sum(float(np.sign(samples[s][i] - c) == a) for s in range(S) for i in rows) / (
                S * batch_size
            )
            total += (ep - eq) ** 2
    return math.sqrt(total)


# ------------------------------------------------------------------ QCE (Q6)
@pytest.mark.parametrize("batch_size", [128, 50, None])
def test_official_qce_vs_loop(batch_size):
    g = torch.Generator().manual_seed(0)
    u = torch.rand(1000, generator=g, dtype=torch.float64) ** 1.3
    u[:6] = torch.tensor([0.0, 1.0, 0.025, 0.075, 0.975, 0.5], dtype=torch.float64)  # rounding ties
    _close(O.official_qce(u, 20, batch_size=batch_size), ref_official_qce(u.tolist(), 20, batch_size))


def test_official_qce_floor_for_calibrated_and_larger_when_miscalibrated():
    # n large enough that the binning noise (~0.5*sum_b E|c_b/N - 1/B| ~ 0.012 at n=2e4) is small
    mu, s, y = _gauss_data(200_000, seed=1)
    u = R.pit((mu, s), y)
    q = O.official_qce(u).item()
    assert abs(q - 0.025) < 0.006
    assert R.qce_binned(u).item() < 0.006  # exact flavour has no floor
    assert O.official_qce(R.pit((mu, 0.5 * s), y)).item() > 0.1


def test_official_qce_drops_partial_batch_rows():
    u = torch.rand(300, dtype=torch.float64)
    u2 = u.clone()
    u2[256:] = 0.999  # rows of the partial third batch are ignored
    _close(O.official_qce(u), O.official_qce(u2))
    assert O.official_qce(u, batch_size=None).item() != O.official_qce(u2, batch_size=None).item()


# ------------------------------------------------------------------ DCE (Q1, Q2)
def test_official_dce_vs_loop_with_given_samples():
    mu, s, y = _gauss_data(400, seed=2)  # 3 full batches of 128, 16 rows dropped
    g = torch.Generator().manual_seed(3)
    samples = mu + s * torch.randn(10, 400, generator=g, dtype=torch.float64)
    y[:5] = 0.2  # ties with the threshold: neither action
    ref = ref_official_dce(samples.tolist(), y.tolist(), 0.2, 128)
    _close(O.official_dce(samples, y, threshold=0.2), ref)
    # a different batch size
    _close(
        O.official_dce(samples, y, threshold=0.2, batch_size=64),
        ref_official_dce(samples.tolist(), y.tolist(), 0.2, 64),
    )


def test_official_dce_forecast_path_uses_icdf_of_generator_uniforms():
    mu, s, y = _gauss_data(300, seed=4)
    f = ShiftedForecast(mu, s, 0.3)
    val = O.official_dce(f, y, 0.0, num_samples=7, generator=torch.Generator().manual_seed(11))
    u = torch.rand((7, 300), generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    samples = torch.distributions.Normal(mu + 0.3, s).icdf(u)
    _close(val, ref_official_dce(samples.tolist(), y.tolist(), 0.0, 128))
    # tuple forecast also accepted
    v2 = O.official_dce((mu, s), y, 0.0, generator=torch.Generator().manual_seed(1))
    assert torch.isfinite(v2)


def test_official_dce_grows_like_sqrt_number_of_batches():
    """Q1: no normalisation by batch count -> E[DCE^2] is proportional to #batches."""
    g = torch.Generator().manual_seed(5)

    def mean_sq(nb, reps):
        vals = []
        for _ in range(reps):
            n = 128 * nb
            mu = torch.randn(n, generator=g, dtype=torch.float64) * 0.5
            y = mu + torch.randn(n, generator=g, dtype=torch.float64)
            vals.append(
                O.official_dce((mu, torch.ones(n, dtype=torch.float64)), y, 0.0, generator=g).item() ** 2
            )
        return np.mean(vals)

    ratio = math.sqrt(mean_sq(48, 40) / mean_sq(3, 300))
    assert 3.3 < ratio < 4.8, ratio


def test_official_dce_tie_floor_vs_exact():
    """Q2: labels equal to c count for neither action in the official flavour."""
    g = torch.Generator().manual_seed(6)
    n = 128 * 10
    y = torch.randn(n, generator=g, dtype=torch.float64)
    y[: n // 2] = 0.0
    y = y[torch.randperm(n, generator=g)]
    # forecast: P(Y >= 0) = 0.75 matches the true +1 side frequency (ties -> +1)
    mu = torch.full((n,), 0.6744897501960817, dtype=torch.float64)
    sd = torch.ones(n, dtype=torch.float64)
    assert R.dce((mu, sd), y, 0.0).item() < 0.05
    assert O.official_dce((mu, sd), y, 0.0, generator=g).item() > 1.0


# ------------------------------------------------------------------ NLL
def test_official_regression_nll_drop_last():
    mu, s, y = _gauss_data(300, seed=7)
    ref = np.mean(
        [
            -(-0.5 * math.log(2 * math.pi) - math.log(s[i]) - 0.5 * ((y[i] - mu[i]) / s[i]) ** 2)
            for i in range(256)
        ]
    )
    _close(O.official_regression_nll(torch.distributions.Normal(mu, s), y), ref)
    _close(O.official_regression_nll((mu, s), y, batch_size=None), R.gaussian_nll((mu, s), y))


def test_regression_batch_too_small_raises():
    mu, s, y = _gauss_data(100, seed=8)
    with pytest.raises(ValueError, match="batch_size=128"):
        O.official_qce(R.pit((mu, s), y))
    with pytest.raises(ValueError, match="batch_size=128"):
        O.official_dce((mu, s), y)
    with pytest.raises(ValueError, match="batch_size=128"):
        O.official_regression_nll((mu, s), y)


# ------------------------------------------------------------------ classification (Q3, Q4, Q5)
def _cls_data(n, m=3, d=2, seed=0, temp=1.0):
    probs, labels = _calibrated(n, m, seed=seed, temp=temp)
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed + 100), dtype=torch.float64)
    return probs, labels, x


def test_official_classification_vs_per_batch_loop():
    probs, labels, x = _cls_data(61, seed=1, temp=1.5)  # 7 batches of 8, 5 rows dropped
    x = x * 0.3  # so that the x-kernel is not ~identity
    out = O.official_classification_metrics(probs, labels, x, bandwidth_z=2.0, bandwidth_y=0.5)
    accs, eces, ents, kces = [], [], [], []
    for b in range(7):
        sl = slice(8 * b, 8 * b + 8)
        p, lab = probs[sl], labels[sl].tolist()
        accs.append(np.mean([int(np.argmax(p[i].numpy()) == lab[i]) for i in range(8)]))
        eces.append(ref_ece(p, lab, 20))
        ents.append(np.mean([-sum(v * math.log(v) for v in row) for row in p.tolist()]))
        kces.append(ref_kce(p, lab, x[sl], 2.0, 0.5))
    _close(out["accuracy"], np.mean(accs))
    _close(out["ece"], np.mean(eces))
    _close(out["entropy"], np.mean(ents))
    _close(out["kce"], np.mean(kces))
    assert set(out) == {"accuracy", "ece", "entropy", "kce"}


def test_official_per_batch_ece_is_inflated_vs_exact():
    """Q3: mean of per-8-row-batch ECE >> full-set ECE for a calibrated classifier."""
    probs, labels, x = _cls_data(8000, m=2, seed=2)
    exact = C.ece(probs, labels).item()
    off = O.official_classification_metrics(probs, labels, x)["ece"].item()
    assert exact < 0.03
    assert off > 0.15 and off > 5 * exact
    # accuracy / entropy are unaffected by batching (equal batch sizes)
    out = O.official_classification_metrics(probs, labels, x)
    _close(out["accuracy"], C.accuracy(probs, labels))
    _close(out["entropy"], C.entropy(probs))


def test_official_kce_bandwidths_and_resolution():
    assert O.official_kce_bandwidths("xe_mmd") == (10.0, 0.01)
    for name in ("xe", "xe_mmce", "xe_kde"):
        assert O.official_kce_bandwidths(name) == (0.01, 1.0)
    with pytest.raises(ValueError):
        O.official_kce_bandwidths("nll")
    probs, labels, x = _cls_data(40, d=10, seed=3)
    ref = np.mean(
        [
            ref_kce(
                probs[8 * b : 8 * b + 8], labels[8 * b : 8 * b + 8].tolist(), x[8 * b : 8 * b + 8], 10.0, 0.01
            )
            for b in range(5)
        ]
    )
    _close(O.official_classification_metrics(probs, labels, x, objective="xe_mmd")["kce"], ref)
    _close(
        O.official_classification_metrics(probs, labels, x, bandwidth_z=10.0, bandwidth_y=0.01)["kce"], ref
    )
    # default = constructor default (0.01, 1.0): x-kernel ~ identity -> KCE ~ 0
    assert abs(O.official_classification_metrics(probs, labels, x)["kce"].item()) < 1e-10


def test_official_kce_probs_override_q5():
    probs, labels, x = _cls_data(32, seed=4)
    sm = torch.softmax(probs, -1)
    a = O.official_classification_metrics(probs, labels, x, objective="xe_mmd", kce_probs=sm)
    b = O.official_classification_metrics(sm, labels, x, objective="xe_mmd")
    c = O.official_classification_metrics(probs, labels, x, objective="xe_mmd")
    _close(a["kce"], b["kce"])
    _close(a["ece"], c["ece"])
    assert abs(a["kce"].item() - c["kce"].item()) > 1e-6


def test_official_classification_edge_cases():
    probs, labels, x = _cls_data(20, seed=5)
    with pytest.raises(ValueError, match="batch_size=8"):
        O.official_classification_metrics(probs[:5], labels[:5], x[:5])
    # rows beyond the last full batch are ignored
    p2 = probs.clone()
    p2[16:] = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    a = O.official_classification_metrics(probs, labels, x, objective="xe_mmd")
    b = O.official_classification_metrics(p2, labels, x, objective="xe_mmd")
    for k in a:
        _close(a[k], b[k])
    # exact zeros: finite entropy (official code would give NaN) and ECE
    zp = torch.zeros(16, 3, dtype=torch.float64)
    zp[torch.arange(16), labels[:16]] = 1.0
    out = O.official_classification_metrics(zp, labels[:16], x[:16], objective="xe_mmd")
    assert all(torch.isfinite(v) for v in out.values())
    _close(out["entropy"], 0.0)
    _close(out["ece"], 0.0)
    _close(out["accuracy"], 1.0)


def test_official_classification_without_x_leaves_out_kce():
    probs, labels, x = _cls_data(32, seed=6)
    with_x = O.official_classification_metrics(probs, labels, x, objective="xe_mmd")
    without = O.official_classification_metrics(probs, labels, None, objective="xe_mmd")
    assert set(without) == {"accuracy", "ece", "entropy"}
    for k in without:
        _close(without[k], with_x[k])


# ------------------------------------------------------------------ post-hoc (kcal.evaluation's official path)


def _regression_preds(n_val=300, n_test=384, seed=0):
    """float32 network outputs promoted to float64, as kcal.evaluation holds them; overconfident, with tails."""
    g = torch.Generator().manual_seed(seed)

    def rows(n):
        mean = torch.randn(n, generator=g)
        std = torch.rand(n, generator=g) * 0.5 + 0.05
        return mean, std, mean + 2.0 * std * torch.randn(n, generator=g)

    (mv, sv, yv), (mt, st, yt) = rows(n_val), rows(n_test)
    yt[:20] = mt[:20] + torch.linspace(3.5, 7.0, 20) * st[:20]
    return {k: v.double() for k, v in dict(val_mean=mv, val_std=sv, val_y=yv, test_mean=mt, test_std=st, test_y=yt).items()}  # fmt: skip


def test_official_posthoc_regression_is_the_float32_conformal_arithmetic():
    """official/test_recal/nll is the mean finite-difference NLL of the float32 official conformal map, QCE its
    rounded bins; the float64 exact map (what the official flavour used before) gives another NLL."""
    from torch.distributions import Normal

    from kcal.evaluation import official_from_predictions
    from kcal.recalibration import make_quantile_recalibrator

    p = _regression_preds()
    out = official_from_predictions(p, "conformal")
    assert "official/test_recal/dce" not in out and "official/test/dce" not in out  # no seed, no DCE
    f32 = {k: v.float() for k, v in p.items()}
    rec = make_quantile_recalibrator("conformal", flavour="official").fit(
        Normal(f32["val_mean"], f32["val_std"]).cdf(f32["val_y"])
    )
    forecast = rec.forecast(Normal(f32["test_mean"], f32["test_std"]))
    lp = forecast.log_prob(f32["test_y"])
    assert lp.dtype == torch.float32
    _close(out["official/test_recal/nll"], -lp.mean(), rtol=1e-6)
    _close(out["official/test_recal/qce"], O.official_qce(forecast.cdf(f32["test_y"])))
    exact = make_quantile_recalibrator("conformal").fit(Normal(p["val_mean"], p["val_std"]).cdf(p["val_y"]))
    old = (
        -exact.forecast(Normal(p["test_mean"], p["test_std"])).log_prob_finite_difference(p["test_y"]).mean()
    )
    assert abs(out["official/test_recal/nll"] - float(old)) > 1e-3
    # with a seed: DCE for both, drawn from one generator, reproducible
    a = official_from_predictions(p, "conformal", seed=3)
    b = official_from_predictions({k: v.float().numpy() for k, v in p.items()}, "auto", seed=3)
    assert a == b and "official/test_recal/dce" in a
    assert official_from_predictions(p, "none", seed=3).keys() == {
        "official/test/nll",
        "official/test/qce",
        "official/test/dce",
    }


def test_official_posthoc_classification_fits_the_authors_temperature():
    """official/test_recal/...: the authors' temperature loop on float32 softmax outputs (T near 1 here, so the
    loop is short), applied in float32; KCE on softmax of the recalibrated probabilities."""
    from kcal.evaluation import official_from_predictions
    from kcal.recalibration import make_class_recalibrator

    g = torch.Generator().manual_seed(1)
    lv, lt = 3 * torch.randn(200, 3, generator=g), 3 * torch.randn(96, 3, generator=g)
    yv = torch.multinomial(torch.softmax(lv / 1.2, -1), 1, generator=g).squeeze(-1)
    yt = torch.multinomial(torch.softmax(lt / 1.2, -1), 1, generator=g).squeeze(-1)
    x = torch.randn(96, 4, generator=g, dtype=torch.float64)
    p = {"val_logits": lv.double(), "val_y": yv, "test_logits": lt.double(), "test_y": yt}
    out = official_from_predictions(p, "auto", objective="xe_mmd", x_test=x)
    official = make_class_recalibrator("temperature", flavour="official").fit_from_probs(
        torch.softmax(lv, -1), yv
    )
    assert out["official/test_recal/temperature"] == official.temperature
    p_cal = official.transform_probs(torch.softmax(lt, -1)).double()
    expected = O.official_classification_metrics(
        p_cal, yt, x, objective="xe_mmd", kce_probs=torch.softmax(p_cal, -1)
    )
    for key, name in (("accuracy", "acc"), ("ece", "ece"), ("entropy", "entropy"), ("kce", "kce")):
        _close(out[f"official/test_recal/{name}"], expected[key])
    exact = make_class_recalibrator("temperature").fit_from_probs(torch.softmax(lv, -1), yv)
    assert abs(exact.temperature / official.temperature - 1) > 1e-4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (checked on the lent H100)")
def test_official_dce_draws_on_the_generators_device():
    # a GPU run's evaluation passes a CUDA generator: the draws must be made there (was a RuntimeError)
    dev = torch.device("cuda")
    y = torch.randn(300, device=dev)
    gen = torch.Generator(device=dev).manual_seed(0)
    value = O.official_dce((torch.zeros(300, device=dev), torch.ones(300, device=dev)), y, generator=gen)
    assert value.device.type == "cuda" and torch.isfinite(value)
