"""One calling convention and one set of input checks across kcal.metrics, kcal.mmd and kcal.baselines."""

import numpy as np
import pytest
import torch

from kcal import baselines, mmd
from kcal.inputs import check_probs
from kcal.kernels import UNIFORM_MEDIAN_SQ_DIST, get_kernel, median_heuristic
from kcal.metrics import classification as C
from kcal.metrics import regression as R

DT = torch.float64


def _classes(n=2000, m=5, seed=0):
    """Forecasts whose labels are sampled from their own probabilities (calibrated by construction)."""
    g = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(n, m, generator=g, dtype=DT)
    probs = torch.softmax(logits, -1)
    labels = torch.multinomial(probs, 1, generator=g)[:, 0]
    return logits, probs, labels, torch.randn(n, 3, generator=g, dtype=DT)


def test_ece_refuses_logits_and_says_what_to_pass():
    logits, probs, labels, _ = _classes()
    assert float(C.ece(probs, labels)) < 0.05
    with pytest.raises(ValueError, match=r"softmax\(logits, -1\)"):
        C.ece(logits, labels)
    for fn in (C.accuracy, C.classwise_ece, baselines.mmce):
        with pytest.raises(ValueError, match="softmax"):
            fn(logits, labels)
    with pytest.raises(ValueError, match="softmax"):
        mmd.classification_mmd(logits[:50], labels[:50], form="canonical")


def test_probabilities_that_do_not_sum_to_one_are_refused():
    _, probs, labels, x = _classes(n=40)
    with pytest.raises(ValueError, match="summing to 1"):
        C.ece(0.9 * probs, labels)
    with pytest.raises(ValueError, match="summing to 1"):
        C.kce(probs[:, :4], labels.clamp(max=3), x)
    with pytest.raises(ValueError, match="integer class ids"):
        C.ece(probs, labels.double())
    with pytest.raises(ValueError, match=r"\[0, 4\]"):
        mmd.classification_mmd(probs, labels + 1, x)
    # training loops switch the value checks (and their host sync) off
    mmd.classification_mmd(0.9 * probs, labels, x, validate_args=False)


def test_numpy_and_torch_inputs_agree():
    _, probs, labels, x = _classes(n=60)
    p, lab, xn = probs.numpy(), labels.numpy(), x.numpy()
    pairs = [
        (C.ece(p, lab), C.ece(probs, labels)),
        (C.accuracy(p, lab), C.accuracy(probs, labels)),
        (C.classwise_ece(p, lab), C.classwise_ece(probs, labels)),
        (C.kce(p, lab, xn), C.kce(probs, labels, x)),
        (mmd.classification_mmd(p, lab, xn), mmd.classification_mmd(probs, labels, x)),
        (baselines.mmce(p, lab), baselines.mmce(probs, labels)),
        (baselines.ece_kde(p, lab), baselines.ece_kde(probs, labels)),
    ]
    g = torch.Generator().manual_seed(1)
    mean, std = torch.randn(60, generator=g, dtype=DT), torch.rand(60, generator=g, dtype=DT) + 0.5
    y, eps = torch.randn(60, generator=g, dtype=DT), torch.randn(4, 60, generator=g, dtype=DT)
    fm, fn_ = (mean.numpy(), std.numpy()), (mean, std)
    pairs += [
        (R.nll(fm, y.numpy()), R.nll(fn_, y)),
        (R.crps(fm, y.numpy()), R.crps(fn_, y)),
        (R.dce(fm, y.numpy()), R.dce(fn_, y)),
        (R.qce(fm, y.numpy()), R.qce(fn_, y)),
        (R.gaussian_nll(fm, y.numpy()), R.gaussian_nll(fn_, y)),
        (R.sharpness(fm), R.sharpness(fn_)),
        (mmd.regression_mmd(fm, y.numpy(), xn, eps=eps.numpy()), mmd.regression_mmd(fn_, y, x, eps=eps)),
        (
            mmd.sample_mmd2(eps.numpy()[:, :, None], y.numpy()[None, :, None], get_kernel("rbf")),
            mmd.sample_mmd2(eps[:, :, None], y[None, :, None], get_kernel("rbf")),
        ),
    ]
    for a, b in pairs:
        assert isinstance(a, torch.Tensor) and torch.equal(a, b)


