"""The package's stages stack: every module of ``src/kcal`` sits on one layer, imports only its own layer and
the ones below (imports inside functions included), and no modules import each other in a loop."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: bottom to top; a module belongs to the layer of its longest listed prefix
LAYERS = {
    "foundation": ["kcal", "kcal.errors", "kcal.layout", "kcal.inputs", "kcal.random_streams", "kcal.formula",
                   "kcal.progress", "kcal.storage_url", "kcal.configs", "kcal.resources"],
    "library": ["kcal.kernels", "kcal.mmd", "kcal.mmd_fused", "kcal.mmd_steps", "kcal.baselines", "kcal.calibration_forms",
                "kcal.metrics", "kcal.losses", "kcal.recalibration", "kcal.data", "kcal.models", "kcal.objectives",
                "kcal.evaluation", "kcal.diagnostics", "kcal.fronts", "kcal.plotting", "kcal.paper"],
    "run": ["kcal.run", "kcal.train"],
    "sweep": ["kcal.search_space", "kcal.selection", "kcal.fingerprint", "kcal.studies", "kcal.sweep"],
    "reruns": ["kcal.seeds", "kcal.ablation", "kcal.local_calibration"],
    "publishing": ["kcal.tables", "kcal.table_cells", "kcal.claims", "kcal.report", "kcal.pareto_report", "kcal.budget", "kcal.trials",
                   "kcal.protocol_spread", "kcal.selection_bootstrap",
                   "kcal.figures", "kcal.state"],
    "orchestration": ["kcal.workers", "kcal.reproduce"],
    "benchmark": ["kcal.bench", "kcal.bench_setup", "kcal.protocol_estimate", "kcal.bare_loop", "kcal.sweep_throughput",
                  "kcal.stack_bound"],
}  # fmt: skip
ORDER = list(LAYERS)


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
    best = None
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > len(best[1])
            ):
                best = (layer, prefix)
    return best[0] if best else None


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
    assert "kcal.search_space" in GRAPH["kcal.fingerprint"]
    assert "kcal.studies" in GRAPH["kcal.seeds"]  # imported inside best_config


def test_no_module_is_longer_than_650_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 650}
    assert long == {}
