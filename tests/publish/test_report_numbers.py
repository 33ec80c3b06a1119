"""No hand-typed number goes stale or goes to the wrong cell: every number in the prose of the published report is
a number of the cell its sentence names, every SE multiple is recomputed from the cells its sentence compares, and
no prose outside the generated blocks states a claim's current verdict.

What is checked: the prose of ``docs/results/full/RESULTS.md``, of DETAILS.md (its hand-written tables too) and
of the README's results summary (its section *What reproduces*), outside their generated blocks (``<!-- kcal.report:NAME -->`` .. ``<!-- /kcal.report -->``, which
``kcal report --check`` checks), fenced code blocks, inline code spans, HTML comments and link targets. The claims'
verdicts are checked in RESULTS.md, DETAILS.md and HISTORY.md (where a past verdict may stand, marked as past).
HISTORY.md's numbers are those of earlier runs, so no data of today's holds them.

**What counts as a number** (prose_cells.py): digits with an optional decimal part and exponent (``0.0127``,
``1.2e-5``, ``13,611``), optionally followed by ``%``, compared by magnitude; digits glued to a letter are a name
(``R1``, ``C4a``, ``7d54acb``) except a trailing ``x``/``×`` (``8.8x``); a count written as a word (``two`` to
``twelve``); not numbers: ISO dates, clock times, references to the paper's parts (``Table 3``: its name still
counts as the table a sentence names). Kinds: a *trial number* (after ``trial``), an *SE multiple* (before ``SE``,
``combined SE``, ...), a *λ* (after ``λ =``), a *difference* (after ``by`` or ``+``, before ``points``), a
*percentage* (an accuracy in %), a *count* (no decimal point), else a *value*.

**Its cell** (prose_cells.py): the dataset, row (objective), metric, flavour, recalibration, paper table and λ its
sentence names for it, nearest first (the rules per dimension: prose_cells.py); a dimension its sentence does not
name falls back to its headings' or paragraph's names where prose_cells.py says so, else holds every value.

**What it must match** (published_cells.py):

* a value or percentage: the mean or SE of a cell of its cell's scope (``results.csv``, the paper's tables; where
  its paragraph or headings say so, the replicates', experiments', ablations' and paths' cells), to its printed
  digits; else a value that is no cell's: a selected trial's parameters (``studies.csv``), a dataset's facts, the
  trials tables (where it says ``trial``: a trial's value, a study's median, how many trials lie below or above a
  cell), a dataset's split sizes (one test row in points), the Pareto fronts, or a number of a generated document (``claims.md``,
  ``report.json``, ``comparison_*.md``, the ``.tex`` tables) on a line that names each dimension it names;
* an SE multiple: recomputed from two cells its sentence compares: the cell of the nearest value before it (else
  after it) in its sentence, against another cell its sentence prints, or that cell's counterpart (the paper's, or
  another file's same cell, or the same objective at another λ or recalibration); over the combined SE
  ``sqrt(se1^2 + se2^2)`` where it says *combined*, else over the combined SE or either SE; where its sentence
  prints no value, a pair of its cell's scope, both of the rows its sentence names where it names two or more;
* a difference: the difference of a pair of its cell's scope (accuracy in points too), or a value as above;
* a λ: a weight of a path, an ablation or a selected trial of its dataset;
* a count: an integer of that data (seeds, the datasets' sizes and split sizes, an accuracy difference in test
  rows, Table 6's sample sizes and their pairs, a study's trial counts
  where it says ``trial``, ...), or an allowed constant (:data:`ALLOWED`); a trial number: a selected or kept trial.

**Unpublished measurements** (prose_cells.UNPUBLISHED): a number of a sentence that names a source outside the
published data (a seed's ``history.csv``, a trial's ``metrics.json``, a benchmark's output, a run's own root), or of
a table column whose header names such a quantity, is that measurement and is not matched (its SE multiples still
are recomputed); every source must be named by some sentence.

**Allowed constants** (:data:`ALLOWED`, each with its reason): conventions of the protocol and the paper that no
data file holds as a value. Every entry must be used (an unused one is removed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from .prose_cells import UNPUBLISHED, UNPUBLISHED_COLUMNS, Number, claim_verdicts, prose_numbers
from .published_cells import ANY, Published, cell_ids, near, pair_rows, published_data

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "docs" / "results" / "full"
README_SECTION = "## What reproduces"

ALLOWED: dict[float, str] = {
    2: "the verdicts' multiple (within 2 SE)",
    8: "the authors' evaluation batches of 8 test rows (their per-batch ECE and DCE)",
    10: "the x-bandwidth of the authors' KCE kernel for XE + MMD (their configs)",
    1: "the y-bandwidth of the authors' KCE kernel for XE, XE + MMCE and XE + ECE-KDE (their configs)",
}
"""Constants a sentence may use without a data file holding them, each with its reason."""


# ---- the checker ---------------------------------------------------------------------------------------------
def loose_values(number: Number, data: Published, metrics: frozenset | None = None) -> bool:
    """Whether ``number`` is a value of no cell (module docstring)."""
    pools = [data.values, data.generated, *(data.extra[c] for c in number.contexts if c in data.extra)]
    if number.kind == "percent":
        pools = [p for p in pools if p is not data.extra["trials"]]
    return any(near(values, number.value, number.tolerance) for pool in pools
               for values in pool.scoped(number, metrics))  # fmt: skip


def multiples(pairs: pd.DataFrame, combined: bool) -> list[float]:
    columns = ["combined"] if combined else ["combined", "over_a", "over_b"]
    values = pairs[columns].to_numpy(dtype=float).ravel()
    return sorted(values[np.isfinite(values)])


def differences(pairs: pd.DataFrame) -> list[float]:
    acc = pairs["metric"].eq("acc").to_numpy()
    d = pairs["diff"].to_numpy(dtype=float)
    return sorted(v for v in [*d, *(100 * d[acc])] if np.isfinite(v))


def compared_pairs(
    anchor: np.ndarray, printed: set[int], pairs: pd.DataFrame, in_range: bool
) -> pd.DataFrame:
    """The pairs an SE multiple may be of: the anchor cell against another cell printed on the anchor's side of
    it in its sentence (any two of them for a range, ``1.2–1.8 combined SE``); where there is none, the anchor
    against its counterpart (module docstring)."""
    a, b = pairs["cid_a"].isin(anchor).to_numpy(), pairs["cid_b"].isin(anchor).to_numpy()
    pa, pb = pairs["cid_a"].isin(printed).to_numpy(), pairs["cid_b"].isin(printed).to_numpy()
    if printed - set(anchor.tolist()):
        return pairs[(a & pb) | (b & pa) | ((pa & pb) if in_range else False)]
    counterpart = (
        pairs["kind"].ne("within").to_numpy() | pairs["objective_a"].eq(pairs["objective_b"]).to_numpy()
    )
    return pairs[(a | b) & counterpart]


def named_pairs(pairs: pd.DataFrame, rows: frozenset[str]) -> pd.DataFrame:
    """The pairs whose two cells are both of ``rows`` (where a sentence names two or more), else ``pairs``."""
    if len(rows) < 2:
        return pairs
    named = [*rows, ANY]
    return pairs[pairs["row_a"].isin(named) & pairs["row_b"].isin(named)]


def opened(se: Number, value: Number) -> bool:
    """Whether ``value`` stands in the parenthesis that opens right after ``se`` (``by 4.1 combined SE (0.941
    against 1.045)``): a value after an SE multiple anchors it only there."""
    marks = [p for p in se.opens if se.position < p < value.position]
    return len(marks) == 1


def check(numbers: list[Number], data: Published) -> list[tuple[Number, str]]:
    """The numbers that are not their cell's, each with why (module docstring)."""
    failed = []
    by_sentence: dict[int, list[tuple[Number, np.ndarray | pd.DataFrame]]] = {}
    for number in numbers:
        seen = by_sentence.setdefault(number.sentence, [])
        why, match = why_not(number, data), None
        if not why and number.kind in ("value", "percent"):
            match = cell_ids(number, data.cells, frozenset({"acc"}) if number.kind == "percent" else None)
        elif not why and number.kind == "diff":
            match = pair_rows(number, data.pairs)
            d, slack = match["diff"].to_numpy(dtype=float), number.tolerance + 1e-9 * max(1.0, number.value)
            scale = np.where(match["metric"].eq("acc"), 100.0, 1.0)
            match = match[(np.abs(d - number.value) <= slack) | (np.abs(d * scale - number.value) <= slack)]
        seen.append((number, match))
        if why and not number.sources:  # a number of an unpublished measurement its sentence names
            failed.append((number, why))
    for entries in by_sentence.values():
        for k, (number, _) in enumerate(entries):
            if number.kind != "se" or number.se == "bound":
                continue
            before = [m for _, m in reversed(entries[:k]) if m is not None and len(m)]
            after = [m for n, m in entries[k + 1 :] if m is not None and len(m) and opened(number, n)]
            anchor = (before or after or [None])[0]
            printed = {int(i) for m in (before or after) if isinstance(m, np.ndarray) for i in m}
            if anchor is None:  # no value printed: a pair of the rows its sentence names
                pairs = named_pairs(pair_rows(number, data.pairs), number.sentence_rows)
            elif isinstance(anchor, pd.DataFrame):
                pairs = anchor
            else:
                pairs = compared_pairs(anchor, printed, data.pairs, number.in_range)
            if not near(multiples(pairs, number.se == "combined"), number.value, number.tolerance):
                if anchor is not None or not loose_values(number, data):
                    what = "the cells it compares" if anchor is not None else "any pair of its scope"
                    failed.append((number, f"no SE multiple of {what} ({len(pairs)} pairs)"))
    return failed


