"""K networks of one architecture as one batched network, bit-identical to each network alone on CPU.

:class:`StackedMLP` holds K copies of a :class:`~kcal.models.mlp.GaussianMLP` /
:class:`~kcal.models.mlp.SoftmaxMLP` with parameters and buffers stacked along dim 0; each training
step runs every layer once for all members (``baddbmm``/``bmm`` for linear layers, BatchNorm as one
``batch_norm`` call over K x width channels) where a one-off probe per shape shows that this equals the
single network's kernels and autograd for every member (:func:`linear_plan`, :func:`batch_norm_plan`),
and member by member with the single network's own formulas otherwise. Per-member gradient clipping
(:func:`clip_grad_norm_per_member`) completes what :mod:`kcal.run.engine` needs to train K seeds as one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from kcal.models.mlp import GaussianMLP, SoftmaxMLP

STACKABLE = (GaussianMLP, SoftmaxMLP)


# ------------------------------------------------------------------------------------------------
# The stacked network
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LinearPlan:
    """Which parts of a stacked linear layer run batched (True) or member by member (False)."""

    forward: bool = True
    grad_input: bool = True
    grad_weight: bool = True
    grad_bias: bool = True


_LINEAR_PLANS: dict[tuple, LinearPlan] = {}
_BN_PLANS: dict[tuple, bool] = {}


def _probe_tensors(device, dtype, *shapes):
    gen = torch.Generator(device=device).manual_seed(12345)
    return [torch.randn(s, generator=gen, device=device, dtype=dtype) for s in shapes]


def linear_plan(k: int, b: int, d: int, o: int, device: torch.device, dtype: torch.dtype) -> LinearPlan:
    """Probe, once per shape, whether the batched kernels (``baddbmm``/``bmm``/``sum``) give bit for bit
    what ``F.linear`` and its autograd give for each member alone.

    They usually do (BLAS runs the same micro-kernel on each matrix), but not for every shape and
    position: on MKL, e.g., the weight gradient of a member whose (2 x 23) block is not 64-byte aligned
    differs in the last bit between ``bmm`` and ``mm``. Every member is probed; a part that differs for
    any member runs as a loop over members with the single model's own formulas (autograd of
    ``addmm``: ``grad @ W``, ``grad.T @ x``, ``grad.sum(0)``), which match by construction.
    """
    key = (k, b, d, o, str(device), dtype)
    plan = _LINEAR_PLANS.get(key)
    if plan is None:
        x, w, bias, g = _probe_tensors(device, dtype, (k, b, d), (k, o, d), (k, o), (k, b, o))
        batched = (torch.baddbmm(bias.unsqueeze(1), x, w.transpose(1, 2)), torch.bmm(g, w),
                   torch.bmm(g.transpose(1, 2), x), g.sum(1))  # fmt: skip
        same = [True] * 4
        for i in range(k):
            xi, wi, bi = (t[i].clone().requires_grad_() for t in (x, w, bias))
            with torch.enable_grad():
                out = F.linear(xi, wi, bi)
                out.backward(g[i])
            ref = (out.detach(), xi.grad, wi.grad, bi.grad)
            same = [s and torch.equal(bt[i], r) for s, bt, r in zip(same, batched, ref, strict=True)]
        plan = _LINEAR_PLANS[key] = LinearPlan(*same)
    return plan


class _StackedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, bias, plan: LinearPlan):
        ctx.save_for_backward(x, w)
        ctx.plan = plan
        if plan.forward:
            return torch.baddbmm(bias.unsqueeze(1), x, w.transpose(1, 2))
        return torch.stack([F.linear(x[i], w[i], bias[i]) for i in range(x.shape[0])])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        plan, k = ctx.plan, x.shape[0]
        grad = grad.contiguous()  # the single model's addmm receives a contiguous gradient
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = torch.bmm(grad, w) if plan.grad_input else torch.stack([grad[i].mm(w[i]) for i in range(k)])
        if ctx.needs_input_grad[1]:
            gw = (torch.bmm(grad.transpose(1, 2), x) if plan.grad_weight
                  else torch.stack([grad[i].t().mm(x[i]) for i in range(k)]))  # fmt: skip
        if ctx.needs_input_grad[2]:
            gb = grad.sum(1) if plan.grad_bias else torch.stack([grad[i].sum(0) for i in range(k)])
        return gx, gw, gb, None


def stacked_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``F.linear`` of each member, differentiable: x (K, B, d), w (K, o, d), bias (K, o) -> (K, B, o)."""
    x = x.contiguous()  # the single model's activations are contiguous
    k, b, d = x.shape
    return _StackedLinear.apply(x, w, bias, linear_plan(k, b, d, w.shape[1], x.device, x.dtype))


