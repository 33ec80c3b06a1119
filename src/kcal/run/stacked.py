"""Train K seeds of one configuration at once, as one batched model, each member exactly as alone.

    from kcal.run.stacked import run_seeds
    metrics = run_seeds(cfg, seeds=[0, 1, 2], out_dirs=[Path("s0"), Path("s1"), Path("s2")])

The networks are tiny MLPs, so a single run is dominated by per-step overhead (Python, Lightning,
kernel launches). Here the K members' weights are stacked along a leading dimension and each training
step runs every layer once for all members (``baddbmm``/``bmm`` for linear layers; BatchNorm as one
``batch_norm`` call over K x width channels), so one optimiser step trains K networks.

**Equivalence.** Member k reproduces ``kcal.run.run`` with ``seed=k`` (see :mod:`kcal.seeding`): its
initial weights come from ``kcal.run.setup.build(prep, k)``; its batch order from its own generator seeded
``shuffle_seed(k)`` (one ``randperm`` per epoch, as :class:`kcal.data.batches.TensorBatches`); its MMD
forecast draws from its own generator seeded ``noise_seed(k)`` with exactly the call that
``regression_mmd`` makes (``randn((num_samples, n), generator=g)``), passed to the objective as ``eps=``;
its validation draws from a generator re-seeded ``eval_seed(k)`` every validation epoch. The Lightning
semantics of :func:`kcal.run.module.fit` are replayed per member: Adam(lr, weight_decay) (element-wise, so
stacking does not change it), ``clip_grad_norm_`` over all of the member's parameters, drop_last training
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
* the base loss is ``torch.func.vmap`` of :meth:`Objective.base` (gradients identical); the regulariser is
  evaluated per member with :meth:`Objective.regularization` itself (``kcal.mmd``'s fused fast path is
  not ``vmap``-able, and under ``vmap`` it would take another, numerically different path);
* evaluation (validation, DCE curves) calls the single network's own ``forward`` per member through
  ``torch.func.functional_call``, and the validation accumulator of the Lightning module
  (:class:`kcal.run.epoch.ValidationAccumulator`).

The one known difference: the recorded *training* loss of cross-entropy objectives, because the batched
cross-entropy sums a batch in a different order than ``F.cross_entropy(reduction="mean")`` (a few ulps on
``train/loss``/``train/base`` in ``history.csv``; gradients are identical, ``metrics.json`` unaffected).
Each member writes what ``kcal.run.run`` writes (:mod:`kcal.run.artifacts`), except that the best weights are
``checkpoints/best.pt`` (a plain ``state_dict``) instead of Lightning's ``best.ckpt``, and there is no
Lightning ``csv/`` log (``history.csv`` holds the same per-epoch values).

Under ``dataset.protocol=clean`` the data split (and so ``median`` bandwidths and the decision threshold)
depends on the seed, so members would not share their data: ``run_seeds`` then falls back to sequential
``kcal.run.run`` calls, as it does for a model it cannot stack.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, open_dict

from kcal import seeding
from kcal.objectives import Objective
from kcal.run import setup
from kcal.run.artifacts import finalize, save_config, save_state
from kcal.run.epoch import MonitorState, ValidationAccumulator, diverged, train_values, update_bests
from kcal.run.module import FitResult
from kcal.run.setup import Prepared, device, prepare
from kcal.run.single import run
from kcal.run.stacked_net import (
    STACKABLE,
    StackedMLP,
    adam,
    clip_grad_norm_per_member,
    compact_optimizer,
    member_slice,
)

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------------
def run_seeds(cfg: DictConfig, seeds: list[int], out_dirs: list[Path], chunk_size: int | None = None,
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
        results += _run_chunk(prep, [seeds[i] for i in idx], [cfgs[i] for i in idx], [out_dirs[i] for i in idx],
                              progress)  # fmt: skip
    return results


def member_config(cfg: DictConfig, seed: int) -> DictConfig:
    """``cfg`` with ``seed`` set (a deep copy; the caller's config is not modified)."""
    out = copy.deepcopy(cfg)
    with open_dict(out):
        out.seed = int(seed)
    return out


def sequential_reason(cfg: DictConfig) -> str | None:
    """Why ``cfg``'s seeds cannot be stacked (None: they can)."""
    if cfg.dataset.protocol != "official":
        # the split, the normalisation statistics, 'median' bandwidths and the decision threshold all
        # depend on the seed: the members would not share their data, so there is nothing to batch
        return f"dataset.protocol={cfg.dataset.protocol}: the data split depends on the seed"
    return None


# ------------------------------------------------------------------------------------------------
# Per-member bookkeeping (the Lightning callbacks' state)
# ------------------------------------------------------------------------------------------------
@dataclass
class Member:
    seed: int
    cfg: DictConfig
    out: Path
    shuffle: torch.Generator
    noise: torch.Generator
    monitor: MonitorState | None = None  # EarlyStopping + ModelCheckpoint on trainer.monitor
    history: list[dict] = field(default_factory=list)
    best: dict[str, float] = field(default_factory=dict)
    diverged_epoch: int | None = None
    ckpt_state: dict | None = None  # the best weights (ModelCheckpoint's file, kept in memory)
    final_state: dict | None = None
    epochs: int = 0

    def __post_init__(self):
        if self.monitor is None:
            self.monitor = MonitorState(str(self.cfg.trainer.monitor), int(self.cfg.trainer.patience))


# ------------------------------------------------------------------------------------------------
# Training one chunk
# ------------------------------------------------------------------------------------------------
def _noise_shape(objective: Objective) -> int | None:
    """M when a training/validation step of the single run draws ``randn((M, n), generator=g)`` inside
    ``regression_mmd`` (its only use of the generator), else None."""
    if not objective.uses_noise or objective.params.get("pairing", "index") == "analytic":
        return None
    from kcal.mmd import regression_mmd

    return int(
        objective.params.get(
            "num_samples", inspect.signature(regression_mmd).parameters["num_samples"].default
        )
    )


class StackedTrainer:
    """Replays :func:`kcal.run.module.fit` for K members at once."""

    def __init__(self, prep: Prepared, members: list[Member], device: torch.device):
        self.prep, self.members, self.device = prep, members, device
        cfg = prep.cfg
        self.t = cfg.trainer
        self.objective = prep.objective
        self.task = prep.task
        self.log_dce = bool(self.t.log_dce) and self.task == "regression"
        self.train_split = prep.data.train.to(device)
        self.val_split = prep.data.val.to(device)
        self.noise_samples = _noise_shape(self.objective)
        models = [setup.build(prep, m.seed) for m in members]
        self.net = StackedMLP(models).to(device)
        self.opt = adam(self.net.parameters(), cfg)
        self.active = list(range(len(members)))  # member index of each stack position
        self.base = torch.func.vmap(self.objective.base)

    # ---- one training epoch for the active members -----------------------------------------------
    def train_epoch(self) -> torch.Tensor:
        net, t = self.net, self.t
        x, y = self.train_split.x, self.train_split.y
        n, bs = x.shape[0], int(t.batch_size)
        nb = n // bs  # drop_last
        perms = torch.stack(
            [torch.randperm(n, device=x.device, generator=self.members[i].shuffle) for i in self.active]
        )
        k = len(self.active)
        sums = torch.zeros(k, 3, device=x.device)
        net.training = True
        params = net.parameters()
        weight = float(self.objective.weight)
        has_reg = self.objective.regularizer is not None and weight != 0
        for b in range(nb):
            idx = perms[:, b * bs : (b + 1) * bs]
            xb, yb = x[idx], y[idx]
            outputs = net(xb)
            base = self.base(outputs, yb)
            if has_reg:
                reg = torch.stack([self._regularizer(outputs, xb, yb, i) for i in range(k)])
                loss = base + weight * reg
            else:
                reg = torch.zeros_like(base)
                loss = base
            for p in params:
                p.grad = None
            loss.sum().backward()
            if t.gradient_clip_val is not None and t.gradient_clip_val > 0:
                clip_grad_norm_per_member(params, float(t.gradient_clip_val))
            self.opt.step()
            sums += torch.stack([loss.detach(), base.detach(), reg.detach()], dim=1)
        return sums / max(nb, 1)

    def _regularizer(self, outputs, xb, yb, pos: int) -> torch.Tensor:
        out_i, x_i, y_i = member_slice(outputs, pos), xb[pos], yb[pos]
        eps = None
        if self.noise_samples is not None:
            mean = out_i[0]
            gen = self.members[self.active[pos]].noise
            eps = torch.randn(
                (self.noise_samples, mean.shape[0]), generator=gen, dtype=mean.dtype, device=mean.device
            )
        return self.objective.regularization(out_i, x_i, y_i, eps=eps)

    # ---- validation (and the DCE curves) -----------------------------------------------------------
    @torch.no_grad()
    def eval_outputs(self, x: torch.Tensor):
        """Eval-mode outputs (K, n, ...) of all active members on shared rows ``x`` (n, d)."""
        return self.net.eval_forward(x)

    @torch.no_grad()
    def validate(self) -> list[dict]:
        net, t, obj = self.net, self.t, self.objective
        net.training = False
        xv, yv = self.val_split.x, self.val_split.y
        ebs = int(t.eval_batch_size)
        bounds = [(s, min(s + ebs, xv.shape[0])) for s in range(0, xv.shape[0], ebs)]
        outs = [self.eval_outputs(xv[s:e]) for s, e in bounds]
        train_out = self.eval_outputs(self.train_split.x) if self.log_dce else None
        rows = []
        for pos, i in enumerate(self.active):
            m = self.members[i]
            gen = seeding.generator(seeding.eval_seed(m.seed), xv.device)
            acc = ValidationAccumulator(self.task)
            for (s, e), out in zip(bounds, outs, strict=True):
                o, xb, yb = member_slice(out, pos), xv[s:e], yv[s:e]
                if e - s >= 2:
                    loss, _, _ = obj(o, xb, yb, generator=gen)
                else:  # a 1-row tail batch has no U-statistic; the base loss alone
                    loss = obj.base(o, yb)
                acc.update(o, yb, loss)
            values = {key: float(v) for key, v in acc.compute().items()}
            if self.log_dce:
                from kcal.diagnostics import decision_curves

                seed = seeding.eval_seed(m.seed)
                values |= decision_curves(
                    member_slice(train_out, pos), self.train_split.y, self.prep.threshold, "train", seed
                )
                values |= decision_curves(acc.split()[0], yv, self.prep.threshold, "val", seed)
            update_bests(m.best, values)
            rows.append(values)
        return rows

    # ---- the fit loop ------------------------------------------------------------------------------
    def fit(self, progress: bool) -> float:
        from tqdm.auto import tqdm

        t = self.t
        max_epochs, min_epochs = int(t.max_epochs), int(t.min_epochs or 0)
        label = f"{self.prep.data.info.name}/{self.prep.objective.name} x{len(self.members)} seeds"
        # disable=None: tqdm draws only on a terminal; in a log file the per-chunk progress line reports
        bar = tqdm(
            total=max_epochs, desc=label, disable=None if progress else True, leave=False, unit="epoch"
        )
        t0 = time.perf_counter()
        try:
            for epoch in range(max_epochs):
                train_means = self.train_epoch().tolist()  # one host sync per epoch
                val_rows = self.validate()
                finished = []
                for pos, i in enumerate(self.active):
                    m = self.members[i]
                    row = {
                        "epoch": epoch,
                        **val_rows[pos],
                        **train_values(*train_means[pos], self.objective.weight),
                    }
                    loss = row["train/loss"]
                    m.history.append(row)
                    m.epochs = epoch + 1
                    if diverged(loss):
                        m.diverged_epoch = epoch
                        m.monitor.stop_requested = True
                    # EarlyStopping then ModelCheckpoint (Lightning runs checkpoint callbacks last)
                    if m.monitor.update(row, epoch):
                        m.ckpt_state = self.net.member_state(pos)
                    can_stop = m.epochs >= min_epochs if min_epochs else True
                    if (m.monitor.stop_requested and can_stop) or m.epochs >= max_epochs:
                        finished.append(pos)
                if finished:
                    self._retire(finished)
                bar.update(1)
                bar.set_postfix(training=len(self.active))
                if not self.active:
                    break
        finally:
            bar.close()
        return time.perf_counter() - t0

    def _retire(self, positions: list[int]) -> None:
        for pos in positions:
            m = self.members[self.active[pos]]
            if m.diverged_epoch is not None:
                m.final_state = self.net.member_state(pos)
        keep = [p for p in range(len(self.active)) if p not in set(positions)]
        self.active = [self.active[p] for p in keep]
        if not keep:
            return
        old_params = self.net.parameters()
        rows = torch.as_tensor(keep, dtype=torch.long, device=old_params[0].device)
        self.net.keep(keep)
        self.opt = compact_optimizer(self.opt, old_params, self.net.parameters(), rows, self.prep.cfg)


def _run_chunk(prep: Prepared, seeds: list[int], cfgs: list[DictConfig], outs: list[Path],
               progress: bool) -> list[dict]:  # fmt: skip
    dev = device(prep.cfg)
    members = [
        Member(seed=s, cfg=c, out=o, shuffle=torch.Generator(device=dev).manual_seed(seeding.shuffle_seed(s)),
               noise=seeding.generator(seeding.noise_seed(s), dev))
        for s, c, o in zip(seeds, cfgs, outs, strict=True)
    ]  # fmt: skip
    for m in members:
        save_config(m.cfg, m.out)
    deterministic = bool(prep.cfg.trainer.deterministic)
    if deterministic and dev.type == "cuda":  # as Lightning's deterministic=True (cuBLAS workspace)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic or was_deterministic)
    try:
        trainer = StackedTrainer(prep, members, dev)
        seconds = trainer.fit(progress)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
    results = []
    for m in members:
        mprep = replace(prep, cfg=m.cfg)
        model = setup.build(mprep, m.seed).to(dev)
        best_epoch = None
        if m.diverged_epoch is None and m.ckpt_state is not None:
            model.load_state_dict(m.ckpt_state)
            best_epoch = m.monitor.ckpt_epoch
        elif m.final_state is not None:
            model.load_state_dict(m.final_state)
        if m.ckpt_state is not None and m.cfg.save_checkpoint:
            save_state(m.ckpt_state, m.out)
        share = seconds / len(members)
        result = FitResult(m.epochs, best_epoch, m.diverged_epoch, dict(m.best), share, list(m.history))
        extra = {"vectorized": {"members": len(members), "seeds": seeds, "chunk_train_seconds": seconds,
                                "train_seconds_note": "train_seconds is this member's share of the chunk"}}  # fmt: skip
        pl.seed_everything(m.seed, workers=False, verbose=False)  # as kcal.run.run leaves the global RNGs
        results.append(finalize(mprep, model, result, m.out, m.seed, extra_run_info=extra))
    return results
