"""The calibration forms of the paper's Tables 1 and 2 as data: which forecast variable is matched to
which target variable given which conditioning variable Z.

* :class:`RegressionForm` presets in :data:`REGRESSION_FORMS` (quantile, threshold, marginal, decision,
  group, distribution, individual, local, ...), looked up with :func:`get_regression_form`;
* :class:`ClassificationForm` presets in :data:`CLASSIFICATION_FORMS` (canonical, top-label, marginal,
  individual), looked up with :func:`get_classification_form`.

:func:`kcal.mmd.regression_mmd` and :func:`kcal.mmd.classification_mmd` build the variables of a form
and estimate the MMD between them; unknown names raise ``ValueError`` listing the valid ones.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CLASSIFICATION_FORMS",
    "REGRESSION_FORMS",
    "ClassificationForm",
    "RegressionForm",
    "get_classification_form",
    "get_regression_form",
]


@dataclass(frozen=True)
class RegressionForm:
    """A regression calibration form of paper Table 1: (forecast variable, target variable, Z).

    * ``forecast``: ``"sample"`` (Yhat ~ Q_{Y|x}, reparameterised draws) or ``"pit"`` (Q_{Y|X}(Y) = F_i(y_i)).
    * ``target``: ``"y"`` (the label) or ``"uniform"`` (P_{Y|X}(Y) ~ U(0, 1); u = Phi(eps) is drawn).
    * ``condition``: the conditioning variable Z: ``None``, ``"x"``, ``"features"`` (phi(x)), ``"groups"``,
      ``"forecast_params"`` ((mean, std)), ``"threshold_event"`` (1{F_i(y0) <= alpha}) or
      ``"bayes_action"`` (the Bayes action under the forecast).
    * ``kernels``: the kernels this form is meant to be used with (k_v on the variable, k_z on Z). The
      kernels actually used are chosen by the caller of ``regression_mmd`` (``kernel_y``, ``kernel_z``).
    """

    name: str
    forecast: str
    target: str
    condition: str | None
    kernels: str
    reference: str


REGRESSION_FORMS: dict[str, RegressionForm] = {
    f.name: f
    for f in [
        RegressionForm(
            "quantile",
            "pit",
            "uniform",
            None,
            "k_v: rbf on [0, 1]",
            "Table 1, quantile calibration (Kuleshov et al. 2018)",
        ),
        RegressionForm(
            "threshold",
            "pit",
            "uniform",
            "threshold_event",
            "k_v: rbf on [0, 1]; k_z: delta (or rbf) on the event",
            "Table 1, threshold calibration (Sahoo et al. 2021)",
        ),
        RegressionForm(
            "marginal",
            "sample",
            "y",
            None,
            "k_v: rbf / laplacian",
            "Table 1, marginal calibration (Gneiting et al.)",
        ),
        RegressionForm(
            "decision",
            "sample",
            "y",
            "bayes_action",
            "k_v: tanh_decision / point_estimate / threshold_family; k_z: delta (or rbf) on the action",
            "Table 1, decision calibration (Zhao et al. 2021); §5",
        ),
        RegressionForm(
            "decision_marginal",
            "sample",
            "y",
            None,
            "k_v: tanh_decision / point_estimate / threshold_family",
            "§5: decision calibration without conditioning (marginal loss estimation)",
        ),
        RegressionForm(
            "group",
            "sample",
            "y",
            "groups",
            "k_v: rbf; k_z: delta (or rbf) on group ids",
            "Table 1, group calibration (Pleiss et al. 2017)",
        ),
        RegressionForm(
            "distribution",
            "sample",
            "y",
            "forecast_params",
            "k_v: rbf; k_z: rbf on (mean, std)",
            "Table 1, distribution calibration (Song et al. 2019)",
        ),
        RegressionForm(
            "individual",
            "sample",
            "y",
            "x",
            "k_v: rbf (or tanh_decision); k_z: rbf on x",
            "Table 1, individual calibration (Zhao et al. 2020); the authors' NLL+MMD runs",
        ),
        RegressionForm(
            "local",
            "sample",
            "y",
            "features",
            "k_v: rbf; k_z: rbf on phi(x)",
            "Table 1, local calibration (Luo et al. 2022); §6 crop-yield experiment",
        ),
    ]
}
"""Regression calibration presets (paper Table 1)."""


@dataclass(frozen=True)
class ClassificationForm:
    """A classification calibration form of paper Table 2.

    * ``variable``: ``"class"`` (Yhat vs Y one-hot), ``"top_label"`` (1{Yhat = Y*} vs 1{Y = Y*},
      Y* = argmax q) or ``"per_class"`` (1{Yhat = c} vs 1{Y = c} for every class c).
    * ``condition``: ``"x"``, ``"probs"`` (the whole forecast q), ``"top_prob"`` (q(Y*)),
      ``"class_prob"`` (q(c), one constraint per class).
    """

    name: str
    variable: str
    condition: str | None
    kernels: str
    reference: str


CLASSIFICATION_FORMS: dict[str, ClassificationForm] = {
    f.name: f
    for f in [
        ClassificationForm(
            "canonical",
            "class",
            "probs",
            "k_y: class_rbf / delta; k_z: rbf on q",
            "Table 2, canonical calibration (Vaicenavicius et al. 2019, Eq. 1)",
        ),
        ClassificationForm(
            "top_label",
            "top_label",
            "top_prob",
            "k_y: class_rbf on the 2-valued indicator; k_z: rbf on q(Y*)",
            "Table 2, top-label calibration (Eq. 2)",
        ),
        ClassificationForm(
            "marginal",
            "per_class",
            "class_prob",
            "k_y: class_rbf on the indicator; k_z: rbf on q(c); summed (or averaged) over c",
            "Table 2, marginal / class-wise calibration (Eq. 3)",
        ),
        ClassificationForm(
            "individual",
            "class",
            "x",
            "k_y: class_rbf; k_z: rbf on x",
            "§6 XE+MMD runs and KCE (the authors' ClassificationKernelLoss)",
        ),
    ]
}
"""Classification calibration presets (paper Table 2, plus the authors' Z = X form)."""


def get_regression_form(name: str | RegressionForm) -> RegressionForm:
    """Look up a regression preset by name (``ValueError`` listing the valid names if unknown)."""
    if isinstance(name, RegressionForm):
        return name
    if name not in REGRESSION_FORMS:
        raise ValueError(
            f"unknown regression calibration form {name!r}; valid names: {sorted(REGRESSION_FORMS)}"
        )
    return REGRESSION_FORMS[name]


def get_classification_form(name: str | ClassificationForm) -> ClassificationForm:
    """Look up a classification preset by name (``ValueError`` listing the valid names if unknown)."""
    if isinstance(name, ClassificationForm):
        return name
    if name not in CLASSIFICATION_FORMS:
        raise ValueError(
            f"unknown classification calibration form {name!r}; valid names: {sorted(CLASSIFICATION_FORMS)}"
        )
    return CLASSIFICATION_FORMS[name]