def _batch_norm_batched(h, running_mean, running_var, weight, bias, momentum, eps):
    """Training-mode BatchNorm of K members as one call over (B, K*w) channels."""
    k, b, width = h.shape
    flat = h.transpose(0, 1).reshape(b, k * width)
    out = F.batch_norm(flat, running_mean.view(-1), running_var.view(-1), weight.reshape(-1), bias.reshape(-1),
                       True, momentum, eps)  # fmt: skip
    return out.reshape(b, k, width).transpose(0, 1)


def _batch_norm_looped(h, running_mean, running_var, weight, bias, momentum, eps):
    return torch.stack([F.batch_norm(h[i], running_mean[i], running_var[i], weight[i], bias[i], True, momentum, eps)
                        for i in range(h.shape[0])])  # fmt: skip


def batch_norm_plan(k: int, b: int, width: int, momentum: float, eps: float, device, dtype) -> bool:
    """Whether the one-call BatchNorm equals per-member ``F.batch_norm`` bit for bit (outputs, running
    statistics, gradients), probed once per shape; it does not when a member's channels straddle the
    kernel's vector tail (e.g. widths that are not a multiple of 8 on AVX-512)."""
    key = (k, b, width, momentum, eps, str(device), dtype)
    ok = _BN_PLANS.get(key)
    if ok is None:
        h, w, bias, mean, g = _probe_tensors(
            device, dtype, (k, b, width), (k, width), (k, width), (k, width), (k, b, width)
        )
        results = []
        for fn in (_batch_norm_batched, _batch_norm_looped):
            hh, ww, bb = (t.clone().requires_grad_() for t in (h, w, bias))
            rm, rv = mean.clone(), mean.abs() + 0.5
            with torch.enable_grad():
                out = fn(hh, rm, rv, ww, bb, momentum, eps).contiguous()
                out.backward(g)
            results.append((out.detach(), rm, rv, hh.grad, ww.grad, bb.grad))
        ok = _BN_PLANS[key] = all(torch.equal(a, b) for a, b in zip(*results, strict=True))
    return ok


