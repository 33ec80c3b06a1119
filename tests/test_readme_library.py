"""The README's library examples (LightningModule, classification loss) run as printed."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Use the regulariser in your own training loop"


def _blocks() -> list[str]:
    text = README.read_text()
    section = text.split(SECTION, 1)[1].split("\n## Conventions", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _run(code: str, name: str) -> dict:
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(code, name, "exec"), namespace)  # noqa: S102
    return namespace


def test_the_section_has_the_three_examples():
    blocks = _blocks()
    assert len(blocks) == 3
    assert "pl.LightningModule" in blocks[1] and "MMDCalibrationLoss" in blocks[1]
    assert "KernelCalibrationError" in blocks[1] and 'task="classification"' in blocks[2]


def test_lightning_example_trains_and_logs_the_metric_classes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # nothing is written, but keep the checkout clean if Lightning changes
    ns = _run(_blocks()[1], "README LightningModule example")
    metrics = ns["trainer"].callback_metrics
    assert {"val/qce", "val/nll", "val/crps", "val/kce", "train/loss"} <= set(metrics)
    assert all(torch.isfinite(v) for v in metrics.values())
    printed = capsys.readouterr().out
    assert "'val/qce':" in printed and "'val/kce':" in printed
    assert not any(tmp_path.iterdir())


def test_classification_example_runs(capsys):
    ns = _run(_blocks()[2], "README classification example")
    assert ns["logits"].grad is not None and torch.isfinite(ns["loss"])
    assert capsys.readouterr().out.startswith("ECE ")
