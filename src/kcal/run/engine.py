"""The training loop, written once: K >= 1 members of one configuration, each as if trained alone.

Every run trains here: a single run and a sweep trial are K = 1, a stack of seed reruns is K > 1
(:mod:`kcal.run.stacked`), and :mod:`kcal.run.module` lets Lightning drive it one epoch at a time.
An epoch (:meth:`Engine.epoch`) is

1. the minibatch steps, as a plain torch loop with the data on the device: per member its own batch
   order (``shuffle_seed``), forward, base loss, regulariser (its MMD draws from its own ``noise_seed``
   generator), backward, gradient clipping over the member's parameters, one Adam step. The epoch's
   batches are gathered once (in chunks of at most ``GATHER_ELEMENTS``), and with them what the
   regulariser needs that the network does not change (:meth:`kcal.objectives.Objective.prepare`: the
   MMD's x-kernels and target-target sums), in one batched call instead of once per step;
2. validation on the whole split in ``eval_batch_size`` chunks (:class:`kcal.run.epoch.ValidationAccumulator`,
   validation draws re-seeded ``eval_seed`` each epoch; the chunks' regulariser constants built once per
   run), and the DCE curves when ``trainer.log_dce``;
3. the per-epoch rules of :mod:`kcal.run.epoch` for each member: history row, divergence, early stopping
   and best weights (:class:`~kcal.run.epoch.MonitorState`, Lightning's ``EarlyStopping`` and
   ``ModelCheckpoint(save_top_k=1)`` as plain state), ``min_epochs``/``max_epochs``. A member that stops
   leaves the stack with its optimiser state.

For K = 1 the network is the model itself (:class:`SingleNet`), so a trial costs what a hand-written
loop costs; for K > 1 it is :class:`~kcal.run.stacked_net.StackedMLP`, whose batched kernels equal the
single model's bit for bit where a probe shows it (member by member otherwise). Adam is
:class:`kcal.run.optimiser.LaneAdam`: torch's fused kernel, with every element in its vector lanes, so a member's
update is the same alone or stacked. One host synchronisation per epoch for the training means, one per validation.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig

from kcal.core import random_streams
from kcal.objectives import Objective
from kcal.run import setup
from kcal.run.epoch import MonitorState, ValidationAccumulator, diverged, train_values, update_bests
from kcal.run.optimiser import adam
from kcal.run.setup import Prepared
from kcal.run.stacked_net import StackedMLP, clip_grad_norm, clip_grad_norm_per_member, member_slice

__all__ = ["Engine", "GATHER_ELEMENTS", "Member", "SingleNet", "step_chunks"]

#: at most this many elements of gathered batches (inputs, labels, x-kernels) per chunk of an epoch's steps
GATHER_ELEMENTS = 1 << 23


def step_chunks(
    steps: int, members: int, batch_size: int, features: int, kernels: bool
) -> list[tuple[int, int]]:
    """An epoch's ``steps`` as ranges ``[b0, b1)`` gathered together: as many steps as fit
    ``GATHER_ELEMENTS`` elements of gathered inputs and labels (and (bs, bs) x-kernels when ``kernels``) for
    ``members`` members, the whole epoch when it fits, one step at the least."""
    per_step = members * batch_size * (features + 2 + (batch_size if kernels else 0))
    size = max(1, min(steps, GATHER_ELEMENTS // max(per_step, 1)))
    return [(b0, min(b0 + size, steps)) for b0 in range(0, steps, size)]


class SingleNet:
    """One model behind the stacked network's interface (outputs with a leading member dim of 1).

    Training runs the model's own ``forward`` on ``x[0]``, so K = 1 pays nothing for stacking.
    """

    members = 1

    def __init__(self, model: torch.nn.Module):
        self.model = model

    @property
    def training(self) -> bool:
        return self.model.training

    @training.setter
    def training(self, mode: bool) -> None:
        self.model.train(mode)

    def parameters(self) -> list[torch.Tensor]:
        return list(self.model.parameters())

    def __call__(self, x: torch.Tensor):
        return _stack_one(self.model(x[0]))

    @torch.no_grad()
    def eval_forward(self, x: torch.Tensor):
        self.model.eval()
        return _stack_one(self.model(x if x.dim() == 2 else x[0]))

    def member_state(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's ``state_dict`` (for a training snapshot)."""
        return self.model.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Copy ``state`` into the model in place (its parameters stay the optimiser's)."""
        self.model.load_state_dict(state)

    def to(self, device) -> SingleNet:
        self.model.to(device)
        return self


def _stack_one(out):
    return tuple(t.unsqueeze(0) for t in out) if isinstance(out, tuple) else out.unsqueeze(0)


@dataclass
class Member:
    """One seed's state: its generators, the Lightning callbacks' state, its history and best weights."""

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
    #: called with each epoch's history row and the epoch; True stops the member there (a pruned sweep trial)
    epoch_hook: Callable[[dict, int], bool] | None = None
    pruned_epoch: int | None = None

    def __post_init__(self):
        if self.monitor is None:
            self.monitor = MonitorState(str(self.cfg.trainer.monitor), int(self.cfg.trainer.patience))

    #: what :meth:`state_dict` keeps as it is (the generators and early-stopping state are kept by value)
    PLAIN_STATE = ("history", "best", "diverged_epoch", "ckpt_state", "final_state", "epochs", "pruned_epoch")

    def state_dict(self) -> dict:
        """The member's training state for a snapshot: its generators' states, early stopping and best checkpoint,
        history, running bests and best weights."""
        return {"shuffle": self.shuffle.get_state(), "noise": self.noise.get_state(),
                "monitor": dataclasses.asdict(self.monitor), **{k: getattr(self, k) for k in self.PLAIN_STATE}}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict` (the member's seed, config and folder are its own)."""
        self.shuffle.set_state(state["shuffle"])
        self.noise.set_state(state["noise"])
        self.monitor = MonitorState(**state["monitor"])
        for k in self.PLAIN_STATE:
            setattr(self, k, state[k])

    @classmethod
    def create(cls, seed: int, cfg: DictConfig, out: Path, device: torch.device) -> Member:
        """A member with its batch-order and MMD-noise generators seeded from ``seed`` on ``device``."""
        return cls(seed=seed, cfg=cfg, out=out,
                   shuffle=torch.Generator(device=device).manual_seed(random_streams.shuffle_seed(seed)),
                   noise=random_streams.generator(random_streams.noise_seed(seed), device))  # fmt: skip


def noise_samples(objective: Objective) -> int | None:
    """M when a step of the objective draws ``randn((M, n), generator=g)`` inside ``regression_mmd``
    (its only use of the generator), else None."""
    if not objective.uses_noise or objective.params.get("pairing", "index") == "analytic":
        return None
    from kcal.mmd import regression_mmd

    default = inspect.signature(regression_mmd).parameters["num_samples"].default
    return int(objective.params.get("num_samples", default))


class Engine:
    """Trains ``members`` (one config, one seed each) side by side; see the module docstring."""

    def __init__(self, prep: Prepared, members: list[Member], device: torch.device):
        self.prep, self.members, self.device = prep, members, device
        cfg = prep.cfg
        self.t = cfg.trainer
        self.objective = prep.objective
        self.task = prep.task
        self.log_dce = bool(self.t.log_dce) and self.task == "regression"
        self.train_split = prep.data.train.to(device)
        self.val_split = prep.data.val.to(device)
        self.noise_samples = noise_samples(self.objective)
        models = [setup.build(prep, m.seed) for m in members]
        self.net = (SingleNet(models[0]) if len(models) == 1 else StackedMLP(models)).to(device)
        self.opt = adam(self.net.parameters(), cfg)
        self.active = list(range(len(members)))  # member index of each stack position
        self.base = torch.func.vmap(self.objective.base)
        self.weight = float(self.objective.weight)
        self.has_reg = self.objective.regularizer is not None and self.weight != 0
        clip = self.t.gradient_clip_val
        self.clip = float(clip) if clip is not None and clip > 0 else None
        self.max_epochs, self.min_epochs = int(self.t.max_epochs), int(self.t.min_epochs or 0)
        # validation chunks, and their regulariser constants: built once, as x and y never change
        xv, yv, ebs = self.val_split.x, self.val_split.y, int(self.t.eval_batch_size)
        self.val_bounds = [(s, min(s + ebs, xv.shape[0])) for s in range(0, xv.shape[0], ebs)]
        self.val_consts = [self.objective.prepare(xv[s:e], yv[s:e]) if self.has_reg and e - s >= 2 else None
                           for s, e in self.val_bounds]  # fmt: skip

    # ---- a snapshot of the training, and going on from one ----------------------------------------------
    def state_dict(self) -> dict:
        """Everything the next epochs depend on: the stacked weights and buffers of the members still training,
        Adam's state, which members those are, and each member's :meth:`Member.state_dict`."""
        return {"net": self.net.state_dict(), "optimizer": self.opt.state_dict(), "active": list(self.active),
                "members": [m.state_dict() for m in self.members]}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict` of an engine built from the same config, seeds and data: the next epoch
        is the one the saved engine would have trained next, with the same numbers on the same machine."""
        if len(state["members"]) != len(self.members):
            raise ValueError(
                f"a snapshot of {len(state['members'])} members cannot continue {len(self.members)}"
            )
        for m, member_state in zip(self.members, state["members"], strict=True):
            m.load_state_dict(member_state)
        self.active = list(state["active"])
        self.net.load_state_dict(state["net"])
        self.opt = adam(self.net.parameters(), self.prep.cfg)
        self.opt.load_state_dict(state["optimizer"])

    # ---- the minibatch steps of one epoch -----------------------------------------------------------
    def step_chunks(self, nb: int, k: int) -> list[tuple[int, int]]:
        """The epoch's steps ``[b0, b1)`` whose batches are gathered (and their regulariser constants built)
        together (:func:`step_chunks`)."""
        return step_chunks(nb, k, int(self.t.batch_size), self.train_split.x.shape[-1], self.has_reg)

    def train_epoch(self) -> torch.Tensor:
        """One epoch of minibatch steps for the active members; (K, 3) means of loss, base, regulariser."""
        x, y = self.train_split.x, self.train_split.y
        n, bs = x.shape[0], int(self.t.batch_size)
        nb = n // bs  # drop_last
        k = len(self.active)
        gens = [self.members[i].shuffle for i in self.active]
        single = isinstance(self.net, SingleNet)
        if single:
            order = torch.randperm(n, device=x.device, generator=gens[0])
        else:  # (steps, K, bs) after the view below: step b's batch of every member is contiguous
            order = torch.stack([torch.randperm(n, device=x.device, generator=g) for g in gens])
        sums = torch.zeros(k, 3, device=x.device)
        self.net.training = True
        params = self.net.parameters()
        for b0, b1 in self.step_chunks(nb, k):
            if single:
                idx = order[b0 * bs : b1 * bs].view(b1 - b0, bs)
            else:
                idx = order[:, b0 * bs : b1 * bs].view(k, b1 - b0, bs).transpose(0, 1)
            xs, ys = x[idx], y[idx]  # (steps, [K,] bs, ...): one gather for the chunk
            consts = self.objective.prepare(xs, ys) if self.has_reg else None
            for j in range(b1 - b0):
                xb, yb = xs[j], ys[j]
                if single:  # the plain loop: no batched kernels, no vmap
                    out = self.net.model(xb)
                    base = self.objective.base(out, yb)
                    if self.has_reg:
                        c = consts.at(j) if consts is not None else None
                        reg = self._regularizer(out, xb, yb, 0, c)
                        loss = self.objective.combine(base, reg)
                    else:
                        reg, loss = torch.zeros_like(base), self.objective.combine(base)
                    total = loss
                else:
                    outputs = self.net(xb)
                    base = self.base(outputs, yb)
                    if self.has_reg:
                        reg = self._stacked_regularizer(
                            outputs, xb, yb, consts.at(j) if consts is not None else None
                        )
                        loss = self.objective.combine(base, reg)
                    else:
                        reg = torch.zeros_like(base)
                        loss = self.objective.combine(base)
                    total = loss.sum()
                for p in params:
                    p.grad = None
                total.backward()
                if self.clip is not None:
                    if single:
                        clip_grad_norm(params, self.clip)
                    else:
                        clip_grad_norm_per_member(params, self.clip)
                self.opt.step()
                sums += torch.stack([loss.detach(), base.detach(), reg.detach()], dim=-1)
        return sums / max(nb, 1)

    def _stacked_regularizer(self, outputs, xb, yb, const) -> torch.Tensor:
        """(K,) regularisers of the active members: the MMD, MMCE and ECE-KDE in one batched call where a probe finds it
        exact on the device (:meth:`kcal.mmd.steps.MMDStep.stack_exact`, each member's draws from its own
        generator; :meth:`kcal.objectives.Objective.stack_exact`), any other member by member."""
        if self.objective.stack_exact(outputs):
            return self.objective.stacked_regularization(outputs, yb)
        step = self.objective.mmd_step
        if const is not None and step is not None and step.stack_exact(outputs):
            eps = None
            if self.noise_samples is not None:
                mean = outputs[0]
                eps = torch.stack([torch.randn((self.noise_samples, mean.shape[-1]), generator=self.members[i].noise,
                                               dtype=mean.dtype, device=mean.device) for i in self.active])  # fmt: skip
            return step.stacked(outputs, yb, eps, const)
        return torch.stack([self._regularizer(member_slice(outputs, i), xb[i], yb[i], i,
                                              const.at(i) if const is not None else None)
                            for i in range(len(self.active))])  # fmt: skip

    def _regularizer(self, out_i, x_i, y_i, pos: int, const=None) -> torch.Tensor:
        eps = None
        if self.noise_samples is not None:
            mean = out_i[0]
            gen = self.members[self.active[pos]].noise
            eps = torch.randn(
                (self.noise_samples, mean.shape[0]), generator=gen, dtype=mean.dtype, device=mean.device
            )
        return self.objective.regularization(out_i, x_i, y_i, eps=eps, const=const)

    # ---- validation (and the DCE curves) -----------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> list[dict]:
        """Whole-split validation values of each active member (one host synchronisation each)."""
        obj = self.objective
        self.net.training = False
        xv, yv = self.val_split.x, self.val_split.y
        bounds = self.val_bounds
        outs = [self.net.eval_forward(xv[s:e]) for s, e in bounds]
        train_out = self.net.eval_forward(self.train_split.x) if self.log_dce else None
        rows = []
        for pos, i in enumerate(self.active):
            m = self.members[i]
            gen = random_streams.generator(random_streams.eval_seed(m.seed), xv.device)
            acc = ValidationAccumulator(self.task)
            for (s, e), out, const in zip(bounds, outs, self.val_consts, strict=True):
                o, xb, yb = member_slice(out, pos), xv[s:e], yv[s:e]
                if e - s >= 2:
                    loss, _, _ = obj(o, xb, yb, generator=gen, const=const)
                else:  # a 1-row tail batch has no U-statistic; the (weighted) base loss alone
                    loss = obj.combine(obj.base(o, yb))
                acc.update(o, yb, loss)
            values = {key: float(v) for key, v in acc.compute().items()}
            if self.log_dce:
                from kcal.run.diagnostics import decision_curves

                seed = random_streams.eval_seed(m.seed)
                values |= decision_curves(
                    member_slice(train_out, pos), self.train_split.y, self.prep.threshold, "train", seed
                )
                values |= decision_curves(acc.split()[0], yv, self.prep.threshold, "val", seed)
            update_bests(m.best, values)
            rows.append(values)
        return rows

    # ---- one epoch: steps, validation, the per-member rules -----------------------------------------
    def epoch(self, epoch: int) -> list[dict]:
        """Train and validate every active member once; apply the per-epoch rules; return the rows."""
        train_means = self.train_epoch().tolist()  # one host sync per epoch
        val_rows = self.validate()
        finished, rows = [], []
        for pos, i in enumerate(self.active):
            m = self.members[i]
            row = {
                "epoch": epoch,
                **val_rows[pos],
                **train_values(*train_means[pos], self.weight, self.objective.base_weight),
            }
            m.history.append(row)
            rows.append(row)
            m.epochs = epoch + 1
            if diverged(row["train/loss"]):
                m.diverged_epoch = epoch
                m.monitor.stop_requested = True
            # EarlyStopping then ModelCheckpoint (Lightning runs checkpoint callbacks last)
            if m.monitor.update(row, epoch):
                m.ckpt_state = self.net.member_state(pos)
            can_stop = m.epochs >= self.min_epochs if self.min_epochs else True
            if (m.monitor.stop_requested and can_stop) or m.epochs >= self.max_epochs:
                finished.append(pos)
            elif m.epoch_hook is not None and m.epoch_hook(row, epoch):
                m.pruned_epoch = epoch
                finished.append(pos)
        if finished:
            self._retire(finished)
        return rows

    def _retire(self, positions: list[int]) -> None:
        for pos in positions:
            m = self.members[self.active[pos]]
            if m.diverged_epoch is not None:
                m.final_state = self.net.member_state(pos)
        keep = [p for p in range(len(self.active)) if p not in set(positions)]
        self.active = [self.active[p] for p in keep]
        if not keep:
            return
        rows = torch.as_tensor(keep, dtype=torch.long, device=self.net.parameters()[0].device)
        self.net.keep(keep)
        self.opt = self.opt.restricted(self.net.parameters(), rows)
