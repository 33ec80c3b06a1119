"""The torchmetrics classes accumulate over batches and equal their functions on the whole set."""

import pytest
import torch
from torchmetrics import MetricCollection

from kcal.baselines import mmce
from kcal.metrics import regression as R
from kcal.metrics.classification import classwise_ece, ece
from kcal.metrics.stateful import (
    CRPS,
    ClassificationKernelCalibrationError,
    ClasswiseCalibrationError,
    DecisionCalibrationError,
    KernelCalibrationError,
    MaximumMeanCalibrationError,
    NegativeLogLikelihood,
    QuantileCalibrationError,
    TopLabelCalibrationError,
)
from kcal.mmd import classification_mmd, regression_mmd

DT = torch.float64


def _data(n=97, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=DT)
    mean = x[:, 0] + 0.3 * torch.randn(n, generator=g, dtype=DT)
    std = 0.5 + torch.rand(n, generator=g, dtype=DT)
    y = x[:, 0] + torch.randn(n, generator=g, dtype=DT)
    return mean, std, y, x


def _batches(n, seed):
    """Random batch boundaries (uneven sizes, at least one row each)."""
    g = torch.Generator().manual_seed(100 + seed)
    cuts = sorted(set(torch.randint(1, n, (5,), generator=g).tolist()))
    edges = [0, *cuts, n]
    return list(zip(edges[:-1], edges[1:], strict=True))


