"""Evaluate a trained network on whole splits: exact and official-compatible metrics, without and
with post-hoc recalibration, as one flat dict of floats (keys like ``test/qce``,
``test_recal/qce``, ``official/test/dce``).

Regression metrics are reported in the target's original units: predictions and labels are
multiplied back by ``y_scale`` (1 under the official protocol, whose targets are only median-centred;
the training-set std under the clean protocol). NLL is location-invariant, so the centring does not
matter; the decision threshold is expressed in the same units.

Post-hoc recalibration is fit on the whole validation split in each flavour's own way:

* exact (``test_recal/...``): float64 forecasts, the named recalibrator's float64 map and proper
  density; temperature fit by LBFGS.
* official (``official/test_recal/...``): the authors' arithmetic on the network's float32 outputs --
  for ``conformal``, :class:`kcal.recalibration.OfficialConformalRecalibrator` (torchuq's sums in float32,
  the left limit at tied validation PITs, the finite-difference NLL); for ``temperature``, softmax
  outputs in float32 and the authors' Adam + plateau loop (also logged as
  ``official/test_recal/temperature``). The metrics are then computed as for ``official/test``.

:func:`official_from_predictions` recomputes the ``official/...`` keys from a run's ``predictions.npz``.
"""

from __future__ import annotations

import torch
from torch.distributions import Normal

from kcal.core.random_streams import eval_seed
from kcal.data.dataset import DatasetSplits
from kcal.kernels import median_heuristic
from kcal.metrics import classification as cm
from kcal.metrics import official as om
from kcal.metrics import regression as rm
from kcal.recalibration import make_class_recalibrator, make_quantile_recalibrator, resolve_recalibrator

OFFICIAL_REGRESSION_BATCH = 128
OFFICIAL_CLASSIFICATION_BATCH = 8
MAX_KCE_BANDWIDTH_ROWS = (
    1000  # the median heuristic of the KCE x-kernel and of configs' `median` uses these first rows
)


@torch.no_grad()
def predict(model: torch.nn.Module, x: torch.Tensor, batch_size: int = 8192):
    """Network outputs for all rows of ``x`` in eval mode (concatenated over chunks)."""
    was_training = model.training
    model.eval()
    chunks = [model(x[i : i + batch_size]) for i in range(0, x.shape[0], batch_size)]
    model.train(was_training)
    if isinstance(chunks[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*chunks, strict=True))
    return torch.cat(chunks)


OFFICIAL_NAMES = {"accuracy": "acc"}  # one name per metric in both flavours


def _prefixed(prefix: str, values: dict) -> dict[str, float]:
    return {f"{prefix}/{OFFICIAL_NAMES.get(k, k)}": float(v) for k, v in values.items()}


class _FiniteDifferenceDensity:
    """Adapter giving a recalibrated forecast the authors' finite-difference ``log_prob``,
    ``log(F(y + 1e-4) - F(y) + 1e-10) - log(1e-4)`` in the forecast's dtype."""

    def __init__(self, forecast):
        self.forecast = forecast
        self.cdf, self.icdf = forecast.cdf, forecast.icdf

    def log_prob(self, y):
        return self.forecast.log_prob_finite_difference(y)


def regression_exact(forecast, y, threshold: float, gaussian: tuple | None = None) -> dict:
    u = rm.pit(forecast, y)
    out = {
        "nll": rm.nll(forecast, y),
        "qce": rm.qce_binned(u),
        "qce_ecdf": rm.qce_ecdf(u, p=1),
        "dce": rm.dce(forecast, y, threshold),
    }
    if gaussian is not None:
        mean, std = gaussian
        out["crps"] = rm.crps((mean, std), y)
        out["sharpness"] = rm.sharpness(std)
    return out


def regression_official(
    forecast, y, threshold: float, generator: torch.Generator | None, density=None
) -> dict:
    """Official NLL, QCE and, given a generator, DCE of ``forecast`` (``density``: the NLL's ``log_prob``)."""
    u = rm.pit(forecast, y)
    out = {
        "nll": om.official_regression_nll(density or forecast, y, batch_size=OFFICIAL_REGRESSION_BATCH),
        "qce": om.official_qce(u, batch_size=OFFICIAL_REGRESSION_BATCH),
    }
    if generator is not None:
        out["dce"] = om.official_dce(
            forecast, y, threshold, batch_size=OFFICIAL_REGRESSION_BATCH, generator=generator
        )
    return out


