"""The prose-number checker's parts (tests/publish/test_report_numbers.py states what it checks): reading the
numbers of hand-written prose with the cell each one's sentence names, and the cells of the published data.

**A number's cell** (:class:`Number`), per dimension, nearest first: its *row* is the last group of row names
before it in its sentence (``XE's and XE + MMCE's 0.0909``: both; ``XE (92.870 against 92.071) and XE + MMCE
(92.951 ...)``: XE for the first two), else none; its *dataset* the last group before it, else every dataset its
sentence names, else its innermost heading's, else its paragraph's; its *metric* the groups right before and right
after it (``... (59.475) in accuracy``), else its paragraph's, else its innermost heading's; its *flavour* and
*recalibration* (``after temperature scaling``, ``+ post-hoc``, ``without post-hoc``) the last before it in its
sentence; its paper *table* (``Table 6``) the last before it, else every one its sentence names; its *λ* a
``at λ = X`` right after it, else every ``λ = X`` of its sentence (and λ = 0 after ``alone``; a cell of no path may
be meant too), none where the sentence gives a range (``up to λ = 100``). A dimension left empty holds every value.
A dataset named as a comparison (``as on heart-disease``) is not the sentence's. In a Markdown table each row is a
sentence, and a number's metric, flavour and recalibration are its column header's where that names them; where the
first column is ``λ`` or ``weight`` its cell is the row's λ.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from kcal.publish.report import GENERATED

WORDS = {w: i for i, w in enumerate("two three four five six seven eight nine ten eleven twelve".split(), 2)}
METRICS = {
    "acc": r"accura|\bacc\b", "ece": r"\bECE\b", "classwise_ece": r"classwise", "kce": r"\bKCE\b",
    "entropy": r"entrop|\bsharp(?:er|est)?\b", "nll": r"\bNLL\b(?!\s*(?:\+|row|model|trial|objective|'s|’s))",
    "qce": r"\bQCE\b", "dce": r"\bDCE\b", "crps": r"\bCRPS\b", "temperature": r"temperature(?! scaling|-scaled)|\bT = ",
    "sharpness": r"sharpness",
}  # fmt: skip
"""Metric names (a row's name ``NLL + ...``, ``NLL row``, ``NLL's`` is the objective, not the metric)."""
ROWS = {  # matched in this order; a match is blanked before the next pattern is tried
    "xe_mmce": r"XE\s*\+\s*MMCE|\bMMCE\b", "xe_kde": r"(?:XE\s*\+\s*)?(?:ECE[- ])?KDE\b",
    "xe_mmd": r"XE\s*\+\s*MMD", "nll_mmd_tanh": r"\btanh\b",
    "nll_mmd": r"NLL\s*\+\s*MMD(?:\s*\(RBF\))?|\bRBF row", "xe": r"\bXE\b(?!\s+models?\b)",
    "nll": r"(?<!-)\bNLL(?=\s*(?:\+\s*post-hoc|row|trial|objective|'s|’s))",
}  # fmt: skip
"""The rows (objectives) by name."""
FLAVOUR_NAMES = {"exact": r"\bexact\b(?!ly)", "official": r"\bofficial\b"}
RECAL_NAMES = {  # matched in this order, each match blanked
    "none": r"\b(?:without|before) (?:any )?(?:post-hoc(?: recalibration)?|recalibration|temperature scaling)"
            r"|\bno post-hoc",
    "post-hoc": r"\bpost-hoc|\brecalibrat|\btemp(?:erature|\.) scaling|\bconformal",
}  # fmt: skip
TABLE_NAMES = {  # paper table (its number) -> the table names of the cells
    "3": "regression", "4": "classification", "5": "classification_tempscaling", "6": "sample_size",
    "7": "decision_kernel",
}  # fmt: skip
CONTEXTS = {
    "replicates": r"replicat|runs? of the protocol|sampler|protocol's (?:own )?spread|sweeps?\b",
    "experiments": r"experiment|former|median_x|authors_first|first search space|kept on|retrain",
    "ablations": r"experiment|ablation|λ|weight|regularisation path|trade-off|\bpaths?\b|made active",
    "trials": r"\btrials?\b",
    "fronts": r"pareto|front",
    "parameters": r"λ|weight|width|batch|bandwidth|learning rate",
    "pruned": r"prun",
    "workers": r"workers?\b|\bjobs\b",
}
"""Pools of values a number may come from only where its paragraph or headings match the pattern."""

NUMBER = re.compile(
    r"(?<![\w.])(?P<num>\d{1,3}(?:,\d{3})+(?![\d.])|\d+(?:\.\d+)?(?:e[-+−]?\d+)?)(?P<pct>\s?%)?(?![A-Za-wyz_\d])"
)
WORD = re.compile(r"\b(" + "|".join(WORDS) + r")\s+[a-z]", re.I)
REFERENCE = re.compile(
    r"\b(?:Tables?|Figures?)\s+\d{1,2}(?:(?:,\s*|\s+and\s+|\s*[-–]\s*)\d{1,2}(?!\d|\.\d))*(?!\d|\.\d)"
    r"|(?:§|\bSections?\s+)\s*\d+(?:\.\d+)*|\bAppendix\s+[A-Z](?:\.\d+)*|\bissues?\s+\d+"
)
DIGIT_LETTER = str.maketrans("0123456789", "abcdefghij")
"""A reference's digits as letters (``Table 6`` -> ``Table g``): no longer a number, still a table's name."""
TABLE_MENTION = re.compile(r"\bTables?\s+([a-j](?:(?:,\s*|\s+and\s+|\s*[-–]\s*)[a-j])*)\b")
DATE_TIME = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}(?::\d{2})?\b|(?<=\bseeds )\d+\s*[-–]\s*\d+\b")
"""Not numbers: dates, clock times and seed ranges (``seeds 0-9``: which seeds, not a count)."""
RANGE_END = re.compile(r"^\s*(?:[–-]|\band\b|\bor\b)\s*[\d.]+(?:e[-+]?\d+)?")
RANGE_START = re.compile(r"\d\s*[–-]\s*$")
SE_BOUND = re.compile(
    r"(?:within|less\s+than|below|beyond|above|more\s+than|at\s+least|even|under|over|up\s+to|<|>|≤|≥)\s*$"
)
"""Before an SE multiple that is a bound (``within 2 SE``), not a measured multiple."""
SE_AFTER = re.compile(
    r"^\s*(?:x|×|times)?\s*(?:the\s+)?(?:(?:its|our|published)\s+)?(?P<kind>combined\s+|seed\s+)?SEs?\b"
)
DIFF_BEFORE = re.compile(r"(?:\bby\s+(?:about\s+|a\s+median\s+|up\s+to\s+)?|\+)$")
POINTS_AFTER = re.compile(r"^\s*(?:%\s*)?points\b")
TRIAL_BEFORE = re.compile(r"\btrials?\s*\(?\s*(?:\d+(?:,\s*|\s+and\s+))*$")
LAMBDA_BEFORE = re.compile(r"λ\s*=\s*$")
LAMBDA_AT = re.compile(r"λ\s*=\s*(?P<num>\d+(?:\.\d+)?(?:e[-+−]?\d+)?)")
LAMBDA_AFTER = re.compile(
    r"^\s*(?:%\s*)?(?:\([^)]*\)\s*)?,?\s*(?:at|for)\s+(?:λ\s*=\s*)?(?P<num>\d+(?:\.\d+)?(?:e[-+−]?\d+)?)(?![\d.])"
)
LAMBDA_RANGE = re.compile(r"\b(?:up to|until|below|above|beyond)\s+λ\s*=")
GROUP_GAP = re.compile(r"^(?:'s|’s)?(?:\s*,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|\s*/\s*)$")
"""What may stand between two names of one group (``XE's and XE + MMCE's``, ``adult, dry-bean and crime``)."""
UNPUBLISHED = {
    "history": (r"`[^`]*history\.csv`", "a seed's or trial's training log (`history.csv`): per-epoch values, kept in "
                "the runs' roots, not in the published data"),
    "metrics.json": (r"`[^`]*metrics\.json`", "a trial's own test metrics (`metrics.json`) where its study's trials "
                     "table is not published"),
    "bench": (r"`python -m kcal\.bench\.[\w.]+|`kcal\.bench\.[\w.]+`|`--(?:batch|bandwidths)\b",
              "a benchmark's printed measurement (`python -m kcal.bench.*`), run on the data, not published"),
    "measured": (r"\bmeasured on the (?:training|test) rows\b", "a measurement on a dataset's rows (its distances, a "
                 "kernel's values), not published"),
    "run root": (r"`outputs/[^`]*`|\bin the same root\b", "a run's own root (its study records, the selected trial's "
                 "parameters) where the run published its results only"),
    "log": (r"`python -m kcal (?:reevaluate|reproduce)\b[^`]*`|`kcal/diagnostics\.py`", "a command's printed log (quoted) "
            "or a training-curve quantity of the seeds' logs (`kcal/diagnostics.py`), not published"),
    "ablation run": (r"`[^`]*\bablation\.(?:grid|key)\b", "an ablation run's own log (its wall time, its epochs)"),
}  # fmt: skip
"""Sources outside the published data a sentence may name for its numbers, each with why it is not published: a
number of a sentence (or of a table under a paragraph) that names one is read as that measurement and not matched
to a cell; every other number of the sentence still is. Every entry must be used."""
UNPUBLISHED_COLUMNS = {
    "epochs": (r"\bepochs\b", "an ablation's epochs trained (its seeds' logs)"),
    "regulariser share": (r"regulariser\s*/", "the regulariser's share of the loss over an ablation's epochs (its "
                          "seeds' logs)"),
}  # fmt: skip
"""A table column whose header names a quantity of an unpublished log (:data:`UNPUBLISHED`)."""


def sources(text: str, table: dict[str, tuple[str, str]] | None = None) -> frozenset[str]:
    """The unpublished sources ``text`` names (:data:`UNPUBLISHED`, or ``table``)."""
    return frozenset(k for k, (p, _) in (table or UNPUBLISHED).items() if re.search(p, text))


DIMENSIONS = ("datasets", "rows", "metrics", "flavours", "recals", "tables", "lams")


# ---- prose -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Number:
    text: str  # as printed
    value: float  # its magnitude
    tolerance: float  # half a unit of its last printed digit (0 for a count)
    kind: str  # "value" | "percent" | "count" | "trial" | "se" | "diff" | "lambda"
    datasets: frozenset[str] = frozenset()  # empty: every dataset
    metrics: frozenset[str] = frozenset()  # empty: every metric
    rows: frozenset[str] = frozenset()  # empty: every row
    contexts: frozenset[str] = frozenset()  # the extra pools its paragraph and headings allow
    where: str = ""  # the line it is on, for the failure message
    flavours: frozenset[str] = frozenset()
    recals: frozenset[str] = frozenset()
    tables: frozenset[str] = frozenset()  # the paper's tables by name (``sample_size``)
    lams: frozenset[float] = frozenset()
    se: str = ""  # an SE multiple's: "combined", "bound" (``within 2 SE``: not recomputed) or "" (any SE)
    in_range: bool = False  # one end of a range (``1.2–1.8``)
    sentence: int = -1  # which sentence of its text (numbers of one sentence share it)
    position: int = 0  # where in its sentence
    opens: tuple[int, ...] = ()  # where its sentence opens a parenthesis, for what follows an SE multiple
    sources: frozenset[str] = frozenset()  # the unpublished sources its sentence names (:data:`UNPUBLISHED`)
    sentence_rows: frozenset[str] = (
        frozenset()
    )  # every row its sentence names (an SE multiple's pair is of them)

    def named(self) -> dict[str, frozenset]:
        return {d: getattr(self, d) for d in DIMENSIONS}


def parse(text: str) -> tuple[float, float]:
    """(magnitude, half a unit of the last printed digit) of a number as printed."""
    text = text.replace(",", "").replace("−", "-")
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    scale = 10.0 ** int(exponent) if exponent else 1.0
    return abs(float(mantissa)) * scale, 0.5 * 10.0**-decimals * scale if "." in mantissa or exponent else 0.0


def prose(text: str, dates: bool = False) -> str:
    """``text`` without generated blocks, code, comments, link targets, dates and times (each replaced by blanks,
    so lines keep their places; ``dates``: dates kept); references to the paper's parts keep their words, their
    digits as letters."""

    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    text = GENERATED.sub(blank, text)
    text = re.sub(r"```.*?```", blank, text, flags=re.S)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", blank, text)
    text = re.sub(r"\]\([^)]*\)", blank, text)
    text = REFERENCE.sub(lambda m: m.group(0).translate(DIGIT_LETTER), text)
    return text if dates else DATE_TIME.sub(blank, text)


def mentions(text: str, patterns: dict[str, str], blank: bool = False) -> list[tuple[int, int, str]]:
    """``(start, end, key)`` of every name in ``text``, in order (``blank``: a match hides its text from the
    patterns after it)."""
    found = []
    for key, pattern in patterns.items():
        for m in re.finditer(pattern, text, re.I if key not in ROWS else 0):
            found.append((m.start(), m.end(), key))
        if blank:
            text = re.sub(
                pattern, lambda m: " " * len(m.group(0)), text, flags=re.I if key not in ROWS else 0
            )
    return sorted(found)


def dataset_patterns(datasets: Iterable[str]) -> dict[str, str]:
    return {d: rf"(?<![\w-]){re.escape(d)}(?![\w-])" for d in datasets}


AS_ON = re.compile(
    r"\b(?:as|like)\s+(?:on|in|for)\s+(?:(?:and\s+|or\s+)?[a-z][\w-]*(?:,\s*|\s+(?=and|or)))*"
    r"(?:and\s+|or\s+)?[a-z][\w-]*"
)
"""A reference to another dataset (``as on heart-disease and online-shoppers``): not the sentence's dataset."""


