"""What several test files share: the smoke-sized overrides, composing a config, running entry points
(``python -m kcal.<module> ...``) several to one interpreter, and the tolerances of results that different
code paths, shapes or machines compute."""

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from kcal.configs import CONFIG_DIR

#: the smallest end-to-end run: the smoke profile, 128 training rows, one epoch
SMOKE = ["profile=smoke", "dataset.max_train_rows=128", "trainer.max_epochs=1"]
#: a smoke reproduction: one trial per study, the seeds one after the other
SMOKE_REPRODUCTION = [*SMOKE, "seeds_run.vectorized=false", "sweep.n_trials=1"]


def reorder_tol(n_terms: int, abs_sum, dtype) -> float:
    """The most two floating-point sums of the same terms, whose absolute values add up to at most
    ``abs_sum``, can differ when they are added in another order or grouping: by another kernel (a batched
    call, another shape), another CPU's vector width or another thread count. ``n_terms`` bounds the
    additions any one term passes through (a flat sum: its number of terms; nested sums: their lengths
    added). Each result is within ``(n_terms - 1) u abs_sum`` of the exact sum (``u = eps / 2``; Higham,
    *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §4.2), so the two differ by less than
    ``n_terms * eps * abs_sum``, which also covers a last-bit difference in every term (e.g. a vectorised
    against a scalar ``exp``). Tests that compare results of different code paths, shapes or machines use it
    as an absolute tolerance, never bit equality."""
    if isinstance(abs_sum, torch.Tensor):
        abs_sum = abs_sum.detach()
    return n_terms * torch.finfo(dtype).eps * float(abs_sum)


#: relative tolerance (absolute below 1) of a trained run's numbers between code paths that train the same
#: model with sums grouped otherwise (stacked seeds, an epoch's batch constants built in chunks): a float32
#: step's sums then differ by about 1e-7 relative, and a few epochs of training carry that well below 1e-5
TRAINED_RTOL = 1e-5


def assert_numbers_close(a: dict, b: dict, rtol: float = TRAINED_RTOL, what: str = "") -> None:
    """Two flat dicts of results (a run's metrics, a history row): the same keys, every number within ``rtol``
    (relative above 1, absolute below; NaN only for NaN), everything else equal (status, epochs as ints)."""
    assert a.keys() == b.keys(), (what, set(a) ^ set(b))
    for key, want in b.items():
        got = a[key]
        if isinstance(want, float) and isinstance(got, float):
            if math.isnan(want):
                assert math.isnan(got), (what, key, got, want)
            else:
                assert abs(got - want) <= rtol * max(1.0, abs(want)), (what, key, got, want)
        else:
            assert got == want, (what, key, got, want)


def assert_runs_close(a: Path, b: Path, rtol: float = TRAINED_RTOL) -> None:
    """The ``metrics.json`` and ``history.csv`` of two run directories, per :func:`assert_numbers_close`."""
    assert_numbers_close(json.loads((a / "metrics.json").read_text()), json.loads((b / "metrics.json").read_text()),
                         rtol, "metrics.json")  # fmt: skip
    rows_a, rows_b = (list(csv.DictReader((d / "history.csv").open())) for d in (a, b))
    assert len(rows_a) == len(rows_b), "history.csv"
    for ra, rb in zip(rows_a, rows_b, strict=True):
        as_numbers = [{k: float(v) if v else v for k, v in row.items()} for row in (ra, rb)]
        assert_numbers_close(*as_numbers, rtol, f"history.csv epoch {rb['epoch']}")


def compose_cfg(config_name: str, *overrides: str):
    """``config_name`` (train, sweep, seeds, reproduce, ablation) composed from the package's configs."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name, overrides=list(overrides))


def trial_rows(db: Path) -> list[tuple[str, int, str, dict]]:
    """(study name, number, state, user attributes) of every trial in the study file ``db``, read by plain SQL
    in milliseconds (a poll through ``optuna.load_study`` takes long enough to miss a short trial on a loaded
    machine, and the CPU it takes is the watched run's); none while the file or its schema is not there yet or
    it is locked."""
    import sqlite3

    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            trials = con.execute(
                "SELECT t.trial_id, s.study_name, t.number, t.state FROM trials t JOIN studies s USING (study_id)"
            ).fetchall()
            attrs = con.execute("SELECT trial_id, key, value_json FROM trial_user_attributes").fetchall()
    except sqlite3.OperationalError:
        return []
    by_id: dict[int, dict] = {}
    for trial_id, key, value in attrs:
        by_id.setdefault(trial_id, {})[key] = json.loads(value)
    return [(study, number, state, by_id.get(trial_id, {})) for trial_id, study, number, state in trials]


def copy_root(root: Path, dest: Path) -> Path:
    """A copy of a reproduction root (its study storage, sweeps and seeds) at ``dest``."""
    shutil.copytree(root, dest)
    return dest


# Each call runs as ``python -m`` runs it (runpy, ``__main__``, sys.argv), with file descriptors 1 and 2
# sent to files of its own, so its exit status, stdout and stderr are its own; warning filters (and so which
# warnings were already shown) and the root logger are put back as they were before the first call. The
# interpreter and what it imported (torch, Lightning, Hydra) are shared: output printed once per process
# at import shows in the first call only, so a batch starts with its strictest check of stderr.
_RUNNER = r"""
import json, logging, os, runpy, sys, tempfile, traceback, warnings

warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package",
                        category=RuntimeWarning)
filters, handlers, level = list(warnings.filters), list(logging.root.handlers), logging.root.level
calls, results_file, results = json.loads(sys.argv[1]), sys.argv[2], []
for module, args in calls:
    warnings.filters[:] = filters
    warnings._filters_mutated()  # warnings shown by an earlier call show again
    logging.root.handlers[:] = handlers
    logging.root.setLevel(level)
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = [module, *args]
        code = 0
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
            if exit_.code is not None and not isinstance(exit_.code, int):
                print(exit_.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        out.seek(0)
        err.seek(0)
        results.append([code, out.read().decode(), err.read().decode()])
with open(results_file, "w") as f:
    json.dump(results, f)
"""


def run_modules(
    calls: list[tuple[str, list[str]]], env: dict | None = None, cwd: Path | None = None, timeout: int = 300
) -> list[subprocess.CompletedProcess]:
    """``python -m module *args`` for each ``(module, args)`` of ``calls``, in order, in one subprocess (in
    ``cwd``, with this environment updated by ``env``); one CompletedProcess (returncode, stdout, stderr)
    per call."""
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.json"
        done = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(calls), results], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)  # fmt: skip
        assert done.returncode == 0 and results.is_file(), done.stderr[-2000:]
        outcomes = json.loads(results.read_text())
    return [
        subprocess.CompletedProcess([sys.executable, "-m", module, *args], code, out, err)
        for (module, args), (code, out, err) in zip(calls, outcomes, strict=True)
    ]
