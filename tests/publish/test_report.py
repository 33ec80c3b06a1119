"""kcal.publish.report publishes a reproduction whose numbers equal what kcal.publish.tables makes of its CSV, and
kcal.reruns.ablation reruns a study's best config with one key varied."""

import json
import math
import shutil
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from kcal.configs import CONFIG_DIR
from kcal.publish.report import GENERATED, check, data_dir, main, publish, report_info

from ..common import SMOKE_REPRODUCTION as SMOKE
from ..common import copy_root
from ..data.conftest import needs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
needs_crime = needs("crime")


@pytest.fixture(scope="module")
def smoke_root(tmp_path_factory, regression_smoke_root):
    """A copy of the session's smoke reproduction of crime / [nll, nll_mmd] (tests/conftest.py: ``SMOKE``,
    sample size 1), which the ablation writes into."""
    return copy_root(regression_smoke_root, tmp_path_factory.mktemp("repro") / "root")


@needs_crime
def test_publish_then_check_and_hand_written_text_survives(smoke_root, tmp_path):
    dest, data = tmp_path / "report", tmp_path / "numbers"
    publish(smoke_root, dest, data=data)
    assert check(dest) == []
    assert not list(dest.rglob("*.csv")), (
        "the report's numbers live in its data folder, not among the documents"
    )
    studies = pd.read_csv(data / "studies.csv")
    assert set(studies["objective"]) == {"nll", "nll_mmd"} and set(studies["complete"]) == {1}
    # the selected trial's regulariser share, which the tables' notes read: 0 for NLL, a number for NLL + MMD
    shares = studies.set_index("objective")["reg_share_median"]
    assert shares["nll"] == 0 and shares["nll_mmd"] >= 0 and not math.isnan(shares["nll_mmd"])
    assert "Regulariser share of the loss" in (dest / "table3_regression_exact.tex").read_text()
    assert json.loads((dest / "best" / "crime__nll_mmd.json").read_text())["params"]
    text = (dest / "RESULTS.md").read_text()
    names = [m.group("name") for m in GENERATED.finditer(text)]
    assert {"claims", "studies", "dataset:crime"} <= set(names)
    # hand-written analysis outside the blocks is kept when the report is regenerated
    (dest / "RESULTS.md").write_text("Our analysis, by hand.\n\n" + text)
    publish(smoke_root, dest, data=data)
    assert (dest / "RESULTS.md").read_text().startswith("Our analysis, by hand.")
    assert check(dest) == []
    # a number edited in the committed CSV makes every derived file stale
    results = pd.read_csv(data / "results.csv")
    results.loc[results["metric"] == "qce", "mean"] += 1.0
    results.to_csv(data / "results.csv", index=False)
    stale = check(dest)
    assert {"RESULTS.md", "comparison_exact.md", "claims.md"} <= set(stale)
    assert main(["--check", str(dest)]) == 1


@needs_crime
def test_publish_add_keeps_the_datasets_of_other_roots(smoke_root, tmp_path):
    dest, data = tmp_path / "report", tmp_path / "numbers"
    publish(smoke_root, dest, data=data)
    ours = pd.read_csv(data / "results.csv")
    for name in ("results.csv", "studies.csv"):  # a dataset published from another root
        frame = pd.read_csv(data / name)
        frame.loc[frame["dataset"] == "crime", "dataset"] = "blog"
        frame.to_csv(data / name, index=False)
    publish(smoke_root, dest, data=data, add=True)
    results, studies = pd.read_csv(data / "results.csv"), pd.read_csv(data / "studies.csv")
    assert set(results["dataset"]) == set(studies["dataset"]) == {"blog", "crime"}
    pd.testing.assert_frame_equal(results[results["dataset"] == "crime"].reset_index(drop=True), ours)
    publish(smoke_root, dest, data=data, add=True)  # adding the same root again replaces its rows
    assert len(pd.read_csv(data / "results.csv")) == 2 * len(ours)
    assert check(dest) == [] and "blog" in (dest / "comparison_exact.md").read_text()


