"""kcal's official ECE-KDE (``flavour="authors"``) is the authors' ECE-KDE regulariser: value, bandwidth rule
and gradient, on random float32 forecasts as their training computes them (rows 8-64, classes 2-7)."""

import pytest
import torch

from kcal.baselines import ece_kde, select_bandwidth

from .authors import load

SHAPES = [(8, 2), (16, 3), (32, 5), (64, 2), (64, 7)]
SCALES = [0.3, 2.0, 6.0]  # diffuse to confident forecasts


def _batches(seed=0):
    g = torch.Generator().manual_seed(seed)
    for n, m in SHAPES:
        for scale in SCALES:
            logits = (scale * torch.randn(n, m, generator=g)).requires_grad_()
            yield logits, torch.randint(0, m, (n,), generator=g)


def test_official_ece_kde_is_the_authors_regulariser(equivalence):
    """Value (float32 rtol 1e-5) and gradient w.r.t. the logits (rtol 1e-4) of the authors' ``ECEKDEMixedLoss``
    regulariser and kcal's; the bandwidth each picks is the same grid value."""
    losses = load("src.metrics.losses")
    utils = load("src.utils")
    theirs_loss = losses.ECEKDEMixedLoss(loss_scalers={"nll": 1.0, "ece_kde": 1.0})
    n_cases = 0
    for logits, y in _batches():
        probs = torch.softmax(logits, -1)
        assert select_bandwidth(probs, fallback="authors") == pytest.approx(
            float(max(utils.get_bandwidth(probs.detach()), 1e-5)), rel=1e-6
        )
        theirs = theirs_loss.ece_kde_loss(logits, y)
        ours = ece_kde(probs, y, flavour="authors")
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
        (g_theirs,) = torch.autograd.grad(theirs, logits)
        (g_ours,) = torch.autograd.grad(ece_kde(torch.softmax(logits, -1), y, flavour="authors"), logits)
        torch.testing.assert_close(g_ours, g_theirs, rtol=1e-4, atol=1e-7)
        n_cases += 1
    equivalence(n_cases)


def test_kcal_rule_is_not_the_authors(equivalence):
    """The comparison can fail: kcal's own rule (``flavour="kcal"``, the clean protocol's) differs from the
    authors' on these batches, in the bandwidth and the value."""
    losses = load("src.metrics.losses")
    theirs_loss = losses.ECEKDEMixedLoss()
    differ = 0
    cases = 0
    for logits, y in _batches(seed=1):
        probs = torch.softmax(logits.detach(), -1)
        theirs = theirs_loss.ece_kde_loss(logits.detach(), y)
        ours = ece_kde(probs, y, flavour="kcal")
        differ += not torch.allclose(ours, theirs, rtol=1e-5, atol=1e-7)
        cases += 1
    assert differ >= cases // 2, (differ, cases)
    equivalence(0, [f"kcal's rule (clean protocol) differs on {differ} of {cases} batches, as intended"])
