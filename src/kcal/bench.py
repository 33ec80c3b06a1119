"""Speed benchmark: MMD overhead, Lightning-loop overhead, vectorised seeds, whole-protocol estimate.

    python -m kcal.bench                      # the table (CPU, and CUDA when available)
    python -m kcal.bench --quick              # seconds: tiny subsets, 1 repeat (used by the tests)
    python -m kcal.bench --estimate           # + wall-time estimate of the paper's whole protocol
    python -m kcal.bench --datasets crime adult --repeats 5 --threads 1

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
matplotlib figures are diagnostics, not training); the whole-protocol estimate keeps the config's
evaluation defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import io
import logging
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from kcal.bare_loop import bare_loop_epoch_seconds
from kcal.configs import CONFIG_DIR
from kcal.data.dataset import DatasetInfo, DatasetSplits, Split
from kcal.layout import is_variant
from kcal.paper import PAPER_DATASETS, TASKS
from kcal.run import run
from kcal.run.artifacts import finalize
from kcal.run.engine import Engine, Member
from kcal.run.module import fit_members, member_result
from kcal.run.setup import Prepared, build, prepared_from
from kcal.run.setup import prepare as prepare_run
from kcal.stack_bound import BOUND_OBJECTIVES, plain_stack_epoch_seconds

PAIRS = {"regression": ("nll", "nll_mmd"), "classification": ("xe", "xe_mmd")}
# datasets whose full files are not in the offline mirror: synthetic data of the paper's shape (n, d)
SYNTHETIC_SHAPES = {
    "medical-expenditure": (33005, 107),
    "superconductivity": (21263, 81),
    "fb-comment": (40949, 53),
}
TARGETS = {"mmd_overhead": 1.2, "loop_overhead": 1.15, "seeds_vs_one": 3.0, "seeds_vs_arithmetic": 1.2}  # fmt: skip
BASE = [
    "trainer.progress_bar=false",
    "trainer.log_dce=false",
    "save_checkpoint=false",
    "trainer.min_epochs=0",
]
NO_FIGURES = ["++figures=false"]  # per-run matplotlib figures (kcal.run.artifacts) are not training


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------
def compose_cfg(*overrides: str, protocol_defaults: bool = False) -> DictConfig:
    """The train config with ``overrides``; diagnostics off unless ``protocol_defaults`` (then only the
    progress bar is off: the configuration exactly as the reproduction runs it)."""
    base = ["trainer.progress_bar=false"] if protocol_defaults else [*BASE, *NO_FIGURES]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=[*base, *overrides])


def no_early_stopping(epochs: int) -> list[str]:
    return [
        f"trainer.max_epochs={epochs}",
        f"trainer.min_epochs={epochs}",
        f"trainer.patience={epochs + 1000}",
    ]


def median_time(fn: Callable[[], object], repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


@contextlib.contextmanager
def quiet():
    """Silence Lightning's banners and warnings during timed runs."""
    names = ("pytorch_lightning", "lightning.pytorch", "lightning_fabric", "lightning.fabric", "kcal")
    levels = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            for n, level in levels.items():
                logging.getLogger(n).setLevel(level)


def synthetic(name: str, seed: int = 0) -> DatasetSplits:
    """Random regression data of a missing dataset's paper shape, split 70/10/20."""
    n, d = SYNTHETIC_SHAPES[name]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = (x[:, : min(5, d)].sum(1) + torch.randn(n, generator=g)) / 3
    a, b = int(0.7 * n), int(0.8 * n)
    info = DatasetInfo(name=name, task="regression", protocol="official", split_seed=1, n_raw=n, n_used=n, d=d,
                       m=None, y_center=0.0, y_scale=1.0, sources={"synthetic": f"randn({n}, {d})"})  # fmt: skip
    return DatasetSplits(Split(x[:a], y[:a]), Split(x[a:b], y[a:b]), Split(x[b:], y[b:]), info)


def prepare_or_synthetic(cfg: DictConfig) -> Prepared:
    """``kcal.run.setup.prepare``, or the same on synthetic data for a dataset absent offline."""
    try:
        return prepare_run(cfg)
    except Exception:
        if cfg.dataset.name not in SYNTHETIC_SHAPES:
            raise
    return prepared_from(cfg, synthetic(cfg.dataset.name))


def available(name: str) -> bool:
    from kcal.data.registry import get_spec
    from kcal.data.sources import locate

    try:
        locate(get_spec(name), download=False)
        return True
    except Exception:
        return False


