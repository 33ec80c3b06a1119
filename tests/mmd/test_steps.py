"""kcal.mmd.steps.MMDStep: the training step's regulariser gives the general functions' values and gradients
to rounding (so every run's numbers are those of kcal.mmd), with or without the batch constants built
ahead (one batch or a stack of them), takes its fast path only where it may, and falls back to the general
function otherwise."""

import math

import pytest
import torch

from kcal import kernels
from kcal.mmd import MMDStep, classification_mmd, regression_mmd
from kcal.mmd import fused as mmd_fused
from kcal.objectives import Objective

from ..common import reorder_tol


def _batch(n=24, d=7, m=3, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    y = torch.randn(n, generator=g, dtype=dtype)
    labels = torch.randint(0, m, (n,), generator=g)
    mean = torch.randn(n, generator=g, dtype=dtype).requires_grad_()
    raw = torch.randn(n, generator=g, dtype=dtype).requires_grad_()
    logits = torch.randn(n, m, generator=g, dtype=dtype).requires_grad_()
    return x, y, labels, mean, raw, logits


def _value_and_grads(fn, leaves):
    value = fn()
    return value.detach(), torch.autograd.grad(value, leaves)


def _close(a, b, dtype):
    """Equal to rounding: the step's exp2 and its fused gradient against the general function's order."""
    tol = {"rtol": 2e-5, "atol": 1e-7} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-15}
    torch.testing.assert_close(a, b, **tol)


REGRESSION = [
    {"form": "individual", "kernel_y": "rbf", "bandwidth_y": 1.0, "kernel_z": "rbf", "bandwidth_z": 3.0,
     "num_samples": 10, "pairing": "index"},
    {"bandwidth_y": 0.5, "bandwidth_z": 40.0, "num_samples": 3},
]  # fmt: skip


@pytest.mark.parametrize("options", REGRESSION)
@pytest.mark.parametrize("d", [2, 7])  # explicit differences (d <= 4) and the matmul expansion
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_regression_step_equals_regression_mmd(options, d, dtype):
    x, y, _, mean, raw, _ = _batch(d=d, dtype=dtype)
    step = MMDStep("regression", options)
    assert step.fast is not None
    std = lambda: torch.nn.functional.softplus(raw) + 0.05  # noqa: E731
    eps = torch.randn(options["num_samples"], x.shape[0], dtype=dtype)
    for noise in ("generator", "eps"):

        def kw(noise=noise):
            return {"eps": eps} if noise == "eps" else {"generator": torch.Generator().manual_seed(3)}

        a, ga = _value_and_grads(lambda kw=kw: step((mean, std()), y, x, **kw()), [mean, raw])
        b, gb = _value_and_grads(
            lambda kw=kw: regression_mmd((mean, std()), y, x, **options, **kw()), [mean, raw]
        )
        assert a.dtype == dtype
        _close(a, b, dtype)
        for u, v in zip(ga, gb, strict=True):
            _close(u, v, dtype)
        # the batch's constants built ahead give the same numbers: prepare() runs the very operations a
        # call without them runs, on the same shapes, so bit for bit on any CPU
        const = step.prepare(x, y)
        c, gc = _value_and_grads(
            lambda kw=kw, const=const: step((mean, std()), y, x, **kw(), const=const), [mean, raw]
        )
        assert torch.equal(c, a) and all(torch.equal(u, v) for u, v in zip(gc, ga, strict=True))


