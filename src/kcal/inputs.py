"""Input checks shared by the metrics, MMD estimators, baselines, metric classes and losses.

Every public function of :mod:`kcal.metrics`, :mod:`kcal.mmd` and :mod:`kcal.baselines` passes its
arguments through these helpers first, so all of them accept numpy arrays as well as torch tensors and
refuse bad input with the same one-line messages:

* :func:`as_float` — a float tensor of any shape; :func:`as_vector` — a 1-D ``(n,)`` float tensor (an
  ``(n, 1)`` column is flattened);
* :func:`check_values` — the value checks: NaN and infinite entries refused, and ``> 0`` for the arguments
  named in ``positive`` (standard deviations);
* :func:`same_length` — every argument has one row per example;
* :func:`check_probs` — ``(n, m)`` class probabilities (rows in [0, 1] summing to 1, entries within
  float rounding of [0, 1] clipped; logits are refused with a message saying to pass ``softmax(logits, -1)``) and ``(n,)`` integer labels in ``[0, m)``;
* :func:`gaussian_params` — ``(mean, std)`` of a Gaussian forecast given as a pair or a ``Normal``;
  :func:`checked_gaussian` — the same, as float tensors with their values checked;
* :func:`as_forecast` — any forecast object with ``cdf``/``log_prob``/``icdf`` (a pair becomes a
  ``Normal``, its parameters checked as :func:`checked_gaussian` does; an object is taken as built);
  :func:`checked_forecast` — a forecast with its labels ``y``, one per row;
* :func:`reject_former_order` — the one rule for calls in the former order ``f(mean, std, y)``: a
  one-line ``TypeError`` saying to pass ``(mean, std)`` as one forecast;
* :func:`check_weight`, :func:`check_bandwidths` — a regulariser's weight (finite, >= 0) and the
  bandwidths among an objective's parameters (> 0), for the objectives and the run's config checks.

The rules every public function follows through these helpers:

* integer (and bool) tensors where floats are needed (forecasts, targets, features, probabilities) are
  CONVERTED to the default float dtype, never refused; labels and group ids stay integers (float labels
  are refused);
* shapes and lengths are always checked (no host synchronisation): an argument with another number of
  rows than the prediction raises ``ValueError("x has 10 rows, labels has 12: ...")``;
* values that need the data on the host (NaN, infinities, std > 0, probability sums, label range) are
  checked only when ``validate_args`` is true (the default) and never inside ``torch.func`` transforms;
  training loops pass ``validate_args=False`` to avoid a device-to-host synchronisation per step;
* a function checks its arguments, not what it derives from them (the PIT values of ``qce``, say): the
  arguments of a valid call give finite intermediates, and a forecast object is its maker's.

Every refusal is a one-line ``ValueError`` that starts with the argument's name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from kcal.task_names import TASKS

__all__ = [
    "PROB_CLIP_ATOL",
    "PROB_SUM_ATOL",
    "TASKS",
    "as_float",
    "as_forecast",
    "as_vector",
    "check_bandwidths",
    "check_probs",
    "check_values",
    "check_weight",
    "checked_forecast",
    "checked_gaussian",
    "functorch_active",
    "gaussian_params",
    "reject_former_order",
    "reject_renamed",
    "same_length",
]


PROB_SUM_ATOL = 1e-3
"""Rows of ``probs`` must sum to 1 within this absolute tolerance."""

PROB_CLIP_ATOL = 1e-6
"""Entries within this of [0, 1] are float rounding of a probability and are clipped into [0, 1];
entries further out are refused (the usual sign of logits)."""


def functorch_active() -> bool:
    """True inside ``torch.func`` transforms (vmap/grad), where data-dependent checks cannot run."""
    fn = getattr(torch._C, "_are_functorch_transforms_active", None)
    return True if fn is None else bool(fn())


def as_float(t, name: str) -> Tensor:
    """``t`` (numpy or torch) as a floating tensor of its own shape: integer and bool input becomes the
    default float dtype (``name`` is the argument's, for the error of an input torch cannot read)."""
    if not isinstance(t, Tensor):
        try:
            t = torch.as_tensor(t)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"{name} must be a numeric array or tensor, got {type(t).__name__}") from err
    if not torch.is_floating_point(t):
        if t.is_complex():
            raise ValueError(f"{name} must be real, got {t.dtype}")
        t = t.to(torch.get_default_dtype())
    return t


