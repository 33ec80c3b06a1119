"""The package's tree shows the library: few modules at the top, no two modules of one name, the output
layout spelled in ``core/layout.py`` alone, and every module path the documents name importable (one ``kcal``
command: tests/test_library_install.py reads the wheel's)."""

import ast
import importlib
import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest

from .test_layers import MODULES, SRC

REPO = SRC.parent
PACKAGE = SRC / "kcal"
LAYOUT = PACKAGE / "core" / "layout.py"
#: modules every package (or the package's top) may have, whose names therefore repeat
DUNDER = ("__init__", "__main__")
#: the top-level modules that are no part of the library: the ``kcal`` command
COMMAND = ("cli",)
MAX_TOP_LEVEL = 10


def test_the_top_of_the_package_holds_at_most_ten_modules():
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in DUNDER + COMMAND)
    assert len(top) <= MAX_TOP_LEVEL, top


def test_no_two_modules_share_a_name():
    """Module files and packages (a package is imported as a module too) anywhere under src/kcal."""
    names = [p.stem for p in MODULES.values() if p.stem not in DUNDER]
    names += [p.parent.name for p in MODULES.values() if p.name == "__init__.py" and p.parent != PACKAGE]
    assert sorted(n for n, k in Counter(names).items() if k > 1) == []


# ---- the layout's file names -------------------------------------------------------------------------------


def layout_file_names() -> set[str]:
    """Every file name (a name with a suffix) that core/layout.py spells."""
    tree = ast.parse(LAYOUT.read_text())
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and re.fullmatch(r"[\w-]+\.[a-z]+", n.value)}  # fmt: skip


def prose_ids(tree: ast.AST) -> set[int]:
    """The string statements of a module (docstrings of the module, its classes and functions, attribute
    docstrings): text for the reader, not values."""
    return {
        id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }


def path_literals_naming(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """The string literals of ``path`` that spell one of ``names`` as a path: a literal without whitespace (a
    file name, a relative path, a glob, the constant part of an f-string) with the name as one of its ``/``
    parts. Prose (help texts, messages: literals with spaces) may name a file for the reader."""
    tree = ast.parse(path.read_text())
    prose = prose_ids(tree)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose:
            if not re.search(r"\s", n.value) and set(re.split(r"[/:]", n.value)) & names:
                found.append((n.lineno, n.value))
    return sorted(found)


def test_layout_spells_its_file_names():
    names = layout_file_names()
    assert {"sweeps.db", "results.csv", "metrics.json", "run.json", "best.pt"} <= names


def test_the_check_finds_a_path_literal_and_passes_prose(tmp_path):
    module = tmp_path / "kcal" / "example.py"
    module.parent.mkdir()
    module.write_text('"""Reads sweeps.db."""\nA = root / "sweeps.db"\nB = f"sqlite:///{root}/sweeps.db"\n'
                      'C = "see the sweeps.db of <root>"\nD = "sweep*/trials/trial_*/metrics.json"\n')  # fmt: skip
    found = path_literals_naming(module, {"sweeps.db", "metrics.json"})
    assert [line for line, _ in found] == [2, 3, 5]


def test_no_module_but_layout_spells_a_layout_file_name():
    names = layout_file_names()
    found = [f"{p.relative_to(SRC)}:{line}: {text!r}" for p in sorted(PACKAGE.rglob("*.py")) if p != LAYOUT
             for line, text in path_literals_naming(p, names)]  # fmt: skip
    assert found == []


# ---- module paths the documents name -----------------------------------------------------------------------

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
DOTTED = re.compile(r"(?<![\w./-])kcal(?:\.[A-Za-z_]\w*)+")


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` is a module of kcal, or a name that the longest importable module of its prefixes
    holds (``kcal.mmd.regression_mmd``, ``kcal.mmd.MMDStep.prepare``)."""
    parts = dotted.split(".")
    i = 1  # parts[:i] is a module
    while i < len(parts) and is_module(".".join(parts[: i + 1])):
        i += 1
    obj = importlib.import_module(".".join(parts[:i]))
    for attr in parts[i:]:
        if not hasattr(obj, attr):
            return False
        obj = getattr(obj, attr)
    return True


def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a part before the last is a module, not a package
        return False


def documented_paths() -> dict[str, list[str]]:
    """Every ``kcal.<...>`` of the README and docs/, with where it stands. Left out: the markers of generated
    blocks (``<!-- kcal.report:... -->``) and ``kcal.<command>``, how the runs recorded under docs/results/
    spelled today's ``kcal <command>`` (those documents say so)."""
    from kcal.cli import COMMANDS

    former = {f"kcal.{name.replace('-', '_')}" for name in COMMANDS}
    found: dict[str, list[str]] = {}
    for doc in DOCUMENTS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            line = re.sub(r"<!--.*?-->", "", line)
            for match in DOTTED.finditer(line):
                if match.group() not in former:
                    found.setdefault(match.group(), []).append(f"{doc.relative_to(REPO)}:{number}")
    return found


def test_the_documents_name_module_paths():
    found = documented_paths()
    assert {"kcal.mmd", "kcal.mmd.MMDStep", "kcal.metrics.stateful"} <= set(found)


@pytest.mark.parametrize(
    "dotted", ["kcal.mmd_fused.PASS_ELEMENTS", "kcal.sweep.search.fit_to_data", "kcal.nope"]
)
def test_a_stale_module_path_does_not_resolve(dotted):
    assert not resolves(dotted)


def test_every_module_path_the_documents_name_imports():
    stale = {name: where for name, where in documented_paths().items() if not resolves(name)}
    assert stale == {}


def test_every_python_m_of_the_package_runs():
    """``python -m kcal.<module>`` in the package's own text names a module that exists; ``kcal.<pkg>.<name>``
    (a placeholder for each program of a package) names a package."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for match in re.finditer(r"python -m (kcal(?:\.\w+)*)(\.<\w+>)?", path.read_text()):
            spec = importlib.util.find_spec(match.group(1))
            if spec is None or (match.group(2) and spec.submodule_search_locations is None):
                bad.append(f"{path.relative_to(SRC)}: {match.group()}")
    assert bad == []


def test_the_training_guide_names_every_config_group():
    """Config groups mirror the code, and docs/training.md's *Configs* lists each (``hydra/`` is Hydra's own)."""
    from kcal.configs import CONFIG_DIR

    groups = sorted(p.name for p in Path(CONFIG_DIR).iterdir() if p.is_dir() and any(p.glob("*.yaml")))
    guide = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    configs = guide[guide.index("## Configs") :]
    assert [g for g in groups if g != "hydra" and f"* `{g}/`" not in configs] == []


def test_the_readme_code_map_names_every_module_of_the_pipeline_stages():
    """The README's map of ``src/kcal`` lists each module of the run, sweep, reruns, publish and orchestrate stages
    by name, those of their subpackages too (``publish/questions/``; ``figures/`` is named as a folder), so that a
    module the guides name is on the map (a new module without an entry fails here)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("src/kcal/core/") :]
    block = block[: block.index("```")]
    entries = re.split(r"\n(?=src/kcal/|configs/|tests/)", block)
    missing = []
    for stage in ("run", "sweep", "reruns", "publish", "orchestrate"):
        entry = next(e for e in entries if e.startswith(f"src/kcal/{stage}/"))
        words = set(re.findall(r"[a-z_]+", entry))
        missing += [m.relative_to(SRC / "kcal").with_suffix("").as_posix() for m in sorted((SRC / "kcal" / stage).rglob("*.py"))
                    if not m.stem.startswith("__") and m.stem not in words and m.parent.name != "figures"]  # fmt: skip
    assert missing == []