@needs_crime
def test_publish_add_goes_into_the_report_of_dest_whatever_the_root_is_named(smoke_root, tmp_path):
    """A root named after its dataset (``/runs/adult``) adds to dest's report, its profile and its data
    folder, instead of starting a package profile named after the root."""
    dest, data = tmp_path / "report", tmp_path / "numbers"
    publish(smoke_root, dest, data=data, profile="full")
    named = copy_root(smoke_root, tmp_path / "kcal-test-dataset-root")
    stray = data_dir(named.name)
    try:
        main([str(named), str(dest), "--add"])
        assert not stray.exists()
    finally:
        shutil.rmtree(stray, ignore_errors=True)
    assert report_info(dest) == ("full", data.resolve())
    assert check(dest) == []


@needs_crime
def test_publish_keeps_every_trial_and_draws_budget_curves(smoke_root, tmp_path):
    """Every trial of the root's studies lands in trials/<dataset>__<objective>.csv with its selection score and
    test metrics; RESULTS.md's budget block and the budget figure are drawn from them; --trials rewrites them."""
    import optuna

    from kcal.core.layout import sqlite_url, trials_table
    from kcal.publish.trials import KEY_COLUMNS

    dest, data = tmp_path / "report", tmp_path / "numbers"
    publish(smoke_root, dest, data=data)
    for objective in ("nll", "nll_mmd"):
        table = pd.read_csv(trials_table(data, "crime", objective))
        assert list(table.columns[: len(KEY_COLUMNS)]) == KEY_COLUMNS
        study = optuna.load_study(study_name=f"crime__{objective}__paper", storage=sqlite_url(smoke_root))
        assert table["number"].tolist() == [t.number for t in study.trials]
        assert table["value"].iloc[0] == pytest.approx(study.trials[0].value, rel=1e-6)
        assert set(table["direction"]) == {"minimize"} and "test/qce" in table.columns
        assert table["reg_share_median"].iloc[0] == pytest.approx(
            study.trials[0].user_attrs["reg_share_median"]
        )
    text = (dest / "RESULTS.md").read_text()
    budget = text.split("<!-- kcal.report:budget -->")[1].split("<!-- /kcal.report -->")[0]
    assert "| crime | nll | published | 1 |" in budget and "| crime | nll_mmd | published | 1 |" in budget
    assert (dest / "figures" / "budget_crime.png").stat().st_size > 0
    assert check(dest) == []
    trials_table(data, "crime", "nll").unlink()
    assert main(["--trials", str(smoke_root), str(dest)]) == 0
    assert trials_table(data, "crime", "nll").is_file() and check(dest) == []


@needs_crime
def test_publish_add_replaces_pairs_and_keeps_what_it_replaces(smoke_root, tmp_path):
    """--add replaces the (dataset, objective) pairs the root holds, not the whole dataset; --keep NAME keeps the
    replaced rows under experiments/NAME/ (a rerun of one objective with another rule, say)."""
    dest, data = tmp_path / "report", tmp_path / "numbers"
    publish(smoke_root, dest, data=data)
    results = pd.read_csv(data / "results.csv")
    other = results[results["objective"] == "nll"].assign(objective="nll_mmd_tanh")  # a pair the root lacks
    marked = results.assign(mean=results["mean"] + 1.0)  # the former numbers of the root's pairs
    pd.concat([marked, other]).to_csv(data / "results.csv", index=False)
    publish(smoke_root, dest, data=data, add=True, keep="former_rule")
    now = pd.read_csv(data / "results.csv")
    assert set(now["objective"]) == set(results["objective"]) | {"nll_mmd_tanh"}
    mine = now[now["objective"] != "nll_mmd_tanh"].reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, results)
    kept = pd.read_csv(data / "experiments" / "former_rule" / "results.csv")
    assert len(kept) == len(results) and kept["mean"].sum() == pytest.approx(marked["mean"].sum())
    assert set(pd.read_csv(data / "experiments" / "former_rule" / "studies.csv")["objective"]) == {
        "nll",
        "nll_mmd",
    }
    assert check(dest) == []
    with pytest.raises(SystemExit):
        main([str(smoke_root), str(dest), "--keep", "x"])


