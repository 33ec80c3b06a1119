"""Load the authors' implementation (commit d52ae84, MIT) from ``../shared/reference`` for comparison tests.

The folder sits beside the checkout (``<checkout>/../shared/reference/authors-code-d52ae84``; the
``KCAL_AUTHORS_CODE`` variable points elsewhere). Without it every equivalence test skips with one line
saying so. Their code was written for torch 2.0, pytorch_lightning 1.5.10 and torchmetrics 0.8.2; this
environment has newer versions and lacks some of their imports, so loading it stubs, by name:

* ``rich``, ``rich.syntax``, ``rich.tree`` (``src/utils/__init__.py``: pretty-printing of configs);
* ``h5py`` (their copy of torchuq's ``dataset/regression.py``: UCI downloads, never called here) and
  ``seaborn`` (torchuq's plotting in ``evaluate/``, never called here);
* ``torchvision`` (``datasets``, ``models``, ``transforms``: the datamodules' MNIST option and torchuq's
  flow models, never called here);
* ``sklearn.datasets.load_boston`` (removed from scikit-learn 1.2; imported by the datamodules and by
  their torchuq copy, never called here);
* ``pytorch_lightning.loggers.LightningLoggerBase`` (renamed ``Logger`` in pytorch_lightning 2; a type
  hint in ``src/utils/__init__.py``): an alias of ``Logger``.

Nothing of the code that computes a number is stubbed. The authors' modules are imported as the package
``src`` with their folder first on ``sys.path`` (a regular package ``src`` wins over the namespace
folder ``src/`` of this checkout).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

AUTHORS_COMMIT = "d52ae849dadb9b72e3e9756f96f9ca21ccdb2218"
STUBBED = ("rich", "rich.syntax", "rich.tree", "h5py", "seaborn", "torchvision", "torchvision.datasets",
           "torchvision.transforms", "sklearn.datasets.load_boston",
           "pytorch_lightning.loggers.LightningLoggerBase")  # fmt: skip


def authors_dir() -> Path:
    """Where the authors' code is looked for."""
    env = os.environ.get("KCAL_AUTHORS_CODE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "reference" / "authors-code-d52ae84"


def _missing(top: str) -> bool:
    if top in sys.modules:
        return False
    return importlib.util.find_spec(top) is None


def _stubs() -> dict[str, types.ModuleType]:
    """Modules to stand in for the missing imports while the authors' modules are imported."""
    wanted = {"rich": {}, "rich.syntax": {}, "rich.tree": {}, "h5py": {}, "seaborn": {},
              "torchvision": {"datasets": None, "models": None, "transforms": None},
              "torchvision.datasets": {"MNIST": None},
              "torchvision.transforms": {"transforms": None}}  # fmt: skip
    missing = {top: _missing(top) for top in {name.split(".")[0] for name in wanted}}
    out = {}
    for name, attrs in wanted.items():
        if missing[name.split(".")[0]]:
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            out[name] = module
    return out


def _import_with_stubs(module: str):
    """Import ``module`` with :func:`_stubs` in ``sys.modules``, then take the stubs out again, so that other
    code in this process (Lightning probing for torchvision, say) never sees them."""
    stubs = {n: m for n, m in _stubs().items() if n not in sys.modules}
    sys.modules.update(stubs)
    try:
        return importlib.import_module(module)
    finally:
        for name in stubs:
            sys.modules.pop(name, None)


def _patch_renamed() -> None:
    import sklearn.datasets

    if "load_boston" not in sklearn.datasets.__dict__:
        sklearn.datasets.load_boston = None  # removed in scikit-learn 1.2; their code never calls it here
    import pytorch_lightning.loggers as pl_loggers

    if not hasattr(pl_loggers, "LightningLoggerBase"):
        pl_loggers.LightningLoggerBase = pl_loggers.Logger


def load(module: str):
    """Import ``module`` of the authors' code (e.g. ``"src.metrics.losses"``), or skip the test with one line
    when their folder is absent."""
    root = authors_dir()
    if not (root / "src" / "metrics" / "losses.py").is_file():
        pytest.skip(f"the authors' code is not at {root} (set KCAL_AUTHORS_CODE to compare with it)")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    _patch_renamed()
    loaded = sys.modules.get("src")
    if loaded is not None and not str(getattr(loaded, "__file__", "") or "").startswith(str(root)):
        for name in [n for n in sys.modules if n == "src" or n.startswith("src.")]:
            del sys.modules[name]  # a namespace package "src" of another folder: import theirs instead
    return _import_with_stubs(module)
