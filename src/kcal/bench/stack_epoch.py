"""One epoch of a seed stack, timed: training steps and validation apart, so a change to the stack's
arithmetic can be measured before and after (each run in its own process, on the same machine):

    python -m kcal.bench.stack_epoch blog nll_mmd 50 [overrides...]

e.g. Table 6's largest rerun on a subset of blog: ``python -m kcal.bench.stack_epoch blog nll_mmd 50
objective.params.num_samples=200 dataset.max_train_rows=2048``. Prints the median of ``--repeats``
(default 3) epochs after one warm-up.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

from kcal.bench.workloads import compose_cfg, prepare_or_synthetic
from kcal.run.engine import Engine, Member


def main(name: str, objective: str, seeds: int, overrides: list[str], repeats: int = 3) -> None:
    torch.set_num_threads(1)
    dev = torch.device("cpu")
    prep = prepare_or_synthetic(compose_cfg(f"dataset={name}", f"objective={objective}", *overrides))
    engine = Engine(prep, [Member.create(s, prep.cfg, Path("."), dev) for s in range(seeds)], dev)
    train, val = [], []
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        engine.train_epoch().tolist()
        t1 = time.perf_counter()
        engine.validate()
        t2 = time.perf_counter()
        if r:  # the first epoch warms up
            train.append(t1 - t0)
            val.append(t2 - t1)
    print(f"{name} {objective} x{seeds} {' '.join(overrides)}: train {statistics.median(train):.2f} s/epoch, "
          f"validation {statistics.median(val):.2f} s/epoch (median of {repeats})")  # fmt: skip


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--repeats=")]
    reps = [int(a.split("=")[1]) for a in sys.argv[1:] if a.startswith("--repeats=")]
    main(args[0], args[1], int(args[2]), args[3:], *reps)
