"""Post-hoc quantile recalibration for regression forecasts.

A recalibrator learns a monotone map ``R: [0, 1] -> [0, 1]`` from validation PITs
``u_k = F_k(y_k)`` and turns a forecast with CDF ``F`` into one with CDF ``R(F(y))``.

Two fitting rules share one piecewise-linear representation (:class:`PiecewiseLinearMap`):

* :class:`IsotonicQuantileRecalibrator` -- Kuleshov, Fenner & Ermon (2018).
* :class:`ConformalQuantileRecalibrator` -- what the official code actually ran
  (torchuq ``ConformalCalibrator(input_type='distribution', interpolation='linear')``).

Conventions used throughout (all maps, both recalibrators):

* ``R`` is evaluated as constant extrapolation outside its knots (like ``np.interp``), is
  right-continuous at vertical jumps (duplicate ``x`` knots) and is computed in float64, then cast
  back to the input dtype.
* ``R'`` (``derivative``) is the slope of the segment containing ``u`` on the *closed* support
  ``[xs[0], xs[-1]]`` (right-hand slope at interior knots, the last segment's slope at ``xs[-1]``),
  and ``0`` outside the support.
* ``R^{-1}`` (``inverse``) is the generalised inverse ``inf{u in [xs[0], xs[-1]] : R(u) >= level}``,
  computed by linear interpolation on the same knots. Where ``R`` is flat at ``level`` this picks the
  **left end** of the flat region; levels below ``ys[0]`` give ``xs[0]`` and levels above ``ys[-1]``
  give ``xs[-1]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

__all__ = [
    "PiecewiseLinearMap",
    "RecalibratedForecast",
    "QuantileRecalibrator",
    "IdentityQuantileRecalibrator",
    "IsotonicQuantileRecalibrator",
    "ConformalQuantileRecalibrator",
    "make_quantile_recalibrator",
    "QUANTILE_RECALIBRATORS",
    "ICDF_LEVEL_CLAMP",
    "DEFAULT_SLOPE_FLOOR",
]

#: The authors' clamp on the level passed to the base forecast's icdf (torchuq
#: ``_conformal_iscore_distribution``).
ICDF_LEVEL_CLAMP = 1e-6

#: Floor on ``R'`` inside ``RecalibratedForecast.log_prob`` (see its docstring).
DEFAULT_SLOPE_FLOOR = 1e-12


def _as_1d_float64(values, name: str) -> torch.Tensor:
    if torch.is_tensor(values):
        t = values.detach().to(device="cpu", dtype=torch.float64)
    else:
        t = torch.as_tensor(np.asarray(values, dtype=np.float64))
    t = t.reshape(-1).contiguous()
    if t.numel() and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite")
    return t


class PiecewiseLinearMap:
    """Monotone non-decreasing piecewise-linear function through knots ``(xs[i], ys[i])``.

    ``xs`` and ``ys`` must be 1-D, of equal length >= 2 and both non-decreasing. Duplicate ``xs`` are
    allowed and encode a vertical jump (``R`` is right-continuous there). All evaluations are pure torch,
    differentiable with respect to the input wherever ``R`` is differentiable, and broadcast over any
    input shape. See the module docstring for the extrapolation / flat-region conventions.
    """

    def __init__(self, xs, ys):
        xs_t = _as_1d_float64(xs, "xs")
        ys_t = _as_1d_float64(ys, "ys")
        if xs_t.numel() != ys_t.numel():
            raise ValueError(f"xs and ys must have the same length, got {xs_t.numel()} and {ys_t.numel()}")
        if xs_t.numel() < 2:
            raise ValueError("a PiecewiseLinearMap needs at least 2 knots")
        if bool((xs_t[1:] < xs_t[:-1]).any()):
            raise ValueError("xs must be non-decreasing")
        if bool((ys_t[1:] < ys_t[:-1]).any()):
            raise ValueError("ys must be non-decreasing (the map must be monotone)")
        self._xs = xs_t
        self._ys = ys_t
        self._cache: dict[torch.device, tuple[torch.Tensor, ...]] = {}

    # ------------------------------------------------------------------ helpers
    @property
    def xs(self) -> torch.Tensor:
        """Knot positions (float64, CPU; a copy)."""
        return self._xs.clone()

    @property
    def ys(self) -> torch.Tensor:
        """Knot values (float64, CPU; a copy)."""
        return self._ys.clone()

    @property
    def num_knots(self) -> int:
        return int(self._xs.numel())

    def _knots(self, device: torch.device):
        """(xs, ys, slopes) on ``device``; slopes are per segment, 0 for zero-width segments.

        Built outside inference mode so the cached tensors stay normal tensors even when first requested
        from a ``torch.inference_mode()`` block (they are later usable with autograd).
        """
        if device not in self._cache:
            with torch.inference_mode(False):
                self._cache[device] = self._build_knots(device)
        return self._cache[device]

    def _build_knots(self, device: torch.device):
        xs = self._xs.to(device).clone()
        ys = self._ys.to(device).clone()
        dx = xs[1:] - xs[:-1]
        dy = ys[1:] - ys[:-1]
        slopes = torch.where(dx > 0, dy / torch.where(dx > 0, dx, torch.ones_like(dx)), torch.zeros_like(dx))
        return xs, ys, slopes

    @staticmethod
    def _prep(u) -> tuple[torch.Tensor, torch.dtype]:
        u = torch.as_tensor(u)
        out_dtype = u.dtype if u.is_floating_point() else torch.get_default_dtype()
        return u.to(torch.float64), out_dtype

    def segment(self, u) -> torch.Tensor:
        """Index ``i`` (int64, in ``[0, K-2]``) of the segment ``[xs[i], xs[i+1]]`` used for ``u``.

        ``i`` is the last index with ``xs[i] <= u`` (so a point on an interior knot belongs to the segment
        to its right), clipped into ``[0, K-2]`` (points left of the support get segment 0, points at or
        right of ``xs[-1]`` get the last segment).
        """
        u64, _ = self._prep(u)
        xs, _, _ = self._knots(u64.device)
        idx = torch.searchsorted(xs, u64.detach().contiguous(), right=True) - 1
        return idx.clamp(0, self.num_knots - 2)

    # ------------------------------------------------------------------ evaluation
    def __call__(self, u) -> torch.Tensor:
        """``R(u)``: linear interpolation on the knots, constant ``ys[0]`` / ``ys[-1]`` outside them."""
        u64, out_dtype = self._prep(u)
        xs, ys, slopes = self._knots(u64.device)
        idx = self.segment(u64)
        val = ys[idx] + slopes[idx] * (u64 - xs[idx])
        val = torch.where(u64 < xs[0], ys[0], val)
        val = torch.where(u64 >= xs[-1], ys[-1], val)
        return val.to(out_dtype)

    def derivative(self, u) -> torch.Tensor:
        """``R'(u)``: slope of the segment containing ``u`` on ``[xs[0], xs[-1]]``; 0 outside."""
        u64, out_dtype = self._prep(u)
        xs, _, slopes = self._knots(u64.device)
        idx = self.segment(u64)
        inside = (u64 >= xs[0]) & (u64 <= xs[-1])
        d = torch.where(inside, slopes[idx], torch.zeros_like(u64))
        return d.detach().to(out_dtype)

    def inverse(self, level) -> torch.Tensor:
        """``R^{-1}(level) = inf{u in [xs[0], xs[-1]] : R(u) >= level}`` by linear interpolation.

        Flat regions of ``R`` resolve to their left end; vertical jumps resolve to the jump location.
        Differentiable in ``level`` on strictly increasing segments.
        """
        p64, out_dtype = self._prep(level)
        xs, ys, _ = self._knots(p64.device)
        k = self.num_knots
        # first index j with ys[j] >= level  ->  segment (j-1, j) with ys[j-1] < level <= ys[j]
        j = torch.searchsorted(ys, p64.detach().contiguous(), right=False)
        jc = j.clamp(1, k - 1)
        y0, y1 = ys[jc - 1], ys[jc]
        x0, x1 = xs[jc - 1], xs[jc]
        dy = y1 - y0
        safe_dy = torch.where(dy > 0, dy, torch.ones_like(dy))
        val = x0 + (p64 - y0) * (x1 - x0) / safe_dy
        val = torch.where(dy > 0, val, x1)
        val = torch.where(j <= 0, xs[0], val)
        val = torch.where(j >= k, xs[-1], val)
        return val.to(out_dtype)

    def __repr__(self) -> str:
        return (
            f"PiecewiseLinearMap(num_knots={self.num_knots}, x=[{self._xs[0].item():.4g}, {self._xs[-1].item():.4g}], "
            f"y=[{self._ys[0].item():.4g}, {self._ys[-1].item():.4g}])"
        )

    @classmethod
    def identity(cls) -> PiecewiseLinearMap:
        return cls([0.0, 1.0], [0.0, 1.0])


