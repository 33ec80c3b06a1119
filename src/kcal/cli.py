"""The ``kcal`` command: one program whose subcommands are kcal's entry points.

    kcal <command> [arguments...]      # the same program, arguments and --help as python -m <module>
    kcal --help                        # the commands, one line each

Each command runs its module as ``python -m <module>`` would (:data:`COMMANDS`), so a Hydra program keeps its
overrides, multirun flag and ``--help``, and an argparse program its options. Nothing is imported before a
command is chosen, so ``kcal --help`` answers at once. Every command is the pipeline: where a package of its
extra is missing (a ``pip install kcal`` holds the library alone), the command says in one line which extra
to install and exits 2.
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
    "variant-report": (
        "kcal.publish.variant_report",
        "publish a finished protocol run on N workers, or pruned, beside the full protocol's runs",
    ),
    "tables": ("kcal.publish.tables", "the paper's tables and claims from a results.csv"),
    "pareto-report": (
        "kcal.publish.pareto_report",
        "compare the paper's selection with the Pareto selection",
    ),
    "figures": ("kcal.publish.figures", "redraw figures from existing results"),
    "state": ("kcal.orchestrate.state", "export / import a reproduction's portable state"),
    "ablation": ("kcal.reruns.ablation", "rerun a study's best configuration with one key varied (Hydra)"),
    "paths": (
        "kcal.reruns.paths",
        "regularisation paths of one dataset from its unregularised selected configuration (Hydra)",
    ),
    "reevaluate": ("kcal.reruns.reevaluate", "evaluate a root's seeds again from their saved forecasts"),
    "bench": ("kcal.bench.speed", "speed benchmark and whole-protocol estimate"),
    "sweep-throughput": ("kcal.bench.sweep_throughput", "trials per hour of a sweep with several workers"),
    "data": ("kcal.data", "list, check or download the datasets"),
}

#: the extra that holds the commands' packages (pyproject.toml, [project.optional-dependencies])
PIPELINE_EXTRA = "pipeline"
#: the modules that the commands import and a library-only install lacks: those of the extra's packages and of
#: what they bring (omegaconf with Hydra, sqlalchemy with Optuna, lightning_fabric with Lightning)
PIPELINE_MODULES = frozenset({
    "hydra", "hydra_plugins", "omegaconf", "pytorch_lightning", "lightning_fabric", "optuna", "sqlalchemy",
    "pandas", "sklearn", "ucimlrepo", "matplotlib", "tqdm", "psycopg2", "submitit", "pebble",
})  # fmt: skip


def missing_pipeline_module(exc: ModuleNotFoundError) -> str | None:
    """The top-level module of the pipeline's that ``exc`` found missing, or None for any other module."""
    top = (exc.name or "").partition(".")[0]
    return top if top in PIPELINE_MODULES else None


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
    except ModuleNotFoundError as exc:
        missing = missing_pipeline_module(exc)
        if missing is None:
            raise
        print(f"kcal {name}: needs the pipeline's packages ({missing} is not installed): "
              f'pip install "kcal[{PIPELINE_EXTRA}]"', file=sys.stderr)  # fmt: skip
        return 2
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
