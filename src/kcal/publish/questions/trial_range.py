"""Place a value (the paper's, typically) among the test metrics of a study's own trials.

    python -m kcal.publish.questions.trial_range ROOT DATASET OBJECTIVE METRIC VALUE [VALUE ...]

Reads every finished trial's ``metrics.json`` under ``ROOT/DATASET/OBJECTIVE/sweep/trials/`` (a run's root,
or a root imported from ``kcal.orchestrate.state``, which carries them) and prints, for ``METRIC`` (a key of those
files, e.g. ``test/acc``, ``official/test/ece``, ``test_recal/entropy``), the trials' minimum, median and
maximum, the selected trial's value (``sweep/best.json``), and for each VALUE (in the file's units:
accuracy as a fraction) how many trials lie below it. RESULTS.md uses it for "the paper's value lies
inside our own trials' range": a selection difference rather than a different model family.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from kcal.core import layout


def trial_values(root: Path, dataset: str, objective: str, metric: str) -> dict[int, float]:
    """``{trial number: metrics[metric]}`` of the study's finished trials (status ok)."""
    sweep = layout.sweep_dir(root, dataset, objective)
    out = {}
    for path in sorted(layout.trials_dir(sweep).glob(f"trial_*/{layout.METRICS_FILE}")):
        metrics = json.loads(path.read_text())
        if metrics.get("status", "ok") == "ok" and metrics.get(metric) is not None:
            out[layout.trial_number(path.parent)] = float(metrics[metric])
    return out


def describe(values: dict[int, float], selected: int | None, metric: str, probes: list[float]) -> list[str]:
    v = np.array(list(values.values()))
    lines = [f"{metric} over {len(v)} finished trials: min {v.min():.4f}, median {np.median(v):.4f}, "
             f"max {v.max():.4f}"]  # fmt: skip
    if selected is not None and selected in values:
        lines.append(
            f"the selected trial #{selected}: {values[selected]:.4f} (above {(v < values[selected]).sum()})"
        )
    for p in probes:
        inside = "inside" if v.min() <= p <= v.max() else "outside"
        lines.append(f"{p:g} is above {(v < p).sum()} of {len(v)} trials ({inside} their range)")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("dataset")
    ap.add_argument("objective")
    ap.add_argument("metric", help="a key of the trials' metrics.json, e.g. test/acc")
    ap.add_argument("values", type=float, nargs="+", help="values to place among the trials")
    args = ap.parse_args(argv)
    values = trial_values(args.root, args.dataset, args.objective, args.metric)
    if not values:
        sys.exit(f"trial_range.py: no finished trial with {args.metric} under "
                 f"{layout.trials_dir(layout.sweep_dir(args.root, args.dataset, args.objective))}")  # fmt: skip
    best = layout.sweep_dir(args.root, args.dataset, args.objective) / layout.BEST_FILE
    selected = json.loads(best.read_text())["trial"] if best.is_file() else None
    print(
        f"{args.dataset}/{args.objective}", *describe(values, selected, args.metric, args.values), sep="\n  "
    )


if __name__ == "__main__":
    main()