class RecalibratedForecast:
    """Forecast with CDF ``R(F(y))`` built from a base forecast ``F`` and a recalibration map ``R``.

    ``base`` is duck-typed: it needs ``cdf``, ``log_prob`` and ``icdf`` (e.g. ``torch.distributions.Normal``).
    ``recalibrator_map`` is a :class:`PiecewiseLinearMap` or any object with a ``.map`` attribute holding one
    (e.g. a fitted recalibrator).

    * ``cdf(y) = R(F(y))``.
    * ``icdf(level) = F^{-1}(clamp(R^{-1}(level), 1e-6, 1 - 1e-6))`` -- the clamp is the authors'.
    * ``log_prob(y) = log max(R'(F(y)), slope_floor) + base.log_prob(y)``: the **proper** density of the
      recalibrated forecast by the chain rule, ``d/dy R(F(y)) = R'(F(y)) f(y)``, with ``R'`` the slope of
      the linear segment containing ``F(y)`` (right-hand slope at knots). Where ``R' = 0`` (``F(y)``
      outside the map's support, or on a flat piece) the true density is 0; we floor ``R'`` at
      ``slope_floor`` (default ``1e-12``, i.e. ``-27.6`` nats added to the base log density) so the NLL
      stays finite but large. The gradient of ``log_prob`` w.r.t. the base parameters flows through
      ``F`` only via ``base.log_prob`` (``R'`` is piecewise constant).
    * ``log_prob_finite_difference(y, h)``: the official code's "density",
      ``log(R(F(y+h)) - R(F(y)) + 1e-10) - log(h)``, whose per-point NLL is capped at
      ``-log(1e-10 / 1e-4) ~= 13.8`` for ``h = 1e-4``.
    * ``sample(generator=None, sample_shape=())`` = ``icdf`` of uniforms.

    Note: with the conformal map the end knots can fall outside ``[0, 1]`` so that ``R(0) > 0`` or
    ``R(1) < 1`` (by at most ``1/(N+1)`` each); the recalibrated CDF then does not reach 0 / 1 and the
    proper density integrates to ``R(1) - R(0)`` (faithful to the official map).
    """

    def __init__(self, base, recalibrator_map, slope_floor: float = DEFAULT_SLOPE_FLOOR):
        if not isinstance(recalibrator_map, PiecewiseLinearMap):
            recalibrator_map = getattr(recalibrator_map, "map", None)
        if not isinstance(recalibrator_map, PiecewiseLinearMap):
            raise TypeError("recalibrator_map must be a PiecewiseLinearMap or have a .map PiecewiseLinearMap")
        if not slope_floor > 0:
            raise ValueError("slope_floor must be > 0")
        self.base = base
        self.map = recalibrator_map
        self.slope_floor = float(slope_floor)

    @property
    def batch_shape(self) -> torch.Size:
        bs = getattr(self.base, "batch_shape", None)
        if bs is not None:
            return torch.Size(bs)
        return self._probe().shape

    def _probe(self) -> torch.Tensor:
        with torch.no_grad():
            return self.base.icdf(torch.tensor(0.5))

    def cdf(self, y) -> torch.Tensor:
        return self.map(self.base.cdf(y))

    def icdf(self, level) -> torch.Tensor:
        u = self.map.inverse(level).clamp(ICDF_LEVEL_CLAMP, 1.0 - ICDF_LEVEL_CLAMP)
        return self.base.icdf(u)

    def log_prob(self, y) -> torch.Tensor:
        base_lp = self.base.log_prob(y)
        slope = self.map.derivative(self.base.cdf(y))
        return torch.log(slope.clamp_min(self.slope_floor)).to(base_lp.dtype) + base_lp

    def log_prob_finite_difference(self, y, h: float = 1e-4) -> torch.Tensor:
        y = torch.as_tensor(y)
        diff = self.cdf(y + h) - self.cdf(y)
        return torch.log(diff + 1e-10) - math.log(h)

    def sample(
        self, generator: torch.Generator | None = None, sample_shape: Sequence[int] | int = ()
    ) -> torch.Tensor:
        if isinstance(sample_shape, int):
            sample_shape = (sample_shape,)
        probe = self._probe()
        shape = torch.Size(sample_shape) + self.batch_shape
        u = torch.rand(shape, generator=generator, dtype=probe.dtype, device=probe.device)
        return self.icdf(u)

    def __repr__(self) -> str:
        return f"RecalibratedForecast(base={self.base!r}, map={self.map!r})"


