"""Per-epoch cost of the MMD regulariser, measured by taking turns: one process holds two engines of one
dataset (the base objective and base + MMD, ``kcal.bench.workloads.PAIRS``) and runs an epoch of each in turn
(training steps and validation, as ``kcal.run.engine.Engine.epoch`` minus the per-member rules), so a
drift of the machine's speed hits both alike. Prints the median epoch of each and the median of the
per-pair ratios, with their spread.

    python -m kcal.bench.epoch_ratio crime [pairs]

On a machine whose speed varies between processes and over minutes (this project's 2-core machine varies
by 30 % from one ``kcal.bench.speed`` run to the next), the pair ratios vary far less than ``kcal.bench.speed``'s
ratio of two separately timed fits.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from kcal.bench import workloads
from kcal.run.engine import Engine, Member


def main(name: str, pairs: int) -> None:
    torch.set_num_threads(1)
    base, mmd = workloads.PAIRS[workloads.task_of(name)]
    dev = torch.device("cpu")
    engines = {}
    for obj in (base, mmd):
        prep = workloads.prepare_or_synthetic(
            workloads.compose_cfg(f"dataset={name}", f"objective={obj}", "trainer.log_dce=false")
        )
        engines[obj] = Engine(prep, [Member.create(0, prep.cfg, Path(tempfile.mkdtemp()), dev)], dev)
        engines[obj].train_epoch().tolist()  # warm-up
        engines[obj].validate()
    times: dict[str, list[float]] = {obj: [] for obj in engines}
    for _ in range(pairs):
        for obj, engine in engines.items():
            t0 = time.perf_counter()
            engine.train_epoch().tolist()
            engine.validate()
            times[obj].append(time.perf_counter() - t0)
    ratios = sorted(b / a for a, b in zip(times[base], times[mmd], strict=True))
    print(f"{name}: {base} {statistics.median(times[base]) * 1e3:.1f} ms/epoch, {mmd} "
          f"{statistics.median(times[mmd]) * 1e3:.1f} ms/epoch; ratio median {statistics.median(ratios):.2f}x "
          f"(pairs {ratios[0]:.2f}-{ratios[-1]:.2f}, n={pairs})")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 9)
