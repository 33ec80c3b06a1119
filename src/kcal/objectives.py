"""Training objectives: ``loss = base_weight * base + weight * regulariser``.

``base`` is the Gaussian negative log-likelihood (regression) or cross-entropy (classification),
averaged over the batch (the authors' HEAD; ``reduction="sum"`` gives the paper's summed NLL, which
rescales the effective weight by the batch size). ``base_weight`` is 1 unless a config sets it: the
authors weight both terms (their ``loss_scalers``: ``{nll: w, mmd: 0.2}``), and ``w * base + 0.2 * reg`` is
not ``base + (0.2 / w) * reg`` for training: Adam's weight decay is added to the gradient and the
gradient's norm is clipped, so the two take other steps. At ``base_weight == 1`` the loss is computed as
``base + weight * regulariser``, the same operations as before the key existed. The regulariser is one of

* ``mmd``  — :func:`kcal.mmd.regression_mmd` / :func:`kcal.mmd.classification_mmd` (this paper);
* ``mmce`` — :func:`kcal.baselines.mmce` (Kumar et al. 2018), classification only;
* ``kde``  — :func:`kcal.baselines.ece_kde` (Popordanoska et al. 2022), classification only.

The objective is a plain function of (network outputs, batch): it holds no training state, so the
same code serves a single model, a vmapped stack of seeds, or a practitioner's own loop.

``nll`` and ``nll_mmd`` are defined for both tasks (``task="any"``): the negative log-likelihood of a
categorical forecast is the cross-entropy, and the MMD keeps only the parameters that the task's
estimator takes (e.g. ``num_samples`` is dropped for classification, where the forecast is
marginalised analytically).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from kcal.inputs import TASKS, check_bandwidths, check_weight
from kcal.metrics import regression as regression_metrics

REGULARIZERS = {"regression": (None, "mmd"), "classification": (None, "mmd", "mmce", "kde")}
#: the regularisers with a batched form for a stack of members (Objective.stack_exact)
STACKED = ("mmce", "kde")


@dataclass
class Objective:
    name: str
    task: str
    regularizer: str | None = None
    weight: float = 0.0
    params: dict = field(default_factory=dict)
    reduction: str = "mean"
    base_weight: float = 1.0

    def __post_init__(self):
        valid = REGULARIZERS.get(self.task)
        if valid is None:
            raise ValueError(f"unknown task {self.task!r}; valid: {', '.join(TASKS)} (resolve 'any' first)")
        if self.regularizer not in valid:
            raise ValueError(
                f"objective {self.name!r}: regulariser {self.regularizer!r} is not available for {self.task}; "
                f"valid: {', '.join(str(v) for v in valid)}"
            )
        self.weight = check_weight(f"objective {self.name!r}: weight", self.weight)
        self.base_weight = check_weight(f"objective {self.name!r}: base_weight", self.base_weight)
        if self.reduction not in ("mean", "sum"):
            raise ValueError(f"objective reduction must be 'mean' or 'sum', got {self.reduction!r}")
        self.params = dict(self.params)
        check_bandwidths(self.params, prefix=f"objective {self.name!r}: ")
        self.mmd_step = None
        self._stack_probes: dict[tuple, bool] = {}
        self._params_key = repr(
            sorted(self.params.items())
        )  # the parameters, fixed from here on (as mmd_step)
        if self.regularizer == "mmd":
            from kcal.mmd import MMDStep, classification_mmd

            params = self.params if self.task == "regression" else _accepted(classification_mmd, self.params)
            self.mmd_step = MMDStep(self.task, params)

    def combine(self, base: torch.Tensor, reg: torch.Tensor | None = None) -> torch.Tensor:
        """The loss of a base loss and (None: no) regulariser: ``base_weight * base + weight * reg``; at
        ``base_weight == 1`` the base is not multiplied (bit-identical to ``base + weight * reg``)."""
        loss = base if self.base_weight == 1.0 else self.base_weight * base
        return loss if reg is None else loss + self.weight * reg

    def base(self, outputs, y: torch.Tensor) -> torch.Tensor:
        if self.task == "regression":
            return regression_metrics.gaussian_nll(outputs, y, self.reduction)
        return F.cross_entropy(outputs, y, reduction=self.reduction)

    def prepare(self, x: torch.Tensor, y: torch.Tensor):
        """What the regulariser of batches ``x`` ``(..., n, d)``, ``y`` ``(..., n)`` needs that the network's
        outputs do not change (:meth:`kcal.mmd.steps.MMDStep.prepare`; index it with ``.at(b)``), or None
        when there is nothing to build ahead (no regulariser, or not the MMD's fast path)."""
        if self.mmd_step is None or self.weight == 0:
            return None
        return self.mmd_step.prepare(x, y)

    def regularization(self, outputs, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator | None = None,
                       eps: torch.Tensor | None = None, const=None) -> torch.Tensor:  # fmt: skip
        """The regulariser on one batch; ``generator`` (or explicit standard-normal ``eps``) drives the
        regression MMD's forecast samples; ``const`` is this batch's :meth:`prepare`."""
        if self.mmd_step is not None:
            return self.mmd_step(outputs, y, x, generator=generator, eps=eps, const=const)
        probs = torch.softmax(outputs, dim=-1)
        if self.regularizer == "mmce":
            from kcal.baselines import mmce

            return mmce(probs, y, **self.params, validate_args=False)
        from kcal.baselines import ece_kde

        return ece_kde(probs, y, **self.params, validate_args=False)

    def stack_exact(self, outputs: torch.Tensor) -> bool:
        """Whether :meth:`stacked_regularization` gives each member of ``outputs`` ``(K, n, m)`` (a stack of seed
        reruns' logits) its own :meth:`regularization`'s value and gradients bit for bit on their device: a probe
        on random logits of these shapes, once per shape, dtype, device, parameters and thread count; with the
        bandwidth chosen per batch, the selector's leave-one-out scores must agree too (a near-tie on real data
        would otherwise pick another bandwidth). ECE-KDE (:func:`kcal.baselines.ece_kde_stacked`; on this project's
        CPU the probe passes for two and three classes, not from four) and MMCE (:func:`kcal.baselines.mmce_stacked`)
        have a batched form here; the MMD has its own (:meth:`kcal.mmd.steps.MMDStep.stack_exact`)."""
        if self.regularizer not in STACKED or self.weight == 0 or outputs.dim() != 3:
            return False
        key = (tuple(outputs.shape), outputs.dtype, outputs.device, self._params_key, torch.get_num_threads())
        if key not in self._stack_probes:
            with torch.enable_grad():
                self._stack_probes[key] = self._probe_stack(*key[:3])
        return self._stack_probes[key]

    def _probe_stack(self, shape: tuple, dtype, device) -> bool:
        g = torch.Generator().manual_seed(0)
        logits = (4.0 * torch.randn(shape, generator=g, dtype=dtype)).to(device).requires_grad_()
        y = torch.randint(0, shape[-1], shape[:-1], generator=g).to(device)
        if (self.regularizer == "kde" and self.params.get("bandwidth") is None
                and not self._same_scores(torch.softmax(logits.detach(), -1))):  # fmt: skip
            return False
        values = self.stacked_regularization(logits, y)
        (grads,) = torch.autograd.grad(values.sum(), logits)
        for i in range(shape[0]):
            own = logits.detach()[i].requires_grad_()
            one = self.regularization(own, None, y[i])
            if not (
                torch.equal(one.detach(), values[i].detach())
                and torch.equal(torch.autograd.grad(one, own)[0], grads[i])
            ):
                return False
        return True

    def _same_scores(self, probs: torch.Tensor) -> bool:
        """Whether the bandwidth selector's leave-one-out scores of the stack ``probs`` ``(K, n, m)`` equal each
        member's own, bit for bit."""
        from kcal.baselines import default_bandwidth_grid, loo_log_likelihood

        grid = self.params.get("bandwidth_grid")
        grid = (
            default_bandwidth_grid(probs.dtype, probs.device)
            if grid is None
            else torch.as_tensor(grid).to(probs)
        )
        authors = self.params.get("flavour") == "authors"
        scores = torch.nan_to_num(loo_log_likelihood(probs, grid, authors))
        return all(torch.equal(scores[i], torch.nan_to_num(loo_log_likelihood(probs[i], grid, authors)))
                   for i in range(probs.shape[0]))  # fmt: skip

    def stacked_regularization(self, outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``(K,)`` regularisers of K members' logits ``(K, n, m)`` and labels ``(K, n)`` in one batched call (ECE-KDE
        and MMCE, :data:`STACKED`; where :meth:`stack_exact`, each equals the member's own :meth:`regularization`
        bit for bit)."""
        from kcal.baselines import ece_kde_stacked, mmce_stacked

        stacked = mmce_stacked if self.regularizer == "mmce" else ece_kde_stacked
        return stacked(torch.softmax(outputs, dim=-1), y, **self.params, validate_args=False)

    @property
    def uses_noise(self) -> bool:
        """Whether a step draws random forecast samples (regression MMD)."""
        return self.task == "regression" and self.regularizer == "mmd" and self.weight != 0

    def __call__(self, outputs, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator | None = None,
                 eps: torch.Tensor | None = None, const=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """Return ``(loss, base, regulariser)`` (``loss`` of :meth:`combine`); the regulariser is 0 when there
        is none."""
        base = self.base(outputs, y)
        if self.regularizer is None or self.weight == 0:
            return self.combine(base), base, torch.zeros((), device=base.device, dtype=base.dtype)
        reg = self.regularization(outputs, x, y, generator=generator, eps=eps, const=const)
        return self.combine(base, reg), base, reg


def _accepted(fn, params: dict) -> dict:
    """The subset of ``params`` that ``fn`` takes as keyword arguments."""
    names = _keywords(fn)
    return {k: v for k, v in params.items() if k in names}


@functools.cache
def _keywords(fn) -> frozenset[str]:
    return frozenset(inspect.signature(fn).parameters)  # inspect is slow: once per function