@pytest.mark.parametrize("kernel_y, bandwidth_y", [("rbf", 0.1), ("rbf", 2.0), ("delta", None)])
@pytest.mark.parametrize("d", [3, 9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_classification_step_equals_classification_mmd_bit_for_bit(kernel_y, bandwidth_y, d, dtype):
    """The step runs the general function's tensor operations (the x-kernel's distances, its exponential,
    AnalyticClassMMD) on the same shapes, only without its checks, so bit for bit on any CPU."""
    x, _, labels, _, _, logits = _batch(d=d, dtype=dtype)
    options = {"form": "individual", "kernel_y": kernel_y, "bandwidth_y": bandwidth_y, "bandwidth_z": 5.0}
    step = MMDStep("classification", options)
    assert step.fast is not None
    a, ga = _value_and_grads(lambda: step(logits, labels, x), [logits])
    b, gb = _value_and_grads(
        lambda: classification_mmd(torch.softmax(logits, -1), labels, x, **options, validate_args=False),
        [logits],
    )
    assert torch.equal(a, b) and torch.equal(ga[0], gb[0])
    with torch.no_grad():  # validation: no gradient wanted
        assert torch.equal(step(logits, labels, x), b)
    const = step.prepare(x, labels)
    c, gc = _value_and_grads(lambda: step(logits, labels, x, const=const), [logits])
    assert torch.equal(c, a) and torch.equal(gc[0], ga[0])


@pytest.mark.parametrize("task", ["regression", "classification"])
@pytest.mark.parametrize("d", [3, 9])
def test_constants_of_a_stack_of_batches_are_each_batchs_own(task, d):
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(5, 3, 16, d, generator=g), torch.randn(5, 3, 16, generator=g)
    if task == "classification":
        ys = torch.randint(0, 4, (5, 3, 16), generator=g)
    step = MMDStep(task, {"bandwidth_y": 0.7, "bandwidth_z": 6.0})
    stack = step.prepare(xs, ys)
    assert stack.w.shape == (5, 3, 16, 16) and (stack.s_tt is None) == (task == "classification")
    for b in range(5):
        for i in range(3):
            one, at = step.prepare(xs[b, i], ys[b, i]), stack.at(b, i)
            torch.testing.assert_close(at.w, one.w, rtol=1e-6, atol=1e-7)
            if task == "regression":
                torch.testing.assert_close(at.s_tt, one.s_tt, rtol=1e-5, atol=1e-6)


def test_rbf_offdiag_is_the_rbf_gram_off_the_diagonal():
    """One matrix: the operations of kernels.rbf (so bit for bit on any CPU); a stack: one batched product,
    to rounding."""
    for d in (1, 4, 5, 30):
        x = torch.randn(16, d, dtype=torch.float64)
        w, ref = kernels.rbf_offdiag(x, 2.5), kernels.rbf(x, x, 2.5)
        off = ~torch.eye(16, dtype=torch.bool)
        assert torch.equal(w[off], ref[off]) and torch.all(w.diagonal() == 0)
        stack = kernels.rbf_offdiag(torch.stack([x, 2 * x]).unsqueeze(0), 2.5)  # (1, 2, 16, 16)
        assert stack.shape == (1, 2, 16, 16) and torch.all(stack.diagonal(dim1=-2, dim2=-1) == 0)
        torch.testing.assert_close(stack[0, 0], w, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(stack[0, 1], kernels.rbf_offdiag(2 * x, 2.5), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "task, options",
    [
        ("regression", {"bandwidth_y": 1.0, "bandwidth_z": None}),  # per-batch median heuristic
        ("regression", {"bandwidth_y": 1.0, "bandwidth_z": "median"}),  # unresolved: the general path says so
        ("regression", {"bandwidth_y": 1.0, "bandwidth_z": 2.0, "pairing": "cross"}),
        ("regression", {"form": "quantile", "bandwidth_y": 1.0, "bandwidth_z": 2.0}),
        ("regression", {"bandwidth_y": 1.0, "bandwidth_z": 2.0, "kernel_z": "laplacian"}),
        ("regression", {"bandwidth_y": 1.0, "bandwidth_z": 2.0, "features": [0, 1]}),
        ("classification", {"form": "canonical", "bandwidth_y": 0.1, "bandwidth_z": 2.0}),
        ("classification", {"bandwidth_y": None, "bandwidth_z": 2.0}),
    ],
)
def test_other_options_take_the_general_path(task, options):
    assert MMDStep(task, options).fast is None


def test_calls_the_fast_path_cannot_take_fall_back_with_the_same_value():
    x, y, labels, mean, raw, logits = _batch()
    std = torch.nn.functional.softplus(raw) + 0.05
    step = MMDStep("regression", {"bandwidth_y": 1.0, "bandwidth_z": 3.0, "num_samples": 4})
    eps = torch.randn(4, x.shape[0], dtype=x.dtype)
    normal = torch.distributions.Normal(mean, std)  # a Normal forecast: the very call to regression_mmd
    ref = regression_mmd((mean, std), y, x, bandwidth_y=1.0, bandwidth_z=3.0, eps=eps)
    assert torch.equal(step(normal, y, x, eps=eps), ref)
    xg = x.clone().requires_grad_()  # x that needs a gradient
    ref_g = regression_mmd((mean, std), y, xg, bandwidth_y=1.0, bandwidth_z=3.0, eps=eps)
    assert torch.equal(step((mean, std), y, xg, eps=eps), ref_g)
    with pytest.raises(ValueError, match="conditions on x"):
        step((mean, std), y, None, eps=eps)
    cstep = MMDStep("classification", {"bandwidth_y": 0.1, "bandwidth_z": 3.0})
    with pytest.raises(ValueError, match="conditions on x"):
        cstep(logits, labels, None)


def test_objectives_train_with_the_fast_path():
    reg = Objective("nll_mmd", "regression", "mmd", 1.0, {"bandwidth_y": 1.0, "bandwidth_z": 3.0})
    cls = Objective(
        "xe_mmd", "classification", "mmd", 1.0, {"bandwidth_y": 0.1, "bandwidth_z": 3.0, "num_samples": 10}
    )
    assert reg.mmd_step.fast is not None and cls.mmd_step.fast is not None  # num_samples dropped for classes
    assert Objective("xe_mmce", "classification", "mmce", 1.0).mmd_step is None


#: mmd_fused.PASS_ELEMENTS as shipped, and so small that every stack is taken member by member and every
#: gradient-free sum draw by draw
PASSES = [None, 1 << 8]


@pytest.fixture(params=PASSES, ids=["one pass", "member by member"])
def pass_elements(request, monkeypatch):
    if request.param is not None:
        monkeypatch.setattr(mmd_fused, "PASS_ELEMENTS", request.param)
    return request.param


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stacked_members_equal_their_own_calls(dtype, pass_elements):
    """MMDStep.stacked: member k of a stack gets the value and gradients of its own call, to the rounding of
    sums taken over a (K, M, n, n) rather than an (M, n, n) tensor (bit for bit where the CPU's kernels
    happen to group them alike, which MMDStep.stack_exact probes; the test holds either way)."""
    g = torch.Generator().manual_seed(2)
    k, n, m, d, h = 3, 16, 4, 9, 0.8
    x, y = torch.randn(k, n, d, generator=g, dtype=dtype), torch.randn(k, n, generator=g, dtype=dtype)
    mean = torch.randn(k, n, generator=g, dtype=dtype).requires_grad_()
    std = (torch.rand(k, n, generator=g, dtype=dtype) + 0.2).requires_grad_()
    eps = torch.randn(k, m, n, generator=g, dtype=dtype)
    step = MMDStep("regression", {"bandwidth_y": h, "bandwidth_z": 7.0, "num_samples": m})
    assert step.stackable and not MMDStep("regression", {"bandwidth_y": 0.8, "bandwidth_z": None}).stackable
    const = step.prepare(x, y)
    assert isinstance(step.stack_exact((mean, std)), bool)  # the probe runs (its answer is the CPU's)
    value = step.stacked((mean, std), y, eps, const)
    weights = torch.arange(1.0, k + 1, dtype=dtype)  # a different upstream gradient per member
    g_mean, g_std = torch.autograd.grad((value * weights).sum(), [mean, std])
    # |k(a, b) (a - b)| <= sqrt(h / 2e) for the RBF kernel exp(-(a - b)^2 / h)
    slope = math.sqrt(h / (2 * math.e))
    for i in range(k):
        a, b = mean.detach()[i].requires_grad_(), std.detach()[i].requires_grad_()
        one = step((a, b), y[i], x[i], eps=eps[i], const=const.at(i))
        ga, gb = torch.autograd.grad(one * weights[i], [a, b])
        # the value sums M n^2 terms W_ij (k_ff - 2 k_tf) / M (kernels in [0, 1]) besides the shared s_tt
        value_abs = 3 * const.w[i].sum() / (n * (n - 1))
        torch.testing.assert_close(value[i], one, rtol=0, atol=reorder_tol(m * n * n, value_abs, dtype))
        # a mean gradient sums 2 n M terms 4 / (h M) W k(a, b) (a - b) / (n (n - 1)) (W <= 1); a std one
        # the same times the draws' eps
        grad_abs = weights[i] * 2 * n * m * 4 / (h * m) * slope / (n * (n - 1))
        tol = reorder_tol(2 * n * m, grad_abs, dtype)
        torch.testing.assert_close(g_mean[i], ga, rtol=0, atol=tol)
        torch.testing.assert_close(g_std[i], gb, rtol=0, atol=tol * float(eps[i].abs().max()))


def test_a_stack_of_reparameterised_mmds_equals_regression_mmd_per_member(pass_elements):
    """GaussianRBFIndexMMD over (K, ...) inputs, the x-kernels of the stack built in one call: member i's
    value and mean-gradient are regression_mmd's on its own batch (float64)."""
    from kcal.mmd.fused import GaussianRBFIndexMMD

    g = torch.Generator().manual_seed(0)
    k, m, n, d = 3, 5, 12, 7
    x, y = (
        torch.randn(k, n, d, generator=g, dtype=torch.float64),
        torch.randn(k, n, generator=g, dtype=torch.float64),
    )
    mean = torch.randn(k, n, generator=g, dtype=torch.float64).requires_grad_()
    std = torch.rand(k, n, generator=g, dtype=torch.float64) + 0.5
    eps = torch.randn(k, m, n, generator=g, dtype=torch.float64)
    value = GaussianRBFIndexMMD.apply(mean, std, eps, y, kernels.rbf_offdiag(x, 4.0), 1.5, True, None)
    grad = torch.autograd.grad(value.sum(), mean)[0]
    for i in range(k):
        ref = regression_mmd((mean[i], std[i]), y[i], x[i], bandwidth_y=1.5, bandwidth_z=4.0, eps=eps[i])
        torch.testing.assert_close(value[i], ref, rtol=1e-12, atol=1e-15)
        torch.testing.assert_close(grad[i], torch.autograd.grad(ref, mean)[0][i], rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("need", [True, False])
def test_index_rbf_sums_in_parts_equal_one_pass(need, monkeypatch):
    """A stack taken a group of members at a time, and without a gradient a member's draws a few at a time
    (mmd_fused.PASS_ELEMENTS), gives each member's own sums and its one pass's, to the rounding of sums
    grouped otherwise (float32: a group's tensors have other shapes than a member's own, and a batched
    matrix product may round otherwise; on this project's CPU a training step's are bit for bit its own)."""
    g = torch.Generator().manual_seed(5)
    k, m, n, h = 5, 6, 8, 0.7
    draws, y = torch.randn(k, m, n, generator=g), torch.randn(k, n, generator=g)
    w = kernels.rbf_offdiag(torch.randn(k, n, 3, generator=g), 2.0)
    whole = mmd_fused.index_rbf_sums(draws, y, w, h, need)
    # S sums M n^2 terms W_ij (k_ff - 2 k_tf) / M (kernels in [0, 1]); a gradient entry 2 n terms
    # 4 / (h M) W k(a, b) (a - b), with |k(a, b) (a - b)| <= sqrt(h / 2e) and W <= 1
    s_tol = reorder_tol(m * n * n, 3 * w.sum((-2, -1)).max(), torch.float32)
    g_tol = reorder_tol(2 * n, 2 * n * 4 / (h * m) * math.sqrt(h / (2 * math.e)), torch.float32)
    for elements in (2 * m * n * n, m * n * n - 1, n * n, 1):  # two members, one, one draw, one (at least)
        monkeypatch.setattr(mmd_fused, "PASS_ELEMENTS", elements)
        s, grad = mmd_fused.index_rbf_sums(draws, y, w, h, need)
        singles = [mmd_fused.index_rbf_sums(draws[i], y[i], w[i], h, need) for i in range(k)]
        own = torch.stack([one[0] for one in singles])
        torch.testing.assert_close(s, own, rtol=0, atol=s_tol)
        torch.testing.assert_close(s, whole[0], rtol=0, atol=s_tol)
        if need:
            torch.testing.assert_close(grad, torch.stack([one[1] for one in singles]), rtol=0, atol=g_tol)
            torch.testing.assert_close(grad, whole[1], rtol=0, atol=g_tol)
        else:
            assert grad is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kernel_y, bandwidth_y", [("rbf", 0.1), ("delta", None)])
def test_stacked_class_members_equal_their_own_calls(dtype, kernel_y, bandwidth_y):
    """MMDStep.stacked for classes: member k's value and gradient are its own call's, to the rounding of a
    batched matrix product against a member's own (bit for bit where the probe finds the CPU's batched
    product exact, as on this project's CPU; the test holds either way)."""
    g = torch.Generator().manual_seed(3)
    k, n, m, d = 4, 20, 5, 6
    x = torch.randn(k, n, d, generator=g, dtype=dtype)
    labels = torch.randint(0, m, (k, n), generator=g)
    logits = torch.randn(k, n, m, generator=g, dtype=dtype).requires_grad_()
    step = MMDStep("classification", {"kernel_y": kernel_y, "bandwidth_y": bandwidth_y, "bandwidth_z": 4.0})
    assert step.stackable
    const = step.prepare(x, labels)
    assert isinstance(step.stack_exact(logits), bool)  # the probe runs (its answer is the CPU's)
    value = step.stacked(logits, labels, None, const)
    assert value.shape == (k,)
    weights = torch.arange(1.0, k + 1, dtype=dtype)
    grad = torch.autograd.grad((value * weights).sum(), logits)[0]
    for i in range(k):
        z = logits.detach()[i].requires_grad_()
        one = step(z, labels[i], x[i], const=const.at(i))
        # W and K lie in [0, 1] and the rows of D = onehot - probs add up to at most 2 in absolute value:
        # the value sum((W D K) o D) / (n (n - 1)) adds products of absolute sum <= 4 sum(W) / (n (n - 1)),
        # each through m + n + n m additions; a probability gradient -2 (W D K)_ic / (n (n - 1)) is at most
        # 4 max_i sum_j W_ij / (n (n - 1)) after m + n additions, and softmax's backward p (g - p.g) at most
        # doubles it, through m more
        value_abs = 4 * const.w[i].sum() / (n * (n - 1))
        torch.testing.assert_close(value[i], one, rtol=0, atol=reorder_tol(m + n + n * m, value_abs, dtype))
        grad_abs = weights[i] * 2 * 4 * const.w[i].sum(-1).max() / (n * (n - 1))
        g_one = torch.autograd.grad(one * weights[i], z)[0]
        torch.testing.assert_close(grad[i], g_one, rtol=0, atol=reorder_tol(2 * m + n, grad_abs, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("threshold, scale", [(0.0, 1.0), (0.4, 0.3)])
def test_tanh_decision_step_equals_regression_mmd(dtype, threshold, scale):
    """The decision kernel's fast path (rank one: 1/M sum_s d_s^T W d_s) against the general estimator's
    (M, n, n) Gram matrices: same value and gradients to rounding, one batch and a stack (whether the stack
    is bit-identical to its members is the probe's to say: its batched matmul may not be, in float32)."""
    x, y, _, mean, raw, _ = _batch(d=7, dtype=dtype)
    options = {"form": "individual", "kernel_y": "tanh_decision", "threshold": threshold, "scale": scale,
               "kernel_z": "rbf", "bandwidth_z": 9.0, "num_samples": 6, "pairing": "index"}  # fmt: skip
    step = MMDStep("regression", options)
    assert step.fast is not None and "tanh" in step.fast
    assert (
        MMDStep("regression", {**options, "threshold": "auto"}).fast is None
    )  # resolved by the caller first
    std = lambda: torch.nn.functional.softplus(raw) + 0.05  # noqa: E731
    eps = torch.randn(6, x.shape[0], dtype=dtype)
    a, ga = _value_and_grads(lambda: step((mean, std()), y, x, eps=eps), [mean, raw])
    b, gb = _value_and_grads(lambda: regression_mmd((mean, std()), y, x, **options, eps=eps), [mean, raw])
    _close(a, b, dtype)
    for u, v in zip(ga, gb, strict=True):
        _close(u, v, dtype)
    c, gc = _value_and_grads(
        lambda: step((mean, std()), y, x, eps=eps, const=step.prepare(x, y)), [mean, raw]
    )
    assert torch.equal(c, a) and all(torch.equal(u, v) for u, v in zip(gc, ga, strict=True))
    xs, ys = torch.stack([x, x.flip(0)]), torch.stack([y, y.flip(0)])
    means = torch.stack([mean.detach(), mean.detach().flip(0)]).requires_grad_()
    stds = torch.stack([std().detach(), std().detach().flip(0)])
    epss = torch.stack([eps, eps.flip(1)])
    both = step.stacked((means, stds), ys, epss, step.prepare(xs, ys))
    for i in range(2):
        _close(both[i], step((means[i], stds[i]), ys[i], xs[i], eps=epss[i]), dtype)
