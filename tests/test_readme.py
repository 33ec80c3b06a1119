"""The README's code must run as printed."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def test_regulariser_snippet_runs_and_trains():
    text = README.read_text()
    section = text.split("## Use the regulariser in your own training loop", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    torch.manual_seed(0)
    exec(compile(code, "README snippet", "exec"), namespace)  # noqa: S102
    assert torch.isfinite(namespace["loss"]) and namespace["mmd"].requires_grad


def test_readme_gives_the_two_setup_commands():
    text = README.read_text()
    assert "make reproduce-regression PROFILE=quick" in text and "make test" in text