def dataset_mentions(text: str, patterns: dict[str, str]) -> list[tuple[int, int, str]]:
    """The datasets ``text`` names, but for those it compares to (:data:`AS_ON`)."""
    return mentions(AS_ON.sub(lambda m: " " * len(m.group(0)), text), patterns)


def table_mentions(text: str) -> list[tuple[int, int, str]]:
    out = []
    for m in TABLE_MENTION.finditer(text):
        for letter in re.findall(r"\b[a-j]\b", m.group(1)):
            name = TABLE_NAMES.get(letter.translate(str.maketrans("abcdefghij", "0123456789")))
            if name:
                out.append((m.start(), m.end(), name))
    return out


def lambda_mentions(text: str) -> list[tuple[int, int, float]]:
    return [
        (m.start(), m.end(), parse(m.group("num"))[0]) for m in LAMBDA_AT.finditer(text.replace("−", "-"))
    ]


def nearest_group(found: list[tuple[int, int, object]], position: int, text: str) -> frozenset:
    """The last group of names that ends before ``position`` (names joined by ``,``/``and``/``or``)."""
    before = [f for f in found if f[1] <= position]
    if not before:
        return frozenset()
    group = [before[-1]]
    for f in reversed(before[:-1]):
        if not GROUP_GAP.match(text[f[1] : group[-1][0]]):
            break
        group.append(f)
    return frozenset(k for _, _, k in group)


