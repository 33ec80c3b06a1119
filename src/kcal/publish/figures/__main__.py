"""``kcal figures``: redraw figures from existing results (no training unless ``local --train``).

    kcal figures run <run_dir> [<run_dir> ...]
    kcal figures reproduction [<root> ...] [--runs] [--datasets D ...] [--out DIR]
    kcal figures local [--train] [--datasets crime crop-yield] [--root DIR] [--seed K]
                                 [--override KEY=VALUE ...] [--lce-bandwidth BW]
    kcal figures all [<root>] [--local-root DIR]

``<root>`` is a ``kcal.orchestrate.reproduce`` output root, ``outputs/reproduce/<profile>`` (default
``outputs/reproduce/full``); local-calibration runs live in ``outputs/local_calibration``
(:mod:`kcal.core.layout`). ``reproduction`` over several roots merges their seed runs (each objective of a
dataset from one root) and draws under the first root's ``figures/``, or ``--out``. ``all`` is what ``make figures`` runs: ``kcal figures all outputs/reproduce/$(PROFILE)``.

Exit status 0 on success, 2 when an input is missing (the message names the command producing it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kcal.core import layout
from kcal.core.errors import ConfigError, exits_on_user_error, unknown_name
from kcal.core.plotting import MissingInputError
from kcal.data import DatasetUnavailableError
from kcal.publish.figures.local_maps import draw_local_maps, train_command
from kcal.publish.figures.reproduction import draw_reproduction
from kcal.reruns.local_calibration import LOCAL_DATASETS, LOCAL_OBJECTIVES, train_local
from kcal.run.plots import draw_run_figures

DEFAULT_ROOT = layout.reproduce_root("full")


def _print_paths(paths) -> None:
    for p in paths:
        print(p)


def _cmd_run(args) -> int:
    for d in args.run_dirs:
        if not Path(d).is_dir():
            raise MissingInputError(f"run directory {d} does not exist; runs are written by `kcal train`")
        _print_paths(draw_run_figures(Path(d)))
    return 0


def _cmd_reproduction(args) -> int:
    roots = args.roots or [DEFAULT_ROOT]
    _print_paths(draw_reproduction(roots, runs_too=args.runs, out_dir=args.out, datasets=args.datasets))
    return 0


def _cmd_local(args) -> int:
    if args.train:
        train_local(args.datasets, args.root, seed=args.seed, overrides=args.override or ())
    elif args.override:
        raise SystemExit("--override only applies with --train")
    paths, summary = draw_local_maps(args.root, args.datasets, bandwidth=args.lce_bandwidth)
    _print_paths(paths)
    for ds, entry in summary.items():
        if ds in args.datasets:
            means = ", ".join(f"{obj}={v['lce_total']['mean']:.5f}" for obj, v in entry["objectives"].items())
            print(
                f"{ds}: mean LCE_total {means} (bandwidth {entry['bandwidth']:.3g}, n_test {entry['n_test']})"
            )
    return 0


def _cmd_all(args) -> int:
    _print_paths(draw_reproduction(args.root, runs_too=True))
    have = [ds for ds in LOCAL_DATASETS
            if all((args.local_root / ds / o / layout.PREDICTIONS_FILE).is_file() for o in LOCAL_OBJECTIVES)]  # fmt: skip
    if have:
        _print_paths(draw_local_maps(args.local_root, have)[0])
    skipped = [ds for ds in LOCAL_DATASETS if ds not in have]
    if skipped:
        print(f"note: local-calibration maps skipped for {', '.join(skipped)} (no runs under {args.local_root}); "
              f"produce them with `{train_command(skipped)}`", file=sys.stderr)  # fmt: skip
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kcal figures", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser(
        "run", help="per-run figures into <run_dir>/figures (from config.yaml + predictions.npz)"
    )
    r.add_argument("run_dirs", nargs="+", type=Path)
    r.set_defaults(func=_cmd_run)
    rep = sub.add_parser("reproduction", help="DCE-over-training and per-dataset figures into <root>/figures")
    rep.add_argument("roots", nargs="*", type=Path, metavar="root",
                     help=f"default {DEFAULT_ROOT}; several: their seed runs merged (an objective from one root)")  # fmt: skip
    rep.add_argument("--runs", action="store_true", help="also redraw every seed run's own figures")
    rep.add_argument("--datasets", nargs="+", metavar="D", help="draw only these datasets")
    rep.add_argument(
        "--out", type=Path, help="write the dataset figures here instead of <first root>/figures"
    )
    rep.set_defaults(func=_cmd_reproduction)
    loc = sub.add_parser("local", help="local calibration (LCE) maps; --train trains the runs first")
    loc.add_argument(
        "--train", action="store_true", help="train NLL and NLL + MMD (local) first (kcal.run.run)"
    )
    loc.add_argument(
        "--datasets", nargs="+", default=list(LOCAL_DATASETS), help=f"of {', '.join(LOCAL_DATASETS)}"
    )
    loc.add_argument("--root", type=Path, default=layout.LOCAL_ROOT, help=f"default {layout.LOCAL_ROOT}")
    loc.add_argument("--seed", type=int, default=0)
    loc.add_argument("--override", "-o", action="append", metavar="KEY=VALUE",
                     help="extra Hydra override for training, repeatable (e.g. -o trainer.max_epochs=100)")  # fmt: skip
    loc.add_argument("--lce-bandwidth", type=float, default=None,
                     help="RBF bandwidth of the LCE kernel on standardised phi(x); default 0.1 x median "
                          "squared distance between the test rows")  # fmt: skip
    loc.set_defaults(func=_cmd_local)
    a = sub.add_parser(
        "all", help="reproduction figures + every run's figures + local maps (if their runs exist)"
    )
    a.add_argument("root", nargs="?", type=Path, default=DEFAULT_ROOT, help=f"default {DEFAULT_ROOT}")
    a.add_argument("--local-root", type=Path, default=layout.LOCAL_ROOT, help=f"default {layout.LOCAL_ROOT}")
    a.set_defaults(func=_cmd_all)
    return p


def check_datasets(args) -> None:
    """A misspelt ``local --datasets`` name is one line listing the datasets the maps are drawn for (a
    ``reproduction --datasets`` name not in the roots is refused by :func:`draw_reproduction`, naming those
    that are)."""
    if args.func is _cmd_local:
        for name in args.datasets:
            if name not in LOCAL_DATASETS:
                raise ConfigError(unknown_name("dataset", name, LOCAL_DATASETS))


@exits_on_user_error
def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    check_datasets(args)
    try:
        return args.func(args)
    except (MissingInputError, DatasetUnavailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
