import pytest
import torch
from torch.distributions import Normal

from kcal.metrics.regression import gaussian_nll
from kcal.objectives import Objective

from .data.conftest import needs


def test_gaussian_nll_is_the_normal_log_density():
    g = torch.Generator().manual_seed(0)
    mean, std, y = torch.randn(9, generator=g), torch.rand(9, generator=g) + 0.1, torch.randn(9, generator=g)
    ref = -Normal(mean, std).log_prob(y)
    assert torch.allclose(gaussian_nll((mean, std), y), ref.mean())
    assert torch.allclose(gaussian_nll((mean, std), y, "sum"), ref.sum())


def test_loss_is_base_plus_weight_times_regulariser():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 3, generator=g), torch.randn(32, generator=g)
    mean, std = torch.randn(32, generator=g), torch.rand(32, generator=g) + 0.5
    obj = Objective("nll_mmd", "regression", "mmd", 2.5,
                    {"bandwidth_y": 1.0, "bandwidth_z": 5.0, "eps": torch.randn(10, 32, generator=g)})  # fmt: skip
    loss, base, reg = obj((mean, std), x, y)
    assert torch.allclose(loss, base + 2.5 * reg)
    assert torch.allclose(base, gaussian_nll((mean, std), y))
    assert reg.abs() > 0


def test_nll_on_classes_is_cross_entropy_and_mmd_drops_sample_parameters():
    g = torch.Generator().manual_seed(2)
    logits, y, x = (
        torch.randn(16, 3, generator=g),
        torch.randint(0, 3, (16,), generator=g),
        torch.randn(16, 4, generator=g),
    )
    obj = Objective("nll_mmd", "classification", "mmd", 1.0,
                    {"form": "individual", "num_samples": 10, "pairing": "index", "bandwidth_y": 1.0, "bandwidth_z": 4.0})  # fmt: skip
    loss, base, reg = obj(logits, x, y)
    assert torch.allclose(base, torch.nn.functional.cross_entropy(logits, y))
    assert torch.isfinite(reg) and torch.allclose(loss, base + reg)


@pytest.mark.parametrize("reg", ["mmce", "kde", "mmd"])
def test_classification_regularisers_have_gradients(reg):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(24, 3, generator=g, requires_grad=True)
    y, x = torch.randint(0, 3, (24,), generator=g), torch.randn(24, 5, generator=g)
    params = {
        "mmd": {"bandwidth_y": 0.5, "bandwidth_z": 5.0},
        "mmce": {"bandwidth": 0.4},
        "kde": {"p": 1, "bandwidth": 0.1},
    }[reg]
    loss, _, r = Objective(f"xe_{reg}", "classification", reg, 1.0, params)(logits, x, y)
    loss.backward()
    assert torch.isfinite(r) and torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


def test_invalid_objectives_are_rejected():
    with pytest.raises(ValueError, match="not available for regression"):
        Objective("nll_mmce", "regression", "mmce", 1.0)
    with pytest.raises(ValueError, match="weight"):
        Objective("nll_mmd", "regression", "mmd", -1.0)
    with pytest.raises(ValueError, match="bandwidth_y must be > 0"):
        Objective("nll_mmd", "regression", "mmd", 1.0, {"bandwidth_y": -0.1})


@pytest.mark.parametrize("protocol, scaling", [("official", "authors"), ("clean", "kumar")])
def test_xe_mmce_config_keeps_the_authors_mmce_scaling_under_the_official_protocol(protocol, scaling):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from kcal.configs import CONFIG_DIR

    from .test_baselines import ref_mmce, ref_mmce_kumar

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        overrides = ["dataset=breast-cancer", "objective=xe_mmce", f"dataset.protocol={protocol}"]
        cfg = compose("train", overrides=overrides)
    params = OmegaConf.to_container(cfg.objective.params, resolve=True)
    assert params["scaling"] == scaling
    obj = Objective(
        cfg.objective.name, "classification", cfg.objective.regularizer, cfg.objective.weight, params
    )
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(24, 3, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (24,), generator=g)
    _, _, reg = obj(logits, torch.zeros(24, 2), y)
    probs = torch.softmax(logits, -1).numpy()
    # official: the value every xe_mmce run trained with before MMCE's default became Kumar et al.'s
    ref = ref_mmce(probs, y.numpy(), 0.4) if scaling == "authors" else ref_mmce_kumar(probs, y.numpy(), 0.4)
    assert abs(float(reg) - ref) <= 1e-6 * ref + 1e-9


