"""Publish the front comparison of ``sweep.selection=pareto`` runs: numbers as package data, a checked report.

    kcal pareto-report publish ROOT DATASET [DATASET ...] [--dest docs/results/pareto]
    kcal pareto-report check [--dest docs/results/pareto]

``publish`` copies, per dataset, what ``python -m kcal.publish.questions.pareto_compare ROOT DATASET`` wrote
(``ROOT/pareto/DATASET/fronts.json`` and ``fronts.png``) and the dataset's rows of the root's seed reruns
(every ``summary.csv``, :func:`kcal.reruns.seeds.collect`) into the package data folder :func:`data_dir`
(``fronts.json``, ``results.csv``), copies the figure to ``DEST/fronts_DATASET.png``, and rewrites the
generated blocks of ``DEST/README.md``. ``check`` regenerates the blocks from the package data in memory
and exits 1 naming any that differ (the test suite runs it).

Generated blocks (between ``<!-- kcal.report:NAME -->`` and ``<!-- /kcal.report -->``, as in
:mod:`kcal.publish.report`; the text around them is written by hand and kept):

* ``pareto:summary``: one line per dataset, the verdict of each regularised front against the plain one;
* ``pareto:DATASET:fronts``: hypervolume difference with its bootstrap interval, dominated shares, the
  regulariser's share of the loss at the two rules' points, and the verdict;
* ``pareto:DATASET:test``: the rules' points rerun over seeds, on the test split.

The verdicts follow rules fixed before any number was seen:

* **fronts** (validation): a regularised front *dominates* the plain one when the 95 % bootstrap interval
  of the hypervolume difference lies above 0, *loses* when it lies below 0, and otherwise *matches* (the
  two cannot be told apart with 100 trials each); *none* when both fronts are one point within
  :data:`PERFECT` of a perfect validation score (0 NLL and 0 calibration error), where hypervolumes
  compare rounding errors;
* **test split**: a rule's point *improves calibration* when its test calibration error (ECE; QCE for
  regression) is lower than the plain objective's point of the same rule by more than 2 combined standard
  errors, *worsens* it when higher by more than 2, and is *level* otherwise; its NLL difference is stated
  beside it in nats and combined standard errors.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

import pandas as pd

from kcal.core import layout
from kcal.core.errors import exits_on_user_error
from kcal.data import get_spec
from kcal.paper import PAPER_OBJECTIVES
from kcal.publish.report import GENERATED, fill

DEST = Path("docs/results/pareto")
RULE_LABEL = {"nll": "1", "calibration": "2"}
RULE_SUFFIX = {"nll": "", "calibration": "@calibration"}  # seed-rerun label of each rule's point
Z = 2.0  # combined standard errors for a test-split difference to count
FULL_TRIALS, FULL_SEEDS = 100, 20  # fewer trials per study or seeds per point: no verdict (smoke, quick)
PERFECT = 1e-6  # fronts of one point below this on both metrics: ~(0, 0), nothing to rank
TEST_METRICS = {  # (metric, header, recalibrated?) in the order of the test table
    "classification": [("acc", "accuracy (%)", False), ("ece", "ECE", False), ("nll", "NLL", False),
                       ("entropy", "entropy", False), ("ece", "ECE after temperature scaling", True),
                       ("nll", "NLL after temperature scaling", True)],
    "regression": [("qce", "QCE", False), ("dce", "DCE", False), ("nll", "NLL", False), ("crps", "CRPS", False),
                   ("qce", "QCE after recalibration", True), ("nll", "NLL after recalibration", True)],
}  # fmt: skip
CALIBRATION_METRIC = {"classification": "ece", "regression": "qce"}
NAMES = {"xe": "XE", "xe_mmce": "XE + MMCE", "xe_kde": "XE + ECE-KDE", "xe_mmd": "XE + MMD", "nll": "NLL",
         "nll_mmd": "NLL + MMD",
         "nll_mmd_tanh": "NLL + MMD (tanh)"}  # fmt: skip


def data_dir() -> Path:
    """Where the published numbers of the front comparison live (package data), one folder per dataset."""
    return layout.resources_dir() / "results" / "full" / "experiments" / "pareto"


def name(objective: str) -> str:
    return NAMES.get(objective, objective)


# ---- reading the published numbers ------------------------------------------------------------------
def load(folder: Path) -> tuple[dict, pd.DataFrame]:
    fronts = json.loads((folder / layout.FRONTS_FILE).read_text())
    results = pd.read_csv(layout.results_file(folder))
    return fronts, results


def task_of(fronts: dict) -> str:
    return "classification" if fronts["plain"] in PAPER_OBJECTIVES["classification"] else "regression"


def budget(entry: dict) -> int:
    """Trials that count towards the study's n_trials: completed, diverged or invalid (older fronts.json
    files, from studies where none failed, hold only the completed count)."""
    return int(entry.get("counted", entry["trials"]))


def min_trials(fronts: dict) -> int:
    return min(budget(e) for e in fronts["objectives"].values())


def perfect(*entries: dict) -> bool:
    """Whether each study's front is one point within :data:`PERFECT` of a perfect validation score."""
    return all(len(e["front"]) == 1 and max(e["rule_nll"]["values"]) < PERFECT for e in entries)


