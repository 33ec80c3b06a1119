"""Errors a user can fix, and how entry points report them: one line on stderr, exit status 2."""

from __future__ import annotations

import functools
import sys


class ConfigError(ValueError):
    """An invalid configuration value, reported before any training starts."""


def exits_on_config_error(fn):
    """Entry points: print a ConfigError as one line and exit with status 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            print(f"config error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    return wrapper
