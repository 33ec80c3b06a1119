"""kcal.publish.tables: paper-style LaTeX tables, paper comparisons and claim verdicts from a tidy results CSV."""

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kcal.data.registry import get_spec
from kcal.publish import claims as C
from kcal.publish import claims_text as CT
from kcal.publish import table_cells as TC
from kcal.publish import tables as T

# --------------------------------------------------------------------------------------------------
# A LaTeX well-formedness checker (independent of kcal.publish.tables)

_RULE = re.compile(r"\\(toprule|midrule|bottomrule|hline|cmidrule(\([^)]*\))?\{[^}]*\})")


def _braces_balanced(tex: str) -> bool:
    depth, i = 0, 0
    while i < len(tex):
        ch = tex[i]
        if ch == "\\":  # \{ \} \\ and command names: skip the escaped character
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                return False
        i += 1
    return depth == 0


def _envs_balanced(tex: str) -> bool:
    stack = []
    for kind, name in re.findall(r"\\(begin|end)\{([^}]*)\}", tex):
        if kind == "begin":
            stack.append(name)
        elif not stack or stack.pop() != name:
            return False
    return not stack


def _group_end(tex: str, i: int) -> int:
    """Index just past the brace group opening at ``tex[i] == '{'``."""
    assert tex[i] == "{", tex[i : i + 20]
    depth = 0
    while True:
        if tex[i] == "\\":
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(tex[i], 0)
        i += 1
        if depth == 0:
            return i


def _spec_columns(spec: str) -> int:
    n, i = 0, 0
    while i < len(spec):
        ch = spec[i]
        if ch in "@!><":
            i = _group_end(spec, i + 1)
        elif ch in "pmb":
            n, i = n + 1, _group_end(spec, i + 1)
        elif ch == "*":
            j = _group_end(spec, i + 1)
            k = _group_end(spec, j)
            n, i = n + int(spec[i + 2 : j - 1]) * _spec_columns(spec[j + 1 : k - 1]), k
        elif ch in "lcrX":
            n, i = n + 1, i + 1
        else:  # '|' and whitespace
            i += 1
    return n


def _tabulars(tex: str, blank_nested: bool = True) -> list[tuple[str, str]]:
    """(spec, body) of every tabular, nested ones included; a nested tabular is blanked out of its
    parent's body (it is one cell there), or with ``blank_nested=False`` kept but wrapped in braces
    so that its row breaks are not taken for the parent's."""
    tokens = [(m.start(), m.end(), m.group(1)) for m in re.finditer(r"\\(begin|end)\{tabular\}", tex)]
    stack, pairs = [], []
    for start, end, kind in tokens:
        if kind == "begin":
            stack.append((start, end))
        else:
            b_start, b_end = stack.pop()
            pairs.append((b_start, b_end, start, end))
    assert not stack
    out = []
    for _b_start, b_end, e_start, _e_end in pairs:
        i = b_end
        if tex[i] == "[":
            i = tex.index("]", i) + 1
        j = _group_end(tex, i)
        spec = tex[i + 1 : j - 1]
        body = tex[j:e_start]
        children = [p for p in pairs if b_end < p[0] and p[3] <= e_start]
        outermost = [c for c in children if not any(o[0] < c[0] and c[3] <= o[3] for o in children)]
        for c_start, _, _, c_end in sorted(outermost, reverse=True):
            lo, hi = c_start - j, c_end - j
            body = body[:lo] + ("NESTED" if blank_nested else "{" + body[lo:hi] + "}") + body[hi:]
        out.append((spec, body))
    return out


def _split_depth0(body: str) -> list[list[str]]:
    """Rows (split on depth-0 ``\\\\``) of cells (split on depth-0 unescaped ``&``); the last element
    is the text after the final row break."""
    rows, cells, cur, depth, i = [], [], [], 0, 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            if depth == 0 and body[i + 1 : i + 2] == "\\":
                cells.append("".join(cur))
                rows.append(cells)
                cells, cur = [], []
            else:
                cur.append(body[i : i + 2])
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "&" and depth == 0:
            cells.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    cells.append("".join(cur))
    rows.append(cells)
    return rows


def _cell_span(cell: str) -> int:
    m = re.match(r"\s*\\multicolumn\{(\d+)\}", cell)
    return int(m.group(1)) if m else 1


def check_latex(tex: str) -> list[str]:
    """Problems found: unbalanced braces/environments, tabular rows with the wrong column count."""
    tex = re.sub(r"(?<!\\)%.*", "", tex)
    problems = []
    if not _braces_balanced(tex):
        problems.append("unbalanced braces")
    if not _envs_balanced(tex):
        return [*problems, "unbalanced begin/end"]
    for spec, body in _tabulars(tex):
        ncol = _spec_columns(spec)
        *rows, tail = _split_depth0(body)
        if len(tail) > 1 or _RULE.sub("", tail[0]).strip():  # a last row without a closing \\
            rows.append(tail)
        for cells in rows:
            if sum(_cell_span(c) for c in cells) != ncol:
                problems.append(f"row with {len(cells)} cells in {{{spec}}} ({ncol} columns): {cells!r}")
    return problems


def test_checker_catches_malformed_latex():
    good = "\\begin{tabular}{@{}l|cc@{}}\\toprule a & \\multicolumn{2}{c}{b} \\\\ \\# x & y\\&z & {1 & 2} \\\\\n\\bottomrule\\end{tabular}"
    assert check_latex(good) == []
    assert check_latex(good.replace("y\\&z & ", "y\\&z ")) != []  # 2 cells in a 3-column tabular
    assert "unbalanced braces" in check_latex(good.replace("{b}", "{b"))
    assert "unbalanced begin/end" in check_latex(good.replace("\\end{tabular}", ""))
    assert _spec_columns("c|*{3}{cc}|p{2cm}>{\\bfseries}l") == 9


# --------------------------------------------------------------------------------------------------
# Synthetic results

REG_PRESENT = ("crime", "medical-expenditure")  # the other regression datasets: not run
CLS_PRESENT = ("breast-cancer", "adult")


