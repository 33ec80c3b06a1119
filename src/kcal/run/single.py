"""One run from one config, and the members of a seed stack: prepare, train, restore the best
weights, evaluate, write the run's files (:mod:`kcal.run.artifacts`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig

from kcal.core import layout
from kcal.run import setup
from kcal.run.artifacts import checkout_commit, finalize, save_config, save_state
from kcal.run.engine import Member
from kcal.run.module import fit_members, member_result
from kcal.run.setup import Prepared
from kcal.run.snapshot import Snapshot, snapshot_key


def run(
    cfg: DictConfig, output_dir: str | Path, epoch_hook: Callable[[dict, int], bool] | None = None
) -> dict:
    """Train one model, restore its best weights, evaluate; write the run's files; return the metrics.
    ``epoch_hook(row, epoch)``: called after each epoch with its history row; True stops training there
    (a pruned sweep trial), and the run is evaluated as one that stopped early."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    pl.seed_everything(cfg.seed, workers=False, verbose=False)  # stray global-RNG users stay seeded too
    prep = setup.prepare(cfg)
    return train_members(
        prep, [int(cfg.seed)], [cfg], [out], progress=False, log_dir=out, epoch_hook=epoch_hook
    )[0]


def train_members(prep: Prepared, seeds: list[int], cfgs: list[DictConfig], outs: list[Path],
                  progress: bool, log_dir: Path | None = None,
                  epoch_hook: Callable[[dict, int], bool] | None = None, snapshots: bool = False) -> list[dict]:  # fmt: skip
    """Train one member per seed in one engine and write each member's files; the metrics, in order.
    ``log_dir``: where Lightning's CSV log of a single run goes (None: no log, as for seed reruns);
    ``epoch_hook``: each member's (:attr:`kcal.run.engine.Member.epoch_hook`); ``snapshots``: the training writes
    snapshots to go on from after a stop (:mod:`kcal.run.snapshot`, in the first member's folder)."""
    dev = setup.device(prep.cfg)
    members = [Member.create(s, c, Path(o), dev) for s, c, o in zip(seeds, cfgs, outs, strict=True)]
    for m in members:
        m.epoch_hook = epoch_hook
    for m in members:
        save_config(m.cfg, m.out)
    single = len(members) == 1
    snapshot = None
    if snapshots:
        key = snapshot_key(cfgs, seeds, dev, checkout_commit())
        snapshot = Snapshot.of(prep.cfg, layout.snapshot_file(members[0].out), key)
    _, seconds = fit_members(prep, members, dev, out=log_dir if single else None, progress=progress,
                             snapshot=snapshot)  # fmt: skip
    results = []
    for m in members:
        mprep = replace(prep, cfg=m.cfg)
        model = setup.build(mprep, m.seed).to(dev)
        if m.diverged_epoch is None and m.ckpt_state is not None:
            model.load_state_dict(m.ckpt_state)
        elif m.final_state is not None:
            model.load_state_dict(m.final_state)
        if m.ckpt_state is not None and m.cfg.save_checkpoint:
            save_state(m.ckpt_state, m.out)
        result = member_result(m, seconds / len(members))
        extra = {} if single else {
            "vectorized": {"members": len(members), "seeds": seeds, "chunk_train_seconds": seconds,
                           "train_seconds_note": "train_seconds is this member's share of the chunk"}}  # fmt: skip
        if snapshot is not None and snapshot.resumed_epoch is not None:
            extra["resumed"] = {"epoch": snapshot.resumed_epoch, "seconds_before": snapshot.seconds_before,
                                "note": "went on from a snapshot at this epoch; the seconds include those before"}  # fmt: skip
        pl.seed_everything(m.seed, workers=False, verbose=False)  # as a run leaves the global RNGs
        results.append(finalize(mprep, model, result, m.out, m.seed, extra_run_info=extra or None))
    if snapshot is not None:
        snapshot.discard()  # only now: a stop while the members' files were written goes on from it
    return results
