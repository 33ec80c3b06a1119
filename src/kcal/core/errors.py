"""Errors a user can fix, and how entry points report them: one line on stderr, never a traceback.

* :class:`ConfigError` (an invalid value, a wrongly typed override, a misspelt name, a resume with another
  config) and :class:`DataError` (a raw file missing or failing its checksum) exit with status 2;
* :class:`IncompleteError` (a run that could not produce what it was asked for, e.g. a study with
  no usable trial or a reproduction with datasets left out) exits with status 2 as well;
* Ctrl-C (``KeyboardInterrupt``) exits with status 130 and says how to resume.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C
RESUMABLE = (
    "kcal.sweep.search",
    "kcal.reruns.seeds",
    "kcal.orchestrate.reproduce",
)  # entry points whose finished work is kept


class ConfigError(ValueError):
    """An invalid configuration value, reported before any training starts."""


class DataError(RuntimeError):
    """A dataset's raw files cannot be had, or fail their checksum."""


class IncompleteError(RuntimeError):
    """A run finished without producing all that it was asked for."""


class TaskLost(RuntimeError):
    """A worker's task that cannot finish through no fault of its own: its trial was failed as stale by another
    process while it trained (a starved or paused worker), or the study storage stayed busy past its timeout.
    A reproduction's pool counts it like a dead worker's task and goes on (:mod:`kcal.orchestrate.workers`)."""


def mistyped_overrides(cfg, config_name: str | None = None, overrides: list[str] | None = None) -> list[str]:
    """Command-line overrides ``key=value`` whose value is text where the config holds a number or a
    boolean, e.g. ``objective.weight=abc``; one message per override. ``config_name`` and ``overrides``: those
    ``cfg`` was composed from (default: the running Hydra app's); empty outside an initialised Hydra."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(cfg, DictConfig) or not GlobalHydra().is_initialized():
        return []
    if config_name is None:
        if not HydraConfig.initialized():
            return []
        hc = HydraConfig.get()
        config_name, overrides = hc.job.config_name, list(hc.overrides.task)
    import hydra

    overrides = list(overrides or [])
    problems = []
    for i, override in enumerate(overrides):
        key, sep, _ = override.lstrip("+~").partition("=")
        try:
            value = OmegaConf.select(cfg, key, default=None) if sep else None
            if not isinstance(value, str) or _is_number(value):
                continue
            others = overrides[:i] + overrides[i + 1 :]
            default = OmegaConf.select(hydra.compose(config_name, overrides=others), key, default=None)
        except Exception:  # a key this check cannot resolve: left to the run itself
            continue
        if isinstance(default, bool):
            problems.append(f"{key}={value!r} is not a boolean; pass {key}=true or {key}=false")
        elif isinstance(default, int | float):
            problems.append(f"{key}={value!r} is not a number; pass a number, e.g. {key}={default}")
    return problems


def unknown_name(kind: str, name: str, valid) -> str:
    """``unknown dataset 'crme'; valid names: adult, blog, ...``: the one form every misspelt name takes."""
    return f"unknown {kind} {name!r}; valid names: {', '.join(valid)}"


def check_choices(group: str, names) -> None:
    """Raise :class:`ConfigError` for the first of ``names`` that is not a config of ``group`` (``objective``,
    ``dataset``, ...: :func:`kcal.configs.choices`), listing the valid ones. A variant label
    (``nll_mmd@samples=10``) is checked by the objective before its ``@``."""
    from kcal.configs import choices

    valid = choices(group)
    for name in names:
        if str(name).split("@", 1)[0] not in valid:
            raise ConfigError(unknown_name(group, str(name), valid))


def unknown_choices(argv: list[str]) -> list[str]:
    """One message per command-line override ``group=name`` (also ``+group=name`` and a multirun's
    ``group=a,b``) whose group is a folder of kcal's configs (or of a ``--config-dir``) that holds no config
    ``name``: ``unknown dataset 'crme'; valid names: adult, blog, ...``. Hydra's own groups (``hydra/...``),
    a ``--config-path`` or ``hydra.searchpath`` of the user's, and what Hydra's parser refuses are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep

    from kcal.configs import choices

    dirs, overrides = [], []
    for i, arg in enumerate(argv):
        if arg in ("-cp", "--config-path") or arg.startswith("--config-path="):
            return []
        if arg in ("-cd", "--config-dir") and i + 1 < len(argv):
            dirs.append(Path(argv[i + 1]))
        elif arg.startswith("--config-dir="):
            dirs.append(Path(arg.partition("=")[2]))
        elif "=" in arg and not arg.startswith("-"):
            overrides.append(arg)
    if any(o.lstrip("+~").startswith("hydra.searchpath") for o in overrides):
        return []
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # Hydra reports what it cannot parse
        return []
    problems = []
    for override in parsed:
        group, value = override.key_or_group, override.value()
        valid = set(choices(group)) if not group.startswith("hydra") else set()
        for folder in dirs:
            valid.update(p.relative_to(folder / group).with_suffix("").as_posix()
                         for p in (folder / group).rglob("*.yaml"))  # fmt: skip
        if not valid or override.is_delete() or value is None:
            continue
        if isinstance(value, ChoiceSweep):
            names = list(override.sweep_string_iterator())
        elif override.is_sweep_override():  # a range or glob: Hydra expands it
            continue
        else:
            names = [override.get_value_element_as_str()]
        problems += [unknown_name(group, name, sorted(valid)) for name in names if name not in valid]
    return problems


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _entry_point(fn) -> str:
    module = fn.__module__
    if module == "__main__":  # python -m kcal.<module>: the module's real name is in its spec
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec is not None else module
    return module


