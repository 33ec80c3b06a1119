"""kcal.recalibration.adam_plateau against the loop it stands for, written the plain way: autograd's
``backward()``, ``torch.optim.Adam`` and ``torch.optim.lr_scheduler.ReduceLROnPlateau``. Equal means the same
temperature, bit for bit, after the same number of iterations."""

import pytest
import torch
import torch.nn.functional as F

from kcal.recalibration.adam_plateau import ADAM_LR, PLATEAU, STOP_LR, adam_plateau_temperature


def plain_loop(z: torch.Tensor, y: torch.Tensor, max_iterations: int) -> tuple[float, int]:
    t = torch.ones(1, 1, dtype=z.dtype, requires_grad=True)
    opt = torch.optim.Adam([t], lr=ADAM_LR)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **PLATEAU)
    iterations = 0
    while iterations < max_iterations:
        iterations += 1
        opt.zero_grad()
        loss = F.cross_entropy(z / t, y)
        loss.backward()
        opt.step()
        plateau.step(float(loss.detach()))
        if opt.param_groups[0]["lr"] < STOP_LR:
            break
    return float(t.detach()), iterations


def case(seed: int, n: int, m: int, scale: float, separable: bool, dtype: torch.dtype, probs: bool):
    """Logits of scale ``scale`` (as ``log(p + 1e-10)`` of softmax outputs when ``probs``, what the official
    flavour fits on) with labels drawn at random (confident logits that are often wrong: the loss falls as T
    grows, for long), or their argmax (a separable set: T falls until the plateau's halvings stop it)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, m, generator=g) * scale
    if probs:
        z = torch.log(torch.softmax(z, 1) + 1e-10)
    y = z.argmax(1) if separable else torch.randint(0, m, (n,), generator=g)
    return z.to(dtype), y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("probs", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_the_temperature_and_its_iterations_are_the_plain_loop_s_bit_for_bit(seed, probs, dtype, one_thread):
    g = torch.Generator().manual_seed(100 + seed)
    n, m = int(torch.randint(10, 300, (1,), generator=g)), int(torch.randint(2, 8, (1,), generator=g))
    z, y = case(seed, n, m, 0.5 + 6 * seed, separable=seed % 2 == 1, dtype=dtype, probs=probs)
    ours = adam_plateau_temperature(z, y, max_iterations=2000)  # a separable case stops by halvings before it
    assert ours == plain_loop(z, y, 2000)
    assert isinstance(ours[0], float) and ours[1] >= 1


def test_labels_at_random_on_confident_logits_run_to_the_cap_and_a_separable_set_stops(one_thread):
    """Confident logits with labels at random: the loss falls as T grows, for as long as the loop runs (the
    official flavour on a model that learnt nothing); a separable set: T falls until ten halvings stop it."""
    z, y = case(7, 120, 3, 8.0, separable=False, dtype=torch.float32, probs=True)
    t, iterations = adam_plateau_temperature(z, y, max_iterations=3000)
    assert (t, iterations) == plain_loop(z, y, 3000) and iterations == 3000 and t > 2.5
    z, y = case(7, 120, 3, 8.0, separable=True, dtype=torch.float32, probs=True)
    t, iterations = adam_plateau_temperature(z, y)
    assert (t, iterations) == plain_loop(z, y, 100_000) and iterations < 3000 and t < 0.1


def test_a_nan_loss_counts_as_no_improvement_as_the_scheduler_has_it(one_thread):
    z, y = case(9, 40, 2, 2.0, separable=False, dtype=torch.float32, probs=False)
    z[0, 0] = float("inf")  # the fit's callers refuse this; the loop itself must still equal the plain one
    ours, plain = adam_plateau_temperature(z, y, max_iterations=50), plain_loop(z, y, 50)
    assert repr(ours) == repr(plain) == "(nan, 40)"  # NaN from the first step; ten halvings in 40 iterations