def _synthetic() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    recs = []

    def add(flavour, ds, objective, recal, metric, mean, se, n):
        recs.append(dict(dataset=ds, objective=objective, recalibrator=recal, flavour=flavour, metric=metric,
                         mean=mean, se=se, n=n))  # fmt: skip

    for flavour, n, shift in (("exact", 50, 0.0), ("official", 48, 0.013)):
        for ds in REG_PRESENT:
            for obj in ("nll", "nll_mmd"):
                for recal in ("none", "post-hoc"):
                    for metric in ("nll", "qce", "dce"):
                        add(
                            flavour, ds, obj, recal, metric, rng.normal() + shift, rng.uniform(0.001, 0.02), n
                        )
            for metric in ("nll", "dce"):
                add(flavour, ds, "nll_mmd_tanh", "none", metric, rng.normal(), rng.uniform(0.001, 0.02), n)
        for s in (1, 10, 100):  # Table 6: only crime, only some sample counts
            for metric in ("nll", "qce", "dce"):
                add(flavour, "crime", f"nll_mmd@samples={s}", "none", metric, rng.normal(), 0.01, n)
        for ds in CLS_PRESENT:
            for obj in ("xe", "xe_mmce", "xe_kde", "xe_mmd"):
                for recal in ("none", "post-hoc"):
                    add(flavour, ds, obj, recal, "acc", rng.uniform(0.8, 0.97), rng.uniform(0.0005, 0.002), n)
                    for metric in ("ece", "entropy", "kce"):
                        add(
                            flavour,
                            ds,
                            obj,
                            recal,
                            metric,
                            rng.uniform(-0.05, 0.5),
                            rng.uniform(0.001, 0.01),
                            n,
                        )
                add(flavour, ds, obj, "none", "brier", 0.1, 0.01, n)  # an extra metric: ignored
    df = pd.DataFrame(recs)
    # A tie at the printed precision (0.0501 and 0.0499 both print as 0.050) and a known accuracy.
    key = (df.flavour == "exact") & (df.dataset == "crime") & (df.metric == "dce")
    df.loc[key & (df.objective == "nll"), "mean"] = [0.0506, 0.3]  # 0.051: just not the best
    df.loc[key & (df.objective == "nll_mmd") & (df.recalibrator == "none"), "mean"] = 0.0501
    df.loc[key & (df.objective == "nll_mmd") & (df.recalibrator == "post-hoc"), "mean"] = 0.0499
    key = (df.flavour == "exact") & (df.dataset == "breast-cancer") & (df.objective == "xe_mmd")
    df.loc[key & (df.recalibrator == "none") & (df.metric == "acc"), ["mean", "se"]] = [0.99789, 0.0006]
    return df


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("tables")
    df = _synthetic()
    df.to_csv(d / "results.csv", index=False)
    return df, T.write_tables(d / "results.csv", d / "out")


def _body_rows(tex: str) -> list[list[str]]:
    """Cells of the content rows of the outermost tabular (header row excluded)."""
    spec, body = max(_tabulars(tex, blank_nested=False), key=lambda sb: len(sb[1]))
    rows = [[c.strip() for c in r] for r in _split_depth0(body)[:-1]]
    return [[_RULE.sub("", c).strip() for c in r] for r in rows[1:]]


def _parse_cell(cell: str) -> tuple[bool, float | None, float | None]:
    bold = cell.startswith("\\textbf{")
    m = re.search(r"(-?\d+\.\d+)(?: \$\\pm\$ (\d+\.\d+))?", cell)
    if not m:
        assert cell.endswith("---"), cell
        return bold, None, None
    return bold, float(m.group(1)), (float(m.group(2)) if m.group(2) else None)


EXPECTED_FILES = {
    f"{stem}_{fl}{ext}"
    for fl in ("exact", "official")
    for stem, ext in [(t.slug, ".tex") for t in TC.TABLES.values()]
    + [("tables", ".tex"), ("comparison", ".md"), ("comparison", ".csv")]
} | {"claims.md"}


def test_every_file_is_written_and_well_formed(written):
    _, paths = written
    assert {p.name for p in paths.values()} == EXPECTED_FILES
    for p in paths.values():
        assert p.is_file() and p.stat().st_size > 0
        if p.suffix == ".tex":
            assert check_latex(p.read_text()) == [], p.name
    tex = paths["table3_regression_exact"].read_text()
    assert check_latex(tex.replace(" & ---", "", 1)) != []  # the checker sees a dropped cell
    standalone = paths["tables_exact"].read_text()
    assert standalone.startswith("\\documentclass") and "\\usepackage{booktabs}" in standalone
    assert "\\usepackage{multirow}" in standalone and standalone.rstrip().endswith("\\end{document}")


def _expected_bold(values: list[float | None], lower: bool) -> list[bool]:
    printed = [None if v is None else float(f"{v:.3f}") for v in values]
    best = (min if lower else max)(p for p in printed if p is not None)
    return [p is not None and p == best for p in printed]


@pytest.mark.parametrize("flavour", ["exact", "official"])
def test_regression_table_shows_the_csv_numbers_and_bolds_the_best(written, flavour):
    df, paths = written
    tex = paths[f"table3_regression_{flavour}"].read_text()
    rows = _body_rows(tex)
    assert len(rows) == 5 * 4  # every paper dataset has a block, run or not
    ours = df[df.flavour == flavour].set_index(["dataset", "objective", "recalibrator", "metric"])
    order = [("nll", "none"), ("nll", "post-hoc"), ("nll_mmd", "none"), ("nll_mmd", "post-hoc")]
    for b, ds in enumerate(TC.REGRESSION):
        block = rows[4 * b : 4 * b + 4]
        assert f"\\textsc{{{ds}}}" in block[0][0]
        for c, metric in enumerate(("nll", "qce", "dce")):
            parsed = [_parse_cell(r[2 + c]) for r in block]
            if ds not in REG_PRESENT:
                assert all(p == (False, None, None) for p in parsed)
                continue
            for (obj, recal), (_, mean, se) in zip(order, parsed, strict=True):
                row = ours.loc[(ds, obj, recal, metric)]
                assert mean == float(f"{row['mean']:.3f}") and se == float(f"{row['se']:.3f}")
            assert [p[0] for p in parsed] == _expected_bold([p[1] for p in parsed], lower=True)
    if flavour == "exact":  # the tie: NLL + MMD with and without post-hoc both print 0.050, both bold
        crime_dce = [_parse_cell(r[4]) for r in rows[:4]]
        assert crime_dce[2] == (True, 0.05, crime_dce[2][2]) and crime_dce[3][:2] == (True, 0.05)
    assert "$n=1993$" in tex and "$d=102$" in tex  # our n_used from kcal.data, not the paper's 1992


