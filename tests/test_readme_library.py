"""The library guide's examples (docs/library.md: LightningModule, classification loss, the calibration recipe
on crime) run as printed."""

import re
from pathlib import Path

import torch

from .data.conftest import needs

LIBRARY = Path(__file__).resolve().parents[1] / "docs" / "library.md"
SECTION = "## Use the regulariser in your own training loop"


def _blocks() -> list[str]:
    text = LIBRARY.read_text()
    section = text.split(SECTION, 1)[1].split("\n## Conventions", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _run(code: str, name: str) -> dict:
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(code, name, "exec"), namespace)  # noqa: S102
    return namespace


def test_the_section_has_the_three_examples():
    blocks = _blocks()
    assert len(blocks) == 3
    assert "pl.LightningModule" in blocks[0] and "MMDCalibrationLoss" in blocks[0]
    assert "KernelCalibrationError" in blocks[0] and 'task="classification"' in blocks[1]
    assert 'load("crime")' in blocks[2] and "IsotonicQuantileRecalibrator" in blocks[2]


@needs("crime")
def test_calibration_recipe_runs_on_crime_and_prints_what_the_guide_shows(capsys):
    ns = _run(_blocks()[2], "library guide calibration recipe")
    printed = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in printed] == ["lambda     0", "lambda   100"]
    shown = LIBRARY.read_text().split("It printed", 1)[1].split("```")[1].strip().splitlines()
    for line, expected in zip(printed, shown, strict=True):  # the same numbers, to the digits shown
        assert line == expected, (line, expected)
    assert isinstance(ns["fit"](100.0, seed=0, epochs=1), torch.nn.Module)


def test_lightning_example_trains_and_logs_the_metric_classes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # nothing is written, but keep the checkout clean if Lightning changes
    ns = _run(_blocks()[0], "library guide LightningModule example")
    metrics = ns["trainer"].callback_metrics
    assert {"val/qce", "val/nll", "val/crps", "val/kce", "train/loss"} <= set(metrics)
    assert all(torch.isfinite(v) for v in metrics.values())
    printed = capsys.readouterr().out
    assert "'val/qce':" in printed and "'val/kce':" in printed
    assert not any(tmp_path.iterdir())


def test_classification_example_runs(capsys):
    ns = _run(_blocks()[1], "library guide classification example")
    assert ns["logits"].grad is not None and torch.isfinite(ns["loss"])
    assert capsys.readouterr().out.startswith("ECE ")
