"""A published row trained again by today's engine, checked against the published one within its seed SE.

    kcal seeds dataset=heart-disease objective=xe profile=full \\
        seeds_run.best_file=docs/results/full/best/heart-disease__xe.json root=/tmp/retrain
    python -m kcal.publish.retrained /tmp/retrain/heart-disease/xe/summary.csv

Every published row keeps the commit it was trained on; a rerun of its recorded configuration
(``seeds_run.best_file``: the selected trial's parameters) on a later engine trains the same seeds with other
rounding at most. A retrained metric is *within* when ``|retrained mean - published mean| <= k * SE``, SE the
published seed SE (``--k``, default 1); a metric whose published SE is 0 (every seed gave one number) is within
when the two means agree to ``1e-9`` relative. The exit status is 0 when every metric compared is within, 1
otherwise; a retrained metric without a published row is listed and not counted.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from kcal.core.layout import RESULTS_FILE, published_data
from kcal.paper import RESULT_COLUMNS

KEYS = list(RESULT_COLUMNS[:5])
"""What names a row: dataset, objective, recalibrator, flavour, metric."""


def compare(published: pd.DataFrame, retrained: pd.DataFrame, k: float = 1.0) -> pd.DataFrame:
    """One row per retrained metric (``KEYS``): ``published`` and ``retrained`` means, ``se`` (the published seed
    SE), ``difference`` (retrained - published), ``in_se`` (``|difference| / se``; NaN where the SE is 0) and
    ``within`` (True, False, or NA where nothing is published)."""
    merged = retrained[KEYS + ["mean"]].merge(
        published[KEYS + ["mean", "se"]], on=KEYS, how="left", suffixes=("_retrained", "_published")
    )
    out = merged[KEYS].copy()
    out["published"], out["retrained"] = merged["mean_published"], merged["mean_retrained"]
    out["se"] = merged["se"]
    out["difference"] = out["retrained"] - out["published"]
    out["in_se"] = (out["difference"].abs() / out["se"]).where(out["se"] > 0)
    columns = zip(out["difference"], out["se"], out["published"], strict=True)
    out["within"] = [within(d, se, p, k) for d, se, p in columns]
    return out


def within(difference: float, se: float, published: float, k: float) -> bool | None:
    """``|difference| <= k * se``; for a zero SE, agreement to 1e-9 relative; ``None`` without a published row."""
    if published is None or math.isnan(published):
        return None
    if se > 0:
        return abs(difference) <= k * se
    return abs(difference) <= 1e-9 * max(1.0, abs(published))


def lines(table: pd.DataFrame, k: float) -> list[str]:
    """The comparison as text: one line per metric and a last line counting those within ``k`` SE."""
    out = []
    for row in table.itertuples(index=False):
        name = " ".join(str(getattr(row, key)) for key in KEYS)
        if row.within is None:
            out.append(f"{name}: retrained {row.retrained:.6g}, no published row")
            continue
        ratio = "" if math.isnan(row.in_se) else f", {row.in_se:.2f} SE"
        verdict = "within" if row.within else "OUTSIDE"
        out.append(f"{name}: published {row.published:.6g}, retrained {row.retrained:.6g}, "
                   f"difference {row.difference:+.3g}{ratio}: {verdict}")  # fmt: skip
    judged = table[table["within"].notna()]
    out.append(f"{int(judged['within'].sum())} of {len(judged)} metrics within {k:g} published seed SE")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kcal.publish.retrained", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "summaries", nargs="+", type=Path, help="the retrained rows' summary.csv (kcal seeds)"
    )
    parser.add_argument("--published", type=Path, default=published_data("full") / RESULTS_FILE,
                        help="the published results.csv (default: the packaged full reproduction's)")  # fmt: skip
    parser.add_argument("--k", type=float, default=1.0, help="how many published seed SE a metric may move")
    args = parser.parse_args(argv)
    if args.k <= 0:
        parser.error(f"--k={args.k} must be above 0")
    for path in [args.published, *args.summaries]:
        if not path.is_file():
            parser.error(f"{path} is not a file")
    retrained = pd.concat([pd.read_csv(p) for p in args.summaries], ignore_index=True)
    table = compare(pd.read_csv(args.published), retrained, args.k)
    print("\n".join(lines(table, args.k)))
    return 0 if table["within"].dropna().all() else 1


if __name__ == "__main__":
    sys.exit(main())
