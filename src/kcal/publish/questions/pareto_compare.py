"""Compare the validation fronts of the plain objective and each regularised one, for one dataset.

    python -m kcal.publish.questions.pareto_compare ROOT DATASET [--out DIR] [--boot 1000]

Reads the ``sweep.selection=pareto`` studies of ``DATASET`` in ``ROOT/sweeps.db`` (one per objective of the
paper's list for the dataset's task), and writes to ``--out`` (default ``ROOT/pareto/DATASET``):

* ``fronts.json``: per regularised objective, :func:`kcal.publish.questions.fronts.bootstrap_compare` against the plain
  objective (one shared reference point, :func:`kcal.publish.questions.fronts.common_reference`), and the points the two
  rules choose (:func:`kcal.publish.questions.fronts.choose`) with their values and regulariser shares;
* ``fronts.png``: every study's trials and front on the two validation metrics;
* a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import optuna

from kcal.core import layout
from kcal.data import get_spec
from kcal.paper import PAPER_OBJECTIVES
from kcal.publish.questions import fronts
from kcal.sweep.search import REG_SHARE_AT_BEST, REG_SHARE_MEDIAN
from kcal.sweep.selection import metric_names
from kcal.sweep.studies import counted


def load_studies(root: Path, dataset: str) -> tuple[str, dict[str, optuna.Study]]:
    task = get_spec(dataset).task
    storage = layout.sqlite_url(root)
    names = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    studies = {}
    for obj in PAPER_OBJECTIVES[task]:
        name = layout.study_name(dataset, obj, "paper", "pareto")
        if name in names:
            studies[obj] = optuna.load_study(study_name=name, storage=storage)
    return task, studies


def share_of(trial: optuna.trial.FrozenTrial) -> tuple[float | None, float | None]:
    return trial.user_attrs.get(REG_SHARE_MEDIAN), trial.user_attrs.get(REG_SHARE_AT_BEST)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("dataset")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--boot", type=int, default=1000)
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    task, studies = load_studies(args.root, args.dataset)
    plain = PAPER_OBJECTIVES[task][0]
    if plain not in studies or len(studies) < 2:
        raise SystemExit(
            f"need the pareto studies of {plain} and a regularised objective; found {sorted(studies)}"
        )
    out = args.out or layout.pareto_dir(args.root, args.dataset)
    out.mkdir(parents=True, exist_ok=True)
    points = {obj: fronts.study_points(s) for obj, s in studies.items()}
    trials = {obj: [t for t in s.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
              for obj, s in studies.items()}  # fmt: skip
    reference = fronts.common_reference(*points.values())
    best_plain = float(points[plain][fronts.choose(points[plain], "nll")][0])
    x_name, y_name = metric_names(task)
    report: dict = {"dataset": args.dataset, "metrics": [x_name, y_name], "reference": reference.tolist(),
                    "plain": plain, "best_plain_nll": best_plain, "tolerance": fronts.CALIBRATION_TOL,
                    "objectives": {}}  # fmt: skip
    print(
        f"| objective | front | HV | HV - HV({plain}) [95 %] | P(HV > plain) | share of {plain}'s front "
        f"dominated | rule nll: trial ({x_name}, {y_name}), reg share | rule calibration: trial, reg share |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for obj, pts in points.items():
        entry: dict = {
            "trials": len(pts),  # completed
            "counted": counted(studies[obj])[0],  # completed + diverged or invalid: the n_trials budget
            "front": [int(trials[obj][i].number) for i in fronts.pareto_front(pts)],
        }
        for rule in fronts.RULES:
            i = fronts.choose(pts, rule, best_plain=best_plain)
            if i is not None:
                t = trials[obj][i]
                entry[f"rule_{rule}"] = {
                    "trial": t.number,
                    "values": list(t.values),
                    "reg_share": share_of(t),
                }
        if obj != plain:
            entry["compare"] = fronts.bootstrap_compare(points[plain], pts, reference, n_boot=args.boot)
        report["objectives"][obj] = entry
        hv = fronts.hypervolume(pts, reference)
        cmp_ = entry.get("compare")
        diff = (f"{cmp_['hv_diff']['estimate']:+.4f} [{cmp_['hv_diff']['low']:+.4f}, {cmp_['hv_diff']['high']:+.4f}]"
                if cmp_ else "—")  # fmt: skip
        share = f"{cmp_['hv_diff']['share_b_greater']:.2f}" if cmp_ else "—"
        dom = f"{cmp_['dominated_a_by_b']['estimate']:.2f}" if cmp_ else "—"

        def rule_cell(rule, entry=entry):
            r = entry.get(f"rule_{rule}")
            if r is None:
                return "none"
            med = r["reg_share"][0]
            return (f"#{r['trial']} ({r['values'][0]:.3f}, {r['values'][1]:.3f}), "
                    f"{'—' if med is None else f'{med:.1e}'}")  # fmt: skip

        print(
            f"| {obj} | {len(entry['front'])} | {hv:.4f} | {diff} | {share} | {dom} | {rule_cell('nll')} | "
            f"{rule_cell('calibration')} |"
        )
    (out / layout.FRONTS_FILE).write_text(json.dumps(report, indent=1) + "\n")
    draw(points, reference, x_name, y_name, args.dataset, out / layout.FRONTS_FIGURE)


def draw(points: dict[str, np.ndarray], reference: np.ndarray, x_name: str, y_name: str, dataset: str,
         path: Path) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for obj, pts in points.items():
        ok = np.isfinite(pts).all(1) & (pts < reference).all(1)
        (line,) = ax.plot(pts[ok, 0], pts[ok, 1], ".", alpha=0.25)
        front = pts[fronts.pareto_front(pts)]
        ax.step(front[:, 0], front[:, 1], where="post", color=line.get_color(), label=f"{obj} ({len(front)})")
        ax.plot(front[:, 0], front[:, 1], "o", color=line.get_color(), ms=4)
    ax.set_xlabel(f"validation {x_name.split('/')[-1].upper()}")
    ax.set_ylabel(f"validation {y_name.split('/')[-1].upper()}")
    ax.set_title(f"{dataset}: validation fronts, 100 TPE trials per objective")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
