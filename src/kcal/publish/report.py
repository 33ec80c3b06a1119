"""Publish a reproduction into the repository: ``kcal report <root> <dest>`` (``--add``: add its
datasets to those already published).

A published reproduction is two folders. Its **numbers** are package data beside the paper's own
(``kcal/resources/paper_tables.csv``), in ``kcal/resources/results/<profile>/`` (:func:`data_dir`;
``--data`` to choose another), so they ship with kcal and no data file sits among the documents:

* ``results.csv``: the reproduction's tidy results, copied from ``<root>/results.csv``;
* ``studies.csv``: per sweep study, the trials by status, the best trial, its parameters and value,
  and when the study and its seed reruns ran (read from the Optuna storage and the seed directories).

Its **report**, ``<dest>`` (e.g. ``docs/results/full``), is everything a reader opens, all derived:

* every file :func:`kcal.publish.tables.write_tables` writes from ``results.csv`` except its CSVs (LaTeX tables
  per flavour, ``comparison_{exact,official}.md``, ``claims.md``);
* ``report.json``: the profile that produced the results (stated in every caption and verdict),
  where the numbers are, relative to ``<dest>``, and the report's counts as data (:func:`report_json`: the
  claims' verdicts, the cell verdicts, the protocol's spread under the new and the old rule), and
  (``documents``, optional) the documents outside ``<dest>`` whose generated blocks the report fills too,
  relative to ``<dest>`` (the README's results summary);
* ``protocol_spread.md``: where replicates of the protocol exist, the old and the new rule's counts and every
  replicated cell (:mod:`kcal.publish.protocol_spread`);
* ``best/<dataset>__<objective>.json``: each study's best trial and its parameters;
* ``RESULTS.md`` (and any other Markdown file of ``<dest>`` that holds a generated block, e.g. ``DETAILS.md``):
  hand-written analysis around generated blocks. A generated block sits between ``<!-- kcal.report:NAME -->``
  and ``<!-- /kcal.report -->`` and is rewritten from the published data on every publish (:func:`blocks`
  lists them); the text outside the blocks is kept as it is.

**Regularisation paths** (``kcal paths``, :mod:`kcal.reruns.paths`) are published apart: ``kcal report --paths <root>
<dest>`` copies ``<root>/paths/<dataset>/<objective>.{csv,json}`` into ``<data>/paths/``, draws
``figures/tradeoff_<dataset>.png`` and fills the ``paths:*`` blocks (:mod:`kcal.publish.questions.tradeoff`).

``kcal report --check <dest>`` regenerates everything derived from the committed
``results.csv`` / ``studies.csv`` in memory and exits 1, naming the files, if anything committed differs
(the test suite runs it, so a report's numbers always equal what :mod:`kcal.publish.tables` makes of its CSV).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from kcal.core import layout
from kcal.core.errors import check_choices, exits_on_user_error
from kcal.data import dataset_names, get_spec
from kcal.publish.answer import (
    cell_classes,
    cells_table,
    claim_summaries,
    claims_table,
    dataset_line,
    first_lines,
    readme_summary,
    spread_moves,
    why_sentences,
)
from kcal.publish.claims import claims_data, evaluate_all
from kcal.publish.claims_text import claims_summary, profile_note
from kcal.publish.figures.budget_curves import draw_budget_curves
from kcal.publish.figures.tradeoff_curves import draw_tradeoff_figures
from kcal.publish.protocol_runs import runs_studies, runs_trials
from kcal.publish.protocol_spread import (
    PUBLISHED,
    claim_counts,
    claims_markdown,
    counts_data,
    replicates_of,
    spread_frame,
    spread_markdown,
    summary_markdown,
)
from kcal.publish.questions import (
    Published,
    filled_blocks,
    pruned_protocol,
    pruning_replay,
    selection_bootstrap,
    tradeoff,
    worker_count,
)
from kcal.publish.questions.tradeoff import best_points, copy_paths, path_counts, read_paths
from kcal.publish.report_tables import budget_summary, budget_table, side_by_side, studies_table
from kcal.publish.selected_kernels import kernels_markdown, selected_kernels
from kcal.publish.table_cells import FLAVOURS, comparison_frame, load_results
from kcal.publish.tables import comparison_counts, write_tables
from kcal.publish.trials import trial_rows, write_trials
from kcal.sweep.search import REG_SHARE_KEYS
from kcal.sweep.selection import selected, value_of
from kcal.sweep.studies import COUNTED_FAILURES, STATUS

GENERATED = re.compile(
    r"(<!-- kcal\.report:(?P<name>[\w:-]+) -->\n)(?P<body>.*?)(<!-- /kcal\.report -->)", re.S
)
STUDY_COLUMNS = ["dataset", "objective", "study", "complete", "failed", "not_counted", "best_trial", "best_value",
                 "best_params", *REG_SHARE_KEYS, "sweep_start", "sweep_end", "trial_hours", "seeds",
                 "seeds_end"]  # fmt: skip
"""studies.csv's columns; ``reg_share_median`` / ``reg_share_at_best``: the selected trial's regulariser share of
its loss (:func:`kcal.sweep.search.reg_share`; empty for an objective without a regulariser, or where the study
did not record it)."""


# ---- reading a reproduction root ------------------------------------------------------------------
def study_rows(root: Path, storage: str | None = None) -> pd.DataFrame:
    """One row per sweep study in the reproduction's storage (default ``<root>/sweeps.db``)."""
    import optuna
    from optuna.trial import TrialState

    url = storage or layout.sqlite_url(root)
    rows = []
    for summary in optuna.get_all_study_summaries(url, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=url)
        trials = study.get_trials(deepcopy=False)
        dataset, objective, _, selection = layout.parse_study_name(summary.study_name)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        counted_fail = [t for t in trials if t.state == TrialState.FAIL
                        and t.user_attrs.get(STATUS) in COUNTED_FAILURES]  # fmt: skip
        best = selected(study) if complete else None
        starts = [t.datetime_start for t in trials if t.datetime_start]
        ends = [t.datetime_complete for t in trials if t.datetime_complete]
        # trial hours: the budget's trials only (a re-queued trial's time spans its run's stop)
        budget = [*complete, *counted_fail, *(t for t in trials if t.state == TrialState.PRUNED)]
        seconds = sum((t.datetime_complete - t.datetime_start).total_seconds() for t in budget
                      if t.datetime_start and t.datetime_complete)  # fmt: skip
        seed_files = layout.finished_seed_files(layout.label_dir(root, dataset, objective, selection))
        seeds_end = max((layout.seed_trained_at(p) for p in seed_files), default=None)
        rows.append({
            "dataset": dataset, "objective": objective, "study": summary.study_name,
            "complete": len(complete), "failed": len(counted_fail),
            "not_counted": len(trials) - len(complete) - len(counted_fail),
            "best_trial": best.number if best else None, "best_value": value_of(best) if best else None,
            "best_params": json.dumps(best.params, sort_keys=True) if best else "",
            **{k: best.user_attrs.get(k) if best else None for k in REG_SHARE_KEYS},
            "sweep_start": _iso(min(starts)) if starts else "", "sweep_end": _iso(max(ends)) if ends else "",
            "trial_hours": round(seconds / 3600, 3), "seeds": len(seed_files),
            "seeds_end": _iso(datetime.fromtimestamp(seeds_end, tz=timezone.utc)) if seeds_end else "",
        })  # fmt: skip
    return pd.DataFrame(rows, columns=STUDY_COLUMNS).sort_values(["dataset", "objective"], ignore_index=True)


