"""Every public estimator, loss and metric refuses what it cannot score (issue 68, items 3 and 4).

``CASES`` holds one valid call per public callable of :mod:`kcal.mmd`, :mod:`kcal.metrics`,
:mod:`kcal.metrics.stateful`, :mod:`kcal.losses`, :mod:`kcal.baselines`, :mod:`kcal.kernels` and
:mod:`kcal.recalibration` that takes data; ``EXEMPT`` says why the other exported names have none. From each
case the tests build the bad variants: NaN and inf in each float input, a negative and a zero std, integer
dtypes (converted: the same value as the float call), one row fewer in each argument, and, for the
``torchmetrics.Metric`` classes, ``compute()`` before ``update()``. Each must raise a one-line ``ValueError``
naming the argument, never give a NaN, a score or a torch internal error; ``validate_args=False`` skips the
value checks, and on the training path makes no host synchronisation at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import kcal.baselines as B
import kcal.kernels as K
import kcal.losses as L
import kcal.metrics as M
import kcal.metrics.stateful as S
import kcal.mmd as D
import kcal.recalibration as R

N, C = 12, 3
torch.manual_seed(0)
_g = torch.Generator().manual_seed(0)
MEAN = torch.randn(N, generator=_g, dtype=torch.float64)
STD = 0.5 + torch.rand(N, generator=_g, dtype=torch.float64)
Y = MEAN + STD * torch.randn(N, generator=_g, dtype=torch.float64)
X = torch.randn(N, 3, generator=_g, dtype=torch.float64)
PROBS = torch.softmax(2 * torch.randn(N, C, generator=_g, dtype=torch.float64), -1)
LABELS = torch.arange(N) % C
PIT = torch.rand(N, generator=_g, dtype=torch.float64)


def gen():
    return torch.Generator().manual_seed(1)


def reg(**extra):
    return {"mean": MEAN.clone(), "std": STD.clone(), "y": Y.clone(), **extra}


def cls(**extra):
    return {"probs": PROBS.clone(), "labels": LABELS.clone(), **extra}


@dataclass
class Case:
    call: Callable  # call(inputs, validate_args) -> result
    inputs: Callable[[], dict]  # fresh valid inputs by argument name
    floats: tuple[str, ...] = ()  # refuse NaN and inf
    std: tuple[str, ...] = ()  # refuse <= 0
    rows: tuple[str, ...] = ()  # one row per example ("name:1" counts along dim 1)
    ints: tuple[str, ...] = ()  # integer input is converted: same value as the float call
    switch: bool = True  # has validate_args
    metric: bool = False  # a torchmetrics.Metric: call builds it, updates once and computes


def metric(cls_, ctor=None, regression=True):
    """A Case call for a Metric class: built with validate_args, one update, compute."""

    def call(d, v):
        m = (ctor or cls_)(validate_args=v)
        if regression:
            m.update((d["mean"], d["std"]), d["y"], d.get("x"))
        else:
            m.update(d["probs"], d["labels"], d.get("x"))
        return m.compute()

    call.build = lambda: (ctor or cls_)()
    return call


REG = {
    "floats": ("mean", "std", "y"),
    "std": ("std",),
    "rows": ("mean", "std", "y"),
    "ints": ("mean", "std", "y"),
}
REG_X = {"floats": ("mean", "std", "y", "x"), "std": ("std",), "rows": ("mean", "std", "y", "x"),
         "ints": ("mean", "std", "y", "x")}  # fmt: skip
CLS = {"floats": ("probs",), "rows": ("probs", "labels")}
CLS_X = {"floats": ("probs", "x"), "rows": ("probs", "labels", "x"), "ints": ("x",)}
BW = {"bandwidth_y": 1.0, "bandwidth_z": 1.0}


def pair(d):
    return d["mean"], d["std"]


CASES: dict[str, Case] = {
    # kcal.metrics (regression)
    "gaussian_nll": Case(lambda d, v: M.gaussian_nll(pair(d), d["y"], validate_args=v), reg, **REG),
    "nll": Case(lambda d, v: M.nll(pair(d), d["y"], validate_args=v), reg, **REG),
    "pit": Case(lambda d, v: M.pit(pair(d), d["y"], validate_args=v), reg, **REG),
    "qce": Case(lambda d, v: M.qce(pair(d), d["y"], validate_args=v), reg, **REG),
    "dce": Case(lambda d, v: M.dce(pair(d), d["y"], validate_args=v), reg, **REG),
    "crps": Case(lambda d, v: M.crps(pair(d), d["y"], validate_args=v), reg, **REG),
    "sharpness": Case(
        lambda d, v: M.sharpness(pair(d), validate_args=v),
        lambda: reg(),
        floats=("mean", "std"),
        std=("std",),
        rows=("mean", "std"),
        ints=("std",),
    ),  # fmt: skip
    "as_forecast": Case(
        lambda d, v: M.as_forecast(pair(d), validate_args=v).loc,
        lambda: reg(),
        floats=("mean", "std"),
        std=("std",),
        ints=("mean",),
    ),  # fmt: skip
    "qce_binned": Case(
        lambda d, v: M.qce_binned(d["pit"], validate_args=v),
        lambda: {"pit": PIT.clone()},
        floats=("pit",),
        ints=("pit",),
    ),  # fmt: skip
    "qce_ecdf": Case(
        lambda d, v: M.qce_ecdf(d["pit"], validate_args=v),
        lambda: {"pit": PIT.clone()},
        floats=("pit",),
        ints=("pit",),
    ),  # fmt: skip
    "decision_calibration_error": Case(
        lambda d, v: M.decision_calibration_error(d["prob_above"], d["y"], validate_args=v),
        lambda: {"prob_above": PIT.clone(), "y": Y.clone()},
        floats=("prob_above", "y"),
        rows=("prob_above", "y"),
        ints=("y",),
    ),  # fmt: skip
    "dce_sampled": Case(
        lambda d, v: M.dce_sampled(d["samples"], d["y"], validate_args=v),
        lambda: {
            "samples": MEAN + STD * torch.randn(5, N, generator=gen(), dtype=torch.float64),
            "y": Y.clone(),
        },
        floats=("samples", "y"),
        rows=("samples:1", "y"),
        ints=("samples", "y"),
    ),  # fmt: skip
    "official_qce": Case(
        lambda d, v: M.official_qce(d["pit"], batch_size=None, validate_args=v),
        lambda: {"pit": PIT.clone()},
        floats=("pit",),
        ints=("pit",),
    ),  # fmt: skip
    "official_dce": Case(
        lambda d, v: M.official_dce(pair(d), d["y"], batch_size=None, generator=gen(), validate_args=v),
        reg,
        **REG,
    ),
    "official_regression_nll": Case(
        lambda d, v: M.official_regression_nll(pair(d), d["y"], batch_size=None, validate_args=v), reg, **REG
    ),
    "lce": Case(
        lambda d, v: M.lce(pair(d), d["y"], d["phi_x"], validate_args=v),
        lambda: reg(phi_x=X.clone()),
        floats=("mean", "std", "y", "phi_x"),
        std=("std",),
        rows=("mean", "std", "y", "phi_x"),
        ints=("mean", "std", "y", "phi_x"),
    ),  # fmt: skip
    "lce_total": Case(
        lambda d, v: M.lce_total(d["forecast"], None, d["phi_x"], validate_args=v),
        lambda: {"forecast": PIT.clone(), "phi_x": X.clone()},
        floats=("forecast", "phi_x"),
        rows=("forecast", "phi_x"),
        ints=("phi_x",),
    ),  # fmt: skip
    # kcal.metrics (classification)
    "accuracy": Case(lambda d, v: M.accuracy(d["probs"], d["labels"], validate_args=v), cls, **CLS),
    "ece": Case(lambda d, v: M.ece(d["probs"], d["labels"], validate_args=v), cls, **CLS),
    "classwise_ece": Case(lambda d, v: M.classwise_ece(d["probs"], d["labels"], validate_args=v), cls, **CLS),
    "entropy": Case(lambda d, v: M.entropy(d["probs"], validate_args=v), cls, floats=("probs",)),
    "kce": Case(
        lambda d, v: M.kce(d["probs"], d["labels"], d["x"], 1.0, 1.0, validate_args=v),
        lambda: cls(x=X.clone()),
        **CLS_X,
    ),  # fmt: skip
    "official_classification_metrics": Case(
        lambda d, v: M.official_classification_metrics(
            d["probs"], d["labels"], d["x"], batch_size=4, validate_args=v
        ),
        lambda: cls(x=X.clone()),
        **CLS_X,
    ),  # fmt: skip
    # kcal.mmd
    "regression_mmd": Case(
        lambda d, v: D.regression_mmd(pair(d), d["y"], d["x"], **BW, generator=gen(), validate_args=v),
        lambda: reg(x=X.clone()),
        **REG_X,
    ),  # fmt: skip
    "regression_mmd[groups]": Case(
        lambda d, v: D.regression_mmd(
            pair(d),
            d["y"],
            form="group",
            groups=d["groups"],
            kernel_z="delta",
            bandwidth_y=1.0,
            generator=gen(),
            validate_args=v,
        ),
        lambda: reg(groups=(torch.arange(N) % 2).double()),
        floats=("groups",),
        rows=("mean", "y", "groups"),
    ),  # fmt: skip
    "regression_mmd[eps]": Case(
        lambda d, v: D.regression_mmd(pair(d), d["y"], d["x"], **BW, eps=d["eps"], validate_args=v),
        lambda: reg(x=X.clone(), eps=torch.randn(4, N, generator=gen(), dtype=torch.float64)),
        floats=("eps",),
        rows=("eps:1", "x"),
    ),  # fmt: skip
    "sample_mmd2": Case(
        lambda d, v: D.sample_mmd2(
            d["forecast"],
            d["target"],
            K.get_kernel("rbf", bandwidth=1.0),
            z=d["z"],
            kernel_z=K.get_kernel("rbf", bandwidth=1.0),
            validate_args=v,
        ),
        lambda: {
            "forecast": MEAN + STD * torch.randn(4, N, generator=gen(), dtype=torch.float64),
            "target": Y[None].clone(),
            "z": X.clone(),
        },
        floats=("forecast", "target", "z"),
        rows=("forecast:1", "target:1", "z"),
        ints=("target", "z"),
    ),  # fmt: skip
    "mmd2_unbiased": Case(
        lambda d, v: D.mmd2_unbiased(d["k_tt"], d["k_tf"], d["k_ff"], validate_args=v),
        lambda: {k: K.rbf(X, X + i) for i, k in enumerate(("k_tt", "k_tf", "k_ff"))},
        floats=("k_tt", "k_tf", "k_ff"),
        rows=("k_tf", "k_ff"),
    ),  # fmt: skip
    "analytic_mmd2": Case(
        lambda d, v: D.analytic_mmd2(d["probs"], d["labels"], d["k_y"], d["k_z"], validate_args=v),
        lambda: cls(k_y=K.class_rbf(C, 2.0, dtype=torch.float64), k_z=K.rbf(X, X)),
        floats=("probs", "k_y", "k_z"),
        rows=("probs", "labels", "k_z"),
    ),  # fmt: skip
    "resolve_bandwidth": Case(
        lambda d, v: D.resolve_bandwidth(None, "rbf", d["values"], "bw", validate_args=v),
        lambda: {"values": X.clone()},
        floats=("values",),
        ints=("values",),
    ),  # fmt: skip
    "classification_mmd": Case(
        lambda d, v: D.classification_mmd(d["probs"], d["labels"], d["x"], bandwidth_z=1.0, validate_args=v),
        lambda: cls(x=X.clone()),
        **CLS_X,
    ),
    "MMDCalibrationLoss": Case(
        lambda d, v: D.MMDCalibrationLoss(**BW, generator=gen(), validate_args=v)(pair(d), d["y"], d["x"]),
        lambda: reg(x=X.clone()),
        **REG_X,
    ),
    "MMDCalibrationLoss[classification]": Case(
        lambda d, v: D.MMDCalibrationLoss(task="classification", bandwidth_z=1.0, validate_args=v)(
            d["probs"], d["labels"], d["x"]
        ),
        lambda: cls(x=X.clone()),
        **CLS_X,
    ),
    # kcal.losses
    "MMCELoss": Case(lambda d, v: L.MMCELoss(validate_args=v)(d["probs"], d["labels"]), cls, **CLS),
    "ECEKDELoss": Case(lambda d, v: L.ECEKDELoss(validate_args=v)(d["probs"], d["labels"]), cls, **CLS),
    # kcal.baselines
    "mmce": Case(lambda d, v: B.mmce(d["probs"], d["labels"], validate_args=v), cls, **CLS),
    "ece_kde": Case(lambda d, v: B.ece_kde(d["probs"], d["labels"], validate_args=v), cls, **CLS),
    "mmce_stacked": Case(
        lambda d, v: B.mmce_stacked(d["probs"][None], d["labels"][None], validate_args=v), cls, **CLS
    ),  # fmt: skip
    "ece_kde_stacked": Case(
        lambda d, v: B.ece_kde_stacked(d["probs"][None], d["labels"][None], validate_args=v), cls, **CLS
    ),  # fmt: skip
    "select_bandwidth": Case(
        lambda d, v: B.select_bandwidth(d["probs"], validate_args=v), cls, floats=("probs",)
    ),
    "select_bandwidths": Case(
        lambda d, v: B.select_bandwidths(d["probs"][None], validate_args=v), cls, floats=("probs",)
    ),  # fmt: skip
    # kcal.kernels
    "median_heuristic": Case(
        lambda d, v: K.median_heuristic(d["a"], validate_args=v),
        lambda: {"a": X.clone()},
        floats=("a",),
        ints=("a",),
    ),  # fmt: skip
    "kernel_report": Case(
        lambda d, v: K.kernel_report(d["a"], 1e-9, validate_args=v),
        lambda: {"a": X.clone()},
        floats=("a",),
        ints=("a",),
    ),  # fmt: skip
    # kcal.metrics.stateful
    "QuantileCalibrationError": Case(metric(S.QuantileCalibrationError), reg, metric=True, **REG),
    "DecisionCalibrationError": Case(metric(S.DecisionCalibrationError), reg, metric=True, **REG),
    "CRPS": Case(metric(S.CRPS), reg, metric=True, **REG),
    "NegativeLogLikelihood": Case(metric(S.NegativeLogLikelihood), reg, metric=True, **REG),
    "KernelCalibrationError": Case(
        metric(S.KernelCalibrationError, lambda **k: S.KernelCalibrationError(**BW, **k)),
        lambda: reg(x=X.clone()),
        metric=True,
        **REG_X,
    ),  # fmt: skip
    "TopLabelCalibrationError": Case(
        metric(S.TopLabelCalibrationError, regression=False), cls, metric=True, **CLS
    ),
    "ClasswiseCalibrationError": Case(
        metric(
            S.ClasswiseCalibrationError, lambda **k: S.ClasswiseCalibrationError(C, **k), regression=False
        ),
        cls,
        metric=True,
        **CLS,
    ),  # fmt: skip
    "MaximumMeanCalibrationError": Case(
        metric(S.MaximumMeanCalibrationError, regression=False), cls, metric=True, **CLS
    ),  # fmt: skip
    "ClassificationKernelCalibrationError": Case(
        metric(
            S.ClassificationKernelCalibrationError,
            lambda **k: S.ClassificationKernelCalibrationError(bandwidth_z=1.0, **k),
            regression=False,
        ),
        lambda: cls(x=X.clone()),
        metric=True,
        **CLS_X,
    ),  # fmt: skip
    # kcal.recalibration: fitting takes data, always checked (a fit synchronises anyway)
    "ConformalQuantileRecalibrator": Case(
        lambda d, v: R.ConformalQuantileRecalibrator().fit(d["pit_val"])(PIT),
        lambda: {"pit_val": PIT.clone()},
        floats=("pit_val",),
        switch=False,
    ),  # fmt: skip
    "IsotonicQuantileRecalibrator": Case(
        lambda d, v: R.IsotonicQuantileRecalibrator().fit(d["pit_val"])(PIT),
        lambda: {"pit_val": PIT.clone()},
        floats=("pit_val",),
        switch=False,
    ),  # fmt: skip
    "OfficialConformalRecalibrator": Case(
        lambda d, v: R.OfficialConformalRecalibrator().fit(d["pit_val"])(PIT),
        lambda: {"pit_val": PIT.clone()},
        floats=("pit_val",),
        switch=False,
    ),  # fmt: skip
    "TemperatureScaler": Case(
        lambda d, v: torch.tensor(R.TemperatureScaler().fit(d["logits"], d["labels"]).temperature),
        lambda: {"logits": torch.log(PROBS), "labels": LABELS.clone()},
        floats=("logits",),
        rows=("logits", "labels"),
        ints=("logits",),
        switch=False,
    ),  # fmt: skip
    "PiecewiseLinearMap": Case(
        lambda d, v: R.PiecewiseLinearMap(d["xs"], d["ys"])(PIT),
        lambda: {"xs": torch.linspace(0, 1, 5), "ys": torch.linspace(0, 1, 5) ** 2},
        floats=("xs", "ys"),
        rows=("xs", "ys"),
        switch=False,
    ),  # fmt: skip
}

_NAMES = "a name (of a form, kernel, objective or recalibrator), not data"
_CONSTANT = "a constant or a type"
_PRIMITIVE = ("a numeric primitive run inside every estimator step: shapes checked, values propagate as in "
              "torch (the module docstring says so); its callers check the data")  # fmt: skip
EXEMPT = {
    **dict.fromkeys(["CLASSIFICATION_FORMS", "CLASS_MEDIAN_SQ_DIST", "PAIRINGS", "REGRESSION_FORMS",
                     "ClassificationForm", "RegressionForm", "DegenerateKernelWarning", "BatchConstants",
                     "AUTHORS_BANDWIDTH_GRID", "ECE_KDE_FLAVOURS", "MMCE_SCALINGS", "KERNELS",
                     "AUTO_RECALIBRATOR", "RECALIBRATORS", "DEFAULT_SLOPE_FLOOR", "FINITE_DIFFERENCE_STEP",
                     "FLAVOURS", "ICDF_LEVEL_CLAMP", "QUANTILE_RECALIBRATORS", "CLASS_RECALIBRATORS",
                     "PROB_EPS", "OPTIMIZERS", "QuantileRecalibrator", "ClassRecalibrator"], _CONSTANT),
    **dict.fromkeys(["get_classification_form", "get_regression_form", "official_kce_bandwidths", "get_kernel",
                     "kernel_key", "kernel_param_names", "resolve_recalibrator", "make_quantile_recalibrator",
                     "make_class_recalibrator", "default_bandwidth_grid", "class_rbf", "one_hot_delta"], _NAMES),
    **dict.fromkeys(["rbf", "laplacian", "delta", "point_estimate", "tanh_decision", "threshold_family",
                     "product", "sq_dist", "rbf_offdiag", "as_points", "dirichlet_log_kernel",
                     "loo_log_likelihood", "logsumexp_truncated"], _PRIMITIVE),
    "check_finite": "itself a parameter check (a scalar's)",
    "check_positive": "itself a parameter check (a scalar's)",
    "MMDStep": "the training step: unchecked by design (the hot path; the run engine checks its data once)",
    "IdentityQuantileRecalibrator": "its fit ignores the data",
    "IdentityClassRecalibrator": "its fit ignores the data",
    "RecalibratedForecast": "wraps a forecast; what it returns is checked where it is scored (pit values, y)",
    "OfficialConformalForecast": "wraps a forecast; what it returns is checked where it is scored (pit values, y)",
}  # fmt: skip

MODULES = (D, M, S, L, B, K, R)
SWITCHED = [k for k, c in CASES.items() if c.switch]


def run(case: Case, d: dict, validate_args: bool = True):
    return case.call(d, validate_args)


def expect_refusal(case: Case, d: dict, name: str, what: str = "") -> str:
    with pytest.raises(ValueError) as err:
        run(case, d)
    msg = str(err.value)
    assert "\n" not in msg, msg
    assert re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", msg), f"message does not name {name}: {msg}"
    if what:
        assert re.search(what, msg), msg
    return msg


def test_every_exported_callable_has_a_case_or_a_reason():
    exported = {name for mod in MODULES for name in mod.__all__}
    covered = {key.split("[")[0] for key in CASES} | set(EXEMPT)
    assert sorted(exported - covered) == [], "exported without an entry in CASES (or EXEMPT, with the reason)"
    assert sorted(covered - exported) == [], "CASES/EXEMPT name what no module exports"


@pytest.mark.parametrize("key", list(CASES))
def test_the_valid_call_scores(key):
    out = run(CASES[key], CASES[key].inputs())
    values = out.values() if isinstance(out, dict) else [out]
    assert all(
        v is None or isinstance(v, str) or bool(torch.isfinite(torch.as_tensor(v)).all()) for v in values
    )


def _params(attr):
    return [pytest.param(k, name, id=f"{k}-{name}") for k, c in CASES.items() for name in getattr(c, attr)]


def _poke(t: torch.Tensor, value: float) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[min(5, t.numel() - 1)] = value
    return t


@pytest.mark.parametrize(("key", "name"), _params("floats"))
@pytest.mark.parametrize(("value", "what"), [(float("nan"), "holds NaN"), (float("inf"), "holds an infinite"),
                                             (float("-inf"), "holds an infinite")])  # fmt: skip
def test_nan_and_inf_are_refused_naming_the_argument(key, name, value, what):
    case = CASES[key]
    d = case.inputs()
    d[name] = _poke(d[name], value)
    msg = expect_refusal(case, d, name)
    assert msg.startswith(name) and (what in msg or name in ("xs", "ys")), msg


@pytest.mark.parametrize(("key", "name"), _params("std"))
@pytest.mark.parametrize("value", [-0.5, 0.0])
def test_a_std_that_is_not_positive_is_refused(key, name, value):
    case = CASES[key]
    d = case.inputs()
    d[name] = _poke(d[name], value)
    msg = expect_refusal(case, d, name, what=rf"^{name} must be > 0, got {value:g} \(row 5\)")
    assert "clamp_min" in msg


@pytest.mark.parametrize(("key", "name"), _params("rows"))
def test_one_row_fewer_in_any_argument_is_refused_naming_it(key, name):
    case = CASES[key]
    d = case.inputs()
    name, _, dim = name.partition(":")
    d[name] = d[name].narrow(int(dim or 0), 0, d[name].shape[int(dim or 0)] - 1)
    expect_refusal(case, d, name, what=r"rows|shape|length|\(K, n\)")


@pytest.mark.parametrize(("key", "name"), _params("ints"))
def test_integer_inputs_are_converted_to_floats(key, name):
    case = CASES[key]
    d = case.inputs()
    as_ints = (d[name].ceil() if name in case.std else d[name].round()).long()
    d[name] = as_ints.to(torch.get_default_dtype())  # what the conversion gives
    expected = run(case, d)
    d[name] = as_ints
    got = run(case, d)
    if isinstance(expected, dict):
        assert expected.keys() == got.keys() and all(torch.allclose(expected[k], got[k]) for k in expected)
    elif isinstance(expected, str | None):
        assert got == expected
    else:
        assert torch.allclose(torch.as_tensor(got).double(), torch.as_tensor(expected).double())


@pytest.mark.parametrize("key", [k for k, c in CASES.items() if c.metric])
def test_compute_before_update_is_refused(key):
    m = CASES[key].call.build()
    with pytest.warns(UserWarning, match="before the ``update``"):  # torchmetrics' own warning, then ours
        with pytest.raises(ValueError, match=r"compute\(\) was called before any update\(\)"):
            m.compute()
    d = CASES[key].inputs()
    m.update(*([pair(d), d["y"]] if "mean" in d else [d["probs"], d["labels"]]), d.get("x"))
    assert bool(torch.isfinite(m.compute()))
    m.reset()
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="before any update"):
        m.compute()


@pytest.mark.parametrize("key", SWITCHED)
def test_validate_args_false_skips_the_value_checks(key):
    case = CASES[key]
    d = case.inputs()
    d[case.floats[0]] = _poke(d[case.floats[0]], float("nan"))
    with pytest.raises(ValueError):
        run(case, d)
    run(case, d, validate_args=False)  # computes on (and returns whatever comes of the NaN)


def test_gaussian_nll_checks_values_only_when_asked():
    """The training loss: every step of the engine calls it, and a NaN it returns is the run's divergence."""
    mean = _poke(MEAN, float("nan"))
    assert torch.isnan(M.gaussian_nll((mean, STD), Y))
    with pytest.raises(ValueError, match="^mean holds NaN"):
        M.gaussian_nll((mean, STD), Y, validate_args=True)


