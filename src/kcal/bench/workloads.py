"""What every speed measurement of :mod:`kcal.bench.speed` starts from: the configurations it times (the train
config with diagnostics off, or exactly as the reproduction runs it), the data (the mirror's, or synthetic
data of a missing dataset's paper shape), and the timing of Lightning fits per epoch.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import math
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from kcal.configs import CONFIG_DIR
from kcal.data.dataset import DatasetInfo, DatasetSplits, Split
from kcal.run.engine import Member
from kcal.run.module import fit_members
from kcal.run.setup import Prepared, prepared_from
from kcal.run.setup import prepare as prepare_run

PAIRS = {"regression": ("nll", "nll_mmd"), "classification": ("xe", "xe_mmd")}
# datasets whose full files are not in the offline mirror: synthetic data of the paper's shape (n, d)
SYNTHETIC_SHAPES = {
    "medical-expenditure": (33005, 107),
    "superconductivity": (21263, 81),
    "fb-comment": (40949, 53),
}
BASE = [
    "trainer.progress_bar=false",
    "trainer.log_dce=false",
    "save_checkpoint=false",
    "trainer.min_epochs=0",
]
NO_FIGURES = ["++figures=false"]  # per-run matplotlib figures (kcal.run.artifacts) are not training


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
