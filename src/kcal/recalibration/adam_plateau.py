"""The authors' temperature loop (the official flavour of :class:`kcal.recalibration.TemperatureScaler`), computed
op for op without autograd's and the optimiser's per-call overhead.

The loop (torchuq ``TemperatureScaling.train``): ``T`` is a ``(1, 1)`` tensor of the logits' dtype starting at 1;
each iteration computes the cross-entropy ``L(T) = mean_i -log softmax(z_i / T)[y_i]`` over the whole validation
set, takes one ``torch.optim.Adam(lr=1e-3)`` step on ``T`` (betas 0.9 / 0.999, eps 1e-8) with ``dL/dT``, then
steps ``ReduceLROnPlateau(mode="min", patience=3, factor=0.5, threshold=1e-6)`` with the loss before the step; it
stops after the iteration where the learning rate falls below 1e-6 (ten halvings), or after 100,000 iterations.

Where the loss keeps falling as ``T`` moves (confident logits that are often wrong: a model that learnt little)
no plateau comes for tens of thousands of iterations, up to the cap. Through ``loss.backward()``, ``Adam.step()`` and the scheduler an iteration costs 70 to 350 us on a
CPU (a few seconds a fit, and a trial fits more than once); :func:`adam_plateau_temperature` runs the same
kernels with the same scalars in the same order, so its ``T`` and iteration count are those of the loop bit for
bit (``tests/recalibration/test_adam_plateau.py`` checks that against the loop itself, float32 and float64, to
the cap and to the stop), at about a quarter of the cost:

* the gradient is autograd's, node by node: ``nll_loss_backward`` with a 0-dim one, then
  ``_log_softmax_backward_data``, then the division's gradient for its divisor, ``-g * ((z / T) / T)``, summed
  over both dimensions with ``keepdim`` (autograd's ``sum_to`` for a broadcast ``(1, 1)`` input);
* Adam's single-tensor CPU step: ``m.lerp_(g, 1 - b1)``, ``v.mul_(b2).addcmul_(g, g, value=1 - b2)``, then
  ``T.addcdiv_(m, sqrt(v) / sqrt(1 - b2^k) + eps, value=-lr / (1 - b1^k))`` with the bias corrections in Python
  floats (``(1 - b2^k) ** 0.5``, as torch writes it);
* the scheduler's rule: a loss below ``best * (1 - threshold)`` is an improvement; more than ``patience``
  iterations without one halve the learning rate (when that changes it by more than 1e-8) and start the count
  again.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "ADAM_LR",
    "BETAS",
    "ADAM_EPS",
    "PLATEAU",
    "STOP_LR",
    "MAX_ADAM_ITERATIONS",
    "adam_plateau_temperature",
]

#: The authors' loop: Adam's learning rate, betas and eps (torch's defaults), the plateau scheduler's settings,
#: the stopping learning rate and the iteration cap.
ADAM_LR = 1e-3
BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
PLATEAU = {"mode": "min", "patience": 3, "factor": 0.5, "threshold": 1e-6}
STOP_LR = 1e-6
MAX_ADAM_ITERATIONS = 100_000
#: ``ReduceLROnPlateau``'s default ``eps``: a smaller change of the learning rate is not made.
_PLATEAU_EPS = 1e-8
_MEAN = 1  # torch's reduction code for "mean"
_IGNORE_INDEX = -100  # cross_entropy's default


def adam_plateau_temperature(
    z: torch.Tensor, y: torch.Tensor, max_iterations: int = MAX_ADAM_ITERATIONS
) -> tuple[float, int]:
    """The authors' temperature for logits ``z`` (n, m) and labels ``y`` (n,) int64, in ``z``'s dtype, and the
    iterations it took (module docstring); ``max_iterations``: the cap (the authors': 100,000)."""
    aten = torch.ops.aten
    beta1, beta2 = BETAS
    patience, factor, rel = PLATEAU["patience"], PLATEAU["factor"], 1.0 - PLATEAU["threshold"]
    with torch.no_grad():
        t = torch.ones(1, 1, dtype=z.dtype, device=z.device)
        exp_avg, exp_avg_sq = torch.zeros_like(t), torch.zeros_like(t)
        one = torch.ones((), dtype=z.dtype, device=z.device)  # d loss / d loss, as backward() starts
        lr, best, bad, iterations = ADAM_LR, math.inf, 0, 0
        while iterations < max_iterations:
            iterations += 1
            scaled = z / t
            log_p = torch.log_softmax(scaled, 1)
            loss, total_weight = aten.nll_loss_forward(log_p, y, None, _MEAN, _IGNORE_INDEX)
            grad_log_p = aten.nll_loss_backward(one, log_p, y, None, _MEAN, _IGNORE_INDEX, total_weight)
            grad_scaled = aten._log_softmax_backward_data(grad_log_p, log_p, 1, z.dtype)
            grad = (-grad_scaled * (scaled / t)).sum((0, 1), keepdim=True)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step = float(iterations)
            denom = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add_(ADAM_EPS)
            t.addcdiv_(exp_avg, denom, value=-(lr / (1 - beta1**step)))
            current = float(loss)
            if current < best * rel:
                best, bad = current, 0
            else:
                bad += 1
            if bad > patience:
                lower = lr * factor
                if lr - lower > _PLATEAU_EPS:
                    lr = lower
                bad = 0
            if lr < STOP_LR:
                break
    return float(t), iterations
