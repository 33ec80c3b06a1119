"""kcal.bench.speed: the quick benchmark runs in seconds and writes its table; the estimate and synthetic data."""

import csv
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from kcal.bench import protocol_estimate, workloads
from kcal.bench import speed as bench
from kcal.configs import CONFIG_DIR
from kcal.paper import PAPER_OBJECTIVES

from ..data.conftest import needs


@needs("crime", "breast-cancer")
def test_quick_benchmark_writes_csv_and_markdown(tmp_path, capsys):
    assert bench.main(["--quick", "--devices", "cpu", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader(open(tmp_path / "bench.csv")))
    measures = {r["measure"] for r in rows}
    assert {
        "mmd_overhead",
        "loop_overhead",
        "seeds_vs_sequential",
        "seeds_vs_one",
        "seeds_vs_arithmetic",
    } <= measures
    assert {r["dataset"] for r in rows if r["measure"] == "mmd_overhead"} == {"crime", "breast-cancer"}
    floors = [r for r in rows if r["measure"] == "mmd_arithmetic"]  # the loop datasets' arithmetic floor
    assert floors and all(r["a_label"].startswith("bare loop") and float(r["ratio"]) > 0 for r in floors)
    for r in rows:
        assert float(r["a_seconds"]) == float(r["a_seconds"]) and r["device"] == "cpu"
    md = (tmp_path / "bench.md").read_text()
    assert "| mmd_overhead |" in md and "torch" in md
    out = capsys.readouterr().out
    assert "seeds_vs_one" in out and "b/a" in out


@needs("heart-disease")
def test_estimate_covers_every_objective_of_a_dataset(tmp_path, capsys):
    argv = ["--estimate-only", "--estimate-datasets", "heart-disease", "--seeds", "2", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    rows = list(csv.DictReader(open(tmp_path / "estimate.csv")))
    assert [r["objective"] for r in rows] == list(PAPER_OBJECTIVES["classification"])
    assert all(float(r["hours_at_200_epochs"]) >= float(r["hours_at_60_epochs"]) > 0 for r in rows)
    assert "TOTAL" in (tmp_path / "estimate.md").read_text() and "TOTAL" in capsys.readouterr().out


def test_estimate_follows_the_reproductions_plan_with_table_6_reruns_as_seeds_only():
    stages = protocol_estimate.protocol_stages("blog")
    swept = [label for label, _, sweeps in stages if sweeps]
    assert swept == list(PAPER_OBJECTIVES["regression"])
    variants = [(label, overrides) for label, overrides, sweeps in stages if not sweeps]
    sizes = [
        int(s) for s in OmegaConf.load(Path(CONFIG_DIR) / "profile" / "full.yaml").reproduce.sample_sizes
    ]
    assert variants == [(f"nll_mmd@samples={m}", ["objective=nll_mmd", f"objective.params.num_samples={m}"])
                        for m in sizes]  # fmt: skip
    assert [label for label, _, _ in protocol_estimate.protocol_stages("adult")] == list(
        PAPER_OBJECTIVES["classification"]
    )
    rerun = protocol_estimate.Estimate("blog", "nll_mmd@samples=1", 1000, 100, single_epoch=0.05, single_fixed=2.0,
                           vec_epoch=0.5, finalize=0.2, synthetic=False, sweeps=False)  # fmt: skip
    assert rerun.hours(60, 100, 50) == (0.0, (60 * 0.5 + 50 * 0.2) / 3600)


def test_missing_datasets_are_replaced_by_synthetic_data_of_their_shape():
    data = workloads.synthetic("superconductivity")
    n, d = workloads.SYNTHETIC_SHAPES["superconductivity"]
    assert len(data.train) + len(data.val) + len(data.test) == n and data.train.x.shape[1] == d
    assert data.info.task == "regression" and data.info.sources["synthetic"]


def test_estimate_on_n_workers_divides_the_work_down_to_the_serial_chain():
    args = bench.parse(["--estimate-only", "--seeds", "50"])
    e = protocol_estimate.Estimate("crime", "nll", 1000, 100, single_epoch=0.05, single_fixed=2.0, vec_epoch=0.5,
                       finalize=0.2, synthetic=False)  # fmt: skip
    totals = [sum(e.hours(ep, args.trials, args.seeds)) for ep in args.protocol_epochs]
    lines = protocol_estimate.scaling([e], args, totals)
    table = {
        int(ln.split()[0]): [float(x) for x in ln.split()[1:]] for ln in lines if ln.split()[0].isdigit()
    }
    assert sorted(table) == [1, 2, 16, 64]
    for i, ep in enumerate(args.protocol_epochs):
        chain = e.chain_hours(ep, args.seeds)
        assert table[1][i] == pytest.approx(totals[i], abs=0.05)
        assert table[2][i] == pytest.approx(totals[i] / 2, abs=0.05)
        assert (
            table[64][i] == pytest.approx(max(totals[i] / 64, chain), abs=0.05)
            and table[64][i] >= chain - 0.05
        )