def _iso(t: datetime) -> str:
    if t.tzinfo is None:  # Optuna stores naive local times
        t = t.astimezone()
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


# ---- the report's questions -----------------------------------------------------------------------
QUESTIONS = (worker_count, pruning_replay, pruned_protocol, selection_bootstrap, tradeoff)
"""The questions (:mod:`kcal.publish.questions`) whose generated blocks the report renders (:func:`render`)."""


def draw_report_figures(data: Path, dest: Path) -> list[Path]:
    """Redraw the report's budget figures from every run's kept trials (:func:`kcal.publish.protocol_runs.runs_trials`),
    and its trade-off figures from the published regularisation paths (:mod:`kcal.publish.questions.tradeoff`)."""
    runs = runs_trials(data)
    drawn = draw_budget_curves(runs.pop(PUBLISHED), layout.figures_dir(dest), replicates=runs)
    return drawn + draw_tradeoff_figures(read_paths(data), layout.figures_dir(dest))


def publish_paths(root: Path, dest: Path, datasets: list[str] | None = None) -> list[Path]:
    """Copy the regularisation paths under ``<root>/paths/`` (``kcal paths``) into the data folder of the report in
    ``dest``, redraw its figures and regenerate it (:mod:`kcal.publish.questions.tradeoff`); returns the files
    copied."""
    _, data = report_info(dest)
    written = copy_paths(root, data, datasets)
    if not written:
        raise SystemExit(
            f"kcal report: no path under {layout.paths_dir(root, '*')}; run `kcal paths dataset=...`"
        )
    draw_report_figures(data, dest)
    render(dest, dest)
    return written


