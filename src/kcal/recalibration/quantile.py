"""Post-hoc quantile recalibration for regression forecasts.

A recalibrator learns a monotone map ``R: [0, 1] -> [0, 1]`` from validation PITs
``u_k = F_k(y_k)`` and turns a forecast with CDF ``F`` into one with CDF ``R(F(y))``.

Two fitting rules share one piecewise-linear representation (:class:`PiecewiseLinearMap`), the exact
flavour's:

* :class:`IsotonicQuantileRecalibrator` -- Kuleshov, Fenner & Ermon (2018).
* :class:`ConformalQuantileRecalibrator` -- the construction the official code ran (torchuq
  ``ConformalCalibrator(input_type='distribution', interpolation='linear')``), in float64.

:class:`OfficialConformalRecalibrator` is the same construction in the official flavour: the authors'
arithmetic in the forecasts' dtype (float32 for their networks), their convention at tied validation PITs
and their finite-difference density (:class:`OfficialConformalForecast`). :func:`make_quantile_recalibrator`
picks it for ``conformal`` when ``flavour="official"``.

Conventions of :class:`PiecewiseLinearMap` (the exact flavour's maps):

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

from kcal.inputs import check_values

__all__ = [
    "PiecewiseLinearMap",
    "RecalibratedForecast",
    "QuantileRecalibrator",
    "IdentityQuantileRecalibrator",
    "IsotonicQuantileRecalibrator",
    "ConformalQuantileRecalibrator",
    "OfficialConformalRecalibrator",
    "OfficialConformalForecast",
    "make_quantile_recalibrator",
    "QUANTILE_RECALIBRATORS",
    "FLAVOURS",
    "ICDF_LEVEL_CLAMP",
    "DEFAULT_SLOPE_FLOOR",
    "FINITE_DIFFERENCE_STEP",
]

#: The authors' clamp on the level passed to the base forecast's icdf (torchuq
#: ``_conformal_iscore_distribution``).
ICDF_LEVEL_CLAMP = 1e-6

#: Floor on ``R'`` inside ``RecalibratedForecast.log_prob`` (see its docstring).
DEFAULT_SLOPE_FLOOR = 1e-12

#: The official "density" is ``log(cdf(y + h) - cdf(y) + FINITE_DIFFERENCE_FLOOR) - log(h)`` with this ``h``.
FINITE_DIFFERENCE_STEP = 1e-4
FINITE_DIFFERENCE_FLOOR = 1e-10

#: The two evaluation flavours a recalibrator is built for (``kcal.evaluation``).
FLAVOURS = ("exact", "official")


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
      ``-log(1e-10 / 1e-4) ~= 13.8`` for ``h = 1e-4``, on this map (in the forecast's dtype); the
      official flavour's own conformal arithmetic is :class:`OfficialConformalForecast`.
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

    def log_prob_finite_difference(self, y, h: float = FINITE_DIFFERENCE_STEP) -> torch.Tensor:
        y = torch.as_tensor(y)
        diff = self.cdf(y + h) - self.cdf(y)
        return torch.log(diff + FINITE_DIFFERENCE_FLOOR) - math.log(h)

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
        check_values(("pit_val", torch.from_numpy(p)))
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
        try:
            from sklearn.isotonic import IsotonicRegression
        except ModuleNotFoundError as exc:  # a library-only install (pip install kcal)
            raise ModuleNotFoundError(
                f'IsotonicQuantileRecalibrator needs scikit-learn ({exc}): pip install "kcal[pipeline]" '
                "or scikit-learn",
                name=exc.name,
            ) from exc

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
    """The official construction (torchuq ``ConformalCalibrator(input_type='distribution',
    interpolation='linear')``) as a float64 :class:`PiecewiseLinearMap`: the exact flavour's conformal map.

    With sorted validation PITs ``s_(1) <= ... <= s_(N)`` (N >= 2) and mean gap
    ``g = mean(s_(k+1) - s_(k)) = (s_(N) - s_(1)) / (N - 1)``, add ``s_(0) = s_(1) - g`` and
    ``s_(N+1) = s_(N) + g``; ``R`` is the piecewise-linear interpolation through ``(s_(k), k/(N+1))``,
    ``k = 0..N+1``, constant 0 below ``s_(0)`` and 1 above ``s_(N+1)``. Its inverse interpolates the same
    knots (torchuq indexes the knot array at ``level * (N+1)``; identical on these uniformly spaced levels).

    Where it departs from the official arithmetic (:class:`OfficialConformalRecalibrator` has it):

    * Score ``PIT - 0.5`` vs ``PIT``: torchuq scores ``F(y) - 0.5``; in exact arithmetic the shift of
      knots and query cancels, so the knots are stored in PIT space.
    * Precision: knots and evaluation are float64; torchuq works in the forecast's dtype (float32 for the
      authors' networks), where the score ``F(y) - 0.5`` rounds small PITs and ``F`` itself reaches exactly
      1.0 about 5.4 standard deviations out.
    * Tied validation PITs (repeated rows, PITs of exactly 1.0 or 0.0) make a vertical jump in both; this
      map takes the right-continuous value at the tie, torchuq the left limit. Test rows whose PIT equals
      the tied value (a repeated row, or any label far enough in the tail to round its PIT to 1.0) get
      different values, so the difference is not of measure zero on such data.
    * The density is the proper one (:meth:`RecalibratedForecast.log_prob`), not torchuq's finite
      difference.

    End knots are not clipped to ``[0, 1]`` (neither does torchuq): if ``s_(0) < 0`` then ``R(0) > 0``
    (<= 1/(N+1)) and ``R^{-1}(level)`` can be negative -- the base icdf then sees the level clamped to
    ``1e-6`` (the authors' clamp). PITs are used as given (no clipping), like torchuq.
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


class OfficialConformalRecalibrator(QuantileRecalibrator):
    """The official flavour's conformal recalibration: what torchuq's ``ConformalCalibrator(input_type=
    'distribution', interpolation='linear', score_func=1)`` computes in the authors' test loop, operation for
    operation, in the dtype of the validation PITs (float32 when they come from the network's float32
    forecasts, as theirs did).

    Fit (on the whole validation split): scores ``s_k = F_k(y_k) - 0.5`` in that dtype, sorted; one knot is
    added below the smallest and one above the largest score, each one mean gap (``mean(s_(k+1) - s_(k))``)
    beyond it, giving ``K = N + 2`` knots ``q_0 <= ... <= q_(N+1)``.

    CDF of a score ``s`` (:meth:`__call__` on PITs, :class:`OfficialConformalForecast` on labels): every
    segment contributes the fraction of it that lies below ``s``,
    ``clamp((s - q_j) / (q_(j+1) - q_j + 1e-20), 0, 1)``, and ``R = sum_j / (N + 1)``. Mathematically this is
    the piecewise-linear interpolation through ``(q_k + 0.5, k / (N + 1))`` (:attr:`map` holds it in
    float64, for inspection); in float32 the sum rounds like torchuq's, which is what makes the
    finite-difference density below agree. At a tied score (a zero-width segment) the segment contributes
    0 unless ``s`` lies strictly above it, so ``R`` takes the left limit there.

    Rows are evaluated in chunks of 128 (the authors' test batch); a row's value depends only on the row.

    Inverse (:meth:`inverse_score`, used for sampling): ``t = level * (N + 1)``, and the score is
    ``q_floor(t) * (ceil(t) - t) + q_ceil(t) * (1 - (ceil(t) - t))``.
    """

    name = "conformal"
    flavour = "official"
    #: Rows per chunk when the CDF is evaluated (the authors' regression test batch).
    chunk_rows = 128

    def __init__(self):
        super().__init__()
        self._knots: torch.Tensor | None = None

    def fit(self, pit_val) -> OfficialConformalRecalibrator:
        u = torch.as_tensor(pit_val).detach()
        if not u.is_floating_point():
            u = u.to(torch.get_default_dtype())
        u = u.reshape(-1)
        if u.numel() < 2:
            raise ValueError(
                "the conformal recalibrator needs at least 2 validation PITs (mean gap undefined)"
            )
        check_values(("pit_val", u))
        scores = torch.sort(u - 0.5).values
        gap = (scores[1:] - scores[:-1]).mean(dim=0, keepdim=True)
        knots = torch.cat([scores[:1] - gap, scores, scores[-1:] + gap])
        self._knots = knots
        self._width = knots[1:] - knots[:-1] + 1e-20
        n = scores.numel()
        self._map = PiecewiseLinearMap(
            knots.double().cpu() + 0.5, np.arange(n + 2, dtype=np.float64) / (n + 1)
        )
        return self

    def _fitted_knots(self) -> torch.Tensor:
        if self._knots is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call .fit(pit_val) first")
        return self._knots

    @property
    def knots(self) -> torch.Tensor:
        """The ``N + 2`` knots in score space (``PIT - 0.5``), in the validation PITs' dtype (a copy)."""
        return self._fitted_knots().clone()

    def score_cdf(self, score) -> torch.Tensor:
        """``R`` as a function of the score ``PIT - 0.5`` (any shape; computed in the knots' dtype)."""
        knots = self._fitted_knots()
        score = torch.as_tensor(score)
        s = score.to(device=knots.device, dtype=knots.dtype).reshape(-1)
        lower, width = knots[:-1], self._width
        parts = [
            ((s[i : i + self.chunk_rows, None] - lower) / width).clamp(min=0, max=1).sum(dim=-1)
            / (knots.numel() - 1)
            for i in range(0, s.numel(), self.chunk_rows)
        ]
        out = torch.cat(parts) if parts else s.clone()
        return out.reshape(score.shape).to(score.device)

    def __call__(self, u) -> torch.Tensor:
        """``R(u)`` for PITs ``u``, in the knots' dtype (the score ``u - 0.5`` is formed in that dtype)."""
        knots = self._fitted_knots()
        u = torch.as_tensor(u)
        return self.score_cdf(u.to(device=knots.device, dtype=knots.dtype) - 0.5).to(u.device)

    def inverse_score(self, level) -> torch.Tensor:
        """The score whose ``R`` is ``level`` (levels clamped to ``[0, 1]``), by the knot-index interpolation."""
        knots = self._fitted_knots()
        level = torch.as_tensor(level)
        t = level.to(device=knots.device, dtype=knots.dtype).clamp(0, 1) * (knots.numel() - 1)
        above = torch.ceil(t)
        ratio = above - t
        out = knots[torch.floor(t).long()] * ratio + knots[above.long()] * (1 - ratio)
        return out.to(level.device)

    def forecast(self, base, slope_floor: float | None = None) -> OfficialConformalForecast:
        """The recalibrated forecast of ``base`` (``slope_floor`` is accepted and ignored: no proper density)."""
        self._fitted_knots()
        return OfficialConformalForecast(base, self)

    def __repr__(self) -> str:
        n = None if self._knots is None else self._knots.numel() - 2
        dtype = None if self._knots is None else self._knots.dtype
        return f"{type(self).__name__}(n_val={n}, dtype={dtype})"


class OfficialConformalForecast:
    """A forecast recalibrated by :class:`OfficialConformalRecalibrator`, as torchuq's
    ``DistributionConformalLinear`` evaluates it.

    * ``cdf(y) = R(F(y))``: the score ``F(y) - 0.5`` in the knots' dtype, then the segment sum.
    * ``log_prob(y) = log(cdf(y + 1e-4) - cdf(y) + 1e-10) - log(1e-4)`` in that dtype: a finite difference,
      not a density. A row costs at most ``log(1e-4 / 1e-10) ~= 13.8`` nats, which it pays wherever the
      two CDF values are equal: outside the validation scores' range and, in float32, wherever ``F``
      rounds the same at ``y`` and ``y + 1e-4`` (labels about 4 standard deviations out or more).
    * ``icdf(level) = F^{-1}(clamp(score + 0.5, 1e-6, 1 - 1e-6))`` with the score from
      :meth:`OfficialConformalRecalibrator.inverse_score`.
    * ``sample(generator, sample_shape)``: ``icdf`` of uniforms drawn in the knots' dtype.
    """

    def __init__(self, base, recalibrator: OfficialConformalRecalibrator):
        self.base = base
        self.recalibrator = recalibrator

    @property
    def dtype(self) -> torch.dtype:
        return self.recalibrator._knots.dtype

    @property
    def batch_shape(self) -> torch.Size:
        bs = getattr(self.base, "batch_shape", None)
        if bs is not None:
            return torch.Size(bs)
        with torch.no_grad():
            return self.base.icdf(torch.tensor(0.5, dtype=self.dtype)).shape

    def cdf(self, y) -> torch.Tensor:
        return self.recalibrator.score_cdf(self.base.cdf(y) - 0.5)

    def icdf(self, level) -> torch.Tensor:
        score = self.recalibrator.inverse_score(level)
        return self.base.icdf((score + 0.5).clamp(min=ICDF_LEVEL_CLAMP, max=1 - ICDF_LEVEL_CLAMP))

    def log_prob_finite_difference(self, y, h: float = FINITE_DIFFERENCE_STEP) -> torch.Tensor:
        y = torch.as_tensor(y)
        return torch.log(self.cdf(y + h) - self.cdf(y) + FINITE_DIFFERENCE_FLOOR) - math.log(h)

    def log_prob(self, y) -> torch.Tensor:
        """The official finite-difference "density" (see the class docstring)."""
        return self.log_prob_finite_difference(y)

    def sample(
        self, generator: torch.Generator | None = None, sample_shape: Sequence[int] | int = ()
    ) -> torch.Tensor:
        if isinstance(sample_shape, int):
            sample_shape = (sample_shape,)
        shape = torch.Size(sample_shape) + self.batch_shape
        device = generator.device if generator is not None else self.recalibrator._knots.device
        return self.icdf(torch.rand(shape, generator=generator, dtype=self.dtype, device=device))

    def __repr__(self) -> str:
        return f"OfficialConformalForecast(base={self.base!r}, recalibrator={self.recalibrator!r})"


QUANTILE_RECALIBRATORS: dict[str, type[QuantileRecalibrator]] = {
    "none": IdentityQuantileRecalibrator,
    "isotonic": IsotonicQuantileRecalibrator,
    "conformal": ConformalQuantileRecalibrator,
}


def make_quantile_recalibrator(name: str, flavour: str = "exact") -> QuantileRecalibrator:
    """Build an unfitted regression recalibrator by name: ``isotonic``, ``conformal`` or ``none``.

    ``flavour="official"`` gives :class:`OfficialConformalRecalibrator` for ``conformal`` (the authors'
    arithmetic); the authors ran no other recalibrator, so ``isotonic`` and ``none`` are the same in both
    flavours.
    """
    key = str(name).strip().lower() if name is not None else "none"
    if key not in QUANTILE_RECALIBRATORS:
        raise ValueError(
            f"unknown quantile recalibrator {name!r}; valid names: {', '.join(sorted(QUANTILE_RECALIBRATORS))}"
        )
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; valid: {', '.join(FLAVOURS)}")
    if flavour == "official" and key == "conformal":
        return OfficialConformalRecalibrator()
    return QUANTILE_RECALIBRATORS[key]()
