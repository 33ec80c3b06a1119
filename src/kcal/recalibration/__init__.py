"""Post-hoc recalibration: quantile maps for regression, temperature scaling for classification.

Each comes in the two evaluation flavours (``flavour="exact"`` or ``"official"`` in the factories): the
official one does the authors' arithmetic (:class:`OfficialConformalRecalibrator`; temperature fitted by
their Adam + plateau loop), the exact one float64 maps and LBFGS.

The names a run's ``recalibrator`` may take are those of :data:`QUANTILE_RECALIBRATORS` (regression) and
:data:`CLASS_RECALIBRATORS` (classification), plus ``auto``, the task's default (:data:`AUTO_RECALIBRATOR`):
:data:`RECALIBRATORS` lists them per task and :func:`resolve_recalibrator` checks and resolves one.
"""

from kcal.recalibration.quantile import (
    DEFAULT_SLOPE_FLOOR,
    FINITE_DIFFERENCE_STEP,
    FLAVOURS,
    ICDF_LEVEL_CLAMP,
    QUANTILE_RECALIBRATORS,
    ConformalQuantileRecalibrator,
    IdentityQuantileRecalibrator,
    IsotonicQuantileRecalibrator,
    OfficialConformalForecast,
    OfficialConformalRecalibrator,
    PiecewiseLinearMap,
    QuantileRecalibrator,
    RecalibratedForecast,
    make_quantile_recalibrator,
)
from kcal.recalibration.temperature import (
    CLASS_RECALIBRATORS,
    OPTIMIZERS,
    PROB_EPS,
    ClassRecalibrator,
    IdentityClassRecalibrator,
    TemperatureScaler,
    make_class_recalibrator,
)

AUTO_RECALIBRATOR = {"regression": "conformal", "classification": "temperature"}
RECALIBRATORS = {
    "regression": ("auto", *QUANTILE_RECALIBRATORS),
    "classification": ("auto", *CLASS_RECALIBRATORS),
}


def resolve_recalibrator(name: str, task: str) -> str:
    """The recalibrator ``name`` stands for on ``task`` (``auto``: the task's default); ``ValueError`` for a
    name that does not apply to the task."""
    if name not in RECALIBRATORS[task]:
        raise ValueError(
            f"recalibrator {name!r} does not apply to {task}; valid: {', '.join(RECALIBRATORS[task])}"
        )
    return AUTO_RECALIBRATOR[task] if name == "auto" else name


__all__ = [
    "AUTO_RECALIBRATOR",
    "RECALIBRATORS",
    "resolve_recalibrator",
    "DEFAULT_SLOPE_FLOOR",
    "FINITE_DIFFERENCE_STEP",
    "FLAVOURS",
    "ICDF_LEVEL_CLAMP",
    "QUANTILE_RECALIBRATORS",
    "CLASS_RECALIBRATORS",
    "PROB_EPS",
    "OPTIMIZERS",
    "PiecewiseLinearMap",
    "RecalibratedForecast",
    "QuantileRecalibrator",
    "IdentityQuantileRecalibrator",
    "IsotonicQuantileRecalibrator",
    "ConformalQuantileRecalibrator",
    "OfficialConformalRecalibrator",
    "OfficialConformalForecast",
    "make_quantile_recalibrator",
    "ClassRecalibrator",
    "TemperatureScaler",
    "IdentityClassRecalibrator",
    "make_class_recalibrator",
]