def blocks(
    results: pd.DataFrame,
    studies: pd.DataFrame,
    profile: str,
    runs: dict[str, pd.DataFrame] | None = None,
    replicates: dict[str, pd.DataFrame] | None = None,
) -> dict[str, str]:
    """The generated blocks that read the published run alone, by name (``runs``: every run's kept trials,
    :func:`kcal.publish.protocol_runs.runs_trials`; ``replicates``: the other runs' results, which enter the claims'
    verdicts); :func:`render` adds those that read the replicates and the data folder, and the questions' blocks:

    * ``profile``, ``withdrawn``: which profile produced the numbers; pairs withdrawn and not yet rerun;
    * ``answer:claims``, ``answer:cells``, ``answer:why``: the answer (:mod:`kcal.publish.answer`);
    * ``selection``: the selected MMD configurations' kernels, every run (:mod:`kcal.publish.selected_kernels`);
    * ``dataset:<name>``: the paper's cells next to ours; ``dataset:<name>:summary``: the same in a line;
    * ``claims``: each claim's verdict line (:mod:`kcal.publish.claims`); ``studies``: the sweep studies;
    * ``budget``, ``budget:summary``: the expected best validation score after k trials;
    * ``protocol``, ``protocol:moves``, ``protocol:claims``: the protocol's spread;
    * ``readme``: the README's results summary (its link depends on the document it is in);
    * the blocks of each question of :data:`QUESTIONS`, which its ``BLOCKS`` name (:mod:`kcal.publish.questions`).
    """
    out = {"profile": profile_note(profile)}
    out["claims"] = "\n".join(
        f"- {line}" for line in claims_summary(results, profile=profile, replicates=replicates)
    )
    out["studies"] = studies_table(studies)
    out["budget"] = budget_table(runs or {})
    out["budget:summary"] = budget_summary(runs or {})
    for ds in sorted(set(results["dataset"])):
        out[f"dataset:{ds}"] = side_by_side(results, ds)
    return out


def fill(text: str, generated: dict[str, str]) -> str:
    """``text`` with every generated block replaced by its new content (unknown names are emptied)."""

    def body(m: re.Match) -> str:
        return m.group(1) + generated.get(m.group("name"), "(no results)") + "\n" + m.group(4)

    return GENERATED.sub(body, text)


def template(generated: dict[str, str]) -> str:
    """A first RESULTS.md: the answer, then one section per dataset with its block; the analysis is written by
    hand."""
    parts = [
        "# Results\n",
        "<!-- kcal.report:profile -->\n<!-- /kcal.report -->\n",
        "<!-- kcal.report:withdrawn -->\n<!-- /kcal.report -->\n",
        "## The answer\n",
        "<!-- kcal.report:answer:claims -->\n<!-- /kcal.report -->\n",
        "<!-- kcal.report:answer:cells -->\n<!-- /kcal.report -->\n",
        "<!-- kcal.report:answer:why -->\n<!-- /kcal.report -->\n",
        "## Selected configurations\n",
        "<!-- kcal.report:selection -->\n<!-- /kcal.report -->\n",
        "## Studies\n",
        "<!-- kcal.report:studies -->\n<!-- /kcal.report -->\n",
        "## Search budget\n",
        "<!-- kcal.report:budget:summary -->\n<!-- /kcal.report -->\n",
        "<!-- kcal.report:budget -->\n<!-- /kcal.report -->\n",
        "## The protocol's own spread\n",
        "<!-- kcal.report:protocol -->\n<!-- /kcal.report -->\n",
        "<!-- kcal.report:protocol:moves -->\n<!-- /kcal.report -->\n",
        "<!-- kcal.report:protocol:claims -->\n<!-- /kcal.report -->\n",
        "<!-- kcal.report:protocol:estimate -->\n<!-- /kcal.report -->\n",
    ]
    for name in sorted(k for k in generated if k.startswith("dataset:") and not k.endswith(":summary")):
        parts += [
            f"## {name.split(':', 1)[1]}\n",
            f"<!-- kcal.report:{name}:summary -->\n<!-- /kcal.report -->\n",
            f"<!-- kcal.report:{name} -->\n<!-- /kcal.report -->\n",
        ]
    parts += ["## Claims\n", "<!-- kcal.report:claims -->\n<!-- /kcal.report -->\n"]
    return fill("\n".join(parts), generated)


