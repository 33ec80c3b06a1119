"""Does ``torch.compile`` pay for a training step? Four steps of one dataset take turns in one process:
the base objective and base + MMD (``kcal.bench.workloads.PAIRS``), each eager and compiled, where "compiled" is
``torch.compile`` of the step's forward (network, loss and regulariser; AOTAutograd compiles the backward
with it) and the fused Adam step stays eager. With ``--reg-only`` the compiled step compiles the
regulariser alone (the network stays eager). Prints each step's median time, compiled against eager,
base + MMD against base in both modes, and the seconds the first compiled steps took (compilation).

    python -m kcal.bench.compile_step crime [rounds] [--reg-only]

The model, batch size and objective options are the dataset's defaults (``kcal.bench.workloads.compose_cfg``);
the batches are the training split's first ones in order, the Gaussian draws fixed per step.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from kcal.bench import workloads
from kcal.run.engine import Engine, Member, noise_samples

STEPS = 100  # steps per timing; the four variants take turns, ``rounds`` times


def variant(name: str, objective: str, compiled: bool, reg_only: bool):
    """(step function, engine) for one variant: ``step(b)`` runs training step ``b`` (forward, backward,
    Adam); a fresh engine each, so the four variants train separate copies of one initialisation."""
    dev = torch.device("cpu")
    prep = workloads.prepare_or_synthetic(
        workloads.compose_cfg(f"dataset={name}", f"objective={objective}", "trainer.log_dce=false")
    )
    eng = Engine(prep, [Member.create(0, prep.cfg, Path(tempfile.mkdtemp()), dev)], dev)
    model, obj, w = eng.net.model, eng.objective, eng.weight
    x, y, bs = eng.train_split.x, eng.train_split.y, int(prep.cfg.trainer.batch_size)
    nb, ns = x.shape[0] // bs, noise_samples(obj)
    gen = torch.Generator().manual_seed(0)
    eps = [torch.randn((ns, bs), generator=gen) if ns else None for _ in range(nb)]

    def reg(out, xb, yb, e):
        return obj.regularization(out, xb, yb, eps=e)

    if compiled and reg_only:
        reg = torch.compile(reg, dynamic=False)

    def forward(xb, yb, e):
        out = model(xb)
        base = obj.base(out, yb)
        return base + w * reg(out, xb, yb, e) if eng.has_reg else base

    if compiled and not reg_only:
        forward = torch.compile(forward, dynamic=False)
    params = eng.net.parameters()

    def step(b: int) -> None:
        b %= nb
        loss = forward(x[b * bs : (b + 1) * bs], y[b * bs : (b + 1) * bs], eps[b])
        for p in params:
            p.grad = None
        loss.backward()
        eng.opt.step()

    return step, prep


def main(name: str, rounds: int, reg_only: bool) -> None:
    torch.set_num_threads(1)
    base, mmd = workloads.PAIRS[workloads.task_of(name)]
    steps, compile_s = {}, {}
    for obj in (base, mmd):
        for compiled in (False, True):
            key = (obj, compiled)
            steps[key], prep = variant(name, obj, compiled, reg_only)
            t0 = time.perf_counter()
            for b in range(3):
                steps[key](b)
            compile_s[key] = time.perf_counter() - t0
    times: dict = {k: [] for k in steps}
    for _ in range(rounds):
        for key, step in steps.items():
            t0 = time.perf_counter()
            for b in range(STEPS):
                step(b)
            times[key].append((time.perf_counter() - t0) / STEPS)
    med = {k: statistics.median(v) for k, v in times.items()}
    what = "the regulariser" if reg_only else "the step's forward"
    print(f"{name} (model {dict(prep.cfg.model)}, batch {prep.cfg.trainer.batch_size}), compiling {what}:")
    for obj in (base, mmd):
        e, c = med[(obj, False)], med[(obj, True)]
        print(f"  {obj}: eager {e * 1e3:.3f} ms/step, compiled {c * 1e3:.3f} ms/step: compiled is {e / c:.2f}x "
              f"as fast; first 3 compiled steps {compile_s[(obj, True)]:.1f} s")  # fmt: skip
    print(f"  MMD overhead ({mmd} / {base}): eager {med[(mmd, False)] / med[(base, False)]:.2f}x, "
          f"compiled {med[(mmd, True)] / med[(base, True)]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(args[0], int(args[1]) if len(args) > 1 else 7, "--reg-only" in sys.argv)
