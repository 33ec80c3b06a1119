"""The arithmetic of K models alone: a plain batched torch loop, the bound a stack of seed reruns can reach.

A stack of K seeds (:mod:`kcal.run.engine` with K members) cannot be cheaper than the arithmetic of K
networks and K regularisers. This module times that arithmetic written as plainly and as batched as torch
allows, with no bookkeeping at all: every member's parameters stacked along dim 0, ``baddbmm`` + ReLU
layers (training-mode ``batch_norm`` over K x width channels when the config has it), the objective on
(K, n) batches in one pass (Gaussian NLL or cross-entropy; the regression MMD of ``nll_mmd`` with
index-paired draws, or the classification MMD of ``xe_mmd``, both with an RBF kernel on x), per-member
gradient clipping, the engine's Adam (:func:`kcal.run.optimiser.adam`), and each epoch a validation forward
with the objective. The numbers are random and nothing is recorded: this is a timing bound, not a trainer.

``kcal bench --seeds-dataset crime --seed-objectives nll nll_mmd`` reports
``kcal stack / this loop`` as ``seeds_vs_arithmetic`` next to ``seeds_vs_one``: where 50 models' arithmetic
alone costs more than 3 single runs, the stack's target is 1.2x this bound.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from kcal.kernels import rbf_offdiag
from kcal.metrics.regression import LOG_2PI
from kcal.mmd.fused import GaussianRBFIndexMMD, rbf_weighted_sum
from kcal.run.engine import step_chunks
from kcal.run.optimiser import adam
from kcal.run.setup import Prepared

__all__ = ["BOUND_OBJECTIVES", "plain_stack_epoch_seconds"]

#: objectives whose batched arithmetic this module writes out
BOUND_OBJECTIVES = ("nll", "nll_mmd", "xe", "xe_mmd")


def _mlp_params(k: int, sizes: list[int], device, gen) -> list[torch.Tensor]:
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1.0 / math.sqrt(d_in)
        params.append((torch.rand(k, d_out, d_in, generator=gen, device=device) * 2 - 1).mul_(bound))
        params.append((torch.rand(k, d_out, generator=gen, device=device) * 2 - 1).mul_(bound))
    return [p.requires_grad_() for p in params]


def _forward(params, h, bn: list | None, eps_bn: float = 1e-5):
    k = h.shape[0]
    layers = len(params) // 2
    for i in range(layers):
        w, b = params[2 * i], params[2 * i + 1]
        h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
        if i < layers - 1:
            if bn is not None:
                gamma, beta = bn[i]
                n, width = h.shape[1], h.shape[2]
                flat = h.transpose(0, 1).reshape(n, k * width)
                h = (
                    F.batch_norm(flat, None, None, gamma, beta, True, 0.1, eps_bn)
                    .reshape(n, k, width)
                    .transpose(0, 1)
                )
            h = h.relu()
    return h


def _objective(prep: Prepared, out, x, y, gen, w=None, s_tt=None):
    """(K,) losses of the objective on (K, n) batches, written plainly; ``w`` (and ``s_tt``) are the batches'
    x-kernels (and regression target sums) when they were built ahead, as kcal builds them."""
    obj, task = prep.objective, prep.task
    mmd = obj.regularizer == "mmd" and obj.weight != 0
    if mmd and w is None:
        w = rbf_offdiag(x, float(obj.params["bandwidth_z"]))  # (K, n, n)
    if task == "regression":
        mean, std = out[..., 0], out[..., 1].exp().clamp_min(float(prep.cfg.model.min_std))
        loss = obj.combine((torch.log(std) + 0.5 * ((y - mean) / std) ** 2 + 0.5 * LOG_2PI).mean(-1))
        if mmd:
            p = obj.params
            h_y, m = float(p.get("bandwidth_y", 1.0)), int(p.get("num_samples", 10))
            eps = torch.randn((y.shape[0], m, y.shape[1]), generator=gen, device=y.device)
            need = mean.requires_grad and torch.is_grad_enabled()
            loss = loss + obj.weight * GaussianRBFIndexMMD.apply(mean, std, eps, y, w, h_y, need, s_tt)
        return loss
    logits = out
    n = y.shape[1]
    loss = obj.combine(
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
        .view(y.shape)
        .mean(-1)
    )
    if mmd:
        p = obj.params
        mcls = logits.shape[-1]
        k_y = torch.full((mcls, mcls), math.exp(-2.0 / float(p.get("bandwidth_y", 0.1))), device=y.device)
        k_y.fill_diagonal_(1.0)
        d = F.one_hot(y, mcls).to(logits.dtype) - torch.softmax(logits, -1)
        loss = loss + obj.weight * (torch.bmm(w, d @ k_y) * d).sum((-2, -1)) / (n * (n - 1))
    return loss


def _constants(prep: Prepared, x, y):
    """The x-kernels (and regression target sums) of batches ``x`` ``(..., n, d)``, built ahead as kcal does
    (:meth:`kcal.objectives.Objective.prepare`), or (None, None) without the MMD."""
    obj = prep.objective
    if obj.regularizer != "mmd" or obj.weight == 0 or x.shape[-2] < 2:
        return None, None
    w = rbf_offdiag(x, float(obj.params["bandwidth_z"]))
    if prep.task == "regression":
        return w, rbf_weighted_sum(y, w, float(obj.params.get("bandwidth_y", 1.0)))
    return w, None


def plain_stack_epoch_seconds(prep: Prepared, k: int, epochs: int = 3) -> float:
    """Median seconds of one epoch (training steps + validation) of ``k`` models trained as one batched loop
    on ``prep``'s data, architecture, batch size, objective, clipping and optimiser settings."""
    if prep.objective.name not in BOUND_OBJECTIVES:
        raise ValueError(
            f"no plain batched loop for objective {prep.objective.name!r}; valid: {list(BOUND_OBJECTIVES)}"
        )
    cfg, t = prep.cfg, prep.cfg.trainer
    dev = prep.data.train.x.device
    x, y = prep.data.train.x, prep.data.train.y
    xv, yv = prep.data.val.x, prep.data.val.y
    out_dim = 2 if prep.task == "regression" else int(prep.data.info.m)
    widths = [int(w) for w in cfg.model.widths]
    gen = torch.Generator(device=dev).manual_seed(0)
    params = _mlp_params(k, [x.shape[1], *widths, out_dim], dev, gen)
    bn = None
    if bool(cfg.model.batchnorm):
        bn = [(torch.ones(k * w, device=dev, requires_grad=True), torch.zeros(k * w, device=dev, requires_grad=True))
              for w in widths]  # fmt: skip
    every = params + [p for pair in bn or [] for p in pair]
    opt = adam(every, cfg)
    clip = float(t.gradient_clip_val) if t.gradient_clip_val else None
    n, bs = x.shape[0], int(t.batch_size)
    ebs = int(t.eval_batch_size)
    gens = [torch.Generator(device=dev).manual_seed(s) for s in range(k)]
    chunks = [
        (xv[s : s + ebs].expand(k, -1, -1), yv[s : s + ebs].expand(k, -1)) for s in range(0, xv.shape[0], ebs)
    ]
    val_consts = [
        _constants(prep, xb, yb) for xb, yb in chunks
    ]  # the fixed validation chunks', once (as kcal)
    chunks_of_steps = step_chunks(
        n // bs, k, bs, x.shape[-1], kernels=True
    )  # steps gathered at once, as kcal
    times = []
    for _ in range(epochs + 1):
        t0 = time.perf_counter()
        perms = torch.stack([torch.randperm(n, generator=g, device=dev) for g in gens])
        for b0, b1 in chunks_of_steps:
            idx = perms[:, b0 * bs : b1 * bs].view(k, b1 - b0, bs).transpose(0, 1)
            xs, ys = x[idx], y[idx]  # (steps, K, bs, ...)
            ws, tts = _constants(prep, xs, ys)
            for j in range(b1 - b0):
                xb, yb = xs[j], ys[j]
                w, s_tt = (None, None) if ws is None else (ws[j], None if tts is None else tts[j])
                loss = _objective(prep, _forward(params, xb, bn), xb, yb, gen, w, s_tt).sum()
                for p in every:
                    p.grad = None
                loss.backward()
                if clip is not None:
                    norms = torch.stack([p.grad.reshape(k, -1).norm(dim=1) for p in params], 1).norm(dim=1)
                    scale = (clip / (norms + 1e-6)).clamp_(max=1.0)
                    for p in params:
                        p.grad.mul_(scale.view(-1, *([1] * (p.dim() - 1))))
                opt.step()
        with torch.no_grad():
            for (xb, yb), (w, s_tt) in zip(chunks, val_consts, strict=True):
                if xb.shape[1] >= 2:
                    float(_objective(prep, _forward(params, xb, bn), xb, yb, gen, w, s_tt).sum())
        times.append(time.perf_counter() - t0)
    times = sorted(times[1:])
    return times[len(times) // 2]
