"""kcal's official metrics (:mod:`kcal.metrics.official`) log what the authors' test loop logs.

The authors' numbers come from two LightningModules. ``src/models/gmm_module.py`` (regression): ``test_step``
updates each metric with one test batch of 128 rows and ``test_epoch_end`` logs ``compute()`` of the state
accumulated over the epoch. ``src/models/classification_module.py`` (classification): each metric's value on
one 8-row batch, averaged over the epoch by Lightning's ``on_epoch`` logging, which is a plain mean because
drop_last makes every batch the same size. kcal is called here the way :mod:`kcal.evaluation` calls it:
``official_regression_nll``, ``official_qce(pit)`` and ``official_dce`` take every test row with
``batch_size=128``, and ``official_classification_metrics(softmax(logits), y, x, batch_size=8,
objective=...)``; after temperature scaling, on ``transform_probs(softmax(float32 logits))`` with
``kce_probs``. The Gaussian forecast reaches kcal with ``std = max(exp(raw), 0.05)``
(``kcal.models.mlp.GaussianMLP``'s head). The authors' metrics receive the raw ``exp(raw)`` and apply the
same floor themselves (``gmm_params_to_dist``).

Route per metric:

* NLL, QCE, DCE, entropy and KCE are compared with the authors' own ``torchmetrics.Metric`` subclasses from
  ``src/metrics/metrics.py`` (``GMMNegativeLogLikelihood``, ``GMMCalibrationError``,
  ``DecisionCalibrationError``, ``ShannonEntropyError``, ``ClassificationKernelCalibrationError``), imported
  through :func:`.authors.load` and run unchanged under torchmetrics 1.9. Their ``update``/``compute`` use
  nothing specific to 0.8, and ``forward`` keeps 0.8's contract: it accumulates, then returns the value of
  the batch alone.
* Accuracy and ECE are torchmetrics' own ``Accuracy()`` and ``CalibrationError(n_bins=20, norm="l1")`` at
  version 0.8.2, which cannot run here: 1.9's ``Accuracy`` requires a ``task``, and its ``CalibrationError``
  dispatches on the ``task`` that 0.8.2 ignored and bins left-closed. So they are compared with the 0.8.2
  formula, written below as naive loops (:func:`_tm08_accuracy`, :func:`_tm08_ece`). That formula applies a
  softmax over classes unless every value of the batch already lies in [0, 1], takes the top-label
  confidence, casts it to float32 and bins it against 20 float32 equal-width right-closed bins ``(lo, hi]``.
  The result is an L1 sum. These loops were checked once, outside this suite, against the torchmetrics 0.8.2
  wheel: they agreed within 1.2e-7 on 37 batches.

Inputs are float64 on both sides unless a test says otherwise. The authors' metric states are switched to
float64 with ``Metric.set_dtype``. A few of their steps still round to float32, and each tolerance below
absorbs that rounding: ``compute`` casts totals with ``.float()``, the decision loss returns float32
indicators, and the label kernel of the KCE is built from a float32 ``eye``. ``test_float32_pipelines`` runs
the authors' metrics on float32 inputs with float32 states, as their training does, against kcal on the same
values promoted to float64, as ``kcal.evaluation`` computes them.

Every comparison also checks that it can fail: a perturbed kcal option or input has to move the result
outside the tolerance. The known, deliberate differences are separate named tests:

* ``test_entropy_nan_when_a_probability_underflows``;
* ``test_tm08_skips_softmax_when_logits_lie_in_unit_interval``;
* ``test_ece_bin_edge_rounding``, a departure found while writing these tests: 0.8.2 bins float32 confidences
  against float32 edges, kcal bins float64 confidences against float64 edges;
* the DCE's random stream, named in ``test_regression_dce``.

The regression KCE (``test/kcal`` of ``gmm_module``) is not compared: kcal's official flavour does not
compute it.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import yaml
from torch.distributions import Normal

from kcal import evaluation
from kcal.metrics import official as om
from kcal.metrics import regression as rm
from kcal.recalibration import make_class_recalibrator

from .authors import authors_dir, load

REG_BATCH = 128
CLS_BATCH = 8
N_BINS = 20
STD_FLOOR = 0.05  # the authors' gmm_params_to_dist; kcal's GaussianMLP(min_std=0.05)
F64 = torch.float64

REG_ROWS = [130, 300, 517]  # 1, 2 and 4 full batches of 128; every count leaves a partial batch to drop
CLS_SHAPES = [(8, 2), (16, 3), (24, 7), (40, 5), (64, 2), (67, 4)]  # (rows, classes); 67 drops 3 rows
# the two KCE kernels the authors' runs used: the constructor default and classification_mixed's kcal_kwargs
OBJECTIVES = ("xe", "xe_mmd")
# feature spread per kernel, so that neither KCE is ~0: with bw_x 0.01 standardised features make the x-kernel
# the identity and the KCE ~1e-20 on both sides (a vacuous comparison); 0.05 gives KCEs of order 1e-3..1e-1
X_SPREAD = {"xe": 0.05, "xe_mmd": 1.0}

# tolerances (float64 inputs; each absorbs the float32 roundings named in the module docstring).
# Largest deviations measured on these cases: NLL rel 3e-8, QCE 0, DCE rel 3e-7, accuracy 0, ECE 6e-9,
# entropy rel 4e-8, KCE 5e-9
TOL_NLL = {"rtol": 1e-6, "atol": 0.0}  # compute(): nll_total.float() / count
TOL_QCE = {"rtol": 1e-12, "atol": 1e-12}  # counts are exact; set_dtype(float64) states
TOL_DCE = {"rtol": 1e-6, "atol": 1e-9}  # float32 indicators (1.0 * bool) and their means
TOL_ACC = {"rtol": 0.0, "atol": 1e-12}  # fractions k / 8
TOL_ECE = {"rtol": 0.0, "atol": 1e-6}  # 0.8.2 sums the ECE in float32 (confidences cast with .float())
TOL_ENT = {"rtol": 1e-6, "atol": 1e-7}  # compute(): entropy_total.float() / count.float()
TOL_KCE = {"rtol": 1e-6, "atol": 5e-8}  # label kernel from a float32 eye, kcal_total.float()
TOLS64 = {"accuracy": TOL_ACC, "ece": TOL_ECE, "entropy": TOL_ENT, "kce": TOL_KCE}
# the authors' classification metrics on float32 inputs with float32 states, kcal on the values promoted
# to float64
TOLS32 = {"accuracy": TOL_ACC, "ece": TOL_ECE, "entropy": {"rtol": 1e-5, "atol": 1e-6},
          "kce": {"rtol": 1e-5, "atol": 5e-7}}  # fmt: skip


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: these tensors are tiny (or the work is pandas'), and on a busy two-core machine
    extra OpenMP threads only spin at barriers (measured: 2.5 s of CPU for test_classification_metrics
    with two threads, 0.4 s with one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _close(a, b, tol) -> bool:
    return bool(torch.allclose(torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64), **tol))


def _mean(values) -> torch.Tensor:
    """Lightning's ``on_epoch`` mean of per-batch values (equal batch sizes)."""
    return torch.stack([torch.as_tensor(v).to(F64) for v in values]).mean()


