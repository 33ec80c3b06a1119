"""Formulas of a search space's derived entries: numbers, names (dotted config paths), ``+ - * / **``
and parentheses, parsed with :mod:`ast` and evaluated without ``eval``.

    evaluate("1 / (nll_weight * trainer.batch_size)", {"nll_weight": 0.5, "trainer.batch_size": 32})

Bad input is a :class:`~kcal.core.errors.ConfigError` (one line, exit 2 from an entry point).
"""

from __future__ import annotations

import ast
import operator

from kcal.core.errors import ConfigError

__all__ = ["evaluate", "formula_names", "is_number", "number", "parse_formula"]

FORMULA_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
               ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}  # fmt: skip


def formula_names(formula: str) -> set[str]:
    """The names (dotted config paths included) that a derived entry's formula uses."""

    def names(node: ast.AST) -> set[str]:
        name = dotted(node)
        return {name} if name else set().union(*map(names, ast.iter_child_nodes(node)))

    return names(parse_formula(formula))


def evaluate(formula: str, values: dict) -> float:
    """``formula`` with its names taken from ``values``."""

    def value(node: ast.AST) -> float:
        name = dotted(node)
        if name is not None:
            return number(name, values.get(name), f"formula {formula!r}")
        if isinstance(node, ast.BinOp):
            return FORMULA_OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp):
            return FORMULA_OPS[type(node.op)](value(node.operand))
        return node.value

    try:
        return float(value(parse_formula(formula)))
    except (ZeroDivisionError, OverflowError) as exc:
        raise ConfigError(f"formula {formula!r} with {values}: {exc}") from None


def parse_formula(formula: str) -> ast.AST:
    """The expression of ``formula``; only numbers, names, ``+ - * / **`` and parentheses are allowed."""
    try:
        nodes = list(ast.walk(ast.parse(str(formula), mode="eval").body))
    except SyntaxError:
        nodes = [None]
    allowed = (ast.BinOp, ast.UnaryOp, ast.Name, ast.Attribute, ast.Constant, ast.Load, *FORMULA_OPS)
    if not all(
        isinstance(n, allowed) and (not isinstance(n, ast.Constant) or is_number(n.value)) for n in nodes
    ):
        raise ConfigError(
            f"derive: {formula!r} is not a formula of numbers, names, + - * / ** and parentheses"
        )
    return nodes[0]


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a name or attribute chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def number(name: str, value: object, where: str) -> float:
    if not is_number(value):
        raise ConfigError(f"{name} in {where} is neither an entry of the search space nor a numeric config key "
                          f"(value: {value!r})")  # fmt: skip
    return value
