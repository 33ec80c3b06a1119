"""The measurement scripts the README and docs/results/bench/README.md quote run, and print what they say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .data.conftest import needs

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@needs("crime")
def test_epoch_ratio_prints_both_epochs_and_the_pair_ratio():
    out = subprocess.run([sys.executable, str(SCRIPTS / "epoch_ratio.py"), "crime", "1"],
                         capture_output=True, text=True, check=True, timeout=300)  # fmt: skip
    assert re.search(r"crime: nll [\d.]+ ms/epoch, nll_mmd [\d.]+ ms/epoch; ratio median [\d.]+x", out.stdout)


@needs("crime")
def test_compile_step_times_eager_and_compiled_steps():
    out = subprocess.run([sys.executable, str(SCRIPTS / "compile_step.py"), "crime", "1"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    if out.returncode and re.search(r"CppCompileError|InvalidCxxCompiler|Python\.h", out.stderr):
        pytest.skip(
            "torch.compile's CPU code generator has no working C++ toolchain here (.ci/run installs g++)"
        )
    assert out.returncode == 0, out.stderr[-2000:]
    for obj in ("nll", "nll_mmd"):
        assert re.search(
            rf"  {obj}: eager [\d.]+ ms/step, compiled [\d.]+ ms/step: compiled is [\d.]+x", out.stdout
        )
    assert re.search(r"MMD overhead \(nll_mmd / nll\): eager [\d.]+x, compiled [\d.]+x", out.stdout)


@needs("crime")
def test_stack_epoch_times_training_and_validation_apart():
    cmd = [sys.executable, str(SCRIPTS / "stack_epoch.py"), "crime", "nll_mmd", "3", "dataset.max_train_rows=128",
           "--repeats=1"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
    assert re.search(r"crime nll_mmd x3 dataset.max_train_rows=128: train [\d.]+ s/epoch, validation [\d.]+ s/epoch",
                     out.stdout)  # fmt: skip
