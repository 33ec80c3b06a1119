"""The wall time of the paper's whole protocol on this machine, from measured epochs:
``kcal bench --estimate-only [--estimate-datasets blog] [--workers 1 2 16]``.

Per seed rerun of the reproduction's plan (:func:`kcal.orchestrate.reproduce.stages` of profile full: every objective's
sweep and seeds, and for regression Table 6's sample-size reruns, seeds only): a single run's seconds per
epoch and outside its epochs, and a 50-seed stack's seconds per epoch; then hours at an upper bound of
epochs per run (``max_epochs``) and a typical one, on 1 and N workers (the work over N, but never less
than the longest chain that stays serial).
"""

from __future__ import annotations

import csv
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from kcal.bench.workloads import (
    SYNTHETIC_SHAPES,
    available,
    compose_cfg,
    fixed_epochs,
    lightning_epoch_seconds,
    prepare_or_synthetic,
    quiet,
    task_of,
)
from kcal.configs import CONFIG_DIR
from kcal.core.layout import is_variant
from kcal.run.artifacts import finalize
from kcal.run.engine import Engine, Member
from kcal.run.module import fit_members, member_result
from kcal.run.setup import build


@dataclass
class Estimate:
    dataset: str
    objective: str
    n_train: int
    d: int
    single_epoch: float  # s/epoch, one Lightning run
    single_fixed: float  # s per run outside the epochs: prepare + Lightning setup + evaluation
    vec_epoch: float  # s/epoch for all members of a vectorised chunk
    finalize: float  # s per member (evaluation + writing)
    synthetic: bool
    sweeps: bool = True  # False: a rerun of another study's best trial (Table 6), seeds only

    def hours(self, epochs: float, trials: int, seeds: int) -> tuple[float, float]:
        sweep = trials * (self.single_fixed + epochs * self.single_epoch) if self.sweeps else 0.0
        seed = epochs * self.vec_epoch + seeds * self.finalize
        return sweep / 3600, seed / 3600

    def chain_hours(self, epochs: float, seeds: int) -> float:
        """What stays serial however many workers: the study's last trial, then its seed rerun
        (one vectorised chunk, which needs the study's best trial)."""
        return (self.single_fixed + epochs * self.single_epoch) / 3600 + self.hours(epochs, 0, seeds)[1]


def protocol_stages(name: str) -> list[tuple[str, list[str], bool]]:
    """(label, objective overrides, has a sweep) of each seed rerun the full protocol runs on ``name``:
    :func:`kcal.orchestrate.reproduce.stages` of profile full, Table 6's sample sizes included."""
    from kcal.orchestrate.reproduce import stages

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(
            "reproduce", overrides=[f"task={task_of(name)}", "profile=full", f"reproduce.datasets=[{name}]"]
        )
    return [(label, [o for o in extra if o.startswith("objective")], not is_variant(label))
            for _, label, extra in stages(cfg)]  # fmt: skip


def estimate_one(
    name: str, obj: str, seeds: int, log, repeats: int = 1, overrides=None, sweeps=True
) -> Estimate:
    # as the protocol runs it: the config's defaults (per-epoch DCE curves and per-run figures included)
    overrides = overrides or [f"objective={obj}"]
    cfg = compose_cfg(f"dataset={name}", *overrides, "trainer.accelerator=cpu", protocol_defaults=True)
    t0 = time.perf_counter()
    prep = prepare_or_synthetic(cfg)
    prep_s = time.perf_counter() - t0
    ((per_epoch, setup),), _ = lightning_epoch_seconds([prep], (1, 2), repeats)
    dev = torch.device("cpu")
    with tempfile.TemporaryDirectory() as d, quiet():
        p = fixed_epochs(prep, 1)
        engine, _ = fit_members(p, [Member.create(0, p.cfg, Path(d), dev)], dev)
        member = engine.members[0]
        model = build(p, 0)
        model.load_state_dict(member.ckpt_state)
        t0 = time.perf_counter()
        finalize(p, model, member_result(member, 0.0), Path(d), 0)
        finalize_s = time.perf_counter() - t0
    engine = Engine(prep, [Member.create(s, cfg, Path("."), dev) for s in range(seeds)], dev)
    t0 = time.perf_counter()
    engine.train_epoch()
    engine.validate()
    vec_epoch = time.perf_counter() - t0
    e = Estimate(name, obj, len(prep.data.train), prep.data.info.d, per_epoch, prep_s + setup + finalize_s, vec_epoch,
                 finalize_s, prep.data.info.sources.get("synthetic") is not None, sweeps)  # fmt: skip
    log(f"estimate {name} {obj}: single {per_epoch:.3f} s/epoch (+{e.single_fixed:.2f} s/run), "
        f"{seeds} vectorised {vec_epoch:.2f} s/epoch, evaluation {finalize_s:.2f} s/run")  # fmt: skip
    return e