class QuantileRecalibrator:
    """Common API: ``fit(pit_val) -> self``, ``.map`` (a :class:`PiecewiseLinearMap`), ``__call__(u) = R(u)``,
    ``forecast(base) -> RecalibratedForecast``."""

    name: str = "base"

    def __init__(self):
        self._map: PiecewiseLinearMap | None = None

    @property
    def is_fitted(self) -> bool:
        return self._map is not None

    @property
    def map(self) -> PiecewiseLinearMap:
        if self._map is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call .fit(pit_val) first")
        return self._map

    def fit(self, pit_val) -> QuantileRecalibrator:
        raise NotImplementedError

    def __call__(self, u) -> torch.Tensor:
        return self.map(u)

    def forecast(self, base, slope_floor: float = DEFAULT_SLOPE_FLOOR) -> RecalibratedForecast:
        return RecalibratedForecast(base, self.map, slope_floor=slope_floor)

    @staticmethod
    def _pits(pit_val) -> np.ndarray:
        if torch.is_tensor(pit_val):
            pit_val = pit_val.detach().to("cpu", torch.float64).numpy()
        p = np.asarray(pit_val, dtype=np.float64).reshape(-1)
        if p.size == 0:
            raise ValueError("need at least one validation PIT")
        if not np.all(np.isfinite(p)):
            raise ValueError("validation PITs must be finite")
        return p

    def __repr__(self) -> str:
        return f"{type(self).__name__}(map={self._map!r})"