def test_regression_functions_take_forecast_then_target():
    g = torch.Generator().manual_seed(2)
    mean, std = torch.randn(30, generator=g, dtype=DT), torch.rand(30, generator=g, dtype=DT) + 0.5
    y, x, eps = (
        torch.randn(30, generator=g, dtype=DT),
        torch.randn(30, 2, dtype=DT),
        torch.randn(5, 30, dtype=DT),
    )
    normal = torch.distributions.Normal(mean, std)
    new = mmd.regression_mmd((mean, std), y, x, eps=eps, bandwidth_z=2.0)
    assert torch.equal(new, mmd.regression_mmd(normal, y, x, eps=eps, bandwidth_z=2.0))
    assert torch.equal(R.crps(normal, y), R.crps((mean, std), y))
    assert torch.equal(R.gaussian_nll(normal, y), R.gaussian_nll((mean, std), y))
    assert torch.allclose(R.gaussian_nll((mean, std), y), R.nll((mean, std), y))
    with pytest.raises(TypeError, match=r"\(mean, std\)"):
        R.crps(torch.distributions.Laplace(mean, std), y)


def test_sample_mmd2_is_symmetric_in_forecast_and_target():
    g = torch.Generator().manual_seed(3)
    f, t = torch.randn(6, 25, generator=g, dtype=DT), torch.randn(1, 25, generator=g, dtype=DT)
    k = get_kernel("rbf", bandwidth=0.7)
    for pairing in ("index", "cross"):
        a = mmd.sample_mmd2(f, t, k, pairing=pairing)
        b = mmd.sample_mmd2(t, f, k, pairing=pairing)
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-15)


def test_kce_bandwidth_names_match_classification_mmd():
    _, probs, labels, x = _classes(n=30)
    a = C.kce(probs, labels, x, bandwidth_z=3.0, bandwidth_y=0.2)
    assert torch.equal(a, mmd.classification_mmd(probs, labels, x, bandwidth_z=3.0, bandwidth_y=0.2))
    assert np.isclose(float(C.kce(probs, labels, x)), float(mmd.classification_mmd(probs, labels, x)))


def test_sample_mmd2_takes_z_as_a_gram_matrix_or_as_values_with_a_kernel():
    g = torch.Generator().manual_seed(4)
    f, t = torch.randn(5, 20, generator=g, dtype=DT), torch.randn(1, 20, generator=g, dtype=DT)
    z = torch.randn(20, 2, generator=g, dtype=DT)
    k, kz = get_kernel("rbf", bandwidth=0.7), get_kernel("rbf", bandwidth=2.0)
    assert torch.equal(mmd.sample_mmd2(f, t, k, kz(z, z)), mmd.sample_mmd2(f, t, k, z=z, kernel_z=kz))
    with pytest.raises(ValueError, match="kernel_z"):
        mmd.sample_mmd2(f, t, k, z=z)


def test_the_low_level_estimators_accept_numpy_too():
    _, probs, labels, x = _classes(n=25)
    k_y, k_z = torch.eye(5, dtype=DT), get_kernel("rbf", bandwidth=3.0)(x, x)
    assert torch.equal(
        mmd.analytic_mmd2(probs.numpy(), labels.numpy(), k_y.numpy(), k_z.numpy()),
        mmd.analytic_mmd2(probs, labels, k_y, k_z),
    )
    assert torch.equal(
        mmd.mmd2_unbiased(k_z.numpy(), k_z.numpy(), k_z.numpy()), mmd.mmd2_unbiased(k_z, k_z, k_z)
    )
    assert baselines.select_bandwidth(probs.numpy()) == baselines.select_bandwidth(probs)