def why_not(number: Number, data: Published) -> str:
    """Why ``number`` (not an SE multiple) is not its cell's; empty where it is."""
    scopes = (number.datasets or set(data.counts) | set(data.trials)) | {ANY}
    if number.kind == "trial":
        return "" if any(int(number.value) in data.trials.get(d, set()) for d in scopes) else "no such trial"
    if number.kind == "count":
        pools = [data.counts, *(data.extra_counts[c] for c in number.contexts if c in data.extra_counts)]
        found = number.value in ALLOWED or any(
            int(number.value) in p.get(d, set()) for p in pools for d in scopes
        )
        return "" if found else "no such count"
    if number.kind == "lambda":
        lams = sorted({v for d in scopes for v in data.lams.get(d, set())})
        return "" if near(lams, number.value, number.tolerance) else "no such λ"
    if number.kind == "se":
        return ""
    metrics = frozenset({"acc"}) if number.kind == "percent" else None
    if number.kind == "value" and number.value in ALLOWED:
        return ""
    if len(cell_ids(number, data.cells, metrics)) or loose_values(number, data, metrics):
        return ""
    if number.kind == "diff":
        pairs = pair_rows(number, data.pairs)
        return (
            "" if near(differences(pairs), number.value, number.tolerance) else "no difference of its scope"
        )
    return "no cell of its scope holds it"


