"""Exact classification evaluation metrics (whole evaluation set at once).

Inputs are predicted probabilities ``probs`` of shape ``(n, m)`` (rows sum to 1, e.g. a softmax
output; logits are refused with a message) and integer labels ``labels`` of shape ``(n,)``, as numpy
arrays or torch tensors (checked by :func:`kcal.inputs.check_probs`: with ``validate_args=True``, the
default, NaN, infinite or out-of-range values raise a one-line ``ValueError`` naming the argument).  All metrics are vectorised (bincount /
scatter_add, no Python loop over bins or rows) and return 0-dim torch tensors.  The official
per-8-row-batch flavour lives in :mod:`kcal.metrics.official`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from kcal.inputs import as_float, check_probs, check_values, reject_renamed, same_length

__all__ = [
    "accuracy",
    "ece",
    "classwise_ece",
    "entropy",
    "kce",
    "kce_batched",
    "nll_logits",
    "bin_index",
    "binned_sums",
    "binned_calibration_error",
]


def bin_index(values: Tensor, n_bins: int) -> Tensor:
    """Index of the equal-width bin ``(lo, hi]`` on [0, 1] containing each value.

    Boundaries ``linspace(0, 1, n_bins + 1)`` with right-closed bins, as torchmetrics 0.8.2 (the version
    the authors' numbers were logged with); torchmetrics >= 1.0 and netcal use left-closed bins
    ``[lo, hi)``, so a confidence exactly on an inner edge lands one bin lower here. A value of exactly 0
    (or below) goes to the first bin; values above 1 go to the last bin.
    """
    if n_bins < 1:
        raise ValueError("n_bins must be >= 1")
    bounds = torch.linspace(0.0, 1.0, n_bins + 1, dtype=values.dtype, device=values.device)
    return (torch.bucketize(values.contiguous(), bounds, right=False) - 1).clamp_(0, n_bins - 1)


def accuracy(probs, labels, *, validate_args: bool = True) -> Tensor:
    """Fraction of rows whose argmax equals the label (in [0, 1])."""
    probs, labels = check_probs(probs, labels, validate_args=validate_args)
    return (probs.argmax(-1) == labels).to(probs.dtype).mean()


def binned_sums(
    conf: Tensor,
    hit: Tensor,
    n_bins: int,
    n_groups: int = 1,
    group: Tensor | None = None,
    *,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-(group, bin) counts, summed confidences and summed hits, each of shape ``(n_groups, n_bins)``.

    ``conf`` ``(k,)`` is binned by :func:`bin_index` (equal-width right-closed bins ``(lo, hi]``, an exact 0
    in the first bin) in its own dtype; ``hit`` ``(k,)`` holds the outcomes (1.0 / 0.0) to sum per bin.
    ``group`` ``(k,)`` (int64 in ``[0, n_groups)``) assigns each entry to a group, e.g. its class for the
    class-wise ECE. The sums are accumulated in ``dtype`` (default ``conf.dtype``).
    """
    idx = bin_index(conf, n_bins)
    if group is not None:
        idx = group * n_bins + idx
    size = n_groups * n_bins
    dtype = conf.dtype if dtype is None else dtype
    conf, hit = conf.to(dtype), hit.to(dtype)
    count = torch.zeros(size, dtype=dtype, device=conf.device).scatter_add_(0, idx, torch.ones_like(conf))
    csum = torch.zeros(size, dtype=dtype, device=conf.device).scatter_add_(0, idx, conf)
    hsum = torch.zeros(size, dtype=dtype, device=conf.device).scatter_add_(0, idx, hit)
    return count.view(n_groups, n_bins), csum.view(n_groups, n_bins), hsum.view(n_groups, n_bins)


def binned_calibration_error(count: Tensor, csum: Tensor, hsum: Tensor, n: int | Tensor, norm: str) -> Tensor:
    """Calibration error per group from the binned sums of :func:`binned_sums` (last dim = bins).

    ``n`` is the number of rows the sums were taken over (``N`` below); with ``acc_b = hsum_b / count_b``
    and ``conf_b = csum_b / count_b``: ``"l1"`` gives ``sum_b |hsum_b - csum_b| / N``, ``"l2"``
    ``sqrt(sum_b (count_b / N) (acc_b - conf_b)^2)`` and ``"max"`` ``max_b |acc_b - conf_b|`` (empty bins
    count as a gap of 0).
    """
    if norm == "l1":
        # sum_b (n_b/N) |acc_b - conf_b| = sum_b |hsum_b - csum_b| / N
        return (hsum - csum).abs().sum(-1) / n
    safe = count.clamp_min(1.0)
    gap = (hsum - csum) / safe  # 0 for empty bins
    if norm == "l2":
        return torch.sqrt(((count / n) * gap * gap).sum(-1))
    if norm == "max":
        return gap.abs().amax(-1)
    raise ValueError(f"norm must be 'l1', 'l2' or 'max', got {norm!r}")


def ece(probs, labels, n_bins: int = 20, norm: str = "l1", *, validate_args: bool = True) -> Tensor:
    r"""Top-label expected calibration error with equal-width bins ``(lo, hi]`` on [0, 1] (:func:`bin_index`).

    Confidence :math:`r_i = \max_c p_{ic}`, correctness :math:`1[\arg\max_c p_{ic} = y_i]`.

    * ``"l1"``: :math:`\sum_b \frac{n_b}{N} |\mathrm{acc}_b - \mathrm{conf}_b|` (torchmetrics 0.8.2's
      ``CalibrationError(n_bins=20, norm='l1')`` on probabilities);
    * ``"l2"``: :math:`\big(\sum_b \frac{n_b}{N} (\mathrm{acc}_b - \mathrm{conf}_b)^2\big)^{1/2}`;
    * ``"max"``: :math:`\max_b |\mathrm{acc}_b - \mathrm{conf}_b|` over non-empty bins.

    Defined for any N >= 1; exact zeros in ``probs`` are harmless.
    """
    probs, labels = check_probs(probs, labels, validate_args=validate_args)
    conf, pred = probs.max(-1)
    hit = (pred == labels).to(probs.dtype)
    count, csum, hsum = binned_sums(conf, hit, n_bins)
    return binned_calibration_error(count, csum, hsum, probs.shape[0], norm)[0]


def classwise_ece(probs, labels, n_bins: int = 20, *, validate_args: bool = True) -> Tensor:
    r"""Class-wise ECE: mean over classes k of :math:`\sum_b \frac{n_{kb}}{N}|\mathrm{freq}_{kb} - \mathrm{prob}_{kb}|`.

    For class k, the probabilities :math:`p_{ik}` are binned in equal-width bins ``(lo, hi]``
    (exact 0 goes to the first bin); ``freq`` is the fraction of rows in the bin with label k
    and ``prob`` their mean :math:`p_{ik}`.
    """
    probs, labels = check_probs(probs, labels, validate_args=validate_args)
    n, m = probs.shape
    conf = probs.reshape(-1)  # row-major: element (i, k) at i*m + k
    hit = torch.nn.functional.one_hot(labels, m).to(probs.dtype).reshape(-1)
    group = torch.arange(m, device=probs.device).repeat(n)
    count, csum, hsum = binned_sums(conf, hit, n_bins, n_groups=m, group=group)
    return binned_calibration_error(count, csum, hsum, n, "l1").mean()


def nll_logits(logits, labels) -> Tensor:
    r"""Mean cross-entropy of ``logits`` ``(n, m)``, exact for confident forecasts:
    :math:`\frac1N\sum_i \operatorname{softplus}(\log\sum_{c \ne y_i} e^{z_{ic}} - z_{iy_i})`.

    Equal to ``F.cross_entropy`` (``log(1 + sum_{c != y} e^{z_c - z_y})``), computed in float64 as the
    softplus of the log-odds against the label, so a correct forecast with margin m contributes about
    e^-m down to float64's smallest numbers (m ~ 745) instead of rounding to exactly 0 beyond m ~ 17
    (float32) or 37 (float64): confident models keep distinct values (model selection can rank them).
    """
    z = torch.as_tensor(logits).double()
    labels = torch.as_tensor(labels).long()
    if z.ndim != 2 or labels.shape != (z.shape[0],):
        raise ValueError(
            f"logits must be (n, m) and labels (n,), got {tuple(z.shape)} and {tuple(labels.shape)}"
        )
    z_label = z.gather(1, labels[:, None])[:, 0]
    others = z.scatter(1, labels[:, None], float("-inf"))
    return torch.nn.functional.softplus(torch.logsumexp(others, -1) - z_label).mean()


def entropy(probs, *, validate_args: bool = True) -> Tensor:
    r"""Mean Shannon entropy :math:`\frac1N\sum_i\sum_c -p_{ic}\ln p_{ic}` in nats, with :math:`0\ln0=0`.

    (The official code computes ``-p*log(p)`` and returns NaN when a probability underflows to
    exactly 0; here ``torch.xlogy`` gives 0 instead.)
    """
    probs, _ = check_probs(probs, validate_args=validate_args)
    return (-torch.xlogy(probs, probs)).sum(-1).mean()


def kce(
    probs,
    labels,
    x,
    bandwidth_z: float | None = None,
    bandwidth_y: float | None = None,
    *,
    bandwidth_x: float | None = None,
    validate_args: bool = True,
) -> Tensor:
    r"""Kernel calibration error: the individual-calibration MMD² U-statistic over X × Y.

    Kernel :math:`k((x,y),(x',y')) = \exp(-\|x-x'\|^2/bw_z)\,\exp(-\|e_y-e_{y'}\|^2/bw_y)` on
    features (the conditioning variable Z = X) and one-hot labels, with the forecast
    :math:`\hat Y\sim q_i` marginalised analytically.  With :math:`K_{cd}=\exp(-\|e_c-e_d\|^2/bw_y)`:

    .. math:: \widehat{\mathrm{MMD}}^2 = \frac{1}{n(n-1)}\sum_{i\ne j} k^x_{ij}
              \big(q_i^\top K q_j - 2\, (q_i^\top K)_{y_j} + K_{y_i y_j}\big).

    Unbiased, so it can be negative.  Needs n >= 2 (ValueError otherwise).  Equals
    :func:`kcal.mmd.classification_mmd` with ``form="individual"`` (same parameter names and defaults).
    The former name ``bandwidth_x`` of ``bandwidth_z`` raises a one-line ``TypeError``.
    """
    reject_renamed("bandwidth_x", "bandwidth_z", bandwidth_x)
    probs, labels = check_probs(probs, labels, validate_args=validate_args)
    if probs.shape[0] < 2:
        raise ValueError("KCE (a U-statistic over pairs i != j) needs at least 2 rows")
    x = as_float(x, "x")
    if x.ndim == 1:
        x = x[:, None]
    same_length(("probs", probs), ("x", x))
    check_values(("x", x), validate_args=validate_args)
    from kcal.mmd import classification_mmd  # lazy: kcal.mmd imports kcal.inputs, not this module

    return classification_mmd(probs, labels, x.to(probs.dtype), form="individual", bandwidth_y=bandwidth_y,
                              bandwidth_z=bandwidth_z, validate_args=False)  # fmt: skip


def kce_batched(probs: Tensor, labels: Tensor, x: Tensor, bandwidth_z: float, bandwidth_y: float) -> Tensor:
    """Per-batch KCE U-statistics for stacked batches: probs (nb, B, m), labels (nb, B), x (nb, B, d).

    Same estimator as :func:`kce`, applied independently to each batch; returns shape (nb,).
    Used by the official per-batch evaluation (small B), so pairwise differences are formed
    directly (no ``|a|^2 + |b|^2 - 2ab`` cancellation).
    """
    nb, bsz, m = probs.shape
    if bsz < 2:
        raise ValueError("KCE needs batches of at least 2 rows")
    diff = x[:, :, None, :] - x[:, None, :, :]
    kx = torch.exp(-(diff * diff).sum(-1) / bandwidth_z)  # (nb, B, B)
    eye = torch.eye(m, dtype=probs.dtype, device=probs.device)
    kyy = torch.exp(-2.0 * (1.0 - eye) / bandwidth_y)  # K_cd
    qk = probs @ kyy  # (nb, B, m)
    p_term = qk @ probs.transpose(1, 2)  # q_i^T K q_j
    c_term = torch.gather(qk, 2, labels[:, None, :].expand(nb, bsz, bsz))  # (q_i^T K)_{y_j}
    t_term = kyy[labels[:, :, None], labels[:, None, :]]  # K_{y_i y_j}
    h = kx * (p_term - 2.0 * c_term + t_term)
    off = ~torch.eye(bsz, dtype=torch.bool, device=probs.device)
    return (h * off).sum((1, 2)) / (bsz * (bsz - 1))
