"""kcal.orchestrate.workers and its parts: a pool worker does not outlive the reproduction that started it, and a
worker that dies costs only its own task, which is trained again under its own number."""

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from ..common import trial_rows
from ..data.conftest import needs

# The middle process plays the reproduction: it starts one worker watched by exit_with_parent (spawned, or forked
# by the pool's fork server as the pool's are), prints the worker's pid, and waits. The worker would sleep for 10
# minutes if nothing stopped it.
PARENT = """
import multiprocessing as mp, os, sys, time
from kcal.orchestrate.tasks import exit_with_parent

def worker(parent, watching):
    import threading
    threading.Thread(target=exit_with_parent, args=(parent, 0.2), daemon=True).start()
    open(watching, "w").close()
    time.sleep(600)

if __name__ == "__main__":
    p = mp.get_context(sys.argv[1]).Process(target=worker, args=(os.getpid(), sys.argv[2]))
    p.start()
    print(p.pid, flush=True)
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead, only not yet reaped
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_worker_exits_when_its_parent_is_killed(tmp_path, start):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    watching = tmp_path / "watching"
    parent = subprocess.Popen(
        [sys.executable, str(script), start, str(watching)], stdout=subprocess.PIPE, text=True
    )
    worker = None
    try:
        worker = int(parent.stdout.readline())
        wait_for(lambda: watching.exists() or not alive(worker), 120, "the worker's watchdog")
        time.sleep(1.0)  # five of the watchdog's polls: a worker whose parent lives goes on
        assert alive(worker), "the worker exited while its parent ran"
        parent.send_signal(signal.SIGKILL)  # no handler runs: only the worker's watchdog can notice
        parent.wait(timeout=10)
        deadline = time.monotonic() + 30
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(worker), "the worker kept running after its parent was killed"
    finally:
        parent.kill()
        if worker is not None and alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_progress_units_weigh_what_the_caller_runs():
    """kcal.sweep.search and kcal.reruns.seeds count trials and seeds; the reproduction's stage weighs them."""
    from kcal.core.progress import Progress

    class Stage:
        def piece(self, family, n):
            return (family, "crime", "nll"), (2.0 * n if family == "trial" else 1.0 + n)

    progress = Progress(10.0 * 2.0 + 5.0, "protocol")
    progress.stage = Stage()  # a stage whose trials cost 2 units each
    progress.advance(5, "five trials")
    assert progress.done == 10.0 and progress.status().startswith("protocol 40%")
    progress.advance(4, "a chunk of four seeds", "seeds")
    assert progress.done == 15.0


def test_seed_reruns_are_split_over_the_pools_workers():
    from omegaconf import OmegaConf

    from kcal.reruns.seeds import chunks

    cfg = OmegaConf.create({"seeds_run": {"chunk_size": 50, "vectorized": True}})
    sizes = lambda seeds, parts: [len(c) for c in chunks(cfg, seeds, parts)]  # noqa: E731
    assert sizes(list(range(50)), 1) == [50] and sizes(list(range(50)), 2) == [25, 25]
    assert sizes(list(range(5)), 2) == [3, 2] and chunks(cfg, [7], 4) == [[7]] and chunks(cfg, [], 2) == []
    cfg.seeds_run.chunk_size = 10
    assert sizes(list(range(50)), 2) == [10] * 5
    cfg.seeds_run.vectorized = False
    assert sizes(list(range(3)), 2) == [1, 1, 1]