class HostSync(RuntimeError):
    pass


@pytest.fixture
def no_host_sync(monkeypatch):
    """Any tensor-to-Python conversion (a device-to-host synchronisation on an accelerator) raises."""

    def sync(*args, **kwargs):
        raise HostSync("host synchronisation")

    for attr in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__"):
        monkeypatch.setattr(torch.Tensor, attr, sync)


TRAINING_CALLS = {
    "regression_mmd": lambda: D.regression_mmd((MEAN, STD), Y, X, **BW, generator=gen(), validate_args=False),
    "regression_mmd[groups]": lambda: D.regression_mmd((MEAN, STD), Y, form="group", groups=LABELS.double(),
                                                       kernel_z="delta", bandwidth_y=1.0, validate_args=False),
    "classification_mmd": lambda: D.classification_mmd(PROBS, LABELS, X, bandwidth_z=1.0, validate_args=False),
    "mmce": lambda: B.mmce(PROBS, LABELS, validate_args=False),
    "ece_kde": lambda: B.ece_kde(PROBS, LABELS, bandwidth=0.1, validate_args=False),
    "MMDCalibrationLoss": lambda: D.MMDCalibrationLoss(**BW, check_kernels=False, validate_args=False)(
        (MEAN, STD), Y, X
    ),
    "gaussian_nll": lambda: M.gaussian_nll((MEAN, STD), Y),
}  # fmt: skip


