"""The nn.Module losses equal the functions they wrap and check their options up front."""

import pytest
import torch

from kcal.baselines import ece_kde, mmce
from kcal.losses import ECEKDELoss, MMCELoss, MMDCalibrationLoss
from kcal.mmd import classification_mmd, regression_mmd

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
    with pytest.raises(ValueError, match="kumar"):
        MMCELoss(scaling="paper")
