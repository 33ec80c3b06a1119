"""Post-hoc temperature scaling for classification.

:class:`TemperatureScaler` fits one temperature ``T > 0`` (parameterised as ``log T``, initialised at
``T = 1``) by minimising the full-validation cross-entropy of ``logits / T`` with
``torch.optim.LBFGS(line_search_fn="strong_wolfe")`` (one ``step`` of at most ``max_iter`` iterations,
float64). This is a deliberate departure from the authors' optimiser (torchuq ``TemperatureScaling``:
Adam lr 1e-3 + ReduceLROnPlateau until lr < 1e-6); both minimise the same convex
1-D objective, LBFGS just gets to the optimum reliably and fast.

Lightning 2 may call test hooks under ``torch.inference_mode()`` (Lightning issue 19910), where autograd
is unavailable and inference tensors cannot be saved for backward. ``fit`` therefore runs inside
``torch.inference_mode(False)`` + ``torch.enable_grad()`` on ``.detach().clone()`` copies made *inside*
that block (a clone of an inference tensor made outside inference mode is a normal tensor).

``fit_from_probs`` reproduces what the authors fed torchuq: ``log(p + 1e-10)`` used as logits, and
``transform_probs`` returns ``softmax(log(p + 1e-10) / T)``. Temperature scaling never changes the argmax.
"""

from __future__ import annotations

import logging
import math
import warnings

import torch
import torch.nn.functional as F

__all__ = [
    "ClassRecalibrator",
    "TemperatureScaler",
    "IdentityClassRecalibrator",
    "make_class_recalibrator",
    "CLASS_RECALIBRATORS",
    "PROB_EPS",
    "TemperatureClippedWarning",
]

log = logging.getLogger(__name__)


class TemperatureClippedWarning(UserWarning):
    """The fitted temperature left ``[min_temperature, max_temperature]`` and was clipped.

    It happens on (nearly) separable validation sets, where the cross-entropy keeps falling as T -> 0 or
    T -> infinity. One run fits the same validation logits more than once (the exact evaluation and the
    figures) and the official flavour's probabilities once more, so the warning is raised only by
    :meth:`TemperatureScaler.fit` and only when its message differs from the previous clip warning of the
    process; ``fit_from_probs`` and repeats report the clip as a DEBUG log line. The unclipped value is
    kept in ``TemperatureScaler.unclipped_temperature_``.
    """


_last_clip_message: list[str] = []  # the previous clip warning's text (one element at most)

#: Added to probabilities before the log in ``fit_from_probs`` / ``transform_probs`` (authors' value).
PROB_EPS = 1e-10


def _probs_to_logits(probs: torch.Tensor) -> torch.Tensor:
    return torch.log(probs + PROB_EPS)