@pytest.mark.parametrize("protocol, flavour", [("official", "authors"), ("clean", "kcal")])
def test_xe_kde_config_trains_the_authors_ece_kde_under_the_official_protocol(protocol, flavour):
    """Under the official protocol xe_kde is the authors' regulariser (their bandwidth rule and ratio); under
    clean kcal's. On these batches the two rules pick other bandwidths, so the values differ."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from kcal.baselines import ece_kde, select_bandwidth
    from kcal.configs import CONFIG_DIR

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        overrides = ["dataset=breast-cancer", "objective=xe_kde", f"dataset.protocol={protocol}"]
        cfg = compose("train", overrides=overrides)
    params = OmegaConf.to_container(cfg.objective.params, resolve=True)
    assert params["flavour"] == flavour and params["bandwidth"] is None
    obj = Objective(
        cfg.objective.name, "classification", cfg.objective.regularizer, cfg.objective.weight, params
    )
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(64, 2, generator=g) * 0.5
    y = torch.randint(0, 2, (64,), generator=g)
    _, _, reg = obj(logits, torch.zeros(64, 2), y)
    probs = torch.softmax(logits, -1)
    assert torch.equal(reg, ece_kde(probs, y, flavour=flavour))
    assert select_bandwidth(probs, fallback="authors") != select_bandwidth(probs)
    other = "kcal" if flavour == "authors" else "authors"
    assert abs(float(reg) - float(ece_kde(probs, y, flavour=other))) > 1e-4


# ---- the weight on the base loss (objective.base_weight) -------------------------------------------------


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_base_weight_scales_the_base_loss_and_its_default_is_the_old_loss_bit_for_bit(task):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(32, 3, generator=g)
    if task == "regression":
        outputs, y = (
            (torch.randn(32, generator=g), torch.rand(32, generator=g) + 0.5),
            torch.randn(32, generator=g),
        )
        params = {"bandwidth_y": 1.0, "bandwidth_z": 5.0, "eps": torch.randn(10, 32, generator=g)}
    else:
        outputs, y = torch.randn(32, 3, generator=g), torch.randint(0, 3, (32,), generator=g)
        params = {"bandwidth_y": 0.5, "bandwidth_z": 5.0}
    loss, base, reg = Objective("nll_mmd", task, "mmd", 0.2, params, base_weight=0.03)(outputs, x, y)
    assert torch.allclose(loss, 0.03 * base + 0.2 * reg) and reg.abs() > 0
    default, base1, reg1 = Objective("nll_mmd", task, "mmd", 0.2, params)(outputs, x, y)
    assert torch.equal(default, base1 + 0.2 * reg1)  # base_weight 1: the same operations as before the key
    assert torch.equal(base1, base) and torch.equal(reg1, reg)
    plain, base2, _ = Objective("nll", task, None, 0.0, base_weight=0.03)(outputs, x, y)
    assert torch.allclose(plain, 0.03 * base2)  # no regulariser: the weighted base loss
    assert torch.equal(Objective("nll", task, None, 0.0).combine(base2), base2)


def test_base_weight_is_checked():
    with pytest.raises(ValueError, match="base_weight must be >= 0"):
        Objective("nll_mmd", "regression", "mmd", 1.0, base_weight=-1.0)
    with pytest.raises(ValueError, match="base_weight must be a finite number"):
        Objective("nll_mmd", "regression", "mmd", 1.0, base_weight=float("inf"))


def _one_step(objective: Objective, weight_decay: float, clip: float | None) -> torch.Tensor:
    """Every parameter's change after one step of kcal's optimiser (the engine's Adam with coupled weight
    decay and its gradient-norm clip) on the authors' classification network (batch norm) from fixed
    weights, in float64 (so that rounding cannot flip a direction)."""
    from omegaconf import OmegaConf

    from kcal.models import build_model
    from kcal.run.optimiser import adam
    from kcal.run.stacked_net import clip_grad_norm

    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 2, (64,), generator=g)
    torch.manual_seed(6)
    model = build_model("auto", "classification", 6, 2, [32, 32, 32], batchnorm=True).double()
    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    opt = adam(params, OmegaConf.create({"trainer": {"lr": 1e-3, "weight_decay": weight_decay}}))
    loss, _, _ = objective(model(x), x, y)
    loss.backward()
    if clip is not None:
        clip_grad_norm(params, clip)
    opt.step()
    return torch.cat([(p.detach() - b).flatten() for p, b in zip(params, before, strict=True)])


def test_weighting_the_base_loss_is_another_step_than_dividing_the_regulariser_weight():
    """The authors' w * XE + 0.2 * MMD^2 (their loss_scalers; nll searched in [1e-3, 10]) is not
    XE + (0.2 / w) * MMD^2: the losses differ by the factor w only, but Adam's weight decay is added to the
    gradient (and the gradient's norm is clipped), so one step of the two moves many weights the other way."""
    w, params = 0.001, {"bandwidth_y": 0.01, "bandwidth_z": 10.0}
    theirs = Objective("xe_mmd", "classification", "mmd", 0.2, params, base_weight=w)
    divided = Objective("xe_mmd", "classification", "mmd", 0.2 / w, params)

    def opposite(weight_decay, clip):  # share of the moving parameters that the two steps move oppositely
        a, b = _one_step(theirs, weight_decay, clip), _one_step(divided, weight_decay, clip)
        moving = (a.abs() > 1e-6) & (b.abs() > 1e-6)  # biases before batch norm have no gradient
        return float(((a * b) < 0)[moving].float().mean())

    assert opposite(5e-4, 0.5) > 0.05  # kcal's trainer defaults, the authors' settings
    # the control: without weight decay Adam's first step is (up to its eps) blind to the factor w
    assert opposite(0.0, None) == 0.0


@needs("breast-cancer")
def test_the_trainer_weights_the_base_loss_in_its_steps_and_in_val_loss(tmp_path):
    """objective.base_weight reaches kcal's training loop: val/loss (the early-stopping criterion) is
    base_weight * XE + weight * MMD^2, a step with base_weight w and weight 0.2 is not one with 1 and 0.2 / w,
    and a config without the key (e.g. a run saved before it existed) trains bit for bit as base_weight 1."""
    from kcal.run import engine as E
    from kcal.run import setup

    from .common import compose_cfg

    w = 0.001
    common = ["dataset=breast-cancer", "dataset.max_train_rows=128", "objective=xe_mmd", "model.batchnorm=true",
              "objective.params.bandwidth_z=10.0", "objective.params.bandwidth_y=0.01"]  # fmt: skip

    def engine(*overrides):
        cfg = compose_cfg("train", *common, *overrides)
        cpu = torch.device("cpu")
        return E.Engine(setup.prepare(cfg), [E.Member.create(0, cfg, tmp_path, cpu)], cpu)

    theirs = engine(f"objective.base_weight={w}", "objective.weight=0.2")
    divided = engine("objective.base_weight=1.0", f"objective.weight={0.2 / w}")
    assert theirs.objective.base_weight == w and divided.objective.base_weight == 1.0
    val_theirs, val_divided = theirs.validate()[0], divided.validate()[0]  # the same initial weights
    assert val_theirs["val/loss"] == pytest.approx(w * val_divided["val/loss"], rel=1e-5)
    assert val_theirs["val/nll"] == val_divided["val/nll"]
    theirs.train_epoch(), divided.train_epoch()
    moved = [
        not torch.allclose(a, b)
        for a, b in zip(theirs.net.parameters(), divided.net.parameters(), strict=True)
    ]
    assert any(moved)

    default, without = (
        engine("objective.weight=0.2"),
        engine("objective.weight=0.2", "~objective.base_weight"),
    )
    assert without.prep.cfg.objective.get("base_weight") is None and without.objective.base_weight == 1.0
    default.train_epoch(), without.train_epoch()
    for a, b in zip(default.net.parameters(), without.net.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_stack_probe_refuses_a_batched_ece_kde_one_ulp_off_and_probes_once_per_shape(monkeypatch):
    """Objective.stack_exact: a batched ECE-KDE (or MMCE) whose value, gradient or bandwidth scores differ from the
    members' own by one ulp is refused (the engine then takes the members one by one); the probe runs once per shape and
    parameters. Whether the true batched call passes depends on the CPU's kernels, so it is not asserted here."""
    import kcal.baselines as baselines

    def kde(**params):
        return Objective(
            "xe_kde",
            "classification",
            "kde",
            1.0,
            {"p": 1, "bandwidth": None, "flavour": "authors", **params},
        )

    real = Objective.stacked_regularization
    monkeypatch.setattr(
        Objective,
        "stacked_regularization",
        lambda self, o, y: torch.nextafter(real(self, o, y), torch.tensor(1.0)),
    )
    assert not kde().stack_exact(torch.zeros(4, 16, 2))  # the value one ulp up
    monkeypatch.setattr(Objective, "stacked_regularization", real)
    loo = baselines.loo_log_likelihood

    def stack_off(probs, grid, authors=False):  # the stack's scores one ulp off, the members' own as they are
        out = loo(probs, grid, authors)
        return torch.nextafter(out, torch.full_like(out, float("inf"))) if probs.dim() == 3 else out

    monkeypatch.setattr(baselines, "loo_log_likelihood", stack_off)
    assert not kde().stack_exact(torch.zeros(4, 16, 2))  # the scores one ulp off: the bandwidths could differ
    monkeypatch.setattr(baselines, "loo_log_likelihood", loo)
    calls = []
    probe = Objective._probe_stack
    monkeypatch.setattr(Objective, "_probe_stack", lambda self, *key: calls.append(key) or probe(self, *key))
    objective = kde()
    for shape in [(4, 16, 2), (4, 16, 2), (3, 16, 2)]:
        objective.stack_exact(torch.zeros(shape))
    assert [key[0] for key in calls] == [(4, 16, 2), (3, 16, 2)]
    mmce = Objective("xe_mmce", "classification", "mmce", 1.0, {"bandwidth": 0.4, "scaling": "kumar"})
    monkeypatch.setattr(
        Objective,
        "stacked_regularization",
        lambda self, o, y: torch.nextafter(real(self, o, y), torch.tensor(1.0)),
    )
    assert not mmce.stack_exact(torch.randn(4, 16, 2))  # MMCE's batched form is probed alike
    assert not Objective("xe_mmce", "classification", "mmce", 0.0, {}).stack_exact(torch.zeros(4, 16, 2))
    assert not kde().stack_exact(torch.zeros(16, 2))  # one member's outputs: nothing to stack