def wrong(text: str, data: Published, cells_only: bool = False) -> list[tuple[Number, str]]:
    """The numbers of ``text``'s prose that are not their cell's (``cells_only``: the SE multiples only, recomputed
    from the values their sentences print)."""
    numbers = prose_numbers(text, data.datasets)
    if cells_only:
        numbers = [n for n in numbers if n.kind == "se"]
    return check(numbers, data)


def readme_summary_text() -> str:
    """The README's section :data:`README_SECTION`, up to the next heading."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert README_SECTION in text, f"README.md has no section {README_SECTION!r}"
    return README_SECTION + text.split(README_SECTION, 1)[1].split("\n## ", 1)[0]


def report_failure(failed: list[tuple[Number, str]]) -> str:
    def names(n: Number) -> str:
        cell = {d: sorted(v) for d, v in n.named().items() if v}
        return ", ".join(f"{d} {v}" for d, v in cell.items()) or "no cell named"

    lines = [f"  {n.text!r} ({n.kind}; {names(n)}): {why}; in: {n.where[:150]}" for n, why in failed]
    return ("numbers that are not the numbers of the cell their sentence names (correct each to the data, or "
            "replace it by a generated block):\n" + "\n".join(lines))  # fmt: skip


@pytest.fixture(scope="module")
def data() -> Published:
    return published_data(REPORT)


# ---- the tests -----------------------------------------------------------------------------------------------
def test_every_number_of_results_md_is_its_cell_s(data):
    failed = wrong((REPORT / "RESULTS.md").read_text(encoding="utf-8"), data)
    assert not failed, report_failure(failed)


def test_every_number_of_details_md_is_its_cell_s(data):
    failed = wrong((REPORT / "DETAILS.md").read_text(encoding="utf-8"), data)
    assert not failed, report_failure(failed)


def test_every_unpublished_source_is_used_and_says_why():
    """Each source outside the published data that a sentence may name for its numbers is named by some sentence of
    DETAILS.md (an unused one is removed), with its reason."""
    text = (REPORT / "DETAILS.md").read_text(encoding="utf-8")
    used = {s for n in prose_numbers(text, ()) for s in n.sources}
    for table in (UNPUBLISHED, UNPUBLISHED_COLUMNS):
        assert all(reason.strip() for _, reason in table.values())
        assert set(table) <= used, f"unpublished sources no sentence names: {sorted(set(table) - used)}"


def test_the_readme_results_summary_has_no_number_outside_the_data(data):
    failed = wrong(readme_summary_text(), data)
    assert not failed, report_failure(failed)


@pytest.mark.parametrize("name", ["RESULTS.md", "DETAILS.md", "HISTORY.md"])
def test_no_prose_states_a_claim_s_current_verdict(name):
    """The rules give the claims' verdicts (claims.md, the generated blocks); prose names the evidence only, and
    HISTORY.md may keep a past verdict marked as past."""
    found = claim_verdicts((REPORT / name).read_text(encoding="utf-8"), dated_allowed=name == "HISTORY.md")
    assert not found, "prose that states a claim's verdict (refer to claims.md instead):\n" + "\n".join(
        f"  {s[:200]}" for s in found
    )


def test_every_allowed_constant_is_used_and_says_why():
    texts = [(REPORT / name).read_text(encoding="utf-8") for name in ("RESULTS.md", "DETAILS.md")]
    texts.append(readme_summary_text())
    used = {n.value for text in texts for n in prose_numbers(text, ()) if n.kind in ("count", "value")}
    assert all(reason.strip() for reason in ALLOWED.values())
    assert set(ALLOWED) <= used, f"allowed constants no document uses: {sorted(set(ALLOWED) - used)}"


# ---- the checker bites: small frames, planted numbers ----------------------------------------------------------
def tiny_data() -> Published:
    """Three cells of ours and one of the paper's (accuracy, exact flavour)."""
    from .prose_cells import CONTEXTS
    from .published_cells import CELL_COLUMNS, Pool, pairs_of

    def cell(file, dataset, row, mean, se, flavour="exact"):
        return {"file": file, "context": "", "dataset": dataset, "row": row, "objective": row, "recal": "none",
                "flavour": flavour, "metric": "acc", "tables": "|classification|", "lam": np.nan, "samples": "",
                "mean": mean, "se": se}  # fmt: skip

    cells = pd.DataFrame([cell("results", "heart-disease", "xe", 0.56885, 0.0060),
                          cell("results", "heart-disease", "xe_mmd", 0.57213, 0.0070),
                          cell("results", "dry-bean", "xe", 0.92870, 0.0004),
                          cell("paper", "heart-disease", "xe", 0.55904, 0.0200, flavour=ANY)])[CELL_COLUMNS]  # fmt: skip
    empty = {name: Pool().freeze() for name in CONTEXTS}
    return Published(cells, pairs_of(cells), Pool().freeze(), Pool(strict=True).freeze(), empty, {}, {}, {}, {},
                     ("dry-bean", "heart-disease"))  # fmt: skip


