"""Official-flavour metrics: reproduce the numbers logged by the authors' code.

The authors' code (repository ``kernel-calibration/kernel-calibration``, PyTorch Lightning 1.5.10,
torchmetrics 0.8.2) computes its test metrics per test batch, with several departures from the textbook
definitions; each is listed below with the function that reproduces it. These functions take the
SAME prediction tensors as the exact metrics in :mod:`kcal.metrics.regression` / :mod:`kcal.metrics.classification` and emulate the official test
loop: consecutive rows in the given order (the test loader does not shuffle) are cut into batches
of ``batch_size`` with ``drop_last=True``, i.e. only the first ``batch_size * (n // batch_size)``
rows are used by EVERY official metric (regression 128, classification 8).  ``n < batch_size``
leaves no rows and raises ``ValueError``.  Passing ``batch_size=None`` disables the row dropping
where the official metric does not otherwise depend on batches (QCE, NLL).

What each function reproduces:

* :func:`official_qce` — ``GMMCalibrationError`` (``test/cal``): bins ``round(20 u)`` clipped to 19,
  counts accumulated over full batches, ½ Σ|count/N − 1/20| → floor ≈ 0.025 when calibrated (unequal bins).
* :func:`official_dce` — ``DecisionCalibrationError`` (``test/dcal``, L2, 10 samples): per-batch
  squared gaps summed over batches, then sqrt, with no normalisation by the number of batches, so
  it grows like sqrt(#batches); labels equal to the threshold count for neither action (sign(0) = 0).
* :func:`official_regression_nll` — ``GMMNegativeLogLikelihood`` (``test/nll``) on full batches.
* :func:`official_classification_metrics` — ``test/acc``, ``test/ece``, ``test/entropy``,
  ``test/kcal``: each the MEAN OF PER-BATCH values over 8-row batches (which inflates ECE), KCE
  with kernel bandwidths that differ by method (:func:`official_kce_bandwidths`); the calibrated KCE,
  which the authors computed on softmax of already temperature-scaled probabilities, is reproduced
  with ``kce_probs``.

After post-hoc recalibration the same functions score the recalibrated forecasts; the recalibration
itself follows the authors' arithmetic in the official flavour (``kcal.recalibration`` with
``flavour="official"``: torchuq's conformal map in float32, whose finite-difference "density"
``log(F(y + 1e-4) - F(y) + 1e-10) - log(1e-4)`` is what :func:`official_regression_nll` averages, and the
temperature fitted by the authors' Adam + plateau loop); :mod:`kcal.evaluation` wires it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kcal.inputs import (
    as_float,
    as_forecast,
    as_vector,
    check_probs,
    check_values,
    checked_forecast,
    reject_renamed,
    same_length,
)
from kcal.kernels import check_finite
from kcal.metrics.classification import bin_index, kce_batched

__all__ = [
    "REGRESSION_TEST_BATCH_SIZE",
    "CLASSIFICATION_TEST_BATCH_SIZE",
    "n_used_rows",
    "official_qce",
    "official_dce",
    "official_regression_nll",
    "official_kce_bandwidths",
    "official_classification_metrics",
]

REGRESSION_TEST_BATCH_SIZE = 128
CLASSIFICATION_TEST_BATCH_SIZE = 8

_KCE_BANDWIDTHS = {
    # classification_mixed.yaml sets kcal_kwargs (bw_x 10, bw_y 0.01)
    "xe_mmd": (10.0, 0.01),
    # no kcal_kwargs -> ClassificationKernelLoss constructor default at HEAD (bw_x 0.01, bw_y 1.0)
    "xe": (0.01, 1.0),
    "xe_mmce": (0.01, 1.0),
    "xe_kde": (0.01, 1.0),
}


def n_used_rows(n: int, batch_size: int | None) -> int:
    """Rows kept by a ``drop_last=True`` loader: ``batch_size * (n // batch_size)``.

    Raises ``ValueError`` (naming the batch size) if that is 0.
    """
    if batch_size is None:
        return n
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    used = batch_size * (n // batch_size)
    if used == 0:
        raise ValueError(
            f"n={n} rows is fewer than one official batch (batch_size={batch_size}): "
            "with drop_last=True no rows would be evaluated"
        )
    return used


# --------------------------------------------------------------------------------------------
# regression
# --------------------------------------------------------------------------------------------
def official_qce(
    pit, n_bins: int = 20, batch_size: int | None = REGRESSION_TEST_BATCH_SIZE, *, validate_args: bool = True
) -> Tensor:
    r"""Official quantile calibration error (``GMMCalibrationError``, rounding-based bins).

    Bin of a PIT value u: ``b = min(round(n_bins * u), n_bins - 1)`` (torch's round-half-to-even),
    so bin 0 covers [0, 0.025), bins 1..18 have width 0.05 and bin 19 covers [0.925, 1] (for 20
    bins).  With counts accumulated over the rows of full batches only (drop_last; ``batch_size=None``
    uses all rows): :math:`\tfrac12\sum_b |c_b/N - 1/B|`.  The unequal bins give a calibrated
    forecaster ≈ 0.025 (=½(|1/40−1/20| + |3/40−1/20|)), not 0.
    """
    u = as_vector(pit, "pit")
    check_values(("pit", u), validate_args=validate_args)
    u = u[: n_used_rows(u.shape[0], batch_size)]
    idx = torch.round(u * n_bins).clamp(max=n_bins - 1).long().clamp_(min=0)
    counts = torch.bincount(idx, minlength=n_bins).to(u.dtype)
    return 0.5 * (counts / counts.sum() - 1.0 / n_bins).abs().sum()


def _draw_samples(
    forecast, n: int, num_samples: int, generator, dtype, device, validate_args: bool
) -> Tensor:
    """``num_samples`` draws per row via inverse-CDF sampling, shape (S, n), drawn on the generator's
    device (``device`` without one: the labels')."""
    f = as_forecast(forecast, "official_dce", validate_args=validate_args)
    batch = getattr(f, "batch_shape", None)
    if batch is not None and len(batch) == 1:
        same_length(("forecast", int(batch[0])), ("y", n))
    where = generator.device if generator is not None else device
    u = torch.rand((num_samples, n), generator=generator, dtype=dtype, device=where).to(device)
    return torch.stack([f.icdf(u[s]) for s in range(num_samples)])


def official_dce(
    forecast_or_samples,
    y,
    threshold: float = 0.0,
    batch_size: int | None = REGRESSION_TEST_BATCH_SIZE,
    num_samples: int = 10,
    generator: torch.Generator | None = None,
    *,
    validate_args: bool = True,
) -> Tensor:
    r"""Official decision calibration error (``DecisionCalibrationError``, metric "L2")

    Rows are cut into consecutive batches of ``batch_size`` (drop_last).  For batch b and action
    :math:`a\in\{-1,+1\}`:
    :math:`\hat E_{p,b}(a) = \mathrm{mean}_{i\in b}\, 1[\mathrm{sign}(y_i - c) = a]` and
    :math:`\hat E_{q,b}(a) = \mathrm{mean}` of the same indicator over the ``num_samples · B``
    forecast samples of the batch.  (The official loss is ``1[sign(y)=a]``, the complement of the
    paper's ``1[a != sign(y-c)]``; squared gaps are identical.)

    .. math:: \mathrm{DCE}_{\mathrm{off}} = \Big(\sum_b \sum_a (\hat E_{p,b}(a) - \hat E_{q,b}(a))^2\Big)^{1/2}

    NOT normalised by the number of batches: for a calibrated forecaster it grows like
    sqrt(#batches).  ``sign(0) = 0``: labels equal to ``c`` count for neither action while
    samples always count for one, a non-vanishing gap when many labels tie.

    ``forecast_or_samples`` is either a forecast (object with ``icdf``, or ``(mean, std)``) —
    samples are then ``forecast.icdf(U)``, ``U ~ U(0,1)`` drawn from ``generator`` (works for
    recalibrated forecasts too) — or a tensor of pre-drawn samples of shape ``(S, n)``.
    ``batch_size=None`` treats all rows as a single batch.
    """
    y = as_vector(y, "y")
    check_values(("y", y), validate_args=validate_args)
    threshold = check_finite("threshold", threshold)
    n = y.shape[0]
    if batch_size is None:  # one batch holding every row
        batch_size = n
    used = n_used_rows(n, batch_size)
    if isinstance(forecast_or_samples, Tensor):
        samples = forecast_or_samples
        if samples.ndim == 1:
            samples = samples[None]
        if samples.ndim != 2:
            raise ValueError(
                f"samples must have shape (S, n={n}) (one column per label), got {tuple(samples.shape)}"
            )
        same_length(("samples", samples.shape[1]), ("y", n))
        samples = as_float(samples, "samples")
        check_values(("samples", samples), validate_args=validate_args)
    else:
        dtype = y.dtype if torch.is_floating_point(y) else torch.get_default_dtype()
        samples = _draw_samples(
            forecast_or_samples, n, num_samples, generator, dtype, y.device, validate_args
        )
    nb = used // batch_size
    sy = torch.sign(y[:used] - threshold).reshape(nb, batch_size)
    ss = torch.sign(samples[:, :used] - threshold).reshape(samples.shape[0], nb, batch_size)
    ss = ss.permute(1, 0, 2).reshape(nb, -1)  # (nb, S*B)
    dtype = y.dtype
    gaps = []
    for a in (-1.0, 1.0):
        e_p = (sy == a).to(dtype).mean(-1)
        e_q = (ss == a).to(dtype).mean(-1)
        gaps.append(e_p - e_q)
    g = torch.stack(gaps)  # (2, nb)
    return torch.sqrt((g * g).sum())


def official_regression_nll(
    forecast, y, batch_size: int | None = REGRESSION_TEST_BATCH_SIZE, *, validate_args: bool = True
) -> Tensor:
    """Official test NLL: mean of ``-forecast.log_prob(y)`` over the rows of full batches only."""
    f, y = checked_forecast(forecast, y, "official_regression_nll", validate_args=validate_args)
    used = n_used_rows(y.shape[0], batch_size)
    return (-f.log_prob(y))[:used].mean()


# --------------------------------------------------------------------------------------------
# classification
# --------------------------------------------------------------------------------------------
def official_kce_bandwidths(objective_name: str) -> tuple[float, float]:
    """KCE kernel bandwidths ``(bw_x, bw_y)`` the official code used for each method's runs.

    ``xe_mmd`` (NLL+MMD, ``classification_mixed.yaml``'s ``kcal_kwargs``) → (10, 0.01); ``xe``,
    ``xe_mmce``, ``xe_kde`` fall back to the metric's constructor default → (0.01, 1.0).
    """
    key = str(objective_name).strip().lower().replace("-", "_").replace("+", "_")
    if key not in _KCE_BANDWIDTHS:
        raise ValueError(f"unknown objective {objective_name!r}; expected one of {sorted(_KCE_BANDWIDTHS)}")
    return _KCE_BANDWIDTHS[key]


def official_classification_metrics(
    probs,
    labels,
    x,
    batch_size: int = CLASSIFICATION_TEST_BATCH_SIZE,
    bandwidth_z: float | None = None,
    bandwidth_y: float | None = None,
    *,
    objective: str | None = None,
    n_bins: int = 20,
    kce_probs=None,
    bandwidth_x: float | None = None,
    validate_args: bool = True,
) -> dict[str, Tensor]:
    """Official classification test metrics: means of per-batch values over 8-row batches.

    Consecutive rows form batches of ``batch_size`` (drop_last); for each batch we compute

    * ``accuracy``: fraction of argmax hits (a fraction; tables multiply by 100),
    * ``ece``: top-label ECE, 20 equal-width bins ``(lo, hi]``, L1 (torchmetrics 0.8.2
      ``CalibrationError`` on softmax outputs) — heavily inflated on 8 rows,
    * ``entropy``: mean Σ −p ln p (nats; 0·ln0 = 0 here, the official code would give NaN),
    * ``kce``: the classification MMD² U-statistic over the batch's 8·7 ordered pairs (can be < 0),

    and return the mean over batches of each (a dict of 0-dim tensors).

    KCE bandwidths: explicit ``bandwidth_z`` (on x; the former name ``bandwidth_x`` raises a ``TypeError``) /
    ``bandwidth_y`` win; otherwise ``official_kce_bandwidths(objective)`` if ``objective`` is given;
    otherwise the official metric's constructor default (0.01, 1.0), which is what
    ``xe``/``xe_mmce``/``xe_kde`` runs got.

    ``x=None`` leaves out ``kce`` (e.g. when only a run's saved predictions are at hand).

    ``probs`` are probabilities (softmax of the logits).  Not reproduced: torchmetrics 0.8.2 skips
    its softmax when every logit of a batch already lies in [0, 1] (a pathological case).

    ``kce_probs`` (optional, same shape as ``probs``) overrides the probabilities fed to KCE only.
    To reproduce the authors' calibrated KCE (computed on softmax of temperature-scaled *probabilities*) pass
    ``kce_probs=torch.softmax(calibrated_probs, -1)``.
    """
    probs, labels = check_probs(probs, labels, validate_args=validate_args)
    n, m = probs.shape
    if x is not None:
        x = as_float(x, "x")
        if x.ndim == 1:
            x = x[:, None]
        same_length(("probs", probs), ("x", x))
        check_values(("x", x), validate_args=validate_args)
        x = x.to(probs.dtype)
    if kce_probs is None:
        kp = probs
    else:
        kp, _ = check_probs(kce_probs, validate_args=validate_args, name="kce_probs")
        if kp.shape != probs.shape:
            raise ValueError(f"kce_probs must have shape {tuple(probs.shape)}, got {tuple(kp.shape)}")
        kp = kp.to(probs.dtype)

    default_bw = _KCE_BANDWIDTHS["xe"] if objective is None else official_kce_bandwidths(objective)
    reject_renamed("bandwidth_x", "bandwidth_z", bandwidth_x)
    bw_x = default_bw[0] if bandwidth_z is None else float(bandwidth_z)
    bw_y = default_bw[1] if bandwidth_y is None else float(bandwidth_y)

    if batch_size is None or batch_size < 2:
        raise ValueError(f"official classification metrics need an integer batch_size >= 2, got {batch_size}")
    used = n_used_rows(n, batch_size)
    nb = used // batch_size
    p = probs[:used]
    lab = labels[:used]

    conf, pred = p.max(-1)
    hit = (pred == lab).to(p.dtype)
    acc_b = hit.reshape(nb, batch_size).mean(-1)

    # per-batch ECE via one scatter_add over (batch, bin) cells
    group = torch.arange(nb, device=p.device).repeat_interleave(batch_size)
    # binned in float32, confidences and edges, as torchmetrics 0.8.2 bins them: a confidence within a float32
    # ulp of an edge (0.55, say) lands in another bin than in float64
    idx = group * n_bins + bin_index(conf.float(), n_bins)
    diff = torch.zeros(nb * n_bins, dtype=p.dtype, device=p.device).scatter_add_(0, idx, hit - conf)
    ece_b = diff.view(nb, n_bins).abs().sum(-1) / batch_size

    ent_b = (-torch.xlogy(p, p)).sum(-1).reshape(nb, batch_size).mean(-1)

    out = {"accuracy": acc_b.mean(), "ece": ece_b.mean(), "entropy": ent_b.mean()}
    if x is not None:
        kce_b = kce_batched(
            kp[:used].reshape(nb, batch_size, m),
            lab.reshape(nb, batch_size),
            x[:used].reshape(nb, batch_size, -1),
            bw_x,
            bw_y,
        )
        out["kce"] = kce_b.mean()
    return out
