"""How much faster two processes finish two equal jobs than one process finishes one, on this machine.

    python -m kcal.bench.core_scaling [--steps 6000] [--repeats 3]

The job is single-threaded work of the kind a reproduction's worker does: ``--steps`` Adam steps of a
100-64-64-2 MLP on a 64-row batch (one torch thread). Each repeat times one job alone, then two copies
started together; scaling = 2 x alone / together (2.0: the two cores are independent). A reproduction's
``JOBS=2`` cannot beat this, whatever its scheduling: it is the bound the machine sets (shared caches,
memory bandwidth, a virtual core's sibling, clock boost with one core busy).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

JOB = """
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(100, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                          torch.nn.Linear(64, 2))
opt = torch.optim.Adam(net.parameters(), fused=True)
x, y = torch.randn(64, 100), torch.randint(0, 2, (64,))
for _ in range({steps}):
    loss = torch.nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def timed(copies: int, steps: int) -> float:
    cmd = [sys.executable, "-c", JOB.format(steps=steps)]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd) for _ in range(copies)]
    if any(p.wait() for p in procs):
        raise SystemExit("a job failed")
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    scalings = []
    for r in range(args.repeats):
        alone, together = timed(1, args.steps), timed(2, args.steps)
        scalings.append(2 * alone / together)
        print(f"repeat {r + 1}: one job alone {alone:.2f} s, two at once {together:.2f} s, "
              f"scaling {scalings[-1]:.2f}x", flush=True)  # fmt: skip
    print(
        f"scaling: min {min(scalings):.2f}x, median {statistics.median(scalings):.2f}x, max {max(scalings):.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
