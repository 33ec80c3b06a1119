"""kcal variant-report: a finished protocol run on N workers (or pruned) is published apart, with its provenance, and fills the
report's section; a root whose protocol has not finished is refused in one line. Synthetic roots (a small Optuna
study per objective, seed folders, the published heart-disease rows as results) and a synthetic report."""

import json
import os
import shutil
from pathlib import Path

import optuna
import pandas as pd
import pytest
from omegaconf import OmegaConf

from kcal.core import layout
from kcal.paper import PAPER_OBJECTIVES
from kcal.publish.report import check, data_dir, render, report_info
from kcal.publish.report import main as report_main
from kcal.publish.variant_report import main

OBJECTIVES = PAPER_OBJECTIVES["classification"]
DATASET = "heart-disease"
N_TRIALS, N_SEEDS = 3, 2


def published(file: str, dataset: str = DATASET) -> pd.DataFrame:
    frame = pd.read_csv(data_dir("full") / file)
    return frame[frame["dataset"] == dataset].reset_index(drop=True)


def sitting(
    root: Path, started: str, jobs: int | None, seed: int, sweep: dict | None = None, dataset: str = DATASET
) -> None:
    folder = root / "logs" / f"{started}_classification" / ".hydra"
    folder.mkdir(parents=True)
    config = {"task": "classification", "profile_name": "full",
              "reproduce": {"jobs": jobs, "datasets": [dataset], "objectives": None},
              "sweep": {"n_trials": N_TRIALS, "sampler_seed": seed, **(sweep or {})},
              "seeds_run": {"n_seeds": N_SEEDS}}  # fmt: skip
    OmegaConf.save(OmegaConf.create(config), folder / "config.yaml")
    overrides = ["task=classification", "profile=full", f"reproduce.datasets=[{dataset}]",
                 f"sweep.sampler_seed={seed}", *(f"sweep.{k}={v}" for k, v in (sweep or {}).items()),
                 f"reproduce.jobs={jobs}", f"root={root}"]  # fmt: skip
    OmegaConf.save(OmegaConf.create(overrides), folder / "overrides.yaml")


def make_root(root: Path, jobs: int = 8, seed: int = 7, trials: dict | None = None, seeds: dict | None = None,
              shift: float = 0.0, sweep: dict | None = None, dataset: str = DATASET) -> Path:  # fmt: skip
    """A finished protocol run of ``dataset``'s four objectives (``trials`` / ``seeds``: fewer for some)."""
    root.mkdir(parents=True)
    sitting(root, "2026-01-01_00-00-00", jobs, seed, sweep, dataset)
    url = layout.sqlite_url(root)
    lr = optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)
    for objective in OBJECTIVES:
        n = (trials or {}).get(objective, N_TRIALS)
        if n is not None:
            study = optuna.create_study(study_name=layout.study_name(dataset, objective, "paper"), storage=url,
                                        direction="maximize")  # fmt: skip
            for i in range(n):
                trial = optuna.trial.create_trial(
                    params={"trainer.lr": 0.001 * (i + 1)},
                    distributions={"trainer.lr": lr},
                    value=0.6 + 0.01 * i,
                )
                study.add_trial(trial)
        for k in range((seeds or {}).get(objective, N_SEEDS)):
            run = layout.seed_dir(layout.label_dir(root, dataset, objective), k)
            run.mkdir(parents=True)
            layout.metrics_file(run).write_text("{}")
    rows = published(layout.RESULTS_FILE, dataset)
    rows.assign(mean=rows["mean"] * (1 + shift)).to_csv(layout.results_file(root), index=False)
    return root


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A report of the published heart-disease rows and two replicates, with the section's two blocks."""
    tmp = tmp_path_factory.mktemp("workers")
    data, dest = tmp / "numbers", tmp / "report"
    for folder, shift in ((data, 0.0), (layout.replicate_data_dir(data, "sampler_seed=1"), 0.02),
                          (layout.replicate_data_dir(data, "sampler_seed=2"), -0.02)):  # fmt: skip
        folder.mkdir(parents=True)
        rows = published(layout.RESULTS_FILE)
        rows.assign(mean=rows["mean"] * (1 + shift)).to_csv(folder / layout.RESULTS_FILE, index=False)
        studies = published(layout.STUDIES_FILE)
        studies.assign(best_value=studies["best_value"] + shift).to_csv(
            folder / layout.STUDIES_FILE, index=False
        )
    dest.mkdir()
    (dest / "report.json").write_text(json.dumps({"profile": "full", "data": os.path.relpath(data, dest)}))
    (dest / "RESULTS.md").write_text(
        "# Results\n\n<!-- kcal.report:workers:summary -->\n<!-- /kcal.report -->\n"
    )
    (dest / "DETAILS.md").write_text("# Details\n\n<!-- kcal.report:workers -->\n<!-- /kcal.report -->\n")
    render(dest, dest)
    return dest