def test_classification_tables_scale_accuracy_and_bold_the_highest(written):
    df, paths = written
    for name, recal in (
        ("table4_classification_exact", "none"),
        ("table5_classification_tempscaling_exact", "post-hoc"),
    ):
        rows = _body_rows(paths[name].read_text())
        ours = df[(df.flavour == "exact") & (df.recalibrator == recal)].set_index(
            ["dataset", "objective", "metric"]
        )
        for b, ds in enumerate(TC.CLASSIFICATION):
            block = rows[4 * b : 4 * b + 4]
            if ds not in CLS_PRESENT:
                assert all(c == "---" for r in block for c in r[2:])
                continue
            assert "$m=2$" in block[0][0]
            for c, metric in enumerate(("acc", "ece", "entropy", "kce")):
                parsed = [_parse_cell(r[2 + c]) for r in block]
                scale = 100 if metric == "acc" else 1
                for obj, (_, mean, se) in zip(("xe", "xe_mmce", "xe_kde", "xe_mmd"), parsed, strict=True):
                    row = ours.loc[(ds, obj, metric)]
                    assert mean == float(f"{scale * row['mean']:.3f}") and se == float(
                        f"{scale * row['se']:.3f}"
                    )
                assert [p[0] for p in parsed] == _expected_bold([p[1] for p in parsed], lower=metric != "acc")
    rows = _body_rows(paths["table4_classification_exact"].read_text())
    assert rows[3][2] == "\\textbf{99.789 $\\pm$ 0.060}"  # breast-cancer XE + MMD: the highest accuracy, x100


def test_sample_size_and_decision_kernel_tables(written):
    df, paths = written
    tex = paths["table6_sample_size_exact"].read_text()
    assert "\\pm" not in tex  # means only, like the paper
    first = max(_tabulars(tex), key=lambda sb: len(sb[0]))[1]
    rows = [[c.strip() for c in r] for r in _split_depth0(first)[:-1]][2:]
    assert [r[0].split()[-1] for r in rows] == [str(s) for s in TC.SAMPLE_SIZES]
    crime_nll = [_parse_cell(r[1])[1] for r in rows]
    ours = df[(df.flavour == "exact") & (df.dataset == "crime") & (df.metric == "nll")].set_index(
        "objective"
    )["mean"]
    for s, v in zip(TC.SAMPLE_SIZES, crime_nll, strict=True):
        key = f"nll_mmd@samples={s}"
        assert v == (float(f"{ours[key]:.3f}") if key in ours.index else None)
    assert [_parse_cell(r[1])[0] for r in rows] == [
        v is not None and v == min(x for x in crime_nll if x is not None) for v in crime_nll
    ]
    assert all(r[4] == "---" for r in rows)  # blog not run
    rows = _body_rows(paths["table7_decision_kernel_exact"].read_text())
    assert len(rows) == 10
    rbf, tanh = [_parse_cell(r[3]) for r in rows[:2]]
    ours = df[
        (df.flavour == "exact") & (df.dataset == "crime") & (df.metric == "dce") & (df.recalibrator == "none")
    ]
    assert rbf[1] == 0.05 and tanh[1] == float(
        f"{ours.set_index('objective').loc['nll_mmd_tanh', 'mean']:.3f}"
    )
    assert [rbf[0], tanh[0]] == _expected_bold([rbf[1], tanh[1]], lower=True)


def _md_row(md: str, dataset: str, row: str, metric: str) -> list[str]:
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:3] == [dataset, row, metric]:
            return cells
    raise AssertionError(f"no markdown row {dataset}/{row}/{metric}")


def test_comparison_markdown_and_csv_put_ours_next_to_the_paper(written):
    df, paths = written
    md = paths["comparison_official_md"].read_text()
    ours = df[(df.flavour == "official") & (df.dataset == "crime") & (df.objective == "nll_mmd")]
    row = ours[(ours.recalibrator == "post-hoc") & (ours.metric == "qce")].iloc[0]
    cells = _md_row(md, "crime", "NLL + MMD + post-hoc", "qce")
    assert cells[3:8] == [f"{row['mean']:.3f}", f"{row['se']:.3f}", "48", "0.105", "0.004"]
    diff = row["mean"] - 0.105
    assert float(cells[8]) == pytest.approx(diff, abs=6e-4)
    assert cells[9] == ("within 2 SE" if abs(diff) <= 2 * math.hypot(row["se"], 0.004) else "differs")
    acc = _md_row(paths["comparison_exact_md"].read_text(), "breast-cancer", "XE + MMD", "accuracy")
    assert acc[3:8] == ["99.789", "0.060", "50", "95.789", "0.060"] and acc[9] == "differs"
    assert _md_row(md, "blog", "NLL", "nll")[3] == "—" and _md_row(md, "blog", "NLL", "nll")[9] == "not run"
    ss = _md_row(md, "crime", "10", "nll")
    assert ss[7] == "—" and ss[6] == "-0.777"  # Table 6: no paper SE

    csv = pd.read_csv(paths["comparison_exact_csv"])
    assert set(csv["verdict"]) <= {
        "within 2 SE",
        "differs",
        "definition differs",
        "not run",
        "no paper value",
    }
    # the exact flavour's ECE, KCE, QCE, DCE and post-hoc NLL are not the paper's definitions: not compared
    differ = csv[csv["verdict"] == "definition differs"]
    assert set(differ["metric"]) == {"ece", "kce", "qce", "dce", "nll"}
    assert set(differ[differ["metric"] == "nll"]["recalibrator"]) == {"post-hoc"}
    official = pd.read_csv(paths["comparison_official_csv"])
    # the official flavour computes the paper's definitions, except KCE (the paper's numbers imply a scaling
    # in neither the authors' code nor the text)
    assert set(official[official["verdict"] == "definition differs"]["metric"]) == {"kce"}
    assert "definition differs" not in set(official[official["metric"] != "kce"]["verdict"])
    blog_like = TC.compare_cell(0.378, 0.003, 4.087, 0.004, same_definition=False)
    assert blog_like["verdict"] == "definition differs" and blog_like["diff"] == pytest.approx(-3.709)
    compared = csv[csv["verdict"].isin(["within 2 SE", "differs"])]
    n, k = len(compared), int((compared["verdict"] == "differs").sum())
    expected = f"Over the {n} cells compared (both numbers, the same definition), {k} differ; chance alone"
    assert expected in paths["comparison_exact_md"].read_text()
    assert f"about {0.0455 * n:.1f}" in paths["comparison_exact_md"].read_text()
    assert len(csv) == 5 * 4 * 3 + 2 * 5 * 4 * 4 + 5 * 8 * 3 + 5 * 2 * 2
    hit = csv[(csv.table == "classification") & (csv.dataset == "breast-cancer") & (csv.row == "XE + MMD")
              & (csv.metric == "acc")].iloc[0]  # fmt: skip
    assert hit.ours_mean == pytest.approx(99.789) and hit.paper_mean == pytest.approx(95.789)
    assert hit.combined_se == pytest.approx(math.hypot(0.06, 0.06), rel=1e-4)
    assert (csv[csv.dataset == "superconductivity"]["verdict"] == "not run").all()