class IdentityQuantileRecalibrator(QuantileRecalibrator):
    """No recalibration: ``R(u) = u`` on ``[0, 1]``. ``fit`` ignores its input.

    ``forecast(base)`` still returns a :class:`RecalibratedForecast` for a uniform API; its ``cdf`` and
    ``log_prob`` equal the base's (``R' = 1`` on the closed ``[0, 1]``) and its ``icdf`` only adds the
    ``[1e-6, 1 - 1e-6]`` level clamp.
    """

    name = "none"

    def __init__(self):
        super().__init__()
        self._map = PiecewiseLinearMap.identity()

    def fit(self, pit_val=None) -> IdentityQuantileRecalibrator:
        return self


class IsotonicQuantileRecalibrator(QuantileRecalibrator):
    """Kuleshov et al. (2018) quantile recalibration with sklearn's ``IsotonicRegression``.

    Construction (as in Kuleshov et al.): for validation PITs ``p_k`` (clipped to ``[0, 1]``) compute the
    empirical CDF ``P_hat(p_k) = #{j : p_j <= p_k} / N`` and fit an increasing isotonic regression of
    ``P_hat`` on ``p`` (bounds ``[0, 1]``). ``R`` is the piecewise-linear interpolation through the fitted
    thresholds (``X_thresholds_``, ``y_thresholds_``), which coincides with sklearn's ``predict`` inside
    ``(min p, max p]``; knots ``(0, 0)`` and ``(1, 1)`` are enforced so ``R(0) = 0`` and ``R(1) = 1`` (instead
    of sklearn's constant clipping outside the data range): they are added, or, when PITs sit exactly at 0
    (float underflow of the base CDF) or 1, they replace the fitted value there. So ``R`` is continuous, and
    the mass of PITs tied at 0 is spread linearly over ``[0, smallest positive PIT]``.

    Because ``(p_(k), k/N)`` is already monotone, the isotonic fit only pools tied PITs, so ``R`` is in
    effect the linearly interpolated empirical CDF of the validation PITs through ``(p_(k), k/N)``.
    """

    name = "isotonic"

    def fit(self, pit_val) -> IsotonicQuantileRecalibrator:
        from sklearn.isotonic import IsotonicRegression

        p = np.clip(self._pits(pit_val), 0.0, 1.0)
        n = p.size
        p_sorted = np.sort(p)
        ecdf = np.searchsorted(p_sorted, p, side="right") / n
        iso = IsotonicRegression(increasing=True, y_min=0.0, y_max=1.0, out_of_bounds="clip")
        iso.fit(p, ecdf)
        xs = np.array(iso.X_thresholds_, dtype=np.float64)
        ys = np.array(iso.y_thresholds_, dtype=np.float64)  # copy: modified below
        # enforce R(0) = 0 and R(1) = 1: replace a fitted threshold sitting at 0 / 1, otherwise add one
        if xs[0] == 0.0:
            ys[0] = 0.0
        else:
            xs, ys = np.concatenate([[0.0], xs]), np.concatenate([[0.0], ys])
        if xs[-1] == 1.0:
            ys[-1] = 1.0
        else:
            xs, ys = np.concatenate([xs, [1.0]]), np.concatenate([ys, [1.0]])
        self._map = PiecewiseLinearMap(xs, np.clip(ys, 0.0, 1.0))
        self.isotonic_regression_ = iso
        return self


