"""What each config key may hold, and the check of a composed config against it: one line per problem.

A :class:`Schema` maps config keys (``trainer.max_epochs``; ``*`` stands for any one key of a mapping, as in
``paths.grids.*``) to a :class:`Rule` (the type, the valid range or choices, whether null is valid and what it
means, whether an empty list is) and holds the relations between keys that no single rule sees
(``trainer.min_epochs <= trainer.max_epochs``). Each stage declares the keys its code reads, beside that code,
with the choices read from where they are defined (:mod:`kcal.run.setup`: the keys of ``kcal train``;
:mod:`kcal.sweep.search`: ``sweep.*``; ...), and an entry point checks the union of its own and those below
(``schema | other``; a key declared twice is an error at import). :meth:`Schema.problems` is a pure function of
a composed config, so every entry point runs it before anything is written (:mod:`kcal.core.startup`) and a run
before it trains (:func:`kcal.run.setup.validate`).

A problem names the key, the value and what is valid: ``seeds_run.chunk_size must be an integer >= 1, got -1``;
``reproduce.datasets=[] is empty; pass reproduce.datasets=null for every dataset of the task``.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from kcal.core.errors import ConfigError, unknown_name

KINDS = ("integer", "number", "flag", "text", "choice", "list", "mapping")


@dataclass(frozen=True)
class Rule:
    """What one key may hold. ``null``/``empty``: what null / an empty list means (None: not valid)."""

    kind: str
    low: float | None = None
    above: bool = False  # ``low`` itself is not valid (``> low`` instead of ``>= low``)
    high: float | None = None  # the values stay below it
    choices: Callable[[], Iterable] | None = None  # read where the choices are defined, when checked
    names: str | None = None  # what the choices name (``dataset``): the message of a misspelt name
    words: tuple[str, ...] = ()  # words a number also takes (``median``)
    null: str | None = None
    item: Rule | None = None  # a list's items
    empty: str | None = None
    prefix: str = ""  # a text's required start (``val/``)

    def describe(self, plural: bool = False) -> str:
        """``an integer >= 1``, ``a finite number > 0, 'median' or null (...)``: what is valid, for a message
        (``plural``: of a list's items, ``integers >= 1``)."""
        if self.kind in ("integer", "number"):
            what = {"integer": ("an integer", "integers"), "number": ("a finite number", "finite numbers")}
            what = what[self.kind][plural]
            if self.low is not None:
                what += f" {'>' if self.above else '>='} {figure(self.low)}"
            if self.high is not None:
                what += f"{' and' if self.low is not None else ''} < {figure(self.high)}"
        elif self.kind == "choice":
            what = f"{'names' if plural else 'one'} of: {', '.join(map(str, self.valid()))}"
        elif self.kind == "list":
            what = "a list" if self.empty else "a non-empty list"
            what += f" of {self.item.describe(plural=True)}" if self.item else ""
        else:
            what = {"flag": ("true or false", "booleans"), "mapping": ("a mapping", "mappings"),
                    "text": ("a non-empty string", "non-empty strings")}[self.kind][plural]  # fmt: skip
            what += f" starting with {self.prefix!r}" if self.prefix else ""
        alternatives = [*map(repr, self.words), *(["null"] if self.null else [])]
        if alternatives:
            what = ", ".join([what, *alternatives[:-1]]) + f" or {alternatives[-1]}"
        if self.null:
            what += f" ({self.null})"
        return what

    def valid(self) -> list:
        return list(self.choices()) if self.choices else []

    def problem(self, key: str, value: Any) -> str | None:
        """Why ``value`` is not valid for ``key``, in one line; None when it is."""
        if value is None:
            return None if self.null else f"{key} must be {self.describe()}, got null"
        if isinstance(value, str) and value in self.words:
            return None
        if self.kind == "list" and isinstance(value, list) and not value and not self.empty:
            if self.null:
                return f"{key}=[] is empty; pass {key}=null for {self.null}"
            return f"{key} must be {self.describe()}, got []"
        if self.kind == "list" and isinstance(value, list) and self.item:
            for item in value:
                if self.item.names and isinstance(item, str) and not self.item.fits(item):
                    return f"{unknown_name(self.item.names, str(item), self.item.valid())} (in {key})"
                if self.item.problem(key, item) is not None:
                    return f"{key} must be {self.describe()}, got {shown(value)}"
            return None
        if self.fits(value):
            return None
        if self.names and isinstance(value, str):
            return f"{unknown_name(self.names, value, self.valid())} (in {key})"
        return f"{key} must be {self.describe()}{'; ' if self.kind == 'choice' else ', '}got {shown(value)}"

    def fits(self, value: Any) -> bool:
        """Whether a value that is not null (nor one of ``words``) is valid."""
        if self.kind in ("integer", "number"):
            if isinstance(value, bool) or not isinstance(
                value, int if self.kind == "integer" else int | float
            ):
                return False
            if not math.isfinite(value) or (self.high is not None and value >= self.high):
                return False
            return self.low is None or (value > self.low if self.above else value >= self.low)
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind == "text":
            return isinstance(value, str) and bool(value.strip()) and value.startswith(self.prefix)
        if self.kind == "choice":
            return not isinstance(value, bool) and value in self.valid()
        if self.kind == "list":
            return isinstance(value, list)
        return isinstance(value, dict)  # mapping


def integer(low: float | None = None, high: float | None = None, null: str | None = None) -> Rule:
    """A count or an index: an integer ``>= low`` (and ``< high``)."""
    return Rule("integer", low=low, high=high, null=null)


def number(low: float | None = None, above: bool = False, null: str | None = None, words=()) -> Rule:
    """A finite number ``>= low`` (``above``: ``> low``), or one of ``words``."""
    return Rule("number", low=low, above=above, null=null, words=tuple(words))


def flag() -> Rule:
    return Rule("flag")


def text(null: str | None = None, prefix: str = "", words=()) -> Rule:
    """A non-empty string (starting with ``prefix``), or one of ``words`` (``""``)."""
    return Rule("text", null=null, prefix=prefix, words=tuple(words))


def choice(choices: Callable[[], Iterable], null: str | None = None, names: str | None = None) -> Rule:
    """One of ``choices()`` (a function, so that the choices are read where they are defined when checked);
    ``names``: what they name (``dataset``), for the message of a misspelt one."""
    return Rule("choice", choices=choices, null=null, names=names)


def items(item: Rule | None = None, null: str | None = None, empty: str | None = None) -> Rule:
    """A list of ``item`` values (None: of any); non-empty unless ``empty`` says what an empty one means."""
    return Rule("list", item=item, null=null, empty=empty)


def mapping(null: str | None = None) -> Rule:
    """A mapping whose keys are its own (a search space, keys fixed on top of a config): checked as a whole."""
    return Rule("mapping", null=null)


#: a relation between keys: the problem of a config (one line), or None
Relation = Callable[[DictConfig], "str | None"]


def refusal(check: Callable[[DictConfig], object]) -> Relation:
    """A relation from a function that raises :class:`ConfigError` for a config it refuses (its message)."""

    @functools.wraps(check)
    def relation(cfg: DictConfig) -> str | None:
        try:
            check(cfg)
        except ConfigError as exc:
            return str(exc)
        return None

    return relation


@dataclass(frozen=True)
class Schema:
    """Rules by key (``*``: any one key of a mapping) and the relations between keys."""

    rules: Mapping[str, Rule] = field(default_factory=dict)
    relations: tuple[Relation, ...] = ()

    def __post_init__(self):
        for key, rule in self.rules.items():
            if rule.kind not in KINDS:
                raise ValueError(f"schema key {key}: unknown kind {rule.kind!r}; valid: {', '.join(KINDS)}")

    def __or__(self, other: Schema) -> Schema:
        both = sorted(set(self.rules) & set(other.rules))
        if both:
            raise ValueError(f"config keys declared twice: {', '.join(both)}")
        return Schema({**self.rules, **other.rules}, (*self.relations, *other.relations))

    def rule(self, key: str) -> Rule | None:
        """The rule of ``key``: its own, else a pattern's (``paths.grids.*``); None for a key not declared."""
        if key in self.rules:
            return self.rules[key]
        parts = key.split(".")
        for pattern, rule in self.rules.items():
            wanted = pattern.split(".")
            if "*" in wanted and len(wanted) == len(parts):
                if all(w in ("*", p) for w, p in zip(wanted, parts, strict=True)):
                    return rule
        return None

    def values(self, cfg: DictConfig) -> dict[str, Any]:
        """Every key of ``cfg`` that holds a value (a mapping declared as a :func:`mapping`: the mapping) with its
        resolved value as plain Python; ``hydra`` left out. A value that cannot be resolved is the exception."""
        out: dict[str, Any] = {}

        def walk(node: DictConfig, prefix: str) -> None:
            for name in node:
                key = f"{prefix}{name}"
                if key == "hydra":
                    continue
                try:
                    child = node[name]
                except OmegaConfBaseException as exc:
                    out[key] = exc
                    continue
                rule = self.rule(key)
                if isinstance(child, DictConfig) and not (rule and rule.kind == "mapping"):
                    walk(child, f"{key}.")
                else:
                    out[key] = plain(child)

        walk(cfg, "")
        return out

    def undeclared(self, cfg: DictConfig) -> list[str]:
        """The keys of ``cfg`` that no rule declares."""
        return sorted(key for key in self.values(cfg) if self.rule(key) is None)

    def problems(self, cfg: DictConfig) -> list[str]:
        """One line per invalid value of ``cfg`` (keys no rule declares are left alone: Hydra refuses a key not in
        the config, and one added with ``+`` is the user's), then, when every value is valid, per relation."""
        found, unread = [], []
        for key, value in self.values(cfg).items():
            rule = self.rule(key)
            if isinstance(
                value, OmegaConfBaseException
            ):  # most often another value's consequence: shown after
                unread.append(f"{key} cannot be read: {' '.join(str(value).split())}")
            elif rule is not None:
                if (problem := rule.problem(key, value)) is not None:
                    found.append(problem)
        found = found or unread
        if not found:
            found = [p for relation in self.relations if (p := relation(cfg)) is not None]
        return found

    def validate(self, cfg: DictConfig) -> None:
        """Raise :class:`ConfigError` with every problem of ``cfg`` on one line."""
        found = self.problems(cfg)
        if found:
            raise ConfigError("; ".join(found))


def plain(value: Any) -> Any:
    """A config value as plain Python (lists and mappings resolved)."""
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


def figure(x: float) -> str:
    """A bound as a reader writes it: ``0``, ``4294967296``, ``0.001``."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def shown(value: Any) -> str:
    """A value as a command line writes it: ``null``, ``true``, ``nan``, ``'abc'``, ``[1, 2]``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return f"[{', '.join(map(shown, value))}]"
    return repr(value) if isinstance(value, str) else str(value)


def close_keys(key: str, keys: Iterable[str], n: int = 5) -> list[str]:
    """The keys of ``keys`` closest to a misspelt ``key`` (``trainer.max_epoch`` -> ``trainer.max_epochs``); failing
    any, the keys beside it (those under its longest existing parent)."""
    keys = sorted(set(keys))
    last = key.rpartition(".")[2]
    close = [k for k in difflib.get_close_matches(key, keys, n=n, cutoff=0.75)
             if difflib.SequenceMatcher(None, last, k.rpartition(".")[2]).ratio() >= 0.6]  # fmt: skip
    if close:
        return close
    parts = key.split(".")
    for depth in range(len(parts) - 1, -1, -1):
        parent = ".".join(parts[:depth])
        beside = sorted({k.split(".")[depth] for k in keys if not parent or k.startswith(parent + ".")})
        if beside:
            return [f"{parent}.{k}" if parent else k for k in beside]
    return []
