"""What a Hydra entry point checks before Hydra starts: a bad command line is one line and writes nothing.

:func:`checks_config` (put above ``@hydra.main``) composes the command line's config as Hydra will and reports
as one line on stderr with exit status 2 (:func:`kcal.core.errors.exits_on_config_error`), before Hydra makes
its run directory (under ``root`` for every program but ``kcal train``) or kcal writes anything:

* a misspelt config name (``dataset=crme``: :func:`kcal.core.errors.unknown_choices`);
* a key the config does not have (``trainer.max_epoch=3``), naming the closest keys it has; any other
  override Hydra cannot compose, in Hydra's words on one line;
* a value of the wrong type (``objective.weight=abc``: :func:`kcal.core.errors.mistyped_overrides`), then every
  value and every pair of values that the entry point's :class:`~kcal.core.schema.Schema` refuses.

A multirun (``-m``) checks every value it sweeps (the other swept keys at their first value). Left to Hydra:
``--help``, ``--cfg``, ``--info``, shell completion, a sweep over a glob or an interval, and a command line
that replaces kcal's configs (``--config-path``, ``hydra.searchpath``).
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

from kcal.configs import CONFIG_PATH
from kcal.core.errors import ConfigError, exits_on_config_error, mistyped_overrides, unknown_choices
from kcal.core.schema import Schema, close_keys

#: the flags of Hydra's command line that take a value and that the check reads
VALUE_FLAGS = {"-cd": "dir", "--config-dir": "dir", "-cn": "name", "--config-name": "name"}
RUN_FLAGS = ("-m", "--multirun", "-r", "--run")
MAX_UNKNOWN = 10  # unknown keys named in one message


def checks_config(config_name: str, schema: Schema):
    """Decorate a Hydra entry point (above ``@hydra.main(config_name=config_name)``): check its command line's
    config against ``schema`` before Hydra starts (see the module docstring)."""

    def decorate(main):
        @functools.wraps(main)
        def wrapper(*args, **kwargs):
            def check() -> None:
                check_command_line(config_name, schema, sys.argv[1:])

            check.__module__ = main.__module__  # Ctrl-C during the check: the entry point's message
            exits_on_config_error(check)()
            return main(*args, **kwargs)

        return wrapper

    return decorate


def check_command_line(config_name: str, schema: Schema, argv: list[str]) -> None:
    """Raise :class:`ConfigError` for the first job of ``argv`` whose config is invalid (see the module docstring)."""
    problems = unknown_choices(argv)
    if problems:
        raise ConfigError("; ".join(problems))
    parsed = command_line(argv)
    if parsed is None:
        return
    name, overrides, multirun = parsed
    name = name or config_name
    every = jobs(overrides) if multirun else [overrides]
    if not every:
        return
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if (
        GlobalHydra.instance().is_initialized()
    ):  # called inside another Hydra app, which checks its own config
        return
    with initialize_config_module(config_module=CONFIG_PATH.removeprefix("pkg://"), version_base="1.3"):
        for job in every:
            check_job(name, job, schema)


def command_line(argv: list[str]) -> tuple[str | None, list[str], bool] | None:
    """``(config name or None, overrides, multirun)`` of a Hydra command line, a ``--config-dir`` as the
    ``hydra.searchpath`` override it stands for; None for one the check leaves to Hydra."""
    name, folder, overrides, multirun = None, None, [], False
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        if flag in VALUE_FLAGS:
            if not eq:
                i += 1
                if i == len(argv):
                    return None
                value = argv[i]
            if VALUE_FLAGS[flag] == "name":
                name = value
            else:
                folder = Path(value).resolve()
        elif arg in RUN_FLAGS:
            multirun = multirun or arg in ("-m", "--multirun")
        elif arg.startswith("-"):  # --help, --cfg, --info, --config-path, ...: Hydra's
            return None
        else:
            overrides.append(arg)
        i += 1
    if any(o.lstrip("+~").startswith("hydra.searchpath") for o in overrides):
        return None
    if folder is not None:
        if not folder.is_dir():
            return None  # Hydra says that it is not found
        overrides.append(f"hydra.searchpath=[file://{folder}]")
    return name, overrides, multirun


def jobs(overrides: list[str]) -> list[list[str]]:
    """The overrides of the jobs a multirun's check composes: every swept key at its first value, then each
    other value of each swept key alone; empty when a sweep cannot be listed (a glob, an interval) or parsed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # noqa: BLE001 - Hydra reports what it cannot parse
        return []
    first, others = [], []
    for i, override in enumerate(parsed):
        if not override.is_sweep_override():
            first.append(override.input_line)
            continue
        if not isinstance(override.value(), ChoiceSweep | RangeSweep):
            return []
        values = [f"{override.get_key_element()}={v}" for v in override.sweep_string_iterator()]
        if not values:
            return []
        first.append(values[0])
        others += [(i, v) for v in values[1:]]
    return [first] + [[*first[:i], v, *first[i + 1 :]] for i, v in others]


def check_job(config_name: str, overrides: list[str], schema: Schema) -> None:
    """Compose one job's config (in an initialised Hydra) and raise :class:`ConfigError` for its first problem."""
    from hydra import compose
    from hydra.errors import HydraException

    try:
        cfg = compose(config_name, overrides=overrides)
    except HydraException as exc:
        raise ConfigError(composition_problem(config_name, overrides, exc)) from None
    problems = mistyped_overrides(cfg, config_name, overrides)
    if problems:
        raise ConfigError("; ".join(problems))
    schema.validate(cfg)


UNKNOWN_KEY = re.compile(r"Could not override '([^']+)'\.\s*To append to your config use \+")


def composition_problem(config_name: str, overrides: list[str], exc: Exception) -> str:
    """Why Hydra cannot compose ``overrides``, in one line: every key the config does not have, with the closest
    keys it has (``no key trainer.max_epoch in kcal train's config; close keys: trainer.max_epochs``); else
    Hydra's own message."""
    from hydra import compose
    from hydra.errors import HydraException

    first, unknown, left = exc, [], list(overrides)
    while (found := UNKNOWN_KEY.search(str(exc))) and len(unknown) < MAX_UNKNOWN:
        key = found.group(1)
        given = [o for o in left if o.partition("=")[0] == key]
        unknown.append((key, given[0].partition("=")[2] if given else "..."))
        left = [o for o in left if o not in given]
        try:
            keys = known_keys(compose(config_name, overrides=left))
            break
        except HydraException as again:
            exc = again
    else:
        return f"kcal {config_name}: {' '.join(str(first).split())}"
    if any(key in keys for key, _ in unknown):  # a key it has, with a value Hydra cannot merge into it
        return f"kcal {config_name}: {' '.join(str(first).split())}"
    return "; ".join(f"no key {key} in kcal {config_name}'s config; close keys: "
                     f"{', '.join(close_keys(key, keys)) or 'none'} (to add a key of your own: +{key}={value})"
                     for key, value in unknown)  # fmt: skip


def known_keys(cfg) -> list[str]:
    """Every key of ``cfg`` (mappings and their keys), dotted."""
    from omegaconf import OmegaConf

    out = []

    def walk(node: dict, prefix: str) -> None:
        for name, child in node.items():
            out.append(f"{prefix}{name}")
            if isinstance(child, dict):
                walk(child, f"{prefix}{name}.")

    walk(OmegaConf.to_container(cfg, resolve=False), "")
    return out