class ConformalQuantileRecalibrator(QuantileRecalibrator):
    """The official method: torchuq ``ConformalCalibrator(input_type='distribution', interpolation='linear')``.

    With sorted validation PITs ``s_(1) <= ... <= s_(N)`` (N >= 2) and mean gap
    ``g = mean(s_(k+1) - s_(k)) = (s_(N) - s_(1)) / (N - 1)``, add ``s_(0) = s_(1) - g`` and
    ``s_(N+1) = s_(N) + g``; ``R`` is the piecewise-linear interpolation through ``(s_(k), k/(N+1))``,
    ``k = 0..N+1``, constant 0 below ``s_(0)`` and 1 above ``s_(N+1)``. Its inverse interpolates the same
    knots (torchuq indexes the knot array at ``level * (N+1)``; identical on these uniformly spaced levels).

    Ambiguities resolved (documented choices):

    * Score ``PIT - 0.5`` vs ``PIT``: torchuq's conformal calibrator scores ``F(y) - 0.5`` (some torchuq versions
      use ``F(y)``); a constant shift of the knots and the query cancels, so we store knots in PIT space.
    * End knots are **not** clipped to ``[0, 1]`` (torchuq does not clip); if ``s_(0) < 0`` then
      ``R(0) > 0`` (<= 1/(N+1)) and ``R^{-1}(level)`` can be negative -- the base icdf then sees the level
      clamped to ``1e-6`` (the authors' clamp).
    * Tied PITs: torchuq divides by ``gap + 1e-20`` and so makes a jump there; our map has the same jump and
      takes the right-continuous value at the tie (torchuq the left one; a measure-zero difference).
    * Precision: knots and evaluation are float64 (torchuq uses the forecast dtype, typically float32).
    * PITs are used as given (no clipping), like torchuq.
    """

    name = "conformal"

    def fit(self, pit_val) -> ConformalQuantileRecalibrator:
        s = np.sort(self._pits(pit_val))
        n = s.size
        if n < 2:
            raise ValueError(
                "the conformal recalibrator needs at least 2 validation PITs (mean gap undefined)"
            )
        gap = float(np.mean(np.diff(s)))
        xs = np.concatenate([[s[0] - gap], s, [s[-1] + gap]])
        ys = np.arange(n + 2, dtype=np.float64) / (n + 1)
        self._map = PiecewiseLinearMap(xs, ys)
        return self


QUANTILE_RECALIBRATORS: dict[str, type[QuantileRecalibrator]] = {
    "none": IdentityQuantileRecalibrator,
    "isotonic": IsotonicQuantileRecalibrator,
    "conformal": ConformalQuantileRecalibrator,
}


def make_quantile_recalibrator(name: str) -> QuantileRecalibrator:
    """Build an unfitted regression recalibrator by name: ``isotonic``, ``conformal`` or ``none``."""
    key = str(name).strip().lower() if name is not None else "none"
    if key not in QUANTILE_RECALIBRATORS:
        raise ValueError(
            f"unknown quantile recalibrator {name!r}; valid names: {', '.join(sorted(QUANTILE_RECALIBRATORS))}"
        )
    return QUANTILE_RECALIBRATORS[key]()