def test_cell_verdicts_on_hand_made_numbers():
    assert TC.compare_cell(1.00, 0.03, 1.05, 0.04)["verdict"] == "within 2 SE"  # |0.05| <= 2 * 0.05
    c = TC.compare_cell(1.00, 0.01, 1.05, 0.01)  # tolerance 2 * sqrt(2) * 0.01 = 0.028
    assert c["verdict"] == "differs" and c["combined_se"] == pytest.approx(math.sqrt(2) * 0.01)
    assert c["diff"] == pytest.approx(-0.05) and c["tolerance"] == pytest.approx(2 * math.sqrt(2) * 0.01)
    assert (
        TC.compare_cell(1.00, 0.02, 1.03, float("nan"))["verdict"] == "within 2 SE"
    )  # no paper SE: ours only
    assert TC.compare_cell(1.00, 0.02, 1.05, float("nan"))["verdict"] == "differs"
    assert TC.compare_cell(float("nan"), float("nan"), 1.0, 0.1)["verdict"] == "not run"
    assert TC.compare_cell(1.0, 0.1, float("nan"), float("nan"))["verdict"] == "no paper value"


def test_best_mask_ties_at_printed_precision():
    assert TC.best_mask([0.0501, 0.0499, 0.0506, float("nan")], lower_is_better=True) == [
        True,
        True,
        False,
        False,
    ]
    assert TC.best_mask([95.1, 95.3, float("nan")], lower_is_better=False) == [False, True, False]
    assert TC.best_mask([float("nan")] * 2, lower_is_better=True) == [False, False]
    assert TC.fmt(-0.0002) == "0.000"


# --------------------------------------------------------------------------------------------------
# Claims


def _reg(flavour, ds, values):
    """values: {(objective, recalibrator, metric): (mean, se)}"""
    return [dict(dataset=ds, objective=o, recalibrator=r, flavour=flavour, metric=m, mean=v, se=s, n=50)
            for (o, r, m), (v, s) in values.items()]  # fmt: skip


def _claims_results() -> pd.DataFrame:
    recs = []
    for ds in ("crime", "medical-expenditure"):
        # exact: NLL + MMD lower QCE everywhere (R1 2/2), NLL within 2 SE of NLL (R2 2/2); tanh beats rbf only on crime
        recs += _reg("exact", ds, {
            ("nll", "none", "qce"): (0.20, 0.01), ("nll_mmd", "none", "qce"): (0.15, 0.01),
            ("nll", "none", "nll"): (1.00, 0.02), ("nll_mmd", "none", "nll"): (1.03, 0.02),
            ("nll_mmd", "none", "dce"): (0.10, 0.01),
            ("nll_mmd_tanh", "none", "dce"): (0.05 if ds == "crime" else 0.20, 0.01),
        })  # fmt: skip
        # official: R1 fails on medical-expenditure (a tie does not count); R2 fails there (worse by > 2 SE)
        recs += _reg("official", ds, {
            ("nll", "none", "qce"): (0.20, 0.01), ("nll_mmd", "none", "qce"): (0.15 if ds == "crime" else 0.20, 0.01),
            ("nll", "none", "nll"): (1.00, 0.01), ("nll_mmd", "none", "nll"): (0.90 if ds == "crime" else 1.10, 0.01),
        })  # fmt: skip
    # R3 on 3 datasets (exact): holds on 2/3 -> most
    for ds, ok in (("crime", True), ("medical-expenditure", True), ("superconductivity", False)):
        recs += _reg(
            "exact",
            ds,
            {
                ("nll", "post-hoc", "nll"): (1.0, 0.01),
                ("nll_mmd", "post-hoc", "nll"): (0.9 if ok else 1.1, 0.01),
            },
        )
    return pd.DataFrame(recs)


def _lines(results, **kw) -> dict[str, str]:
    """The paper reading's summary line of each claim, by ID."""
    return {
        line.split(" ")[0]: line
        for line in CT.claims_summary(results, **kw)
        if "stricter reading" not in line
    }