@needs_crime
def test_a_replicate_is_published_apart_and_adds_the_protocol_spread(smoke_root, tmp_path):
    dest, data = tmp_path / "report", tmp_path / "numbers"
    publish(smoke_root, dest, data=data)
    published = pd.read_csv(data / "results.csv")
    replicate = copy_root(smoke_root, tmp_path / "replicate")
    shifted = published.assign(mean=published["mean"] + 0.01)
    shifted.to_csv(replicate / "results.csv", index=False)
    assert main(["--replicate", "sampler_seed=1", str(replicate), str(dest)]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(data / "results.csv"), published)  # the published numbers stay
    folder = data / "replicates" / "sampler_seed=1"
    assert (folder / "studies.csv").is_file() and (folder / "trials" / "crime__nll.csv").is_file()
    spread = (dest / "protocol_spread.md").read_text()
    assert "| exact | regression | crime | NLL | qce | 2 |" in spread
    text = (dest / "RESULTS.md").read_text()
    assert "Replicates of the whole protocol beside the published run: sampler_seed=1" in text
    budget = text.split("<!-- kcal.report:budget -->")[1].split("<!-- /kcal.report -->")[0]
    assert "| crime | nll | published | 1 |" in budget and "| crime | nll | sampler_seed=1 | 1 |" in budget
    assert check(dest) == []


@needs_crime
def test_a_replicate_run_in_two_roots_keeps_both_roots_pairs(smoke_root, tmp_path):
    """A replicate's datasets may come from several roots (heart-disease and breast-cancer in one, crime in
    another): a second root under the same name replaces its own (dataset, objective) pairs only."""
    dest, data = tmp_path / "report", tmp_path / "numbers"
    publish(smoke_root, dest, data=data)
    published = pd.read_csv(data / "results.csv")
    first = copy_root(smoke_root, tmp_path / "first")  # the replicate's other dataset, run in its own root
    published.assign(dataset="heart-disease", mean=published["mean"] + 0.02).to_csv(first / "results.csv",
                                                                                 index=False)  # fmt: skip
    assert main(["--replicate", "sampler_seed=1", str(first), str(dest)]) == 0
    folder = data / "replicates" / "sampler_seed=1"
    for shift in (0.5, 0.01):  # crime published twice under the same name: the second replaces the first
        second = copy_root(smoke_root, tmp_path / f"second{shift}")
        published.assign(mean=published["mean"] + shift).to_csv(second / "results.csv", index=False)
        assert main(["--replicate", "sampler_seed=1", str(second), str(dest)]) == 0
    rows = pd.read_csv(folder / "results.csv")
    assert sorted(rows["dataset"].unique()) == ["crime", "heart-disease"]
    assert len(rows) == 2 * len(published)
    crime = rows[rows["dataset"] == "crime"]
    assert crime["mean"].sum() == pytest.approx(published["mean"].sum() + 0.01 * len(published))
    studies = pd.read_csv(folder / "studies.csv")
    assert len(studies) == len(studies.drop_duplicates(["dataset", "objective"]))
    assert "| exact | regression | crime | NLL | qce | 2 |" in (dest / "protocol_spread.md").read_text()
    assert check(dest) == []


@needs_crime
def test_a_withdrawn_pair_is_kept_apart_and_listed_until_its_rerun_is_published(smoke_root, tmp_path):
    dest, data = tmp_path / "report", tmp_path / "numbers"
    publish(smoke_root, dest, data=data)
    assert main(["--withdraw", "crime/nll_mmd", "--keep", "former", str(dest)]) == 0
    results = pd.read_csv(data / "results.csv")
    assert "nll_mmd" not in set(results["objective"]) and "nll" in set(results["objective"])
    assert set(pd.read_csv(data / "experiments" / "former" / "results.csv")["objective"]) == {"nll_mmd"}
    assert not (dest / "best" / "crime__nll_mmd.json").exists()
    text = (dest / "RESULTS.md").read_text()
    assert "not yet rerun: crime / nll_mmd (their former rows: `experiments/former/`)" in text
    assert check(dest) == []
    # the rerun, published from a root whose other dataset is still running: only the datasets asked for
    publish(smoke_root, dest, add=True, datasets=["crime"])
    assert "nll_mmd" in set(pd.read_csv(data / "results.csv")["objective"])
    assert "not yet rerun" not in (dest / "RESULTS.md").read_text() and check(dest) == []
    publish(smoke_root, dest, add=True, datasets=["blog"])  # nothing of blog in the root: nothing changes
    assert len(pd.read_csv(data / "results.csv")) == len(results) + len(
        pd.read_csv(data / "experiments" / "former" / "results.csv")
    )
    with pytest.raises(SystemExit):
        main(["--withdraw", "crime/nll_mmd", str(dest)])  # without --keep