@pytest.mark.parametrize("key", list(TRAINING_CALLS))
def test_validate_args_false_makes_no_host_sync_on_the_training_path(key, no_host_sync):
    TRAINING_CALLS[key]()  # no HostSync: no value check ran
    with pytest.raises(HostSync):  # and the fixture does catch the value checks' synchronisation
        M.nll((MEAN, STD), Y)


def test_a_forecast_object_is_taken_as_built_and_the_gaussian_functions_check_its_parameters():
    """A Normal is checked by torch when built; one built with validate_args=False (the run's evaluation and
    per-epoch diagnostics score outputs so, whatever they hold) passes pit/nll/qce/dce, which check y;
    the functions with a Gaussian closed form check mean and std whatever holds them."""
    with pytest.raises(ValueError, match="loc"):
        torch.distributions.Normal(
            _poke(MEAN, float("nan")), STD, validate_args=True
        )  # torch checks when asked (kcal.run turns its default off)
    opted_out = torch.distributions.Normal(_poke(MEAN, float("nan")), STD, validate_args=False)
    for fn in (M.pit, M.nll, M.qce, M.dce):
        fn(opted_out, Y)  # taken as built: NaN comes of it, as the maker asked
        with pytest.raises(ValueError, match="^y holds NaN"):
            fn(opted_out, _poke(Y, float("nan")))
    for call in (lambda: M.crps(opted_out, Y), lambda: D.regression_mmd(opted_out, Y, X, **BW)):
        with pytest.raises(ValueError, match="^mean holds NaN"):
            call()
