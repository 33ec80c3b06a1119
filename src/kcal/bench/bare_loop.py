"""The plain torch loop that ``kcal.bench.speed`` holds kcal's training loop against.

One model, written as a user would write it by hand with nothing to record: the same model, batches,
objective, optimiser, clipping and per-epoch validation as :mod:`kcal.run.engine`, so ``loop_overhead``
(kcal's epoch over this one's) measures what kcal's loop and Lightning add, and ``mmd_arithmetic`` (this
loop with the regulariser over without) is the floor of ``mmd_overhead``.
"""

from __future__ import annotations

import statistics
import time

import torch

from kcal.core import random_streams
from kcal.run.epoch import ValidationAccumulator
from kcal.run.optimiser import adam
from kcal.run.setup import Prepared, build

__all__ = ["bare_loop_epoch_seconds"]


def bare_loop_epoch_seconds(prep: Prepared, epochs: int, device: torch.device) -> float:
    """Median seconds per epoch of a minimal torch loop doing the same work as ``kcal.run.module.fit_members``: the same
    model, batches (one permutation per epoch, the split gathered once, as ``TensorBatches``), objective
    (with its noise stream, and the regulariser's batch constants built once per epoch and, for the fixed
    validation chunks, once per run), Adam, clipping, and per-epoch validation (objective on
    ``eval_batch_size`` chunks and the whole-split metrics of :class:`kcal.run.epoch.ValidationAccumulator`)."""
    cfg, obj = prep.cfg, prep.objective
    model = build(prep, cfg.seed).to(device)
    train, val = prep.data.train.to(device), prep.data.val.to(device)
    bs = int(cfg.trainer.batch_size)
    nb = len(train) // bs
    shuffle = torch.Generator(device=device).manual_seed(random_streams.shuffle_seed(cfg.seed))
    opt = adam(list(model.parameters()), cfg)  # the optimiser kcal trains with
    noise = random_streams.generator(random_streams.noise_seed(cfg.seed), device)
    clip = cfg.trainer.gradient_clip_val
    ebs = cfg.trainer.eval_batch_size
    chunks = [(val.x[s : s + ebs], val.y[s : s + ebs]) for s in range(0, len(val), ebs)]
    val_consts = [obj.prepare(x, y) if x.shape[0] >= 2 else None for x, y in chunks]
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        model.train()
        perm = torch.randperm(len(train), device=device, generator=shuffle)[: nb * bs].view(nb, bs)
        xs, ys = train.x[perm], train.y[perm]
        consts = obj.prepare(xs, ys)
        for b in range(nb):
            x, y = xs[b], ys[b]
            loss, _, _ = obj(model(x), x, y, generator=noise, const=None if consts is None else consts.at(b))
            opt.zero_grad()
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
        model.eval()
        with torch.no_grad():
            gen = random_streams.generator(random_streams.eval_seed(cfg.seed), device)
            acc = ValidationAccumulator(prep.task)
            for (x, y), const in zip(chunks, val_consts, strict=True):
                out = model(x)
                acc.update(
                    out,
                    y,
                    obj(out, x, y, generator=gen, const=const)[0]
                    if x.shape[0] >= 2
                    else obj.combine(obj.base(out, y)),
                )
            {k: float(v) for k, v in acc.compute().items()}  # host syncs, as the Lightning module
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:] if len(times) > 1 else times)