class StackedMLP:
    """K copies of a :class:`~kcal.models.mlp.GaussianMLP` / :class:`~kcal.models.mlp.SoftmaxMLP` with
    their parameters and buffers stacked along dim 0.

    In training mode ``forward(x)`` takes ``x`` of shape (K, B, d) and runs each layer once for all
    members (where a probe shows that this is bit-identical, see :func:`linear_plan` and
    :func:`batch_norm_plan`). In eval mode (no gradients; validation and whole-split predictions) it calls
    the single network's own ``forward`` once per member through ``torch.func.functional_call`` on shared
    rows ``x`` (n, d) (or per-member rows (K, n, d)): identical by construction, and as fast as batching
    there, because large evaluation batches are compute-bound.
    """

    def __init__(self, models: list[nn.Module]):
        ref = models[0]
        if not isinstance(ref, STACKABLE) or any(type(m) is not type(ref) for m in models):
            raise TypeError(f"can only stack models of one of {[c.__name__ for c in STACKABLE]}")
        self.kind = type(ref)
        self.min_std = float(getattr(ref, "min_std", 0.0))
        self.layers: list[tuple] = []
        modules = [(f"body.{i}", m) for i, m in enumerate(ref.body)] + [("head", ref.head)]
        for prefix, mod in modules:
            if isinstance(mod, nn.Linear):
                self.layers.append(("linear", prefix))
            elif isinstance(mod, nn.BatchNorm1d):
                if not (mod.affine and mod.track_running_stats) or mod.momentum is None:
                    raise TypeError("BatchNorm1d must be affine, track running stats and have a momentum")
                self.layers.append(("bn", prefix, float(mod.eps), float(mod.momentum)))
            elif isinstance(mod, nn.ReLU):
                self.layers.append(("relu", prefix))
            else:
                raise TypeError(f"cannot stack layer {type(mod).__name__}")
        self.template = copy.deepcopy(ref).eval()
        self.param_names = [n for n, _ in ref.named_parameters()]
        self.buffer_names = [n for n, _ in ref.named_buffers()]
        named = [(dict(m.named_parameters()), dict(m.named_buffers())) for m in models]
        with torch.no_grad():
            self.params = {
                n: torch.stack([p[n].detach() for p, _ in named]).requires_grad_() for n in self.param_names
            }
            self.buffers = {
                n: torch.stack([b[n].detach() for _, b in named]).clone() for n in self.buffer_names
            }
        self.training = True

    @property
    def members(self) -> int:
        return next(iter(self.params.values())).shape[0]

    def parameters(self) -> list[torch.Tensor]:
        return [self.params[n] for n in self.param_names]  # model.parameters() order

    def forward(self, x: torch.Tensor):
        if not self.training:
            return self.eval_forward(x)
        k, b = x.shape[0], x.shape[1]
        h = x
        for layer in self.layers:
            if layer[0] == "linear":
                h = stacked_linear(h, self.params[layer[1] + ".weight"], self.params[layer[1] + ".bias"])
            elif layer[0] == "bn":
                prefix, eps, momentum = layer[1:]
                args = (self.buffers[prefix + ".running_mean"], self.buffers[prefix + ".running_var"],
                        self.params[prefix + ".weight"], self.params[prefix + ".bias"], momentum, eps)  # fmt: skip
                batched = batch_norm_plan(k, b, h.shape[-1], momentum, eps, h.device, h.dtype)
                h = (_batch_norm_batched if batched else _batch_norm_looped)(h, *args)
                self.buffers[prefix + ".num_batches_tracked"].add_(1)
            else:
                h = torch.relu(h)
        if self.kind is GaussianMLP:
            return h[..., 0], torch.exp(h[..., 1]).clamp_min(self.min_std)
        return h

    __call__ = forward

    @torch.no_grad()
    def eval_forward(self, x: torch.Tensor, members: list[int] | None = None):
        """Eval-mode outputs, stacked over members, of shared rows x (n, d) or per-member rows (K, n, d)."""
        members = range(self.members) if members is None else members
        outs = []
        for i in members:
            state = {n: t[i] for n, t in self.params.items()} | {n: t[i] for n, t in self.buffers.items()}
            xi = x if x.dim() == 2 else x[i]
            outs.append(torch.func.functional_call(self.template, state, (xi,), strict=True))
        if isinstance(outs[0], tuple):
            return tuple(torch.stack(parts) for parts in zip(*outs, strict=True))
        return torch.stack(outs)

    def keep(self, rows: list[int]) -> None:
        """Keep only the members at positions ``rows`` (new leaf tensors)."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.params[self.param_names[0]].device)
        with torch.no_grad():
            self.params = {n: p.detach()[idx].clone().requires_grad_() for n, p in self.params.items()}
            self.buffers = {n: b[idx].clone() for n, b in self.buffers.items()}

    def member_state(self, i: int) -> dict[str, torch.Tensor]:
        """Member ``i``'s ``state_dict`` (keys as the single model's), as copies."""
        with torch.no_grad():
            state = {n: self.params[n][i].detach().clone() for n in self.param_names}
            state |= {n: self.buffers[n][i].clone() for n in self.buffer_names}
        return state

    def state_dict(self) -> dict[str, dict[str, torch.Tensor]]:
        """The stacked parameters and buffers of the members still in the stack (for a training snapshot)."""
        return {"params": {n: p.detach() for n, p in self.params.items()}, "buffers": dict(self.buffers)}

    def load_state_dict(self, state: dict[str, dict[str, torch.Tensor]]) -> None:
        """Take :meth:`state_dict`'s tensors (any number of members) as new leaf tensors on this stack's device."""
        device = self.params[self.param_names[0]].device
        with torch.no_grad():
            self.params = {
                n: state["params"][n].to(device).clone().requires_grad_() for n in self.param_names
            }
            self.buffers = {n: state["buffers"][n].to(device).clone() for n in self.buffer_names}

    def to(self, device) -> StackedMLP:
        self.template.to(device)
        with torch.no_grad():
            self.params = {n: p.detach().to(device).requires_grad_() for n, p in self.params.items()}
            self.buffers = {n: b.to(device) for n, b in self.buffers.items()}
        return self


def member_slice(outputs, i: int):
    """Member ``i``'s part of stacked outputs (a tensor, or a tuple of tensors, stacked on dim 0)."""
    return tuple(t[i] for t in outputs) if isinstance(outputs, tuple) else outputs[i]


# ------------------------------------------------------------------------------------------------
# Optimiser and clipping (per member)
# ------------------------------------------------------------------------------------------------
@torch.no_grad()
def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_(params, max_norm)`` for CPU or CUDA tensors of one device and dtype,
    the same operations in the same order (so the same numbers, tested) without its per-call grouping by
    device and dtype, support checks and wrappers (70 us a step on this project's 2-core CPU, about a
    tenth of a small model's step): ``total = ||(||g_1||, ..., ||g_P||)||_2``, every gradient times
    ``min(max_norm / (total + 1e-6), 1)``. Returns ``total``."""
    grads = [p.grad for p in params if p.grad is not None]
    with torch.no_grad():
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        torch._foreach_mul_(grads, torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))
    return total


def clip_grad_norm_per_member(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` applied to each member (dim 0) separately, as Lightning's
    ``gradient_clip_val`` does for one model; returns the (K,) total norms."""
    grads = [p.grad for p in params if p.grad is not None]
    k = grads[0].shape[0]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(k, -1), 2.0, dim=1) for g in grads], dim=1)
    total = torch.linalg.vector_norm(norms, 2.0, dim=1)
    coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.view(k, *([1] * (g.dim() - 1))))
    return total
