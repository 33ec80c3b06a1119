"""kcal's training losses, composed from its configs under ``dataset.protocol=official``, and one optimisation
step of its engine are the authors': same loss value and gradient, and after one step from the same weights
on the same batch (same MMD draws) the same parameters, batch-norm running statistics and Adam moments.

Losses (``configs/objective/*.yaml`` composed with ``dataset.protocol=official``; symbolic values resolved by
kcal's own :func:`kcal.run.setup.prepared_from` on a synthetic training split): ``nll``, ``nll_mmd``,
``nll_mmd_tanh``, ``xe``, ``xe_mmd``, ``xe_mmce``, ``xe_kde`` against ``GMMNLLLoss``, ``GMMMixedLoss``
(y-kernel rbf / tanh), ``ClassificationCELoss``, ``ClassificationMixedLoss``, ``MMCEMixedLoss`` and
``ECEKDEMixedLoss``. kcal writes ``base + weight * regulariser``; the authors write ``loss_scalers``
``{nll: a, <reg>: b}`` = ``a * base + b * regulariser``: kcal's weight w is compared with their scalers
``{nll: 1, <reg>: w}``, and kcal's ``bandwidth_z`` / ``bandwidth_y`` with their ``bandwidths`` ``x`` / ``y``.

One step: the authors' ``GMMLitModule`` (``DenseGMMNet``) and ``ClassificationLitModule`` (``SimpleDenseNet``)
driven without a Trainer, as Lightning 1.5's automatic optimisation does for one batch: their
``step(batch)`` (the loss of ``training_step``, whose other lines only log metrics), ``backward``,
``torch.nn.utils.clip_grad_norm_(parameters, 0.5)`` (``gradient_clip_val: 0.5``, Lightning's default
algorithm "norm") and their ``configure_optimizers()`` Adam (``weight_decay`` 5e-4). kcal: its own
:class:`kcal.run.engine.Engine` (built from the composed config by :func:`kcal.run.setup.prepared_from`) on
a training split of exactly one batch, one :meth:`~kcal.run.engine.Engine.train_epoch` = one step, with
the authors' initial weights copied into its network. The batch order and the MMD draws are kcal's (from
copies of the engine's generators), handed to the authors' module in the same order.

Stubbed for the authors' classification module only: torchmetrics' ``Accuracy()`` (torchmetrics >= 0.11 needs
a ``task``, their code was written for 0.8) is a multiclass ``Accuracy``; it only logs, outside the loss.

Float64 cases run both sides' networks in float64 (the authors' losses with the default dtype float64, so
that their constants follow); the float32 case is what both train with.

The authors' regression head has a third output per row (the mixture logit of their one-component GMM,
``softmax`` of one value = 1): it never changes an output and its gradient is exactly 0, so only its first
two rows are compared with kcal's two-output head (named in the summary).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import DictConfig, OmegaConf

from kcal.data.dataset import DatasetInfo, DatasetSplits, Split
from kcal.run import setup
from kcal.run.engine import Engine, Member
from kcal.run.optimiser import adam

from .authors import load
from .test_regularisers import authors_draws, default_dtype

# Lightning's advice on the authors' save_hyperparameters(net=...): their code, not ours
pytestmark = pytest.mark.filterwarnings("ignore:Attribute 'net' is an instance of `nn.Module`")

# ----------------------------------------------------------------------------------------------------
# Configs and synthetic data
# ----------------------------------------------------------------------------------------------------
REGRESSION_DATASET, CLASSIFICATION_DATASET = "crime", "breast-cancer"  # only their config groups are used


@functools.cache
def _composed(objective: str, task: str) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from kcal.configs import CONFIG_DIR

    dataset = REGRESSION_DATASET if task == "regression" else CLASSIFICATION_DATASET
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return hydra_compose("train", overrides=[f"dataset={dataset}", f"objective={objective}",
                                                 "dataset.protocol=official"])  # fmt: skip


def compose(objective: str, task: str, *overrides: str) -> DictConfig:
    """``kcal train dataset=<crime|breast-cancer> objective=<objective> dataset.protocol=official``'s
    config, then ``overrides`` (``key=value``, values parsed as YAML as Hydra does) set on a copy: the
    composition is made once per objective, and a value set afterwards still reaches every interpolation
    that reads it (e.g. ``dataset.protocol`` -> ``objective.params.scaling``)."""
    cfg = copy.deepcopy(_composed(objective, task))
    for override in overrides:
        key, value = override.split("=", 1)
        OmegaConf.update(cfg, key, yaml.safe_load(value), merge=False)
    return cfg


def splits(
    task: str, n: int, d: int, m: int | None, dtype: torch.dtype, seed: int, scale: float = 1.0
) -> DatasetSplits:
    """Random features of standard deviation ``scale``; regression targets centred near 0 (as the official
    protocol's median centring leaves them), classes 0..m-1. Training split: ``n`` rows; validation and
    test: 8 rows."""
    g = torch.Generator().manual_seed(seed)

    def split(rows):
        x = (scale * torch.randn(rows, d, generator=g, dtype=torch.float64)).to(dtype)
        if task == "regression":
            y = (x[:, 0] + 0.8 * torch.randn(rows, generator=g, dtype=torch.float64)).to(dtype)
        else:
            y = torch.randint(0, m, (rows,), generator=g)
        return Split(x, y)

    info = DatasetInfo(name="synthetic", task=task, protocol="official", split_seed=1, n_raw=n + 16,
                       n_used=n + 16, d=d, m=m, y_center=0.0, y_scale=1.0, sources={})  # fmt: skip
    return DatasetSplits(split(n), split(8), split(8), info)


def authors_loss(losses, objective: str, params: dict, weight: float):
    """The authors' loss class for kcal's resolved ``objective`` (its params and weight)."""
    if objective == "nll":
        return losses.GMMNLLLoss()
    if objective in ("nll_mmd", "nll_mmd_tanh"):
        y_kernel = {"rbf": "rbf", "tanh_decision": "tanh"}[params["kernel_y"]]
        return losses.GMMMixedLoss(loss_scalers={"nll": 1.0, "mmd": weight}, operands={"x": "rbf", "y": y_kernel},
                                   bandwidths={"x": params["bandwidth_z"], "y": params.get("bandwidth_y", 1.0)},
                                   num_samples=params["num_samples"])  # fmt: skip
    if objective == "xe":
        return losses.ClassificationCELoss()
    if objective == "xe_mmd":
        return losses.ClassificationMixedLoss(loss_scalers={"nll": 1.0, "mmd": weight}, operands={"x": "rbf", "y": "rbf"},
                                              bandwidths={"x": params["bandwidth_z"], "y": params["bandwidth_y"]})  # fmt: skip
    if objective == "xe_mmce":
        return losses.MMCEMixedLoss(loss_scalers={"nll": 1.0, "mmce": weight})
    if objective == "xe_kde":
        return losses.ECEKDEMixedLoss(loss_scalers={"nll": 1.0, "ece_kde": weight}, p=params["p"],
                                      bandwidth=params["bandwidth"], mc_type="canonical")  # fmt: skip
    raise AssertionError(objective)


def check_mapping(objective: str, params: dict) -> None:
    """What the authors' class fixes must be what kcal's official config resolved to."""
    if objective in ("nll_mmd", "nll_mmd_tanh"):  # their GMMKernelLoss: Z = x, RBF on x, index-paired draws
        assert (params["form"], params["kernel_z"], params["pairing"]) == ("individual", "rbf", "index")
    if objective == "nll_mmd":
        assert set(params) == {"form", "kernel_y", "bandwidth_y", "kernel_z", "bandwidth_z", "num_samples",
                               "pairing"} and params["kernel_y"] == "rbf"  # fmt: skip
    if objective == "nll_mmd_tanh":  # their tanh(u) tanh(v): threshold c = 0 (median-centred y), scale 1
        assert set(params) == {"form", "kernel_y", "threshold", "scale", "kernel_z", "bandwidth_z", "num_samples",
                               "pairing"}  # fmt: skip
        assert (params["kernel_y"], params["threshold"], params["scale"]) == ("tanh_decision", 0.0, 1.0)
    if objective == "xe_mmd":  # their ClassificationKernelLoss: Z = x, RBF on x and on one-hot classes
        assert set(params) == {"form", "bandwidth_y", "bandwidth_z"} and params["form"] == "individual"
    if objective == "xe_mmce":  # their MMCE: Laplacian bandwidth 0.4 (hard-coded), their scaling
        assert params == {"bandwidth": 0.4, "scaling": "authors"}
    if objective == "xe_kde":  # their ECE-KDE: p = 1, bandwidth chosen per batch by their selector
        assert params == {"p": 1, "bandwidth": None, "flavour": "authors"}


# ----------------------------------------------------------------------------------------------------
# 2. Training losses composed from configs
# ----------------------------------------------------------------------------------------------------
LOSS_SHAPES = {"regression": [(8, 3, None), (32, 100, None), (64, 10, None)],
               "classification": [(8, 3, 2), (32, 100, 7), (64, 10, 3), (24, 5, 5)]}  # fmt: skip
OBJECTIVES = {"nll": "regression", "nll_mmd": "regression", "nll_mmd_tanh": "regression", "xe": "classification",
              "xe_mmd": "classification", "xe_mmce": "classification", "xe_kde": "classification"}  # fmt: skip
LOSS_TOL = {
    torch.float64: (1e-10, 1e-12),
    torch.float32: (1e-5, 1e-6),
}  # (rtol, atol; gradients: atol x max|g|)
# perturbations of kcal's config: each must move the loss or its gradient outside the tolerance
LOSS_PERTURBATIONS = {
    "nll": ["objective.reduction=sum"],
    "nll_mmd": ["objective.weight=2.0", "objective.params.bandwidth_y=2.0", "objective.reduction=sum"],
    "nll_mmd_tanh": ["objective.weight=2.0", "objective.params.scale=2.0", "objective.reduction=sum"],
    "xe": ["objective.reduction=sum"],
    "xe_mmd": ["objective.weight=2.0", "objective.params.bandwidth_y=1.0", "objective.reduction=sum"],
    "xe_mmce": ["objective.weight=8.0", "dataset.protocol=clean", "objective.reduction=sum"],
    "xe_kde": ["objective.weight=0.1", "dataset.protocol=clean", "objective.reduction=sum"],
}


def _outputs(task, n, m, dtype, g):
    """Random network outputs as leaves: (mean, raw log-std) or logits."""
    if task == "regression":
        mean = torch.randn(n, generator=g, dtype=torch.float64)
        raw = 1.2 * torch.randn(n, generator=g, dtype=torch.float64) - 1.0  # some below log(0.05)
        return [mean.to(dtype), raw.to(dtype)]
    return [(2.0 * torch.randn(n, m, generator=g, dtype=torch.float64)).to(dtype)]


def _kcal_loss(objective, task, leaves, x, y, eps):
    leaves = [t.detach().requires_grad_() for t in leaves]
    if task == "regression":
        outputs = (leaves[0], torch.exp(leaves[1]).clamp_min(0.05))  # kcal's GaussianMLP head
    else:
        outputs = leaves[0]
    loss = objective(outputs, x, y, eps=eps)[0]
    return loss.detach(), torch.autograd.grad(loss, leaves)


def _authors_loss(loss_fn, task, leaves, x, y, eps, dtype, draws: bool):
    leaves = [t.detach().requires_grad_() for t in leaves]
    n = x.shape[0]
    with default_dtype(dtype), authors_draws(eps) if draws else contextlib.nullcontext():
        if task == "regression":
            preds = (
                leaves[0].view(n, 1, 1),
                torch.exp(leaves[1]).view(n, 1, 1),
                torch.ones(n, 1, 1, dtype=dtype),
            )
            loss = loss_fn(x, y.view(n, 1), preds)
        else:
            loss = loss_fn(x, y, leaves[0])
    return loss.detach(), torch.autograd.grad(loss, leaves)


def _close(ours, theirs, dtype) -> bool:
    rtol, atol = LOSS_TOL[dtype]
    scale = max(float(g.abs().max()) for g in theirs[1])
    return torch.allclose(ours[0], theirs[0], rtol=rtol, atol=atol) and all(
        torch.allclose(a, b, rtol=rtol, atol=atol * scale) for a, b in zip(ours[1], theirs[1], strict=True)
    )


# the authors' ECE-KDE runs in float32 only (``get_ratio_canonical`` casts the one-hot labels to float32 and
# multiplies them with the kernel: float64 probabilities raise a dtype error in their matmul)
LOSS_CASES = [(name, dtype) for name in OBJECTIVES for dtype in (torch.float64, torch.float32)
              if (name, dtype) != ("xe_kde", torch.float64)]  # fmt: skip


@pytest.mark.parametrize("name, dtype", LOSS_CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_composed_loss_is_the_authors(name, dtype, equivalence):
    """kcal's ``Objective`` from ``objective=<name> dataset.protocol=official`` vs the authors' loss class with
    the same resolved options, weight w as their ``loss_scalers`` ``{nll: 1, <reg>: w}``: loss value and its
    gradient w.r.t. the network outputs (mean and raw log-std, or logits). The MMD objectives are compared at
    their config's weight and at 0.2 (the authors' HEAD experiments' ``mmd`` scaler). Every perturbation of
    kcal's config in ``LOSS_PERTURBATIONS`` moves it outside the tolerance on every batch."""
    losses = load("src.metrics.losses")
    task = OBJECTIVES[name]
    base = "trainer.batch_size=8"  # the losses see whole synthetic splits; the batch size is only checked
    is_mmd = name in ("nll_mmd", "nll_mmd_tanh", "xe_mmd")
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    cases, weights = 0, set()
    for weight in [None, 0.2] if is_mmd else [None]:
        extra = [] if weight is None else [f"objective.weight={weight}"]
        cfg = compose(name, task, base, *extra)
        perturbed = {o: compose(name, task, base, *extra, o) for o in LOSS_PERTURBATIONS[name]}
        for n, d, m in LOSS_SHAPES[task]:
            data = splits(task, n, d, m, dtype, seed=cases + 100 * len(name))
            x, y = data.train.x, data.train.y
            # kcal's resolution: bandwidth_z "median" over these rows, threshold "auto", the protocol's flavours
            objective = setup.prepared_from(cfg, data).objective
            check_mapping(name, objective.params)
            leaves = _outputs(task, n, m, dtype, g)
            draws = objective.uses_noise
            eps = None
            if draws:
                eps = torch.randn(objective.params["num_samples"], n, generator=g, dtype=torch.float64)
                eps = eps.to(dtype)
            theirs_fn = authors_loss(losses, name, objective.params, objective.weight)
            theirs = _authors_loss(theirs_fn, task, leaves, x, y, eps, dtype, draws)
            ours = _kcal_loss(objective, task, leaves, x, y, eps)
            assert _close(ours, theirs, dtype), (name, n, d, m, dtype, float(ours[0]), float(theirs[0]))
            for override, pcfg in perturbed.items():
                other = _kcal_loss(setup.prepared_from(pcfg, data).objective, task, leaves, x, y, eps)
                assert not _close(other, theirs, dtype), (
                    f"kcal with {override} still equals the authors ({name}, n={n})"
                )
            cases += 1
            weights.add(objective.weight)
    differences = []
    if name not in ("nll", "xe"):
        reg = {"xe_mmce": "mmce", "xe_kde": "ece_kde"}.get(name, "mmd")
        ws = ", ".join(f"{w:g}" for w in sorted(weights))
        differences.append(f"convention: kcal weight w = their loss_scalers {{nll: 1, {reg}: w}} (w = {ws})")
    equivalence(cases, differences)


# ----------------------------------------------------------------------------------------------------
# 3. One optimisation step
# ----------------------------------------------------------------------------------------------------
STEP_CASES = [  # (task, objective, rows, features, classes, widths, batchnorm, dtype)
    ("regression", "nll_mmd", 32, 10, None, (16, 8, 12), True, torch.float64),
    ("regression", "nll_mmd", 16, 100, None, (8, 12, 6), False, torch.float64),
    ("regression", "nll_mmd", 64, 3, None, (16, 16, 8), True, torch.float32),
    ("classification", "xe_mmd", 32, 10, 3, (16, 8, 12), True, torch.float64),
    ("classification", "xe_mmd", 8, 100, 7, (12, 6, 8), False, torch.float64),
    ("classification", "xe_mmd", 64, 5, 2, (16, 16, 8), True, torch.float32),
]
# (rtol, atol) of the state after the step; Adam's moments with atol x their largest entry in the network
STEP_TOL = {torch.float64: (1e-10, 1e-12), torch.float32: (1e-5, 1e-6)}
# float32 weights: atol 1e-2 x lr. Adam's first step moves a weight by lr g / (|g| + 1e-8); where g is within
# a few 1e-8 of 0 (a BN bias of the classification case: g ~ 5e-8), float32 rounding of g moves the weight
# by a visible fraction of lr (measured: 5.6e-7 = 5.6e-4 lr). The moments check g itself.
FLOAT32_WEIGHT_ATOL = 1e-2
STEP_PERTURBATIONS = ["trainer.weight_decay=0.0", "trainer.gradient_clip_val=null", "trainer.lr=2.0e-3",
                      "objective.weight=2.0"]  # fmt: skip
# regression only: another seed gives other MMD draws (a classification step is invariant to the batch order)
REGRESSION_PERTURBATIONS = ["seed=1"]


def _authors_module(task, d, m, widths, batchnorm, dtype, params, weight, lr, wd, monkeypatch):
    """Their LightningModule with its net and criterion, as their configs instantiate them."""
    losses = load("src.metrics.losses")
    w1, w2, w3 = widths
    if task == "regression":
        net_cls = load("src.models.components.gmm_dense_net").DenseGMMNet
        net = net_cls(input_size=d, lin1_size=w1, lin2_size=w2, lin3_size=w3, output_size=1, num_components=1,
                      use_batchnorm=batchnorm)  # fmt: skip
        module_cls = load("src.models.gmm_module").GMMLitModule
    else:
        net_cls = load("src.models.components.simple_dense_net").SimpleDenseNet
        net = net_cls(
            input_size=d, lin1_size=w1, lin2_size=w2, lin3_size=w3, output_size=m, use_batchnorm=batchnorm
        )
        cm = load("src.models.classification_module")
        import torchmetrics

        monkeypatch.setattr(cm, "Accuracy", lambda: torchmetrics.Accuracy(task="multiclass", num_classes=m))
        module_cls = cm.ClassificationLitModule
    criterion = authors_loss(
        losses, {"regression": "nll_mmd", "classification": "xe_mmd"}[task], params, weight
    )
    return module_cls(net=net.to(dtype), criterion=criterion, lr=lr, weight_decay=wd)


def _to_kcal_name(key: str, last: int) -> str:
    """Their ``model.<i>.<p>`` -> kcal's ``body.<i>.<p>`` (the same Sequential indices) or ``head.<p>``."""
    _, i, rest = key.split(".", 2)
    return f"head.{rest}" if int(i) == last else f"body.{i}.{rest}"


def _authors_state(net, optimizer, regression: bool) -> dict[str, torch.Tensor]:
    """Their network's state (parameters, BN buffers) and Adam moments under kcal's names; the regression
    head's third row (the unused mixture logit) dropped."""
    last = len(net.model) - 1
    out = {}
    for key, value in net.state_dict().items():
        name = _to_kcal_name(key, last)
        out[name] = value[:2] if regression and name.startswith("head.") else value
    for key, p in net.named_parameters():
        name = _to_kcal_name(key, last)
        for moment in ("exp_avg", "exp_avg_sq"):
            v = optimizer.state[p][moment]
            out[f"{moment}:{name}"] = v[:2] if regression and name.startswith("head.") else v
    return out


def _kcal_state(engine) -> dict[str, torch.Tensor]:
    model = engine.net.model
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for i, (name, _) in enumerate(model.named_parameters()):
        for moment in ("exp_avg", "exp_avg_sq"):
            out[f"{moment}:{name}"] = engine.opt.param_state(i)[moment].detach().clone()
    return out


def _generator_copy(g: torch.Generator) -> torch.Generator:
    c = torch.Generator(device=g.device)
    c.set_state(g.get_state())
    return c


def _kcal_step(cfg, data, init: dict[str, torch.Tensor], dtype, tmp: Path):
    """One step of kcal's engine from ``init``; (state after, loss it reported, order, eps it used)."""
    prep = setup.prepared_from(cfg, data)
    member = Member.create(int(cfg.seed), cfg, tmp, torch.device("cpu"))
    engine = Engine(prep, [member], torch.device("cpu"))
    model = engine.net.model.to(dtype)
    model.load_state_dict(init, strict=True)
    engine.opt = adam(engine.net.parameters(), cfg)  # the engine's Adam, over the parameters in ``dtype``
    n = len(data.train)
    shuffle, noise = _generator_copy(member.shuffle), _generator_copy(member.noise)
    order = torch.randperm(n, generator=shuffle)  # the engine's batch order (drop_last: one batch of n)
    eps = None
    if engine.noise_samples is not None:
        eps = torch.randn((engine.noise_samples, n), generator=noise, dtype=dtype)
    means = engine.train_epoch()
    # the copies drew what the engine drew: the generators are where the engine left them
    assert torch.equal(shuffle.get_state(), member.shuffle.get_state())
    assert torch.equal(noise.get_state(), member.noise.get_state())
    return _kcal_state(engine), means[0, 0], order, eps


def _state_close(ours, theirs, dtype, lr: float, parameters: set[str]) -> list[str]:
    """Names of the entries that differ beyond the tolerance."""
    rtol, atol = STEP_TOL[dtype]
    # a moment's scale: its largest entry over the whole network (the bias of a Linear layer followed by
    # BatchNorm has a gradient of exactly 0 in exact arithmetic, rounding noise here)
    scale = {}
    for key, t in theirs.items():
        if ":" in key:
            moment = key.split(":")[0]
            scale[moment] = max(scale.get(moment, 0.0), float(t.abs().max()))
    bad = []
    for key, t in theirs.items():
        if ":" in key:  # an Adam moment
            a = atol * scale[key.split(":")[0]]
        elif key in parameters and dtype == torch.float32:
            a = FLOAT32_WEIGHT_ATOL * lr
        else:
            a = atol
        o = ours[key]
        if not torch.allclose(o.double(), t.double(), rtol=rtol, atol=a):
            bad.append(key)
    return bad


@pytest.mark.parametrize("case", STEP_CASES, ids=lambda c: f"{c[0]}-n{c[2]}-d{c[3]}-bn{c[6]}-{str(c[7])[6:]}")
def test_one_step_is_the_authors(case, tmp_path, monkeypatch, equivalence):
    """One step of kcal's engine (``objective=nll_mmd`` / ``xe_mmd``, ``dataset.protocol=official``, Adam with
    weight decay 5e-4, gradient clipping 0.5) and of the authors' module from the same weights, batch and
    draws: the parameters, BN running buffers and Adam's first and second moments after it (the moments
    carry the clipped, weight-decayed gradient; Adam's first step moves each weight by about lr whatever
    its gradient). Every perturbation of kcal's config in ``STEP_PERTURBATIONS`` (and, for regression, another
    seed: other MMD draws) moves it outside the tolerance."""
    task, objective, n, d, m, widths, batchnorm, dtype = case
    overrides = [f"model.widths=[{','.join(map(str, widths))}]", f"model.batchnorm={str(batchnorm).lower()}",
                 f"trainer.batch_size={n}", "trainer.lr=1.0e-3", "seed=0"]  # fmt: skip
    cfg = compose(objective, task, *overrides)
    assert float(cfg.trainer.weight_decay) == 5e-4 and float(cfg.trainer.gradient_clip_val) == 0.5
    data = splits(task, n, d, m, dtype, seed=n + d, scale=3.0)  # features of scale 3: the clipping acts
    params = setup.prepared_from(cfg, data).objective.params
    weight = float(cfg.objective.weight)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        module = _authors_module(task, d, m, widths, batchnorm, dtype, params, weight, float(cfg.trainer.lr),
                                 float(cfg.trainer.weight_decay), monkeypatch)  # fmt: skip
    regression = task == "regression"
    last = len(module.net.model) - 1
    init = {}
    for key, value in module.net.state_dict().items():
        name = _to_kcal_name(key, last)
        init[name] = (value[:2] if regression and name.startswith("head.") else value).clone()

    ours, our_loss, order, eps = _kcal_step(cfg, data, init, dtype, tmp_path)

    # the authors: Lightning 1.5's automatic optimisation of one batch, without a Trainer
    optimizer = module.configure_optimizers()
    module.train()
    x = data.train.x[order]
    y = data.train.y[order].view(n, 1)  # their datamodules' targets are (n, 1)
    optimizer.zero_grad()
    with default_dtype(dtype), authors_draws(eps) if regression else contextlib.nullcontext():
        their_loss = module.step((x, y))[0]
    their_loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(module.parameters(), 0.5)
    assert float(norm) > 0.5, f"gradient norm {float(norm)}: clipping would not act, choose another batch"
    if regression:  # their head's third row: the one-component mixture logit, gradient exactly 0
        head = module.net.model[last]
        assert torch.count_nonzero(head.weight.grad[2]) == 0 and float(head.bias.grad[2]) == 0.0
    optimizer.step()
    theirs = _authors_state(module.net, optimizer, regression)

    # the loss the engine reports: its epoch means are accumulated in float32
    torch.testing.assert_close(our_loss.double(), their_loss.detach().double(), rtol=1e-6, atol=1e-7)
    assert set(ours) == set(theirs)
    lr = float(cfg.trainer.lr)
    parameters = {_to_kcal_name(k, last) for k, _ in module.net.named_parameters()}
    bad = _state_close(ours, theirs, dtype, lr, parameters)
    assert not bad, f"differ after one step: {bad}"

    # the comparison can fail: each perturbation of kcal's config leaves the tolerance
    for override in STEP_PERTURBATIONS + (REGRESSION_PERTURBATIONS if regression else []):
        other = _kcal_step(compose(objective, task, *overrides, override), data, init, dtype, tmp_path)[0]
        assert _state_close(other, theirs, dtype, lr, parameters), f"kcal with {override} still equals them"
    unused = "their head's third output row (one-component mixture logit, gradient 0) has no kcal counterpart"
    equivalence(1, [unused] if regression else [])
