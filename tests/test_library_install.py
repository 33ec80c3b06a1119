"""``pip install kcal`` gives the library alone: the wheel, installed with only its core dependencies into a
fresh virtual environment, imports the library and runs the README's regulariser snippet, and every command
of the pipeline says in one line which extra to install."""

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from importlib.metadata import Distribution, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kcal import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: the library's modules, which a core-only install must import
LIBRARY = ("kcal.kernels", "kcal.mmd", "kcal.losses", "kcal.baselines", "kcal.metrics", "kcal.metrics.stateful",
           "kcal.recalibration", "kcal.inputs", "kcal.objectives")  # fmt: skip
EXTRA_HINT = 'pip install "kcal[pipeline]"'


def sh(*cmd, ok: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kwargs)
    if ok:
        assert done.returncode == 0, (
            f"{' '.join(map(str, cmd))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done


# ---- the kcal command without the pipeline's packages (in this interpreter) ------------------------------------


@pytest.fixture
def command(tmp_path, monkeypatch):
    """A ``kcal`` command ``x`` whose module fails to import the module that the test writes into it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "x", ("kcal_test_command", "a command of this test"))
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # kcal.cli.main sets it for the command

    def write(missing: str) -> None:
        (tmp_path / "kcal_test_command.py").write_text(f"import {missing}\n")
        sys.modules.pop("kcal_test_command", None)

    return write


def test_a_command_without_a_pipeline_package_names_the_extra_and_exits_2(command, capsys):
    command("pandas.kcal_no_such_submodule")
    assert cli.main(["x"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.endswith(f"{EXTRA_HINT}\n"), err
    assert err.startswith("kcal x: ") and "pandas" in err


def test_any_other_missing_module_is_not_blamed_on_the_extra(command):
    command("kcal_no_such_package")
    with pytest.raises(ModuleNotFoundError, match="kcal_no_such_package"):
        cli.main(["x"])


def test_the_pipeline_modules_cover_every_package_the_code_imports():
    """Every third-party module that src/kcal imports is a core dependency's or one of
    :data:`kcal.cli.PIPELINE_MODULES`, so the command names the extra whichever of them is missing."""
    core = {"torch", "numpy", "scipy", "torchmetrics", "filelock"}  # filelock: torch's own dependency
    found = set()
    for path in (ROOT / "src" / "kcal").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level:
                found.add(node.module.partition(".")[0])
    third_party = found - set(sys.stdlib_module_names) - {"kcal", "__future__"}
    assert third_party - core - cli.PIPELINE_MODULES == set()


# ---- the wheel, installed with its core dependencies alone ----------------------------------------------------


def closure(requirements: list[str]) -> dict[str, Distribution]:
    """The installed distributions that pip installs for ``requirements``: each with its own requirements,
    recursively, markers evaluated for this interpreter, no extras."""
    found: dict[str, Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in found or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        found[name] = distribution(req.name)
        todo += [Requirement(r) for r in found[name].requires or []]
    return found


def top_level_entries(dist: Distribution) -> set[str]:
    """What ``dist`` installed at the top of site-packages (packages, modules, .libs folders, its .dist-info)."""
    return {
        f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", "__pycache__") and f.suffix != ".pth"
    }


@pytest.fixture(scope="module")
def wheel(kcal_wheel) -> Path:
    """The kcal wheel (tests/conftest.py builds it once a session)."""
    return kcal_wheel


def wheel_file(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        (path,) = [n for n in z.namelist() if n.endswith(f".dist-info/{name}")]
        return z.read(path).decode()


def requirements(wheel: Path) -> tuple[list[str], dict[str, list[str]]]:
    """(the wheel's core requirements, its extras' requirements by extra), read from its METADATA."""
    core, extras = [], {}
    for line in Parser().parsestr(wheel_file(wheel, "METADATA")).get_all("Requires-Dist") or []:
        req = Requirement(line)
        extra = re.search(r"extra == \"(\w+)\"", str(req.marker or ""))
        if extra:
            extras.setdefault(extra.group(1), []).append(canonicalize_name(req.name))
        else:
            core.append(line)
    return core, extras


@pytest.fixture(scope="module")
def core_install(wheel, tmp_path_factory) -> tuple[Path, Path, dict]:
    """(python of a fresh venv holding the wheel and its core dependencies alone, the wheel's ``kcal`` script,
    the environment to run them in).

    The venv is a plain one (no system site-packages). The core dependencies are not downloaded and
    unpacked again (torch alone is GBs): the venv's ``.pth`` adds one folder that holds links to exactly
    what pip installed here for them and their own dependencies (:func:`closure`: torch, numpy, scipy,
    torchmetrics, then sympy, typing-extensions, lightning-utilities, ...), the same files at the same
    versions. Nothing else of this interpreter's site-packages is there, which
    :func:`test_the_pipeline_packages_are_not_there` checks."""
    tmp = tmp_path_factory.mktemp("library-venv")
    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    site = Path(sh(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    sh(sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", site, wheel)
    deps = tmp / "core-dependencies"
    deps.mkdir()
    here = Path(sysconfig.get_paths()["purelib"])
    for dist in closure(requirements(wheel)[0]).values():
        for entry in top_level_entries(dist):
            assert not (deps / entry).exists(), f"{entry} is installed by two distributions"
            (deps / entry).symlink_to(here / entry)
    (site / "kcal_core_dependencies.pth").write_text(f"{deps}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return python, site / "bin" / "kcal", env | {"KCAL_OFFLINE": "1"}


def test_the_core_dependencies_are_few_and_the_pipeline_is_an_extra(wheel):
    core, extras = requirements(wheel)
    names = {canonicalize_name(Requirement(r).name) for r in core}
    assert {"torch", "numpy", "scipy", "torchmetrics"} <= names and len(names) <= 5, names
    assert {"hydra-core", "pytorch-lightning", "optuna", "pandas", "scikit-learn", "ucimlrepo", "matplotlib",
            "tqdm", "psycopg2-binary", "hydra-submitit-launcher", "pebble", "filelock"} <= set(extras["pipeline"])  # fmt: skip
    assert "kcal" in extras["dev"]  # kcal[pipeline]: make install (.[dev]) installs everything


def test_one_kcal_command(wheel):
    scripts = wheel_file(wheel, "entry_points.txt").split("[console_scripts]")[1].split("[")[0]
    assert [line.strip() for line in scripts.strip().splitlines()] == ["kcal = kcal.cli:main"]


def test_the_pipeline_packages_are_not_there(core_install):
    python, _, env = core_install
    code = f"import importlib.util; print([m for m in {sorted(cli.PIPELINE_MODULES)} if importlib.util.find_spec(m)])"
    assert sh(python, "-c", code, env=env, cwd=python.parent).stdout.strip() == "[]"


def test_the_library_imports_from_the_wheel(core_install):
    python, _, env = core_install
    code = ("import importlib, json, kcal\n"
            f"mods = [importlib.import_module(m) for m in {list(LIBRARY)}]\n"
            "print(json.dumps([kcal.__file__, [m.__name__ for m in mods], [getattr(kcal, n).__name__ for n in kcal.__all__]]))")  # fmt: skip
    where, modules, names = json.loads(sh(python, "-c", code, env=env, cwd=python.parent).stdout)
    assert not Path(where).is_relative_to(ROOT), f"kcal imported from the checkout: {where}"
    assert modules == list(LIBRARY) and len(names) == len(__import__("kcal").__all__)


def test_the_isotonic_recalibrator_names_its_package(core_install):
    python, _, env = core_install
    code = "from kcal.recalibration import IsotonicQuantileRecalibrator as R; R().fit([0.1, 0.5, 0.9])"
    done = sh(python, "-c", code, ok=False, env=env, cwd=python.parent)
    assert done.returncode == 1 and EXTRA_HINT in done.stderr.splitlines()[-1], done.stderr[-2000:]


def regulariser_snippet() -> str:
    """The README's snippet that trains with the regulariser in a plain torch loop."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    found = [b for b in blocks if "regression_mmd" in b and ".backward()" in b and "lightning" not in b]
    assert len(found) == 1, found
    return found[0]


def test_the_readme_regulariser_snippet_runs_with_the_core_dependencies(core_install, tmp_path):
    python, _, env = core_install
    # one thread, as the suite's own processes (tests/conftest.py): on 2 cores more spin against each other
    setup = "import torch\ntorch.set_num_threads(1)\ntorch.manual_seed(0)\n"
    check = (
        "\nimport math, sys\nprint(math.isfinite(float(loss)), mmd.requires_grad, 'hydra' in sys.modules)\n"
    )
    done = sh(python, "-", input=setup + regulariser_snippet() + check, env=env, cwd=tmp_path)
    assert done.stdout.split() == ["True", "True", "False"], done.stdout


def test_every_command_without_the_extra_names_it_and_exits_2(core_install, tmp_path):
    """Every ``kcal`` command in one interpreter (``kcal.cli.main``), then ``kcal train`` with a misspelt
    dataset as the README's user types it, through the wheel's console script."""
    python, script, env = core_install
    code = ("import contextlib, io, json\nfrom kcal.cli import COMMANDS, main\nout = {}\n"
            "for name in COMMANDS:\n    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as so:\n"
            "        code = main([name])\n    out[name] = [code, err.getvalue(), so.getvalue()]\n"
            "print(json.dumps(out))")  # fmt: skip
    runs = json.loads(sh(python, "-c", code, env=env, cwd=tmp_path).stdout)
    assert set(runs) == set(cli.COMMANDS)
    wrong = {name: run for name, run in runs.items()
             if run[0] != 2 or run[2] or run[1].count("\n") != 1 or not run[1].endswith(f"{EXTRA_HINT}\n")}  # fmt: skip
    assert wrong == {}
    done = sh(python, script, "train", "dataset=crme", ok=False, env=env, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
    assert done.stderr.splitlines() == [done.stderr.strip()] and done.stderr.strip().endswith(EXTRA_HINT)
    assert not any(tmp_path.iterdir())  # nothing was written
