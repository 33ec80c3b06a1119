"""The ``kcal`` command: one program whose subcommands are kcal's entry points.

    kcal <command> [arguments...]      # the same program, arguments and --help as python -m <module>
    kcal --help                        # the commands, one line each

Each command runs its module as ``python -m <module>`` would (:data:`COMMANDS`), so a Hydra program keeps its
overrides, multirun flag and ``--help``, and an argparse program its options. Nothing is imported before a
command is chosen, so ``kcal --help`` answers at once.
"""

from __future__ import annotations

import runpy
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("kcal.run.train", "train one model: dataset x model x objective x recalibrator (Hydra)"),
    "sweep": ("kcal.sweep.search", "an Optuna TPE sweep of one dataset and objective (Hydra)"),
    "seeds": ("kcal.reruns.seeds", "rerun a study's selected configuration over many seeds (Hydra)"),
    "reproduce": (
        "kcal.orchestrate.reproduce",
        "the paper's protocol end to end: sweeps, seeds, tables (Hydra)",
    ),
    "report": ("kcal.publish.report", "publish a reproduction into the repository, or check a published one"),
    "tables": ("kcal.publish.tables", "the paper's tables and claims from a results.csv"),
    "pareto-report": (
        "kcal.publish.pareto_report",
        "compare the paper's selection with the Pareto selection",
    ),
    "figures": ("kcal.publish.figures", "redraw figures from existing results"),
    "state": ("kcal.orchestrate.state", "export / import a reproduction's portable state"),
    "ablation": ("kcal.reruns.ablation", "rerun a study's best configuration with one key varied (Hydra)"),
    "reevaluate": ("kcal.reruns.reevaluate", "evaluate a root's seeds again from their saved forecasts"),
    "bench": ("kcal.bench.speed", "speed benchmark and whole-protocol estimate"),
    "sweep-throughput": ("kcal.bench.sweep_throughput", "trials per hour of a sweep with several workers"),
    "data": ("kcal.data", "list, check or download the datasets"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: kcal <command> [arguments...]   (kcal <command> --help: that command's arguments)", "",
             "commands:"]  # fmt: skip
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"kcal: unknown command {name!r}; valid: {', '.join(COMMANDS)} (kcal --help)", file=sys.stderr)
        return 2
    module = COMMANDS[name][0]
    sys.argv = [f"kcal {name}", *rest]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
