"""Test-wide settings: never touch the network, keep caches out of the project tree."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from kcal.configs import CONFIG_DIR

from .common import SMOKE, SMOKE_REPRODUCTION

os.environ["KCAL_OFFLINE"] = "1"
if os.environ.get("KCAL_DATA_DIR"):  # absolute, so subprocesses with another cwd see the same mirror
    os.environ["KCAL_DATA_DIR"] = os.path.abspath(os.environ["KCAL_DATA_DIR"])


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """A session cache dir, so tests neither depend on nor pollute ``data/``."""
    old = os.environ.get("KCAL_CACHE_DIR")
    os.environ["KCAL_CACHE_DIR"] = str(tmp_path_factory.mktemp("kcal-cache"))
    torch.set_num_threads(_test_threads())
    yield
    if old is None:
        os.environ.pop("KCAL_CACHE_DIR", None)
    else:
        os.environ["KCAL_CACHE_DIR"] = old


def _test_threads() -> int:
    """Torch threads of the tests: ``KCAL_TEST_THREADS`` when set (to run the suite at another thread count,
    which changes how some CPU kernels split their sums), else one per pytest-xdist worker (make test: two
    workers; with more threads than cores, OpenMP threads spin at each other's barriers: the README's
    calibration recipe took 450 s, not 8) and at most two in one process."""
    if os.environ.get("KCAL_TEST_THREADS"):
        return int(os.environ["KCAL_TEST_THREADS"])
    return 1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, torch.get_num_threads())


@pytest.fixture(autouse=True)
def _threads_of_each_test():
    """Under ``KCAL_TEST_THREADS``, every test starts at that thread count (a training run sets its own,
    ``trainer.num_threads``, and leaves it)."""
    if os.environ.get("KCAL_TEST_THREADS"):
        torch.set_num_threads(_test_threads())


@pytest.fixture(scope="session")
def train_cli_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``kcal train profile=smoke dataset=crime objective=nll ...`` run once, in a directory of its
    own: (the finished process, its hydra.run.dir)."""
    from .data.conftest import mirror_has  # after the mirror's path is made absolute above

    if not mirror_has("crime"):
        pytest.skip("crime not available offline (set KCAL_DATA_DIR to the shared mirror)")
    cwd = tmp_path_factory.mktemp("train-cli")
    run_dir = cwd / "one"
    done = subprocess.run([sys.executable, "-m", "kcal.run.train", *SMOKE, "dataset=crime", "objective=nll",
                           "trainer.progress_bar=false", "save_checkpoint=true", f"hydra.run.dir={run_dir}"],
                          cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    return done, run_dir


@pytest.fixture(scope="session")
def kcal_wheel(tmp_path_factory) -> Path:
    """The kcal wheel, built once a session, offline, from a copy of the sources (so the build leaves nothing in
    the checkout); tests/test_installed_wheel.py and tests/test_library_install.py install it."""
    repo = Path(__file__).resolve().parents[1]
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, src / name)
    shutil.copytree(repo / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
           "-w", str(tmp / "dist"), str(src)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    (built,) = (tmp / "dist").glob("kcal-*.whl")
    return built


@pytest.fixture(scope="session")
def regression_smoke_root(tmp_path_factory) -> Path:
    """A smoke reproduction of crime with NLL and NLL + MMD (one trial, two seeds, sample size 1, one job,
    tables), made once. Tests that add to it or write into it work on a copy (``tests.common.copy_root``)."""
    from .data.conftest import mirror_has

    if not mirror_has("crime"):
        pytest.skip("crime not available offline (set KCAL_DATA_DIR to the shared mirror)")
    from kcal.orchestrate.reproduce import reproduce

    root = tmp_path_factory.mktemp("smoke-regression") / "root"
    common = [*SMOKE_REPRODUCTION, f"root={root}"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("reproduce", overrides=[*common, "task=regression", "reproduce.datasets=[crime]",
                                              "reproduce.objectives=[nll,nll_mmd]", "reproduce.sample_sizes=[1]",
                                              "reproduce.jobs=1"])  # fmt: skip
        reproduce(cfg, common)
    return root


# ---- the equivalence tests' summary (tests/equivalence): one line per comparison with the authors' code ----
# Each test records what it compared with the ``equivalence`` fixture (tests/equivalence/conftest.py) as a
# user property; the report carries it to this process also under pytest-xdist, where it is printed.
EQUIVALENCE_PROPERTY = "kcal_equivalence"
_equivalence_lines: list[tuple[str, int, list[str]]] = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed:
        for key, value in report.user_properties:
            if key == EQUIVALENCE_PROPERTY:
                _equivalence_lines.append(value)


def pytest_terminal_summary(terminalreporter):
    if not _equivalence_lines:
        return
    merged: dict[str, tuple[int, int, list[str]]] = {}  # a parametrised test's cases on one line
    for name, compared, differences in _equivalence_lines:
        base = name.split("[")[0]
        runs, total, named = merged.get(base, (0, 0, []))
        merged[base] = (runs + 1, total + compared, named + [d for d in differences if d not in named])
    named = sum(len(v[2]) for v in merged.values())
    terminalreporter.section("equivalence with the authors' code (d52ae84)")
    terminalreporter.write_line(f"{len(merged)} comparisons passed, {sum(v[1] for v in merged.values())} cases equal, "
                                f"{named} named differences")  # fmt: skip
    for name in sorted(merged):
        runs, compared, differences = merged[name]
        extra = f"; named differences: {'; '.join(differences)}" if differences else ""
        params = f" ({runs} parametrisations)" if runs > 1 else ""
        terminalreporter.write_line(f"  {name}: {compared} cases equal{params}{extra}")