def flagged(text: str, data: Published) -> list[str]:
    return [n.text for n, _ in wrong(text, data)]


def test_the_cell_s_own_numbers_and_se_multiple_pass():
    # (0.56885 - 0.55904) / sqrt(0.0060^2 + 0.0200^2) = 0.47
    text = "On heart-disease, XE's accuracy is 56.885 % against the paper's 55.904 % (0.5 combined SE)."
    assert flagged(text, tiny_data()) == []


def test_a_planted_number_of_another_row_fails():
    """57.213 % is XE + MMD's accuracy on heart-disease, not XE's."""
    assert flagged("On heart-disease, XE's accuracy is 57.213 %.", tiny_data()) == ["57.213 %"]
    assert flagged("On heart-disease, XE + MMD's accuracy is 57.213 %.", tiny_data()) == []


def test_a_planted_number_of_another_dataset_fails():
    """56.885 % is heart-disease's XE accuracy, not dry-bean's."""
    assert flagged("On dry-bean, XE's accuracy is 56.885 %.", tiny_data()) == ["56.885 %"]
    assert flagged("## dry-bean\n\nXE's accuracy is 56.885 %.", tiny_data()) == ["56.885 %"]


def test_the_nearest_row_before_a_number_is_its_row():
    text = "On heart-disease, the accuracy of XE (56.885 against 55.904) and XE + MMD (57.213)."
    assert flagged(text, tiny_data()) == []
    swapped = "On heart-disease, the accuracy of XE (57.213 against 55.904) and XE + MMD (56.885)."
    assert flagged(swapped, tiny_data()) == ["57.213", "56.885"]


