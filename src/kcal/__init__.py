"""kcal: calibration by distribution matching (trainable kernel calibration metrics).

The library, which ``pip install kcal`` gives with torch, numpy, scipy and torchmetrics alone:

* :mod:`kcal.mmd`: the paper's trainable calibration metrics, :func:`~kcal.mmd.regression_mmd` and
  :func:`~kcal.mmd.classification_mmd`, a training step's :class:`~kcal.mmd.MMDStep` and the
  ``torch.nn.Module`` :class:`~kcal.mmd.MMDCalibrationLoss`;
* :mod:`kcal.kernels`: the kernels (Gram matrices) and the median heuristic;
* :mod:`kcal.baselines`: the baseline regularisers MMCE and ECE-KDE;
* :mod:`kcal.losses`: every regulariser as a ``torch.nn.Module`` loss;
* :mod:`kcal.metrics`: calibration metrics, as functions and as ``torchmetrics.Metric`` classes;
* :mod:`kcal.recalibration`: post-hoc recalibration (quantile maps, temperature scaling).

The pipeline that reproduces the paper (the ``kcal`` command: data, runs, sweeps, publishing) needs
``pip install "kcal[pipeline]"``.

Each name of :data:`__all__` is importable from here (``from kcal import regression_mmd``) and loaded on
first use, so ``import kcal`` itself imports nothing.
"""

import importlib

__version__ = "0.2.0"

#: the library's modules
MODULES = ("baselines", "kernels", "losses", "metrics", "mmd", "recalibration")
#: the regularisers, by the module that hands them on
NAMES = {
    "kcal.mmd": ("regression_mmd", "classification_mmd", "MMDStep", "MMDCalibrationLoss"),
    "kcal.baselines": ("mmce", "ece_kde"),
    "kcal.losses": ("MMCELoss", "ECEKDELoss"),
}
HOME = {name: module for module, names in NAMES.items() for name in names}

__all__ = [*MODULES, *HOME]


def __getattr__(name: str):
    if name in MODULES:
        return importlib.import_module(f"kcal.{name}")
    if name in HOME:
        return getattr(importlib.import_module(HOME[name]), name)
    raise AttributeError(f"module 'kcal' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
