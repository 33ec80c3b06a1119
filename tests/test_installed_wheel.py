"""An installed kcal (a wheel, not this checkout) finds its configs and trains from any directory."""

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from .data.conftest import needs

ROOT = Path(__file__).resolve().parents[1]


def _sh(*cmd, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(kcal_wheel, tmp_path_factory) -> tuple[Path, dict]:
    """(python of a fresh venv holding only the kcal wheel, its environment). Its other packages (torch,
    Lightning, Hydra, ...) come from this interpreter's site-packages through a ``.pth`` line, so
    nothing is downloaded; the wheel is built offline from a copy of the sources (tests/conftest.py)."""
    wheel = kcal_wheel
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    _sh(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    site = Path(_sh(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (site / "kcal_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _sh(sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", site, wheel)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return python, env | {"KCAL_OFFLINE": "1"}


def kcal_script(python: Path) -> Path:
    """The wheel's ``kcal`` console script as pip installed it (``--target``: under the site folder's bin/)."""
    site = Path(_sh(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    return site / "bin" / "kcal"


def test_the_wheel_ships_the_configs(installed):
    python, env = installed
    out = _sh(python, "-c", "import kcal, kcal.configs as c; print(kcal.__file__); print(c.CONFIG_DIR)",
              env=env, cwd=installed[0].parent).stdout.split()  # fmt: skip
    assert not Path(out[0]).is_relative_to(ROOT), f"kcal imported from the checkout: {out[0]}"
    configs = Path(out[1])
    for name in ("train.yaml", "sweep.yaml", "seeds.yaml", "reproduce.yaml", "trainer/gpu.yaml",
                 "objective/nll_mmd.yaml", "profile/smoke.yaml", "experiment/local_calibration.yaml"):  # fmt: skip
        assert (configs / name).is_file(), name
    source = {p.relative_to(ROOT / "configs") for p in (ROOT / "configs").rglob("*.yaml")}
    assert {p.relative_to(configs) for p in configs.rglob("*.yaml")} == source


@pytest.mark.slow
@needs("crime")
def test_an_installed_kcal_trains_from_another_directory(installed, tmp_path):
    """``kcal train`` (the wheel's console script, run by the venv's python) from a directory of the user's,
    with an objective of the user's composed from a config directory of their own (Hydra's --config-dir)
    beside the ones the wheel ships."""
    python, env = installed
    mine = tmp_path / "my_configs" / "objective"
    mine.mkdir(parents=True)
    text = (ROOT / "configs" / "objective" / "nll.yaml").read_text()
    (mine / "my_nll.yaml").write_text(text.replace("name: nll", "name: my_nll"))
    script = kcal_script(python)
    assert "from kcal.cli import main" in script.read_text()
    done = _sh(python, script, "train", "--config-dir", tmp_path / "my_configs", "objective=my_nll", "dataset=crime",
               "profile=smoke", "hydra.run.dir=run", env=env | {"KCAL_CACHE_DIR": str(tmp_path / "cache")},
               cwd=tmp_path)  # fmt: skip
    assert "status=ok" in done.stdout
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "ok"
    assert "name: my_nll" in (tmp_path / "run" / "config.yaml").read_text()


def test_wheel_contents_listed_by_zip(kcal_wheel):
    """The wheel itself (not only the installed tree) holds every config file."""
    names = set(zipfile.ZipFile(kcal_wheel).namelist())
    assert "kcal/configs/train.yaml" in names and "kcal/configs/__init__.py" in names
    assert "kcal/configs/objective/nll.yaml" in names
