"""The paper's claims as data, and a verdict per claim from the table cells (:mod:`kcal.publish.table_cells`).

A claim compares rows of one paper table on one metric, per dataset. A dataset counts towards the
denominator only if every row the claim needs has a mean in our results for that flavour ("k/m datasets
run"). "lower"/"higher": the best of the claim's rows is strictly better than every compared row (a tie
does not count). "comparable": not worse than any compared row by more than 2 combined SE. "every":
holds on all m (m >= 1) datasets; "most": on more than half of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from kcal.publish.table_cells import FLAVOUR_LABEL, FLAVOURS, TABLES, cell_frame, fmt, normalise_results


@dataclass(frozen=True)
class Claim:
    id: str
    description: str
    table: str  # a key of TABLES
    metric: str  # ours metric name
    ours: tuple[str, ...]  # row keys; the best of them is compared
    others: tuple[str, ...]  # row keys that must each be beaten (or matched, for "comparable")
    direction: str  # "lower" | "higher" | "comparable" (not worse by > 2 combined SE)
    quantifier: str  # "every" | "most"
    source: str = ""


CLAIMS: tuple[Claim, ...] = (
    Claim("R1", "NLL + MMD has lower QCE than NLL on every regression dataset", "regression", "qce",
          ("NLL + MMD",), ("NLL",), "lower", "every", "§6 Results"),
    Claim("R2", "NLL + MMD has comparable or better NLL than NLL (not worse by > 2 combined SE) on every "
          "regression dataset", "regression", "nll", ("NLL + MMD",), ("NLL",), "comparable", "every", "§6 Results"),
    Claim("R3", "with post-hoc recalibration, NLL + MMD has lower NLL than NLL (smaller sharpness penalty) "
          "on most regression datasets", "regression", "nll", ("NLL + MMD + post-hoc",), ("NLL + post-hoc",),
          "lower", "most", "§6 Results"),
    Claim("R4", "NLL + MMD + post-hoc has the best QCE of the four Table 3 rows on most regression datasets",
          "regression", "qce", ("NLL + MMD + post-hoc",), ("NLL", "NLL + post-hoc", "NLL + MMD"), "lower", "most",
          "§6 Results"),
    Claim("R5", "NLL + MMD (with or without post-hoc) has the best DCE in Table 3 on every regression dataset",
          "regression", "dce", ("NLL + MMD", "NLL + MMD + post-hoc"), ("NLL", "NLL + post-hoc"), "lower", "every",
          "§6.3 Results"),
    Claim("C1", "XE + MMD has higher accuracy than XE + MMCE and XE + ECE KDE on every classification dataset",
          "classification", "acc", ("XE + MMD",), ("XE + MMCE", "XE + ECE KDE"), "higher", "every", "§6 Results"),
    Claim("C2", "XE + MMD has lower ECE than XE, XE + MMCE and XE + ECE KDE on every classification dataset",
          "classification", "ece", ("XE + MMD",), ("XE", "XE + MMCE", "XE + ECE KDE"), "lower", "every",
          "§6 Results"),
    Claim("C3", "XE + MMD has lower entropy than XE, XE + MMCE and XE + ECE KDE on every classification dataset",
          "classification", "entropy", ("XE + MMD",), ("XE", "XE + MMCE", "XE + ECE KDE"), "lower", "every",
          "§6 Results"),
    Claim("C4a", "with temperature scaling, XE + MMD has lower ECE than all baselines on most classification "
          "datasets", "classification_tempscaling", "ece", ("XE + MMD",), ("XE", "XE + MMCE", "XE + ECE KDE"),
          "lower", "most", "§6 Results, Table 5"),
    Claim("C4b", "with temperature scaling, XE + MMD has higher accuracy than all baselines on most "
          "classification datasets", "classification_tempscaling", "acc", ("XE + MMD",),
          ("XE", "XE + MMCE", "XE + ECE KDE"), "higher", "most", "§6 Results, Table 5"),
    Claim("D1", "the tanh kernel k_Y gives lower DCE than the RBF kernel on every regression dataset",
          "decision_kernel", "dce", ("NLL + MMD k_Y=tanh",), ("NLL + MMD k_Y=rbf",), "lower", "every",
          "§6.3 Results, Appendix B"),
)  # fmt: skip


@dataclass
class ClaimResult:
    claim: Claim
    source: str  # a flavour or "paper"
    per_dataset: dict[str, bool] = field(default_factory=dict)  # datasets run -> holds there
    detail: dict[str, str] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return sum(self.per_dataset.values())

    @property
    def m(self) -> int:
        return len(self.per_dataset)

    @property
    def supported(self) -> bool | None:
        if self.m == 0:
            return None
        return self.k == self.m if self.claim.quantifier == "every" else self.k > self.m / 2

    def phrase(self) -> str:
        if self.m == 0:
            return "0 datasets run → not evaluated"
        word = {True: "supported", False: "not supported"}[self.supported]
        run = "datasets" if self.source == "paper" else "datasets run"
        return f"holds on {self.k}/{self.m} {run} → {word}"


def evaluate_claim(claim: Claim, cells: pd.DataFrame, source: str, use_paper: bool = False) -> ClaimResult:
    """Evaluate ``claim`` on the cell frame of its table (ours, or the paper's numbers)."""
    table = TABLES[claim.table]
    met = table.metric(claim.metric)
    mcol, scol = ("paper_mean", "paper_se") if use_paper else ("ours_mean", "ours_se")
    sub = cells[(cells["table"] == claim.table) & (cells["metric"] == claim.metric)]
    idx = sub.set_index(["dataset", "row"])
    out = ClaimResult(claim, source)
    sign = 1.0 if met.lower_is_better else -1.0  # compare sign*value: lower is better
    for ds in table.datasets:
        try:
            vals = {
                r: (float(idx.loc[(ds, r), mcol]), float(idx.loc[(ds, r), scol]))
                for r in claim.ours + claim.others
            }
        except KeyError:
            continue
        if any(math.isnan(v[0]) for v in vals.values()):
            continue
        best_key = min(claim.ours, key=lambda r: sign * vals[r][0])
        bm, bs = vals[best_key]
        ok = True
        for o in claim.others:
            om, os_ = vals[o]
            if claim.direction == "comparable":
                se_c = math.sqrt((0 if math.isnan(bs) else bs) ** 2 + (0 if math.isnan(os_) else os_) ** 2)
                ok &= sign * (bm - om) <= 2 * se_c + 1e-12
            else:
                ok &= sign * bm < sign * om
        out.per_dataset[ds] = bool(ok)
        out.detail[ds] = f"{best_key} {fmt(bm)} vs " + ", ".join(
            f"{o} {fmt(vals[o][0])}" for o in claim.others
        )
    return out


def _claim_results(
    results: pd.DataFrame, flavours: Iterable[str]
) -> list[tuple[Claim, dict[str, ClaimResult]]]:
    results = normalise_results(results)
    frames = {
        fl: {t: cell_frame(results, fl, TABLES[t]) for t in {c.table for c in CLAIMS}} for fl in flavours
    }
    paper_cells = (
        next(iter(frames.values()))
        if frames
        else {t: cell_frame(results, "exact", TABLES[t]) for t in {c.table for c in CLAIMS}}
    )
    out = []
    for c in CLAIMS:
        per = {fl: evaluate_claim(c, frames[fl][c.table], fl) for fl in frames}
        per["paper"] = evaluate_claim(c, paper_cells[c.table], "paper", use_paper=True)
        out.append((c, per))
    return out


def _claim_line(c: Claim, per: dict[str, ClaimResult]) -> str:
    parts = [f"{FLAVOUR_LABEL.get(s, s)}: {r.phrase()}" for s, r in per.items() if s != "paper"]
    parts.append(f"paper's own numbers: {per['paper'].phrase()}")
    quant = "every dataset" if c.quantifier == "every" else "most datasets"
    return f"{c.id} ({quant}) {c.description} — " + "; ".join(parts)


def profile_note(profile: str | None) -> str:
    """Which profile produced the results; a profile other than ``full`` is marked as not evidence."""
    if profile is None:
        return "Profile: not recorded (only profile=full follows the paper's protocol)."
    if profile == "full":
        return "Profile: full (the paper's protocol)."
    return (f"Profile: {profile}, a reduced run (fewer trials, seeds or epochs than the paper): its numbers and "
            "verdicts are NOT evidence for or against the paper's claims.")  # fmt: skip


def verdict_mark(profile: str | None) -> str:
    """Prefix of each verdict of a reduced profile (none for ``full`` or an unrecorded one)."""
    return "" if profile in ("full", None) else f"[profile {profile}: not evidence] "


def claims_summary(
    results: pd.DataFrame, flavours: Sequence[str] = FLAVOURS, profile: str | None = None
) -> list[str]:
    """One line per claim of the paper's text with its verdict under each flavour (and on the paper's
    own numbers), e.g. ``R1 (every dataset) NLL + MMD has lower QCE than NLL on every regression
    dataset — exact: holds on 2/2 datasets run → supported; official-compatible: ...``."""
    return [verdict_mark(profile) + _claim_line(c, per) for c, per in _claim_results(results, flavours)]


def claims_markdown(
    results: pd.DataFrame, flavours: Sequence[str] = FLAVOURS, profile: str | None = None
) -> str:
    evaluated = _claim_results(results, flavours)
    out = [
        "# The paper's claims, checked against our results",
        "",
        f"**{profile_note(profile)}**",
        "",
        "Each claim compares rows of one table on one metric, per dataset. A dataset counts (denominator "
        'm, "datasets run") only if every row the claim needs has a result of ours in that flavour. '
        "*lower/higher*: the best of the claim's rows is strictly better than every compared row (ties do "
        "not count); *comparable*: not worse than a compared row by more than 2·sqrt(se₁² + se₂²). "
        '*every*: holds on all m ≥ 1 datasets run; *most*: on more than half. "paper\'s own numbers" '
        "applies the same test to the paper's printed numbers (all 5 datasets), as a check of the encoding.",
        "",
    ]
    out += [f"- {verdict_mark(profile)}{_claim_line(c, per)}" for c, per in evaluated]
    out += [
        "",
        "## Per dataset",
        "",
        "| claim | source | dataset | holds | values |",
        "|---|---|---|---|---|",
    ]
    for c, per in evaluated:
        for src, r in per.items():
            for ds, ok in r.per_dataset.items():
                out.append(
                    f"| {c.id} | {FLAVOUR_LABEL.get(src, src)} | {ds} | {'yes' if ok else 'no'} | {r.detail[ds]} |"
                )
    out += ["", "## Claim definitions", "", "| id | table | metric | rows | compared with | direction | quantifier | paper |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for c in CLAIMS:
        out.append(f"| {c.id} | {TABLES[c.table].number} ({c.table}) | {c.metric} | {' / '.join(c.ours)} | "
                   f"{', '.join(c.others)} | {c.direction} | {c.quantifier} | {c.source} |")  # fmt: skip
    return "\n".join(out) + "\n"
