"""kcal's regularisers, as its objectives call them under the official protocol, are the authors': value
and gradient of the regression MMD (RBF and tanh kernels on y, Z = x, fed the same standard-normal draws),
the classification MMD (forecast marginalised analytically, Z = x) and MMCE (their "authors" scaling), on
random batches (rows 8-64, features 3-100, classes 2-7) in float64 and in float32 (the authors train in
float32). ECE-KDE is compared in ``test_ece_kde.py``.

How the authors draw: ``GMMKernelLoss`` calls ``Normal.rsample((S,))``, which takes its noise from
``torch.distributions.normal._standard_normal((S, n, 1), ...)`` and returns ``loc + eps * scale``; the
tests hand that function kcal's ``eps`` ``(S, n)`` (:func:`authors_draws`), so both sides see the same
draws, row i's s-th draw being ``eps[s, i]`` on both.

Float64: the authors' code builds some constants with the default dtype (``torch.eye`` of the class
kernel, ``1e-5`` of MMCE's denominators); their float64 cases run with the default dtype float64
(:func:`default_dtype`), otherwise those constants are float32 and their float64 result carries a float32
rounding (measured: 1.5e-8 relative on the classification MMD with ``bandwidth_y=1``, up to 2e-7 on MMCE).
Their classification MMD's target-target term stays float32 whatever the default (``F.one_hot(y).float()``):
its float64 value gets an extra atol of one float32 rounding of exp(-2 / bandwidth_y), 2^-23 exp(-2 / bw_y)
(measured 2.2e-9 at bandwidth_y = 1); its gradient (that term has none) is held to the float64 tolerance.

Each comparison also shows that it can fail: kcal with another option or input (bandwidth, draws,
threshold, scale, MMCE scaling) lands outside the tolerance on every case.
"""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.distributions.normal as torch_normal

from kcal.baselines import mmce
from kcal.kernels import median_heuristic
from kcal.mmd import classification_mmd, regression_mmd
from kcal.objectives import Objective

from .authors import load