def nearest_group_after(found: list[tuple[int, int, object]], position: int, text: str) -> frozenset:
    """The first group of names that starts after ``position``."""
    after = [f for f in found if f[0] >= position]
    group = after[:1]
    for f in after[1:]:
        if not GROUP_GAP.match(text[group[-1][1] : f[0]]):
            break
        group.append(f)
    return frozenset(k for _, _, k in group)


def paragraphs(text: str) -> Iterator[tuple[list[str], int, str]]:
    """``(headings above, first line number, paragraph)`` for every paragraph of ``text`` (blank-line separated; a
    list item starts a paragraph of its own; a heading is a paragraph too)."""
    headings: list[str] = []
    start, chunk = 0, []
    for i, line in enumerate([*text.split("\n"), ""]):
        new_item = re.match(r"\s*[*-] ", line) is not None and chunk
        if not line.strip() or new_item or line.startswith("#"):
            if chunk:
                yield list(headings), start, "\n".join(chunk)
            chunk = []
            if line.startswith("#"):
                level = len(line) - len(line.lstrip("#"))
                headings = [h for h in headings if len(h) - len(h.lstrip("#")) < level] + [line]
                yield list(headings), i, line
                continue
        if line.strip():
            start = i if not chunk else start
            chunk.append(line)


def sentences(paragraph: str) -> list[str]:
    """A paragraph's sentences (a table's rows count as sentences)."""
    return re.split(r"(?:(?<=[.;!?])|(?<=[.;!?]\)))\s+(?=[A-Z*(])|\n(?=\s*\|)", paragraph)


