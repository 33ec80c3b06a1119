"""Cost of the regression MMD regulariser relative to a Gaussian-MLP training step (CPU).

Measures, with ``torch.set_num_threads(2)``, the median wall time of

* ``regression_mmd`` forward + backward (w.r.t. mean and std), form="individual", rbf on y and x,
  batch 512, 10 samples, d = 102 (crime-sized features), for pairing "index" (the authors' estimator),
  "cross" and "analytic" (closed-form marginalisation);
* one forward + backward of a 3 x 256 Gaussian MLP (102 -> 256 -> 256 -> 256 -> 2, NLL loss) at batch 512,

and prints the ratios (target: <= 0.1). Timings are interleaved (round-robin) so that load from other
processes affects all candidates alike. Usage: ``python -m kcal.bench.mmd_cost [--repeats 40]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from kcal.mmd import regression_mmd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--dim", type=int, default=102)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-cross", action="store_true", help="skip the (slow) cross pairing")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    n, d = args.batch, args.dim
    x = torch.randn(n, d)
    y = torch.randn(n)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(d, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 2),
    )
    with torch.no_grad():
        out = mlp(x)
    mean0 = out[:, 0].clone()
    std0 = torch.nn.functional.softplus(out[:, 1]).clamp_min(0.05)
    # median pairwise squared distance of x as the x-bandwidth, so the x-kernel is not ~identity
    bw_x = float(torch.cdist(x, x).square().median())

    def step_mlp() -> None:
        mlp.zero_grad(set_to_none=True)
        o = mlp(x)
        sd = torch.nn.functional.softplus(o[:, 1]).clamp_min(0.05)
        nll = -torch.distributions.Normal(o[:, 0], sd).log_prob(y).mean()
        nll.backward()

    def make_step(pairing: str):
        def step() -> None:
            mean = mean0.clone().requires_grad_()
            std = std0.clone().requires_grad_()
            v = regression_mmd(
                mean,
                std,
                y,
                x,
                form="individual",
                kernel_y="rbf",
                bandwidth_y=1.0,
                kernel_z="rbf",
                bandwidth_z=bw_x,
                num_samples=args.samples,
                pairing=pairing,
                validate_args=False,  # as the training step calls it: no host sync for the value checks
            )
            v.backward()

        return step

    cands = {"mlp": step_mlp, "mmd_index": make_step("index"), "mmd_analytic": make_step("analytic")}
    if not args.no_cross:
        cands["mmd_cross"] = make_step("cross")
    times: dict[str, list[float]] = {k: [] for k in cands}
    for f in cands.values():  # warm-up
        for _ in range(3):
            f()
    for _ in range(args.repeats):
        for k, f in cands.items():
            reps = 1 if k == "mmd_cross" else 3
            t0 = time.perf_counter()
            for _ in range(reps):
                f()
            times[k].append((time.perf_counter() - t0) / reps)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"torch {torch.__version__}, threads={torch.get_num_threads()}, batch={n}, d={d}, "
        f"samples={args.samples}, repeats={args.repeats}"
    )
    for k, v in med.items():
        print(f"{k:>14s}: {v * 1e3:8.2f} ms (fwd+bwd, median)")
    for k in med:
        if k != "mlp":
            print(f"ratio {k}/mlp = {med[k] / med['mlp']:.3f}")


if __name__ == "__main__":
    main()