CASES = [
    (lambda: QuantileCalibrationError(n_bins=10), lambda m, s, y, x: R.qce_binned(R.pit((m, s), y), 10)),
    (lambda: DecisionCalibrationError(threshold=0.2), lambda m, s, y, x: R.dce((m, s), y, 0.2)),
    (CRPS, lambda m, s, y, x: R.crps((m, s), y)),
    (NegativeLogLikelihood, lambda m, s, y, x: R.nll((m, s), y)),
    (
        lambda: KernelCalibrationError(form="individual", bandwidth_y=1.0, bandwidth_z=2.0),
        lambda m, s, y, x: regression_mmd((m, s), y, x, bandwidth_y=1.0, bandwidth_z=2.0, pairing="analytic"),
    ),
    (
        lambda: KernelCalibrationError(form="marginal", bandwidth_y=0.5),
        lambda m, s, y, x: regression_mmd(
            (m, s), y, None, form="marginal", bandwidth_y=0.5, pairing="analytic"
        ),
    ),
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_metric_class_accumulates_to_the_function_on_the_whole_set(case, seed):
    make, fn = CASES[case]
    mean, std, y, x = _data(seed=seed)
    metric = make()
    for s, e in _batches(len(y), seed):
        metric.update((mean[s:e], std[s:e]), y[s:e], x[s:e])
    expected = fn(mean, std, y, x)
    assert torch.allclose(metric.compute().to(DT), expected.to(DT), rtol=1e-10, atol=1e-12)
    metric.reset()
    metric.update(torch.distributions.Normal(mean, std), y.numpy(), x.numpy())  # Normal + numpy inputs
    assert torch.allclose(metric.compute().to(DT), expected.to(DT), rtol=1e-10, atol=1e-12)


def test_metric_collection_shares_one_update_signature():
    mean, std, y, x = _data()
    metrics = MetricCollection(
        {
            "qce": QuantileCalibrationError(),
            "dce": DecisionCalibrationError(),
            "crps": CRPS(),
            "nll": NegativeLogLikelihood(),
            "kce": KernelCalibrationError(bandwidth_z=2.0),
        }
    )
    for s, e in _batches(len(y), 0):
        metrics.update((mean[s:e], std[s:e]), y[s:e], x[s:e])
    out = metrics.compute()
    assert set(out) == {"qce", "dce", "crps", "nll", "kce"}
    assert all(torch.isfinite(v) for v in out.values())


def test_metric_options_are_checked_in_the_constructor():
    with pytest.raises(ValueError, match="n_bins"):
        QuantileCalibrationError(n_bins=0)
    with pytest.raises(ValueError, match="valid names"):
        KernelCalibrationError(form="indivdual")
    with pytest.raises(ValueError, match="bandwidth_z"):
        KernelCalibrationError(bandwidth_z=0.0)
    # the default closed-form pairing has no PIT form and no other kernel on y: refused before any update
    with pytest.raises(ValueError, match="pairing='analytic' supports .* got form 'quantile'"):
        KernelCalibrationError(form="quantile")
    with pytest.raises(ValueError, match="got form 'individual' with kernel 'laplacian'"):
        KernelCalibrationError(kernel_y="laplacian")
    KernelCalibrationError(form="quantile", pairing="index")
    metric = KernelCalibrationError()
    mean, std, y, _ = _data(n=8)
    with pytest.raises(ValueError, match="conditions on x"):
        metric.update((mean, std), y)


# ----------------------------------------------------------------------------------------------------
# Classification: update(probs, labels, x=None)
# ----------------------------------------------------------------------------------------------------
M = 4  # classes


def _cls_data(n=101, d=3, seed=0, dtype=DT):
    """Softmax forecasts from random logits, labels drawn from a tempered version of them, features x."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=DT)
    logits = 2.0 * torch.randn(n, M, generator=g, dtype=DT) + x[:, :1]
    probs = torch.softmax(logits, -1)
    labels = torch.multinomial(torch.softmax(0.5 * logits, -1), 1, generator=g)[:, 0]
    return probs.to(dtype), labels, x.to(dtype)


CLS_CASES = [
    (TopLabelCalibrationError, lambda p, y, x: ece(p, y)),
    (lambda: TopLabelCalibrationError(n_bins=7, norm="l2"), lambda p, y, x: ece(p, y, 7, "l2")),
    (lambda: TopLabelCalibrationError(n_bins=10, norm="max"), lambda p, y, x: ece(p, y, 10, "max")),
    (lambda: ClasswiseCalibrationError(M), lambda p, y, x: classwise_ece(p, y)),
    (lambda: ClasswiseCalibrationError(M, n_bins=15), lambda p, y, x: classwise_ece(p, y, 15)),
    (MaximumMeanCalibrationError, lambda p, y, x: mmce(p, y)),
    (
        lambda: MaximumMeanCalibrationError(bandwidth=0.2, weighted=False),
        lambda p, y, x: mmce(p, y, 0.2, weighted=False),
    ),
    (lambda: MaximumMeanCalibrationError(scaling="authors"), lambda p, y, x: mmce(p, y, scaling="authors")),
    (ClassificationKernelCalibrationError, lambda p, y, x: classification_mmd(p, y, x)),
    (
        lambda: ClassificationKernelCalibrationError(bandwidth_y=0.1, bandwidth_z=2.0),
        lambda p, y, x: classification_mmd(p, y, x, form="individual", bandwidth_y=0.1, bandwidth_z=2.0),
    ),
    (
        lambda: ClassificationKernelCalibrationError(form="marginal", bandwidth_y=0.5, bandwidth_z=0.3),
        lambda p, y, x: classification_mmd(p, y, None, form="marginal", bandwidth_y=0.5, bandwidth_z=0.3),
    ),
    (
        lambda: ClassificationKernelCalibrationError(form="top_label"),
        lambda p, y, x: classification_mmd(p, y, form="top_label"),
    ),
    (
        lambda: ClassificationKernelCalibrationError(form="canonical", kernel_y="delta"),
        lambda p, y, x: classification_mmd(p, y, form="canonical", kernel_y="delta"),
    ),
]

# float32 inputs: the binned classes sum in float64, the functions in float32
TOL = {torch.float64: {"rtol": 1e-10, "atol": 1e-12}, torch.float32: {"rtol": 1e-5, "atol": 1e-6}}


def _close(actual, expected, dtype):
    return torch.allclose(actual.to(DT), expected.to(DT), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", range(len(CLS_CASES)))
def test_classification_metric_accumulates_to_the_function_on_the_whole_set(case, seed, dtype):
    make, fn = CLS_CASES[case]
    probs, labels, x = _cls_data(seed=seed, dtype=dtype)
    metric = make()
    for s, e in _batches(len(labels), seed):
        metric.update(probs[s:e], labels[s:e], x[s:e])
    assert _close(metric.compute(), fn(probs, labels, x), dtype)
    metric.reset()
    k = 40
    metric.update(probs[:k].numpy(), labels[:k].numpy(), x[:k].numpy())  # numpy inputs, after a reset
    assert _close(metric.compute(), fn(probs[:k], labels[:k], x[:k]), dtype)


@pytest.mark.parametrize("case", range(len(CLS_CASES)))
def test_classification_metric_forward_gives_the_batch_value_and_accumulates(case):
    make, fn = CLS_CASES[case]
    probs, labels, x = _cls_data()
    metric = make()
    for s, e in [(0, 30), (30, 61), (61, len(labels))]:
        batch_value = metric(probs[s:e], labels[s:e], x[s:e])
        assert _close(batch_value, fn(probs[s:e], labels[s:e], x[s:e]), DT)
    assert _close(metric.compute(), fn(probs, labels, x), DT)


def _naive_top_label_ece(probs, labels, n_bins):
    """l1 ECE by a Python loop over right-closed bins (lo, hi] (an exact 0 in the first bin)."""
    rows = []
    for p, y in zip(probs.tolist(), labels.tolist(), strict=True):
        conf = max(p)
        rows.append((conf, float(p.index(conf) == y)))
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        members = [(c, h) for c, h in rows if lo < c <= hi or (b == 0 and c == 0.0)]
        if members:
            acc = sum(h for _, h in members) / len(members)
            conf = sum(c for c, _ in members) / len(members)
            total += len(members) / len(rows) * abs(acc - conf)
    return total


@pytest.mark.parametrize("n_bins", [4, 10, 20])
def test_top_label_ece_matches_a_naive_loop_over_right_closed_bins(n_bins):
    probs, labels, _ = _cls_data(n=203, seed=3)
    # confidences exactly on the inner edges 0.5 and 0.75 of 4 bins, and on the last edge 1.0
    edges = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.75, 0.25, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=DT)
    probs = torch.cat([probs, edges])
    labels = torch.cat([labels, torch.tensor([0, 1, 0])])
    metric = TopLabelCalibrationError(n_bins=n_bins)
    for s, e in _batches(len(labels), n_bins):
        metric.update(probs[s:e], labels[s:e])
    assert metric.compute().item() == pytest.approx(_naive_top_label_ece(probs, labels, n_bins), abs=1e-12)


def test_top_label_ece_bins_are_right_closed():
    # 0.5 is the upper edge of (0.25, 0.5]: alone there, it gives |1 - 0.5|/2 + |0 - 0.6|/2 = 0.55;
    # left-closed bins [0.5, 0.75) would pool it with 0.6 and give |0.5 - 0.55| = 0.05
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]], dtype=DT)
    metric = TopLabelCalibrationError(n_bins=4)
    metric.update(probs, torch.tensor([0, 1]))
    assert metric.compute().item() == pytest.approx(0.55, abs=1e-12)


def test_classification_metric_collection_shares_one_update_signature():
    probs, labels, x = _cls_data()
    metrics = MetricCollection(
        {
            "ece": TopLabelCalibrationError(),
            "classwise_ece": ClasswiseCalibrationError(M),
            "mmce": MaximumMeanCalibrationError(),
            "kce": ClassificationKernelCalibrationError(bandwidth_y=0.1, bandwidth_z=2.0),
        }
    )
    for s, e in _batches(len(labels), 0):
        metrics.update(probs[s:e], labels[s:e], x[s:e])
    out = metrics.compute()
    expected = {
        "ece": ece(probs, labels),
        "classwise_ece": classwise_ece(probs, labels),
        "mmce": mmce(probs, labels),
        "kce": classification_mmd(probs, labels, x, bandwidth_y=0.1, bandwidth_z=2.0),
    }
    assert set(out) == set(expected)
    for name, value in expected.items():
        assert _close(out[name], value, DT), name
    metrics.reset()
    metrics.update(probs[:10], labels[:10], x[:10])
    assert _close(metrics.compute()["ece"], ece(probs[:10], labels[:10]), DT)


@pytest.mark.parametrize("case", range(len(CLS_CASES)))
def test_classification_metric_refuses_logits_with_a_one_line_message(case):
    probs, labels, x = _cls_data(n=8)
    metric = CLS_CASES[case][0]()
    with pytest.raises(ValueError, match="not logits") as err:
        metric.update(torch.log(probs) + 1.0, labels, x)
    assert "\n" not in str(err.value)


def test_classification_metric_options_are_checked():
    for bad in (0, -3, 2.5, True, "20"):
        with pytest.raises(ValueError, match="n_bins"):
            TopLabelCalibrationError(n_bins=bad)
        with pytest.raises(ValueError, match="n_bins"):
            ClasswiseCalibrationError(M, n_bins=bad)
    with pytest.raises(ValueError, match="norm"):
        TopLabelCalibrationError(norm="l3")
    with pytest.raises(ValueError, match="num_classes"):
        ClasswiseCalibrationError(0)
    with pytest.raises(ValueError, match="scaling"):
        MaximumMeanCalibrationError(scaling="kumr")
    with pytest.raises(ValueError, match="bandwidth"):
        MaximumMeanCalibrationError(bandwidth=0.0)
    with pytest.raises(ValueError, match="valid names"):
        ClassificationKernelCalibrationError(form="indivdual")
    with pytest.raises(ValueError, match="bandwidth_z"):
        ClassificationKernelCalibrationError(bandwidth_z=-1.0)
    with pytest.raises(ValueError, match="kernel"):
        ClassificationKernelCalibrationError(kernel_z="nope")
    with pytest.raises(TypeError, match="reductin"):
        ClassificationKernelCalibrationError(form="marginal", reductin="mean")
    probs, labels, x = _cls_data(n=8)
    with pytest.raises(ValueError, match="num_classes=3"):
        ClasswiseCalibrationError(3).update(probs, labels)
    with pytest.raises(ValueError, match="conditions on x"):
        ClassificationKernelCalibrationError().update(probs, labels)
    with pytest.raises(ValueError, match="rows"):
        ClassificationKernelCalibrationError().update(probs, labels, x[:5])


def test_classification_metric_logged_in_a_lightning_module_equals_the_function(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(5)
    d = 3
    x_train, x_val = torch.randn(48, d, generator=g), torch.randn(37, d, generator=g)
    y_train, y_val = torch.randint(0, M, (48,), generator=g), torch.randint(0, M, (37,), generator=g)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(d, M)
            self.val_metrics = MetricCollection({"val_ece": TopLabelCalibrationError(n_bins=10)})

        def training_step(self, batch, batch_idx):
            xb, yb = batch
            return torch.nn.functional.cross_entropy(self.net(xb), yb)

        def validation_step(self, batch, batch_idx):
            xb, yb = batch
            self.val_metrics.update(torch.softmax(self.net(xb), -1), yb, xb)
            self.log_dict(self.val_metrics)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    torch.manual_seed(0)
    module = Module()
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
    )
    val = DataLoader(TensorDataset(x_val, y_val), batch_size=8)  # 37 rows: a last batch of 5
    trainer.fit(module, DataLoader(TensorDataset(x_train, y_train), batch_size=16), val)
    (logged,) = trainer.validate(module, val, verbose=False)
    with torch.no_grad():
        expected = ece(torch.softmax(module.net(x_val), -1), y_val, n_bins=10)
    assert logged["val_ece"] == pytest.approx(expected.item(), rel=1e-5, abs=1e-6)