def as_vector(t, name: str) -> Tensor:
    """``t`` (numpy or torch) as a 1-D floating tensor of shape ``(n,)``; ``(n, 1)`` is flattened.

    Integer input becomes the default float dtype; an empty or higher-dimensional input raises
    ``ValueError`` naming ``name``.
    """
    t = as_float(t, name)
    if t.ndim == 2 and t.shape[1] == 1:  # (n, 1) as produced by some models
        t = t[:, 0]
    if t.ndim != 1:
        raise ValueError(f"{name} must be a 1-D tensor of shape (n,), got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty")
    return t


def _where(mask: Tensor) -> str:
    """Where the first True entry of ``mask`` is: ``row 3`` (1-D) or ``index (3, 1)``."""
    first = torch.nonzero(mask)[0].tolist()
    return f"row {first[0]}" if len(first) == 1 else f"index {tuple(first)}"


def check_values(
    *named: tuple[str, Tensor], positive: tuple[str, ...] = (), validate_args: bool = True
) -> None:
    """Refuse NaN or infinite entries in every ``(name, tensor)``, and entries ``<= 0`` in those whose name
    is in ``positive``, with a one-line ``ValueError`` naming the argument and the first bad entry.

    The value checks of the library: one host synchronisation for all the arguments, run only when
    ``validate_args`` and outside ``torch.func`` transforms. Integer tensors are finite and pass the NaN
    check; ``None`` entries are skipped.
    """
    if not validate_args or functorch_active():
        return
    named = [(name, t.detach()) for name, t in named if t is not None]
    if not named:
        return
    flags = []
    for name, t in named:
        no = torch.zeros((), dtype=torch.bool, device=t.device)
        flags.append(~torch.isfinite(t).all() if torch.is_floating_point(t) else no)
        flags.append((t <= 0).any() if name in positive else no)
    devices = {f.device for f in flags}
    bad = (torch.stack(flags) if len(devices) == 1 else torch.stack([f.cpu() for f in flags])).tolist()
    for k, (name, t) in enumerate(named):
        if bad[2 * k]:
            nan = torch.isnan(t)
            mask = nan if bool(nan.any()) else ~torch.isfinite(t)
            what = "NaN" if bool(nan.any()) else "an infinite value"
            raise ValueError(
                f"{name} holds {what} ({_where(mask)}): pass finite values (a NaN or inf usually means that "
                "the model diverged or that the data holds missing values)"
            )
        if bad[2 * k + 1]:
            mask = t <= 0
            value = float(t[mask].reshape(-1)[0])
            raise ValueError(
                f"{name} must be > 0, got {value:g} ({_where(mask)}): floor it, e.g. {name}.clamp_min(1e-6)"
            )


def same_length(*named: tuple[str, Tensor | int]) -> None:
    """Raise ``ValueError`` unless every ``(name, tensor)`` has the same number of rows (first dim; an
    int is a number of rows).

    The message starts with the arguments whose length differs from the most common one (ties: the first
    argument's), e.g. ``"labels has 12 rows, x has 10: pass one row per example in every argument"``.
    ``None`` entries are skipped. No host synchronisation (shapes only).
    """
    rows = [(name, t if isinstance(t, int) else int(t.shape[0])) for name, t in named if t is not None]
    lengths = [n for _, n in rows]
    if len(set(lengths)) <= 1:
        return
    ref = max(lengths, key=lambda n: (lengths.count(n), -lengths.index(n)))
    odd = [f"{name} has {n} rows" for name, n in rows if n != ref]
    same = [name for name, n in rows if n == ref]
    raise ValueError(
        f"{', '.join(odd)}, {' and '.join(same)} {'has' if len(same) == 1 else 'have'} {ref}: pass one row "
        "per example in every argument"
    )


