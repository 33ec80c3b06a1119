"""Post-hoc temperature scaling for classification.

:class:`TemperatureScaler` fits one temperature ``T > 0`` (initialised at ``T = 1``) by minimising the
full-validation cross-entropy of ``logits / T``, with one of two optimisers:

* ``optimizer="lbfgs"`` (the exact flavour): ``torch.optim.LBFGS(line_search_fn="strong_wolfe")`` on
  ``log T`` in float64, one ``step`` of at most ``max_iter`` iterations. It reaches the optimum of this
  convex 1-D objective.
* ``optimizer="adam_plateau"`` (the official flavour; :func:`make_class_recalibrator` with
  ``flavour="official"``): the authors' loop (torchuq ``TemperatureScaling.train``: full-batch Adam steps on
  ``T`` under a plateau scheduler, until ten halvings or 100,000 iterations), in the dtype of the inputs
  (float32 for their softmax outputs), as :mod:`kcal.recalibration.adam_plateau` computes it. It ends near the
  optimum, not at it, on either side (0.3 % to 1.8 % off on synthetic validation sets of 29 to 3016 rows).

Lightning 2 may call test hooks under ``torch.inference_mode()`` (Lightning issue 19910), where autograd
is unavailable and inference tensors cannot be saved for backward. ``fit`` therefore runs inside
``torch.inference_mode(False)`` + ``torch.enable_grad()`` on ``.detach().clone()`` copies made *inside*
that block (a clone of an inference tensor made outside inference mode is a normal tensor).

``fit_from_probs`` fits on what the authors fed torchuq, ``log(p + 1e-10)`` of the softmax outputs used as
logits, and ``transform_probs`` returns ``softmax(log(p + 1e-10) / T)``, dividing by ``T`` as a tensor of
the probabilities' dtype (as torchuq does). Temperature scaling never changes the argmax.
"""

from __future__ import annotations

import logging
import math
import warnings

import torch
import torch.nn.functional as F

from kcal.inputs import as_float, check_probs, check_values, same_length
from kcal.recalibration.adam_plateau import adam_plateau_temperature

