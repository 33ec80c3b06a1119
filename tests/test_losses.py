"""The nn.Module losses equal the functions they wrap, check their options up front, and say when a
kernel makes them vanish."""

import warnings

import pytest
import torch

from kcal.baselines import ece_kde, mmce
from kcal.kernels import median_heuristic
from kcal.losses import DegenerateKernelWarning, ECEKDELoss, MMCELoss, MMDCalibrationLoss
from kcal.mmd import classification_mmd, regression_mmd

from .data.conftest import needs

DT = torch.float64


def test_regression_loss_equals_regression_mmd_and_is_differentiable():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(20, 3, generator=g, dtype=DT), torch.randn(20, generator=g, dtype=DT)
    mean = torch.randn(20, generator=g, dtype=DT).requires_grad_()
    std = (torch.rand(20, generator=g, dtype=DT) + 0.5).requires_grad_()
    eps = torch.randn(8, 20, generator=g, dtype=DT)
    for form in ("individual", "quantile", "marginal"):
        loss = MMDCalibrationLoss(form=form, bandwidth_y=1.0, bandwidth_z=4.0)
        value = loss((mean, std), y, x, eps=eps)
        expected = regression_mmd((mean, std), y, x, form=form, bandwidth_y=1.0, bandwidth_z=4.0, eps=eps)
        assert torch.equal(value, expected)
        (g_mean,) = torch.autograd.grad(value, mean)
        assert torch.isfinite(g_mean).all() and g_mean.abs().sum() > 0
    a = MMDCalibrationLoss(generator=torch.Generator().manual_seed(3), bandwidth_z=4.0)
    b = MMDCalibrationLoss(generator=torch.Generator().manual_seed(3), bandwidth_z=4.0)
    assert torch.equal(a((mean, std), y, x), b((mean, std), y, x))


def test_classification_losses_equal_their_functions():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(24, 3, generator=g, dtype=DT)
    probs, labels, x = (
        torch.softmax(logits, -1),
        torch.randint(0, 3, (24,), generator=g),
        torch.randn(24, 2, dtype=DT),
    )
    for form in ("canonical", "top_label", "marginal", "individual"):
        loss = MMDCalibrationLoss(form=form, task="classification", bandwidth_y=0.1, bandwidth_z=2.0)
        expected = classification_mmd(probs, labels, x, form=form, bandwidth_y=0.1, bandwidth_z=2.0)
        assert torch.equal(loss(probs, labels, x), expected)
    assert torch.equal(MMCELoss()(probs, labels), mmce(probs, labels))
    assert torch.equal(MMCELoss(scaling="authors")(probs, labels), mmce(probs, labels, scaling="authors"))
    assert torch.equal(ECEKDELoss()(probs, labels), ece_kde(probs, labels))
    with pytest.raises(ValueError, match="softmax"):
        MMDCalibrationLoss(form="canonical", task="classification")(logits, labels)


def test_loss_options_are_checked_in_the_constructor():
    with pytest.raises(ValueError, match="valid names"):
        MMDCalibrationLoss(form="indivdual")
    with pytest.raises(ValueError, match="valid names"):
        MMDCalibrationLoss(form="quantile", task="classification")
    with pytest.raises(ValueError, match="valid"):
        MMDCalibrationLoss(task="ranking")
    with pytest.raises(ValueError, match="bandwidth_z"):
        MMDCalibrationLoss(bandwidth_z=-1.0)
    with pytest.raises(ValueError, match="valid names"):
        MMDCalibrationLoss(kernel_z="gauss")
    # an option the estimator does not take fails here, not at the first batch
    assert MMDCalibrationLoss(validate_args=False).options == {"validate_args": False}  # regression too
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['num_samplez'\]; valid: \['kernel_y'"):
        MMDCalibrationLoss(num_samplez=3)
    with pytest.raises(TypeError, match="bandwidth_x is now called bandwidth_z"):
        MMDCalibrationLoss(bandwidth_x=1.0)
    assert MMDCalibrationLoss(task="classification", form="canonical", validate_args=False).options == {
        "validate_args": False
    }
    with pytest.raises(ValueError, match="kumar"):
        MMCELoss(scaling="paper")


@pytest.fixture(scope="module")
def crime_batch():
    """64 standardised training rows of crime (102 features) and Gaussian forecasts near their labels."""
    from kcal.data import load

    d = load("crime")
    x, y = d.train.x[:64].to(DT), d.train.y[:64].to(DT)
    g = torch.Generator().manual_seed(0)
    mean = y + 0.1 * torch.randn(64, generator=g, dtype=DT)
    return x, y, mean, torch.full((64,), 0.2, dtype=DT)


def _grad_norm(loss, crime_batch):
    x, y, mean, std = crime_batch
    mean, std = mean.clone().requires_grad_(), std.clone().requires_grad_()
    value = loss((mean, std), y, x)
    value.backward()
    return float(value.detach()), float(torch.cat([mean.grad, std.grad]).norm())


@needs("crime")
def test_default_loss_acts_on_standardised_high_dimensional_rows(crime_batch):
    """With no bandwidth given the x-kernel follows the data (median heuristic); bandwidth_z=1 vanishes."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateKernelWarning)  # the default never warns here
        _, default = _grad_norm(MMDCalibrationLoss(generator=torch.Generator().manual_seed(0)), crime_batch)
        _, wide = _grad_norm(MMDCalibrationLoss(bandwidth_z=100.0, generator=torch.Generator().manual_seed(0)),
                             crime_batch)  # fmt: skip
    with pytest.warns(DegenerateKernelWarning):
        _, fixed = _grad_norm(MMDCalibrationLoss(bandwidth_z=1.0, generator=torch.Generator().manual_seed(0)),
                              crime_batch)  # fmt: skip
    assert fixed < 1e-10 < 1e-3 < wide
    assert 0.2 * wide < default < 5 * wide  # the gradient's size at bandwidth_z=100, not 1e-14


@needs("crime")
def test_a_degenerate_kernel_warns_once_per_loss_instance_with_its_numbers(crime_batch):
    x, y, mean, std = crime_batch
    median = median_heuristic(x)
    loss = MMDCalibrationLoss(bandwidth_z=1.0, check_every=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            loss((mean, std), y, x)
    found = [w for w in caught if issubclass(w.category, DegenerateKernelWarning)]
    assert len(found) == 1
    text = str(found[0].message)
    assert "bandwidth_z" in text and "bandwidth 1 " in text and f"{median:.4g}" in text
    assert "median heuristic" in text and "\n" not in text
    with pytest.warns(DegenerateKernelWarning):  # a new instance warns again
        MMDCalibrationLoss(bandwidth_z=1.0)((mean, std), y, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DegenerateKernelWarning)
        MMDCalibrationLoss(bandwidth_z=1.0, check_kernels=False)((mean, std), y, x)
        MMDCalibrationLoss(bandwidth_z=median)((mean, std), y, x)


def test_a_degenerate_classification_kernel_warns_too():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(40, 50, generator=g, dtype=DT)
    probs, labels = torch.softmax(torch.randn(40, 3, generator=g, dtype=DT), -1), torch.randint(0, 3, (40,))
    with pytest.warns(DegenerateKernelWarning, match="bandwidth_z"):
        MMDCalibrationLoss(task="classification", bandwidth_z=0.5)(probs, labels, x)