def test_claim_verdicts_on_hand_constructed_results():
    """No replicates here, so every dataset is judged by its seed SEs (protocol spread unknown), normal quantiles."""
    lines = _lines(_claims_results())
    assert set(lines) == {c.id for c in C.CLAIMS}
    # R1 (QCE, δ 0.02): better by 0.05, 95 % interval ±1.96·sqrt(2)·0.01 = ±0.028, on both datasets; official:
    # a tie on medical-expenditure, whose 90 % interval (±0.023) is wider than δ: open, not equivalent
    assert ("exact: 2 holds of 2 datasets run -> supported. "
            "official-compatible: 1 holds, 1 open of 2 datasets run -> inconclusive.") in lines["R1"]  # fmt: skip
    assert lines["R1"].startswith(
        'R1 (§6.2, Results) "In regression, our objective (NLL + MMD) achieves better QCE'
    )
    assert "paper's own numbers: 5 holds of 5 datasets -> supported" in lines["R1"]
    # R2 (non-inferiority at δ 0.03): 1.03 against 1.00 with SE 0.028 cannot show "not worse by more than 0.03"
    # (the old rule called it supported: more noise, more support); official: better by 0.1, then worse by 0.1
    assert "exact: 2 open of 2 datasets run -> inconclusive" in lines["R2"]
    assert "official-compatible: 1 holds, 1 contradicted of 2 datasets run -> contradicted" in lines["R2"]
    # R3 (most): better on 2 of 3, worse on 1
    assert "exact: 2 holds, 1 contradicted of 3 datasets run -> supported" in lines["R3"]
    assert "official-compatible: 0 datasets run -> not evaluated" in lines["R3"]
    assert "exact: 1 holds, 1 contradicted of 2 datasets run -> contradicted" in lines["D1"]
    assert (
        "exact: 0 datasets run -> not evaluated. official-compatible: 0 datasets run -> not evaluated"
        in lines["C1"]
    )


def test_the_papers_effect_is_excluded_where_our_interval_rules_it_out():
    """R1 on crime: the paper's own gain is 0.220 - 0.164 = 0.056. Ours 0.003 ± a small SE: the interval excludes
    it (not reproduced); with a wide SE it does not (inconclusive), and the runs that would decide are named."""
    recs = _reg(
        "exact", "crime", {("nll", "none", "qce"): (0.200, 0.002), ("nll_mmd", "none", "qce"): (0.197, 0.002)}
    )
    tight = next(e for e in C.evaluate_all(pd.DataFrame(recs)) if e.claim.id == "R1" and not e.label)
    crime = tight.results["exact"].datasets["crime"]
    (c,) = crime.comparisons
    assert c.paper_diff == pytest.approx(-0.056) and c.diff == pytest.approx(-0.003)
    assert crime.status == "the paper's effect excluded"
    assert tight.results["exact"].verdict == "not reproduced: the paper's effect excluded"
    wide = _reg(
        "exact", "crime", {("nll", "none", "qce"): (0.200, 0.03), ("nll_mmd", "none", "qce"): (0.197, 0.03)}
    )
    loose = next(e for e in C.evaluate_all(pd.DataFrame(wide)) if e.claim.id == "R1" and not e.label)
    (c,) = loose.results["exact"].datasets["crime"].comparisons
    assert c.status == "open" and loose.results["exact"].verdict == "inconclusive"
    assert c.interval.mde() == pytest.approx((1.959964 + 0.841621) * math.sqrt(2) * 0.03, rel=1e-5)
    need = c.runs_needed()  # runs of SD sqrt(2) 0.03 that detect 0.056 at 80 % power
    assert need is not None and need > 2
    from scipy.stats import t

    def detects(r):
        return (t.ppf(0.975, r - 1) + t.ppf(0.8, r - 1)) * math.sqrt(2) * 0.03 / math.sqrt(r) <= 0.056

    assert detects(need) and not detects(need - 1)


def test_margins_come_from_the_papers_own_gains_alone():
    """Each metric's margin is half the median of the paper's claimed gains, whatever our numbers are."""
    found = C.paper_margins()
    assert set(found) == {c.metric for c in C.CLAIMS}
    for m in found.values():
        assert (
            m.value == float(f"{m.median_gain / 2:.1g}") and m.gains > 0 and "half the median" in m.reason()
        )
    assert found["qce"].value == 0.02 and found["acc"].value == 0.2
    e = next(e for e in C.evaluate_all(_claims_results()) if e.claim.id == "R1" and not e.label)
    assert e.margin == found["qce"]


PAPER_SUPPORTED = {"R1", "R2", "R3", "R4", "R5", "C1", "C3", "C4a", "C4b"}
_PAPER_PHRASE = re.compile(r"paper's own numbers: (?P<counts>[^>]*?) -> (?P<verdict>supported|contradicted|inconclusive|"
                           r"not reproduced: the paper's effect excluded|not evaluated)"
                           r"(?:; counter-example: (?P<example>.*?))?\. (?:exact|official)")  # fmt: skip


def check_paper_control(line: str, claim) -> list[str]:
    """Problems with a claim's line: the paper's own numbers not "supported" and no counter-example named (a
    dataset of the claim's table with the numbers of its rows)."""
    m = _PAPER_PHRASE.search(line)
    if not m:
        return [f"{claim.id}: no paper's own numbers verdict"]
    if m["verdict"] == "supported":
        return []
    example = m["example"] or ""
    datasets = [ds for ds in TC.TABLES[claim.table].datasets if ds in example]
    if not datasets or not re.search(r"\d+\.\d{3} ± \d+\.\d{3} vs ", example):
        return [f"{claim.id}: the paper's own numbers are {m['verdict']} and no counter-example is named"]
    return []


def test_the_rules_applied_to_the_papers_own_numbers_support_the_papers_claims_or_name_a_counter_example():
    """The control of issue 46: every claim's rule, applied to the paper's own numbers and SEs, says supported,
    or the line names the paper's counter-example (dataset, rows, numbers)."""
    evaluated = [e for e in C.evaluate_all(_claims_results()) if not e.label]
    assert [e.claim.id for e in evaluated] == [c.id for c in C.CLAIMS] and len(evaluated) == 11
    for e in evaluated:
        assert e.results[C.PAPER].n == 5, e.claim.id  # the paper has every dataset
        assert check_paper_control(CT.summary_line(e), e.claim) == [], e.claim.id
    supported = {e.claim.id for e in evaluated if e.results[C.PAPER].verdict == "supported"}
    assert supported == PAPER_SUPPORTED
    lines = {e.claim.id: CT.summary_line(e) for e in evaluated}
    # C2: open on three datasets of the paper's own Table 4; D1: on crime in its Table 7
    assert "paper's own numbers: 2 holds, 3 open of 5 datasets -> inconclusive" in lines["C2"]
    assert ("counter-example: heart-disease XE + MMD 0.261 ± 0.003 vs XE + MMCE 0.267 ± 0.002: inconclusive, "
            "open") in lines["C2"]  # fmt: skip
    assert (
        "online-shoppers XE + MMD 0.127 ± 0.001" in lines["C2"]
        and "adult XE + MMD 0.178 ± 0.001" in lines["C2"]
    )
    assert ("counter-example: crime NLL + MMD k_Y=tanh 0.027 ± 0.006 vs NLL + MMD k_Y=rbf 0.042 ± 0.011: "
            "inconclusive") in lines["D1"]  # fmt: skip
    # the stricter reading of C1 (every dataset) is not what the paper's own Table 4 shows: online-shoppers
    strict = next(e for e in C.evaluate_all(_claims_results()) if e.claim.id == "C1" and e.label)
    assert strict.results[C.PAPER].verdict == "inconclusive" and "online-shoppers" in CT.summary_line(strict)


