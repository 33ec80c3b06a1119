"""Issue 5 end to end: sweeps that survive SIGKILL and share a study, seed reruns that resume, and
tables whose numbers are the aggregates of the per-seed metrics.json files."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from kcal.configs import CONFIG_DIR

from ..common import SMOKE, SMOKE_REPRODUCTION, assert_numbers_close, copy_root, trial_rows
from ..data.conftest import needs

pytestmark = needs("crime", "breast-cancer")
# a killed worker's trial goes stale 3 s after its last heartbeat (the defaults: 60 s / 120 s)
FAST_HEARTBEAT = ["sweep.heartbeat_interval=1", "sweep.grace_period=3"]


def study_counts(root: Path, name: str) -> tuple[int, int, dict]:
    storage = optuna.storages.RDBStorage(f"sqlite:///{root / 'sweeps.db'}")
    study = optuna.load_study(study_name=name, storage=storage)
    from kcal.sweep.studies import counted

    trials = study.get_trials(deepcopy=False)
    statuses = {}
    for t in trials:
        statuses[t.user_attrs.get("kcal_status", t.state.name)] = (
            statuses.get(t.user_attrs.get("kcal_status", t.state.name), 0) + 1
        )
    finished, running = counted(study)
    return finished, running, statuses


def wait_for_trial(db: Path, proc: subprocess.Popen, timeout_s: float, running: Callable, what: str) -> int:
    """The number of the first running trial for which ``running(attrs, finished)`` holds (``finished``: the
    trials done so far), polled every 20 ms; fail if ``proc`` exits first (the window was missed) or after
    ``timeout_s``."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        assert proc.poll() is None, f"the sweep ended (exit {proc.returncode}) before {what}"
        rows = trial_rows(db)
        finished = sum(state in ("COMPLETE", "PRUNED", "FAIL") for _, _, state, _ in rows)
        for _, number, state, attrs in rows:
            if state == "RUNNING" and running(attrs, finished):
                return number
        time.sleep(0.02)
    raise AssertionError(f"not seen within {timeout_s} s: {what}")


def sweep_cmd(root: Path, n_trials: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kcal.sweep.search", "dataset=crime", "objective=nll", *SMOKE, f"root={root}",
            f"sweep.n_trials={n_trials}", f"hydra.run.dir={root}/logs", *extra]  # fmt: skip


