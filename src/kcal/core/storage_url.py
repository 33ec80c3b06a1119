"""A sweep storage URL (``sweep.storage``): the database driver kcal installs, and a password that no
file or message of a run ever holds.

* Driver. SQLAlchemy 2.1 maps a bare ``postgresql://`` to the psycopg (v3) driver, which kcal does not
  install; kcal depends on ``psycopg2-binary``, so :func:`engine_url` names ``postgresql+psycopg2``
  for a bare ``postgresql://`` (a URL that names its driver, ``postgresql+psycopg://``, keeps it).
  Rewriting keeps one PostgreSQL driver in the dependencies, the one the cluster set-up was tested with.
* Password. Hydra saves the command line and the resolved config under the run directory
  (``.hydra/overrides.yaml``, ``hydra.yaml``, ``config.yaml``; ``multirun.yaml`` and the submitit job
  files for ``-m`` runs), and every trial and seed run saves its config and command line. So an entry
  point moves a password out of ``sweep.storage=...`` before Hydra reads the command line
  (:func:`keeps_password_off_disk`): into the environment variable :data:`PASSWORD_ENV` of its process,
  which the worker processes it starts inherit, and from which :func:`engine_url` puts it back into
  the URL handed to SQLAlchemy. Messages show the URL with ``***`` (:func:`masked`). libpq also reads
  ``PGPASSWORD`` and ``~/.pgpass`` itself, which keep a password off the command line as well.
"""

from __future__ import annotations

import functools
import os
import sys

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

PASSWORD_ENV = "KCAL_STORAGE_PASSWORD"
STORAGE_KEY = "sweep.storage"
DRIVERS = {"postgresql": "postgresql+psycopg2"}  # dialect without a driver -> the driver kcal installs


def parse(url: str) -> URL | None:
    """The URL's parts; None for a SQLite file or text SQLAlchemy cannot parse (it then reports it)."""
    if url.startswith("sqlite"):
        return None
    try:
        return make_url(url)
    except ArgumentError:
        return None


def engine_url(url: str) -> str:
    """The URL to connect with: the installed driver, and the password from :data:`PASSWORD_ENV`."""
    parts = parse(url)
    if parts is None:
        return url
    parts = parts.set(drivername=DRIVERS.get(parts.drivername, parts.drivername))
    password = os.environ.get(PASSWORD_ENV)
    if parts.password is None and parts.host and password:
        parts = parts.set(password=password)
    return parts.render_as_string(hide_password=False)


def masked(url: str) -> str:
    """``url`` with its password (if any) shown as ``***``."""
    parts = parse(str(url))
    return str(url) if parts is None else parts.render_as_string(hide_password=True)


def mask_text(text: str, url: str) -> str:
    """``text`` (e.g. a database error) with ``url``'s password, and the one from the environment, as ``***``."""
    parts = parse(str(url))
    for secret in {parts.password if parts else None, os.environ.get(PASSWORD_ENV)} - {None, ""}:
        text = text.replace(str(secret), "***")
    return text


def without_password(override: str) -> str:
    """A ``sweep.storage=URL`` override with the URL's password moved to :data:`PASSWORD_ENV`."""
    key, sep, value = override.partition("=")
    if not sep or key.lstrip("+~") != STORAGE_KEY:
        return override
    parts = parse(value)
    if parts is None or parts.password is None:
        return override
    os.environ[PASSWORD_ENV] = str(parts.password)
    bare = URL.create(
        parts.drivername, parts.username, None, parts.host, parts.port, parts.database, parts.query
    )
    return f"{key}={bare.render_as_string(hide_password=False)}"


def keeps_password_off_disk(main):
    """Hydra entry points (put above ``@hydra.main``): the command line Hydra saves, and every run
    records, carries ``sweep.storage`` without its password (see the module docstring)."""

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        sys.argv = [sys.argv[0], *(without_password(a) for a in sys.argv[1:])]
        return main(*args, **kwargs)

    return wrapper
