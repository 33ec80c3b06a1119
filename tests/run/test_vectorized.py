"""kcal.run.stacked: K seeds trained as one batched model equal K single ``kcal.run.run`` calls."""

import copy
import csv
import json
import math

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from kcal.core import random_streams
from kcal.models import build_model
from kcal.objectives import Objective
from kcal.run import optimiser as O
from kcal.run import run, setup
from kcal.run import stacked as V
from kcal.run import stacked_net as N

from ..common import TRAINED_RTOL, assert_numbers_close, compose_cfg, reorder_tol
from ..data.conftest import needs

needs_data = needs("crime", "breast-cancer")
SMALL = ["trainer.progress_bar=false", "save_checkpoint=true", "model.widths=[16,16,16]", "++figures=false"]
CRIME = ["dataset=crime", "dataset.max_train_rows=256"]
CANCER = ["dataset=breast-cancer", "dataset.max_train_rows=200"]
SEEDS = [0, 1, 2]


def cfg_for(*overrides):
    return compose_cfg("train", *SMALL, *overrides)


def numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def assert_close(a: float, b: float, key: str, tol: float = TRAINED_RTOL):
    """``a`` within ``tol`` of ``b``, relative above 1 and absolute below (NaN only for NaN): a stack's batched
    kernels (or another CPU's) may round a float32 step's sums otherwise (tests.common.TRAINED_RTOL)."""
    if isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), key
        return
    assert abs(a - b) <= tol * max(1.0, abs(b)), (key, a, b)