def test_committed_reports_match_their_results_csv():
    """Each docs/results/<profile>/ equals what kcal.publish.tables and kcal.publish.report regenerate from its CSVs,
    which are the package's published numbers for that profile."""
    reports = sorted(p.parent for p in DOCS.glob("*/report.json"))
    assert reports, f"no published report under {DOCS}"
    for dest in reports:
        profile, data = report_info(dest)
        assert data == data_dir(profile).resolve() and (data / "results.csv").is_file()
        assert check(dest) == [], f"{dest}: regenerate with kcal report"


def test_the_committed_report_gives_the_answer_first():
    """RESULTS.md: both answer tables within its first 80 lines, every claim ID in a row of them, fewer than 700
    lines; the change log is HISTORY.md."""
    from kcal.publish.claims import CLAIMS

    for dest in sorted(p.parent for p in DOCS.glob("*/report.json")):
        lines = (dest / "RESULTS.md").read_text(encoding="utf-8").splitlines()
        assert len(lines) < 700, f"{dest}/RESULTS.md has {len(lines)} lines"
        head = lines[:80]
        assert "<!-- kcal.report:answer:claims -->" in head and "<!-- kcal.report:answer:cells -->" in head
        ids = {line.split("|")[1].strip() for line in head if line.startswith("| ")}
        assert {c.id for c in CLAIMS} <= ids, sorted({c.id for c in CLAIMS} - ids)
        assert (dest / "HISTORY.md").is_file()


def test_every_question_of_the_report_has_its_blocks_in_the_full_report():
    """Each question the report lists (:data:`kcal.publish.report.QUESTIONS`) fills its blocks in a document of the
    full report (its own or one report.json names), and a question that fills other blocks than it names fails."""
    from kcal.publish import questions
    from kcal.publish.report import QUESTIONS, documents

    dest = DOCS / "full"
    inside, outside = documents(dest)
    placed = {
        m.group("name") for doc in [*inside, *outside] for m in GENERATED.finditer(doc.read_text("utf-8"))
    }
    datasets = sorted(pd.read_csv(report_info(dest)[1] / "results.csv")["dataset"].unique())
    for question in QUESTIONS:
        assert set(questions.block_names(question, datasets)) <= placed, question.__name__

    stray = ModuleType("stray")
    stray.BLOCKS = ("stray:<dataset>",)
    stray.report_blocks = lambda published: {"stray:adult": "", "stray": ""}
    with pytest.raises(ValueError, match="stray fills the blocks"):
        questions.filled_blocks(stray, questions.Published(dest, ["adult"], {}, pd.DataFrame(), {}))