def refused(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    return err


def test_a_finished_run_is_published_apart_with_its_provenance_and_fills_the_section(
    report, tmp_path, capsys
):
    _, data = report_info(report)
    before = (data / layout.RESULTS_FILE).read_bytes()
    assert "(no worker-count replicate published yet)" in (report / "RESULTS.md").read_text()
    root = make_root(tmp_path / "w8-s7")
    assert main([str(root), str(report), "--commit", "77fe3c6"]) == 0
    folder = layout.workers_data_dir(data, 8, "sampler_seed=7")
    assert layout.workers_data_dirs(data) == {("jobs=8", "sampler_seed=7"): folder}
    assert (data / layout.RESULTS_FILE).read_bytes() == before  # the published numbers stay as they are
    assert len(pd.read_csv(folder / layout.RESULTS_FILE)) == len(published(layout.RESULTS_FILE))
    studies = pd.read_csv(folder / layout.STUDIES_FILE)
    assert sorted(studies["objective"]) == sorted(OBJECTIVES) and set(studies["complete"]) == {N_TRIALS}
    trials = pd.read_csv(layout.trials_table(folder, DATASET, "xe"))
    assert list(trials["number"]) == list(range(N_TRIALS)) and set(trials["state"]) == {"complete"}
    info = json.loads((folder / layout.PROVENANCE_FILE).read_text())
    assert (info["commit"], info["jobs"], info["sampler_seed"], info["n_trials"]) == (
        "77fe3c6",
        8,
        7,
        N_TRIALS,
    )
    assert info["commands"] == [{"started": "2026-01-01_00-00-00_classification",
                                 "command": "kcal reproduce task=classification profile=full "
                                            f"'reproduce.datasets=[{DATASET}]' sweep.sampler_seed=7 "
                                            f"reproduce.jobs=8 root={root}"}]  # fmt: skip
    summary = (report / "RESULTS.md").read_text()
    assert (
        f"**{DATASET} at 8 workers: " in summary
        and "1 of 5 planned runs at 8 workers in: sampler_seed=7; provisional" in summary
    )
    details = (report / "DETAILS.md").read_text()
    assert all(f"| {DATASET} | {o} |" in details for o in OBJECTIVES)
    assert check(report) == []
    # the section goes stale when the worker run's numbers change, and --check says so
    rows = pd.read_csv(folder / layout.RESULTS_FILE)
    rows.assign(mean=rows["mean"] * 1.5).to_csv(folder / layout.RESULTS_FILE, index=False)
    assert {"RESULTS.md", "DETAILS.md"} <= set(check(report))
    assert report_main(["--check", str(report)]) == 1
    shutil.rmtree(data / layout.WORKERS_FOLDER)
    render(report, report)
    assert check(report) == []


@pytest.mark.parametrize(
    ("trials", "seeds", "message"),
    [
        ({"xe": 2}, None, f"{DATASET}/xe 2 of {N_TRIALS} trials"),
        ({"xe_kde": None}, None, f"{DATASET}/xe_kde has no study"),
        (None, {"xe_mmd": 1}, f"{DATASET}/xe_mmd 1 of {N_SEEDS} seeds"),
    ],
)
def test_an_unfinished_protocol_is_refused_in_one_line(report, tmp_path, capsys, trials, seeds, message):
    root = make_root(tmp_path / "root", trials=trials, seeds=seeds)
    err = refused(capsys, [str(root), str(report), "--commit", "77fe3c6"])
    assert f"{root} has not finished its protocol: {message}" in err
    assert not (report_info(report)[1] / layout.WORKERS_FOLDER).exists()


def test_a_root_without_results_or_records_or_with_mixed_settings_is_refused(report, tmp_path, capsys):
    root = make_root(tmp_path / "root")
    bad_commit = refused(capsys, [str(root), str(report), "--commit", "main"])
    assert "is not a git commit hash" in bad_commit
    sitting(root, "2026-01-02_00-00-00", 2, 7)  # resumed on 2 workers: not one setting
    assert "differ in jobs" in refused(capsys, [str(root), str(report), "--commit", "77fe3c6"])
    shutil.rmtree(root / "logs")
    assert "records no kcal reproduce run" in refused(capsys, [str(root), str(report), "--commit", "77fe3c6"])
    sitting(root, "2026-01-01_00-00-00", 8, 7)
    layout.results_file(root).unlink()
    err = refused(capsys, [str(root), str(report), "--commit", "77fe3c6"])
    assert "has not finished its protocol: no results.csv" in err


def test_a_fix_of_the_sampler_is_its_own_group_and_the_advice_says_where_it_stands(report, tmp_path):
    _, data = report_info(report)
    root = make_root(tmp_path / "w8-fix", sweep={"startup_by": "started"})
    assert main([str(root), str(report), "--commit", "77fe3c6"]) == 0
    folder = layout.workers_data_dir(data, 8, "sampler_seed=7", "startup_by=started")
    assert folder.name == "sampler_seed=7" and folder.parent.name == "jobs=8,startup_by=started"
    assert layout.workers_data_dirs(data) == {("jobs=8,startup_by=started", "sampler_seed=7"): folder}
    info = json.loads((folder / layout.PROVENANCE_FILE).read_text())
    assert (info["jobs"], info["sampler"], info["pruner"]) == (8, "startup_by=started", None)
    summary = (report / "RESULTS.md").read_text()
    assert f"**{DATASET} at 8 workers with startup_by=started: " in summary
    assert "The fix tried, 8 workers with startup_by=started: heart-disease " in summary
    assert "provisional, 1 of 5 runs in" in summary
    shutil.rmtree(data / layout.WORKERS_FOLDER)
    render(report, report)
    assert check(report) == []


def test_runs_of_one_variant_and_seed_from_two_roots_are_kept_side_by_side(report, tmp_path):
    """A pruned protocol's classification and regression runs of one sampler seed come from two roots: the
    second publication keeps the first one's rows, trials and provenance; publishing a root again replaces its own."""
    _, data = report_info(report)
    first = make_root(tmp_path / "cls", jobs=2, sweep={"pruner": "sha_min20"})
    second = make_root(tmp_path / "other", jobs=2, sweep={"pruner": "sha_min20"}, dataset="breast-cancer")
    for root in (first, second, first):
        assert main([str(root), str(report), "--commit", "77fe3c6"]) == 0
    folder = layout.pruned_data_dir(data, "sha_min20", "sampler_seed=7")
    for file in (layout.RESULTS_FILE, layout.STUDIES_FILE):
        rows = pd.read_csv(folder / file)
        assert sorted(set(rows["dataset"])) == ["breast-cancer", DATASET]
        assert len(rows) == len(published(file)) + len(published(file, "breast-cancer"))
    assert {p.name for p in layout.trials_tables(folder)} == {f"{d}__{o}.csv" for d in ("breast-cancer", DATASET)
                                                                for o in OBJECTIVES}  # fmt: skip
    info = json.loads((folder / layout.PROVENANCE_FILE).read_text())
    assert info["datasets"] == ["breast-cancer", DATASET] and info["pruner"] == "sha_min20"
    assert [r["datasets"] for r in info["roots"]] == [["breast-cancer"], [DATASET]]
    shutil.rmtree(data / layout.PRUNED_FOLDER)
    render(report, report)


def test_a_pruned_run_is_published_under_its_pruner_apart_from_the_worker_runs(report, tmp_path):
    _, data = report_info(report)
    root = make_root(tmp_path / "pruned-s7", jobs=2, sweep={"pruner": "sha_min20"})
    assert main([str(root), str(report), "--commit", "77fe3c6"]) == 0
    folder = layout.pruned_data_dir(data, "sha_min20", "sampler_seed=7")
    assert layout.pruned_data_dirs(data) == {("sha_min20", "sampler_seed=7"): folder}
    assert not (data / layout.WORKERS_FOLDER).exists()
    info = json.loads((folder / layout.PROVENANCE_FILE).read_text())
    assert (info["jobs"], info["pruner"], info["sampler"]) == (2, "sha_min20", "")
    assert "sweep.pruner=sha_min20" in info["commands"][0]["command"]
    shutil.rmtree(data / layout.PRUNED_FOLDER)
    render(report, report)
    assert check(report) == []


@pytest.mark.parametrize(
    ("jobs", "sweep", "message"),
    [
        (
            2,
            None,
            "the run is the full protocol on 2 worker(s) with its own sampler: a replicate, not a variant",
        ),
        (8, {"pruner": "sha_min20"}, "a protocol variant changes one thing"),
    ],
)
def test_a_run_that_changes_nothing_or_two_things_is_refused(report, tmp_path, capsys, jobs, sweep, message):
    root = make_root(tmp_path / "root", jobs=jobs, sweep=sweep)
    assert message in refused(capsys, [str(root), str(report), "--commit", "77fe3c6"])
    _, data = report_info(report)
    assert not (data / layout.WORKERS_FOLDER).exists() and not (data / layout.PRUNED_FOLDER).exists()
