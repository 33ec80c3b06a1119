"""The measurement programs docs/speed.md and docs/results/bench/README.md quote (``python -m kcal.bench.<name>``,
``python -m kcal.publish.questions.trial_range``) run, and print what they say."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from ..common import run_modules
from ..data.conftest import mirror_has, needs

#: the timing programs on crime, each as ``python -m`` runs it, all in one interpreter (tests/common.py): one start
#: of torch and the engine instead of four
CRIME_PROGRAMS = {
    "epoch_ratio": ("kcal.bench.epoch_ratio", ["crime", "1"]),
    "stack_epoch": (
        "kcal.bench.stack_epoch",
        ["crime", "nll_mmd", "3", "dataset.max_train_rows=128", "--repeats=1"],
    ),
    "adam_step": ("kcal.bench.adam_step", ["crime", "nll", "3", "dataset.max_train_rows=128", "--pairs=1"]),
    "xkernel_identity": ("kcal.bench.xkernel_identity", ["--dataset", "crime", "--bandwidths", "1.25"]),
}


@pytest.fixture(scope="module")
def crime_programs() -> dict[str, str]:
    """Each of :data:`CRIME_PROGRAMS`' stdout, by name, once each exited 0."""
    if not mirror_has("crime"):
        pytest.skip("crime not available offline (set KCAL_DATA_DIR to the shared mirror)")
    runs = run_modules(list(CRIME_PROGRAMS.values()), timeout=900)
    for name, done in zip(CRIME_PROGRAMS, runs, strict=True):
        assert done.returncode == 0, (name, done.stderr[-2000:])
    return {name: done.stdout for name, done in zip(CRIME_PROGRAMS, runs, strict=True)}


@needs("crime")
def test_epoch_ratio_prints_both_epochs_and_the_pair_ratio(crime_programs):
    out = crime_programs["epoch_ratio"]
    assert re.search(r"crime: nll [\d.]+ ms/epoch, nll_mmd [\d.]+ ms/epoch; ratio median [\d.]+x", out)


@needs("crime")
def test_compile_step_times_eager_and_compiled_steps():
    out = subprocess.run([sys.executable, "-m", "kcal.bench.compile_step", "crime", "1"],
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
def test_stack_epoch_times_training_and_validation_apart(crime_programs):
    out = crime_programs["stack_epoch"]
    assert re.search(r"crime nll_mmd x3 dataset.max_train_rows=128: train [\d.]+ s/epoch, validation [\d.]+ s/epoch",
                     out)  # fmt: skip


@needs("crime")
def test_adam_step_times_the_engines_adam_against_torchs_fused_adam_in_turns(crime_programs):
    out = crime_programs["adam_step"]
    assert out.startswith("crime nll x3 dataset.max_train_rows=128 (n=1 pairs)")
    for what in ("epoch", "epoch CPU", "training steps"):
        assert re.search(rf"  {what}: fused [\d.]+ ms, lane [\d.]+ ms; lane / fused median [\d.]+x", out)


def test_trial_range_places_values_among_the_trials_test_metrics(tmp_path):
    trials = tmp_path / "adult" / "xe" / "sweep" / "trials"
    for n, acc in enumerate([0.80, 0.84, 0.85, 0.83]):
        (trials / f"trial_{n:04d}").mkdir(parents=True)
        (trials / f"trial_{n:04d}" / "metrics.json").write_text(json.dumps({"status": "ok", "test/acc": acc}))
    (trials / "trial_0004").mkdir()
    (trials / "trial_0004" / "metrics.json").write_text(json.dumps({"status": "failed", "test/acc": 0.99}))
    (trials.parent / "best.json").write_text(json.dumps({"trial": 2}))
    cmd = [
        sys.executable,
        "-m",
        "kcal.publish.questions.trial_range",
        str(tmp_path),
        "adult",
        "xe",
        "test/acc",
        "0.845",
        "0.9",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.splitlines() == [
        "adult/xe",
        "  test/acc over 4 finished trials: min 0.8000, median 0.8350, max 0.8500",
        "  the selected trial #2: 0.8500 (above 3)",
        "  0.845 is above 3 of 4 trials (inside their range)",
        "  0.9 is above 4 of 4 trials (outside their range)",
    ]
    missing = subprocess.run([*cmd[:6], "test/ece", "0.1"], capture_output=True, text=True, timeout=60)
    assert (
        missing.returncode == 1
        and missing.stderr.count("\n") == 1
        and "no finished trial with test/ece" in missing.stderr
    )


def test_smallest_distinct_pair_in_blocks_equals_the_whole_matrix():
    import torch

    from kcal.bench.xkernel_identity import smallest_distinct_pair

    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 5, generator=g, dtype=torch.float64)
    d2 = torch.cdist(x, x) ** 2
    d2.fill_diagonal_(float("inf"))
    assert smallest_distinct_pair(x, block=8) == pytest.approx(float(d2.min()), rel=1e-9)
    x[30] = x[3]  # a duplicated row, in another block: distance 0, not the diagonal's
    assert smallest_distinct_pair(x, block=8) == pytest.approx(0.0, abs=1e-12)


@needs("crime")
def test_xkernel_identity_tabulates_a_given_bandwidth(crime_programs):
    out = crime_programs["xkernel_identity"]
    assert re.search(r"crime: \d+ training rows x \d+ features", out)
    assert re.search(
        r"^\| 1\.25 \| [\d.e+-]+ \| [\d.e+-]+ \| [\d.e+-]+ \| [\d.e+-]+ \| [\d.e+-]+ \|$", out, re.M
    )
    assert "smallest d^2 over all pairs of training rows" in out
