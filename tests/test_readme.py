"""The README's and the guides' (docs/*.md) code and commands must run as printed.

Every fenced ``bash`` line and every inline ```kcal ...```, ```make ...``` and ```python -m ...``` command of
README.md and the guides is checked in its shown form: a ``kcal`` command's arguments are parsed by the
command's own parser (and a Hydra command's overrides composed), a ``make`` command's dry run must print the
values it sets, a ``python -m`` module must exist and parse its arguments where it reads them with argparse.
Placeholders such as ``<root>`` or ``<d>`` are filled with a value of their kind first (:data:`PLACEHOLDERS`).
The python blocks run in this file (README) and in tests/test_readme_library.py (docs/library.md)."""

import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from .data.conftest import needs

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
#: the guides; docs/results/ holds the published reproductions (records, checked by tests/publish/)
GUIDES = sorted((REPO / "docs").glob("*.md"))
SHOWN = [README, *GUIDES]


def test_regulariser_snippet_runs_and_trains():
    text = README.read_text()
    section = text.split("## Use the regulariser in your own training loop", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    torch.manual_seed(0)
    exec(compile(code, "README snippet", "exec"), namespace)  # noqa: S102
    assert torch.isfinite(namespace["loss"]) and namespace["mmd"].requires_grad


def test_readme_gives_the_two_setup_commands():
    text = README.read_text()
    assert "make reproduce-regression PROFILE=quick" in text and "make test" in text


def test_every_python_block_is_one_the_tests_run():
    """README's one block runs above; docs/library.md's three in tests/test_readme_library.py. A block added
    anywhere else fails here until a test runs it."""
    counts = {p.relative_to(REPO).as_posix(): len(re.findall(r"```python\n", p.read_text())) for p in SHOWN}
    assert {k: n for k, n in counts.items() if n} == {"README.md": 1, "docs/library.md": 3}


# ---- what the README and the guides show -------------------------------------------------------------------
HYDRA_COMMANDS = {
    "train": "train",
    "sweep": "sweep",
    "seeds": "seeds",
    "reproduce": "reproduce",
    "ablation": "ablation",
    "paths": "paths",
}
#: a value of its kind for each placeholder the documents write in commands
PLACEHOLDERS = {
    "<d>": "crime",
    "<dataset>": "crime",
    "<o>": "nll",
    "<objective>": "nll",
    "<seeds>": "2",
    "<k>": "1",
    "<pid>": "12345",
    "<profile>": "quick",
    "<root>": "outputs/reproduce/quick",
    "<new root>": "outputs/reproduce/again",
    "<seed dir>": "outputs/reproduce/quick/crime/nll/seeds/seed_0",
    "<folder>": "outputs/figures",
    "<new folder>": "outputs/soak",
    "<sha>": "77fe3c6",
}
#: the lines of a ``bash`` block that are not commands to check: setting up the shell
SHELL_SETUP = re.compile(r"(source \.venv/bin/activate|export KCAL_DATA_DIR=\S+|[A-Z_]+=\S+)$")


def bash_lines(text: str) -> list[str]:
    """The command lines of ``text``'s ``bash`` blocks: continuation lines joined, comments dropped, a shell
    variable set by an earlier line (``DB=...``) expanded as the shell would."""
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        variables: dict[str, str] = {}
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            for name, value in variables.items():
                line = line.replace(f"${name}", value)
            if m := re.fullmatch(r"([A-Z_]+)=(\S+)", line):
                variables[m.group(1)] = m.group(2)
            if line:
                lines.append(line)
    return lines


def shown_commands(program: str, paths=SHOWN) -> list[tuple[str, str]]:
    """(document, command) for every ``program ...`` command of the documents' bash blocks and prose. A
    command written as a pattern with ``…`` (e.g. "the same ``make reproduce-…`` command") is not one."""
    found = []
    for path in paths:
        text = path.read_text()
        name = path.relative_to(REPO).as_posix()
        found += [(name, c) for c in bash_lines(text) if c == program or c.startswith(program + " ")]
        found += [
            (name, " ".join(c.split())) for c in re.findall(rf"`({program} [^`]*)`", text) if "…" not in c
        ]
    return found


def words_of(command: str) -> list[str]:
    """The command's words after the program, placeholders filled, optional ``[...]`` words dropped."""
    for placeholder, value in PLACEHOLDERS.items():
        command = command.replace(placeholder, value)
    command = re.sub(r"=N\b", "=1", command)  # a count (jobs, workers): at least 1
    assert not re.search(r"<[^>]*>", command), f"a placeholder without a value in PLACEHOLDERS: {command}"
    return [w for w in shlex.split(command)[1:] if not re.fullmatch(r"\[\w+\]", w)]


def test_every_bash_line_is_a_command_these_tests_check():
    checked = ("kcal", "make ", "python -m ", "optuna-dashboard ")
    lines = [(p.name, line) for p in SHOWN for line in bash_lines(p.read_text())]
    assert len(lines) >= 15
    assert [x for x in lines if not x[1].startswith(checked) and not SHELL_SETUP.fullmatch(x[1])] == []


# Runs each (module, argv) as ``python -m`` runs it, in one interpreter, up to the moment its argparse parser
# has parsed the arguments (any parse_* method): nothing is trained or written. Gives "parsed", or the exit
# status and stderr of a parser that refused the arguments, or "ran past" for a program that never parsed.
_PARSE_ONLY = r"""
import argparse, contextlib, io, json, runpy, signal, sys, warnings

warnings.filterwarnings("ignore")
class Parsed(Exception):
    pass
class RanPast(Exception):
    pass
def ran_past(signum, frame):
    raise RanPast
signal.signal(signal.SIGALRM, ran_past)
depth = [0]
def stop_after(method):  # the outermost parse (parse_args calls parse_known_args, a subparser too) stops
    def parse_then_stop(self, *args, **kwargs):
        depth[0] += 1
        try:
            parsed = method(self, *args, **kwargs)
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            raise Parsed
        return parsed
    return parse_then_stop
for name in ("parse_args", "parse_known_args", "parse_intermixed_args", "parse_known_intermixed_args"):
    setattr(argparse.ArgumentParser, name, stop_after(getattr(argparse.ArgumentParser, name)))
results = []
for module, argv in json.loads(sys.argv[1]):
    sys.argv = [module, *argv]
    err = io.StringIO()
    signal.alarm(120)  # a program that does its work without parsing first is stopped
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        results.append("ran past")
    except RanPast:
        results.append("ran past its parser for 120 s")
    except Parsed:
        results.append("parsed")
    except SystemExit as e:
        results.append(f"exit {e.code}: {err.getvalue()[-500:]}")
    finally:
        signal.alarm(0)
with open(OUT, "w") as f:
    json.dump(results, f)
"""


def parse_only(calls: list[tuple[str, list[str]]]) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "parsed.json"
        code = _PARSE_ONLY.replace("OUT", repr(str(out)))
        done = subprocess.run([sys.executable, "-c", code, json.dumps(calls)], capture_output=True, text=True,
                              timeout=600, cwd=tmp)  # fmt: skip
        assert done.returncode == 0 and out.is_file(), done.stderr[-3000:]
        return json.loads(out.read_text())


def check_kcal_commands(commands: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(document, command, problem) for each ``kcal ...`` command that does not parse, or whose overrides
    do not compose. ``kcal --help`` and ``kcal`` alone are the usage."""
    from hydra import compose, initialize_config_dir

    from kcal.cli import COMMANDS
    from kcal.configs import CONFIG_DIR

    problems, calls, of_call = [], [], []
    # a shell line of two commands (a && b): each on its own
    commands = [(doc, part) for doc, line in commands for part in line.split(" && ")]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for doc, line in commands:
            words = words_of(line)
            if not words or words == ["--help"]:
                continue
            if words[0] not in COMMANDS:
                problems.append((doc, line, "no such command"))
                continue
            if len(words) == 1:  # the command named in prose ("`kcal report` publishes ...")
                continue
            calls.append(("kcal", words))
            of_call.append((doc, line))
            overrides = [w for w in words[1:] if "=" in w and not w.startswith("-")]
            if words[0] in HYDRA_COMMANDS and overrides:
                grid = [o.split(",")[0] if "[" not in o else o for o in overrides]  # -m: its first point
                try:
                    compose(HYDRA_COMMANDS[words[0]], overrides=grid)
                except Exception as exc:  # noqa: BLE001 - the message is the finding
                    problems.append((doc, line, f"does not compose: {exc}"))
    for (doc, line), outcome in zip(of_call, parse_only(calls), strict=True):
        if outcome != "parsed":
            problems.append((doc, line, outcome))
    return problems


def test_every_kcal_command_shown_parses_and_its_overrides_compose():
    shown = shown_commands("kcal")
    docs = {doc for doc, _ in shown}
    assert len(shown) >= 40 and {"README.md", "docs/reproduction.md", "docs/training.md"} <= docs
    assert check_kcal_commands(shown) == []


def test_every_make_command_shown_dry_runs_to_what_it_says():
    """``make -n`` of each shown ``make`` command: the target exists, every ``VAR=value`` it sets reaches
    the recipe, and the ``kcal`` command the recipe runs parses and composes."""
    shown = shown_commands("make")
    assert {"make test", "make lint", "make reproduce-regression PROFILE=quick"} <= {c for _, c in shown}
    recipes = []
    for doc, line in shown:
        words = words_of(line)
        # -B: every target counts as out of date, so the recipe prints whether or not .venv is installed (in a
        # fresh clone under `make test` the install stamp is new and a plain -n printed nothing)
        done = subprocess.run(["make", "-n", "-B", "--no-print-directory", *words],
                              capture_output=True, text=True, cwd=REPO, timeout=60)  # fmt: skip
        assert done.returncode == 0, (doc, line, done.stderr)
        for word in words:
            if "=" in word:
                assert word.split("=", 1)[1] in done.stdout, (doc, line, done.stdout)
        recipes += [(doc, "kcal " + m) for m in re.findall(r"/bin/kcal (.*)", done.stdout)]
    assert len(recipes) >= 5
    assert check_kcal_commands(recipes) == []


def test_every_python_module_shown_exists_and_parses_its_arguments():
    import importlib.util

    shown = shown_commands("python -m") + shown_commands("python3 -m")
    modules = {shlex.split(c)[2] for _, c in shown}
    assert len(modules) >= 5
    assert [m for m in sorted(modules) if importlib.util.find_spec(m) is None] == []
    argparse_programs = [
        (doc, c) for doc, c in shown if "ArgumentParser(" in _module_source(shlex.split(c)[2])
    ]
    assert len(argparse_programs) >= 3
    outcomes = parse_only([(words_of(c)[1], words_of(c)[2:]) for _, c in argparse_programs])
    assert [(d, c, o) for (d, c), o in zip(argparse_programs, outcomes, strict=True) if o != "parsed"] == []


def _module_source(module: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec(module)
    origin = Path(spec.origin)
    main = origin.parent / "__main__.py"
    return origin.read_text() + (main.read_text() if origin.name == "__init__.py" and main.is_file() else "")


def test_optuna_dashboard_lines_name_their_driver():
    """optuna-dashboard is installed, and a PostgreSQL URL given to it names its driver (the dashboard hands
    a bare ``postgresql://`` to SQLAlchemy, which picks psycopg 3; tests/sweep/test_sweep_pareto.py serves
    both forms)."""
    import importlib.util

    lines = [c for p in GUIDES for c in bash_lines(p.read_text()) if c.startswith("optuna-dashboard ")]
    assert lines and importlib.util.find_spec("optuna_dashboard") is not None
    urls = [shlex.split(c)[1] for c in lines]
    assert all(re.match(r"(sqlite:///|postgresql\+psycopg2://)", u) for u in urls), urls


# ---- the README as a newcomer reads it ---------------------------------------------------------------------
def test_readme_is_short_and_lists_every_kcal_command_and_guide():
    from kcal.cli import COMMANDS

    text = README.read_text()
    assert len(text.splitlines()) <= 220
    listed = re.findall(r"^\* `kcal ([\w-]+)` — ", text, re.M)
    assert sorted(listed) == sorted(COMMANDS) and len(listed) == len(set(listed))
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)[)#]", text))
    assert linked == {p.relative_to(REPO).as_posix() for p in GUIDES}


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_of_the_readme_and_guides_resolves():
    """Files and images linked from README.md and the guides exist, and a ``#anchor`` into a Markdown file
    names one of its headings."""
    missing = []
    for path in SHOWN:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"\w+://", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                missing.append((path.name, target))
            elif anchor and dest.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", dest.read_text(), re.M)
                if anchor not in {_slug(h) for h in headings}:
                    missing.append((path.name, target))
    assert missing == []


def _dotted_paths(text: str) -> set[str]:
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)  # the report's generated-block markers
    return set(re.findall(r"(?<![\w./-])kcal(?:\.[A-Za-z_]\w*)+", text))


def _resolves(path: str) -> bool:
    """``path`` (``kcal.x.y``) names a module, or an attribute of one: each part a submodule where one exists,
    else an attribute of what the parts before it name."""
    import importlib
    import importlib.util

    parts = path.split(".")
    obj, name = importlib.import_module(parts[0]), parts[0]
    for part in parts[1:]:
        name = f"{name}.{part}"
        is_package = hasattr(obj, "__path__")
        if is_package and importlib.util.find_spec(name) is not None:
            obj = importlib.import_module(name)
        elif hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            return False
    return True


def test_every_dotted_module_path_the_docs_name_imports():
    """Every ``kcal.x.y`` in README.md and docs/**/*.md imports (a module, or an attribute of one). The
    published records under docs/results/ quote commands as run on the commit named beside them, where
    ``python -m kcal.<command>`` spelled today's ``kcal <command>`` (the records say so): there, and only
    there, ``kcal.<command>`` alone counts as that command."""
    from kcal.cli import COMMANDS

    former = {f"kcal.{name.replace('-', '_')}" for name in COMMANDS}
    bad = []
    for path in [README, *sorted((REPO / "docs").rglob("*.md"))]:
        record = (REPO / "docs" / "results") in path.parents
        for dotted in sorted(_dotted_paths(path.read_text())):
            if not (record and dotted in former) and not _resolves(dotted):
                bad.append((path.relative_to(REPO).as_posix(), dotted))
    assert bad == []
    assert "kcal.sweep.search_space.fit_to_data" in _dotted_paths(
        (REPO / "docs" / "reproduction.md").read_text()
    )


@needs("crime")  # the block's smoke reproduction trains on crime: offline, from the mirror
def test_the_readme_kcal_block_runs_as_printed(tmp_path):
    """``kcal --help``, ``kcal reproduce --help`` and the smoke reproduction of the README's block, as printed
    (``python -m kcal`` for the console script; the three in one interpreter, one after the other, as
    tests/common.py runs entry points), in a fresh directory."""
    from .common import run_modules

    shown = [c for c in bash_lines(README.read_text()) if c == "kcal" or c.startswith("kcal ")]
    block = [c for c in shown if c in ("kcal --help", "kcal reproduce --help") or "profile=smoke" in c]
    assert len(block) == 3, block
    runs = run_modules([("kcal", shlex.split(line)[1:]) for line in block], cwd=tmp_path, timeout=600)
    for line, done in zip(block, runs, strict=True):
        assert done.returncode == 0, (line, done.stderr[-3000:])
        if line == "kcal --help":
            assert "reproduce" in done.stdout and "train" in done.stdout
        elif "profile=smoke" in line:
            assert (tmp_path / "outputs" / "reproduce" / "try" / "results.csv").is_file()
            progress = [ln for ln in done.stderr.splitlines() if "| protocol " in ln]
            assert progress[-1].endswith("protocol 100%") and not [p for p in progress[:-1] if "100%" in p]


def test_every_python_module_and_script_the_docs_name_exists():
    """The measured documents (docs/, state/README.md) quote their commands; after a move of the code the
    quoted ``python -m <module>`` and ``python <path>.py`` must still run (a stale path went unnoticed once).
    ``python -m kcal.<command>`` is how the runs recorded there spelled today's ``kcal <command>`` (the
    documents say so), so a ``kcal.<name>`` that is a command of ``kcal`` counts as existing."""
    import importlib.util

    from kcal.cli import COMMANDS

    docs = [*sorted((REPO / "docs").rglob("*.md")), REPO / "state" / "README.md"]
    text = "\n".join(p.read_text() for p in docs if p.is_file())
    modules = set(re.findall(r"python3? -m ([A-Za-z_]\w*(?:\.\w+)*)", text))
    assert "kcal.bench.xkernel_identity" in modules
    former = {f"kcal.{name.replace('-', '_')}" for name in COMMANDS}
    assert [m for m in sorted(modules) if m not in former and importlib.util.find_spec(m) is None] == []
    paths = set(re.findall(r"python3? ((?:[\w.-]+/)+[\w.-]+\.py)", text))
    assert [p for p in sorted(paths) if not (REPO / p).is_file()] == []


def test_every_published_figure_is_linked_from_its_report_and_every_link_resolves():
    """Each figure under a report's figures/ is shown or linked in its RESULTS.md (one per dataset and kind), and
    every figure the report links exists."""
    for report in sorted((REPO / "docs" / "results").glob("*/RESULTS.md")):
        figures = report.parent / "figures"
        text = report.read_text()
        linked = set(re.findall(r"\(figures/([^)\s]+\.png)\)", text))
        missing = sorted(name for name in linked if not (figures / name).exists())
        assert not missing, f"{report}: linked figures missing: {missing}"
        drawn = {p.name for p in figures.glob("*.png")} if figures.is_dir() else set()
        assert not drawn - linked, f"{report}: figures not linked: {sorted(drawn - linked)}"


def test_the_readme_results_summary_is_short_generated_and_links_to_the_report():
    """The README's *What reproduces* is at most 12 lines, all of them one generated block (``kcal report
    docs/results/full`` fills it; ``--check`` and tests/publish/test_report_numbers.py check it) that links to the
    report."""
    from kcal.publish.report import GENERATED

    section = README.read_text().split("## What reproduces\n", 1)[1].split("\n## ", 1)[0].strip("\n")
    assert len(section.splitlines()) <= 12, section
    blocks = list(GENERATED.finditer(section))
    assert [b.group("name") for b in blocks] == ["readme"] and not GENERATED.sub("", section).strip()
    assert "](docs/results/full/RESULTS.md)" in blocks[0].group("body")
