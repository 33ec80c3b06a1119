"""One hyperparameter varied around a study's best configuration, over many seeds:
``kcal ablation dataset=crime objective=nll_mmd ablation.key=objective.weight
'ablation.grid=[0,1,10,100]'``.

This is the controlled experiment behind a claim verdict: with everything else fixed at the best trial
of the sweep (architecture, learning rate, bandwidths, ...), does the regulariser's weight (or any other
key) move the claim's metric, and at what cost in NLL? ``ablation.set`` fixes further keys on top of the
best trial (e.g. ``'+ablation.set={objective.params.bandwidth_z: median}'``, resolved like any config
value), and its results go to a folder named after them. Each value is trained on seeds
``0 .. ablation.n_seeds-1`` (vectorised, as :mod:`kcal.reruns.seeds`) into
``<root>/ablations/<dataset>/<objective>/<key>=<value>/seeds/seed<k>/``; a value's finished seeds are
skipped on a rerun. The aggregate is ``<root>/ablations/<dataset>/<objective>/<key>.csv`` (the tidy
columns of :mod:`kcal.reruns.seeds` plus ``value``) and a figure ``<key>.{png,pdf}`` of each metric in
``ablation.metrics`` against the value, mean ± standard error over seeds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from kcal.configs import CONFIG_PATH
from kcal.core import layout
from kcal.core.errors import exits_on_config_error
from kcal.core.schema import Schema, integer, items, mapping, text
from kcal.core.startup import checks_config
from kcal.core.storage_url import keeps_password_off_disk
from kcal.reruns.seeds import SCHEMA as SEEDS_SCHEMA
from kcal.reruns.seeds import aggregate, best_config, train_seeds
from kcal.sweep.search_space import apply


def key_exists(cfg: DictConfig) -> str | None:
    key = OmegaConf.select(cfg, "ablation.key")
    if key is None:
        return None
    if OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
        return f"ablation.key={key} is not a key of the config (e.g. objective.weight, trainer.lr)"
    return None


#: the keys of ``ablation.*`` (configs/ablation.yaml)
ABLATION_KEYS = Schema({
    "ablation.key": text(),
    "ablation.grid": items(),
    "ablation.n_seeds": integer(1),
    "ablation.set": mapping(null="nothing fixed on top of the best trial"),
    "ablation.metrics": items(text()),
}, relations=(key_exists,))  # fmt: skip
#: what ``kcal ablation`` checks before it starts (:mod:`kcal.core.startup`)
SCHEMA = SEEDS_SCHEMA | ABLATION_KEYS


def ablation_dir(cfg: DictConfig) -> Path:
    """``<root>/ablations/<dataset>/<objective>``, plus one folder naming the ``ablation.set`` keys if any."""
    fixed = OmegaConf.to_container(cfg.ablation.set) if cfg.ablation.set else {}
    return layout.ablation_dir(cfg.root, cfg.dataset.name, str(cfg.objective.name), fixed)


def run_ablation(cfg: DictConfig) -> pd.DataFrame:
    """Train every pending (value, seed), aggregate, draw; return the tidy frame with a ``value`` column."""
    key, values = str(cfg.ablation.key), list(cfg.ablation.grid)
    best, info = best_config(cfg)
    fixed = OmegaConf.to_container(cfg.ablation.set) if cfg.ablation.set else {}
    best = apply(OmegaConf.create(OmegaConf.to_container(best, resolve=True)), fixed)
    best.trainer.progress_bar = False
    seeds = list(range(int(cfg.ablation.n_seeds)))
    out = ablation_dir(cfg)
    frames = []
    for value in values:
        run_cfg = apply(best, {key: value})
        value_dir = layout.ablation_value_dir(out, key, value)
        dirs = [layout.seed_dir(value_dir, k) for k in seeds]
        pending = [k for k, d in zip(seeds, dirs, strict=True) if not layout.is_finished(d)]
        print(f"[ablation {cfg.dataset.name}/{cfg.objective.name}] {key}={value}: "
              f"{len(seeds) - len(pending)} of {len(seeds)} seeds finished, {len(pending)} to train",
              file=sys.stderr, flush=True)  # fmt: skip
        if pending:
            train_seeds(run_cfg, pending, [dirs[k] for k in pending], cfg)
        summary = aggregate(dirs, cfg.dataset.name, str(cfg.objective.name))
        summary.insert(5, "value", value)
        frames.append(summary)
    table = pd.concat(frames, ignore_index=True)
    table.to_csv(out / f"{key}.csv", index=False)
    (out / "best_trial.txt").write_text(f"{info}\nfixed on top of it: {fixed}\n")
    draw(table, key, list(cfg.ablation.metrics), out / key, f"{cfg.dataset.name} / {cfg.objective.name}")
    return table


def draw(table: pd.DataFrame, key: str, metrics: list[str], stem: Path, title: str) -> None:
    """Each metric against the value (categorical axis, so 0 sits beside log-spaced values)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    exact = table[table["flavour"] == "exact"]
    metrics = [m for m in metrics if m in set(exact["metric"])]
    if not metrics:
        return
    values = list(dict.fromkeys(table["value"]))
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.0), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for recal, style in (("none", "o-"), ("post-hoc", "s--")):
            sub = exact[(exact["metric"] == metric) & (exact["recalibrator"] == recal)].set_index("value")
            sub = sub.reindex(values)
            ax.errorbar(range(len(values)), sub["mean"], yerr=sub["se"], fmt=style, capsize=3, ms=4,
                        label="without post-hoc" if recal == "none" else "with post-hoc")  # fmt: skip
        ax.set_xticks(range(len(values)), [f"{v:g}" for v in values])
        ax.set_xlabel(key)
        ax.set_title(metric.upper())
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{title}: mean ± SE over seeds", fontsize=9)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(stem.parent / f"{stem.name}.{ext}", dpi=120)
    plt.close(fig)


@keeps_password_off_disk
@checks_config("ablation", SCHEMA)
@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="ablation")
@exits_on_config_error
def main(cfg: DictConfig) -> None:
    table = run_ablation(cfg)
    shown = table[(table.flavour == "exact") & table.metric.isin(list(cfg.ablation.metrics))]
    print(shown.pivot_table(index="value", columns=["metric", "recalibrator"], values="mean").to_string())
    print(f"ablation: {ablation_dir(cfg) / (str(cfg.ablation.key) + '.csv')}")


if __name__ == "__main__":
    main()