def front_verdict(compare: dict, trials: int = FULL_TRIALS, is_perfect: bool = False) -> str:
    if trials < FULL_TRIALS:
        return f"no verdict ({trials} trials)"
    if is_perfect:
        return "none: both fronts are a perfect validation score"
    diff = compare["hv_diff"]
    if diff["low"] > 0:
        return "dominates"
    if diff["high"] < 0:
        return "loses"
    return "matches"


def share_text(value) -> str:
    return "—" if value is None else f"{value:.1e}"


def fronts_table(fronts: dict) -> str:
    plain = fronts["plain"]
    lines = [
        f"| objective | trials | front points | HV − HV({name(plain)}) [95 %] | P(HV > {name(plain)}'s) | "
        f"share of {name(plain)}'s front it dominates | share of its front {name(plain)} dominates | "
        "regulariser share, rule 1 / rule 2 | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for obj, entry in fronts["objectives"].items():
        shares = []
        for rule in RULE_LABEL:
            point = entry.get(f"rule_{rule}")
            shares.append("none" if point is None else share_text(point["reg_share"][0]))
        share = "—" if obj == plain else " / ".join(shares)
        cmp_ = entry.get("compare")
        if cmp_ is None:
            cells = ["—"] * 5
        else:
            d = cmp_["hv_diff"]
            cells = [f"{d['estimate']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]", f"{d['share_b_greater']:.2f}",
                     f"{cmp_['dominated_a_by_b']['estimate']:.2f}", f"{cmp_['dominated_b_by_a']['estimate']:.2f}",
                     front_verdict(cmp_, min_trials(fronts), perfect(fronts["objectives"][plain], entry))]  # fmt: skip
        trials = (
            f"{budget(entry)} ({entry['trials']} finished)"
            if budget(entry) != entry["trials"]
            else entry["trials"]
        )
        lines.append(f"| {name(obj)} | {trials} | {len(entry['front'])} | {cells[0]} | {cells[1]} | "
                     f"{cells[2]} | {cells[3]} | {share} | {cells[4]} |")  # fmt: skip
    return "\n".join(lines)


def rule_points(fronts: dict) -> list[tuple[str, str, int, str]]:
    """(objective, rule, trial, seed-rerun label) of every rerun point; a rule that picks the same trial
    as rule 1 is folded into it."""
    points = []
    for obj, entry in fronts["objectives"].items():
        first = entry.get("rule_nll")
        for rule in RULE_LABEL:
            point = entry.get(f"rule_{rule}")
            if point is None or (rule != "nll" and first is not None and point["trial"] == first["trial"]):
                continue
            points.append((obj, rule, int(point["trial"]), obj + RULE_SUFFIX[rule]))
    return points


def value(results: pd.DataFrame, label: str, metric: str, recal: bool) -> tuple[float, float, int] | None:
    rows = results[(results.objective == label) & (results.metric == metric) & (results.flavour == "exact")
                   & (results.recalibrator == ("post-hoc" if recal else "none"))]  # fmt: skip
    if rows.empty:
        return None
    row = rows.iloc[0]
    return float(row["mean"]), float(row["se"]), int(row["n"])


def cell(v: tuple[float, float, int] | None, metric: str) -> str:
    if v is None:
        return "—"
    mean, se, _ = v
    if metric == "acc":
        return f"{100 * mean:.2f} ± {100 * se:.2f}"
    return f"{mean:.3f} ± {se:.3f}"


def points_table(fronts: dict, results: pd.DataFrame) -> str:
    metrics = TEST_METRICS[task_of(fronts)]
    lines = ["| objective, rule (trial) | seeds | " + " | ".join(h for _, h, _ in metrics) + " |",
             "|---|---:|" + "---:|" * len(metrics)]  # fmt: skip
    folded = {obj for obj, rule, _, _ in rule_points(fronts) if rule == "calibration"}
    for obj, rule, trial, label in rule_points(fronts):
        seeds = value(results, label, metrics[0][0], False)
        rule_text = RULE_LABEL[rule] if rule == "calibration" or obj in folded else "1 = 2"
        cells = [cell(value(results, label, m, r), m) for m, _, r in metrics]
        lines.append(f"| {name(obj)}, {rule_text} (trial {trial}) | {seeds[2] if seeds else 0} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return "\n".join(lines)


def difference(a: tuple[float, float, int], b: tuple[float, float, int]) -> tuple[float, float]:
    """(b − a, the difference in combined standard errors)."""
    d = b[0] - a[0]
    se = math.hypot(a[1], b[1])
    if se > 0:
        return d, d / se
    return d, math.copysign(math.inf, d) if d else 0.0  # no spread: any difference is certain


def point_verdicts(fronts: dict, results: pd.DataFrame) -> list[str]:
    """One sentence per regularised rule point against the plain objective's point of the same rule."""
    task, plain = task_of(fronts), fronts["plain"]
    cal = CALIBRATION_METRIC[task]
    points = rule_points(fronts)
    plain_label = {rule: label for obj, rule, _, label in points if obj == plain}
    out = []
    for obj, rule, trial, label in points:
        if obj == plain:
            continue
        ref_label = plain_label.get(rule, plain_label.get("nll"))
        ref_c, got_c = value(results, ref_label, cal, False), value(results, label, cal, False)
        ref_n, got_n = value(results, ref_label, "nll", False), value(results, label, "nll", False)
        if None in (ref_c, got_c, ref_n, got_n):
            out.append(f"{name(obj)}, rule {RULE_LABEL[rule]}: not rerun yet.")
            continue
        if min(ref_c[2], got_c[2]) < FULL_SEEDS:
            out.append(f"{name(obj)}, rule {RULE_LABEL[rule]}: no verdict ({min(ref_c[2], got_c[2])} seeds).")
            continue
        _, zc = difference(ref_c, got_c)  # the QCE / ECE values themselves are printed
        dn, zn = difference(ref_n, got_n)
        verdict = (
            "improves calibration"
            if zc < -Z
            else "worsens calibration"
            if zc > Z
            else "is level on calibration"
        )
        out.append(f"{name(obj)}, rule {RULE_LABEL[rule]} (trial {trial}) {verdict} against {name(plain)}'s "
                   f"rule-{RULE_LABEL[rule] if rule in plain_label else '1'} point: test {cal.upper()} "
                   f"{ref_c[0]:.3f} → {got_c[0]:.3f} ({zc:+.1f} SE), NLL {dn:+.3f} nats ({zn:+.1f} SE).")  # fmt: skip
    return out


def summary_line(dataset: str, fronts: dict) -> str:
    plain = fronts["plain"]
    parts = [f"{name(obj)}: {front_verdict(e['compare'], min_trials(fronts), perfect(fronts['objectives'][plain], e))}" for obj, e in fronts["objectives"].items()
             if obj != plain and "compare" in e]  # fmt: skip
    return f"- **{dataset}** (validation fronts against {name(plain)}'s): " + "; ".join(parts) + "."


def blocks(folder: Path) -> dict[str, str]:
    """Every generated block of the report, from the package data in ``folder``."""
    out, summary = {}, []
    for ds_dir in sorted(p for p in folder.iterdir() if (p / layout.FRONTS_FILE).is_file()):
        fronts, results = load(ds_dir)
        ds = ds_dir.name
        out[f"pareto:{ds}:fronts"] = fronts_table(fronts)
        out[f"pareto:{ds}:test"] = (
            points_table(fronts, results)
            + "\n\n"
            + "\n".join(f"- {line}" for line in point_verdicts(fronts, results))
        )
        summary.append(summary_line(ds, fronts))
    out["pareto:summary"] = "\n".join(summary)
    return out


def section(dataset: str) -> str:
    """A new dataset's section: its figure and its two generated blocks (the analysis is written by hand)."""
    return (f"## {dataset}\n\n![validation fronts, {dataset}](fronts_{dataset}.png)\n\n"
            f"<!-- kcal.report:pareto:{dataset}:fronts -->\n<!-- /kcal.report -->\n\n"
            f"<!-- kcal.report:pareto:{dataset}:test -->\n<!-- /kcal.report -->\n")  # fmt: skip


def render(dest: Path, folder: Path) -> str:
    """``dest/README.md`` with every generated block rewritten (a section added for each new dataset)."""
    generated = blocks(folder)
    readme = dest / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8")
    else:
        text = ("# Selection on the validation calibration-sharpness front\n\n"
                "<!-- kcal.report:pareto:summary -->\n<!-- /kcal.report -->\n")  # fmt: skip
    present = {m.group("name") for m in GENERATED.finditer(text)}
    if "pareto:summary" not in present:
        text = text.rstrip("\n") + "\n\n<!-- kcal.report:pareto:summary -->\n<!-- /kcal.report -->\n"
    for key in generated:
        if key.endswith(":fronts") and key not in present:
            text = text.rstrip("\n") + "\n\n" + section(key.split(":")[1])
    return fill(text, generated)


# ---- publish and check ------------------------------------------------------------------------------
def publish(root: Path, datasets: list[str], dest: Path = DEST, folder: Path | None = None) -> list[Path]:
    from kcal.reruns.seeds import collect

    folder = folder or data_dir()
    results = collect(root)
    written = []
    for ds in datasets:
        src = layout.pareto_dir(root, ds)
        if not (src / layout.FRONTS_FILE).is_file():
            raise SystemExit(f"kcal pareto-report: {src / layout.FRONTS_FILE} not found; run "
                             f"python -m kcal.publish.questions.pareto_compare {root} {ds} first")  # fmt: skip
        target = folder / ds
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / layout.FRONTS_FILE, target / layout.FRONTS_FILE)
        results[results.dataset == ds].to_csv(layout.results_file(target), index=False)
        dest.mkdir(parents=True, exist_ok=True)
        if (src / layout.FRONTS_FIGURE).is_file():
            figure = layout.dataset_figure(dest, "fronts", ds).with_suffix(".png")
            shutil.copyfile(src / layout.FRONTS_FIGURE, figure)
            written.append(figure)
        written += [target / layout.FRONTS_FILE, layout.results_file(target)]
    (dest / "README.md").write_text(render(dest, folder), encoding="utf-8")
    return [*written, dest / "README.md"]


def check(dest: Path = DEST, folder: Path | None = None) -> list[str]:
    """Names of the generated blocks of ``dest/README.md`` that differ from what the package data makes."""
    folder = folder or data_dir()
    readme = dest / "README.md"
    if not readme.is_file():
        return ["README.md"]
    text = readme.read_text(encoding="utf-8")
    committed = {m.group("name"): m.group("body") for m in GENERATED.finditer(text)}
    fresh = {k: v + "\n" for k, v in blocks(folder).items()}
    return sorted(k for k in set(fresh) | set(committed) if committed.get(k) != fresh.get(k))


@exits_on_user_error
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kcal pareto-report", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    pub = sub.add_parser(
        "publish", help="copy a root's front comparison and seed results; rewrite the report"
    )
    pub.add_argument("root", type=Path)
    pub.add_argument("datasets", nargs="+")
    pub.add_argument("--dest", type=Path, default=DEST)
    chk = sub.add_parser("check", help="exit 1 if the report's generated blocks differ from the package data")
    chk.add_argument("--dest", type=Path, default=DEST)
    args = p.parse_args(argv)
    if args.command == "publish":
        for name in args.datasets:
            get_spec(name)  # a misspelt name: one line listing the valid ones, exit 2
        for path in publish(args.root, args.datasets, args.dest):
            print(path)
        return 0
    stale = check(args.dest)
    if stale:
        print(f"kcal pareto-report: stale blocks in {args.dest / 'README.md'}: {', '.join(stale)}; "
              f"regenerate with kcal pareto-report publish ROOT DATASET ...", file=sys.stderr)  # fmt: skip
        return 1
    print(f"{args.dest / 'README.md'}: every generated block matches the package data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