def whole_protocol(args, log) -> tuple[list[Estimate], str]:
    estimates = []
    for name in args.estimate_datasets:
        if not available(name) and name not in SYNTHETIC_SHAPES:
            log(f"estimate: skip {name} (not available offline, no synthetic shape)")
            continue
        for label, overrides, sweeps in protocol_stages(name):
            estimates.append(
                estimate_one(name, label, args.seeds, log, args.estimate_repeats, overrides, sweeps)
            )
    return estimates, format_estimate(estimates, args)


def format_estimate(estimates: list[Estimate], args) -> str:
    trials, seeds = args.trials, args.seeds
    lines = [f"Whole-protocol estimate on this machine ({os.cpu_count()} CPU cores, {torch.get_num_threads()} torch "
             f"threads): {trials} sweep trials (sequential single runs, default widths/batch size) + {seeds} seeds "
             f"(vectorised) per (dataset, objective), seeds only for Table 6's reruns (objective@samples=M); epochs per run: {args.protocol_epochs[0]} "
             f"(= max_epochs, upper bound) and {args.protocol_epochs[1]} (typical early-stopping length).", ""]  # fmt: skip
    head = ["dataset", "objective", "n_train", "d", "s/epoch 1 run", "s/epoch x" + str(seeds), "eval s/run"]
    head += [f"h @{e} ep (sweep+seeds)" for e in args.protocol_epochs]
    table = [head]
    totals = [0.0 for _ in args.protocol_epochs]
    for e in estimates:
        row = [e.dataset + (" (synthetic)" if e.synthetic else ""), e.objective, str(e.n_train), str(e.d),
               f"{e.single_epoch:.3f}", f"{e.vec_epoch:.2f}", f"{e.finalize:.2f}"]  # fmt: skip
        for i, ep in enumerate(args.protocol_epochs):
            sweep, seed = e.hours(ep, trials, seeds)
            totals[i] += sweep + seed
            row.append(f"{sweep + seed:.1f} ({sweep:.1f}+{seed:.1f})")
        table.append(row)
    table.append(["TOTAL", "", "", "", "", "", ""] + [f"{t:.0f} h = {t / 24:.1f} days" for t in totals])
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in table]
    return "\n".join(lines + [""] + scaling(estimates, args, totals))


def scaling(estimates: list[Estimate], args, totals: list[float]) -> list[str]:
    """Whole-protocol hours on N worker processes (``reproduce.jobs=N`` or N cluster jobs on one study):
    about max(work / N, longest serial chain), the pool keeping every worker busy while work remains."""
    if not estimates:
        return []
    lines = [f"On N worker processes (one thread each, cores as fast as this one's): hours ~ max(total / N, "
             f"longest chain); the chain, one trial then the {args.seeds}-seed rerun of one (dataset, objective), "
             f"stays serial:"]  # fmt: skip
    chains = []
    for ep in args.protocol_epochs:
        slowest = max(estimates, key=lambda e: e.chain_hours(ep, args.seeds))
        chains.append(slowest.chain_hours(ep, args.seeds))
        lines.append(f"  longest chain @{ep} ep: {chains[-1]:.2f} h ({slowest.dataset}/{slowest.objective})")
    head = ["N workers"] + [f"h @{ep} ep" for ep in args.protocol_epochs]
    rows = [head] + [[str(n)] + [f"{max(t / n, c):.1f}" for t, c in zip(totals, chains, strict=True)]
                     for n in args.workers]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return lines + ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]


def write_estimate(estimates: list[Estimate], text: str, args, env: str) -> None:
    """``estimate.csv`` (one row per seed rerun) and ``estimate.md`` (the text) under ``args.out``."""
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "estimate.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dataset", "objective", "n_train", "d", "synthetic", "single_s_per_epoch", "single_fixed_s",
                    f"vectorised_{args.seeds}_s_per_epoch", "eval_s_per_run",
                    *[f"hours_at_{e}_epochs" for e in args.protocol_epochs]])  # fmt: skip
        for e in estimates:
            w.writerow([e.dataset, e.objective, e.n_train, e.d, e.synthetic, e.single_epoch, e.single_fixed,
                        e.vec_epoch, e.finalize, *[sum(e.hours(ep, args.trials, args.seeds))
                                                  for ep in args.protocol_epochs]])  # fmt: skip
    (args.out / "estimate.md").write_text("```\n" + text + "\n```\n\n" + env + "\n")
