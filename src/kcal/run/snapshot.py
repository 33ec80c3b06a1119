"""A long training's snapshot, so that a stopped run goes on from its last saved epoch instead of epoch 0.

Seed reruns and regularisation paths train 20-50 seeds of a configuration as one stack (:mod:`kcal.run.stacked`),
an hour or more on the larger datasets; a stop (a killed job, a machine handed back) would lose all of it. So every
``trainer.snapshot_minutes`` minutes of training, at the end of an epoch, the stack's Lightning checkpoint is
written to :func:`kcal.core.layout.snapshot_file` of its first member's folder: Lightning's loop state (which epoch
comes next) and the engine's (:meth:`kcal.run.engine.Engine.state_dict`: the stacked weights, Adam's state, the
members still training, each member's batch-order and noise generators, early stopping, history and best weights),
with the seconds trained so far and the snapshot's *key*. It is written beside its place and renamed over it, so a
stop while writing leaves the previous snapshot whole. Each snapshot also logs a line (the epoch, the
members still training, the time trained): a long stack's progress in the run's log.

A training that finds a snapshot with its own key goes on from it through Lightning's ``ckpt_path`` and ends as the
uninterrupted training would have, number for number on the same machine (``run.json`` then says from which epoch,
``resumed``). The key is a hash of the members' seeds, their resolved configs (but for :data:`NOT_IN_KEY`, so that
``kcal paths`` with another ``paths.objectives`` goes on from a point another process began), the device and the
commit of the code (:func:`kcal.run.artifacts.checkout_commit`: like ``run.json``'s, it does not see uncommitted
edits), so a snapshot of another stack, configuration, device or commit is never continued: it is left aside with
one log line, and overwritten by the new training's first snapshot. (:meth:`Snapshot.load` reads the file once to
check its key and Lightning once more to restore it: a few MB, once a training.) A training deletes its snapshot
once its members' files are written. ``trainer.snapshot_minutes: null`` writes none (one already there is still
gone on from); 0 writes one at the end of every epoch. The snapshot is a cache of one machine's training: a state export (:mod:`kcal.orchestrate.state`)
carries finished seeds only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from kcal.core import layout
from kcal.core.progress import duration

log = logging.getLogger(__name__)

#: the key under which a Lightning checkpoint carries kcal's part of the snapshot
CHECKPOINT_KEY = "kcal_snapshot"


#: config keys that a snapshot's key leaves out: what organises runs (which points, roots, stages, sweeps) and what is
#: shown or written besides, none of which a stack's training reads (any other key, known or new, is in the key)
NOT_IN_KEY = ("seeds_run", "reproduce", "hparams_search", "sweep", "paths", "root", "hydra", "profile_name", "logger",
              "figures", "save_checkpoint", "trainer.snapshot_minutes", "trainer.progress_bar")  # fmt: skip


def snapshot_key(cfgs: list[DictConfig], seeds: list[int], device: torch.device | str, commit: str) -> str:
    """The hash that a snapshot must carry to be continued: the seeds, the resolved configs (without
    :data:`NOT_IN_KEY`), the device and the code's commit."""
    configs = [OmegaConf.to_container(c, resolve=True) for c in cfgs]
    for c in configs:
        for dotted in NOT_IN_KEY:
            *parents, last = dotted.split(".")
            node = c
            for k in parents:
                node = node.get(k, {}) if isinstance(node, dict) else {}
            if isinstance(node, dict):
                node.pop(last, None)
    parts = {"seeds": [int(s) for s in seeds], "configs": configs, "device": str(device), "commit": commit}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class Snapshot:
    """Where a training's snapshot goes, its key, and how often it is written (``every_s`` seconds; 0: each epoch;
    None: never). :meth:`load` reads a snapshot to go on from, :meth:`due` and :meth:`save` write one,
    :meth:`discard` deletes it when the training has ended."""

    path: Path
    key: str
    every_s: float | None
    seconds_before: float = 0.0  # trained by earlier processes, up to the snapshot this one went on from
    resumed_epoch: int | None = None  # the first epoch this process trained, when it went on from a snapshot
    last_save: float = field(default_factory=time.perf_counter)

    @classmethod
    def of(cls, cfg: DictConfig, path: Path, key: str) -> Snapshot:
        """The snapshot of a training of ``cfg``, written every ``trainer.snapshot_minutes`` (null: never)."""
        minutes = cfg.trainer.get("snapshot_minutes")
        if minutes is not None and float(minutes) < 0:
            raise ValueError(f"trainer.snapshot_minutes must be >= 0 or null, got {minutes}")
        return cls(Path(path), key, None if minutes is None else 60.0 * float(minutes))

    def load(self) -> Path | None:
        """The snapshot's path when there is one with this training's key to go on from (its seconds noted), else
        None; a snapshot that cannot be read or has another key is left aside with a log line."""
        if not self.path.is_file():
            return None
        try:
            ckpt = torch.load(self.path, map_location="cpu", weights_only=True)
            mine = ckpt[CHECKPOINT_KEY]
        except Exception as exc:  # noqa: BLE001 - any unreadable file is a snapshot not to go on from
            log.warning("kcal.run.snapshot: %s cannot be read (%r); training from the start", self.path, exc)
            return None
        if mine.get("key") != self.key:
            log.warning("kcal.run.snapshot: %s is of another stack, configuration or commit; training from the start",
                        self.path)  # fmt: skip
            return None
        self.seconds_before, self.resumed_epoch = float(mine["seconds"]), int(ckpt["epoch"]) + 1
        log.warning("kcal.run.snapshot: going on from %s at epoch %d (%.0f s trained before)",
                    self.path, self.resumed_epoch, self.seconds_before)  # fmt: skip
        return self.path

    def due(self) -> bool:
        """Whether ``every_s`` seconds have passed since the last snapshot (or the start)."""
        return self.every_s is not None and time.perf_counter() - self.last_save >= self.every_s

    def content(self, engine_state: dict, seconds: float) -> dict:
        """kcal's part of the checkpoint: the key, the engine's state and the seconds trained in all."""
        return {"key": self.key, "engine": engine_state, "seconds": self.seconds_before + seconds}

    def save(self, trainer) -> None:
        """Write the trainer's checkpoint (its module adds :meth:`content`) beside the snapshot, then over it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")  # a process of its own: its own file
        trainer.save_checkpoint(tmp)
        tmp.replace(self.path)
        self.last_save = time.perf_counter()

    def discard(self) -> None:
        """Delete the snapshot, and any half-written one a stopped process left beside it."""
        self.path.unlink(missing_ok=True)
        for tmp in self.path.parent.glob(f"{self.path.name}.*.tmp"):
            tmp.unlink(missing_ok=True)


def _run_info(run_dir: Path) -> dict:
    info_file = Path(run_dir) / layout.RUN_INFO_FILE
    return json.loads(info_file.read_text()) if info_file.is_file() else {}


def resumed_record(run_dir: Path) -> dict | None:
    """The ``resumed`` record (``epoch``, ``seconds_before``) of the run in ``run_dir`` when its training went on
    from a snapshot (its ``run.json``; a stack's members each carry it), else None (not resumed, or no run yet)."""
    return _run_info(run_dir).get("resumed")


def resumed_seconds(run_dirs: list[Path]) -> float:
    """The seconds the runs in ``run_dirs`` trained before a stop, summed over the trainings that went on from a
    snapshot: the members of one stack (``run.json``'s ``vectorized.seeds``) share one record, counted once."""
    seen, total = set(), 0.0
    for run_dir in run_dirs:
        info = _run_info(run_dir)
        stack = tuple(info.get("vectorized", {}).get("seeds", ())) or str(run_dir)
        if info.get("resumed") and stack not in seen:
            seen.add(stack)
            total += float(info["resumed"]["seconds_before"])
    return total


def resumed_note(record: dict | None) -> str:
    """`` after N before a stop (a snapshot at epoch E)`` for a :func:`resumed_record`, else ``""``: a progress line's
    seconds are its process's only, so a training that went on from a snapshot says how long it trained before."""
    if not record:
        return ""
    return f", after {duration(float(record['seconds_before']))} before a stop (a snapshot at epoch {record['epoch']})"
