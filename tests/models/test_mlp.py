import pytest
import torch

from kcal.models import GaussianMLP, SoftmaxMLP, build_model


def test_gaussian_head_floors_std_and_shapes():
    torch.manual_seed(0)
    net = GaussianMLP(5, [8, 8, 8], batchnorm=True, min_std=0.05)
    with torch.no_grad():
        net.head.bias[1] = -20.0  # exp(raw) far below the floor
    mean, std = net(torch.randn(7, 5))
    assert mean.shape == std.shape == (7,)
    assert torch.all(std >= 0.05) and torch.allclose(std, torch.full_like(std, 0.05))
    layers = [type(m).__name__ for m in net.body]
    assert layers == ["Linear", "BatchNorm1d", "ReLU"] * 3


def test_softmax_head_gives_logits_for_every_class():
    net = SoftmaxMLP(4, 3, [16, 8, 4])
    assert net(torch.randn(6, 4)).shape == (6, 3)
    assert [m.out_features for m in net.body if isinstance(m, torch.nn.Linear)] == [16, 8, 4]


def test_build_model_picks_by_task_and_rejects_bad_input():
    assert isinstance(build_model("auto", "regression", 3, None, [4, 4, 4]), GaussianMLP)
    assert isinstance(build_model("auto", "classification", 3, 2, [4, 4, 4]), SoftmaxMLP)
    with pytest.raises(ValueError, match="does not fit a classification"):
        build_model("gaussian_mlp", "classification", 3, 2, [4, 4, 4])
    with pytest.raises(ValueError, match="positive"):
        build_model("auto", "regression", 3, None, [4, 0, 4])
    with pytest.raises(ValueError, match="valid: auto, gaussian_mlp, softmax_mlp"):
        build_model("resnet", "regression", 3, None, [4])