SHAPES = [(8, 3), (16, 10), (32, 100), (64, 7)]  # (rows, features)
CLASS_SHAPES = [(8, 3, 2), (16, 10, 3), (32, 100, 5), (64, 7, 7), (24, 5, 2)]  # (rows, features, classes)
NUM_SAMPLES = 10
MIN_STD = 0.05  # the authors' floor on the forecast std (gmm_params_to_dist), kcal's model.min_std
DTYPES = [torch.float64, torch.float32]
# (rtol, atol) of values and of gradients (atol relative to the largest gradient entry)
TOL = {torch.float64: (1e-10, 1e-13), torch.float32: (1e-4, 1e-6)}


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    """Run the authors' code with ``dtype`` as torch's default (their constants follow it)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextlib.contextmanager
def authors_draws(eps: torch.Tensor):
    """While open, ``Normal.rsample((S,))`` on a (n, 1) batch draws ``eps`` ``(S, n)`` (once, checked)."""
    original = torch_normal._standard_normal
    calls = []

    def standard_normal(shape, dtype, device):
        assert tuple(shape) == (eps.shape[0], eps.shape[1], 1), shape
        assert not calls, "the authors' MMD drew twice"
        calls.append(shape)
        return eps.reshape(tuple(shape)).to(dtype=dtype, device=device)

    torch_normal._standard_normal = standard_normal
    try:
        yield calls
    finally:
        torch_normal._standard_normal = original
    assert len(calls) == 1, "the authors' MMD did not draw"


def assert_close(ours, theirs, dtype, what, grad_scale=None):
    rtol, atol = TOL[dtype]
    atol = atol if grad_scale is None else atol * float(grad_scale)
    torch.testing.assert_close(ours, theirs, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def differs(ours, theirs, dtype, grad_scale=None) -> bool:
    rtol, atol = TOL[dtype]
    atol = atol if grad_scale is None else atol * float(grad_scale)
    return not torch.allclose(ours, theirs, rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------------------------------
# Regression MMD
# ----------------------------------------------------------------------------------------------------
def _regression_batches(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    for n, d in SHAPES:
        x = torch.randn(n, d, generator=g, dtype=torch.float64)
        y = 1.5 * torch.randn(n, generator=g, dtype=torch.float64)
        mean = y + 0.7 * torch.randn(n, generator=g, dtype=torch.float64)
        raw = 1.2 * torch.randn(n, generator=g, dtype=torch.float64) - 1.0  # some below log(0.05): the floor
        eps = torch.randn(NUM_SAMPLES, n, generator=g, dtype=torch.float64)
        yield tuple(t.to(dtype) for t in (x, y, mean, raw, eps))


def _kcal_regression(params, x, y, mean, raw, eps, general=False):
    """kcal's regulariser and its gradient w.r.t. (mean, raw log-std): the objective's call (its fast path),
    or ``regression_mmd`` itself (``general``)."""
    mean, raw = mean.detach().requires_grad_(), raw.detach().requires_grad_()
    forecast = (mean, torch.exp(raw).clamp_min(MIN_STD))  # kcal's GaussianMLP head
    if general:
        value = regression_mmd(forecast, y, x, **params, eps=eps)
    else:
        value = Objective("nll_mmd", "regression", "mmd", 1.0, params).regularization(forecast, x, y, eps=eps)
    return (value.detach(), *torch.autograd.grad(value, (mean, raw)))


def _authors_regression(loss, x, y, mean, raw, eps, dtype):
    """Their ``GMMKernelLoss`` on their network's output layout ``(mean, exp(raw), prob)``, (n, 1, 1) each,
    y as their datamodule gives it, (n, 1)."""
    mean, raw = mean.detach().requires_grad_(), raw.detach().requires_grad_()
    n = mean.shape[0]
    preds = (mean.view(n, 1, 1), torch.exp(raw).view(n, 1, 1), torch.ones(n, 1, 1, dtype=mean.dtype))
    with default_dtype(dtype), authors_draws(eps):
        value = loss(x, y.view(n, 1), preds)
    return (value.detach(), *torch.autograd.grad(value, (mean, raw)))


def _compare_regression(losses, dtype, kernel_y, bandwidth_y, perturbations, seed):
    cases = 0
    for x, y, mean, raw, eps in _regression_batches(dtype, seed):
        h = median_heuristic(x)  # what kcal's "median" bandwidth_z resolves to (here over the batch)
        authors_y = {"rbf": "rbf", "tanh_decision": "tanh"}[kernel_y]
        theirs_loss = losses.GMMKernelLoss(operands={"x": "rbf", "y": authors_y}, num_samples=NUM_SAMPLES,
                                           bandwidths={"x": h, "y": bandwidth_y})  # fmt: skip
        params = {"form": "individual", "kernel_y": kernel_y, "bandwidth_y": bandwidth_y, "kernel_z": "rbf",
                  "bandwidth_z": h, "num_samples": NUM_SAMPLES, "pairing": "index"}  # fmt: skip
        if kernel_y == "tanh_decision":
            params |= {"threshold": 0.0, "scale": 1.0}  # c = 0: the authors' median-centred target
        theirs = _authors_regression(theirs_loss, x, y, mean, raw, eps, dtype)
        scale = max(float(theirs[1].abs().max()), float(theirs[2].abs().max()))
        for general in (False, True):
            ours = _kcal_regression(params, x, y, mean, raw, eps, general)
            where = f"n={x.shape[0]} d={x.shape[1]} {dtype} general={general}"
            assert_close(ours[0], theirs[0], dtype, f"value, {where}")
            assert_close(ours[1], theirs[1], dtype, f"d/d mean, {where}", scale)
            assert_close(ours[2], theirs[2], dtype, f"d/d log-std, {where}", scale)
        # the comparison can fail: another option or other draws land outside the tolerance
        for name, change in perturbations.items():
            p, e = change(dict(params), eps)
            other = _kcal_regression(p, x, y, mean, raw, e)
            moved = differs(other[0], theirs[0], dtype) or differs(other[1], theirs[1], dtype, scale)
            assert moved, f"kcal with {name} still equals the authors (n={x.shape[0]}, {dtype})"
        cases += 1
    return cases


def _other_draws(p, eps):
    return p, eps.roll(1, dims=1)  # row i gets row i-1's draws


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_regression_mmd_rbf_is_the_authors(dtype, equivalence):
    """``GMMKernelLoss(operands={x: rbf, y: rbf})`` vs kcal's ``nll_mmd`` regulariser (the objective's call and
    ``regression_mmd``), ``bandwidth_y`` 1.0 (the authors' config) and 0.1 (their constructor default),
    ``bandwidth_z`` the median heuristic; value and gradient w.r.t. the mean and the raw log-std."""
    losses = load("src.metrics.losses")
    perturb = {
        "bandwidth_y x 2": lambda p, e: ({**p, "bandwidth_y": 2 * p["bandwidth_y"]}, e),
        "bandwidth_z x 2": lambda p, e: ({**p, "bandwidth_z": 2 * p["bandwidth_z"]}, e),
        "other draws": _other_draws,
    }
    cases = sum(
        _compare_regression(losses, dtype, "rbf", bw, perturb, seed) for seed, bw in enumerate((1.0, 0.1))
    )
    equivalence(cases)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_regression_mmd_tanh_is_the_authors(dtype, equivalence):
    """``GMMKernelLoss(operands={x: rbf, y: tanh})`` (``tanh(u) tanh(v)``, no threshold, bandwidth ignored) vs
    kcal's ``nll_mmd_tanh`` regulariser with ``threshold`` 0 (the official protocol's median-centred target)
    and ``scale`` 1."""
    losses = load("src.metrics.losses")
    perturb = {
        "threshold 0.5": lambda p, e: ({**p, "threshold": 0.5}, e),
        "scale 2": lambda p, e: ({**p, "scale": 2.0}, e),
        "bandwidth_z x 2": lambda p, e: ({**p, "bandwidth_z": 2 * p["bandwidth_z"]}, e),
        "other draws": _other_draws,
    }
    equivalence(_compare_regression(losses, dtype, "tanh_decision", 1.0, perturb, seed=7))


# ----------------------------------------------------------------------------------------------------
# Classification MMD
# ----------------------------------------------------------------------------------------------------
def _class_batches(dtype, seed, scales=(0.5, 3.0)):
    g = torch.Generator().manual_seed(seed)
    for n, d, m in CLASS_SHAPES:
        for s in scales:
            x = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)
            logits = (s * torch.randn(n, m, generator=g, dtype=torch.float64)).to(dtype)
            yield x, logits, torch.randint(0, m, (n,), generator=g)


def _grad(fn, logits, *args, **kwargs):
    """``fn(logits, *args, **kwargs)`` and its gradient w.r.t. the logits."""
    logits = logits.detach().requires_grad_()
    value = fn(logits, *args, **kwargs)
    return value.detach(), torch.autograd.grad(value, logits)[0]


def _kcal_class_mmd(logits, y, x, **params):
    return classification_mmd(torch.softmax(logits, -1), y, x, **params)


def _kcal_mmce(logits, y, **params):
    return mmce(torch.softmax(logits, -1), y, **params)


def _objective_regulariser(logits, objective, x, y):
    return objective.regularization(logits, x, y)


def _authors_class_mmd(logits, loss, x, y):
    return loss(x, y, logits)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_classification_mmd_is_the_authors(dtype, equivalence):
    """``ClassificationKernelLoss(operands={x: rbf, y: rbf})`` vs kcal's ``xe_mmd`` regulariser (the objective's
    call on logits, and ``classification_mmd`` on probabilities), ``bandwidth_y`` 0.01 (the authors' HEAD
    experiment), 0.1 (kcal's config) and 1.0 (a class kernel far from the identity), ``bandwidth_z`` the
    median heuristic; value and gradient w.r.t. the logits."""
    losses = load("src.metrics.losses")
    cases = 0
    for x, logits, y in _class_batches(dtype, seed=11):
        h = median_heuristic(x)
        for bw_y in (0.01, 0.1, 1.0):
            theirs_loss = losses.ClassificationKernelLoss(operands={"x": "rbf", "y": "rbf"},
                                                          bandwidths={"x": h, "y": bw_y})  # fmt: skip
            with default_dtype(dtype):
                theirs = _grad(_authors_class_mmd, logits, theirs_loss, x, y)
            scale = float(theirs[1].abs().max())
            params = {"form": "individual", "bandwidth_y": bw_y, "bandwidth_z": h}
            objective = Objective("xe_mmd", "classification", "mmd", 1.0, params)
            # their target-target term is float32 whatever the dtype (``F.one_hot(y).float()``): in float64 the
            # value carries one float32 rounding of the class kernel's off-diagonal exp(-2 / bw_y)
            t32 = 2.0**-23 * math.exp(-2.0 / bw_y) if dtype == torch.float64 else 0.0
            for path, ours in {
                "objective": _grad(_objective_regulariser, logits, objective, x, y),
                "classification_mmd": _grad(_kcal_class_mmd, logits, y, x, **params),
            }.items():
                where = f"{path} n={x.shape[0]} m={logits.shape[1]} bw_y={bw_y} {dtype}"
                torch.testing.assert_close(ours[0], theirs[0], rtol=TOL[dtype][0], atol=TOL[dtype][1] + t32,
                                           msg=lambda msg, w=where: f"value, {w}: {msg}")  # fmt: skip
                assert_close(ours[1], theirs[1], dtype, f"gradient, {where}", scale)
            cases += 1
            # the comparison can fail: another x bandwidth (and, where the class kernel is not numerically
            # the identity, another class bandwidth) lands outside the tolerance
            changes = {"bandwidth_z x 2": {**params, "bandwidth_z": 2 * h}}
            if bw_y == 1.0:
                changes["bandwidth_y 0.5"] = {**params, "bandwidth_y": 0.5}
            for name, p in changes.items():
                other = _grad(_kcal_class_mmd, logits, y, x, **p)
                assert differs(other[0], theirs[0], dtype) or differs(other[1], theirs[1], dtype, scale), name
    equivalence(cases)


# ----------------------------------------------------------------------------------------------------
# MMCE
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mmce_is_the_authors(dtype, equivalence):
    """``MMCEMixedLoss.torch_mmce_w_loss`` (logits) vs kcal's ``xe_mmce`` regulariser (the objective's call with
    the official config's ``bandwidth=0.4, scaling="authors"``, and ``mmce`` on probabilities); value and
    gradient w.r.t. the logits. Two more batches, one where every row is right and one where every row is
    wrong, give exactly 0 with a zero gradient on both sides: a comparison of two zeros, asserted but not
    counted."""
    losses = load("src.metrics.losses")
    theirs_fn = losses.MMCEMixedLoss(loss_scalers={"nll": 1.0, "mmce": 1.0}).torch_mmce_w_loss
    params = {"bandwidth": 0.4, "scaling": "authors"}
    objective = Objective("xe_mmce", "classification", "mmce", 1.0, params)
    cases = zeros = 0
    batches = list(_class_batches(dtype, seed=5, scales=(0.5, 2.0, 6.0)))
    x0, lg0, _ = batches[0]
    all_right, all_wrong = lg0.argmax(-1), (lg0.argmax(-1) + 1) % lg0.shape[1]
    batches += [(x0, lg0, all_right), (x0, lg0, all_wrong)]
    for x, logits, y in batches:
        with default_dtype(dtype):
            theirs = _grad(theirs_fn, logits, y)
        scale = float(theirs[1].abs().max())
        for path, ours in {
            "objective": _grad(_objective_regulariser, logits, objective, x, y),
            "mmce": _grad(_kcal_mmce, logits, y, **params),
        }.items():
            where = f"{path} n={x.shape[0]} m={logits.shape[1]} {dtype}"
            assert_close(ours[0], theirs[0], dtype, f"value, {where}")
            assert_close(ours[1], theirs[1], dtype, f"gradient, {where}", scale or 1.0)
        if float(theirs[0]) == 0.0:
            assert scale == 0.0
            zeros += 1
            continue
        cases += 1
        # the comparison can fail: Kumar et al.'s scaling, or another bandwidth
        for name, p in {"scaling kumar": {**params, "scaling": "kumar"},
                        "bandwidth 0.2": {**params, "bandwidth": 0.2}}.items():  # fmt: skip
            other = _grad(_kcal_mmce, logits, y, **p)
            assert differs(other[0], theirs[0], dtype) or differs(other[1], theirs[1], dtype, scale), name
    assert zeros == 2
    equivalence(cases)  # the two all-right / all-wrong batches (0 == 0) are checked but not counted


def test_mmce_where_the_authors_give_nan(equivalence):
    """A named difference: where the authors' MMCE value v is slightly negative (their ``+ 1e-5`` in the
    denominators when the weighted embeddings of the right and wrong rows cancel, e.g. identical confidences
    r with (1 - r) / m = r / k for m right and k wrong rows), ``sqrt(v + 1e-10)`` is NaN and so is their
    gradient (their training step would be NaN); kcal clamps v at 0: ``sqrt(1e-10) = 1e-5`` with a zero
    gradient (:func:`kcal.baselines.mmce` documents it). Their v here: -2.8e-7 (3 rows) and -1.7e-8 (6 rows)."""
    losses = load("src.metrics.losses")
    theirs_fn = losses.MMCEMixedLoss().torch_mmce_w_loss
    batches = [(3, [0, 0, 1]), (6, [0, 0, 0, 0, 1, 2])]  # uniform forecasts over 3 classes: r = 1/3, argmax 0
    for dtype in DTYPES:
        for n, labels in batches:
            logits, y = torch.zeros(n, 3, dtype=dtype), torch.tensor(labels)
            with default_dtype(dtype):
                theirs = _grad(theirs_fn, logits, y)
            ours = _grad(_kcal_mmce, logits, y, bandwidth=0.4, scaling="authors")
            assert torch.isnan(theirs[0]) and torch.isnan(theirs[1]).all()
            torch.testing.assert_close(ours[0], torch.tensor(1e-5, dtype=dtype))
            assert torch.count_nonzero(ours[1]) == 0
    equivalence(0, [f"MMCE where their value is NaN (v < 0 from their 1e-5 terms): kcal gives 1e-5 with a zero "
                    f"gradient ({len(batches) * len(DTYPES)} batches of uniform forecasts)"])  # fmt: skip
