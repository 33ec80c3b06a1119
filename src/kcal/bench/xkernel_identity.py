"""How far the MMD's x-kernel is from the identity on a dataset's standardised training rows (default crime).

The training rows of ``kcal.data.load(<dataset>)`` (official protocol: features standardised with the
whole data set's statistics) are cut into consecutive batches of 64 in their stored order, all rows
included (the last batch holds the remainder). For each bandwidth, :func:`kcal.kernels.rbf`
(``exp(-||a - b||^2 / bandwidth)``) gives each batch's Gram matrix in float64, and the table shows, over
all batches, the largest and the mean off-diagonal value, the share of off-diagonal values above 0.5 (pairs
that the kernel treats as near-duplicates), and the smallest squared distance between two distinct rows of
a batch. Training reshuffles the batches every epoch, so the smallest squared distance
over all pairs of training rows, and its kernel value at bandwidth 0.1, follow the table. ``log10 max`` is the exact exponent of the largest value,
``-min d^2 / (bandwidth ln 10)``: float64 underflows to 0 below about 1e-308 (4.9e-324 with subnormals),
so a value printed as 0 is one below that. The bandwidths: the authors' HEAD regression range
(1e-5 to 0.1), 1, 10, 100, any given with ``--bandwidths`` (a selected trial's ``objective.params.bandwidth_z``,
say) and the median heuristic on the training rows (:func:`kcal.kernels.median_heuristic`). Usage:
``KCAL_DATA_DIR=... python -m kcal.bench.xkernel_identity [--dataset crime] [--batch 64] [--bandwidths 1.25 ...]``.
"""

from __future__ import annotations

import argparse
import math

import torch

from kcal.data import load
from kcal.kernels import median_heuristic, rbf, sq_dist


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="crime")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--bandwidths", type=float, nargs="*", default=[],
                    help="more bandwidths to tabulate (e.g. a selected trial's bandwidth_z)")  # fmt: skip
    args = ap.parse_args()

    x = load(args.dataset).train.x.to(torch.float64)
    batches = list(torch.split(x, args.batch))
    median = median_heuristic(x)
    min_d2 = min(float(off_diagonal(sq_dist(b, b)).min()) for b in batches if len(b) > 1)
    print(f"{args.dataset}: {len(x)} training rows x {x.shape[1]} features, {len(batches)} batches "
          f"(sizes {sorted({len(b) for b in batches})}); median heuristic {median:.6g}\n")  # fmt: skip
    print(
        "| bandwidth | largest off-diagonal | log10 max (exact) | mean off-diagonal | share > 0.5 | smallest d^2 |"
    )
    print("|---|---|---|---|---|---|")
    rows = [(f"{bw:g}", bw) for bw in (1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0, *args.bandwidths)]
    rows.append((f"median heuristic {median:.4g}", median))
    for label, bw in sorted(set(rows), key=lambda row: row[1]):
        values = torch.cat([off_diagonal(rbf(b, b, bandwidth=bw)) for b in batches if len(b) > 1])
        print(f"| {label} | {float(values.max()):.3e} | {-min_d2 / (bw * math.log(10)):.4g} "
              f"| {float(values.mean()):.3e} | {float((values > 0.5).double().mean()):.3e} | {min_d2:.4g} |")  # fmt: skip
    # training batches are reshuffled every epoch, so any two training rows can share one
    any_pair = smallest_distinct_pair(x)
    print(f"\nsmallest d^2 over all pairs of training rows (any two can share a shuffled batch): {any_pair:.4g}; "
          f"at bandwidth 0.1 its kernel value is {math.exp(-any_pair / 0.1):.3e} "
          f"(log10 {-any_pair / (0.1 * math.log(10)):.4g})")  # fmt: skip


def smallest_distinct_pair(x: torch.Tensor, block: int = 2048) -> float:
    """The smallest squared distance between two rows ``i != j`` of ``x`` (0 for duplicated rows), over blocks
    of ``block`` rows so that memory stays ``block x n`` (blog's 36 677 training rows would need 11 GB at once)."""
    best = math.inf
    for start in range(0, len(x), block):
        d2 = sq_dist(x[start : start + block], x)
        rows = torch.arange(start, min(start + block, len(x)))
        d2[rows - start, rows] = math.inf  # each row against itself
        best = min(best, float(d2.min()))
    return best


def off_diagonal(gram: torch.Tensor) -> torch.Tensor:
    """The entries ``(i, j)``, ``i != j``, of a square matrix, flattened."""
    n = gram.shape[-1]
    return gram[~torch.eye(n, dtype=torch.bool)]


if __name__ == "__main__":
    main()
