"""The local-calibration experiment's runs (paper §6.3): NLL vs NLL + MMD (local) per dataset.

:func:`train_local` trains every (dataset, objective) of :data:`kcal.figures.local.LOCAL_DATASETS` x
:data:`~kcal.figures.local.LOCAL_OBJECTIVES` into ``<root>/<dataset>/<objective>/`` (one
:func:`kcal.run.run` each), the inputs of :func:`kcal.figures.local.draw_local_maps`.
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from kcal.configs import CONFIG_DIR
from kcal.figures.local import LOCAL_DATASETS, LOCAL_OBJECTIVES, LOCAL_ROOT
from kcal.run.setup import load_data, phi_bandwidth
from kcal.run.single import run


def compose_local_config(dataset: str, objective: str, seed: int = 0, overrides=()) -> DictConfig:
    """``train.yaml`` with ``experiment=local_calibration`` and the dataset's defaults."""
    extra = LOCAL_DATASETS.get(dataset, {}).get("overrides", [])
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=["experiment=local_calibration", f"dataset={dataset}",
                                           f"objective={objective}", f"seed={seed}", "trainer.progress_bar=false",
                                           "save_checkpoint=false", *extra, *overrides])  # fmt: skip


def resolve_phi_bandwidth(cfg: DictConfig) -> DictConfig:
    """``cfg`` with ``objective.bandwidth_z_phi`` written into ``objective.params.bandwidth_z``
    (:func:`kcal.run.setup.phi_bandwidth`, the value every run resolves itself), for display."""
    value = phi_bandwidth(cfg, load_data(cfg))
    if value is not None:
        with open_dict(cfg):
            cfg.objective.params.bandwidth_z = value
    return cfg


def train_local(datasets=tuple(LOCAL_DATASETS), root: Path = LOCAL_ROOT, seed: int = 0, overrides=(),
                objectives=LOCAL_OBJECTIVES, log=print) -> dict[str, dict[str, dict]]:  # fmt: skip
    """Train every (dataset, objective) into ``root/<dataset>/<objective>/``; return their metrics."""
    results: dict[str, dict[str, dict]] = {}
    for ds in datasets:
        for obj in objectives:
            cfg = resolve_phi_bandwidth(compose_local_config(ds, obj, seed, overrides))
            out = Path(root) / ds / obj
            bw = cfg.objective.params.get("bandwidth_z")
            log(
                f"training {ds} / {obj} -> {out}"
                + (f" (bandwidth_z on phi(x) = {bw:.4g})" if obj != "nll" else "")
            )
            metrics = run(cfg, out)
            log(f"  status={metrics['status']} epochs={metrics['epochs']} test/nll={metrics.get('test/nll', float('nan')):.4g} "
                f"test/qce={metrics.get('test/qce', float('nan')):.4g}")  # fmt: skip
            results.setdefault(ds, {})[obj] = metrics
    return results
