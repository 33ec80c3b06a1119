"""Train one model from one Hydra command and write its results.

    kcal train dataset=crime objective=nll_mmd recalibrator=isotonic seed=3
    kcal train -m dataset=crime,adult objective=nll,xe_mmd seed=0,1

Writes into the Hydra run directory what :func:`kcal.run.run` writes (:mod:`kcal.run.artifacts`):
``config.yaml``, ``metrics.json``, ``run.json``, ``history.csv``, ``predictions.npz``, ``figures/``,
``checkpoints/best.pt`` and ``csv/metrics.csv``.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from kcal.configs import CONFIG_PATH
from kcal.core.errors import exits_on_config_error
from kcal.core.startup import checks_config
from kcal.run import run
from kcal.run.setup import TRAIN_KEYS


@checks_config("train", TRAIN_KEYS)
@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
@exits_on_config_error
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    out = HydraConfig.get().runtime.output_dir
    metrics = run(cfg, out)
    print(
        f"status={metrics['status']} "
        + " ".join(f"{k}={metrics[k]:.4g}" for k in sorted(metrics) if k.startswith("test/"))
    )
    print(f"run: {out}")
    return metrics.get("val/nll")


if __name__ == "__main__":
    main()