# ---- publish and check ----------------------------------------------------------------------------
RESULTS_DOCUMENT = "RESULTS.md"
DOCUMENTS_KEY = "documents"
"""report.json's list of documents outside the report whose generated blocks it fills (relative to it)."""


def data_dir(profile: str) -> Path:
    """Where kcal keeps the published numbers of a ``profile`` reproduction (package data)."""
    return layout.published_data(profile)


def report_info(dest: Path) -> tuple[str, Path]:
    """(profile, folder of results.csv and studies.csv) of the report in ``dest``."""
    info = json.loads((dest / "report.json").read_text())
    return info["profile"], (dest / info["data"]).resolve()


def documents(dest: Path) -> tuple[list[Path], list[Path]]:
    """``(inside, outside)``: the hand-written documents whose generated blocks the report in ``dest`` fills:
    its RESULTS.md and every other Markdown file of ``dest`` that holds a block (DETAILS.md, say); and the files
    report.json names under :data:`DOCUMENTS_KEY` (paths relative to ``dest``, e.g. the README)."""
    inside = [dest / RESULTS_DOCUMENT] + [p for p in sorted(dest.glob("*.md")) if p.name != RESULTS_DOCUMENT
                                          and GENERATED.search(p.read_text(encoding="utf-8"))]  # fmt: skip
    names = json.loads((dest / "report.json").read_text()).get(DOCUMENTS_KEY, [])
    return inside, [(dest / name).resolve() for name in names]


