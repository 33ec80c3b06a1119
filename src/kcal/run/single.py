"""One run from one config: prepare, fit with Lightning, restore the best weights, finalize."""

from __future__ import annotations

from pathlib import Path

import pytorch_lightning as pl
from omegaconf import DictConfig

from kcal.run import setup
from kcal.run.artifacts import finalize, save_config
from kcal.run.module import fit


def run(cfg: DictConfig, output_dir: str | Path) -> dict:
    """Train one model, restore its best weights, evaluate; write the run's files; return the metrics."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    pl.seed_everything(cfg.seed, workers=False, verbose=False)  # stray global-RNG users stay seeded too
    prep = setup.prepare(cfg)
    save_config(cfg, out)
    module, result = fit(prep, setup.build(prep, cfg.seed), out)
    return finalize(prep, module.model, result, out, cfg.seed)
