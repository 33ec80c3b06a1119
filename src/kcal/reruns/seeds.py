"""Rerun the sweep's best configuration over seeds and aggregate:
``kcal seeds dataset=crime objective=nll_mmd``.

Seeds ``0 .. seeds_run.n_seeds-1`` each get ``<root>/<dataset>/<label>/seeds/seed<k>/`` with the files of
a :mod:`kcal.run.train` run; a seed whose ``metrics.json`` exists is skipped, so an interrupted rerun
resumes. By default the pending seeds are trained together as one vectorised model
(:mod:`kcal.run.stacked`, ``seeds_run.vectorized=false`` trains them one by one). The per-seed results
are aggregated into ``<root>/<dataset>/<label>/summary.csv``, a tidy table with columns
``dataset, objective, recalibrator, flavour, metric, mean, se, n`` (se = sample std / sqrt(n) over the
seeds whose run finished with status ok).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import hydra
import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from kcal.configs import CONFIG_PATH
from kcal.core import layout
from kcal.core.errors import ConfigError, exits_on_config_error
from kcal.core.progress import Progress, cpu_note
from kcal.core.schema import Schema, flag, integer, text
from kcal.core.startup import checks_config
from kcal.core.storage_url import keeps_password_off_disk, masked
from kcal.paper import RESULT_COLUMNS
from kcal.run.setup import TRAIN_KEYS
from kcal.run.snapshot import resumed_note, resumed_record, resumed_seconds
from kcal.sweep.fingerprint import check_seeds
from kcal.sweep.search import SWEEP_KEYS
from kcal.sweep.selection import selection_of

TIDY_COLUMNS = list(RESULT_COLUMNS)
PREFIXES = {  # metrics.json prefix -> (recalibrator, flavour)
    "test/": ("none", "exact"),
    "test_recal/": ("post-hoc", "exact"),
    "official/test/": ("none", "official"),
    "official/test_recal/": ("post-hoc", "official"),
}

#: the keys of ``seeds_run.*`` (configs/seeds.yaml, the profiles' ``seeds_run.n_seeds``)
SEEDS_KEYS = Schema({
    "seeds_run.n_seeds": integer(1),
    "seeds_run.vectorized": flag(),
    "seeds_run.chunk_size": integer(1),
    "seeds_run.use_best": flag(),
    "seeds_run.best_from": text(),
    "seeds_run.trial": integer(0, null="the study's selected trial"),
    "seeds_run.best_file": text(null="the study's selected trial"),
    "seeds_run.label": text(),
    "seeds_run.overwrite": flag(),
    "seeds_run.adopt": flag(),
    "seeds_run.figures": integer(0, null="every seed"),
})  # fmt: skip
#: what ``kcal seeds`` checks before it starts (:mod:`kcal.core.startup`)
SCHEMA = TRAIN_KEYS | SWEEP_KEYS | SEEDS_KEYS


def label_dir(cfg: DictConfig) -> Path:
    """``<root>/<dataset>/<label>``; seed reruns of a pareto-selected trial get the study's suffix, so they
    never share a folder with the paper selection's."""
    return layout.label_dir(cfg.root, cfg.dataset.name, str(cfg.seeds_run.label), selection_of(cfg))


def seed_dirs(cfg: DictConfig) -> dict[int, Path]:
    return {k: layout.seed_dir(label_dir(cfg), k) for k in range(int(cfg.seeds_run.n_seeds))}


