"""Speed benchmark: MMD overhead, Lightning-loop overhead, vectorised seeds, whole-protocol estimate.

    kcal bench                      # the table (CPU, and CUDA when available)
    kcal bench --quick              # seconds: tiny subsets, 1 repeat (used by the tests)
    kcal bench --estimate           # + wall-time estimate of the paper's whole protocol
    kcal bench --datasets crime adult --repeats 5 --threads 1

Measured in one process, side by side; every timing is repeated ``--repeats`` times and the median is
reported. Writes ``bench.csv`` and ``bench.md`` (and ``estimate.csv`` / ``estimate.md``) under ``--out``
(default ``outputs/bench``).

* ``mmd_overhead``: seconds per epoch of kcal's training loop (``kcal.run.module.fit_members``: Lightning driving the engine) with the base
  loss vs base + MMD (``nll`` vs ``nll_mmd`` on regression, ``xe`` vs ``xe_mmd`` on classification).
  Per epoch excluding setup = (T(e2 epochs) - T(e1 epochs)) / (e2 - e1), early stopping off, e2 chosen so
  that the e2 - e1 epochs take about a second, the two objectives' fits taking turns in each repeat.
* ``mmd_arithmetic``: the same pair in the minimal torch loop below: the floor ``mmd_overhead`` can reach
  without making the regulariser's own tensor arithmetic cheaper.
* ``loop_overhead``: the same per-epoch time vs a minimal hand-written torch loop on the same model,
  batches, objective (its batch constants built as kcal builds them), Adam, clipping and validation.
* ``seeds``: S seeds of ``kcal.run.train_stacked`` (vectorised) vs S sequential ``kcal.run.run`` calls vs one run, fixed
  epochs (early stopping off), wall time including evaluation and writing; also the training part alone.

All runs use ``trainer.log_dce=false`` and ``figures=false`` (the per-epoch DCE curves and the per-run
matplotlib figures are diagnostics, not training); the whole-protocol estimate
(:mod:`kcal.bench.protocol_estimate`) keeps the config's evaluation defaults. What every measurement starts
from (configs, real or synthetic data, the timing of fits) is :mod:`kcal.bench.workloads`.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig

from kcal.bench.bare_loop import bare_loop_epoch_seconds
from kcal.bench.protocol_estimate import whole_protocol, write_estimate
from kcal.bench.stack_bound import BOUND_OBJECTIVES, plain_stack_epoch_seconds
from kcal.bench.workloads import (
    PAIRS,
    SYNTHETIC_SHAPES,
    available,
    compose_cfg,
    lightning_epoch_seconds,
    no_early_stopping,
    prepare_or_synthetic,
    quiet,
    task_of,
)
from kcal.core import layout
from kcal.core.errors import check_choices, exits_on_user_error
from kcal.data import get_spec
from kcal.paper import PAPER_DATASETS, TASKS
from kcal.run import run

TARGETS = {"mmd_overhead": 1.2, "loop_overhead": 1.15, "seeds_vs_one": 3.0, "seeds_vs_arithmetic": 1.2}  # fmt: skip


@dataclass
class Row:
    device: str
    measure: str
    dataset: str
    objective: str
    a_label: str
    a_seconds: float
    b_label: str
    b_seconds: float
    ratio: float  # b / a
    target: float | None = None
    repeats: int = 1
    note: str = ""

    @property
    def met(self) -> str:
        if self.target is None or math.isnan(self.ratio):
            return ""
        return "yes" if self.ratio <= self.target else "NO"


# ------------------------------------------------------------------------------------------------
# measurements
# ------------------------------------------------------------------------------------------------


def run_single(cfg: DictConfig, out: Path) -> tuple[float, float]:
    """(wall seconds, training seconds) of one ``kcal.run.run``."""
    with quiet():
        t0 = time.perf_counter()
        run(cfg, out)
        wall = time.perf_counter() - t0
    import json

    return wall, json.loads((out / layout.RUN_INFO_FILE).read_text())["train_seconds"]


def run_vectorized(cfg: DictConfig, seeds: list[int], root: Path) -> tuple[float, float]:
    """(wall seconds, training seconds) of ``kcal.run.train_stacked`` over ``seeds``."""
    import json

    from kcal.run import train_stacked

    with quiet():
        t0 = time.perf_counter()
        train_stacked(cfg, seeds, [layout.seed_dir(root, s) for s in seeds], progress=False)
        wall = time.perf_counter() - t0
    return wall, json.loads((layout.seed_dir(root, seeds[0]) / layout.RUN_INFO_FILE).read_text())[
        "vectorized"
    ]["chunk_train_seconds"]


# ------------------------------------------------------------------------------------------------
# the benchmark table
# ------------------------------------------------------------------------------------------------
def bench_device(device: str, args, log: Callable[[str], None]) -> list[Row]:
    rows: list[Row] = []
    acc = ["trainer.accelerator=gpu"] if device == "cuda" else ["trainer.accelerator=cpu"]
    small = [f"dataset.max_train_rows={args.max_train_rows}"] if args.max_train_rows else []
    e1, e2_arg = args.epoch_pair
    for name in args.datasets:
        if not available(name) and name not in SYNTHETIC_SHAPES:
            log(f"skip {name}: not available offline")
            continue
        task = task_of(name)
        base_obj, mmd_obj = PAIRS[task]
        preps = {obj: prepare_or_synthetic(compose_cfg(f"dataset={name}", f"objective={obj}", *acc, *small))
                 for obj in (base_obj, mmd_obj)}  # fmt: skip
        timed, e2 = lightning_epoch_seconds(list(preps.values()), (e1, e2_arg), args.repeats)
        per, bare_per = {}, {}
        for (obj, prep), (per[obj], setup) in zip(preps.items(), timed, strict=True):
            log(
                f"[{device}] {name} {obj}: {per[obj] * 1e3:.1f} ms/epoch (setup {setup:.2f} s, epochs {e1} vs {e2})"
            )
            if name in args.loop_datasets:
                bare = statistics.median(bare_loop_epoch_seconds(prep, e2 + 1, torch.device(device))
                                         for _ in range(args.repeats))  # fmt: skip
                log(f"[{device}] {name} {obj}: bare torch loop {bare * 1e3:.1f} ms/epoch")
                bare_per[obj] = bare
                rows.append(Row(device, "loop_overhead", name, obj, "bare torch loop", bare, "kcal (Lightning)",
                                per[obj], per[obj] / bare, TARGETS["loop_overhead"], args.repeats,
                                "s/epoch, validation included, log_dce off"))  # fmt: skip
        rows.append(Row(device, "mmd_overhead", name, f"{base_obj} vs {mmd_obj}", base_obj, per[base_obj], mmd_obj,
                        per[mmd_obj], per[mmd_obj] / per[base_obj], TARGETS["mmd_overhead"], args.repeats,
                        "s/epoch (kcal.run.module.fit_members), validation included"))  # fmt: skip
        if len(bare_per) == 2:  # the bound: what the regulariser's own arithmetic costs in a plain loop
            rows.append(Row(device, "mmd_arithmetic", name, f"{base_obj} vs {mmd_obj}", f"bare loop, {base_obj}",
                            bare_per[base_obj], f"bare loop, {mmd_obj}", bare_per[mmd_obj],
                            bare_per[mmd_obj] / bare_per[base_obj], None, args.repeats,
                            "s/epoch of the plain torch loop with each objective: mmd_overhead's floor"))  # fmt: skip
    if args.seeds_dataset and (available(args.seeds_dataset) or args.seeds_dataset in SYNTHETIC_SHAPES):
        rows += bench_seeds(device, acc, small, args, log)
    return rows


def bench_seeds(device: str, acc: list[str], small: list[str], args, log) -> list[Row]:
    name, n, epochs = args.seeds_dataset, args.seeds, args.seed_epochs
    task = task_of(name)
    rows = []
    for obj in args.seed_objectives or (PAIRS[task][0],):
        cfg = compose_cfg(f"dataset={name}", f"objective={obj}", *acc, *small, *no_early_stopping(epochs))
        seeds = list(range(n))
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            from kcal.run.stacked import member_config

            singles = [run_single(member_config(cfg, s), root / f"single{s}") for s in seeds]
            seq_wall = sum(w for w, _ in singles)
            seq_train = sum(t for _, t in singles)
            one_wall = statistics.median(w for w, _ in singles)
            one_train = statistics.median(t for _, t in singles)
            vec = []
            for r in range(args.repeats):
                vec.append(run_vectorized(cfg, seeds, root / f"vec{r}"))
                shutil.rmtree(root / f"vec{r}", ignore_errors=True)
            vec_wall = statistics.median(w for w, _ in vec)
            vec_train = statistics.median(t for _, t in vec)
        plain = plain_stack_epoch_seconds(prepare_or_synthetic(cfg), n) * epochs if obj in BOUND_OBJECTIVES else None  # fmt: skip
        log(f"[{device}] {name} {obj} x{n} seeds, {epochs} epochs: vectorised {vec_wall:.1f} s (train {vec_train:.1f} s), "
            f"sequential {seq_wall:.1f} s (train {seq_train:.1f} s), one run {one_wall:.2f} s (train {one_train:.2f} s)")  # fmt: skip
        note = f"{n} seeds, {epochs} epochs, early stopping off"
        rows += [
            Row(device, "seeds_vs_sequential", name, obj, f"{n} sequential runs", seq_wall, f"{n} vectorised", vec_wall,
                vec_wall / seq_wall, None, n, note + "; wall incl. evaluation; sequential = sum of the runs"),
            Row(device, "seeds_vs_one", name, obj, "one run", one_wall, f"{n} vectorised", vec_wall, vec_wall / one_wall,
                TARGETS["seeds_vs_one"], args.repeats, note + "; wall incl. evaluation (one run: median of the runs)"
                + ("" if plain is None or plain / one_wall <= TARGETS["seeds_vs_one"] else
                   f"; out of reach: the {n} models' arithmetic alone is {plain / one_wall:.1f}x, see seeds_vs_arithmetic")),
            Row(device, "seeds_fit_vs_sequential", name, obj, f"{n} sequential runs", seq_train, f"{n} vectorised",
                vec_train, vec_train / seq_train, None, n, note + "; fit only (trainer.fit / the vectorised loop)"),
            Row(device, "seeds_fit_vs_one", name, obj, "one run", one_train, f"{n} vectorised", vec_train,
                vec_train / one_train, None, args.repeats, note + "; fit only (trainer.fit / the vectorised loop)"),
        ]  # fmt: skip
        if (
            plain is not None
        ):  # the arithmetic of n models alone (kcal.bench.stack_bound); the 3x target's fallback
            rows += [Row(device, "seeds_arithmetic_vs_one", name, obj, "one run", one_wall, f"{n} models, plain batched loop",
                         plain, plain / one_wall, None, 1, note + "; plain loop: train + validation epochs only"),
                     Row(device, "seeds_vs_arithmetic", name, obj, f"{n} models, plain batched loop", plain, f"{n} vectorised",
                         vec_train, vec_train / plain, TARGETS["seeds_vs_arithmetic"], args.repeats, note + "; fit only")]  # fmt: skip
    return rows


def format_table(rows: list[Row]) -> str:
    head = ["device", "measure", "dataset", "objective", "a", "a [s]", "b", "b [s]", "b/a", "target", "met"]
    body = [[r.device, r.measure, r.dataset, r.objective, r.a_label, f"{r.a_seconds:.4g}", r.b_label,
             f"{r.b_seconds:.4g}", f"{r.ratio:.2f}x", "" if r.target is None else f"<= {r.target}x", r.met]
            for r in rows]  # fmt: skip
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body, strict=True)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, body)])


def markdown(rows: list[Row], title: str, header: list[str], cells: Callable) -> str:
    out = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in cells(r)) + " |" for r in rows]
    return "\n".join(out) + "\n"


def write_rows(rows: list[Row], out: Path, env: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fields = ["device", "measure", "dataset", "objective", "a_label", "a_seconds", "b_label", "b_seconds", "ratio",
              "target", "met", "repeats", "note"]  # fmt: skip
    with open(out / "bench.csv", "w", newline="") as f:
        csv.writer(f).writerows([fields, *([getattr(r, k) for k in fields] for r in rows)])
    md = markdown(rows, "kcal benchmark", ["device", "measure", "dataset", "objective", "a", "a [s]", "b", "b [s]",
                                           "b/a", "target", "met", "note"],
                  lambda r: [r.device, r.measure, r.dataset, r.objective, r.a_label, f"{r.a_seconds:.4g}", r.b_label,
                             f"{r.b_seconds:.4g}", f"{r.ratio:.2f}x", "" if r.target is None else f"<= {r.target}x",
                             r.met, r.note])  # fmt: skip
    (out / "bench.md").write_text(md + "\n" + env + "\n")


# ------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="kcal bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny subsets, 1 repeat, 3 seeds (seconds)")
    ap.add_argument("--datasets", nargs="+", default=None, help="default: crime blog adult dry-bean")
    ap.add_argument("--loop-datasets", nargs="+", default=None, help="datasets for the bare-loop comparison")
    ap.add_argument("--repeats", type=int, default=None, help="timings per measurement (median; default 3)")
    ap.add_argument("--epoch-pair", type=int, nargs=2, default=None,
                    help="e1 e2 for per-epoch timing (default: 1 and enough epochs for about 1 s; --quick: 1 2)")  # fmt: skip
    ap.add_argument("--max-train-rows", type=int, default=None, help="subsample training rows")
    ap.add_argument("--seeds", type=int, default=None, help="seeds for the vectorised benchmark (50)")
    ap.add_argument("--seed-epochs", type=int, default=None, help="fixed epochs of the seeds benchmark (20)")
    ap.add_argument(
        "--seeds-dataset", default=None, help="dataset of the seeds benchmark (crime); '' skips it"
    )
    ap.add_argument(
        "--seed-objectives", nargs="+", default=None, help="objectives of the seeds benchmark (nll)"
    )
    ap.add_argument(
        "--devices", nargs="+", default=None, help="cpu and/or cuda (default: cpu, cuda if available)"
    )
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument("--estimate", action="store_true", help="also estimate the paper's whole protocol")
    ap.add_argument("--estimate-only", action="store_true", help="only the whole-protocol estimate")
    ap.add_argument("--estimate-datasets", nargs="+", default=None, help="default: the paper's 10 datasets")
    ap.add_argument("--estimate-repeats", type=int, default=1, help="timings per estimate entry (median)")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2, 16, 64], help="worker counts of the estimate"
    )
    ap.add_argument(
        "--protocol-epochs",
        type=int,
        nargs=2,
        default=[200, 60],
        help="upper bound (max_epochs), typical (crime: best epoch ~10 + patience 50)",
    )
    ap.add_argument("--throughput", action="store_true",
                    help="also time real sweeps (kcal.bench.sweep_throughput: crime NLL + MMD, adult XE + MMD)")  # fmt: skip
    ap.add_argument("--throughput-src", nargs="+", default=None,
                    help="source trees to compare, before then after (default: the installed kcal)")  # fmt: skip
    ap.add_argument("--throughput-trials", type=int, default=8)
    ap.add_argument("--throughput-jobs", type=int, default=2)
    ap.add_argument("--throughput-epochs", type=int, default=25, help="epoch cap of the timed trials")
    ap.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = ap.parse_args(argv)
    q = args.quick
    args.datasets = args.datasets or (
        ["crime", "breast-cancer"] if q else ["crime", "blog", "adult", "dry-bean"]
    )
    args.loop_datasets = args.loop_datasets or (["crime"] if q else ["crime", "adult"])
    args.repeats = args.repeats or (1 if q else 3)
    args.epoch_pair = args.epoch_pair or ((1, 2) if q else (1, None))
    args.max_train_rows = args.max_train_rows or (256 if q else None)
    args.seeds = args.seeds or (3 if q else 50)
    args.seed_epochs = args.seed_epochs or (2 if q else 20)
    args.seeds_dataset = "crime" if args.seeds_dataset is None else args.seeds_dataset
    args.devices = args.devices or (["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    args.estimate_datasets = args.estimate_datasets or [ds for task in TASKS for ds in PAPER_DATASETS[task]]
    # a misspelt name: one line listing the valid ones, exit 2 ('none' and '' name no dataset: skip that part)
    for name in [*args.datasets, *args.loop_datasets, *args.estimate_datasets, args.seeds_dataset]:
        if name not in ("none", ""):
            get_spec(name)
    check_choices("objective", args.seed_objectives or [])
    return args


def throughput_rows(args, log: Callable[[str], None]) -> list[Row]:
    """Seconds per finished trial of real sweeps (:mod:`kcal.bench.sweep_throughput`), first source vs last."""
    from kcal.bench.sweep_throughput import DEFAULT_PAIRS, measure

    srcs = args.throughput_src or [None]
    rows = []
    for pair in DEFAULT_PAIRS:
        got = [
            measure(pair, args.throughput_trials, args.throughput_jobs, args.throughput_epochs, src)
            for src in srcs
        ]
        for r in got:
            log(
                f"throughput {pair} ({r.src}): {r.per_hour:.0f} trials/hour on {args.throughput_jobs} workers"
            )
        a, b = got[0], got[-1]
        rows.append(Row("cpu", "sweep_throughput", *pair.split(":"), a.src, a.span_s / a.trials, b.src,
                        b.span_s / b.trials, (b.span_s / b.trials) / (a.span_s / a.trials), None, 1,
                        f"s/trial on {args.throughput_jobs} workers, epochs <= {args.throughput_epochs}; "
                        f"{a.per_hour:.0f} -> {b.per_hour:.0f} trials/hour"))  # fmt: skip
    return rows


def environment() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs "
            f"({platform.processor() or platform.machine()}), CUDA: {cuda}, load average {load[0]}")  # fmt: skip


@exits_on_user_error
def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.distributions.Distribution.set_default_validate_args(False)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    env = environment()
    log(env)
    rows: list[Row] = []
    if not args.estimate_only:
        for device in args.devices:
            if device == "cuda" and not torch.cuda.is_available():
                log("skip cuda: not available")
                continue
            rows += bench_device(device, args, log)
        if args.throughput:
            rows += throughput_rows(args, log)
        write_rows(rows, args.out, env)
        print(format_table(rows))
        print(env)
        print(f"wrote {args.out / 'bench.csv'} and {args.out / 'bench.md'}")
    if args.estimate or args.estimate_only:
        estimates, text = whole_protocol(args, log)
        write_estimate(estimates, text, args, env)
        print(text)
        print(f"wrote {args.out / 'estimate.csv'} and {args.out / 'estimate.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