TABLE_ROW = re.compile(r"^\s*\|")
KEY_COLUMN = re.compile(r"^\s*(?:λ|weight)\s*$")
"""A table's first column header that makes each row a λ: its first cell is the λ of the row's other cells."""


def table_header(paragraph: str) -> list[str]:
    """The column headers of a paragraph that is a Markdown table (its first line, over a ``|---|`` line), else
    none."""
    lines = paragraph.split("\n")
    if len(lines) < 2 or not TABLE_ROW.match(lines[0]) or not re.match(r"^\s*\|\s*:?-", lines[1]):
        return []
    return lines[0].strip().strip("|").split("|")


def table_key(header: list[str], row: str) -> frozenset[float] | None:
    """The λ of a table's row where its first column is λ (:data:`KEY_COLUMN`), else None."""
    if not header or not KEY_COLUMN.match(header[0]) or not TABLE_ROW.match(row):
        return None
    first = NUMBER.search(row.strip().strip("|").split("|")[0])
    return frozenset({parse(first.group("num"))[0]}) if first else None


def column_names(header: list[str], column: int) -> dict[str, frozenset]:
    """What a table's column header names (its metric, flavour, recalibration, row); where some header names a
    recalibration, a column that names none is the one without (``QCE`` beside ``QCE, post-hoc``)."""
    if not 0 <= column < len(header):
        return {}
    text = header[column]
    named = {
        "metrics": {k for *_, k in mentions(blank_rows(text), METRICS)},
        "flavours": {k for *_, k in mentions(text, FLAVOUR_NAMES)},
        "recals": {k for *_, k in mentions(text, RECAL_NAMES, blank=True)},
        "rows": {k for *_, k in mentions(text, ROWS, blank=True)},
    }
    if not named["recals"] and any(mentions(h, RECAL_NAMES) for h in header):
        named["recals"] = {"none"}
    return {d: frozenset(v) for d, v in named.items() if v}


