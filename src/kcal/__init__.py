"""kcal: calibration by distribution matching (trainable kernel calibration metrics)."""

__version__ = "0.1.0"