@needs_crime
def test_documents_beside_and_outside_the_report_have_their_blocks_filled_and_checked(smoke_root, tmp_path):
    """A Markdown file of dest with a block (DETAILS.md) and a document report.json names (the README's summary) are
    filled by every publish and regeneration and checked by --check; a publish keeps report.json's documents."""
    dest, data = tmp_path / "docs" / "report", tmp_path / "numbers"
    publish(smoke_root, dest, data=data)
    readme = tmp_path / "README.md"
    readme.write_text(
        "# kcal\n\n## What reproduces\n\n<!-- kcal.report:readme -->\n<!-- /kcal.report -->\n\n## Next\n"
    )
    (dest / "DETAILS.md").write_text("# Details\n\n<!-- kcal.report:studies -->\n<!-- /kcal.report -->\n")
    info = json.loads((dest / "report.json").read_text())
    (dest / "report.json").write_text(  # as the report writes it, so that only the documents differ
        json.dumps({**info, "documents": ["../../README.md"]}, indent=1, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    assert [f for f in check(dest) if f != "report.json"] == ["DETAILS.md", "../../README.md"]
    assert main([str(dest)]) == 0 and check(dest) == []
    text = readme.read_text()
    assert "[RESULTS.md](docs/report/RESULTS.md)" in text and text.endswith(
        "<!-- /kcal.report -->\n\n## Next\n"
    )
    assert "| crime | nll |" in (dest / "DETAILS.md").read_text()
    publish(smoke_root, dest, data=data)
    assert (
        json.loads((dest / "report.json").read_text())["documents"] == ["../../README.md"]
        and check(dest) == []
    )
    readme.write_text(text.replace("kcal ran", "someone ran"))
    assert check(dest) == ["../../README.md"] and main(["--check", str(dest)]) == 1


@needs_crime
def test_ablation_varies_one_key_around_the_best_trial(smoke_root):
    from kcal.reruns.ablation import ablation_dir, run_ablation

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("ablation", overrides=[*SMOKE, f"root={smoke_root}", "dataset=crime", "objective=nll_mmd",
                                             "ablation.grid=[0.0,5.0]", "ablation.n_seeds=2"])  # fmt: skip
        table = run_ablation(cfg)
    assert sorted(set(table["value"])) == [0.0, 5.0]
    assert set(table[table.metric == "qce"]["n"]) == {2}
    out = ablation_dir(cfg)
    assert (out / "objective.weight.csv").is_file() and (out / "objective.weight.png").stat().st_size > 0
    run = json.loads((out / "objective.weight=5.0" / "seeds" / "seed1" / "metrics.json").read_text())
    assert run["seed"] == 1 and run["status"] == "ok"
    saved = (out / "objective.weight=0.0" / "seeds" / "seed0" / "config.yaml").read_text()
    assert "weight: 0.0" in saved


def test_ablation_set_keys_name_their_own_folder(tmp_path):
    from kcal.reruns.ablation import ablation_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        plain = compose(
            "ablation", overrides=[f"root={tmp_path}", "dataset=heart-disease", "objective=xe_mmd"]
        )
        fixed = compose("ablation", overrides=[f"root={tmp_path}", "dataset=heart-disease", "objective=xe_mmd",
                                               "ablation.set={objective.params.bandwidth_z: median}"])  # fmt: skip
    assert ablation_dir(plain) == tmp_path / "ablations" / "heart-disease" / "xe_mmd"
    assert ablation_dir(fixed) == ablation_dir(plain) / "objective.params.bandwidth_z=median"


@needs_crime
def test_dest_alone_regenerates_the_report_from_its_csvs(smoke_root, tmp_path, capsys):
    """After a change to the report's code the committed files go stale; `kcal report DEST` (no root)
    regenerates them from the published CSVs, and --check says so in a line that names that command."""
    dest, data = tmp_path / "report", tmp_path / "numbers"
    publish(smoke_root, dest, data=data)
    text = (dest / "RESULTS.md").read_text()
    (dest / "RESULTS.md").write_text(text.replace("<!-- /kcal.report -->", "stale\n<!-- /kcal.report -->", 1))
    assert main(["--check", str(dest)]) == 1
    assert f"run `kcal report {dest}` to regenerate" in capsys.readouterr().err
    assert main([str(dest)]) == 0 and check(dest) == []
    assert (dest / "RESULTS.md").read_text() == text
    with pytest.raises(SystemExit):
        main(["--replicate", "sampler_seed=1", str(dest)])  # a replicate needs its root


@needs_crime
def test_seeds_end_is_when_training_ended_not_when_the_seeds_were_evaluated_again(smoke_root, tmp_path):
    """``kcal reevaluate`` rewrites each seed's metrics.json; studies.csv's ``seeds_end`` still reads the time
    the seeds' forecasts were written."""
    import os
    from datetime import datetime, timezone

    from kcal.core import layout
    from kcal.publish.report import study_rows

    root = copy_root(smoke_root, tmp_path / "root")
    trained, evaluated = 1_700_000_000, 1_700_090_000
    metrics = [p for label in ("nll", "nll_mmd") for p in layout.finished_seed_files(root / "crime" / label)]
    assert metrics and all(p.with_name(layout.PREDICTIONS_FILE).exists() for p in metrics)
    for p in metrics:
        os.utime(p.with_name(layout.PREDICTIONS_FILE), (trained, trained))
        os.utime(p, (evaluated, evaluated))
    rows = study_rows(root)
    expected = datetime.fromtimestamp(trained, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    assert set(rows["seeds_end"]) == {expected}


def test_publishing_does_not_load_the_training_engine():
    """``kcal report`` reads results: importing it (and the figures it draws) leaves Lightning unloaded, which
    cost every ``kcal report`` 5 s when ``kcal.run`` loaded its runner eagerly."""
    import subprocess
    import sys

    code = (
        "import sys, kcal.publish.report, kcal.publish.figures; "
        "print(sorted(m for m in ('pytorch_lightning', 'lightning_fabric', 'kcal.run.single') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
