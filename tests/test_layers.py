"""The package's stages stack: every module of ``src/kcal`` sits on one layer, imports only its own layer and
the ones below (imports inside functions included), and no modules import each other in a loop."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: the stages, bottom to top, and the folders of src/kcal that hold them. A module's stage is its folder's; a
#: module at the package's top (or in one of LIBRARY_FOLDERS) is the library practitioners import, and the
#: ``kcal`` command (``kcal.cli``, ``kcal.__main__``) sits above every stage.
STAGES = {
    "foundation": ["core", "configs", "resources"],
    "library": [],  # the package's top-level modules and LIBRARY_FOLDERS
    "run": ["run"],
    "sweep": ["sweep"],
    "reruns": ["reruns"],
    "publishing": ["publish"],
    "orchestration": ["orchestrate"],
    "benchmark": ["bench"],
    "command": [],
}
LIBRARY_FOLDERS = ("mmd", "metrics", "recalibration", "data", "models")
COMMAND_MODULES = ("kcal.cli", "kcal.__main__")
ORDER = list(STAGES)
FOLDER_STAGE = {folder: stage for stage, folders in STAGES.items() for folder in folders}


def module_names() -> dict[str, Path]:
    out = {}
    # src/kcal/configs links to the top-level configs/, which rglob does not enter
    for path in sorted([*(SRC / "kcal").rglob("*.py"), *(SRC / "kcal" / "configs").glob("*.py")]):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = module_names()


def layer_of(module: str) -> str | None:
    """The stage of ``module``, read from the folder it lives in (None: a folder no stage claims)."""
    if module in COMMAND_MODULES:
        return "command"
    parts = module.split(".")
    if module == "kcal":
        return "foundation"
    if len(parts) == 2 and not MODULES[module].name == "__init__.py":
        return "library"  # kcal.<module>: a top-level module
    folder = parts[1]
    if folder in LIBRARY_FOLDERS:
        return "library"
    return FOLDER_STAGE.get(folder)


def test_every_folder_of_the_package_is_a_stage():
    folders = {p.name for p in (SRC / "kcal").iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    assert folders - set(FOLDER_STAGE) - set(LIBRARY_FOLDERS) == set()


def imports_of(module: str) -> set[str]:
    """The modules of kcal that ``module`` imports anywhere in its file (a name taken from a package is
    the package's submodule when one of that name exists)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != module}


GRAPH = {m: imports_of(m) for m in MODULES}


def test_every_module_has_a_layer():
    assert [m for m in MODULES if layer_of(m) is None] == []


def test_no_module_imports_a_higher_layer():
    upward = [f"{m} ({layer_of(m)}) -> {t} ({layer_of(t)})" for m, targets in GRAPH.items() for t in sorted(targets)
              if ORDER.index(layer_of(t)) > ORDER.index(layer_of(m))]  # fmt: skip
    assert upward == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    # a package's __init__ importing its own submodules is how it hands names on, not a loop of the design
    graph = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in GRAPH.items()}
    assert cycles(graph) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]), ({"a": {"b"}, "b": {"c"}, "c": set()}, [])],
)
def test_the_cycle_finder_finds_loops(graph, expected):
    assert cycles(graph) == expected


def test_imports_inside_functions_count():
    assert "kcal.sweep.search_space" in GRAPH["kcal.sweep.fingerprint"]
    assert "kcal.sweep.studies" in GRAPH["kcal.reruns.seeds"]  # imported inside best_config


def test_no_module_is_longer_than_650_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 650}
    assert long == {}


def test_moving_a_root_and_checking_data_load_no_torch():
    """``kcal state`` and ``kcal data`` (and what the sweep's config checks import) read files and configs: they
    load no torch, which cost each of them about 1.5 s of CPU before it started."""
    code = (
        "import sys, kcal.orchestrate.state, kcal.data, kcal.sweep.search_space, kcal.paper; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
