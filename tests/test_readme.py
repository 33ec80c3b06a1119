"""The README's code must run as printed."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


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


# ---- the kcal command as the README shows it ---------------------------------------------------------------
HYDRA_COMMANDS = {
    "train": "train",
    "sweep": "sweep",
    "seeds": "seeds",
    "reproduce": "reproduce",
    "ablation": "ablation",
}


def readme_commands() -> tuple[list[str], list[str]]:
    """(the ``kcal ...`` lines of the README's code blocks, the inline ```kcal ...``` commands of its prose)."""
    text = README.read_text()
    blocks = [line.split("  #")[0].strip() for block in re.findall(r"```(?:bash)?\n(.*?)```", text, re.S)
              for line in block.splitlines()]  # fmt: skip
    return [b for b in blocks if b == "kcal" or b.startswith("kcal ")], re.findall(r"`(kcal [^`]*)`", text)


def test_every_kcal_command_of_the_readme_exists_and_its_overrides_compose():
    import shlex

    from hydra import compose, initialize_config_dir

    from kcal.cli import COMMANDS
    from kcal.configs import CONFIG_DIR

    shown, inline = readme_commands()
    assert len(shown) >= 5 and len(inline) >= 10
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for line in shown + inline:
            words = shlex.split(line)[1:]
            assert words and words[0] in COMMANDS or words[0] == "--help", line
            overrides = [w for w in words[1:] if "=" in w and not w.startswith("-")]
            if words[0] in HYDRA_COMMANDS and overrides and not any(c in line for c in "<…N"):
                grid = [o.split(",")[0] if "[" not in o else o for o in overrides]  # -m: its first point
                compose(HYDRA_COMMANDS[words[0]], overrides=grid)


def test_every_python_module_the_readme_names_exists():
    import importlib.util

    modules = set(re.findall(r"python -m ([\w.]+)", README.read_text()))
    assert modules and [m for m in sorted(modules) if importlib.util.find_spec(m) is None] == []


def test_the_readme_kcal_block_runs_as_printed(tmp_path):
    """``kcal --help``, ``kcal reproduce --help`` and the smoke reproduction of the README's block, as printed
    (``python -m kcal`` for the console script; the three in one interpreter, one after the other, as
    tests/common.py runs entry points), in a fresh directory."""
    import shlex

    from .common import run_modules

    shown, _ = readme_commands()
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

    repo = README.parent
    docs = [*sorted((repo / "docs").rglob("*.md")), repo / "state" / "README.md"]
    text = "\n".join(p.read_text() for p in docs if p.is_file())
    modules = set(re.findall(r"python3? -m ([A-Za-z_]\w*(?:\.\w+)*)", text))
    assert "kcal.bench.xkernel_identity" in modules
    former = {f"kcal.{name.replace('-', '_')}" for name in COMMANDS}
    assert [m for m in sorted(modules) if m not in former and importlib.util.find_spec(m) is None] == []
    paths = set(re.findall(r"python3? ((?:[\w.-]+/)+[\w.-]+\.py)", text))
    assert [p for p in sorted(paths) if not (repo / p).is_file()] == []


def test_every_published_figure_is_linked_from_its_report_and_every_link_resolves():
    """Each figure under a report's figures/ is shown or linked in its RESULTS.md (one per dataset and kind), and
    every figure the report links exists."""
    repo = README.parent
    for report in sorted((repo / "docs" / "results").glob("*/RESULTS.md")):
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
