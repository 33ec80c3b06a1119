"""kcal.core.layout: the paths and study names every stage reads and writes, built and parsed in one place."""

from pathlib import Path

import pytest

from kcal.core import layout


def test_a_reproduction_root_is_laid_out_as_before(tmp_path):
    root = tmp_path / "outputs" / "reproduce" / "full"
    assert layout.reproduce_root("full") == Path("outputs/reproduce/full")
    assert layout.storage_file(root) == root / "sweeps.db"
    assert layout.sqlite_url(root) == f"sqlite:///{(root / 'sweeps.db').resolve()}"
    assert layout.results_file(root) == root / "results.csv"
    sweep = layout.sweep_dir(root, "crime", "nll_mmd")
    assert sweep == root / "crime" / "nll_mmd" / "sweep"
    assert (
        layout.sweep_dir(root, "crime", "nll_mmd", "pareto") == root / "crime" / "nll_mmd" / "sweep__pareto"
    )
    assert layout.trial_dir(sweep, 7) == sweep / "trials" / "trial_0007"
    label = layout.label_dir(root, "crime", "nll_mmd@samples=10")
    assert label == root / "crime" / "nll_mmd@samples=10"
    assert layout.label_dir(root, "crime", "nll", "pareto") == root / "crime" / "nll__pareto"
    assert layout.seed_dir(label, 3) == label / "seeds" / "seed3"
    assert layout.ablation_dir(root, "crime", "nll_mmd") == root / "ablations" / "crime" / "nll_mmd"
    fixed = layout.ablation_dir(root, "crime", "nll_mmd", {"b": 2, "a": 1})
    assert fixed == root / "ablations" / "crime" / "nll_mmd" / "a=1,b=2"
    assert layout.ablation_value_dir(fixed, "objective.weight", 10) == fixed / "objective.weight=10"
    paths = layout.paths_dir(root, "crime")
    assert paths == root / "paths" / "crime" and layout.path_table(paths, "nll_mmd") == paths / "nll_mmd.csv"
    assert layout.path_point_dir(paths, "nll_mmd", 30) == paths / "nll_mmd" / "objective.weight=30"
    assert layout.path_point_dir(paths, "xe_kde", 0.001).name == "objective.weight=0.001"
    assert layout.path_record(paths, "nll_mmd") == paths / "nll_mmd.json"
    assert layout.LOCAL_ROOT == Path("outputs/local_calibration")
    assert layout.tables_dir(root) == root / "tables" and layout.figures_dir(label) == label / "figures"
    assert layout.pareto_dir(root, "crime") == root / "pareto" / "crime"
    run = layout.seed_dir(label, 3)
    assert layout.metrics_file(run) == run / "metrics.json"
    assert layout.checkpoint_file(run) == run / "checkpoints" / "best.pt"


def test_study_names_are_built_and_parsed_back():
    name = "crime__nll_mmd__paper"
    assert layout.study_name("crime", "nll_mmd", "paper") == name
    assert layout.study_name("crime", "nll_mmd", "paper", "pareto") == name + "__pareto"
    assert layout.with_selection(name, "paper") == name
    pareto = layout.with_selection(name, "pareto")
    assert pareto == "crime__nll_mmd__paper__pareto"
    assert layout.with_selection(pareto, "pareto") == pareto  # appended once
    assert layout.parse_study_name(name) == ("crime", "nll_mmd", "paper", "paper")
    assert layout.parse_study_name(pareto) == ("crime", "nll_mmd", "paper", "pareto")
    assert layout.parse_study_name("mine") == ("mine", "<objective>", None, "paper")
    assert layout.dataset_of_study(pareto) == "crime"
    assert layout.with_objective(name, "nll_mmd", "nll") == "crime__nll__paper"
    assert layout.pair_name("crime", "nll") == "crime__nll"


def test_labels_of_variants():
    label = layout.variant_label("nll_mmd", "samples", 10)
    assert label == "nll_mmd@samples=10" and layout.is_variant(label) and not layout.is_variant("nll_mmd")
    assert layout.variant_base(label) == "nll_mmd" and layout.variant_base("nll_mmd_tanh") == "nll_mmd_tanh"


@pytest.mark.parametrize(
    ("name", "k"), [("seed0", 0), ("seed12", 12), ("seed", None), ("seedx", None), ("s1", None)]
)
def test_seed_folder_names(name, k):
    assert layout.seed_number(name) == k


def test_seed_runs_finished_seeds_summaries_and_best_files_are_found(tmp_path):
    for label, seeds in (("nll", (10, 2)), ("nll_mmd@samples=5", (0,))):
        for k in seeds:
            run = layout.seed_dir(layout.label_dir(tmp_path, "crime", label), k)
            run.mkdir(parents=True)
            (run / "metrics.json").write_text("{}")
        (layout.label_dir(tmp_path, "crime", label) / "summary.csv").write_text("")
    (layout.label_dir(tmp_path, "crime", "nll") / "seeds" / "notes").mkdir()
    unfinished = layout.seed_dir(layout.label_dir(tmp_path, "crime", "nll"), 3)
    unfinished.mkdir()
    found = layout.seed_runs(tmp_path)
    assert [d.name for d in found["crime"]["nll"]] == ["seed2", "seed3", "seed10"]
    assert not layout.is_finished(unfinished) and layout.is_finished(found["crime"]["nll"][0])
    assert len(layout.finished_seed_files(layout.label_dir(tmp_path, "crime", "nll"))) == 2
    assert [p.parent.name for p in layout.summary_files(tmp_path)] == ["nll", "nll_mmd@samples=5"]
    best = layout.sweep_dir(tmp_path, "crime", "nll") / "best.json"
    best.parent.mkdir(parents=True)
    best.write_text("{}")
    assert layout.best_files(tmp_path) == {("crime", "nll"): best}


def test_the_configs_compose_the_same_root_and_study_names():
    """``sweep.yaml`` composes the default root and study name itself; they are the layout's."""
    from hydra import compose, initialize_config_dir

    from kcal.configs import CONFIG_DIR

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("seeds", overrides=["profile=quick", "dataset=crime", "objective=nll_mmd"])
    assert cfg.root == str(layout.reproduce_root("quick"))
    assert layout.parse_study_name(cfg.sweep.study_name) == ("crime", "nll_mmd", "paper", "paper")
