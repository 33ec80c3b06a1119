"""Train K seeds of one configuration at once, as one batched model, each member as if alone.

    from kcal.run.stacked import train_stacked
    metrics = train_stacked(cfg, seeds=[0, 1, 2], out_dirs=[Path("s0"), Path("s1"), Path("s2")])

The networks are tiny MLPs, so a single run is dominated by per-step overhead (Python, kernel
launches). Here the K members' weights are stacked along a leading dimension and each training step
runs every layer once for all members (``baddbmm``/``bmm`` for linear layers; BatchNorm as one
``batch_norm`` call over K x width channels), so one optimiser step trains K networks. The loop is the
one every run uses (:mod:`kcal.run.engine`, driven by Lightning in :mod:`kcal.run.module`); this
module splits the seeds into chunks and writes each member's files. A chunk writes a snapshot of its training every
``trainer.snapshot_minutes`` and a stopped chunk goes on from it (:mod:`kcal.run.snapshot`).

**Equivalence.** Member k reproduces ``kcal.run.run`` with ``seed=k`` (see :mod:`kcal.core.random_streams`): its
initial weights come from ``kcal.run.setup.build(prep, k)``; its batch order from its own generator seeded
``shuffle_seed(k)`` (one ``randperm`` per epoch, as :class:`kcal.data.batches.TensorBatches`); its MMD
forecast draws from its own generator seeded ``noise_seed(k)`` with exactly the call that
``regression_mmd`` makes (``randn((num_samples, n), generator=g)``), passed to the objective as ``eps=``;
its validation draws from a generator re-seeded ``eval_seed(k)`` every validation epoch. The Lightning
semantics of a single run are kept per member: Adam(lr, weight_decay) (element-wise, and rounded alike wherever
an element lies, see below), ``clip_grad_norm_`` over all of the member's parameters, drop_last training
batches, validation in ``eval_batch_size`` chunks weighted by rows, and the per-epoch rules of
:mod:`kcal.run.epoch` that the Lightning module uses too (validation metrics, running bests, divergence,
EarlyStopping and ModelCheckpoint as :class:`~kcal.run.epoch.MonitorState`; best weights kept in memory),
``min_epochs``/``max_epochs`` as Lightning's fit loop applies them (a stop request is
never withdrawn, it waits for ``min_epochs``), divergence on a non-finite mean training loss. A member
that stops is removed from the stack with its optimiser state, so it costs nothing afterwards; a
diverging member's NaNs stay in its own slices (no operation mixes members).

Bit-identity on CPU, by construction or by probe:

* batched kernels are used only where a one-off probe per shape (every member position, since BLAS
  results can depend on a block's alignment) shows that they equal ``F.linear``/``F.batch_norm`` and their
  autograd for each member alone; otherwise that part runs member by member with the single model's own
  formulas (:func:`kcal.run.stacked_net.linear_plan`, :func:`~kcal.run.stacked_net.batch_norm_plan`);
* the base loss is ``torch.func.vmap`` of :meth:`Objective.base` (gradients identical); the MMD and ECE-KDE
  are one batched call (:meth:`kcal.mmd.steps.MMDStep.stacked`, :meth:`Objective.stacked_regularization`)
  where a probe finds it exact on the device (:meth:`~kcal.mmd.steps.MMDStep.stack_exact`,
  :meth:`Objective.stack_exact`), and any other regulariser (or where the probe fails) is evaluated per member with
  :meth:`Objective.regularization` itself (not under ``vmap``, which would take another, numerically
  different path);
* evaluation (validation, DCE curves) calls the single network's own ``forward`` per member through
  ``torch.func.functional_call``, and the validation accumulator every run uses
  (:class:`kcal.run.epoch.ValidationAccumulator`).

**The optimiser step** is :class:`kcal.run.optimiser.LaneAdam`, whose update of an element does not depend on where
the element lies (torch's fused Adam over the parameters as they are, the step before it, made a seed's numbers
depend on its stack's size: see :mod:`kcal.run.optimiser`). So a seed's numbers are the same in a stack of any size
(``seeds_run.chunk_size``, and the pool's split of a rerun into parts) and alone, bit for bit on one machine
(tests/reruns/test_seed_stacks.py); ``run.json``'s ``vectorized.members`` still records the size.

Known difference: the recorded *training* loss of cross-entropy objectives, because the batched
cross-entropy sums a batch in a different order than ``F.cross_entropy(reduction="mean")`` (a few ulps on
``train/loss``/``train/base`` in ``history.csv``; gradients are identical, ``metrics.json`` unaffected).
Each member writes what ``kcal.run.run`` writes (:mod:`kcal.run.artifacts`), except Lightning's ``csv/`` log
(``history.csv`` holds the same per-epoch values).

Under ``dataset.protocol=clean`` the data split (and so ``median`` bandwidths and the decision threshold)
depends on the seed, so members would not share their data: ``train_stacked`` then falls back to sequential
``kcal.run.run`` calls, as it does for a model it cannot stack.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

from omegaconf import DictConfig, open_dict

from kcal.data.preprocessing import protocol_of
from kcal.run import setup
from kcal.run.setup import prepare
from kcal.run.single import run, train_members
from kcal.run.stacked_net import STACKABLE

log = logging.getLogger(__name__)


def train_stacked(cfg: DictConfig, seeds: list[int], out_dirs: list[Path], chunk_size: int | None = None,
              progress: bool = True) -> list[dict]:  # fmt: skip
    """Train ``cfg`` once per seed and write, for each, what ``kcal.run.run`` writes.

    Members are trained side by side as one batched model, in chunks of at most ``chunk_size`` members
    (None: all at once). Each ``out_dirs[i]`` receives ``config.yaml`` (with ``seed=seeds[i]``),
    ``metrics.json``, ``history.csv``, ``predictions.npz``, ``run.json`` and, when ``cfg.save_checkpoint``,
    ``checkpoints/best.pt`` (the best weights' ``state_dict``). Returns the metrics dicts in seed order.
    """
    seeds = [int(s) for s in seeds]
    out_dirs = [Path(d) for d in out_dirs]
    if len(seeds) != len(out_dirs):
        raise ValueError(f"got {len(seeds)} seeds but {len(out_dirs)} output directories")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {seeds}")
    if not seeds:
        return []
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 or None, got {chunk_size}")
    cfgs = [member_config(cfg, s) for s in seeds]
    reason = sequential_reason(cfg)
    if reason is None:
        prep = prepare(cfgs[0])
        model = setup.build(prep, seeds[0])
        if not isinstance(model, STACKABLE):
            reason = f"model {type(model).__name__} cannot be stacked"
    if reason is not None:
        log.info("kcal.run.stacked: training sequentially (%s)", reason)
        return [run(c, d) for c, d in zip(cfgs, out_dirs, strict=True)]

    size = len(seeds) if chunk_size is None else int(chunk_size)
    results: list[dict] = []
    for start in range(0, len(seeds), size):
        idx = range(start, min(start + size, len(seeds)))
        results += train_members(prep, [seeds[i] for i in idx], [cfgs[i] for i in idx],
                                 [out_dirs[i] for i in idx], progress, snapshots=True)  # fmt: skip
    return results


def member_config(cfg: DictConfig, seed: int) -> DictConfig:
    """``cfg`` with ``seed`` set (a deep copy; the caller's config is not modified)."""
    out = copy.deepcopy(cfg)
    with open_dict(out):
        out.seed = int(seed)
    return out


def sequential_reason(cfg: DictConfig) -> str | None:
    """Why ``cfg``'s seeds cannot be stacked (None: they can)."""
    if not protocol_of(cfg.dataset.protocol).fixed_split:
        # the split, the normalisation statistics, 'median' bandwidths and the decision threshold all
        # depend on the seed: the members would not share their data, so there is nothing to batch
        return f"dataset.protocol={cfg.dataset.protocol}: the data split depends on the seed"
    return None