def test_the_control_check_fails_on_a_rejection_without_a_counter_example():
    claim = C.CLAIMS[0]
    good = "R1 ... paper's own numbers: 5 holds of 5 datasets -> supported. exact: ..."
    assert check_paper_control(good, claim) == []
    bad = good.replace("5 holds of", "4 holds, 1 open of").replace("supported", "inconclusive")
    assert check_paper_control(bad, claim) != []
    named = bad.replace(
        "inconclusive.", "inconclusive; counter-example: crime NLL + MMD 0.164 ± 0.004 vs NLL 0.220 ± 0.004."
    )
    assert check_paper_control(named, claim) == []


def test_each_claim_quotes_the_paper():
    """Every quote is the paper's sentence (its LaTeX source, macros spelled out), where the source is beside
    the checkout (../shared/paper)."""
    from pathlib import Path

    tex = Path(__file__).resolve().parents[3] / "shared" / "paper" / "neurips_2023_kernel_calibration.tex"
    if not tex.is_file():
        pytest.skip("the paper's LaTeX source (shared/paper) is not beside the checkout")
    refs = {"table:main_results": "3", "tab:classification_results": "4", "tab:posthoc_classification_results": "5",
            "table:dcal": "7", "appendix:dcal_details": "B"}  # fmt: skip
    text = tex.read_text()
    text = re.sub(r"\\ref\{([^}]*)\}", lambda m: refs.get(m.group(1), m.group(1)), text)
    text = re.sub(r"\\operatorname\{([^}]*)\}", r"\1", text).replace("\\tanh", "tanh").replace("$", "")
    text = re.sub(r"\s+", " ", text)
    for c in C.CLAIMS:
        assert c.quote in text, c.id
        assert c.section.startswith("§6."), c.id


def test_replicates_turn_a_one_run_verdict_into_a_test_over_runs():
    """With replicates, a dataset's interval is the t interval of the runs' mean difference, and each run alone
    by its seed SEs is kept as a description."""
    results = _claims_results()
    replicates = {}
    for k, shift in enumerate((0.06, -0.04)):  # NLL + MMD's QCE on crime in two more runs: worse, then better
        rep = results[(results["dataset"] == "crime") & (results["flavour"] == "exact")].copy()
        hit = (rep["objective"] == "nll_mmd") & (rep["metric"] == "qce")
        rep.loc[hit, "mean"] += shift
        replicates[f"sampler_seed={k + 1}"] = rep
    lines = _lines(results, replicates=replicates)
    # crime: differences -0.05, +0.01, -0.09 (mean -0.043, sd 0.05): t_2 interval ±0.124 holds 0 and the paper's
    # -0.056: open; medical-expenditure, one run, holds
    assert "exact: 1 holds, 1 open of 2 datasets run -> inconclusive" in lines["R1"]
    e = next(e for e in C.evaluate_all(results, replicates=replicates) if e.claim.id == "R1")
    crime = e.results["exact"].datasets["crime"]
    assert crime.run_outcomes == ("holds", "open", "holds") and crime.runs == 3
    (comparison,) = crime.comparisons
    sd = float(np.std([-0.05, 0.01, -0.09], ddof=1))
    assert comparison.diff == pytest.approx(-0.13 / 3) and comparison.basis == "runs"
    lo, hi = comparison.interval.ci()
    assert hi - comparison.diff == pytest.approx(4.302652729911275 * sd / math.sqrt(3), rel=1e-6)
    assert e.results[C.PAPER].datasets["crime"].runs == 1  # the paper's numbers are one run
    # the one-run dataset is judged with the replicated comparisons' spread ratio (at least 1)
    spread = e.results["exact"].spread
    assert spread.known and spread.comparisons >= 1
    (med,) = e.results["exact"].datasets["medical-expenditure"].comparisons
    assert med.basis == "spread" and med.interval.se == pytest.approx(spread.factor() * math.sqrt(2) * 0.01)


def test_a_one_run_dataset_takes_the_measured_spread_ratio():
    """Three runs whose differences spread 3x their seed SE: a one-run dataset's interval is 3x as wide."""
    results = _claims_results()
    replicates = {}
    for k, shift in enumerate((0.0424, -0.0424)):
        rep = results[(results["dataset"] == "crime") & (results["flavour"] == "exact")].copy()
        rep.loc[(rep["objective"] == "nll_mmd") & (rep["metric"] == "qce"), "mean"] += shift
        rep = rep[rep["metric"] == "qce"]
        replicates[f"sampler_seed={k + 1}"] = rep
    e = next(e for e in C.evaluate_all(results, replicates=replicates) if e.claim.id == "R1")
    spread = e.results["exact"].spread
    assert spread.ratio == pytest.approx(0.0424 / (math.sqrt(2) * 0.01), rel=1e-3) and spread.comparisons == 1
    (med,) = e.results["exact"].datasets["medical-expenditure"].comparisons
    assert med.interval.se == pytest.approx(0.0424, rel=1e-3)  # 3 x the combined seed SE
    assert "seed SE x 3.00" in e.results["exact"].spread.phrase()