def test_a_planted_se_multiple_fails():
    """The two cells the sentence compares are 0.47 combined SE apart; 1.5 is no pair's multiple."""
    text = "On heart-disease, XE's accuracy is 56.885 % against the paper's 55.904 % (1.5 combined SE)."
    assert flagged(text, tiny_data()) == ["1.5"]
    # XE against XE + MMD: (0.57213 - 0.56885) / sqrt(0.0060^2 + 0.0070^2) = 0.36
    rows = "On heart-disease, XE + MMD's accuracy is 57.213 % against XE's 56.885 % (0.4 combined SE)."
    assert flagged(rows, tiny_data()) == []
    assert flagged(rows.replace("0.4 combined", "0.47 combined"), tiny_data()) == ["0.47"]


def test_a_planted_wrong_cell_number_in_a_results_paragraph_fails(data):
    """RESULTS.md's heart-disease accuracy bullet passes; with XE + MMD's accuracy replaced by XE + ECE-KDE's
    (58.656, a number of the data, of another row) it fails on that number alone."""
    text = (REPORT / "RESULTS.md").read_text(encoding="utf-8")
    start = text.index("* **Accuracy (XE 56.885 against 55.904")
    bullet = "## heart-disease\n\n" + text[start : text.index("\n* ", start + 1)]
    assert [n.text for n, _ in wrong(bullet, data)] == []
    planted = bullet.replace("XE + MMD 57.213", "XE + MMD 58.656")
    assert planted != bullet
    assert [n.text for n, _ in wrong(planted, data)] == ["58.656"]


