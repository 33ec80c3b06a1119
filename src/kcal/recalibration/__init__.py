"""Post-hoc recalibration: quantile maps for regression, temperature scaling for classification."""

from kcal.recalibration.quantile import (
    DEFAULT_SLOPE_FLOOR,
    ICDF_LEVEL_CLAMP,
    QUANTILE_RECALIBRATORS,
    ConformalQuantileRecalibrator,
    IdentityQuantileRecalibrator,
    IsotonicQuantileRecalibrator,
    PiecewiseLinearMap,
    QuantileRecalibrator,
    RecalibratedForecast,
    make_quantile_recalibrator,
)
from kcal.recalibration.temperature import (
    CLASS_RECALIBRATORS,
    PROB_EPS,
    ClassRecalibrator,
    IdentityClassRecalibrator,
    TemperatureScaler,
    make_class_recalibrator,
)

__all__ = [
    "DEFAULT_SLOPE_FLOOR",
    "ICDF_LEVEL_CLAMP",
    "QUANTILE_RECALIBRATORS",
    "CLASS_RECALIBRATORS",
    "PROB_EPS",
    "PiecewiseLinearMap",
    "RecalibratedForecast",
    "QuantileRecalibrator",
    "IdentityQuantileRecalibrator",
    "IsotonicQuantileRecalibrator",
    "ConformalQuantileRecalibrator",
    "make_quantile_recalibrator",
    "ClassRecalibrator",
    "TemperatureScaler",
    "IdentityClassRecalibrator",
    "make_class_recalibrator",
]