def test_claims_are_data_and_the_markdown_lists_them(written):
    for c in C.CLAIMS:
        table = TC.TABLES[c.table]
        assert c.direction in {"better", "not worse"} and c.quantifier in {"every", "most"}
        assert {r.key for r in table.rows} >= set(c.ours + c.others + c.strict_others) and table.metric(
            c.metric
        )
        assert c.quote and c.section
    assert [c.id for c in C.CLAIMS] == ["R1", "R2", "R3", "R4", "R5", "C1", "C2", "C3", "C4a", "C4b", "D1"]
    df, paths = written
    md = paths["claims"].read_text()
    for line in CT.claims_summary(df):
        assert line in md
    starts = [line.split(" ")[0] for line in md.splitlines() if re.match(r"^(R\d|C\d|D\d)\w* ", line)]
    assert starts == [c.id for c in C.CLAIMS]  # one summary line per claim, beginning with its ID
    for c in C.CLAIMS:
        line = next(x for x in md.splitlines() if x.startswith(c.id + " "))
        assert f'"{c.quote}"' in line and check_paper_control(line, c) == []
    assert "  - C2, kcal's stricter reading (against plain XE too, on every dataset)" in md
    assert "| R1 | paper | exact | crime | 1 | seed | holds | NLL: better, holds |" in md
    assert "## Margins" in md and "| qce | 0.02 | half the median" in md


