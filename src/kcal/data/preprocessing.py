"""Feature and target normalisation under the two protocols.

``official`` (reproduces the authors): features z-scored with mean and std (ddof=0) of the *whole*
dataset before splitting; columns with std ~ 0 become 0; regression target centred on the
full-dataset median and not scaled; split seed fixed at 1 whatever the training seed.

``clean``: the same operations with statistics fit on the training rows only; the regression target
is standardised (``(y - mean_train) / std_train``) and ``y_center``/``y_scale`` let metrics with units be
reported back in the original units; the split is seeded by the run's seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

OFFICIAL_SPLIT_SEED = 1
STD_EPS = 1e-12


@dataclass(frozen=True)
class Protocol:
    """What a preprocessing protocol decides; every ``protocol == ...`` question is one of these fields."""

    name: str
    fixed_split: bool  # every seed trains on the split of OFFICIAL_SPLIT_SEED (else the run's seed splits)
    full_data_statistics: bool  # normalisation statistics from every row (else from the training rows)
    median_centred_target: bool  # regression target centred on the median, not scaled (else standardised)

    def split_seed(self, seed: int) -> int:
        return OFFICIAL_SPLIT_SEED if self.fixed_split else int(seed)


PROTOCOLS = {
    "official": Protocol("official", fixed_split=True, full_data_statistics=True, median_centred_target=True),
    "clean": Protocol("clean", fixed_split=False, full_data_statistics=False, median_centred_target=False),
}


@dataclass(frozen=True)
class Normalisation:
    x_mean: np.ndarray
    x_std: np.ndarray  # 0 marks a constant column (mapped to 0)
    y_center: float
    y_scale: float

    def features(self, x: np.ndarray) -> np.ndarray:
        """z-score in float64, returned as float32; constant columns become 0."""
        inv = np.divide(1.0, self.x_std, out=np.zeros_like(self.x_std), where=self.x_std > STD_EPS)
        return ((x - self.x_mean) * inv).astype(np.float32)

    def target(self, y: np.ndarray) -> np.ndarray:
        return (y - self.y_center) / self.y_scale


def protocol_of(protocol: str) -> Protocol:
    """The :class:`Protocol` named ``protocol``; ``ValueError`` for an unknown name."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[protocol]


def fit_normalisation(x: np.ndarray, y: np.ndarray, regression: bool, protocol: str) -> Normalisation:
    """Statistics from the rows given (all rows for ``official``, training rows for ``clean``)."""
    rules = protocol_of(protocol)
    mean, std = x.mean(axis=0), x.std(axis=0)
    std = np.where(std > STD_EPS, std, 0.0)
    if not regression:
        return Normalisation(mean, std, 0.0, 1.0)
    if rules.median_centred_target:
        return Normalisation(mean, std, float(np.median(y)), 1.0)
    y_std = float(y.std())
    return Normalisation(mean, std, float(y.mean()), y_std if y_std > STD_EPS else 1.0)
