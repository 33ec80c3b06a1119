"""Tests for kcal.recalibration.temperature (classification temperature scaling)."""

import pytest
import torch

from kcal.recalibration import IdentityClassRecalibrator, TemperatureScaler, make_class_recalibrator


def _synthetic(t_true, n=5000, m=10, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(n, m, generator=g)
    labels = torch.multinomial(torch.softmax(z / t_true, dim=-1), 1, generator=g).squeeze(-1)
    return z, labels


@pytest.mark.parametrize("t_true", [2.5, 0.6])
def test_recovers_known_temperature(t_true):
    z, labels = _synthetic(t_true)
    ts = TemperatureScaler().fit(z, labels)
    assert ts.temperature == pytest.approx(t_true, rel=0.05)
    assert ts.final_loss_ < ts.initial_loss_
    p = ts.transform(z)
    assert p.dtype == z.dtype
    torch.testing.assert_close(p.sum(-1), torch.ones(len(z)))
    torch.testing.assert_close(p, torch.softmax(z / ts.temperature, dim=-1))
    # accuracy (argmax) unchanged
    assert torch.equal(p.argmax(-1), z.argmax(-1))


def test_works_inside_inference_mode():
    z, labels = _synthetic(2.5, seed=1)
    ref = TemperatureScaler().fit(z, labels).temperature
    with torch.inference_mode():
        zi, li = z.clone(), labels.clone()  # inference tensors, as in a Lightning test hook
        assert zi.is_inference()
        ts = TemperatureScaler().fit(zi, li)
        p = ts.transform(zi)
    assert ts.temperature == pytest.approx(ref, rel=1e-6)
    assert ts.temperature == pytest.approx(2.5, rel=0.05)
    assert torch.equal(p.argmax(-1), z.argmax(-1))
    # also under no_grad
    with torch.no_grad():
        assert TemperatureScaler().fit(z, labels).temperature == pytest.approx(ref, rel=1e-6)


def test_fit_from_probs_exact_flavour():
    z, labels = _synthetic(0.6, seed=2)
    probs = torch.softmax(z, dim=-1)
    ts = TemperatureScaler().fit_from_probs(probs, labels)
    # log-softmax differs from z by a per-row constant, so T is the same as fitting on z
    assert ts.temperature == pytest.approx(TemperatureScaler().fit(z, labels).temperature, rel=1e-3)
    out = ts.transform_probs(probs)
    torch.testing.assert_close(out, torch.softmax(torch.log(probs + 1e-10) / ts.temperature, dim=-1))
    assert torch.equal(out.argmax(-1), probs.argmax(-1))


@pytest.mark.parametrize("t_true", [1.3, 0.7])
def test_official_flavour_fits_by_the_authors_loop(t_true, one_thread):
    """Adam (lr 1e-3) + ReduceLROnPlateau from T = 1 on float32 log(p + 1e-10): near LBFGS's optimum but short of
    it, in float32, and applied as softmax(log(p + 1e-10) / T) with T a float32 tensor."""
    z, labels = _synthetic(t_true, n=300, m=3, seed=5, scale=2.0)
    probs = torch.softmax(z, dim=-1)
    official = make_class_recalibrator("temperature", flavour="official")
    assert isinstance(official, TemperatureScaler) and official.optimizer == "adam_plateau"
    official.fit_from_probs(probs, labels)
    exact = make_class_recalibrator("temperature").fit_from_probs(probs, labels)
    assert exact.optimizer == "lbfgs"
    t = official.temperature
    assert t == float(torch.tensor(t, dtype=torch.float32))  # a float32 value
    assert t != exact.temperature and t == pytest.approx(exact.temperature, rel=0.05)
    assert official.final_loss_ >= exact.final_loss_ - 1e-6  # LBFGS reaches the optimum
    assert official.final_loss_ < official.initial_loss_
    assert 10 < official.iterations_ < 100_000  # stopped by the learning rate (ten halvings), not the cap
    out = official.transform_probs(probs)
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.softmax(torch.log(probs + 1e-10) / torch.full((1, 1), t), dim=-1))
    assert torch.equal(out.argmax(-1), probs.argmax(-1))
    # float64 input: the loop runs in float64
    t64 = make_class_recalibrator("temperature", flavour="official").fit_from_probs(probs.double(), labels)
    assert t64.temperature == pytest.approx(t, rel=1e-3)


def test_identity_and_factory():
    z, labels = _synthetic(2.5, seed=3, n=200)
    ident = make_class_recalibrator("none").fit(z, labels)
    assert isinstance(ident, IdentityClassRecalibrator)
    assert ident.temperature == 1.0
    torch.testing.assert_close(ident.transform(z), torch.softmax(z, dim=-1))
    probs = torch.softmax(z, dim=-1)
    assert ident.transform_probs(probs) is probs
    assert isinstance(make_class_recalibrator("temperature"), TemperatureScaler)
    assert isinstance(make_class_recalibrator("none", flavour="official"), IdentityClassRecalibrator)
    with pytest.raises(ValueError) as exc:
        make_class_recalibrator("vector_scaling")
    assert "temperature" in str(exc.value) and "none" in str(exc.value)
    with pytest.raises(ValueError, match="flavour"):
        make_class_recalibrator("temperature", flavour="authors")


def test_input_validation_and_degenerate_fit():
    ts = TemperatureScaler()
    with pytest.raises(ValueError):
        ts.fit(torch.randn(10), torch.zeros(10, dtype=torch.long))
    with pytest.raises(ValueError):
        ts.fit(torch.randn(10, 3), torch.zeros(9, dtype=torch.long))
    with pytest.raises(ValueError, match="optimizer"):
        TemperatureScaler(optimizer="sgd")
    # perfectly separable logits: CE keeps falling as T -> 0; the result stays finite and in range
    z = torch.tensor([[5.0, 0.0], [0.0, 5.0]]).repeat(50, 1)
    labels = torch.tensor([0, 1]).repeat(50)
    with pytest.warns(UserWarning):
        ts = TemperatureScaler(max_iter=100, min_temperature=0.5).fit(z, labels)
    assert ts.temperature == pytest.approx(0.5)
    assert torch.isfinite(ts.transform(z)).all()


def test_a_clipped_temperature_warns_once_per_run():
    """One run fits the validation logits twice (evaluation, figures) and the official probabilities once;
    ``fit_from_probs`` reports a clip quietly, whichever the optimiser (LBFGS here, to keep the test fast)."""
    import warnings

    from kcal.recalibration.temperature import TemperatureClippedWarning

    z = torch.tensor([[5.0, 0.0], [0.0, 5.0]]).repeat(50, 1)
    labels = torch.tensor([0, 1]).repeat(50)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exact = TemperatureScaler(min_temperature=0.37).fit(z, labels)
        TemperatureScaler(min_temperature=0.37).fit_from_probs(torch.softmax(z, -1), labels)
        TemperatureScaler(min_temperature=0.37).fit(z, labels)
    clipped = [w for w in caught if issubclass(w.category, TemperatureClippedWarning)]
    assert len(clipped) == 1 and "clipped to [0.37" in str(clipped[0].message)
    assert exact.temperature == pytest.approx(0.37) and exact.unclipped_temperature_ < 0.37
