"""kcal.orchestrate.workers: a pool worker does not outlive the reproduction that started it."""

import os
import signal
import subprocess
import sys
import time

# The middle process plays the reproduction: it starts one worker watched by exit_with_parent, prints
# the worker's pid, and waits. The worker would sleep for 10 minutes if nothing stopped it.
PARENT = """
import multiprocessing as mp, os, sys, time
from kcal.orchestrate.workers import exit_with_parent

def worker(parent):
    import threading
    threading.Thread(target=exit_with_parent, args=(parent, 0.2), daemon=True).start()
    time.sleep(600)

if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=worker, args=(os.getpid(),))
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


def test_worker_exits_when_its_parent_is_killed(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        worker = int(parent.stdout.readline())
        assert alive(worker)
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


def test_a_pool_that_keeps_breaking_gives_up_in_one_line(monkeypatch, capsys):
    """Workers that die before any task finishes (killed faster than a trial takes, or out of memory on every
    task): the pool starts again max_restarts times, then the command stops with one line (exit 2)."""
    from concurrent.futures.process import BrokenProcessPool

    import pytest

    from kcal.core.errors import IncompleteError
    from kcal.core.progress import Progress
    from kcal.orchestrate import workers

    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise BrokenProcessPool("a process in the pool was terminated abruptly")

    monkeypatch.setattr(workers, "run_pool_once", broken)
    with pytest.raises(IncompleteError, match="broke 3 times in a row with no task finished") as err:
        workers.run_pool([], 1, Progress(0, "test"), max_restarts=2)
    assert len(calls) == 3 and "\n" not in str(err.value)
    assert capsys.readouterr().err.count("pool started again") == 2