def test_former_argument_order_fails_with_one_line_saying_pass_one_forecast():
    """The library's one rule for f(mean, std, y): a one-line TypeError naming f((mean, std), y)."""
    g = torch.Generator().manual_seed(5)
    mean, std = torch.randn(12, generator=g, dtype=DT), torch.rand(12, generator=g, dtype=DT) + 0.5
    y, x = torch.randn(12, generator=g, dtype=DT), torch.randn(12, 2, generator=g, dtype=DT)
    calls = {
        "gaussian_nll": lambda: R.gaussian_nll(mean, std, y),
        "nll": lambda: R.nll(mean, std, y),
        "crps": lambda: R.crps(mean, std, y),
        "dce": lambda: R.dce(mean, std, y),
        "pit": lambda: R.pit(mean.numpy(), y),
        "regression_mmd": lambda: mmd.regression_mmd(mean, std, y, x),
        "crps_gaussian": lambda: R.crps_gaussian(mean, std, y),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError) as err:
            call()
        text = str(err.value)
        assert "pass (mean, std) as one forecast" in text and "\n" not in text and "tensor(" not in text, name
        assert name in text
    with pytest.raises(TypeError, match="bandwidth_x is now called bandwidth_z"):
        C.kce(torch.full((4, 2), 0.5), torch.tensor([0, 1, 0, 1]), torch.randn(4, 2), bandwidth_x=3.0)


def test_probabilities_within_float_rounding_are_clipped_and_logits_still_refused():
    probs = torch.tensor([[0.5, 0.5], [1.0 + 1e-9, -1e-9], [0.25, 0.75]], dtype=DT)
    labels = torch.tensor([0, 0, 1])
    clipped, _ = check_probs(probs, labels)
    assert float(clipped.min()) == 0.0 and float(clipped.max()) == 1.0
    assert torch.isfinite(C.ece(probs, labels)) and torch.isfinite(
        mmd.classification_mmd(probs, labels, form="canonical")
    )
    with pytest.raises(ValueError, match="softmax"):
        check_probs(torch.tensor([[1.2, -0.2], [0.5, 0.5]]), labels[:2])


def test_unset_bandwidths_are_the_median_heuristic_of_the_batch():
    g = torch.Generator().manual_seed(6)
    mean, std = torch.randn(30, generator=g, dtype=DT), torch.rand(30, generator=g, dtype=DT) + 0.5
    y, x, eps = (
        torch.randn(30, generator=g, dtype=DT),
        torch.randn(30, 7, generator=g, dtype=DT),
        torch.randn(4, 30, generator=g, dtype=DT),
    )
    explicit = mmd.regression_mmd((mean, std), y, x, eps=eps, bandwidth_y=median_heuristic(y),
                                  bandwidth_z=median_heuristic(x))  # fmt: skip
    assert torch.equal(mmd.regression_mmd((mean, std), y, x, eps=eps), explicit)
    quantile = mmd.regression_mmd((mean, std), y, form="quantile", eps=eps)
    assert torch.equal(quantile, mmd.regression_mmd((mean, std), y, form="quantile", eps=eps,
                                                    bandwidth_y=UNIFORM_MEDIAN_SQ_DIST))  # fmt: skip
    _, probs, labels, xc = _classes(n=30)
    assert torch.equal(
        mmd.classification_mmd(probs, labels, xc),
        mmd.classification_mmd(probs, labels, xc, bandwidth_y=2.0, bandwidth_z=median_heuristic(xc)),
    )
    conf = probs.max(-1).values
    assert torch.equal(
        mmd.classification_mmd(probs, labels, form="top_label"),
        mmd.classification_mmd(
            probs, labels, form="top_label", bandwidth_y=2.0, bandwidth_z=median_heuristic(conf)
        ),
    )
