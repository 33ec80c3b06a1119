"""``kcal data``: list every dataset with its shapes and where its files were found.

``--check`` verifies every file that is present and exits 1 only when one is corrupt (a checksum mismatch, or
a parse giving NaN); absent datasets are listed, not an error (exit 0). ``--download`` fetches missing files
first.
"""

from __future__ import annotations

import argparse
import sys

from kcal.data.dataset import ParsedDataError, parsed_arrays
from kcal.data.registry import dataset_names, get_spec
from kcal.data.sources import ChecksumError, DatasetUnavailableError, mirror_dir, offline, unavailable_hint


def rows(download: bool = False) -> list[dict]:
    out = []
    for name in dataset_names():
        spec = get_spec(name)
        row = {"name": name, "task": spec.task, "n raw": "-", "n used": "-", "d": spec.d,
               "m": spec.m if spec.m else "-", "found": "", "checksum": ""}  # fmt: skip
        try:
            x, y, n_raw, sources = parsed_arrays(name, download=download)
            origins = sorted({s.split(":", 1)[0] for s in sources.values()})
            row.update({"n raw": n_raw, "n used": len(y), "d": x.shape[1], "found": "+".join(origins),
                        "checksum": "ok"})  # fmt: skip
        except DatasetUnavailableError:
            row["found"], row["checksum"] = "not available offline" if offline() else "not available", "-"
        except ChecksumError as exc:
            row["found"], row["checksum"], row["error"] = "found", "MISMATCH", str(exc)
        except ParsedDataError as exc:
            row["found"], row["checksum"], row["error"] = "found", "BAD VALUES", str(exc)
        out.append(row)
    return out


def format_table(table: list[dict]) -> str:
    cols = list(table[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in table)) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols), "  ".join("-" * widths[c] for c in cols)]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in cols) for r in table]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kcal data", description=__doc__)
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a present file is corrupt (checksum mismatch, or NaN once parsed); "
                         "absent datasets are listed but are not an error (exit 0)")  # fmt: skip
    ap.add_argument("--download", action="store_true", help="download missing files into the cache")
    args = ap.parse_args(argv)
    table = rows(download=args.download)
    print(f"mirror (KCAL_DATA_DIR): {mirror_dir() or 'not set'}")
    print(format_table([{k: v for k, v in r.items() if k != "error"} for r in table]))
    corrupt = [r["name"] for r in table if "error" in r]
    for r in table:
        if "error" in r:
            print(f"data error: {r['error']}", file=sys.stderr)
    if any(r["checksum"] == "-" for r in table):
        print(f"unavailable (files not found): {', '.join(r['name'] for r in table if r['checksum'] == '-')}. "
              f"{unavailable_hint('<dataset>')}", file=sys.stderr)  # fmt: skip
    if args.check:
        print(f"check: {'corrupt: ' + ', '.join(corrupt) if corrupt else 'every present file verifies'}",
              file=sys.stderr)  # fmt: skip
    return 1 if (args.check and corrupt) else 0


if __name__ == "__main__":
    sys.exit(main())