def test_cli_prints_paths_and_claims(tmp_path, capsys):
    _claims_results().to_csv(tmp_path / "r.csv", index=False)
    assert T.main(["--results", str(tmp_path / "r.csv"), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert (
        str(tmp_path / "o" / "claims.md") in out
        and str(tmp_path / "o" / "table3_regression_exact.tex") in out
    )
    assert 'R1 (§6.2, Results) "' in out and {p.name for p in (tmp_path / "o").iterdir()} == EXPECTED_FILES


def test_duplicated_cells_and_missing_columns_are_rejected(tmp_path):
    df = _claims_results()
    pd.concat([df, df.head(1)]).to_csv(tmp_path / "dup.csv", index=False)
    with pytest.raises(ValueError, match="duplicated"):
        T.write_tables(tmp_path / "dup.csv", tmp_path / "o")
    df.drop(columns="se").to_csv(tmp_path / "cols.csv", index=False)
    with pytest.raises(ValueError, match="se"):
        TC.load_results(tmp_path / "cols.csv")


@pytest.mark.parametrize("profile", ["smoke", "full"])
def test_captions_and_claims_state_the_profile(tmp_path, profile):
    _synthetic().to_csv(tmp_path / "results.csv", index=False)
    written = T.write_tables(tmp_path / "results.csv", tmp_path / "out", echo_claims=False, profile=profile)
    for key, path in written.items():
        text = path.read_text()
        if path.suffix == ".tex":
            n = text.count("\\caption{")
            assert n >= 1 and text.count(f"\\caption{{Profile: {profile}") == n, key
        elif path.suffix == ".md":
            assert f"Profile: {profile}" in text.split("\n\n")[0 if key.startswith("comparison") else 1], key
    claims = written["claims"].read_text()
    verdicts = [line for line in claims.splitlines() if "paper's own numbers:" in line]
    assert len(verdicts) == 16  # eleven claims, five stricter readings
    assert all(("[profile smoke: not evidence]" in v) == (profile == "smoke") for v in verdicts)
    if profile == "smoke":
        assert "NOT evidence" in claims


# --------------------------------------------------------------------------------------------------
# Tables that explain themselves


def _notes(tex: str) -> str:
    return tex[tex.index("\\footnotesize") :]


def test_notes_say_why_cells_are_missing_and_which_definition_each_column_uses(written):
    _, paths = written
    note = _notes(paths["table3_regression_exact"].read_text())
    # the registry says whose data the offline mirror lacks; the others are "not run in this profile"
    absent = [
        ds for ds in TC.TABLES["regression"].datasets if ds not in REG_PRESENT and not get_spec(ds).in_mirror
    ]
    not_run = [
        ds for ds in TC.TABLES["regression"].datasets if ds not in REG_PRESENT and get_spec(ds).in_mirror
    ]
    assert absent and not_run and "superconductivity" in absent and "blog" in not_run
    assert f"--- marks a cell not run: {', '.join(absent)}: not available offline" in note
    assert f"{', '.join(not_run)}: not run in this profile" in note
    assert (
        "QCE: QCE on the PIT with 20 equal-width bins (about 0 when calibrated) [definition differs" in note
    )
    assert ("NLL: Gaussian NLL over the whole test split (after post-hoc recalibration: the recalibrated map's "
            "density in float64) [definition differs from the paper's after post-hoc recalibration") in note  # fmt: skip
    official = _notes(paths["table3_regression_official"].read_text())
    assert "definition differs" not in official and "QCE: the authors' QCE" in official
    assert "paper's definitions, as the authors' code computes them" in official
    sample = _notes(paths["table6_sample_size_exact"].read_text())
    # medical-expenditure ran (Table 3) although its data are not in the mirror: Table 6 was not run for it
    table6 = [ds for ds in TC.TABLES["sample_size"].datasets if ds != "crime"]
    assert "medical-expenditure" in table6
    offline6 = [ds for ds in table6 if ds not in REG_PRESENT and not get_spec(ds).in_mirror]
    run6 = [ds for ds in table6 if ds not in offline6]
    assert f"{', '.join(run6)}: not run in this profile" in sample
    assert "rows not run in this profile: crime (2, 5, 20, 50, 200)" in sample
    assert "after post-hoc" not in sample  # Table 6 has no post-hoc rows
    cls = _notes(paths["table4_classification_exact"].read_text())
    assert "accuracy: accuracy over the whole test split;" in cls and "ECE: top-label ECE" in cls
    assert (
        "Regulariser share" not in cls
    )  # no studies given: nothing to say about the selected configurations


def _coinciding() -> pd.DataFrame:
    """crime's NLL + MMD rows equal to its NLL rows in every number (a regulariser off in effect)."""
    df = _synthetic()
    crime = (df["dataset"] == "crime") & (df["flavour"] == "exact")
    nll = df[crime & (df["objective"] == "nll")].set_index(["recalibrator", "metric"])
    for i in df[crime & (df["objective"] == "nll_mmd")].index:
        df.loc[i, ["mean", "se"]] = nll.loc[
            (df.loc[i, "recalibrator"], df.loc[i, "metric"]), ["mean", "se"]
        ].to_numpy()
    return df


def _studies(share_mmd, lr_mmd=0.001):
    common = {"model.widths.0": 64, "trainer.batch_size": 32}
    return pd.DataFrame([
        {"dataset": "crime", "objective": "nll", "best_params": json.dumps({**common, "trainer.lr": 0.001}),
         "reg_share_median": 0.0},
        {"dataset": "crime", "objective": "nll_mmd", "reg_share_median": share_mmd,
         "best_params": json.dumps({**common, "trainer.lr": lr_mmd, "objective.weight": 0.5})},
        {"dataset": "medical-expenditure", "objective": "nll_mmd", "best_params": "{}", "reg_share_median": 0.02},
    ])  # fmt: skip


def test_coinciding_rows_are_explained_by_the_selected_configurations():
    df = _coinciding()
    note = _notes(T.latex_table(df, "exact", "regression", _studies(0.0)))
    assert ("Coinciding rows: on crime, rows NLL and NLL + MMD coincide in every printed digit: the two selected "
            "configurations share every common hyperparameter; the regulariser's share of the selected "
            "configuration's loss (median over its epochs) is NLL + MMD 0: a share near 0 means the regulariser is "
            "in effect off") in note  # fmt: skip
    assert "NLL + post-hoc and NLL + MMD + post-hoc coincide" in note
    assert (
        "crime NLL + MMD 0; medical-expenditure NLL + MMD 0.02." in note
    )  # the shares of every regularised row
    other = _notes(T.latex_table(df, "exact", "regression", _studies(None, lr_mmd=0.01)))
    assert "differ in trainer.lr" in other and "not recorded for NLL + MMD (studies.csv)" in other
    assert "not recorded in studies.csv: crime NLL + MMD" in other
    assert "Coinciding" not in _notes(T.latex_table(_synthetic(), "exact", "regression", _studies(0.0)))


PDFLATEX = shutil.which("pdflatex")
ARTICLE = r"""\documentclass{article}
\usepackage[T1]{fontenc}
\IfFileExists{booktabs.sty}{\usepackage{booktabs}}{\newcommand\toprule{\hline}\newcommand\midrule{\hline}
  \newcommand\bottomrule{\hline}\def\cmidrule(##1)##2{}}
\IfFileExists{multirow.sty}{\usepackage{multirow}}{\newcommand\multirow[3]{##3}}
\usepackage{graphicx}
\begin{document}
"""


def overfull(files, folder) -> dict[str, str]:
    """``{file: the first Overfull or error line}`` of each LaTeX table compiled alone in a standard article
    (default margins, 10 pt; booktabs and multirow where installed, stand-ins where not)."""
    out = {}
    for i, path in enumerate(files):
        doc = folder / f"doc{i}.tex"
        doc.write_text(ARTICLE + f"\\input{{{path}}}\n\\end{{document}}\n")
        run = subprocess.run([PDFLATEX, "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=folder,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        log = (folder / f"doc{i}.log").read_text(errors="replace")
        bad = [line for line in log.splitlines() if line.startswith(("Overfull \\hbox", "!"))]
        if run.returncode or bad:
            out[Path(path).name] = bad[0] if bad else f"pdflatex exit {run.returncode}"
    return out


@pytest.mark.skipif(PDFLATEX is None, reason="pdflatex is not installed")
def test_the_tables_compile_and_fit_a_standard_article_page(written, tmp_path):
    tables = [p for p in written[1].values() if p.suffix == ".tex" and not p.name.startswith("tables_")]
    published = sorted(
        (Path(__file__).resolve().parents[2] / "docs" / "results" / "full").glob("table[0-9]*.tex")
    )
    assert len(tables) == 10 and len(published) == 10
    assert overfull(tables + published, tmp_path) == {}
    # the check sees a table wider than the page, and the scaling is what makes a wide one fit
    body = "\\begin{tabular}{l}" + "W" * 60 + " \\\\\n\\end{tabular}"
    (tmp_path / "wide.tex").write_text("\\noindent" + body)  # \noindent: as in a float, no paragraph indent
    (tmp_path / "fitted.tex").write_text("\\noindent" + T.fit_width(body))
    (tmp_path / "narrow.tex").write_text(
        "\\noindent" + T.fit_width("\\begin{tabular}{l}x \\\\\n\\end{tabular}")
    )
    found = overfull([tmp_path / "wide.tex", tmp_path / "fitted.tex", tmp_path / "narrow.tex"], tmp_path)
    assert list(found) == ["wide.tex"] and "Overfull" in found["wide.tex"]


def test_a_remembered_cell_frame_is_a_copy_and_new_content_is_computed_anew():
    from kcal.core.layout import published_data
    from kcal.publish.table_cells import (
        TABLES,
        cell_frame,
        comparison_frame,
        compute_cell_frame,
        load_results,
    )

    results = load_results(published_data("full") / "results.csv")
    table = next(iter(TABLES.values()))
    first = cell_frame(results, "exact", table)
    pd.testing.assert_frame_equal(first, compute_cell_frame(results, "exact", table))
    first["ours_mean"] = -1.0  # a caller's change stays in its copy
    assert (cell_frame(results, "exact", table)["ours_mean"] != -1.0).any()
    moved = results.copy()
    moved["mean"] = moved["mean"] + 1.0
    pd.testing.assert_frame_equal(
        cell_frame(moved, "exact", table), compute_cell_frame(moved, "exact", table)
    )
    assert not cell_frame(moved, "exact", table).equals(cell_frame(results, "exact", table))
    whole = comparison_frame(results, "official")
    assert len(whole) == sum(len(compute_cell_frame(results, "official", t)) for t in TABLES.values())


def test_claims_are_evaluated_once_per_content_and_a_changed_cell_is_evaluated_anew():
    """A report evaluates the same results in several places: the second call is the first's evaluation (the
    same objects), a copy of the frame too; one cell changed is another evaluation."""
    results = _claims_results()
    first = C.evaluate_all(results)
    again = C.evaluate_all(results.copy())
    assert [id(e) for e in again] == [id(e) for e in first] and again is not first
    changed = results.copy()
    changed.loc[0, "se"] = 0.5
    fresh = C.evaluate_all(changed)
    assert fresh[0] is not first[0] and [e.claim.id for e in fresh] == [e.claim.id for e in first]