def test_a_planted_wrong_cell_number_in_a_details_paragraph_fails(data):
    """DETAILS.md's median_x table and the sentence under it pass; with the table's XE + MMD NLL replaced by XE's
    (1.426, a number of that table, of another row) it fails on that number, and with the sentence's 4.3 combined SE
    replaced by 3.3 it fails on that multiple."""
    text = (REPORT / "DETAILS.md").read_text(encoding="utf-8")
    start = text.index("| breast-cancer | accuracy (%) |")
    part = (
        "## crime\n\n### Controlled experiment (crime and breast-cancer)\n\n"
        + text[start : text.index("\n\n", text.index("With its kernel on", start))]
    )
    assert [n.text for n, _ in wrong(part, data)] == []
    planted = part.replace(
        "| 94.56 ± 0.18 | 0.0534 ± 0.0018 | 0.0044 ± 0.0013 | 1.134 ± 0.052 |",
        "| 94.56 ± 0.18 | 0.0534 ± 0.0018 | 0.0044 ± 0.0013 | 1.426 ± 0.052 |",
    )
    assert planted != part
    assert [n.text for n, _ in wrong(planted, data)] == ["1.426"]
    se = part.replace("1.426, 4.3 combined SE", "1.426, 3.3 combined SE")
    assert se != part and [n.text for n, _ in wrong(se, data)] == ["3.3"]


def test_a_planted_se_multiple_in_a_results_sentence_fails(data):
    text = (REPORT / "RESULTS.md").read_text(encoding="utf-8")
    start = text.index("* **NLL + MMD beats NLL in NLL by 4.1 combined SE**")
    bullet = "## blog\n\n" + text[start : text.index("\n* ", start + 1)]
    assert [n.text for n, _ in wrong(bullet, data)] == []
    assert [n.text for n, _ in wrong(bullet.replace("by 4.1 combined", "by 3.1 combined"), data)] == ["3.1"]


def test_a_claim_s_verdict_in_prose_is_found():
    assert claim_verdicts("On adult C3 holds in both flavours.") == ["On adult C3 holds in both flavours."]
    assert claim_verdicts("C4a is not reproduced: the paper's effect excluded.") != []
    assert claim_verdicts("XE + MMD's entropy is the lowest (C3; its verdict: claims.md).") == []
    past = "By the rule of then C3 held on adult."
    assert claim_verdicts(past) != [] and claim_verdicts(past, dated_allowed=True) == []


def test_what_counts_as_a_number():
    text = "\n".join([
        "# Heading with Table 3 and §6.2",
        "<!-- kcal.report:x -->",
        "0.123 inside a block",
        "<!-- /kcal.report -->",
        "R1 and C4a and float32 and k_Y and `0.456` and [link](figures/a_1.png), on 2026-11-26 at 12:43 UTC.",
        "```",
        "0.789",
        "```",
        "Accuracy 58.66 %, ECE −0.0127, 1.2e-5, 13,611 rows, 8.8x, by 0.34 points, 1.2–1.7 combined SE, trial 84, "
        "λ = 300, seeds 0-9; the four classification datasets of XE + MMD in Tables 3, 6 and 7.",
    ])  # fmt: skip
    numbers = prose_numbers(text, ["adult"])
    kinds = {n.text: n.kind for n in numbers}
    assert kinds == {"58.66 %": "percent", "0.0127": "value", "1.2e-5": "value", "13,611": "count", "8.8": "value",
                     "0.34": "diff", "1.2": "se", "1.7": "se", "84": "trial", "300": "lambda", "four": "count"}  # fmt: skip
    assert next(n for n in numbers if n.text == "1.2e-5").tolerance == pytest.approx(5e-7)
    assert next(n for n in numbers if n.text == "1.7").se == "combined"
    four = next(n for n in numbers if n.text == "four")
    assert (
        not four.rows
        and not four.datasets
        and four.tables == {"regression", "sample_size", "decision_kernel"}
    )
    assert next(n for n in numbers if n.text == "1.2").in_range