__all__ = [
    "ClassRecalibrator",
    "TemperatureScaler",
    "IdentityClassRecalibrator",
    "make_class_recalibrator",
    "CLASS_RECALIBRATORS",
    "PROB_EPS",
    "OPTIMIZERS",
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


#: ``TemperatureScaler``'s optimisers: the exact flavour's and the authors' (module docstring).
OPTIMIZERS = ("lbfgs", "adam_plateau")


def _probs_to_logits(probs: torch.Tensor) -> torch.Tensor:
    return torch.log(probs + PROB_EPS)


def _lbfgs_temperature(z: torch.Tensor, y: torch.Tensor, max_iter: int) -> tuple[float, int]:
    """``T`` minimising the cross-entropy of ``z / T``, by LBFGS on ``log T`` in float64 (and iterations)."""
    z = z.to(torch.float64)
    log_t = torch.zeros((), dtype=torch.float64, device=z.device, requires_grad=True)
    opt = torch.optim.LBFGS(
        [log_t],
        lr=1.0,
        max_iter=max_iter,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-10,
        tolerance_change=1e-12,
    )

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(z * torch.exp(-log_t), y)
        loss.backward()
        return loss

    opt.step(closure)
    return math.exp(float(log_t.detach())), int(opt.state[log_t].get("n_iter", 0))


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
    """Single-temperature scaling fit on the validation cross-entropy (module docstring).

    Parameters
    ----------
    max_iter:
        Maximum LBFGS iterations (a single ``LBFGS.step`` call); unused by ``adam_plateau``.
    min_temperature, max_temperature:
        The fitted ``T`` is clipped into this range (with a :class:`TemperatureClippedWarning`) -- only
        reachable on degenerate validation sets, e.g. perfectly separable logits where the cross-entropy keeps
        decreasing as ``T -> 0`` (the authors' loop does not clip; there it can end anywhere). A non-finite
        fit result falls back to ``T = 1`` with a warning.
    optimizer:
        ``"lbfgs"`` (exact flavour, the default) or ``"adam_plateau"`` (the authors' loop).
    """

    name = "temperature"

    def __init__(
        self,
        max_iter: int = 100,
        min_temperature: float = 1e-3,
        max_temperature: float = 1e3,
        optimizer: str = "lbfgs",
    ):
        if max_iter < 1:
            raise ValueError("max_iter must be >= 1")
        if not 0 < min_temperature <= 1.0 <= max_temperature:
            raise ValueError("need 0 < min_temperature <= 1 <= max_temperature")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        self.max_iter = int(max_iter)
        self.min_temperature = float(min_temperature)
        self.max_temperature = float(max_temperature)
        self.optimizer = optimizer
        self._temperature = 1.0
        self.fitted = False
        self.final_loss_: float | None = None
        self.initial_loss_: float | None = None
        self.unclipped_temperature_: float | None = None
        self.iterations_: int | None = None

    @property
    def temperature(self) -> float:
        return self._temperature

    def fit(self, logits: torch.Tensor, labels: torch.Tensor, *, quiet: bool = False) -> TemperatureScaler:
        """Fit ``T`` on the full validation set. ``logits``: (n, m); ``labels``: (n,) integer classes.

        ``lbfgs`` works in float64; ``adam_plateau`` in the logits' dtype. ``quiet``: report a clipped
        temperature as a DEBUG log line instead of a warning. Integer logits are converted to floats; NaN or
        infinite logits, float labels and labels of another length raise a one-line ``ValueError``.
        """
        logits, labels = as_float(logits, "logits"), torch.as_tensor(labels)
        if logits.dim() != 2:
            raise ValueError(f"logits must have shape (n, num_classes), got {tuple(logits.shape)}")
        if labels.dim() != 1:
            raise ValueError(f"labels must have shape ({logits.shape[0]},), got {tuple(labels.shape)}")
        same_length(("logits", logits), ("labels", labels))
        if labels.is_floating_point() or labels.dtype == torch.bool:
            raise ValueError(
                f"labels must be integer class ids (int64), got {labels.dtype}: pass labels.long()"
            )
        if logits.shape[0] == 0:
            raise ValueError("need at least one validation example")
        check_values(("logits", logits))

        with torch.inference_mode(False), torch.enable_grad():
            z = logits.detach().clone()
            y = labels.detach().clone().to(torch.long)
            if self.optimizer == "lbfgs":
                fitted, self.iterations_ = _lbfgs_temperature(z, y, self.max_iter)
            else:
                fitted, self.iterations_ = adam_plateau_temperature(z, y)
            with torch.no_grad():  # losses in the dtype the optimiser worked in
                zl = z.to(torch.float64) if self.optimizer == "lbfgs" else z
                self.initial_loss_ = float(F.cross_entropy(zl, y))
                usable = math.isfinite(fitted) and fitted > 0
                self.final_loss_ = float(F.cross_entropy(zl / fitted if usable else zl, y))

        if not math.isfinite(fitted):
            warnings.warn("temperature scaling diverged (non-finite T); falling back to T = 1", stacklevel=2)
            fitted = 1.0
        self.unclipped_temperature_ = fitted
        if not self.min_temperature <= fitted <= self.max_temperature:
            message = (
                f"fitted temperature {fitted:.3g} clipped to [{self.min_temperature}, "
                f"{self.max_temperature}] (a separable validation set)"
            )
            if quiet or _last_clip_message == [message]:
                log.debug(message)
            else:
                _last_clip_message[:] = [message]
                warnings.warn(message, TemperatureClippedWarning, stacklevel=2)
            fitted = min(max(fitted, self.min_temperature), self.max_temperature)
        self._temperature = fitted
        self.fitted = True
        return self

    def fit_from_probs(self, probs: torch.Tensor, labels: torch.Tensor) -> TemperatureScaler:
        """Fit on ``log(probs + 1e-10)`` used as logits (what torchuq received), in the probabilities' dtype
        under ``adam_plateau``. A clipped temperature is reported quietly (see
        :class:`TemperatureClippedWarning`)."""
        probs, labels = check_probs(probs, labels)
        return self.fit(_probs_to_logits(probs.detach()), labels, quiet=True)

    def scale(self, logits: torch.Tensor) -> torch.Tensor:
        """Recalibrated logits ``logits / T``."""
        return logits / self.temperature

    def transform_probs(self, probs: torch.Tensor) -> torch.Tensor:
        """``softmax(log(probs + 1e-10) / T)`` -- the authors' recalibrated output, computed as they do (``T`` a
        tensor of the probabilities' dtype)."""
        t = torch.full([1] * probs.dim(), self.temperature, dtype=probs.dtype, device=probs.device)
        return torch.softmax(_probs_to_logits(probs) / t, dim=-1)

    def __repr__(self) -> str:
        return (
            f"TemperatureScaler(T={self.temperature:.4g}, optimizer={self.optimizer!r}, fitted={self.fitted})"
        )


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


def make_class_recalibrator(name: str, flavour: str = "exact") -> ClassRecalibrator:
    """Build an unfitted classification recalibrator by name: ``temperature`` or ``none``.

    ``flavour="official"`` fits the temperature with the authors' optimiser (``optimizer="adam_plateau"``);
    ``"exact"`` with LBFGS.
    """
    key = str(name).strip().lower() if name is not None else "none"
    if key not in CLASS_RECALIBRATORS:
        raise ValueError(
            f"unknown class recalibrator {name!r}; valid names: {', '.join(sorted(CLASS_RECALIBRATORS))}"
        )
    if flavour not in ("exact", "official"):
        raise ValueError(f"unknown flavour {flavour!r}; valid: exact, official")
    if key == "temperature" and flavour == "official":
        return TemperatureScaler(optimizer="adam_plateau")
    return CLASS_RECALIBRATORS[key]()