def interrupted_message(entry_point: str) -> str:
    if entry_point in RESUMABLE:
        return ("interrupted (Ctrl-C): run the same command again to resume; finished trials and seeds are "
                "kept, and a trial or seed cut off mid-run is trained again")  # fmt: skip
    return (
        "interrupted (Ctrl-C): this run did not finish; run the same command again to train it from the start"
    )


def exits_on_config_error(fn):
    """Entry points: report user errors as one line on stderr and exit 2; Ctrl-C exits 130.

    Overrides of the wrong type (``objective.weight=abc``) are found before ``fn`` runs; an error of
    OmegaConf's (a key missing or that cannot be resolved) is a config error as well.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            problems = mistyped_overrides(args[0]) if args else []
            if problems:
                raise ConfigError("; ".join(problems))
            return fn(*args, **kwargs)
        except ConfigError as exc:
            _report("config error", exc, EXIT_USER_ERROR)
        except DataError as exc:
            _report("data error", exc, EXIT_USER_ERROR)
        except IncompleteError as exc:
            _report("error", exc, EXIT_USER_ERROR)
        except KeyboardInterrupt:
            print(f"\n{interrupted_message(_entry_point(fn))}", file=sys.stderr)
            raise SystemExit(EXIT_INTERRUPTED) from None
        except Exception as exc:
            if not is_omegaconf_error(exc):
                raise
            _report("config error", exc, EXIT_USER_ERROR)

    return wrapper


def is_omegaconf_error(exc: Exception) -> bool:
    """Whether ``exc`` is OmegaConf's (a key that is missing or cannot be resolved, a value of the wrong type):
    the config's, so the user's to fix. OmegaConf is not imported here (the library installs without it)."""
    errors = sys.modules.get("omegaconf.errors")
    return errors is not None and isinstance(exc, errors.OmegaConfBaseException)


exits_on_user_error = exits_on_config_error  # the same decorator, named for all that it reports


def _report(kind: str, exc: Exception, status: int) -> None:
    print(f"{kind}: {' '.join(str(exc).split())}", file=sys.stderr)  # one line, whatever the message
    raise SystemExit(status) from None
