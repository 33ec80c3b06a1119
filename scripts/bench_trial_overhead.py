"""What a sweep trial's result never uses, per epoch: the checkpoint file and Lightning's CSV log.

Fits crime / nll (the sweep trial's config: no progress bar, no figures, no per-epoch DCE curves) for a
fixed number of epochs, once as seed reruns train (``save_checkpoint=true``: ``torch.save`` of
``best.ckpt`` on every improving epoch; ``trainer.csv_log=true``: ``csv/metrics.csv``) and once as sweep
trials now train (best weights kept in memory, no CSV log), interleaved, and prints the median CPU and
wall time per epoch of each, the time spent inside the checkpoint callback and the CSV logger, and the
ratio. CPU time (``time.process_time``) is reported next to wall time because it is less sensitive
to other processes' load. Usage: ``python scripts/bench_trial_overhead.py [--repeats 9] [--epochs 20]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
from hydra import compose, initialize_config_dir

from kcal.bench import quiet
from kcal.configs import CONFIG_DIR
from kcal.run.module import BestInMemory, fit
from kcal.run.setup import build, prepare

SPENT = {"checkpoint": 0.0, "csv": 0.0}


def timed(cls, name: str, key: str) -> None:
    """Wrap ``cls.name`` so that its CPU time accumulates into ``SPENT[key]``."""
    fn = getattr(cls, name)

    def wrapper(*args, **kwargs):
        t0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[key] += time.process_time() - t0

    setattr(cls, name, wrapper)


def one_fit(epochs: int, lean: bool, dataset: str) -> tuple[float, float, float, float]:
    """(CPU s/epoch, wall s/epoch, checkpoint-callback s/epoch, CSV-logger s/epoch) of one fit."""
    overrides = [f"dataset={dataset}", "objective=nll", "trainer.progress_bar=false", "++figures=false",
                 "trainer.log_dce=false", f"trainer.max_epochs={epochs}", f"trainer.min_epochs={epochs}",
                 "trainer.patience=1000", f"save_checkpoint={not lean}", f"trainer.csv_log={not lean}"]  # fmt: skip
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    prep = prepare(cfg)
    SPENT.update(checkpoint=0.0, csv=0.0)
    with tempfile.TemporaryDirectory() as d, quiet():
        c0, w0 = time.process_time(), time.perf_counter()
        fit(prep, build(prep, 0), Path(d))
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return cpu / epochs, wall / epochs, SPENT["checkpoint"] / epochs, SPENT["csv"] / epochs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--dataset", default="crime")
    args = ap.parse_args()
    timed(pl.callbacks.ModelCheckpoint, "on_train_epoch_end", "checkpoint")
    timed(BestInMemory, "on_train_epoch_end", "checkpoint")
    for name in ("log_metrics", "save", "finalize", "log_hyperparams"):
        timed(pl.loggers.CSVLogger, name, "csv")
    for lean in (False, True):  # warm-up
        one_fit(2, lean, args.dataset)
    results: dict[bool, list] = {False: [], True: []}
    for _ in range(args.repeats):
        for lean in (False, True):  # interleaved, so load changes hit both alike
            results[lean].append(one_fit(args.epochs, lean, args.dataset))
    med = {lean: [statistics.median(r[i] for r in rows) for i in range(4)] for lean, rows in results.items()}
    for lean, label in ((False, "before (best.ckpt + CSV log)"), (True, "after (in memory, no CSV)  ")):
        cpu, wall, ckpt, csv = med[lean]
        print(f"{label}: {cpu * 1e3:6.2f} ms CPU/epoch ({wall * 1e3:6.2f} ms wall); checkpoint callback "
              f"{ckpt * 1e3:5.2f} ms, CSV logger {csv * 1e3:5.2f} ms")  # fmt: skip
    print(f"ratio after/before per epoch: CPU {med[True][0] / med[False][0]:.3f}, "
          f"wall {med[True][1] / med[False][1]:.3f} ({args.repeats} repeats, {args.epochs} epochs, {args.dataset})")  # fmt: skip


if __name__ == "__main__":
    main()
