"""What the engine's position-free Adam (:class:`kcal.run.optimiser.LaneAdam`) costs a seed stack's epoch against
torch's fused Adam over the parameters as they are (the step before it, whose rounding depended on the stack's
size), measured by taking turns: one process holds two engines of one stack, alike but for the optimiser, and runs
an epoch of each in turn (training steps, then validation), so a drift of the machine's speed hits both alike.

    python -m kcal.bench.adam_step crime nll 50 [overrides...] [--pairs=9]

Prints the median epoch (wall clock and CPU time) and training steps of each, and the median of the per-pair
ratios with their spread.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from kcal.bench.workloads import compose_cfg, prepare_or_synthetic
from kcal.run.engine import Engine, Member
from kcal.run.optimiser import torch_adam

#: the two optimisers, in the order they take turns
STEPS = ("fused", "lane")


def timed_epoch(engine: Engine) -> dict[str, float]:
    """Seconds of one epoch: its training steps and the whole epoch (steps and validation) by the wall clock,
    and the whole epoch in this process's CPU time (one thread: what other processes on the machine change
    least)."""
    wall, cpu = time.perf_counter(), time.process_time()
    engine.train_epoch().tolist()
    steps = time.perf_counter() - wall
    engine.validate()
    return {
        "epoch": time.perf_counter() - wall,
        "epoch CPU": time.process_time() - cpu,
        "training steps": steps,
    }


def ratio_line(what: str, fused: list[float], lane: list[float]) -> str:
    """``epoch: fused 120.0 ms, lane 121.0 ms; lane / fused median 1.008x (pairs 0.980-1.030)``."""
    ratios = sorted(b / a for a, b in zip(fused, lane, strict=True))
    return (f"{what}: fused {statistics.median(fused) * 1e3:.1f} ms, lane {statistics.median(lane) * 1e3:.1f} ms; "
            f"lane / fused median {statistics.median(ratios):.3f}x (pairs {ratios[0]:.3f}-{ratios[-1]:.3f})")  # fmt: skip


def main(name: str, objective: str, seeds: int, overrides: list[str], pairs: int = 9) -> None:
    torch.set_num_threads(1)
    dev = torch.device("cpu")
    prep = prepare_or_synthetic(compose_cfg(f"dataset={name}", f"objective={objective}", *overrides))
    t = prep.cfg.trainer
    engines = {}
    for step in STEPS:
        members = [Member.create(s, prep.cfg, Path(tempfile.mkdtemp()), dev) for s in range(seeds)]
        engines[step] = Engine(prep, members, dev)
        if step == "fused":  # the step before LaneAdam: torch's fused kernel over the parameters as they are
            engines[step].opt = torch_adam(engines[step].net.parameters(), float(t.lr), float(t.weight_decay))
        timed_epoch(engines[step])  # warm-up: probes, allocator, first-call costs
    times: dict[str, dict[str, list[float]]] = {step: {} for step in STEPS}
    for _ in range(pairs):
        for step, engine in engines.items():
            for what, seconds in timed_epoch(engine).items():
                times[step].setdefault(what, []).append(seconds)
    print(f"{name} {objective} x{seeds} {' '.join(overrides)} (n={pairs} pairs)")
    for what in times["fused"]:
        print("  " + ratio_line(what, times["fused"][what], times["lane"][what]))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--pairs=")]
    counts = [int(a.split("=")[1]) for a in sys.argv[1:] if a.startswith("--pairs=")]
    main(args[0], args[1], int(args[2]), args[3:], *counts)
