"""Networks: Gaussian MLP (regression) and softmax MLP (classification)."""

from kcal.models.mlp import MODEL_KINDS, GaussianMLP, SoftmaxMLP, build_model

__all__ = ["MODEL_KINDS", "GaussianMLP", "SoftmaxMLP", "build_model"]