def history(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def check_equivalent(cfg, tmp_path, seeds=SEEDS, chunk_size=None):
    """train_stacked over ``seeds`` equals separate kcal.run.run calls; returns both metrics lists."""
    vec = V.train_stacked(
        cfg, seeds, [tmp_path / f"v{s}" for s in seeds], chunk_size=chunk_size, progress=False
    )
    single = [run(V.member_config(cfg, s), tmp_path / f"s{s}") for s in seeds]
    for s, a, b in zip(seeds, vec, single, strict=True):
        assert a.keys() == b.keys(), set(a) ^ set(b)
        assert (
            a["status"] == b["status"]
            and a["epochs"] == b["epochs"]
            and a.get("best_epoch") == b.get("best_epoch")
        )
        for key, value in numbers(b).items():
            assert_close(a[key], value, key)
        assert {k: v for k, v in a.items() if k not in numbers(a)} == {
            k: v for k, v in b.items() if k not in numbers(b)
        }
        assert json.loads((tmp_path / f"v{s}" / "metrics.json").read_text()) == a
        assert OmegaConf.load(tmp_path / f"v{s}" / "config.yaml").seed == s
        for name in ("history.csv", "run.json"):
            assert (tmp_path / f"v{s}" / name).is_file(), name
        ha, hb = history(tmp_path / f"v{s}" / "history.csv"), history(tmp_path / f"s{s}" / "history.csv")
        assert len(ha) == len(hb) and ha[0].keys() == hb[0].keys()
        for ra, rb in zip(ha, hb, strict=True):
            for key in rb:
                if rb[key]:
                    assert_close(float(ra[key]), float(rb[key]), f"history {key} epoch {rb['epoch']}")
        if a["status"] == "ok":
            assert (tmp_path / f"v{s}" / "predictions.npz").is_file()
            state = torch.load(tmp_path / f"v{s}" / "checkpoints" / "best.pt")
            single_state = torch.load(tmp_path / f"s{s}" / "checkpoints" / "best.pt")
            for key, value in state.items():
                assert torch.allclose(value.double(), single_state[key].double(), atol=1e-6)
    return vec, single


@needs_data
def test_nll_on_crime_in_chunks_equals_single_runs(tmp_path):
    cfg = cfg_for(*CRIME, "objective=nll", "trainer.max_epochs=4", "trainer.min_epochs=0")
    check_equivalent(cfg, tmp_path, chunk_size=2)


@needs_data
def test_nll_mmd_with_early_stopping_at_different_epochs(tmp_path):
    cfg = cfg_for(*CRIME, "objective=nll_mmd", "trainer.max_epochs=15", "trainer.min_epochs=2", "trainer.patience=1",
                  "trainer.lr=0.01")  # fmt: skip
    vec, _ = check_equivalent(cfg, tmp_path)
    assert len({m["epochs"] for m in vec}) > 1  # the members really stopped at different epochs


@needs_data
def test_min_epochs_keeps_training_after_early_stopping_asks_to_stop(tmp_path):
    # patience 1 asks to stop early; Lightning keeps going until min_epochs (the request is never reset)
    cfg = cfg_for(*CRIME, "objective=nll", "trainer.max_epochs=12", "trainer.min_epochs=5", "trainer.patience=1",
                  "trainer.lr=0.01", "model.batchnorm=true", "trainer.log_dce=false")  # fmt: skip
    vec, _ = check_equivalent(cfg, tmp_path, seeds=[0, 1])
    assert all(m["epochs"] >= 5 for m in vec)


@needs_data
def test_xe_mmd_on_breast_cancer(tmp_path):
    cfg = cfg_for(*CANCER, "objective=xe_mmd", "trainer.max_epochs=4", "trainer.min_epochs=0")
    check_equivalent(cfg, tmp_path)


@needs_data
def test_xe_with_batchnorm_on_breast_cancer(tmp_path):
    cfg = cfg_for(*CANCER, "objective=xe", "model.batchnorm=true", "trainer.max_epochs=6", "trainer.min_epochs=0",
                  "trainer.patience=2")  # fmt: skip
    check_equivalent(cfg, tmp_path)


@needs_data
def test_a_diverging_member_does_not_change_the_others(tmp_path, monkeypatch):
    real_build = setup.build

    def build(prep, seed):  # seed 1 starts with a blown-up head: its loss is non-finite from the first step
        model = real_build(prep, seed)
        if seed == 1:
            with torch.no_grad():
                model.head.weight.mul_(1e30)
        return model

    monkeypatch.setattr(setup, "build", build)
    cfg = cfg_for(*CRIME, "objective=nll", "trainer.max_epochs=4", "trainer.min_epochs=2",
                  "trainer.gradient_clip_val=null")  # fmt: skip
    vec, single = check_equivalent(cfg, tmp_path)  # the diverged member too: same status, same epoch
    assert [m["status"] for m in vec] == ["ok", "diverged", "ok"]
    assert vec[1]["epochs"] == 2 and vec[0]["epochs"] == 4  # the NaN member trained to min_epochs, alone
    monkeypatch.setattr(setup, "build", real_build)
    healthy = V.train_stacked(cfg, [0, 2], [tmp_path / "h0", tmp_path / "h2"], progress=False)
    for alone, with_nan in zip(healthy, (vec[0], vec[2]), strict=True):  # a stack of 2, not of 3: to rounding
        assert_numbers_close(numbers(alone), numbers(with_nan))


def test_clean_protocol_falls_back_to_sequential_runs(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(V, "run", lambda cfg, out: calls.append((cfg.seed, out)) or {"seed": cfg.seed})
    cfg = cfg_for("dataset=crime", "dataset.protocol=clean")
    out = V.train_stacked(cfg, [3, 4], [tmp_path / "a", tmp_path / "b"], progress=False)
    assert out == [{"seed": 3}, {"seed": 4}] and calls == [(3, tmp_path / "a"), (4, tmp_path / "b")]
    assert cfg.seed == 0  # the caller's config is untouched


@pytest.mark.parametrize(("task", "d", "m", "widths", "batchnorm"),
                         [("regression", 102, None, [64, 64, 64], False), ("classification", 16, 7, [8, 8, 8], True),
                          ("classification", 30, 2, [16, 16, 16], True)])  # fmt: skip
def test_stacked_network_equals_single_models(task, d, m, widths, batchnorm):
    """Gradients, clip norms, BatchNorm statistics and evaluation outputs of the stacked network are each
    member's own. Bit for bit on this project's CPU (the batched kernels are used where a probe finds them
    exact); tested to float32 rounding, since the per-member clip norm and the evaluation on a member's
    slice of the stacked weights may round otherwise on another CPU."""
    k = 3
    # float32: an entry of a gradient or an output sums at most 102 products per layer; grouped otherwise it
    # moves by a few ulps of the terms, about 1e-6 of the values (of order 1): rtol 1e-5, atol 1e-6. A clip
    # norm sums the squares of every gradient entry (positive terms): at most n_params eps relative.
    close = {"rtol": 1e-5, "atol": 1e-6}
    models = [
        random_streams.init_with_seed(s, lambda: build_model("auto", task, d, m, widths, batchnorm))
        for s in range(k)
    ]
    net = N.StackedMLP(models)
    objective = Objective("x", task)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(k, 64, d, generator=gen)
    y = (
        torch.randn(k, 64, generator=gen)
        if task == "regression"
        else torch.randint(0, m, (k, 64), generator=gen)
    )
    torch.func.vmap(objective.base)(net(x), y).sum().backward()
    total = N.clip_grad_norm_per_member(net.parameters(), 0.5)
    for i, model in enumerate(models):
        objective.base(model(x[i]), y[i]).backward()
        n_params = sum(p.numel() for p in model.parameters())
        norm_rtol = reorder_tol(n_params, 1.0, torch.float32)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        torch.testing.assert_close(norm, total[i], rtol=norm_rtol, atol=0)
        for name, p in model.named_parameters():  # the clip's factor carries the norm's rounding
            torch.testing.assert_close(p.grad, net.params[name].grad[i], rtol=close["rtol"] + norm_rtol,
                                       atol=close["atol"], msg=name)  # fmt: skip
        for name, b in model.named_buffers():  # BatchNorm running statistics
            torch.testing.assert_close(
                b, net.buffers[name][i], **close, msg=name
            )  # counts: exact all the same
    net.training = False
    for rows in (57, 1):  # eval mode on shared rows, incl. a 1-row tail batch
        xv = torch.randn(rows, d, generator=gen)
        with torch.no_grad():
            out_v = net(xv.unsqueeze(0).expand(k, -1, -1))
            for i, model in enumerate(models):
                ref = model.eval()(xv)
                ref, got = (
                    (torch.stack(ref), torch.stack(N.member_slice(out_v, i)))
                    if task == "regression"
                    else (ref, out_v[i])
                )
                torch.testing.assert_close(got, ref, **close, msg=f"{rows} rows")


@pytest.mark.parametrize("k", [1, 3, 7, 10, 16])
def test_a_members_adam_steps_are_its_own_alone_whatever_its_stack_and_after_compaction(k):
    """The engine's Adam (:class:`kcal.run.optimiser.LaneAdam`) moves each member of a stacked parameter as an
    optimiser of that member alone moves it, bit for bit, at every stack size, also after members leave (their
    moments kept). Sizes that are and are not multiples of the kernel's lanes (a 2-element bias, 8 x 5, 64), and
    gradients over many orders of magnitude: torch's fused Adam fails this (its scalar tail rounds otherwise)."""
    gen = torch.Generator().manual_seed(k)
    shapes = [(8, 5), (2,), (64,), (3, 7)]
    stacked = [torch.randn(k, *s, generator=gen).requires_grad_() for s in shapes]
    alone = [[p[i].detach().clone().requires_grad_() for p in stacked] for i in range(k)]
    cfg = OmegaConf.create({"trainer": {"lr": 1e-2, "weight_decay": 5e-4}})
    opt = O.adam(stacked, cfg)
    opts = [O.adam(ps, cfg) for ps in alone]  # what a single run uses
    keep = list(range(0, k, 2)) or [0]
    live = list(range(k))
    for step in range(40):
        grads = [
            torch.randn(k, *s, generator=gen) * torch.exp(3 * torch.randn(k, *s, generator=gen))
            for s in shapes
        ]
        if step == 20 and len(keep) < k:  # members leave: drop them from the stack and the optimiser state
            rows = torch.tensor(keep)
            stacked = [p.detach()[rows].clone().requires_grad_() for p in stacked]
            opt, live = opt.restricted(stacked, rows), keep
        for p, g in zip(stacked, grads, strict=True):
            p.grad = g[live].clone()
        opt.step()
        for i in live:
            for p, g in zip(alone[i], grads, strict=True):
                p.grad = g[i].clone()
            opts[i].step()
    for pos, i in enumerate(live):
        for p, q in zip(stacked, alone[i], strict=True):
            assert torch.equal(p[pos], q), (k, i)


def test_the_engines_adam_goes_on_from_its_saved_state_and_keeps_the_parameters_values():
    """A :class:`~kcal.run.optimiser.LaneAdam` restored from another's ``state_dict`` over copies of its
    parameters takes the same steps; the parameters it lays into its buffer keep their values."""
    gen = torch.Generator().manual_seed(0)
    params = [
        torch.randn(4, 3, generator=gen).requires_grad_(),
        torch.randn(128, generator=gen).requires_grad_(),
    ]
    values = [p.detach().clone() for p in params]
    cfg = OmegaConf.create({"trainer": {"lr": 1e-2, "weight_decay": 5e-4}})
    opt = O.adam(params, cfg)
    assert all(torch.equal(p, v) for p, v in zip(params, values, strict=True))
    grads = [[torch.randn(p.shape, generator=gen) for p in params] for _ in range(6)]
    for g in grads[:3]:
        for p, gi in zip(params, g, strict=True):
            p.grad = gi.clone()
        opt.step()
    copies = [p.detach().clone().requires_grad_() for p in params]
    again = O.adam(copies, cfg)
    again.load_state_dict(copy.deepcopy(opt.state_dict()))  # as from a snapshot's file
    for g in grads[3:]:
        for ps, o in ((params, opt), (copies, again)):
            for p, gi in zip(ps, g, strict=True):
                p.grad = gi.clone()
            o.step()
    assert all(torch.equal(p, q) for p, q in zip(params, copies, strict=True))


def test_linear_plan_falls_back_per_member_where_bmm_differs(monkeypatch):
    """Every plan (all batched, all member by member, and the one the probe picks on this CPU) reproduces
    F.linear and its gradients. Bit for bit where the probe found the batched kernels exact and where the
    plan runs F.linear's own products member by member (as on this project's CPU); asserted to float32
    rounding, since a member's slice of the stacked tensors may sit otherwise aligned in memory than a tensor
    of its own, and MKL may round a product by its operands' alignment."""
    gen = torch.Generator().manual_seed(1)
    for o, d in ((7, 64), (2, 23), (64, 102)):
        x = torch.randn(3, 64, d, generator=gen)
        w0, b0 = torch.randn(3, o, d, generator=gen), torch.randn(3, o, generator=gen)
        g = torch.randn(3, 64, o, generator=gen)
        probed = N.linear_plan(3, 64, d, o, x.device, x.dtype)
        for plan in (N.LinearPlan(), N.LinearPlan(False, False, False, False), probed):
            xs, w, b = x.clone().requires_grad_(), w0.clone().requires_grad_(), b0.clone().requires_grad_()
            monkeypatch.setattr(N, "linear_plan", lambda *shape, plan=plan: plan)
            out = N.stacked_linear(xs, w, b)
            out.backward(g)
            for i in range(3):
                xi, wi, bi = (t[i].clone().requires_grad_() for t in (x, w0, b0))
                ref = F.linear(xi, wi, bi)
                ref.backward(g[i])
                # each entry sums products over one dimension (d inputs, o outputs or 64 rows): at most that
                # many additions of terms whose absolute values add up to the absolute operands' product
                ax, aw, ag = xi.detach().abs(), wi.detach().abs(), g[i].abs()
                checks = [
                    (out[i], ref, d, ax @ aw.T + bi.detach().abs()),
                    (xs.grad[i], xi.grad, o, ag @ aw),
                    (w.grad[i], wi.grad, 64, ag.T @ ax),
                    (b.grad[i], bi.grad, 64, ag.sum(0)),
                ]
                for got, want, terms, abs_sum in checks:
                    tol = reorder_tol(terms + 1, abs_sum.max(), torch.float32)
                    torch.testing.assert_close(got, want, rtol=0, atol=tol, msg=f"{plan} {(o, d)}")


@pytest.mark.parametrize("max_norm", [1e-3, 0.5, 1e9])
def test_the_engines_clip_is_torchs_clip_grad_norm(max_norm):
    """kcal.run.stacked_net.clip_grad_norm (a single model's clip in the engine) gives torch's numbers: the
    same operations in the same order on the same tensors, so bit for bit on any CPU."""
    from kcal.run.stacked_net import clip_grad_norm

    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.float64):
        shapes = [(64, 102), (64,), (256, 64), (256,), (2, 256), (2,)]
        grads = [torch.randn(s, generator=g, dtype=dtype) * 3 for s in shapes]
        ours, theirs = [torch.zeros(s, dtype=dtype, requires_grad=True) for s in shapes], []
        for p, grad in zip(ours, grads, strict=True):
            p.grad = grad.clone()
            theirs.append(torch.zeros_like(p, requires_grad=True))
            theirs[-1].grad = grad.clone()
        total = clip_grad_norm(ours, max_norm)
        assert torch.equal(total, torch.nn.utils.clip_grad_norm_(theirs, max_norm))
        for a, b in zip(ours, theirs, strict=True):
            assert torch.equal(a.grad, b.grad)


@needs_data
@pytest.mark.parametrize("objective", ["xe_kde", "xe_mmce"])
@pytest.mark.parametrize("exact", [True, False])
def test_a_batched_or_member_by_member_regulariser_equals_single_runs(
    tmp_path, monkeypatch, exact, objective
):
    """ECE-KDE and MMCE in a stack: one batched call for all members (kcal.baselines.ece_kde_stacked, mmce_stacked)
    where Objective.stack_exact's probe passes (forced here, so it runs on any CPU), member by member where it
    fails; either way each member trains as its single run does (to rounding)."""
    calls = {"probe": 0, "batched": 0}
    stacked = Objective.stacked_regularization

    def probe(self, *key):
        calls["probe"] += 1
        return exact

    def counted(self, outputs, y):
        calls["batched"] += 1
        return stacked(self, outputs, y)

    monkeypatch.setattr(Objective, "_probe_stack", probe)
    monkeypatch.setattr(Objective, "stacked_regularization", counted)
    cfg = cfg_for(
        *CANCER,
        f"objective={objective}",
        "objective.weight=1",
        "trainer.max_epochs=3",
        "trainer.min_epochs=0",
    )
    check_equivalent(cfg, tmp_path)
    assert calls["probe"] >= 1 and (calls["batched"] > 0) == exact


@needs_data
def test_a_stack_gathering_its_epoch_in_chunks_equals_single_runs(tmp_path, monkeypatch):
    """Stacked members' batches gathered (and their MMD constants built) a few steps at a time."""
    from kcal.run import engine

    monkeypatch.setattr(engine, "GATHER_ELEMENTS", 3 * 64 * 200)  # about one step of three members a chunk
    cfg = cfg_for(*CRIME, "objective=nll_mmd", "trainer.max_epochs=3", "trainer.min_epochs=3")
    check_equivalent(cfg, tmp_path)


@needs_data
def test_a_stack_whose_batched_mmd_probe_fails_takes_its_members_one_by_one(tmp_path, monkeypatch):
    """Where MMDStep.stack_exact's probe finds the batched MMD inexact (a GPU's kernels may be), the engine
    computes the members' regularisers one by one, each drawing from its own generator once: the stack
    still equals the single runs."""
    from kcal.mmd import MMDStep

    calls = []
    monkeypatch.setattr(MMDStep, "_probe", lambda self, *shape: calls.append(shape) or False)
    cfg = cfg_for(*CRIME, "objective=nll_mmd", "trainer.max_epochs=2", "trainer.min_epochs=2")
    check_equivalent(cfg, tmp_path)
    assert calls  # the probe was asked


@needs_data
def test_nll_mmd_with_the_decision_kernel_equals_single_runs(tmp_path):
    """Table 7's NLL + MMD (tanh): its fast path, in a stack (batched where the probe allows, else member by
    member) as alone."""
    cfg = cfg_for(*CRIME, "objective=nll_mmd_tanh", "trainer.max_epochs=3", "trainer.min_epochs=3")
    check_equivalent(cfg, tmp_path)