def regression_predictions(model, data: DatasetSplits) -> dict[str, torch.Tensor]:
    """Val/test means, stds and labels in the target's original units (times ``y_scale``), float64."""
    scale = data.info.y_scale
    (mv, sv), (mt, st) = predict(model, data.val.x), predict(model, data.test.x)
    return {"val_mean": mv.double() * scale, "val_std": sv.double() * scale, "val_y": data.val.y.double() * scale,
            "test_mean": mt.double() * scale, "test_std": st.double() * scale, "test_y": data.test.y.double() * scale}  # fmt: skip


def classification_predictions(model, data: DatasetSplits) -> dict[str, torch.Tensor]:
    return {"val_logits": predict(model, data.val.x).double(), "val_y": data.val.y,
            "test_logits": predict(model, data.test.x).double(), "test_y": data.test.y}  # fmt: skip


def evaluate_regression(model, data: DatasetSplits, recalibrator: str, threshold: float, seed: int,
                        preds: dict | None = None) -> dict:  # fmt: skip
    p = preds if preds is not None else regression_predictions(model, data)
    mv, sv, yv, mt, st, yt = (
        p[k] for k in ("val_mean", "val_std", "val_y", "test_mean", "test_std", "test_y")
    )
    c = threshold * data.info.y_scale
    fv, ft = Normal(mv, sv, validate_args=False), Normal(mt, st, validate_args=False)
    out = _prefixed("val", {"nll": rm.nll(fv, yv), "qce": rm.qce_binned(rm.pit(fv, yv))})
    out |= _prefixed("test", regression_exact(ft, yt, c, gaussian=(mt, st)))
    name = resolve_recalibrator(recalibrator, "regression")
    if name != "none":
        recal = make_quantile_recalibrator(name).fit(rm.pit(fv, yv))
        out |= _prefixed("test_recal", regression_exact(recal.forecast(ft), yt, c))
    return out | _official_regression(p, name, c, seed)


def _official_regression(p: dict, name: str, threshold: float, seed: int | None) -> dict:
    """``official/test/...`` on the float64 forecasts, then ``official/test_recal/...`` in the authors'
    float32 arithmetic; one generator (``seed``) draws the DCE's uniforms for both, in that order (no DCE
    without a seed)."""
    mv, sv, yv, mt, st, yt = (
        p[k] for k in ("val_mean", "val_std", "val_y", "test_mean", "test_std", "test_y")
    )
    gen = None if seed is None else torch.Generator(device=yt.device).manual_seed(int(seed))
    out = _prefixed(
        "official/test", regression_official(Normal(mt, st, validate_args=False), yt, threshold, gen)
    )
    if name != "none":
        fv32 = Normal(mv.float(), sv.float(), validate_args=False)
        ft32 = Normal(mt.float(), st.float(), validate_args=False)
        recal = make_quantile_recalibrator(name, flavour="official").fit(rm.pit(fv32, yv.float()))
        rt = recal.forecast(ft32)
        out |= _prefixed(
            "official/test_recal",
            regression_official(rt, yt.float(), threshold, gen, _FiniteDifferenceDensity(rt)),
        )
    return out


def official_objective_name(objective: str) -> str:
    """The authors' objective whose KCE kernel applies: their MMD runs set the KCE kernel (bw_x 10,
    bw_y 0.01), every other method used the metric's constructor default (bw_x 0.01, bw_y 1.0).
    ``nll``/``nll_mmd`` on classes are ``xe``/``xe_mmd``."""
    if objective in ("xe_mmd", "nll_mmd") or objective.endswith("_mmd"):
        return "xe_mmd"
    return objective if objective in ("xe", "xe_mmce", "xe_kde") else "xe"


def classification_exact(probs, y, x, bandwidth_z: float, bandwidth_y: float) -> dict:
    return {
        "acc": cm.accuracy(probs, y),
        "ece": cm.ece(probs, y),
        "classwise_ece": cm.classwise_ece(probs, y),
        "entropy": cm.entropy(probs),
        "nll": torch.nn.functional.nll_loss(torch.log(probs.clamp_min(1e-12)), y),
        "kce": cm.kce(probs, y, x, bandwidth_z=bandwidth_z, bandwidth_y=bandwidth_y),
    }