class ClassRecalibrator:
    """Common API: ``fit(logits, labels) -> self``, ``fit_from_probs(probs, labels) -> self``,
    ``scale(logits)`` (recalibrated logits), ``transform(logits)`` (probabilities),
    ``transform_probs(probs)`` (probabilities), ``temperature`` (float)."""

    name = "base"

    @property
    def temperature(self) -> float:
        raise NotImplementedError

    def fit(self, logits: torch.Tensor, labels: torch.Tensor) -> ClassRecalibrator:
        raise NotImplementedError

    def fit_from_probs(self, probs: torch.Tensor, labels: torch.Tensor) -> ClassRecalibrator:
        raise NotImplementedError

    def scale(self, logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def transform(self, logits: torch.Tensor) -> torch.Tensor:
        """Recalibrated probabilities ``softmax(scale(logits))`` over the last dimension."""
        return torch.softmax(self.scale(logits), dim=-1)

    def transform_probs(self, probs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return self.transform(logits)


class TemperatureScaler(ClassRecalibrator):
    """Single-temperature scaling fit by LBFGS on the validation cross-entropy.

    Parameters
    ----------
    max_iter:
        Maximum LBFGS iterations (a single ``LBFGS.step`` call).
    min_temperature, max_temperature:
        The fitted ``T`` is clipped into this range (with a :class:`TemperatureClippedWarning`) -- only
        reachable on degenerate validation sets, e.g. perfectly separable logits where the cross-entropy keeps decreasing as
        ``T -> 0``. A non-finite fit result falls back to ``T = 1`` with a warning.
    """

    name = "temperature"

    def __init__(self, max_iter: int = 100, min_temperature: float = 1e-3, max_temperature: float = 1e3):
        if max_iter < 1:
            raise ValueError("max_iter must be >= 1")
        if not 0 < min_temperature <= 1.0 <= max_temperature:
            raise ValueError("need 0 < min_temperature <= 1 <= max_temperature")
        self.max_iter = int(max_iter)
        self.min_temperature = float(min_temperature)
        self.max_temperature = float(max_temperature)
        self._log_t = 0.0
        self.fitted = False
        self.final_loss_: float | None = None
        self.initial_loss_: float | None = None
        self.unclipped_temperature_: float | None = None

    @property
    def temperature(self) -> float:
        return math.exp(self._log_t)

    def fit(self, logits: torch.Tensor, labels: torch.Tensor, *, quiet: bool = False) -> TemperatureScaler:
        """Fit ``T`` on the full validation set. ``logits``: (n, m); ``labels``: (n,) integer classes.

        ``quiet``: report a clipped temperature as a DEBUG log line instead of a warning.
        """
        if logits.dim() != 2:
            raise ValueError(f"logits must have shape (n, num_classes), got {tuple(logits.shape)}")
        if labels.dim() != 1 or labels.shape[0] != logits.shape[0]:
            raise ValueError(f"labels must have shape ({logits.shape[0]},), got {tuple(labels.shape)}")
        if logits.shape[0] == 0:
            raise ValueError("need at least one validation example")

        with torch.inference_mode(False), torch.enable_grad():
            z = logits.detach().clone().to(torch.float64)
            y = labels.detach().clone().to(torch.long)
            log_t = torch.zeros((), dtype=torch.float64, device=z.device, requires_grad=True)
            opt = torch.optim.LBFGS(
                [log_t],
                lr=1.0,
                max_iter=self.max_iter,
                line_search_fn="strong_wolfe",
                tolerance_grad=1e-10,
                tolerance_change=1e-12,
            )

            def closure():
                opt.zero_grad()
                loss = F.cross_entropy(z * torch.exp(-log_t), y)
                loss.backward()
                return loss

            with torch.no_grad():
                self.initial_loss_ = float(F.cross_entropy(z, y))
            opt.step(closure)
            fitted = float(log_t.detach())
            with torch.no_grad():
                self.final_loss_ = float(
                    F.cross_entropy(z * math.exp(-fitted) if math.isfinite(fitted) else z, y)
                )

        if not math.isfinite(fitted):
            warnings.warn(
                "temperature scaling diverged (non-finite log T); falling back to T = 1", stacklevel=2
            )
            fitted = 0.0
        lo, hi = math.log(self.min_temperature), math.log(self.max_temperature)
        self.unclipped_temperature_ = math.exp(fitted)
        if not lo <= fitted <= hi:
            message = (
                f"fitted temperature {math.exp(fitted):.3g} clipped to [{self.min_temperature}, "
                f"{self.max_temperature}] (a separable validation set)"
            )
            if quiet or _last_clip_message == [message]:
                log.debug(message)
            else:
                _last_clip_message[:] = [message]
                warnings.warn(message, TemperatureClippedWarning, stacklevel=2)
            fitted = min(max(fitted, lo), hi)
        self._log_t = fitted
        self.fitted = True
        return self

    def fit_from_probs(self, probs: torch.Tensor, labels: torch.Tensor) -> TemperatureScaler:
        """Official flavour: fit on ``log(probs + 1e-10)`` used as logits (what torchuq received)."""
        return self.fit(_probs_to_logits(probs.detach()), labels, quiet=True)

    def scale(self, logits: torch.Tensor) -> torch.Tensor:
        """Recalibrated logits ``logits / T``."""
        return logits / self.temperature

    def transform_probs(self, probs: torch.Tensor) -> torch.Tensor:
        """``softmax(log(probs + 1e-10) / T)`` -- the authors' recalibrated output."""
        return self.transform(_probs_to_logits(probs))

    def __repr__(self) -> str:
        return f"TemperatureScaler(T={self.temperature:.4g}, fitted={self.fitted})"


class IdentityClassRecalibrator(ClassRecalibrator):
    """No recalibration (``T = 1``): ``fit`` is a no-op, ``transform`` = softmax, ``transform_probs``
    returns its input unchanged (not re-normalised through ``log(p + 1e-10)``)."""

    name = "none"

    @property
    def temperature(self) -> float:
        return 1.0

    def fit(self, logits=None, labels=None) -> IdentityClassRecalibrator:
        return self

    def fit_from_probs(self, probs=None, labels=None) -> IdentityClassRecalibrator:
        return self

    def scale(self, logits: torch.Tensor) -> torch.Tensor:
        return logits

    def transform_probs(self, probs: torch.Tensor) -> torch.Tensor:
        return probs

    def __repr__(self) -> str:
        return "IdentityClassRecalibrator()"


CLASS_RECALIBRATORS: dict[str, type[ClassRecalibrator]] = {
    "temperature": TemperatureScaler,
    "none": IdentityClassRecalibrator,
}


def make_class_recalibrator(name: str) -> ClassRecalibrator:
    """Build an unfitted classification recalibrator by name: ``temperature`` or ``none``."""
    key = str(name).strip().lower() if name is not None else "none"
    if key not in CLASS_RECALIBRATORS:
        raise ValueError(
            f"unknown class recalibrator {name!r}; valid names: {', '.join(sorted(CLASS_RECALIBRATORS))}"
        )
    return CLASS_RECALIBRATORS[key]()