def test_a_pools_parent_does_not_import_lightning():
    # the parent plans and schedules; importing Lightning (~3 s) there delayed every worker's start
    code = "import sys, kcal.orchestrate.reproduce; print('pytorch_lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_core_scaling_script_runs():
    out = subprocess.run([sys.executable, "-m", "kcal.bench.core_scaling", "--steps", "5", "--repeats", "1"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert "scaling: min" in out.stdout


# a smoke reproduction of heart-disease's XE, XE + MMD and XE + MMCE on 3 workers: 2 trials each of 40 epochs
# (about a second or two each, so a poll sees a worker in the middle of one; one trial of a study at a time, so
# three studies keep three workers training) and 2 seeds, one chunk each
DEAD_TRIALS, DEAD_SEEDS = 2, 2
DEAD_WORKER_RUN = ["task=classification", "reproduce.datasets=[heart-disease]", "reproduce.objectives=[xe,xe_mmd,xe_mmce]",
                   "reproduce.jobs=3", "reproduce.tables=false", "profile=smoke", f"sweep.n_trials={DEAD_TRIALS}",
                   f"seeds_run.n_seeds={DEAD_SEEDS}", "seeds_run.vectorized=false", "trainer.max_epochs=40",
                   "trainer.min_epochs=40"]  # fmt: skip
OBJECTIVES = ("xe", "xe_mmd", "xe_mmce")


def wait_for(condition, timeout: float, what: str, poll_s: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"no {what} after {timeout} s")


@pytest.mark.slow
@needs("heart-disease")
def test_a_dead_worker_costs_only_its_task(tmp_path):
    """SIGKILL one of three workers in the middle of a trial: a new worker takes its place and trains that trial
    again under its own number, the two others keep their processes and finish the trials they were training,
    and the run ends with every trial and seed once."""
    import optuna

    from kcal.core import layout
    from kcal.orchestrate.soak import count_problems, pool_workers, study_of

    root, err = tmp_path / "root", tmp_path / "stderr.log"
    with err.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kcal", "reproduce", *DEAD_WORKER_RUN, f"root={root}"],
                                stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)  # fmt: skip
    try:

        def training() -> dict[int, tuple[str, int]] | None:
            """(objective, trial number) in training, by worker pid, once all three workers train one."""
            running = {}
            # plain SQL: a light poll
            for study, number, state, attrs in trial_rows(layout.storage_file(root)):
                if state == "RUNNING" and "pid" in attrs:
                    running[attrs["pid"]] = (layout.parse_study_name(study)[1], number)
            workers = pool_workers(proc.pid)
            return running if len(workers) == 3 and set(workers) <= set(running) else None

        running = wait_for(training, 300, "three workers training at once")
        victim = min(running)
        os.kill(victim, signal.SIGKILL)
        others = {pid: running[pid] for pid in running if pid != victim}
        line = wait_for(lambda: [ln for ln in err.read_text().splitlines() if "a new worker took its place" in ln],
                        120, "line about the dead worker")  # fmt: skip
        objective, number = running[victim]
        assert len(line) == 1 and f"pid {victim}, SIGKILL" in line[0], line
        assert f"trial #{number} of heart-disease/{objective}" in line[0] and "trained again" in line[0], line
        assert all(alive(pid) for pid in others), "the other workers were stopped with the dead one"
        assert set(others) <= set(pool_workers(proc.pid)) and len(pool_workers(proc.pid)) == 3
        assert proc.wait(timeout=600) == 0, err.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log = err.read_text()
    assert "pool started again" not in log and log.count("a new worker took its place") == 1, log[-3000:]
    for pid, (objective, number) in running.items():  # the victim's trial too: trained again, same number
        trial = study_of(root, "heart-disease", objective).get_trials(deepcopy=False)[number]
        assert trial.state == optuna.trial.TrialState.COMPLETE, (pid == victim, trial)
    for objective in OBJECTIVES:
        assert (
            count_problems(root, "heart-disease", objective, DEAD_TRIALS, DEAD_SEEDS) == []
        )  # each trial, seed once


@needs("heart-disease")  # the study's fingerprint hashes its raw file
def test_workers_that_die_in_a_row_stop_the_run_in_one_line(tmp_path, capsys):
    """Workers that die before any task finishes (here: killed as soon as they start, so pebble stops its pool
    each time, or just after its task went in; out of memory on every task, or killed faster than a trial takes,
    alike): a new worker or pool takes the dead one's place max_deaths times per worker (one worker here), then
    the command stops with one line (exit 2)."""
    from kcal.core.errors import IncompleteError
    from kcal.orchestrate import workers
    from kcal.orchestrate.reproduce import protocol_progress

    stage = heart_disease_stage(tmp_path)
    try:
        kill_workers(stop := threading.Event())
        with pytest.raises(
            IncompleteError,
            match=r"3 tasks lost in a row \(2 per worker of 1\) with no task finished",
        ) as err:
            workers.run_workers([stage], 1, protocol_progress([stage], 1), poll_s=0.5, max_deaths=2)
    finally:
        stop.set()
    assert "\n" not in str(err.value)
    # each kill lands either while the worker runs its task (a task's death) or before the task went in (pebble
    # stops the pool; a pool stopped before its task went in costs no task and does not count): which one is
    # timing, so the lines are counted by their setback note; the third setback stops the run before its line
    err = capsys.readouterr().err
    assert err.count("(death ") == 2, err
    assert not multiprocessing.active_children()


@pytest.mark.slow
@needs("heart-disease")
def test_a_pool_stopped_by_a_death_between_tasks_is_replaced(tmp_path, capsys, monkeypatch):
    """A worker killed while no task of the pool runs (here: the first pool's, once its workers have run a task
    that does nothing) makes pebble stop the whole pool: a new one takes its place, the tasks that were queued are
    queued again, and every trial and seed runs once."""
    from kcal.orchestrate import dispatch, workers
    from kcal.orchestrate.reproduce import protocol_progress
    from kcal.orchestrate.soak import count_problems

    first_pool = dispatch.Dispatcher.new_pool
    pools = []

    def new_pool(self):
        pool = first_pool(self)
        if not pools:
            pool.schedule(os.getpid).result(timeout=300)  # pebble starts the workers with a first task
            multiprocessing.active_children()[0].kill()
            wait_for(lambda: not pool.active, 60, "the pool stopped by pebble")
        pools.append(pool)
        return pool

    monkeypatch.setattr(dispatch.Dispatcher, "new_pool", new_pool)
    stage = heart_disease_stage(tmp_path, "sweep.n_trials=3", "seeds_run.n_seeds=2")
    workers.run_workers([stage], 2, protocol_progress([stage], 2), poll_s=0.5)
    err = capsys.readouterr().err
    assert err.count("pool started again") == 1 and re.search(
        r"its [0-3] queued tasks are queued again", err
    ), err
    assert count_problems(tmp_path, "heart-disease", "xe", 3, 2) == []


@pytest.mark.slow
@needs("heart-disease")
def test_a_dead_seed_chunk_is_queued_again(tmp_path, capsys):
    """The pool's one worker killed while it trains a seed: a new worker takes its place and trains the seed
    again (unless it finished just before the kill); every seed once."""
    from kcal.core import layout
    from kcal.orchestrate import workers
    from kcal.orchestrate.reproduce import protocol_progress
    from kcal.orchestrate.soak import count_problems

    stage = heart_disease_stage(tmp_path, "sweep.n_trials=1", "seeds_run.n_seeds=2", "seeds_run.vectorized=false",
                                "trainer.max_epochs=40", "trainer.min_epochs=40")  # fmt: skip
    seeds = [layout.seed_dir(layout.label_dir(tmp_path, "heart-disease", "xe"), k) for k in range(2)]
    stop = threading.Event()

    def kill_while_a_seed_trains():
        while not stop.is_set():
            if any(d.is_dir() and not layout.is_finished(d) for d in seeds):
                multiprocessing.active_children()[0].kill()
                return
            time.sleep(0.05)

    threading.Thread(target=kill_while_a_seed_trains, daemon=True).start()
    try:
        workers.run_workers([stage], 1, protocol_progress([stage], 1), poll_s=0.5)
    finally:
        stop.set()
    err = capsys.readouterr().err
    died = [ln for ln in err.splitlines() if "a new worker took its place" in ln]
    assert len(died) == 1 and re.search(r"while it ran seed [01] of heart-disease/xe", died[0]), err
    assert re.search(r"(0 of its seeds had finished, 1|1 of its seeds had finished, 0) queued again", died[0])
    assert "pool started again" not in err
    assert count_problems(tmp_path, "heart-disease", "xe", 1, 2) == []


def heart_disease_stage(root, *overrides, objective: str = "xe"):
    from hydra import compose, initialize_config_dir

    from kcal.configs import CONFIG_DIR
    from kcal.orchestrate.schedule import Stage

    over = ["dataset=heart-disease", f"objective={objective}", "profile=smoke", f"root={root}", *overrides]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return Stage("heart-disease", objective, compose("seeds", overrides=over), sweeps=True)


def kill_workers(stop: threading.Event) -> None:
    """SIGKILL this process's worker processes as soon as they start, on a thread of its own until ``stop`` is
    set."""

    def kill():
        while not stop.is_set():
            for child in multiprocessing.active_children()[:1]:
                child.kill()
            time.sleep(0.05)

    threading.Thread(target=kill, daemon=True).start()


def test_a_busy_study_storage_costs_the_task_in_one_line(monkeypatch, tmp_path):
    """A worker whose study storage stays locked past SQLite's busy timeout raises TaskLost (the pool counts it
    like a dead worker's task), not Optuna's StorageInternalError (which ended the whole reproduction)."""
    import optuna
    from omegaconf import OmegaConf

    from kcal.core.errors import TaskLost
    from kcal.orchestrate import tasks

    def locked(*args, **kwargs):
        raise optuna.exceptions.StorageInternalError(
            "An exception is raised during the commit.\n(sqlite3) database is locked"
        )

    monkeypatch.setattr(tasks, "open_study", locked)
    cfg = heart_disease_stage(tmp_path).cfg
    with pytest.raises(
        TaskLost,
        match=r"^\[heart-disease/xe\] trial #0: the study storage failed \(An exception is raised during the commit\.\); ",
    ) as exc:
        tasks.trial_task(OmegaConf.to_container(cfg, resolve=True), 0)
    assert "\n" not in str(exc.value)