def kind_of(sentence: str, m: re.Match, tolerance: float) -> tuple[str, str]:
    """(kind, SE kind) of the number ``m`` of ``sentence``."""
    before, after = sentence[: m.start()], RANGE_END.sub("", sentence[m.end() :], count=1)
    if TRIAL_BEFORE.search(before):
        return "trial", ""
    if se := SE_AFTER.match(after):
        if SE_BOUND.search(before):
            return "se", "bound"
        return "se", "combined" if (se.group("kind") or "").strip() == "combined" else ""
    if LAMBDA_BEFORE.search(before):
        return "lambda", ""
    if DIFF_BEFORE.search(before) or POINTS_AFTER.match(after):
        return "diff", ""
    if m.group("pct"):
        return "percent", ""
    return ("value" if tolerance else "count"), ""


class Names:
    """The names of one dimension in a sentence, with where it falls back to (module docstring): ``outer`` the
    texts tried in turn where the sentence names none; ``after``: the nearest group after a number counts too."""

    def __init__(
        self, find, sentence: str, outer: Iterable[str] = (), after: bool = False, nearest: bool = True
    ):
        self.find, self.sentence, self.after, self.nearest = find(sentence), sentence, after, nearest
        tried = [self.find] if not nearest else []
        tried += [find(t) for t in outer]
        self.fallback = next((frozenset(k for *_, k in f) for f in tried if f), frozenset())

    def at(self, position: int, end: int) -> frozenset:
        if not self.nearest:
            return self.fallback
        found = nearest_group(self.find, position, self.sentence)
        if self.after:
            found |= nearest_group_after(self.find, end, self.sentence)
        return found or self.fallback


def blank_rows(text: str) -> str:
    """``text`` with the rows' names blanked (``XE + ECE-KDE`` names no metric)."""
    for pattern in ROWS.values():
        text = re.sub(pattern, lambda m: " " * len(m.group(0)), text)
    return text


def innermost(headings: list[str], find) -> list[str]:
    return [h for h in reversed(headings) if find(h)][:1]