# ------------------------------------------------------------------------------------------------------------
# torchmetrics 0.8.2 (naive loops of its formula; see the module docstring)
# ------------------------------------------------------------------------------------------------------------
def _tm08_accuracy(pred_labels: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``Accuracy()`` of 0.8.2 on integer predictions (the module passes argmax): the fraction of exact
    matches."""
    hits = 0
    for p, t in zip(pred_labels.tolist(), target.tolist(), strict=True):
        hits += int(p == t)
    return torch.tensor(hits / len(target), dtype=F64)


def _tm08_ece(preds: torch.Tensor, target: torch.Tensor, n_bins: int = N_BINS) -> torch.Tensor:
    """``CalibrationError(n_bins, norm="l1")`` of 0.8.2 on one batch of logits or probabilities ``(B, m)``.

    The bin membership is 0.8.2's (float32 confidences against float32 edges, exact as Python floats); the
    bin averages are summed in float64 here, 0.8.2 sums them in float32 (within 1.2e-7 of each other)."""
    values = preds
    if not bool(((values >= 0) & (values <= 1)).all()):  # 0.8.2 applies softmax only outside [0, 1]
        values = values.softmax(dim=1)
    conf, pred = values.max(dim=1)
    conf = conf.float().tolist()  # 0.8.2 casts confidences (and accuracies) to float32
    hit = pred.eq(target).tolist()
    edges = torch.linspace(0, 1, n_bins + 1).tolist()  # float32 edges
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        members = [i for i, c in enumerate(conf) if lo < c <= hi]  # right-closed (lo, hi]
        if members:
            acc_b = sum(hit[i] for i in members) / len(members)
            conf_b = sum(conf[i] for i in members) / len(members)
            total += abs(acc_b - conf_b) * len(members) / len(conf)
    return torch.tensor(total, dtype=F64)


# ------------------------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------------------------
def _regression_case(n: int, seed: int, ties: bool = False):
    """(mean, raw std = exp(raw), y) in float64. About 7% of raw stds lie below the 0.05 floor; the labels
    are biased and too spread out. ``ties``: every fifth label equals the median (0), so ``sign(y) = 0``."""
    g = torch.Generator().manual_seed(seed)
    mean = torch.randn(n, generator=g, dtype=F64)
    raw_std = torch.exp(torch.randn(n, generator=g, dtype=F64) - 1.5)
    y = mean + 0.2 + 1.4 * raw_std.clamp_min(STD_FLOOR) * torch.randn(n, generator=g, dtype=F64)
    if ties:
        y[::5] = 0.0
    return mean, raw_std, y


def _classification_case(n: int, m: int, seed: int):
    """(logits, labels, z) in float64: logit scales 0.5 to 5, z standard normal with 1 to 4 columns (the
    features are ``X_SPREAD[objective] * z``)."""
    g = torch.Generator().manual_seed(seed)
    scale = (0.5, 2.0, 5.0)[seed % 3]
    logits = scale * torch.randn(n, m, generator=g, dtype=F64)
    labels = torch.randint(0, m, (n,), generator=g)
    z = torch.randn(n, 1 + seed % 4, generator=g, dtype=F64)
    return logits, labels, z


def _classification_cases():
    for i, (n, m) in enumerate(CLS_SHAPES):
        for seed in (2 * i, 2 * i + 1):
            yield (n, m, seed), _classification_case(n, m, seed)


# ------------------------------------------------------------------------------------------------------------
# the authors' side
# ------------------------------------------------------------------------------------------------------------
def _metrics():
    return load("src.metrics.metrics")


def _as_float64(metric):
    metric.set_dtype(F64)
    return metric


def _gmm_preds(mean, raw_std):
    """``DenseGMMNet``'s output for one batch: mean, std, mixture weight, each (B, 1, 1)."""
    return mean[:, None, None], raw_std[:, None, None], torch.ones_like(mean)[:, None, None]


def _authors_regression_epoch(metric, mean, raw_std, y, batch=REG_BATCH, seeds=False):
    """``test_step`` on each full batch (forward's accumulation is one ``update``), then ``compute()`` as
    ``test_epoch_end``. ``seeds``: the global RNG is seeded with ``1000 + b`` before batch b (for DCE)."""
    with torch.random.fork_rng(devices=[]):  # the global RNG is left as it was found
        for b in range(len(y) // batch):
            rows = slice(b * batch, (b + 1) * batch)
            if seeds:
                torch.manual_seed(1000 + b)
            metric.update(_gmm_preds(mean[rows], raw_std[rows]), y[rows, None])
    return metric.compute()


def _shared_samples(mean, raw_std, n_rows, batch=REG_BATCH, num_samples=10):
    """The draws ``DecisionCalibrationError.update`` makes, shape (S, n_rows): per batch b, after
    ``torch.manual_seed(1000 + b)``, ``Normal(mean, max(std, 0.05)).sample((S,))`` with the authors' shapes.
    Rows of the dropped partial batch get zeros (kcal must not look at them)."""
    out = torch.zeros(num_samples, n_rows, dtype=mean.dtype)
    with torch.random.fork_rng(devices=[]):
        for b in range(n_rows // batch):
            rows = slice(b * batch, (b + 1) * batch)
            torch.manual_seed(1000 + b)
            loc, scale = mean[rows, None], raw_std[rows, None].clip(min=STD_FLOOR)
            out[:, rows] = Normal(loc, scale).sample((num_samples,))[..., 0]
    return out


def _kcal_kwargs(objective: str) -> dict:
    """The authors' ``kcal_kwargs`` for this method's runs, read from their experiment configs."""
    if objective == "xe":  # classification_nll.yaml sets none: the constructor default
        return {}
    assert objective == "xe_mmd"
    path = authors_dir() / "configs" / "experiment" / "classification_mixed.yaml"
    return yaml.safe_load(path.read_text())["model"]["kcal_kwargs"]


def _authors_classification_epoch(logits, labels, x, objective, calibrator=None, float64=True):
    """Per-batch metric values of ``ClassificationLitModule.test_step`` (batches of 8), averaged.

    Without ``calibrator``: ``test_acc(argmax)``, ``test_ece(logits)``, ``test_entropy(logits)``,
    ``test_kcal(logits, y, x)``. With a calibrator: ``calibrated = calibrator(softmax(logits))`` and the
    calibrated acc / ECE / entropy (``is_dist=True``) / KCE (``test_kcal(calibrated, ...)``, which applies
    softmax again)."""
    mm = _metrics()
    entropy = mm.ShannonEntropyError()
    kce = mm.ClassificationKernelCalibrationError(**_kcal_kwargs(objective))
    if float64:
        entropy, kce = _as_float64(entropy), _as_float64(kce)
    values = {"accuracy": [], "ece": [], "entropy": [], "kce": []}
    for b in range(len(labels) // CLS_BATCH):
        rows = slice(b * CLS_BATCH, (b + 1) * CLS_BATCH)
        lg, t, xb = logits[rows], labels[rows], x[rows]
        if calibrator is None:
            values["accuracy"].append(_tm08_accuracy(torch.argmax(lg, dim=-1), t))
            values["ece"].append(_tm08_ece(lg, t))
            values["entropy"].append(entropy(lg))
            values["kce"].append(kce(lg, t, xb))
        else:
            with torch.no_grad():
                cal = calibrator(torch.softmax(lg, dim=-1))
            values["accuracy"].append(_tm08_accuracy(torch.argmax(cal, dim=-1), t))
            values["ece"].append(_tm08_ece(cal, t))
            values["entropy"].append(entropy(cal, is_dist=True))
            values["kce"].append(kce(cal, t, xb))
    return {k: _mean(v) for k, v in values.items()}


def _kcal_classification(probs, labels, x, objective, **kw):
    return om.official_classification_metrics(
        probs, labels, x, batch_size=kw.pop("batch_size", CLS_BATCH), objective=objective, **kw
    )


def _assert_agree(ours: dict, theirs: dict, tols: dict, where) -> None:
    for key, tol in tols.items():
        assert _close(ours[key], theirs[key], tol), (where, key, float(ours[key]), float(theirs[key]))


def _assert_moves(perturbed, theirs, tol, what):
    assert not _close(perturbed, theirs, tol), f"{what}: {float(perturbed)!r} vs {float(theirs)!r}"


# ------------------------------------------------------------------------------------------------------------
# configuration: batch sizes and KCE kernels
# ------------------------------------------------------------------------------------------------------------
def test_batch_sizes_and_kce_kernels_are_the_authors(equivalence):
    """kcal's official batch sizes and KCE bandwidths match what the authors' configs and code set.

    Regression: ``configs/datamodule/regression.yaml`` sets ``test_batch_size`` to 128, the datamodule
    default is also 128, and no regression experiment overrides it. Classification: all four experiments
    set 8. KCE: ``classification_mixed.yaml``'s ``kcal_kwargs`` gives (10, 0.01), and the other methods fall
    back to ``ClassificationKernelLoss``'s defaults."""
    losses = load("src.metrics.losses")
    root = authors_dir() / "configs"
    reg_dm = yaml.safe_load((root / "datamodule" / "regression.yaml").read_text())
    assert reg_dm["test_batch_size"] == REG_BATCH == om.REGRESSION_TEST_BATCH_SIZE
    assert evaluation.OFFICIAL_REGRESSION_BATCH == REG_BATCH
    dm = load("src.datamodules.regression_datamodule")
    sig = inspect.signature(dm.RegressionDataModule.__init__).parameters
    assert sig["test_batch_size"].default == REG_BATCH
    for name in ("regression_nll", "regression_mixed"):
        exp = yaml.safe_load((root / "experiment" / f"{name}.yaml").read_text())
        assert "test_batch_size" not in (exp.get("datamodule") or {}), name
    experiments = {"classification_nll": "xe", "classification_mixed": "xe_mmd",
                   "classification_mmce": "xe_mmce", "classification_ece_kde": "xe_kde"}  # fmt: skip
    default_bw = inspect.signature(losses.ClassificationKernelLoss.__init__).parameters["bandwidths"].default
    for name, objective in experiments.items():
        exp = yaml.safe_load((root / "experiment" / f"{name}.yaml").read_text())
        assert exp["datamodule"]["test_batch_size"] == CLS_BATCH == om.CLASSIFICATION_TEST_BATCH_SIZE
        bws = (exp["model"].get("kcal_kwargs") or {}).get("bandwidths", default_bw)
        assert om.official_kce_bandwidths(objective) == (bws["x"], bws["y"]), name
        assert evaluation.official_objective_name(objective) == objective
    assert evaluation.OFFICIAL_CLASSIFICATION_BATCH == CLS_BATCH
    equivalence(1 + 2 + 4)


# ------------------------------------------------------------------------------------------------------------
# regression
# ------------------------------------------------------------------------------------------------------------
def test_regression_nll(equivalence):
    """``test/nll``: ``GMMNegativeLogLikelihood`` (their class) over full batches of 128 against
    ``official_regression_nll``, rtol 1e-6 (their ``compute`` rounds the total to float32). Two perturbations
    each have to move kcal's value outside that tolerance: every row used, i.e. no drop_last
    (``batch_size=None``); and no 0.05 floor on the std."""
    n_cases = 0
    for n in REG_ROWS:
        for seed in (0, 1):
            mean, raw_std, y = _regression_case(n, seed)
            theirs = _authors_regression_epoch(
                _as_float64(_metrics().GMMNegativeLogLikelihood()), mean, raw_std, y
            )
            forecast = Normal(mean, raw_std.clamp_min(STD_FLOOR))
            ours = om.official_regression_nll(forecast, y, batch_size=REG_BATCH)
            assert _close(ours, theirs, TOL_NLL), (n, seed, float(ours), float(theirs))
            _assert_moves(
                om.official_regression_nll(forecast, y, batch_size=None), theirs, TOL_NLL, "all rows"
            )
            unfloored = om.official_regression_nll(Normal(mean, raw_std), y, batch_size=REG_BATCH)
            _assert_moves(unfloored, theirs, TOL_NLL, "no std floor")
            n_cases += 1
    equivalence(n_cases)


def test_regression_qce(equivalence):
    """``test/cal``: ``GMMCalibrationError`` (their class: bins ``round(20 u)`` clipped to 19, counts over
    full batches) against ``official_qce(pit(forecast, y))``, within 1e-12. Two perturbations each have to
    move kcal's value outside that tolerance: floored, equal-width bins (emulated by shifting the PIT down
    half a bin, since ``round(20 u - 1/2) = floor(20 u)``); and every row used (``batch_size=None``)."""
    n_cases = 0
    for n in REG_ROWS:
        for seed in (2, 3):
            mean, raw_std, y = _regression_case(n, seed)
            theirs = _authors_regression_epoch(
                _as_float64(_metrics().GMMCalibrationError()), mean, raw_std, y
            )
            pit = rm.pit(Normal(mean, raw_std.clamp_min(STD_FLOOR)), y)
            ours = om.official_qce(pit, batch_size=REG_BATCH)
            assert _close(ours, theirs, TOL_QCE), (n, seed, float(ours), float(theirs))
            floored = om.official_qce((pit - 0.5 / N_BINS).clamp_min(0.0), batch_size=REG_BATCH)
            _assert_moves(floored, theirs, TOL_QCE, "floored bins")
            _assert_moves(om.official_qce(pit, batch_size=None), theirs, TOL_QCE, "all rows")
            n_cases += 1
    equivalence(n_cases)


def test_regression_dce(equivalence):
    """``test/dcal``: ``DecisionCalibrationError(loss_fn_1, actions [-1, 1], 10 samples, "L2")`` (their class,
    ``dcal_kwargs`` of ``gmm_module``), the square root of the per-batch squared gaps summed over full
    batches,
    against ``official_dce(samples, y, threshold=0)``, rtol 1e-6 (their indicators are float32). One case has
    every fifth label exactly at the median (``sign(0) = 0`` counts for neither action on both sides). Both
    sides use the same draws. Two perturbations each have to move kcal's value outside the tolerance: batches
    of 64, and a threshold of 0.1."""
    n_cases = 0
    for n in REG_ROWS:
        for seed, ties in ((4, False), (5, True)):
            mean, raw_std, y = _regression_case(n, seed, ties=ties)
            metric = _as_float64(
                _metrics().DecisionCalibrationError(
                    loss_fn_cls="loss_fn_1", actions=[-1, 1], num_samples=10, metric="L2"
                )
            )
            theirs = _authors_regression_epoch(metric, mean, raw_std, y, seeds=True)
            samples = _shared_samples(mean, raw_std, n)
            ours = om.official_dce(samples, y, 0.0, batch_size=REG_BATCH)
            assert _close(ours, theirs, TOL_DCE), (n, seed, float(ours), float(theirs))
            _assert_moves(om.official_dce(samples, y, 0.0, batch_size=64), theirs, TOL_DCE, "batches of 64")
            _assert_moves(
                om.official_dce(samples, y, 0.1, batch_size=REG_BATCH), theirs, TOL_DCE, "threshold"
            )
            n_cases += 1
    stream = (
        "random stream: kcal draws icdf(U) from its own generator, the authors Normal.sample from the "
        "global RNG; the values are compared on the authors' draws, passed to kcal as a sample tensor"
    )
    equivalence(n_cases, [stream])


# ------------------------------------------------------------------------------------------------------------
# classification
# ------------------------------------------------------------------------------------------------------------
def test_classification_metrics(equivalence):
    """``test/acc``, ``test/ece``, ``test/entropy`` and ``test/kcal`` for both KCE kernels (``xe``: the
    constructor default; ``xe_mmd``: ``kcal_kwargs``), each a mean of per-batch values over 8-row batches,
    against ``official_classification_metrics``. Shapes: rows 8 to 67, classes 2 to 7, two seeds each.

    Tolerances: accuracy 1e-12 (0.8 formula); ECE atol 1e-6 (0.8 formula, float32); entropy rtol 1e-6 and KCE
    rtol 1e-6 / atol 5e-8 (their classes). Perturbations, each of which has to move kcal's value outside the
    tolerance: accuracy and ECE, one label flipped between right and wrong (batches of 4 would not do: when
    every confidence has a bin to itself, the ECE is the mean of |hit - confidence| at any batch size);
    entropy, the first row's probabilities made uniform; KCE, the other method's kernel, and batches of 16
    where there are at least 16 rows."""
    n_cases = 0
    for (n, m, seed), (logits, labels, z) in _classification_cases():
        probs = torch.softmax(logits, -1)
        for objective in OBJECTIVES:
            x = X_SPREAD[objective] * z
            theirs = _authors_classification_epoch(logits, labels, x, objective)
            ours = _kcal_classification(probs, labels, x, objective)
            _assert_agree(ours, theirs, TOLS64, (n, m, seed, objective))
            other = "xe_mmd" if objective == "xe" else "xe"
            _assert_moves(
                _kcal_classification(probs, labels, x, other)["kce"], theirs["kce"], TOL_KCE, "kernel"
            )
            if n >= 16:
                moved = _kcal_classification(probs, labels, x, objective, batch_size=16)["kce"]
                _assert_moves(moved, theirs["kce"], TOL_KCE, "KCE batches of 16")
            n_cases += 1
        flipped = labels.clone()
        pred0 = int(probs[0].argmax())
        flipped[0] = (pred0 + 1) % m if int(labels[0]) == pred0 else pred0
        moved = _kcal_classification(probs, flipped, x, "xe")
        _assert_moves(moved["accuracy"], theirs["accuracy"], TOL_ACC, "flipped label")
        _assert_moves(moved["ece"], theirs["ece"], TOL_ECE, "flipped label")
        uniform0 = probs.clone()
        uniform0[0] = 1.0 / m
        _assert_moves(
            _kcal_classification(uniform0, labels, x, "xe")["entropy"], theirs["entropy"], TOL_ENT, "row 0"
        )
    equivalence(n_cases)


def test_temperature_scaled_classification_metrics(equivalence):
    """The calibrated classification metrics (``test/calibrated_acc``, ``test/calibrated_ece ``,
    ``test/calibrated_entropy``, ``test/calibrated_kcal``) at a fixed temperature, in float32 as both
    pipelines compute the recalibrated probabilities.

    The temperature comes from kcal's scaler, fitted on validation probabilities with ``fit_from_probs``. The
    fit itself is not compared here. The authors' torchuq ``TemperatureScaling`` (their copy) gets that T as
    the float32 ``(1, 1)`` tensor its ``train`` leaves. kcal is then called as ``kcal.evaluation`` calls it:
    ``transform_probs(softmax(float32 logits))``, promoted to float64 for the metrics, with ``kce_probs``
    set to the softmax of the recalibrated probabilities. The authors call ``calibrator(softmax(logits))``
    and score it with float32 metric states. ECE is scored on probabilities, so 0.8.2 skips its softmax.
    Entropy uses ``is_dist=True``. KCE goes through ``test_kcal``, which applies a second softmax. The
    recalibrated probabilities must be bitwise equal; the metric tolerances are ``test_float32_pipelines``'.
    The temperatures lie between 0.4 and 2.5, on both sides of 1. Perturbations, each of which has to move
    kcal's value outside the tolerance: KCE without the second softmax (``kce_probs=None``); accuracy and ECE
    with one label flipped; entropy at 1.05 T."""
    calibrate = load("torchuq.transform.calibrate")
    n_cases = 0
    temperatures = []
    for (n, m, seed), (logits64, labels, z) in _classification_cases():
        logits = logits64.float()  # the network's output
        g = torch.Generator().manual_seed(100 + seed)
        # validation logits whose labels follow softmax(k * logits): over- (k < 1) or under-confident (k > 1)
        k = (0.6, 1.6)[seed % 2]
        val_logits = 2.0 * torch.randn(200, m, generator=g)
        val_labels = torch.multinomial(torch.softmax(k * val_logits, -1), 1, generator=g)[:, 0]
        scaler = make_class_recalibrator("temperature").fit_from_probs(
            torch.softmax(val_logits, -1), val_labels
        )
        temperatures.append(scaler.temperature)
        theirs_ts = calibrate.TemperatureScaling()
        theirs_ts.temperature = torch.full((1, 1), scaler.temperature)  # float32, as their train() leaves it
        probs = torch.softmax(logits, -1)
        p_cal = scaler.transform_probs(probs)
        assert torch.equal(p_cal, theirs_ts(probs))
        p_cal = p_cal.double()
        for objective in OBJECTIVES:
            x = (X_SPREAD[objective] * z).float()
            theirs = _authors_classification_epoch(
                logits, labels, x, objective, calibrator=theirs_ts, float64=False
            )
            ours = _kcal_classification(
                p_cal, labels, x.double(), objective, kce_probs=torch.softmax(p_cal, -1)
            )
            _assert_agree(ours, theirs, TOLS32, (n, m, seed, objective))
            once = _kcal_classification(p_cal, labels, x.double(), objective)["kce"]
            _assert_moves(once, theirs["kce"], TOLS32["kce"], "KCE without the second softmax")
            n_cases += 1
        flipped = labels.clone()
        pred0 = int(p_cal[0].argmax())
        flipped[0] = (pred0 + 1) % m if int(labels[0]) == pred0 else pred0
        moved = _kcal_classification(p_cal, flipped, z, "xe")
        _assert_moves(moved["accuracy"], theirs["accuracy"], TOLS32["accuracy"], "flipped label")
        _assert_moves(moved["ece"], theirs["ece"], TOLS32["ece"], "flipped label")
        other_t = torch.softmax(torch.log(probs.double() + 1e-10) / (1.05 * scaler.temperature), -1)
        moved = _kcal_classification(other_t, labels, z, "xe")["entropy"]
        _assert_moves(moved, theirs["entropy"], TOLS32["entropy"], "1.05 T")
    assert 0.4 < min(temperatures) < 1.0 < max(temperatures) < 2.5, temperatures
    equivalence(n_cases)


def test_float32_pipelines(equivalence):
    """The authors' metrics as their training runs them, with float32 network outputs and float32 metric
    states, against kcal on the same values promoted to float64, as ``kcal.evaluation`` does (``.double()``).
    Tolerances: NLL rtol 1e-5; QCE 1e-6 (the bins agree); DCE rtol 1e-6 on shared float32 draws; accuracy
    exact; ECE atol 1e-6; entropy rtol 1e-5; KCE rtol 1e-5 / atol 5e-7. Largest deviations measured: NLL rel
    2e-7, QCE 8e-8, DCE rel 3e-7, ECE 2e-8, entropy rel 1e-7, KCE 6e-8. The perturbations are those of the
    float64 tests."""
    mm = _metrics()
    n_cases = 0
    for n, seed in ((300, 6), (517, 7)):
        mean64, raw64, y64 = _regression_case(n, seed)
        mean, raw_std, y = mean64.float(), raw64.float(), y64.float()
        forecast = Normal(mean.double(), raw_std.double().clamp_min(STD_FLOOR))
        theirs = _authors_regression_epoch(mm.GMMNegativeLogLikelihood(), mean, raw_std, y)
        ours = om.official_regression_nll(forecast, y.double(), batch_size=REG_BATCH)
        assert _close(ours, theirs, {"rtol": 1e-5, "atol": 0.0}), (n, float(ours), float(theirs))
        theirs = _authors_regression_epoch(mm.GMMCalibrationError(), mean, raw_std, y)
        ours = om.official_qce(rm.pit(forecast, y.double()), batch_size=REG_BATCH)
        assert _close(ours, theirs, {"rtol": 0.0, "atol": 1e-6}), (n, float(ours), float(theirs))
        dce = mm.DecisionCalibrationError(
            loss_fn_cls="loss_fn_1", actions=[-1, 1], num_samples=10, metric="L2"
        )
        theirs = _authors_regression_epoch(dce, mean, raw_std, y, seeds=True)
        ours = om.official_dce(
            _shared_samples(mean, raw_std, n).double(), y.double(), 0.0, batch_size=REG_BATCH
        )
        assert _close(ours, theirs, TOL_DCE), (n, float(ours), float(theirs))
        n_cases += 3
    for (n, m, seed), (logits64, labels, z) in _classification_cases():
        if seed % 2:
            continue
        logits = logits64.float()
        for objective in OBJECTIVES:
            x = (X_SPREAD[objective] * z).float()
            theirs = _authors_classification_epoch(logits, labels, x, objective, float64=False)
            ours = _kcal_classification(torch.softmax(logits.double(), -1), labels, x.double(), objective)
            _assert_agree(ours, theirs, TOLS32, (n, m, seed, objective))
            n_cases += 1
    equivalence(n_cases)


# ------------------------------------------------------------------------------------------------------------
# known, deliberate differences
# ------------------------------------------------------------------------------------------------------------
def test_entropy_nan_when_a_probability_underflows(equivalence):
    """Deliberate difference: when a softmax probability underflows to exactly 0, ``ShannonEntropyError``
    computes ``-0 * log 0 = nan`` and the batch's entropy is NaN. kcal takes ``0 log 0 = 0``, the limit.
    Float32 logits spread by 120 underflow in float32, which is what the authors ran; kcal's float64 softmax
    of the same logits does not underflow. Float64 logits spread by 800 underflow in both."""
    mm = _metrics()
    logits32 = torch.tensor([[0.0, -120.0, 1.0]] + [[0.1 * i, -0.2 * i, 0.3] for i in range(1, 8)])
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    theirs = mm.ShannonEntropyError()(logits32)
    assert torch.isnan(theirs)
    ours = om.official_classification_metrics(torch.softmax(logits32.double(), -1), labels, torch.zeros(8, 1))
    p = torch.softmax(logits32.double(), -1)
    naive = sum(-float(v) * float(torch.log(v)) for v in p.flatten() if v > 0) / 8  # 0 log 0 := 0
    assert torch.isfinite(ours["entropy"]) and abs(float(ours["entropy"]) - naive) < 1e-12
    logits64 = logits32.double()
    logits64[0, 1] = -800.0
    theirs64 = _as_float64(mm.ShannonEntropyError())(logits64)
    assert torch.isnan(theirs64)
    p64 = torch.softmax(logits64, -1)
    assert float(p64[0, 1]) == 0.0
    ours64 = om.official_classification_metrics(p64, labels, torch.zeros(8, 1))["entropy"]
    naive64 = sum(-float(v) * float(torch.log(v)) for v in p64.flatten() if v > 0) / 8
    assert abs(float(ours64) - naive64) < 1e-12
    equivalence(0, ["entropy: the authors' NaN when a probability underflows to 0; kcal takes 0 log 0 = 0"])


def test_tm08_skips_softmax_when_logits_lie_in_unit_interval(equivalence):
    """Deliberate difference: torchmetrics 0.8.2's ``CalibrationError`` skips its softmax when every value of
    a batch already lies in [0, 1]. Logits of that kind are then read as probabilities, so the top-label
    confidence is the largest logit. kcal always computes the ECE on ``softmax(logits)``, which its docstring
    states. On such a batch the two ECEs differ. Accuracy, entropy and KCE are unaffected because they use
    argmax or apply their own softmax. With a single logit outside [0, 1], 0.8.2 applies the softmax again and
    the two ECEs agree."""
    g = torch.Generator().manual_seed(11)
    gaps = []
    for m in (2, 3, 5):
        logits = torch.rand(CLS_BATCH, m, generator=g, dtype=F64)
        labels = torch.randint(0, m, (CLS_BATCH,), generator=g)
        probs = torch.softmax(logits, -1)
        ours = om.official_classification_metrics(probs, labels, torch.zeros(CLS_BATCH, 1))["ece"]
        theirs = _tm08_ece(logits, labels)
        gaps.append(abs(float(ours) - float(theirs)))
        assert gaps[-1] > 1e-2, (m, float(ours), float(theirs))
        shifted = logits.clone()
        shifted[0, 0] = 1.5  # one value outside [0, 1]: softmax applies again
        ours = om.official_classification_metrics(
            torch.softmax(shifted, -1), labels, torch.zeros(CLS_BATCH, 1)
        )
        assert _close(ours["ece"], _tm08_ece(shifted, labels), TOL_ECE)
    what = "ECE: 0.8.2 skips softmax when all logits of a batch lie in [0, 1]"
    equivalence(0, [f"{what} (gaps {min(gaps):.2f}-{max(gaps):.2f})"])


def test_ece_bins_at_an_edge_as_0_8_2(equivalence):
    """0.8.2 casts confidences to float32 and bins them against ``linspace(0, 1, 21)`` in float32, and kcal's
    official ECE bins them so too. The case where it matters: a confidence at the edge 0.55 that float32 and
    float64 binning put in different bins. Which confidence that is depends on the CPU, since torch's
    ``linspace`` kernel sets the edges' last bits: with AVX2 or AVX-512 kernels the float32 edge is 0.55000001
    and the float64 one 0.5499999999999999, so 0.55 lands in (0.5, 0.55] in float32 and in (0.55, 0.6] in
    float64; the scalar kernels (``ATEN_CPU_CAPABILITY=default``) give 0.54999995 and 0.55, the other way
    round. Placed with a 0.58 confidence of the other outcome, the 8-row ECE is 1.63 / 8 where the two
    confidences fall in different bins and 0.73 / 8 where they share one; kcal gives 0.8.2's."""
    from kcal.metrics.classification import bin_index

    edge = 0.55
    candidates = [edge, float(torch.linspace(0, 1, 21, dtype=F64)[11]), float(torch.linspace(0, 1, 21)[11])]
    c = next(
        v
        for v in candidates
        if bin_index(torch.tensor([v]), 20) != bin_index(torch.tensor([v], dtype=F64), 20)
    )
    probs = torch.tensor([[c, 1 - c], [0.58, 0.42]] + [[0.9, 0.1]] * 6, dtype=F64)
    labels = torch.tensor([0, 1, 0, 0, 0, 0, 0, 0])
    ours = float(om.official_classification_metrics(probs, labels, torch.zeros(CLS_BATCH, 1))["ece"])
    theirs = float(_tm08_ece(probs, labels))
    conf = probs.max(-1).values
    apart32 = bool(bin_index(conf.float(), 20)[0] != bin_index(conf.float(), 20)[1])
    assert abs(theirs - (1.63 if apart32 else 0.73) / 8) < 1e-6 and abs(ours - theirs) < 1e-6
    assert not torch.equal(bin_index(conf, 20), bin_index(conf.float(), 20))  # float64 binning: another ECE
    equivalence(1)