def task_of(name: str) -> str:
    from kcal.data.registry import get_spec

    return get_spec(name).task


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
def fixed_epochs(prep: Prepared, epochs: int) -> Prepared:
    """``prep`` with exactly ``epochs`` epochs (min = max, patience beyond reach)."""
    cfg = copy.deepcopy(prep.cfg)
    cfg.trainer.max_epochs, cfg.trainer.min_epochs, cfg.trainer.patience = epochs, epochs, epochs + 1000
    return replace(prep, cfg=cfg)


def fit_seconds(prep: Prepared, epochs: int) -> float:
    """Wall time of ``kcal.run.module.fit_members`` (Lightning driving the engine, one member) for exactly
    ``epochs`` epochs."""
    p = fixed_epochs(prep, epochs)
    dev = torch.device("cpu")
    with tempfile.TemporaryDirectory() as d, quiet():
        t0 = time.perf_counter()
        fit_members(p, [Member.create(int(p.cfg.seed), p.cfg, Path(d), dev)], dev, out=Path(d))
        return time.perf_counter() - t0


def lightning_epoch_seconds(preps: list[Prepared], epochs: tuple[int, int | None], repeats: int,
                            fit_s: float = 1.0) -> tuple[list[tuple[float, float]], int]:  # fmt: skip
    """Per ``prep``: (median seconds per epoch excluding setup, median setup seconds), from fits of e1 and
    e2 epochs, the preps' fits taking turns in each repeat (so a drift of the machine's speed hits all
    alike); and e2. ``e2=None`` picks it so that the e2 - e1 epochs take about ``fit_s`` seconds (from
    the first prep's warm-up fit, an upper bound per epoch): short epochs are timed over many."""
    e1, e2 = epochs
    warm = [
        fit_seconds(p, e1) for p in preps
    ]  # first-call costs (allocator, kernels, probes) are not per-epoch work
    if e2 is None:
        e2 = e1 + max(2, math.ceil(fit_s * e1 / max(warm[0], 1e-9)))
    per_epoch: list[list[float]] = [[] for _ in preps]
    setup: list[list[float]] = [[] for _ in preps]
    for _ in range(repeats):
        for i, p in enumerate(preps):
            t1, t2 = fit_seconds(p, e1), fit_seconds(p, e2)
            # a load spike during the short fit can make the difference meaningless: then fall back to
            # the upper bound t2 / e2 (setup included)
            per_epoch[i].append((t2 - t1) / (e2 - e1) if t2 > t1 else t2 / e2)
            setup[i].append(max(0.0, t1 - e1 * per_epoch[i][-1]))
    return [
        (statistics.median(pe), statistics.median(su)) for pe, su in zip(per_epoch, setup, strict=True)
    ], e2


def run_single(cfg: DictConfig, out: Path) -> tuple[float, float]:
    """(wall seconds, training seconds) of one ``kcal.run.run``."""
    with quiet():
        t0 = time.perf_counter()
        run(cfg, out)
        wall = time.perf_counter() - t0
    import json

    return wall, json.loads((out / "run.json").read_text())["train_seconds"]


def run_vectorized(cfg: DictConfig, seeds: list[int], root: Path) -> tuple[float, float]:
    """(wall seconds, training seconds) of ``kcal.run.train_stacked`` over ``seeds``."""
    import json

    from kcal.run import train_stacked

    with quiet():
        t0 = time.perf_counter()
        train_stacked(cfg, seeds, [root / f"seed{s}" for s in seeds], progress=False)
        wall = time.perf_counter() - t0
    return wall, json.loads((root / f"seed{seeds[0]}" / "run.json").read_text())["vectorized"][
        "chunk_train_seconds"
    ]


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
        if plain is not None:  # the arithmetic of n models alone (kcal.stack_bound); the 3x target's fallback
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
# whole-protocol estimate
# ------------------------------------------------------------------------------------------------
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
    :func:`kcal.reproduce.stages` of profile full, Table 6's sample sizes included."""
    from kcal.reproduce import stages

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


# ------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m kcal.bench", description=__doc__.split("\n\n")[0])
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
                    help="also time real sweeps (kcal.sweep_throughput: crime NLL + MMD, adult XE + MMD)")  # fmt: skip
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
    return args


def throughput_rows(args, log: Callable[[str], None]) -> list[Row]:
    """Seconds per finished trial of real sweeps (:mod:`kcal.sweep_throughput`), first source vs last."""
    from kcal.sweep_throughput import DEFAULT_PAIRS, measure

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
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