def evaluate_classification(model, data: DatasetSplits, recalibrator: str, objective: str,
                            preds: dict | None = None) -> dict:  # fmt: skip
    p = preds if preds is not None else classification_predictions(model, data)
    lv, yv, lt, yt = p["val_logits"], p["val_y"], p["test_logits"], p["test_y"]
    xt = data.test.x.double()
    pv, pt = torch.softmax(lv, -1), torch.softmax(lt, -1)
    # one fixed kernel for every method (the authors' kernel varied by method)
    bw_x, bw_y = median_heuristic(xt, max_rows=MAX_KCE_BANDWIDTH_ROWS), 1.0
    out = _prefixed(
        "val",
        {"acc": cm.accuracy(pv, yv), "ece": cm.ece(pv, yv), "nll": cm.nll_logits(lv, yv)},
    )
    out |= _prefixed("test", classification_exact(pt, yt, xt, bw_x, bw_y))
    out["test/kce_bandwidth_x"] = bw_x
    name = resolve_recalibrator(recalibrator, "classification")
    if name != "none":
        scaler = make_class_recalibrator(name).fit(lv, yv)
        out |= _prefixed("test_recal", classification_exact(scaler.transform(lt), yt, xt, bw_x, bw_y))
        out["test_recal/temperature"] = float(scaler.temperature)
    return out | _official_classification(p, name, objective, xt)


def _official_classification(p: dict, name: str, objective: str, x_test) -> dict:
    """``official/test/...`` and ``official/test_recal/...`` (KCE only with ``x_test``). The authors'
    temperature is fit on the float32 softmax of the validation logits by their Adam + plateau loop, and
    applied to the float32 softmax of the test logits; their recalibrated KCE applies a softmax to the
    already recalibrated probabilities (``kce_probs``)."""
    lv, yv, lt, yt = p["val_logits"], p["val_y"], p["test_logits"], p["test_y"]
    kw = {"batch_size": OFFICIAL_CLASSIFICATION_BATCH, "objective": official_objective_name(objective)}
    out = _prefixed(
        "official/test", om.official_classification_metrics(torch.softmax(lt, -1), yt, x_test, **kw)
    )
    if name != "none":
        scaler = make_class_recalibrator(name, flavour="official").fit_from_probs(
            torch.softmax(lv.float(), -1), yv
        )
        p_cal = scaler.transform_probs(torch.softmax(lt.float(), -1)).double()
        out |= _prefixed(
            "official/test_recal",
            om.official_classification_metrics(p_cal, yt, x_test, kce_probs=torch.softmax(p_cal, -1), **kw),
        )
        out["official/test_recal/temperature"] = float(scaler.temperature)
    return out


def official_from_predictions(preds: dict, recalibrator: str = "auto", *, seed: int | None = None,
                              threshold: float = 0.0, objective: str = "xe", x_test=None) -> dict:  # fmt: skip
    """A run's ``official/...`` metrics recomputed from its predictions (the dict :func:`regression_predictions` /
    :func:`classification_predictions` return, or its ``predictions.npz`` as
    :func:`kcal.core.plotting.load_predictions` reads it), e.g. after a change to the official flavour.

    ``recalibrator``: the run's (``config.yaml``: ``recalibrator.name``). Regression: ``seed`` is the run's
    seed (its DCE uniforms come from :func:`kcal.core.random_streams.eval_seed`; without it no DCE), ``threshold``
    the decision threshold in the predictions' units (0 under the official protocol). Classification:
    ``objective`` picks the authors' KCE kernel, ``x_test`` the test features (without them no KCE).

    Under the official protocol ``predictions.npz`` holds the network's float32 outputs exactly, so the
    values equal those of ``metrics.json`` computed by the same code; under the clean protocol the saved
    predictions are rounded to float32 after unscaling, and the values agree to that rounding.
    """
    p = {k: torch.as_tensor(v) for k, v in preds.items()}
    p = {k: v.double() if v.is_floating_point() else v for k, v in p.items()}
    if "val_mean" in p:
        name = resolve_recalibrator(recalibrator, "regression")
        return _official_regression(p, name, threshold, None if seed is None else eval_seed(seed))
    if "val_logits" in p:
        name = resolve_recalibrator(recalibrator, "classification")
        x = None if x_test is None else torch.as_tensor(x_test).double()
        return _official_classification(p, name, objective, x)
    raise ValueError(f"predictions hold neither regression nor classification keys: {sorted(p)}")
