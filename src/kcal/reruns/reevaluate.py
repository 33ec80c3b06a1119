"""Evaluate a root's finished seeds again, from their saved forecasts, with this kcal's evaluation code.

    kcal reevaluate <root> [--datasets blog crime]

Training and evaluation are separable: each finished seed keeps the network's forecasts on the validation and
test splits (``predictions.npz``) beside its ``config.yaml``. This recomputes every ``official/...`` key of
its ``metrics.json`` (:func:`kcal.evaluation.official_from_predictions`: the authors' post-hoc arithmetic,
metrics batched as theirs) with the evaluation code of the checkout it runs from, records that evaluation
(the checkout's commit, kcal's version, the time, the keys that moved) as ``evaluation`` in the seed's
``run.json`` beside its training information, and rebuilds each rerun's ``summary.csv`` and the root's
``results.csv``. The exact keys are left as they are (their code has not changed since they were written).

A seed without ``predictions.npz`` cannot be evaluated again: it is listed, and the command exits 1 without
writing anything when any seed of a rerun it would touch lacks them (a rerun's rows never mix two evaluation
codes). Its numbers come back by training those seeds again (``kcal seeds`` of the recorded selected trial).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import OmegaConf

import kcal
from kcal.core import layout
from kcal.core.errors import exits_on_user_error
from kcal.core.plotting import load_predictions
from kcal.data import get_spec
from kcal.evaluation import official_from_predictions
from kcal.run.artifacts import checkout_commit, write_metrics


def missing_predictions(root: Path, datasets: list[str] | None = None) -> list[Path]:
    """The finished seeds under ``root`` (of ``datasets``) that kept no ``predictions.npz``."""
    out = []
    for dataset, labels in layout.seed_runs(root).items():
        if datasets and dataset not in datasets:
            continue
        for dirs in labels.values():
            out += [d for d in dirs if layout.is_finished(d) and not (d / layout.PREDICTIONS_FILE).is_file()]
    return out


class SeedData:
    """What a seed's evaluation needs besides its forecasts: (decision threshold in target units, test features,
    resolved recalibrator), loaded once per dataset config (and per seed under the clean protocol, whose split
    follows the seed)."""

    def __init__(self):
        self.cache: dict[str, tuple[float, object, str]] = {}

    def get(self, cfg) -> tuple[float, object, str]:
        from kcal.run.setup import prepare

        per_seed = cfg.seed if cfg.dataset.protocol != "official" else None
        key = json.dumps([OmegaConf.to_container(cfg.dataset, resolve=True), per_seed], sort_keys=True)
        if key not in self.cache:
            prep = prepare(cfg)
            self.cache[key] = (prep.threshold * prep.data.info.y_scale, prep.data.test.x, prep.recalibrator)
        return self.cache[key]


def reevaluate_seed(run_dir: Path, data: SeedData, stamp: dict) -> int:
    """Recompute one seed's ``official/...`` keys; returns how many of them changed."""
    cfg = OmegaConf.load(run_dir / layout.CONFIG_FILE)
    metrics = json.loads(layout.metrics_file(run_dir).read_text())
    threshold, x_test, recalibrator = data.get(cfg)
    preds = load_predictions(run_dir)
    new = official_from_predictions(preds, recalibrator, seed=int(metrics["seed"]), threshold=threshold,
                                    objective=str(cfg.objective.name), x_test=x_test)  # fmt: skip
    changed = sorted(k for k, v in new.items() if metrics.get(k) != v)
    metrics.update(new)
    write_metrics(metrics, run_dir)
    info_path = run_dir / layout.RUN_INFO_FILE
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info["evaluation"] = {**stamp, "changed": changed}
    info_path.write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    return len(changed)


def reevaluate(root: Path, datasets: list[str] | None = None, echo=print) -> Path:
    """Every finished seed of ``root`` (of ``datasets``) evaluated again; returns the rebuilt ``results.csv``."""
    from kcal.reruns.seeds import aggregate, collect

    root = Path(root)
    lacking = missing_predictions(root, datasets)
    if lacking:
        shown = ", ".join(str(p.relative_to(root)) for p in lacking[:5])
        raise SystemExit(f"kcal reevaluate: {len(lacking)} finished seed(s) kept no {layout.PREDICTIONS_FILE} "
                         f"({shown}{', ...' if len(lacking) > 5 else ''}); train them again (kcal seeds) or "
                         "leave their datasets out (--datasets); nothing was written")  # fmt: skip
    stamp = {"commit": checkout_commit(), "kcal": kcal.__version__,
             "at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}  # fmt: skip
    data = SeedData()
    for dataset, labels in layout.seed_runs(root).items():
        if datasets and dataset not in datasets:
            continue
        for label, dirs in labels.items():
            done = [d for d in dirs if layout.is_finished(d)]
            moved = sum(reevaluate_seed(d, data, stamp) for d in done)
            aggregate(dirs, dataset, label).to_csv(dirs[0].parent.parent / layout.SUMMARY_FILE, index=False)
            echo(f"{dataset}/{label}: {len(done)} seeds evaluated again ({moved} official values moved)")
    results = layout.results_file(root)
    collect(root).to_csv(results, index=False)
    echo(f"results: {results} (evaluation of {stamp['commit']})")
    return results


@exits_on_user_error
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kcal reevaluate", description=__doc__.split("\n")[0])
    p.add_argument("root", type=Path, help="a reproduction root (its seeds keep predictions.npz)")
    p.add_argument("--datasets", nargs="+", help="only these datasets (default: every one in root)")
    args = p.parse_args(argv)
    for name in args.datasets or []:
        get_spec(name)  # a misspelt name: one line listing the valid ones, exit 2
    if not args.root.is_dir():
        p.error(f"{args.root} is not a directory")
    reevaluate(args.root, args.datasets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