def best_config(cfg: DictConfig) -> tuple[DictConfig, dict]:
    """``cfg`` with the best trial's parameters of the ``seeds_run.best_from`` study applied (under
    ``sweep.selection=pareto`` the selected front trial, :func:`kcal.sweep.selection.selected`), or those of
    trial number ``seeds_run.trial`` when it is set (e.g. another point of a Pareto front), or those recorded in
    ``seeds_run.best_file`` (a published ``best/<dataset>__<objective>.json``: the selected trial of a study that
    is no longer at hand, rerun over new seeds, e.g. to evaluate them again)."""
    if not cfg.seeds_run.use_best:
        return cfg, {}
    if cfg.seeds_run.get("best_file"):
        return recorded_config(cfg, Path(str(cfg.seeds_run.best_file)))
    from optuna.trial import TrialState

    from kcal.sweep.search_space import apply
    from kcal.sweep.selection import value_of
    from kcal.sweep.studies import best_trial, open_study, storage_url, study_name

    study_cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    best_from = str(cfg.seeds_run.best_from)
    study_cfg.sweep.study_name = layout.with_objective(
        str(cfg.sweep.study_name), cfg.objective.name, best_from
    )
    try:
        study = open_study(study_cfg, create=False)
    except KeyError:
        raise ConfigError(
            f"no sweep study {study_name(study_cfg)!r} in {masked(storage_url(cfg))}; "
            f"run `kcal sweep dataset={cfg.dataset.name} objective={best_from}` first, "
            "or pass seeds_run.use_best=false to use the config as given"
        ) from None
    number = cfg.seeds_run.get("trial")
    if number is None:
        best = best_trial(study)
    else:
        done = {t.number: t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
        if int(number) not in done:
            raise ConfigError(f"seeds_run.trial={number}: study {study_name(study_cfg)!r} has no completed trial "
                              f"of that number; completed: {min(done, default='-')}..{max(done, default='-')}")  # fmt: skip
        best = done[int(number)]
    return apply(cfg, best.params), {"study": study_name(study_cfg), "trial": best.number, "value": value_of(best),
                                     "params": best.params}  # fmt: skip


def recorded_config(cfg: DictConfig, path: Path) -> tuple[DictConfig, dict]:
    """``cfg`` with the parameters of a recorded selected trial (``{"study", "trial", "value", "params"}``)."""
    from kcal.sweep.search_space import apply

    if not path.is_file():
        raise ConfigError(
            f"seeds_run.best_file={path}: no such file; give a published best/<dataset>__<objective>.json"
        )
    best = json.loads(path.read_text())
    missing = [k for k in ("study", "trial", "params") if k not in best]
    if missing:
        raise ConfigError(
            f"seeds_run.best_file={path} lacks {', '.join(missing)}; it is not a best-trial record"
        )
    dataset, objective, _, _ = layout.parse_study_name(str(best["study"]))
    if dataset != cfg.dataset.name or objective != str(cfg.seeds_run.best_from):
        raise ConfigError(f"seeds_run.best_file={path} records {dataset}/{objective}, not "
                          f"{cfg.dataset.name}/{cfg.seeds_run.best_from}")  # fmt: skip
    return apply(cfg, best["params"]), {k: best.get(k) for k in ("study", "trial", "value", "params")}


def seed_plan(cfg: DictConfig) -> tuple[DictConfig, list[int]]:
    """The resolved config the seeds train (best trial applied; ``best_trial.json`` written) and the
    seeds still to train."""
    base, best = best_config(cfg)
    base = OmegaConf.create(OmegaConf.to_container(base, resolve=True))
    base.trainer.progress_bar = False
    if base.sweep.get("storage"):  # each seed run saves this config
        base.sweep.storage = masked(str(base.sweep.storage))
    out = label_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    check_seeds(out, base, best, cfg)  # kcal.sweep.fingerprint: refuse finished seeds of another config
    (out / layout.BEST_TRIAL_FILE).write_text(json.dumps(best, indent=1, default=str) + "\n")
    pending = [k for k, d in seed_dirs(cfg).items() if not layout.is_finished(d)]
    return base, pending


def plan_line(cfg: DictConfig, pending: list[int]) -> str:
    """``crime/nll: 2 of 3 seeds already finished, 1 to train``: what a rerun that starts has left."""
    n = len(seed_dirs(cfg))
    return (
        f"{cfg.dataset.name}/{cfg.seeds_run.label}: {n - len(pending)} of {n} seeds already finished, "
        f"{len(pending)} to train"
    )


def chunks(cfg: DictConfig, seeds: list[int], parts: int = 1) -> list[list[int]]:
    """The seeds in the groups that train together (one vectorised model each, or one seed each): at most
    ``seeds_run.chunk_size`` a group, and at least ``parts`` groups where there are that many seeds (a
    pool of ``parts`` workers then shares a rerun instead of one worker training it while the others
    wait). A group's size changes no seed's numbers: a seed trains in a stack as it trains alone
    (:mod:`kcal.run.stacked`, "The optimiser step")."""
    size = int(cfg.seeds_run.chunk_size) if cfg.seeds_run.vectorized else 1
    size = max(1, min(size, math.ceil(len(seeds) / max(1, parts))))
    return [seeds[i : i + size] for i in range(0, len(seeds), size)]


def summarize(cfg: DictConfig) -> pd.DataFrame:
    """Aggregate every finished seed into ``summary.csv``; return the tidy summary."""
    dirs = seed_dirs(cfg)
    summary = aggregate([dirs[k] for k in dirs], cfg.dataset.name, str(cfg.seeds_run.label))
    summary.to_csv(label_dir(cfg) / layout.SUMMARY_FILE, index=False)
    return summary


def chunk_line(
    cfg: DictConfig, seeds: list[int], seconds: float, cpu: float | None = None, resumed: dict | None = None
) -> str:
    """``[crime/nll] seeds 0-49 of 50 done in 310 s (305 s CPU)``, and where the chunk went on from a snapshot
    (``resumed``: :func:`kcal.run.snapshot.resumed_record`) how long it trained before the stop."""
    span = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"
    spent = cpu_note(cpu) + resumed_note(resumed)
    return f"[{cfg.dataset.name}/{cfg.seeds_run.label}] {span} of {cfg.seeds_run.n_seeds} done in {seconds:.0f} s{spent}"


def run_seeds(cfg: DictConfig, progress: Progress | None = None) -> pd.DataFrame:
    """Train every pending seed, then aggregate all finished seeds; return the tidy summary.

    ``progress``: the whole run's progress (e.g. the reproduction's); default: these seeds'."""
    base, pending = seed_plan(cfg)
    dirs = seed_dirs(cfg)
    print(plan_line(cfg, pending), file=sys.stderr)
    groups = chunks(cfg, pending)
    own = progress is None
    progress = progress or Progress(len(pending), "seeds")
    for chunk in groups:
        t0, cpu = time.perf_counter(), time.process_time()
        train_seeds(base, chunk, [dirs[k] for k in chunk], cfg)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu
        trained = [dirs[k] for k in chunk]
        progress.advance(len(chunk), chunk_line(cfg, chunk, seconds, cpu, resumed_record(trained[0])), "seeds",
                         seconds, cpu=cpu, before=resumed_seconds(trained))  # fmt: skip
    summary = summarize(cfg)
    if own:
        progress.finish(f"{cfg.dataset.name}/{cfg.seeds_run.label}: {len(dirs)} seeds finished")
    return summary


def figure_seeds(base: DictConfig, cfg: DictConfig, seeds: list[int]) -> list[int]:
    """The seeds whose runs draw per-run figures: those below ``seeds_run.figures`` (all when it is null),
    when the config draws figures at all. Fifty copies of one configuration's reliability diagram cost
    a quarter of a quick reproduction; ``kcal figures run <seed dir>`` draws any other."""
    if not base.get("figures", False):
        return []
    limit = cfg.seeds_run.get("figures")
    return [s for s in seeds if limit is None or s < int(limit)]


def train_seeds(base: DictConfig, seeds: list[int], dirs: list[Path], cfg: DictConfig) -> None:
    # imported here: a pool's parent plans seed reruns and trains none (Lightning costs ~3 s to import)
    from kcal.run import run
    from kcal.run.artifacts import draw_figures

    drawn = figure_seeds(base, cfg, seeds)
    base = OmegaConf.merge(
        base, {"figures": False}
    )  # a copy; figures are drawn below, for the seeds that want them

    def seed_config(seed: int, **changes) -> DictConfig:
        return OmegaConf.merge(base, {"seed": seed, **changes})

    if cfg.seeds_run.vectorized:  # kcal.run.stacked itself falls back to single runs under protocol=clean
        from kcal.run.stacked import train_stacked

        size = int(cfg.seeds_run.chunk_size)
        for i in range(0, len(seeds), size):
            train_stacked(base, seeds[i : i + size], dirs[i : i + size], chunk_size=size)
    else:
        for seed, d in zip(seeds, dirs, strict=True):
            run(seed_config(seed), d)
    for seed, d in zip(seeds, dirs, strict=True):
        if seed in drawn and (d / layout.PREDICTIONS_FILE).is_file():  # a diverged run has no predictions
            draw_figures(d, seed_config(seed, figures=True), seed)


def aggregate(dirs: list[Path], dataset: str, label: str) -> pd.DataFrame:
    """Tidy mean/SE over the seeds' ``metrics.json`` (status ok only)."""
    per_seed = []
    for d in dirs:
        path = layout.metrics_file(d)
        if path.is_file():
            m = json.loads(path.read_text())
            if m.get("status") == "ok":
                per_seed.append(m)
    rows = []
    for prefix, (recal, flavour) in PREFIXES.items():
        keys = sorted(
            {k for m in per_seed for k in m if k.startswith(prefix) and "/" not in k[len(prefix) :]}
        )
        for key in keys:
            values = np.array(
                [m[key] for m in per_seed if key in m and isinstance(m[key], int | float)], dtype=float
            )
            values = values[np.isfinite(values)]
            if values.size == 0:
                continue
            se = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else float("nan")
            rows.append(
                [
                    dataset,
                    label,
                    recal,
                    flavour,
                    key[len(prefix) :],
                    float(values.mean()),
                    se,
                    int(values.size),
                ]
            )
    return pd.DataFrame(rows, columns=TIDY_COLUMNS)


def collect(root: Path) -> pd.DataFrame:
    """Concatenate every ``summary.csv`` under a reproduction root."""
    frames = [pd.read_csv(p) for p in layout.summary_files(root)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=TIDY_COLUMNS)


@keeps_password_off_disk
@checks_config("seeds", SCHEMA)
@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="seeds")
@exits_on_config_error
def main(cfg: DictConfig) -> None:
    summary = run_seeds(cfg)
    shown = summary[(summary.recalibrator == "none") & (summary.flavour == "exact")]
    print(shown.to_string(index=False))
    print(f"summary: {label_dir(cfg) / layout.SUMMARY_FILE}")


if __name__ == "__main__":
    main()