def prose_numbers(text: str, datasets: Iterable[str]) -> list[Number]:
    """Every number of the prose of ``text`` with its kind and its cell (module docstring)."""
    patterns = dataset_patterns(datasets)
    original = text.split("\n")
    out: list[Number] = []
    index, before = 0, ""
    for headings, start, para in paragraphs(prose(text)):
        context = frozenset(
            n for n, p in CONTEXTS.items() if re.search(p, para + " " + " ".join(headings), re.I)
        )
        header = table_header(para)
        raw = "\n".join(original[start : start + para.count("\n") + 1])  # aligned with ``para``, code kept
        offset, caption = 0, sources(before) if header else frozenset()
        before = raw
        for sentence in sentences(para):
            index += 1
            offset = para.find(sentence, offset)
            named_sources = sources(raw[offset : offset + len(sentence)]) | caption
            row_lam = table_key(header, sentence)
            sentence_rows = frozenset(k for *_, k in mentions(sentence, ROWS, blank=True))
            datasets = lambda t: dataset_mentions(t, patterns)  # noqa: E731
            metrics = lambda t: mentions(blank_rows(t), METRICS)  # noqa: E731
            names = {
                "datasets": Names(datasets, sentence, [*innermost(headings, datasets), para]),
                "rows": Names(lambda t: mentions(t, ROWS, blank=True), sentence),
                "metrics": Names(metrics, sentence, [para, *innermost(headings, metrics)], after=True),
                "flavours": Names(lambda t: mentions(t, FLAVOUR_NAMES), sentence),
                "recals": Names(lambda t: mentions(t, RECAL_NAMES, blank=True), sentence),
                "tables": Names(table_mentions, sentence, [sentence]),
                "lams": Names(lambda_mentions, sentence, nearest=False),
            }
            opens = tuple(i for i, ch in enumerate(sentence) if ch in "()")
            first = next((k for k, ln in enumerate(para.split("\n")) if sentence.strip()[:40] in ln), 0)
            where = original[start + first].strip()
            for m in NUMBER.finditer(sentence):
                value, tol = parse(m.group("num"))
                kind, se = kind_of(sentence, m, tol)
                tol = 0.5 if kind not in ("count", "trial") and not tol else tol  # a whole number, rounded
                cell = {d: n.at(m.start(), m.end()) for d, n in names.items()}
                if LAMBDA_RANGE.search(sentence):
                    cell["lams"] = frozenset()  # a range of λ (``up to λ = 100``): every point
                if cell["lams"] and re.search(r"\balone\b", sentence[: m.start()]):
                    cell["lams"] |= {0.0}  # recalibration alone: the path's λ = 0
                at = LAMBDA_AFTER.match(sentence[m.end() :].replace("−", "-"))
                if at and cell["lams"]:
                    cell["lams"] = frozenset({parse(at.group("num"))[0]})
                elif cell["lams"]:  # the sentence's λ: a cell of no path (published rows) may be meant too
                    cell["lams"] |= {float("nan")}
                source = named_sources
                if header and TABLE_ROW.match(sentence):  # a table's row: its column's header names the cell
                    column = sentence[: m.start()].count("|") - 1
                    cell.update(column_names(header, column))
                    source |= sources(
                        header[column] if 0 <= column < len(header) else "", UNPUBLISHED_COLUMNS
                    )
                    if row_lam is not None:
                        kind, cell["lams"] = ("lambda", frozenset()) if column == 0 else (kind, row_lam)
                if kind == "lambda":
                    cell["lams"] = frozenset()
                in_range = bool(
                    RANGE_END.match(sentence[m.end() :]) or RANGE_START.search(sentence[: m.start()])
                )
                out.append(Number(m.group(0).strip(), value, tol, kind, contexts=context, where=where, se=se,
                                  in_range=in_range, sentence=index, position=m.start(), opens=opens,
                                  sources=source, sentence_rows=sentence_rows, **cell))  # fmt: skip
            for m in WORD.finditer(sentence):
                cell = {d: n.at(m.start(), m.end()) for d, n in names.items()}
                out.append(Number(m.group(1), float(WORDS[m.group(1).lower()]), 0.0, "count", contexts=context,
                                  where=where, sentence=index, position=m.start(), sources=named_sources,
                                  **cell))  # fmt: skip
    return out


def unnamed(number: Number) -> Number:
    """``number`` with no cell named (the scope of the loosest reading)."""
    return replace(number, **{d: frozenset() for d in DIMENSIONS})


# ---- verdicts ----------------------------------------------------------------------------------------------
CLAIM = r"\b(?:C[1-4][ab]?|R[1-5]|D1)\b"
VERDICT = (
    r"\b(?:supported|not reproduced|contradicted|undecided|inconclusive|effect excluded|holds?|held|"
    r"does not hold|do not hold|no longer holds?|fails?)\b"
)
DATED = re.compile(
    r"\b20\d\d-\d\d-\d\d\b|\b(?:the rule of then|an? (?:earlier|former) rule|the rules? then)\b", re.I
)
"""What marks a verdict as a past one (HISTORY.md): a date in its sentence, or naming the rule of then."""


def claim_verdicts(text: str, dated_allowed: bool = False) -> list[str]:
    """Sentences of the prose of ``text`` (outside generated blocks) that state a claim's verdict: they name a
    claim (``C3``, ``R1``, ``D1``) and a verdict word. ``dated_allowed``: a sentence marked as past (:data:`DATED`)
    may (HISTORY.md)."""
    found = []
    for _, _, para in paragraphs(prose(text, dates=True)):
        for sentence in sentences(para):
            flat = " ".join(sentence.split())
            if re.search(CLAIM, flat) and re.search(VERDICT, flat, re.I):
                if not (dated_allowed and DATED.search(flat)):
                    found.append(flat)
    return found
