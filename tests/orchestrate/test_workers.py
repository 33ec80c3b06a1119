"""kcal.orchestrate.workers: a pool worker does not outlive the reproduction that started it."""

import os
import signal
import subprocess
import sys
import time

import pytest

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


def test_progress_weighs_a_trial_by_its_dataset_and_regulariser():
    """A reproduction's ETA counts a blog trial (36k training rows) as more work than a crime one."""
    from hydra import compose, initialize_config_dir

    from kcal.configs import CONFIG_DIR
    from kcal.orchestrate.workers import DRAWS_COST, REGULARISER_COST, work_cost

    def cfg(dataset, objective):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            return compose("sweep", overrides=[f"dataset={dataset}", f"objective={objective}"])

    crime, blog = work_cost(cfg("crime", "nll")), work_cost(cfg("blog", "nll"))
    assert crime == pytest.approx(1.395) and blog / crime > 20
    assert work_cost(cfg("crime", "nll_mmd")) == pytest.approx(REGULARISER_COST["mmd"] * crime)
    # Table 6's reruns: an MMD of M draws costs more with M (fewer than the default 10 count as 10)
    m200, m1 = cfg("crime", "nll_mmd"), cfg("crime", "nll_mmd")
    m200.objective.params.num_samples, m1.objective.params.num_samples = 200, 1
    assert work_cost(m200) == pytest.approx(REGULARISER_COST["mmd"] * crime * (1 + 190 * DRAWS_COST))
    assert work_cost(m1) == pytest.approx(REGULARISER_COST["mmd"] * crime)
    xe, kde = work_cost(cfg("dry-bean", "xe")), work_cost(cfg("dry-bean", "xe_kde"))
    assert kde == pytest.approx(REGULARISER_COST["kde"] * xe) and kde > work_cost(cfg("dry-bean", "xe_mmce"))


def test_progress_units_weigh_what_the_caller_runs():
    """kcal.sweep.search and kcal.reruns.seeds count trials and seeds; the reproduction weighs them by the stage's cost."""
    from kcal.core.progress import Progress

    progress = Progress(10.0 * 2.0 + 5.0, "protocol")
    progress.unit = 2.0  # a stage whose trials cost 2 units each
    progress.advance(5, "five trials")
    assert progress.done == 10.0 and progress.status().startswith("protocol 40%")


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