def check_probs(probs, labels=None, *, validate_args: bool = True, min_rows: int = 1, name: str = "probs"):
    """Check class probabilities ``probs`` ``(n, m)`` and optional integer ``labels`` ``(n,)``.

    Returns ``(probs, labels)`` as tensors (float probabilities, int64 labels, or ``None``). Refused with
    a one-line ``ValueError``: wrong shapes, fewer than ``min_rows`` rows, float labels, another number of
    labels than rows, and, when ``validate_args``, NaN or infinite probabilities, labels outside ``[0, m)`` or probabilities outside [0, 1] by more than
    ``PROB_CLIP_ATOL`` / rows not summing to 1 (within ``PROB_SUM_ATOL``), the usual sign that logits were
    passed. Entries within ``PROB_CLIP_ATOL`` of [0, 1] are clipped into it (only when ``validate_args``).
    ``name`` is the argument's name in the messages (``kce_probs``, say).
    """
    probs = torch.as_tensor(probs)
    if probs.ndim != 2:
        raise ValueError(f"{name} must have shape (n, m), got {tuple(probs.shape)}")
    n, m = probs.shape
    if n < max(1, min_rows):
        if n == 0:
            raise ValueError(f"{name} is empty (n = 0)")
        raise ValueError(f"need at least n={min_rows} examples, got n={n}")
    if not torch.is_floating_point(probs):
        probs = probs.to(torch.get_default_dtype())
    values_checked = validate_args and not functorch_active()
    if values_checked:
        check_values((name, probs))
        sums = probs.detach().sum(-1)
        low, high = float(probs.detach().min()), float(probs.detach().max())
        bad_range = low < -PROB_CLIP_ATOL or high > 1.0 + PROB_CLIP_ATOL
        if not bad_range and (low < 0.0 or high > 1.0):  # float rounding of a valid probability
            probs = probs.clamp(0.0, 1.0)
        worst = float((sums - 1.0).abs().max())
        if bad_range or not worst <= PROB_SUM_ATOL:
            raise ValueError(
                f"{name} must be class probabilities (entries in [0, 1], rows summing to 1); got rows summing "
                f"to {float(sums.min()):.4g}..{float(sums.max()):.4g}: pass torch.softmax(logits, -1), not logits"
            )
    if labels is None:
        return probs, None
    labels = torch.as_tensor(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise ValueError(f"labels must have shape (n,) = ({n},), got {tuple(labels.shape)}")
    same_length((name, probs), ("labels", labels))
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integer class ids (int64), got {labels.dtype}: pass labels.long()")
    labels = labels.long()
    if values_checked and (int(labels.min()) < 0 or int(labels.max()) >= m):
        raise ValueError(f"labels must lie in [0, {m - 1}] for {m} classes")
    return probs, labels


def reject_former_order(forecast, caller: str) -> None:
    """Raise the library's one-line ``TypeError`` when a bare array is passed where a forecast belongs.

    The library's single rule for calls in the former argument order ``f(mean, std, y)``: they fail,
    saying to pass ``(mean, std)`` as one forecast, ``f((mean, std), y)``.
    """
    if isinstance(forecast, Tensor) or type(forecast).__module__ == "numpy":
        raise TypeError(
            f"{caller}: pass (mean, std) as one forecast, {caller}((mean, std), y, ...), "
            f"not {caller}(mean, std, y, ...)"
        )


def check_weight(name: str, value) -> float:
    """``value`` as a float when it is a finite number >= 0 (a regulariser's weight); else ``ValueError``
    naming ``name``."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value:g}")
    return value


def check_bandwidths(params: Mapping, prefix: str = "") -> None:
    """Raise ``ValueError`` naming ``prefix + key`` for a number <= 0 under a key that names a bandwidth
    (symbolic values such as ``median`` are resolved elsewhere)."""
    for key, value in params.items():
        if "bandwidth" in key and isinstance(value, int | float) and value <= 0:
            raise ValueError(f"{prefix}{key} must be > 0, got {value}")


def reject_renamed(former: str, name: str, value) -> None:
    """Raise a one-line ``TypeError`` when a keyword's former name ``former`` was given (not None)."""
    if value is not None:
        raise TypeError(f"{former} is now called {name}: pass {name}={value!r}")


def as_forecast(forecast, caller: str = "this function", *, validate_args: bool = True):
    """Return a forecast object; a ``(mean, std)`` tuple/list becomes ``Normal(mean, std)``.

    A forecast is anything with ``cdf(y)``, ``log_prob(y)`` and ``icdf(u)`` acting elementwise on
    ``(n,)`` tensors: ``torch.distributions.Normal``, a recalibrated forecast, ... A bare tensor is the
    former argument order and raises :func:`reject_former_order`'s ``TypeError``. The parameters of a
    pair are checked as :func:`checked_gaussian` checks them (values when ``validate_args``). A forecast
    object, a ``Normal`` included, is taken as built: torch checks a ``Normal``'s parameters when it is
    built (NaN loc, scale <= 0) unless it was built with ``validate_args=False``, which is how the run's
    evaluation and diagnostics score outputs whatever they hold.
    """
    reject_former_order(forecast, caller)
    if isinstance(forecast, (tuple, list)):
        mean, std = checked_gaussian(forecast, caller, validate_args=validate_args, vector=False)
        return torch.distributions.Normal(mean, std, validate_args=False)
    for meth in ("cdf", "log_prob", "icdf"):
        if not callable(getattr(forecast, meth, None)):
            raise TypeError(
                f"forecast must be a (mean, std) pair or provide cdf/log_prob/icdf (missing {meth!r}); "
                f"got {type(forecast).__name__}"
            )
    return forecast


def gaussian_params(forecast, caller: str = "this function") -> tuple[Tensor, Tensor]:
    """``(mean, std)`` tensors of a Gaussian forecast given as a pair or a ``torch.distributions.Normal``.

    Other forecasts raise ``TypeError`` (the caller has a closed form for Gaussians only); a bare tensor
    is the former argument order (:func:`reject_former_order`).
    """
    reject_former_order(forecast, caller)
    if isinstance(forecast, torch.distributions.Normal):
        return forecast.loc, forecast.scale
    if isinstance(forecast, (tuple, list)):
        if len(forecast) != 2:
            raise ValueError(f"a tuple forecast must be (mean, std), got {len(forecast)} items")
        mean, std = forecast
        mean = mean if isinstance(mean, Tensor) else torch.as_tensor(mean)
        std = std if isinstance(std, Tensor) else torch.as_tensor(std)
        return mean, std
    raise TypeError(
        "this function has a closed form for Gaussian forecasts only: pass (mean, std) or "
        f"torch.distributions.Normal(mean, std), got {type(forecast).__name__}"
    )


def checked_gaussian(
    forecast, caller: str = "this function", *, validate_args: bool = True, vector: bool = True
) -> tuple[Tensor, Tensor]:
    """``(mean, std)`` of a Gaussian forecast (:func:`gaussian_params`) as float tensors, checked.

    ``vector`` (the default): both 1-D ``(n,)`` (:func:`as_vector`) of one length; otherwise any shapes
    that broadcast together. Values, when ``validate_args``: ``mean`` finite, ``std`` finite and > 0
    (:func:`check_values`). Integer parameters are converted to the default float dtype.
    """
    mean, std = gaussian_params(forecast, caller)
    if vector:
        mean, std = as_vector(mean, "mean"), as_vector(std, "std")
        same_length(("mean", mean), ("std", std))
    else:
        mean, std = as_float(mean, "mean"), as_float(std, "std")
        try:
            torch.broadcast_shapes(mean.shape, std.shape)
        except RuntimeError:
            raise ValueError(
                f"std has shape {tuple(std.shape)}, mean has {tuple(mean.shape)}: pass one std per mean"
            ) from None
    check_values(("mean", mean), ("std", std), positive=("std",), validate_args=validate_args)
    return mean, std


def checked_forecast(forecast, y, caller: str = "this function", *, validate_args: bool = True):
    """``(forecast, y)``: the forecast object of :func:`as_forecast` and the labels as an ``(n,)`` float
    tensor (:func:`as_vector`), finite when ``validate_args``. A forecast with a 1-D batch (a pair, a
    ``Normal`` or any object with a 1-D ``batch_shape``) must have one row per label."""
    f = as_forecast(forecast, caller=caller, validate_args=validate_args)
    y = as_vector(y, "y")
    batch = getattr(f, "batch_shape", None)
    if batch is not None and len(batch) == 1:
        same_length(("forecast", int(batch[0])), ("y", y))
    check_values(("y", y), validate_args=validate_args)
    return f, y