def render(dest: Path, out: Path) -> dict[Path, str]:
    """Everything derived from ``dest``'s report.json and the CSVs it points to, written into ``out``; returns
    the filled text of the documents outside ``dest`` (:func:`documents`), which are written only when ``out``
    is ``dest``."""
    profile, data = report_info(dest)
    results = load_results(layout.results_file(data))
    studies = pd.read_csv(data / layout.STUDIES_FILE)
    others = {n: load_results(p / layout.RESULTS_FILE) for n, p in layout.replicate_data_dirs(data).items()}
    write_tables(layout.results_file(data), out, echo_claims=False, profile=profile, csv=False, studies=studies,
                 replicates=others)  # fmt: skip
    kept = runs_trials(data)
    generated = blocks(results, studies, profile, kept, others)
    generated["withdrawn"] = withdrawn_block(results, data)
    replicates = replicates_of(results, others)
    spread = spread_frame(replicates) if replicates else pd.DataFrame()
    generated["protocol"] = summary_markdown(replicates, spread)
    generated["protocol:moves"] = spread_moves(spread)
    generated["protocol:claims"] = claims_markdown(claim_counts(replicates)) if replicates else "(none yet)"
    (out / "report.json").write_text(
        json.dumps(report_json(dest, results, others, spread), indent=1, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    summaries = claim_summaries(results, others)
    classes = cell_classes(results, spread)
    kernels = selected_kernels(runs_studies(data))
    paths = path_counts(best_points(read_paths(data)))
    generated["answer:first"] = "\n".join([f"**In short** (kcal's rules, on the {results['dataset'].nunique()} datasets of "
        "the paper it ran; *exact*: the paper's definitions, *official*: the authors' code's, on the same predictions):",
        *first_lines(summaries, kernels, paths, "claims.md")])  # fmt: skip
    generated["answer:claims"] = claims_table(summaries)
    generated["answer:cells"] = cells_table(classes)
    generated["answer:why"] = why_sentences(kernels)
    generated["selection"] = kernels_markdown(kernels)
    for ds in sorted(set(results["dataset"])):
        generated[f"dataset:{ds}:summary"] = dataset_line(summaries, classes, ds)
    published = Published(data, [d for d in dataset_names() if d in set(results["dataset"])], replicates, spread,
                          kept)  # fmt: skip
    for question in QUESTIONS:
        generated.update(filled_blocks(question, published))
    if replicates:
        (out / "protocol_spread.md").write_text(
            f"# The protocol's own spread ({profile})\n\n{generated['protocol']}\n\n## Cells\n\n"
            f"{spread_markdown(spread)}\n",
            encoding="utf-8",
        )

    def filled(document: Path, fresh: str) -> str:
        link = Path(os.path.relpath(dest.resolve() / RESULTS_DOCUMENT, document.resolve().parent)).as_posix()
        text = document.read_text(encoding="utf-8") if document.is_file() else fresh
        return fill(text, {**generated, "readme": readme_summary(summaries, classes, kernels, link, paths)})

    inside, outside = documents(dest)
    for document in inside:
        (out / document.name).write_text(filled(document, template(generated)), encoding="utf-8")
    texts = {document: filled(document, "") for document in outside if document.is_file()}
    if out.resolve() == dest.resolve():
        for document, text in texts.items():
            document.write_text(text, encoding="utf-8")
    return texts


def report_json(
    dest: Path, results: pd.DataFrame, others: dict[str, pd.DataFrame], spread: pd.DataFrame
) -> dict:
    """``report.json``: the profile and where the numbers are (as :func:`publish` wrote them), and the report's
    counts as data: per claim the verdicts (:func:`kcal.publish.claims.claims_data`), per flavour the cell
    verdicts of the comparison with the paper and the protocol's spread under the new and the old rule."""
    info = json.loads((dest / "report.json").read_text())
    return {
        "profile": info["profile"], "data": info["data"],
        **({"documents": info["documents"]} if "documents" in info else {}),
        "claims": claims_data(evaluate_all(results, replicates=others)),
        "comparison": {fl: comparison_counts(comparison_frame(results, fl)) for fl in FLAVOURS},
        "protocol_spread": counts_data(spread) if not spread.empty else {},
    }  # fmt: skip


PAIR = ["dataset", "objective"]


def added(published: Path, new: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(combined, replaced)``: the published CSV's rows of (dataset, objective) pairs that ``new`` does not
    have, then ``new``'s rows; and the published rows that ``new`` replaces."""
    if not published.is_file():
        return new, new.iloc[0:0]
    old = pd.read_csv(published)
    hit = in_pairs(old, pairs_of(new))
    return pd.concat([old[~hit], new], ignore_index=True), old[hit]


def add_to(path: Path, rows: pd.DataFrame) -> Path:
    """Write :func:`added` of ``rows`` into the CSV at ``path`` (the pairs ``rows`` holds replaced, the others
    kept), sorted by (dataset, objective); returns ``path``."""
    combined, _ = added(path, rows)
    combined.sort_values(PAIR, kind="stable", ignore_index=True).to_csv(path, index=False)
    return path


def pairs_of(frame: pd.DataFrame) -> set[tuple[str, str]]:
    """The (dataset, objective) pairs that ``frame``'s rows hold."""
    return set(map(tuple, frame[PAIR].drop_duplicates().to_numpy()))


def in_pairs(frame: pd.DataFrame, pairs) -> pd.Series:
    """Which rows of ``frame`` belong to one of ``pairs``."""
    wanted = {tuple(p) for p in pairs}
    rows = zip(frame["dataset"], frame["objective"], strict=True)
    return pd.Series([pair in wanted for pair in rows], index=frame.index,
                     dtype=bool)  # fmt: skip


def keep_replaced(data: Path, name: str, replaced: dict[str, pd.DataFrame]) -> list[Path]:
    """Append rows that an ``--add`` replaces to ``<data>/experiments/<name>/<file>`` (a labelled experiment,
    kept apart from the published numbers), replacing that experiment's rows of the same pairs."""
    folder = layout.experiment_data_dir(data, name)
    written = []
    for file, rows in replaced.items():
        if rows.empty:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        written.append(add_to(folder / file, rows))
    return written


def publish(
    root: Path, dest: Path, storage: str | None = None, profile: str | None = None, data: Path | None = None,
    add: bool = False, keep: str | None = None, datasets: list[str] | None = None,
) -> list[Path]:  # fmt: skip
    """Copy ``root``'s results into ``data`` (default :func:`data_dir`) and regenerate every derived file
    in ``dest`` (``profile``: the reproduction profile, by default the root's folder name, as in
    ``outputs/reproduce/<profile>``). ``add``: keep the published datasets that ``root`` does not hold
    (a dataset run in another root, session or machine) and replace those it does; the profile and data
    folder are then, by default, those of the report already in ``dest`` (such a root is often named
    after its dataset, not its profile). What is replaced is a (dataset, objective) pair: a root that reran
    one objective replaces that objective's rows only; ``keep`` names an experiment under which the replaced
    rows are kept (:func:`keep_replaced`). Every trial of the root's studies is written as a trials table
    (:mod:`kcal.publish.trials`). ``datasets``: publish only these of the root's datasets (another one may
    still be running there). Returns the files written."""

    def only(frame: pd.DataFrame) -> pd.DataFrame:
        return frame if not datasets else frame[frame["dataset"].isin(datasets)].reset_index(drop=True)

    if add and (dest / "report.json").is_file():
        published_profile, published_data = report_info(dest)
        profile = profile or published_profile
        data = data if data is not None else published_data
    profile = profile or root.name
    data = Path(data) if data is not None else data_dir(profile)
    src = layout.results_file(root)
    if not src.is_file():
        raise SystemExit(f"kcal report: {src} not found; run the reproduction (kcal reproduce) first")
    dest.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    link = Path(os.path.relpath(data.resolve(), dest.resolve())).as_posix()
    info = {"profile": profile, "data": link}
    if (dest / "report.json").is_file():  # keep the documents outside dest that the report fills
        names = json.loads((dest / "report.json").read_text()).get(DOCUMENTS_KEY)
        info.update({DOCUMENTS_KEY: names} if names else {})
    (dest / "report.json").write_text(json.dumps(info) + "\n")
    studies = only(study_rows(root, storage))
    if add:
        results, old_results = added(layout.results_file(data), only(pd.read_csv(src)))
        results.to_csv(layout.results_file(data), index=False)
        studies, old_studies = added(data / layout.STUDIES_FILE, studies)
        studies = studies.sort_values(PAIR, ignore_index=True)
        if keep:
            keep_replaced(data, keep, {layout.RESULTS_FILE: old_results, layout.STUDIES_FILE: old_studies})
    else:
        if keep:
            raise ValueError("keep names where an add keeps the rows it replaces; it needs add=True")
        only(pd.read_csv(src)).to_csv(layout.results_file(data), index=False)
    studies.to_csv(data / layout.STUDIES_FILE, index=False)
    write_trials(only(trial_rows(root, storage)), data)
    draw_report_figures(data, dest)
    for (dataset, objective), best in layout.best_files(root).items():
        if datasets and dataset not in datasets:
            continue
        target = layout.published_best(dest, dataset, objective)
        target.parent.mkdir(exist_ok=True)
        info = json.loads(best.read_text())
        target.write_text(
            json.dumps({k: info[k] for k in ("study", "trial", "value", "params")}, indent=1) + "\n"
        )
    render(dest, dest)
    return sorted(p for folder in (data, dest) for p in folder.rglob("*") if p.is_file())


def publish_trials(root: Path, dest: Path, storage: str | None = None) -> list[Path]:
    """Write the trials of ``root``'s studies into the data folder of the report in ``dest`` (replacing those
    (dataset, objective) pairs' tables), redraw the budget figures and regenerate the report; for a study
    whose results were published before its trials were kept (its root imported from a ``kcal.orchestrate.state``
    export, say). Returns the trials tables written."""
    _, data = report_info(dest)
    written = write_trials(trial_rows(root, storage), data)
    draw_report_figures(data, dest)
    render(dest, dest)
    return written


def withdraw(dest: Path, pairs: list[tuple[str, str]], keep: str) -> list[Path]:
    """Take the published rows of ``pairs`` ((dataset, objective)) out of the report in ``dest`` and keep them as
    the experiment ``keep`` (e.g. rows trained with an objective that has since been fixed, until their rerun
    is published); their tables show them as not run, and RESULTS.md lists them (block ``withdrawn``)."""
    _, data = report_info(dest)
    out = {}
    for file in (layout.RESULTS_FILE, layout.STUDIES_FILE):
        frame = pd.read_csv(data / file)
        hit = in_pairs(frame, pairs)
        if not hit.any():
            continue
        out[file] = frame[hit]
        frame[~hit].to_csv(data / file, index=False)
    if not out:
        raise SystemExit(f"kcal report: none of {pairs} is published in {dest}")
    written = keep_replaced(data, keep, out)
    for dataset, objective in pairs:
        layout.published_best(dest, dataset, objective).unlink(missing_ok=True)
    render(dest, dest)
    return written


def withdrawn_block(results: pd.DataFrame, data: Path) -> str:
    """The (dataset, objective) pairs kept under ``<data>/experiments/*`` that the published results lack."""
    published = pairs_of(results)
    lines = []
    for folder in sorted(layout.experiment_data_dirs(data)):
        missing = sorted(pairs_of(pd.read_csv(layout.results_file(folder))) - published)
        if missing:
            pairs = ", ".join(f"{d} / {o}" for d, o in missing)
            lines.append(f"- not yet rerun: {pairs} (their former rows: `experiments/{folder.name}/`); their "
                         "cells show as not run, and the claims count only the datasets that have them")  # fmt: skip
    return "\n".join(lines) if lines else "(none)"


def publish_replicate(root: Path, dest: Path, name: str, storage: str | None = None) -> list[Path]:
    """Publish ``root`` (a rerun of the whole protocol on some datasets, with another ``sweep.sampler_seed``) as
    the replicate ``name`` of the report in ``dest``: its results, studies and trials go to
    ``<data>/replicates/<name>/`` (the published numbers stay as they are), and the report is regenerated
    with the protocol's spread (:mod:`kcal.publish.protocol_spread`). A replicate may be run in several roots
    (one dataset at a time, say): each root's (dataset, objective) pairs replace only the same pairs of what
    ``name`` already holds, as :func:`publish` ``add=True`` does."""
    _, data = report_info(dest)
    src = layout.results_file(root)
    if not src.is_file():
        raise SystemExit(f"kcal report: {src} not found; run the replicate (kcal reproduce) first")
    folder = layout.replicate_data_dir(data, name)
    folder.mkdir(parents=True, exist_ok=True)
    add_to(folder / layout.RESULTS_FILE, pd.read_csv(src))
    add_to(folder / layout.STUDIES_FILE, study_rows(root, storage))
    written = write_trials(trial_rows(root, storage), folder)
    draw_report_figures(data, dest)
    render(dest, dest)
    return [folder / layout.RESULTS_FILE, folder / layout.STUDIES_FILE, *written]


def check(dest: Path) -> list[str]:
    """Names of committed files that differ from what their CSVs regenerate (empty: all equal); a document outside
    ``dest`` (:func:`documents`) is named by its path relative to ``dest``."""
    with tempfile.TemporaryDirectory() as tmp:
        outside = render(dest, Path(tmp))
        stale = [p.name for p in sorted(Path(tmp).iterdir())
                 if not (dest / p.name).is_file() or (dest / p.name).read_bytes() != p.read_bytes()]  # fmt: skip
    return stale + [Path(os.path.relpath(p, dest.resolve())).as_posix() for p, text in outside.items()
                    if p.read_text(encoding="utf-8") != text]  # fmt: skip


@exits_on_user_error
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kcal report", description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument(
        "root",
        type=Path,
        nargs="?",
        help="reproduction root, e.g. outputs/reproduce/full (left out: regenerate dest from its published "
        "CSVs, as after a change to the report's code)",
    )
    p.add_argument("dest", type=Path, help="where the report lives, e.g. docs/results/full")
    p.add_argument("--storage", help="Optuna storage URL (default: sqlite:///<root>/sweeps.db)")
    p.add_argument("--profile", help="the reproduction's profile (default: with --add, the one of the "
                   "report in dest; otherwise the root's folder name)")  # fmt: skip
    p.add_argument("--data", type=Path, help="where results.csv and studies.csv go (default: with "
                   "--add, the report's own; otherwise kcal/resources/results/<profile>)")  # fmt: skip
    p.add_argument("--check", action="store_true", help="only check that dest's files match its CSVs")
    p.add_argument(
        "--replicate",
        metavar="NAME",
        help="publish root as the protocol replicate NAME (e.g. "
        "sampler_seed=1) of the report in dest: its numbers stay apart, the protocol's spread is added",
    )
    p.add_argument("--paths", action="store_true", help="only copy the regularisation paths of root (kcal paths) "
                   "into the report's data folder, redraw its figures and regenerate the report")  # fmt: skip
    p.add_argument("--trials", action="store_true", help="only write the trials of root's studies into the "
                   "report's data folder, redraw the budget figures and regenerate the report")  # fmt: skip
    p.add_argument(
        "--add",
        action="store_true",
        help="add root's datasets to those already published "
        "(replacing the same (dataset, objective) pairs), instead of publishing root alone",
    )
    p.add_argument("--datasets", nargs="+", metavar="DATASET", help="publish only these datasets of root")
    p.add_argument(
        "--withdraw",
        nargs="+",
        metavar="DATASET/OBJECTIVE",
        help="take these published pairs "
        "out of dest (kept as the experiment --keep NAME) until their rerun is published",
    )
    p.add_argument("--keep", metavar="NAME", help="with --add: keep the rows it replaces as the experiment NAME "
                   "(<data>/experiments/NAME/results.csv, studies.csv)")  # fmt: skip
    args = p.parse_args(argv)
    for name in args.datasets or []:
        get_spec(name)  # a misspelt name: one line listing the valid ones, exit 2
    if args.check:
        stale = check(args.dest)
        if stale:
            print(f"kcal report: {', '.join(stale)} in {args.dest} differ from what its results.csv/studies.csv "
                  f"give; run `kcal report {args.dest}` to regenerate them", file=sys.stderr)  # fmt: skip
            return 1
        print(f"kcal report: {args.dest} matches its results.csv and studies.csv")
        return 0
    if args.withdraw:
        if not args.keep:
            p.error("--withdraw keeps the rows it takes out as an experiment: give --keep NAME")
        pairs = [tuple(w.split("/", 1)) for w in args.withdraw]
        if any(len(pair) != 2 for pair in pairs):
            p.error("--withdraw takes DATASET/OBJECTIVE pairs, e.g. adult/xe_kde")
        for dataset, objective in pairs:
            get_spec(dataset)
            check_choices("objective", [objective])
        for path in withdraw(args.dest, pairs, args.keep):
            print(path)
        return 0
    if args.root is None:
        if args.replicate or args.trials or args.paths or args.add or args.keep or args.datasets:
            p.error("give the reproduction root to publish from (dest alone only regenerates its files)")
        draw_report_figures(report_info(args.dest)[1], args.dest)
        render(args.dest, args.dest)
        print(f"kcal report: regenerated {args.dest} and its figures from its published CSVs")
        return 0
    if args.replicate:
        for path in publish_replicate(args.root, args.dest, args.replicate, args.storage):
            print(path)
        return 0
    if args.paths:
        for path in publish_paths(args.root, args.dest, args.datasets):
            print(path)
        return 0
    if args.trials:
        for path in publish_trials(args.root, args.dest, args.storage):
            print(path)
        return 0
    if args.keep and not args.add:
        p.error("--keep keeps the rows that an --add replaces; add --add")
    files = publish(args.root, args.dest, args.storage, args.profile, args.data, add=args.add, keep=args.keep,
                    datasets=args.datasets)  # fmt: skip
    print(f"kcal report: {len(files)} files in {args.dest} and its data folder; edit the analysis in {args.dest / 'RESULTS.md'} "
          "outside the generated blocks")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
