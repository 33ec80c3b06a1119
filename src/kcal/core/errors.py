"""Errors a user can fix, and how entry points report them: one line on stderr, never a traceback.

* :class:`ConfigError` (an invalid value, a wrongly typed override, a resume with another config)
  and :class:`DataError` (a raw file missing or failing its checksum) exit with status 2;
* :class:`IncompleteError` (a run that could not produce what it was asked for, e.g. a study with
  no usable trial or a reproduction with datasets left out) exits with status 2 as well;
* Ctrl-C (``KeyboardInterrupt``) exits with status 130 and says how to resume.
"""

from __future__ import annotations

import functools
import sys

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


def mistyped_overrides(cfg) -> list[str]:
    """Command-line overrides ``key=value`` whose value is text where the config holds a number or a
    boolean, e.g. ``objective.weight=abc``; one message per override. Empty outside a Hydra app."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(cfg, DictConfig) or not HydraConfig.initialized() or not GlobalHydra().is_initialized():
        return []
    import hydra

    hc = HydraConfig.get()
    overrides = list(hc.overrides.task)
    problems = []
    for i, override in enumerate(overrides):
        key, sep, _ = override.lstrip("+~").partition("=")
        try:
            value = OmegaConf.select(cfg, key, default=None) if sep else None
            if not isinstance(value, str) or _is_number(value):
                continue
            others = overrides[:i] + overrides[i + 1 :]
            default = OmegaConf.select(hydra.compose(hc.job.config_name, overrides=others), key, default=None)
        except Exception:  # a key this check cannot resolve: left to the run itself
            continue
        if isinstance(default, bool):
            problems.append(f"{key}={value!r} is not a boolean; pass {key}=true or {key}=false")
        elif isinstance(default, int | float):
            problems.append(f"{key}={value!r} is not a number; pass a number, e.g. {key}={default}")
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

    Overrides of the wrong type (``objective.weight=abc``) are found before ``fn`` runs.
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

    return wrapper


exits_on_user_error = exits_on_config_error  # the same decorator, named for all that it reports


def _report(kind: str, exc: Exception, status: int) -> None:
    print(f"{kind}: {' '.join(str(exc).split())}", file=sys.stderr)  # one line, whatever the message
    raise SystemExit(status) from None