def test_sweep_killed_with_sigkill_resumes_to_exactly_n_trials(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # 5 trials of 100 epochs each (under a second each here), killed mid-trial once 2 are done: the window is
    # three whole trials, and the poll (plain SQL) takes milliseconds. The sweep is deterministic (one process
    # asks and tells), so the resumed sweep trains the killed trial again
    cmd = sweep_cmd(tmp_path, 5, "trainer.max_epochs=100", "trainer.min_epochs=100")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_trial(
        tmp_path / "sweeps.db", proc, 240, lambda _, finished: finished >= 2, "a trial after the 2nd ran"
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at, _, _ = study_counts(tmp_path, "crime__nll__paper")
    assert 2 <= killed_at < 5
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    finished, running, statuses = study_counts(tmp_path, "crime__nll__paper")
    assert (finished, running) == (5, 0), statuses
    assert statuses.get("ok", 0) + statuses.get("diverged", 0) + statuses.get("invalid_config", 0) == 5
    assert (tmp_path / "crime" / "nll" / "sweep" / "best.json").is_file()


def test_two_workers_on_one_new_storage_finish_exactly_n_trials(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # both start at once on a file that does not exist yet: both create Optuna's schema
    workers = [subprocess.Popen(sweep_cmd(tmp_path, 5, f"sweep.worker={w}", "sweep.mode=async"), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True) for w in (0, 1)]  # fmt: skip
    errs = []
    for w in workers:
        _, err = w.communicate(timeout=400)
        assert w.returncode == 0, err[-2000:]
        errs.append(err)
    finished, running, statuses = study_counts(tmp_path, "crime__nll__paper")
    assert (finished, running) == (5, 0), statuses
    # one progress line per trial a worker ran, whether or not stderr is a terminal
    lines = [ln for err in errs for ln in err.splitlines() if re.match(r"\[crime/nll\] trial \d+/5 ", ln)]
    assert len(lines) >= 5 and all(" | study " in ln for ln in lines), errs


def test_sigkill_of_one_of_two_workers_mid_trial_retries_its_trial(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # trials of 100 epochs (under a second each here), so the poll below sees worker 0 in the middle of one
    cmd = sweep_cmd(tmp_path, 4, "trainer.max_epochs=100", "trainer.min_epochs=100", *FAST_HEARTBEAT)
    workers = [subprocess.Popen([*cmd, f"sweep.worker={w}", "sweep.mode=async"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True) for w in (0, 1)]  # fmt: skip
    victim = workers[0]
    # kill worker 0 while it trains a trial: its parameters sampled (its run directory recorded)
    killed_trial = wait_for_trial(tmp_path / "sweeps.db", victim, 300,
                                  lambda attrs, _: attrs.get("pid") == victim.pid and "run_dir" in attrs,
                                  "worker 0 ran a trial")  # fmt: skip
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    _, err = workers[1].communicate(timeout=400)
    assert workers[1].returncode == 0, err[-2000:]
    finished, running, statuses = study_counts(tmp_path, "crime__nll__paper")
    assert (finished, running) == (4, 0), statuses
    trials = {t.number: t for t in optuna.load_study(study_name="crime__nll__paper",
                                                     storage=f"sqlite:///{tmp_path / 'sweeps.db'}").trials}  # fmt: skip
    assert trials[killed_trial].state == optuna.trial.TrialState.FAIL
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == killed_trial]
    assert len(retries) == 1 and retries[0].state.is_finished(), statuses
    assert retries[0].params == trials[killed_trial].params
    # nothing counted twice: the killed trial is not among the 4
    counted_numbers = [n for n, t in trials.items() if t.state == optuna.trial.TrialState.COMPLETE
                       or t.user_attrs.get("kcal_status") in ("diverged", "invalid_config")]  # fmt: skip
    assert killed_trial not in counted_numbers and len(counted_numbers) == 4


def test_seed_rerun_resumes_without_recomputing_finished_seeds(tmp_path):
    base = ["dataset=crime", "objective=nll", *SMOKE, f"root={tmp_path}", "seeds_run.use_best=false"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        from kcal.reruns.seeds import run_seeds

        run_seeds(compose("seeds", overrides=[*base, "seeds_run.n_seeds=2", "seeds_run.vectorized=false"]))
        seeds_dir = tmp_path / "crime" / "nll" / "seeds"
        before = {p: p.stat().st_mtime_ns for p in seeds_dir.glob("seed*/metrics.json")}
        assert len(before) == 2
        (seeds_dir / "seed1" / "metrics.json").unlink()  # as if killed while seed 1 was training
        summary = run_seeds(
            compose("seeds", overrides=[*base, "seeds_run.n_seeds=3", "seeds_run.vectorized=false"])
        )
    assert (seeds_dir / "seed0" / "metrics.json").stat().st_mtime_ns == before[
        seeds_dir / "seed0" / "metrics.json"
    ]
    assert all((seeds_dir / f"seed{k}" / "metrics.json").is_file() for k in range(3))
    assert set(summary["n"]) == {3}


@pytest.mark.parametrize("limit, drawn", [(None, [0, 1, 2]), (1, [0])])
def test_seed_reruns_draw_per_run_figures_for_seeds_below_the_limit(tmp_path, limit, drawn):
    overrides = ["dataset=crime", "objective=nll", *SMOKE, f"root={tmp_path}", "seeds_run.use_best=false",
                 "seeds_run.n_seeds=3", "figures=true"] + ([] if limit == 1 else ["seeds_run.figures=null"])  # fmt: skip
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        from kcal.reruns.seeds import run_seeds

        run_seeds(compose("seeds", overrides=overrides))  # the default limit is 1
    seeds_dir = tmp_path / "crime" / "nll" / "seeds"
    assert all((seeds_dir / f"seed{k}" / "metrics.json").is_file() for k in range(3))
    assert [k for k in range(3) if list((seeds_dir / f"seed{k}" / "figures").glob("*.png"))] == drawn


def _cell(text: str, mean: float, se: float, scale: float = 1.0) -> bool:
    return f"{mean * scale:.3f} $\\pm$ {se * scale:.3f}" in text


def test_smoke_reproduction_tables_equal_the_seed_aggregates(tmp_path, regression_smoke_root):
    # the regression half (crime: nll, nll_mmd) is the session's smoke reproduction (tests/conftest.py, one
    # job); the classification half is added to a copy of it here, on the default worker pool
    root = copy_root(regression_smoke_root, tmp_path / "root")
    common = [*SMOKE_REPRODUCTION, f"root={root}"]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        from kcal.orchestrate.reproduce import reproduce

        cls = compose("reproduce", overrides=[*common, "task=classification", "reproduce.datasets=[breast-cancer]",
                                              "reproduce.objectives=[xe,xe_mmd]"])  # fmt: skip
        results_csv = reproduce(cls, common)
    results = pd.read_csv(results_csv)
    assert {"crime", "breast-cancer"} <= set(results.dataset)
    tables = root / "tables"
    # every aggregate equals the mean / SE of the seeds' metrics.json values
    for (ds, obj, key, recal, flavour, metric) in [("crime", "nll_mmd", "test/qce", "none", "exact", "qce"),
                                                   ("crime", "nll", "official/test_recal/nll", "post-hoc", "official", "nll"),
                                                   ("breast-cancer", "xe_mmd", "test/acc", "none", "exact", "acc"),
                                                   ("breast-cancer", "xe", "test_recal/ece", "post-hoc", "exact", "ece")]:  # fmt: skip
        values = np.array(
            [json.loads(p.read_text())[key] for p in (root / ds / obj / "seeds").glob("seed*/metrics.json")]
        )
        row = results[(results.dataset == ds) & (results.objective == obj) & (results.recalibrator == recal)
                      & (results.flavour == flavour) & (results.metric == metric)].iloc[0]  # fmt: skip
        assert row["n"] == len(values) == 2
        assert row["mean"] == pytest.approx(values.mean(), rel=1e-12)
        assert row["se"] == pytest.approx(values.std(ddof=1) / np.sqrt(len(values)), rel=1e-9)
        table = {
            "crime": "table3_regression",
            "breast-cancer": "table5_classification_tempscaling"
            if recal != "none"
            else "table4_classification",
        }[ds]
        tex = (tables / f"{table}_{flavour}.tex").read_text()
        assert _cell(tex, row["mean"], row["se"], 100.0 if metric == "acc" else 1.0), (table, metric)
    for name in (
        "table6_sample_size_exact.tex",
        "table7_decision_kernel_official.tex",
        "claims.md",
        "comparison_exact.md",
    ):
        assert (tables / name).is_file()
    claims = (tables / "claims.md").read_text()
    r1 = r"^R1 \[profile smoke: not evidence\] \(§6\.2, Results\) .* Read as: NLL \+ MMD better than NLL in QCE"
    assert re.search(r1, claims, re.M)


def test_seed_reruns_agree_on_one_or_two_jobs(tmp_path, capsys):
    """One trial (worker 0's first suggestion either way), so the best trial is the same; its seeds'
    metrics must agree whether they ran in this process or in the pool. Two jobs split the two seeds into
    two stacks of one where one job trains one stack of two, so the batched kernels' shapes differ: equal
    to a trained run's rounding (bit for bit on this project's CPU). The protocol's progress reaches 100 %
    with its last line (the results), never before."""
    own = ["task=classification", "reproduce.datasets=[breast-cancer]", "reproduce.objectives=[xe]",
           "reproduce.tables=false"]  # fmt: skip
    metrics = {}
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        from kcal.orchestrate.reproduce import reproduce

        for jobs in (1, 2):
            root = tmp_path / f"jobs{jobs}"
            user = [*SMOKE, "sweep.n_trials=1", "seeds_run.n_seeds=2", f"root={root}"]
            reproduce(compose("reproduce", overrides=[*user, *own, f"reproduce.jobs={jobs}"]), user)
            metrics[jobs] = [json.loads((root / "breast-cancer" / "xe" / "seeds" / f"seed{k}" / "metrics.json").read_text())
                             for k in range(2)]  # fmt: skip
            lines = [ln for ln in capsys.readouterr().err.splitlines() if "| protocol " in ln]
            assert lines[-1].startswith("results: ") and lines[-1].endswith("| protocol 100%"), lines
            assert not [ln for ln in lines[:-1] if "protocol 100%" in ln], lines
    for k in range(2):
        assert_numbers_close(metrics[2][k], metrics[1][k], what=f"seed{k}")


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_the_progress_plan_is_the_work_the_pool_advances(tmp_path, jobs):
    """5 vectorised seeds on 2 workers train as chunks of 3 and 2, which weigh more than one chunk of 5: the
    plan counts the chunks that will run, so the protocol does not reach 100 % before its last chunk."""
    from kcal.orchestrate.reproduce import protocol_progress
    from kcal.orchestrate.workers import Stage
    from kcal.reruns.seeds import chunks

    over = ["dataset=breast-cancer", "objective=xe", "sweep.n_trials=4", "seeds_run.n_seeds=5",
            "seeds_run.vectorized=true", f"root={tmp_path}"]  # fmt: skip
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        st = Stage("breast-cancer", "xe", compose("seeds", overrides=over), sweeps=True)
    progress = protocol_progress([st], jobs)
    sizes = [len(c) for c in chunks(st.cfg, list(range(5)), parts=jobs)]
    planned = 4 * st.prediction.trial_s + sum(st.prediction.chunk(k) for k in sizes)
    assert progress.total == pytest.approx(planned) and progress.done == 0
    assert progress.forecast.seconds_left() >= planned / jobs
    for k in range(4):
        progress.advance(1, f"trial {k}", "trial", st.prediction.trial_s, stage=st)
    for k in sizes:
        progress.advance(k, f"{k} seeds", "seeds", st.prediction.chunk(k), stage=st)
    assert progress.done == pytest.approx(planned) and progress.forecast.work_left() == 0
    assert progress.status() == "protocol 99%"  # done, but only finish() says 100 %
    progress.finish("results")
    assert progress.status() == "protocol 100%"
