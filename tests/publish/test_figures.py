"""kcal.publish.figures: every figure headless on synthetic results, the CLI's errors, and the kcal.run.train hook."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import kcal.run.artifacts
from kcal.core.layout import seed_runs
from kcal.core.plotting import MissingInputError, objective_label
from kcal.publish.figures import aggregate_curves, draw_local_maps, draw_reproduction
from kcal.publish.figures import reproduction as reproduction_figures
from kcal.publish.figures.__main__ import main as cli
from kcal.publish.figures.reproduction import while_most_train
from kcal.run.plots import classification_calibration, draw_run_figures, regression_calibration

from ..data.conftest import needs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_figures(paths, stems):
    names = {Path(p).name for p in paths}
    for stem in stems:
        for ext in ("png", "pdf"):
            assert f"{stem}.{ext}" in names, (stem, ext, sorted(names))
    for p in paths:
        p = Path(p)
        assert p.is_file() and p.stat().st_size > 1000, p
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == PNG_MAGIC
        if p.suffix == ".pdf":
            assert p.read_bytes()[:5] == b"%PDF-"


def regression_preds(rng, n=300, overconfident=2.0, shift=0.0):
    def split(k):
        mean = rng.normal(size=k)
        std = np.exp(rng.normal(scale=0.3, size=k))
        y = mean + shift + overconfident * std * rng.normal(size=k)
        return mean, std, y

    (mv, sv, yv), (mt, st, yt) = split(n // 2), split(n)
    return {"val_mean": mv, "val_std": sv, "val_y": yv, "test_mean": mt, "test_std": st, "test_y": yt}


def classification_preds(rng, n=400, m=3, scale=4.0):
    def split(k):
        logits = scale * rng.normal(size=(k, m))
        p = torch.softmax(torch.as_tensor(logits / scale), -1)  # truth is less confident than the logits
        y = torch.multinomial(p, 1, generator=torch.Generator().manual_seed(k))[:, 0].numpy()
        return logits, y

    (lv, yv), (lt, yt) = split(n // 2), split(n)
    return {"val_logits": lv, "val_y": yv.astype(np.int64), "test_logits": lt, "test_y": yt.astype(np.int64)}


def write_run(d: Path, preds: dict, dataset="toy", objective="nll", seed=0, recalibrator="auto", epochs=None,
              history_cols=("train/dce", "val/dce", "train/dce_official", "val/dce_official"), rng=None):  # fmt: skip
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"dataset": {"name": dataset, "protocol": "official", "local_features": [0, 1]},
           "objective": {"name": objective}, "recalibrator": {"name": recalibrator}, "seed": seed}  # fmt: skip
    OmegaConf.save(OmegaConf.create(cfg), d / "config.yaml")
    arrays = {k: np.asarray(v) for k, v in preds.items()}
    np.savez_compressed(d / "predictions.npz", **{k: v.astype(np.int64 if v.dtype.kind in "iu" else np.float32)
                                                  for k, v in arrays.items()})  # fmt: skip
    if epochs:
        rng = rng or np.random.default_rng(seed)
        lines = [",".join(["epoch", "train/loss", *history_cols])]
        for e in range(epochs):
            vals = [float(0.3 * np.exp(-e / 5) + 0.02 * rng.random()) for _ in history_cols]
            lines.append(",".join([str(e), "1.0", *(repr(v) for v in vals)]))
        (d / "history.csv").write_text("\n".join(lines) + "\n")
    (d / "metrics.json").write_text(json.dumps({"status": "ok", "epochs": epochs or 1}))
    return d


# ---------------------------------------------------------------------------------------------------------
# per run
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("recalibrator", ["auto", "isotonic", "none"])
def test_regression_run_figures(tmp_path, recalibrator):
    d = write_run(tmp_path / "run", regression_preds(np.random.default_rng(0)), recalibrator=recalibrator)
    paths = draw_run_figures(d)
    assert_figures(paths, ["calibration"])
    assert all(Path(p).parent == d / "figures" for p in paths)
    data = regression_calibration(dict(np.load(d / "predictions.npz")), recalibrator)
    if recalibrator != "none":  # recalibration refit on validation PITs fixes a 2x overconfident forecast
        assert data["qce_recal"] < data["qce"] and data["qce"] > 0.2


@pytest.mark.parametrize("recalibrator", ["auto", "none"])
def test_classification_run_figures(tmp_path, recalibrator):
    d = write_run(tmp_path / "run", classification_preds(np.random.default_rng(1)), recalibrator=recalibrator)
    assert_figures(draw_run_figures(d), ["reliability"])
    data = classification_calibration(dict(np.load(d / "predictions.npz")), recalibrator)
    assert data["before"]["count"].sum() == 400 and data["before"]["count"].shape == (20,)
    if recalibrator == "auto":  # overconfident logits: temperature > 1 and a smaller ECE
        assert data["temperature"] > 1 and data["after"]["ece"] < data["before"]["ece"]


def test_run_cli_and_missing_inputs(tmp_path, capsys):
    d = write_run(tmp_path / "run", regression_preds(np.random.default_rng(2)))
    assert cli(["run", str(d)]) == 0
    assert "calibration.png" in capsys.readouterr().out
    (d / "predictions.npz").unlink()
    assert cli(["run", str(d)]) == 2
    assert "predictions.npz is missing" in capsys.readouterr().err
    assert cli(["run", str(tmp_path / "nope")]) == 2
    assert "kcal train" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------
# reproduction root
# ---------------------------------------------------------------------------------------------------------
def fake_reproduction(root: Path) -> Path:
    rng = np.random.default_rng(3)
    for obj, shift in [("nll", 0.5), ("nll_mmd", 0.1), ("nll_mmd_tanh", 0.0)]:
        for seed, epochs in enumerate([12, 8, 5]):  # seeds stop at different epochs
            write_run(root / "toyreg" / obj / "seeds" / f"seed{seed}", regression_preds(rng, shift=shift),
                      "toyreg", obj, seed, epochs=epochs, rng=rng)  # fmt: skip
    for obj in ("xe", "xe_mmd"):
        write_run(root / "toycls" / obj / "seeds" / "seed0", classification_preds(rng), "toycls", obj, 0, epochs=4,
                  history_cols=("val/ece",))  # fmt: skip
    return root


def test_aggregate_over_the_seeds_present_at_each_epoch():
    h = [{"epoch": np.arange(4.0), "v": np.array([1.0, 2.0, 3.0, 4.0])},
         {"epoch": np.arange(2.0), "v": np.array([3.0, 4.0])},
         {"epoch": np.arange(3.0), "v": np.array([5.0, np.nan, 6.0])}]  # fmt: skip
    agg = aggregate_curves(h, "v")
    assert agg["epoch"].tolist() == [0, 1, 2, 3]
    assert agg["n"].tolist() == [3, 2, 2, 1]
    assert np.allclose(agg["mean"], [3.0, 3.0, 4.5, 4.0])
    assert np.allclose(agg["std"], [2.0, np.sqrt(2.0), np.sqrt(4.5), 0.0])  # ddof=1, 0 with one seed


def test_reproduction_figures(tmp_path):
    root = fake_reproduction(tmp_path / "repro")
    found = seed_runs(root)
    assert sorted(found) == ["toycls", "toyreg"] and [p.name for p in found["toyreg"]["nll"]] == [
        "seed0",
        "seed1",
        "seed2",
    ]
    paths = draw_reproduction(root)
    assert_figures(
        [p for p in paths if p.suffix != ".csv"], ["dce_toyreg", "calibration_toyreg", "calibration_toycls"]
    )
    assert not (root / "figures" / "dce_toycls.png").exists()  # classification: no DCE history
    rows = (root / "figures" / "dce_toyreg.csv").read_text().splitlines()
    assert rows[0] == "objective,split,metric,epoch,mean,std,n"
    last = [r for r in rows if r.startswith("nll,val,dce,11,")]
    assert len(last) == 1 and last[0].endswith(",1")  # only the longest seed reaches epoch 11


def capture_figures(monkeypatch) -> dict:
    """The figures :mod:`kcal.publish.figures.reproduction` saves, by file stem, still drawn on."""
    saved = {}
    original = reproduction_figures.save_figure
    monkeypatch.setattr(
        reproduction_figures,
        "save_figure",
        lambda fig, stem: saved.update({stem.name: fig}) or original(fig, stem),
    )
    return saved


def test_a_curve_stops_before_the_first_epoch_with_fewer_than_half_the_seeds():
    agg = {
        "epoch": np.arange(6),
        "mean": np.arange(6.0),
        "std": np.zeros(6),
        "n": np.array([4, 4, 3, 2, 1, 2]),
    }
    assert while_most_train(agg, 4)["epoch"].tolist() == [0, 1, 2, 3]  # 2 of 4 is half: kept; 1 is not
    assert while_most_train(agg, 5)["epoch"].tolist() == [0, 1, 2]  # 2 of 5 is fewer than half
    assert while_most_train(agg, 1)["n"].tolist() == agg["n"].tolist()  # never fewer than half of one
    cut = while_most_train(agg, 3)
    assert set(cut) == set(agg) and all(len(v) == 4 for v in cut.values())


def test_dce_figure_labels_its_band_counts_the_seeds_and_stops_below_half(tmp_path, monkeypatch):
    """Seeds stop after 12, 8 and 5 epochs: 3 train up to epoch 4, 2 up to 7, 1 after; the curves end at
    epoch 7 (2 of 3 is at least half), the seed-count row goes on to epoch 11, the CSV keeps every epoch."""
    saved = capture_figures(monkeypatch)
    draw_reproduction(fake_reproduction(tmp_path / "repro"))
    fig = saved["dce_toyreg"]
    axes = np.array(fig.axes).reshape(3, 2)
    labels = [objective_label(o) for o in ("nll", "nll_mmd", "nll_mmd_tanh")]
    for ax in axes[:2].ravel():
        lines = ax.get_lines()
        assert len(lines) == 3 and len(ax.collections) == 3  # a line and a band per objective
        assert all(line.get_xdata().max() == 7 for line in lines)
    for ax in axes[:2, 0]:
        assert "mean over seeds" in ax.get_ylabel() and "± 1 SD over seeds" in ax.get_ylabel()
    legend = [t.get_text() for t in axes[0, 0].get_legend().get_texts()]
    assert legend == [f"{lab} (3 seeds, last epochs 4–11; drawn while ≥ 2 train)" for lab in labels]
    for ax in axes[2]:
        counts = [line for line in ax.get_lines() if len(line.get_xdata()) > 2]
        assert len(counts) == 3
        for line in counts:
            assert line.get_xdata().tolist() == list(range(12))
            assert line.get_ydata().tolist() == [3] * 5 + [2] * 3 + [1] * 4
        halves = [line for line in ax.get_lines() if line not in counts]
        assert [line.get_ydata()[0] for line in halves] == [1.5]  # the dotted half line
    assert axes[2, 0].get_ylabel().startswith("seeds still training")
    assert "SD" in fig.get_suptitle() and "fewer than half" in fig.get_suptitle()
    rows = (tmp_path / "repro" / "figures" / "dce_toyreg.csv").read_text().splitlines()
    assert sum(r.startswith("nll,val,dce,") for r in rows) == 12


def test_reliability_figure_shows_each_bins_share_of_rows(tmp_path, monkeypatch):
    rng = np.random.default_rng(11)
    root = tmp_path / "repro"
    for obj in ("xe", "xe_mmd"):
        for seed, n in enumerate([300, 500]):
            write_run(root / "toycls" / obj / "seeds" / f"seed{seed}", classification_preds(rng, n=n), "toycls", obj,
                      seed, epochs=3, history_cols=("val/ece",))  # fmt: skip
    saved = capture_figures(monkeypatch)
    draw_reproduction(root)
    before, after, share_before, share_after = saved["calibration_toycls"].axes
    for ax in (before, after):
        title = ax.get_legend().get_title().get_text()
        assert "ECE: mean ± SD over seeds" in title
    for phase, share in (("before", share_before), ("after", share_after)):
        steps = share.patches
        assert len(steps) == 2 and share.get_xlabel().startswith("top-label confidence")
        for obj, step in zip(("xe", "xe_mmd"), steps, strict=True):
            values, edges, _ = step.get_data()
            assert len(edges) == 21 and values.sum() == pytest.approx(1.0)
            bins = [classification_calibration(dict(np.load(d / "predictions.npz")), "auto")[phase]
                    for d in sorted((root / "toycls" / obj / "seeds").iterdir())]  # fmt: skip
            pooled = bins[0]["count"] + bins[1]["count"]
            assert pooled.sum() == 800 and np.allclose(values, pooled / 800)
    assert "share of test rows" in share_before.get_ylabel()


def test_regression_calibration_figure_says_its_band_is_an_sd_over_seeds(tmp_path, monkeypatch):
    saved = capture_figures(monkeypatch)
    draw_reproduction(fake_reproduction(tmp_path / "repro"))
    fig = saved["calibration_toyreg"]
    for ax in fig.axes:
        assert len(ax.collections) == 3  # one band per objective
        assert "band: ± 1 SD over seeds" in ax.get_legend().get_title().get_text()
    assert "mean ± 1 SD over seeds" in fig.get_suptitle()


def test_all_redraws_every_run_and_reports_skipped_local_maps(tmp_path, capsys):
    root = tmp_path / "repro"
    write_run(root / "toyreg" / "nll" / "seeds" / "seed0", regression_preds(np.random.default_rng(5)), "toyreg",
              epochs=3)  # fmt: skip
    assert cli(["all", str(root), "--local-root", str(tmp_path / "no-local")]) == 0
    out = capsys.readouterr()
    assert (root / "toyreg" / "nll" / "seeds" / "seed0" / "figures" / "calibration.png").is_file()
    assert (root / "figures" / "dce_toyreg.png").is_file() and "dce_toyreg.pdf" in out.out
    assert "kcal figures local --train" in out.err


def test_reproduction_missing_inputs_name_the_producer(tmp_path, capsys):
    assert cli(["reproduction", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli(["reproduction", str(tmp_path / "empty")]) == 2
    assert "seeds/seed<k>" in capsys.readouterr().err
    assert cli(["local", "--root", str(tmp_path / "empty"), "--datasets", "crime"]) == 2
    assert "kcal figures local --train --datasets crime" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------
# local calibration maps (reload the crime split to get phi(x) and the coordinates)
# ---------------------------------------------------------------------------------------------------------
@needs("crime")
def test_local_maps_on_synthetic_forecasts_of_the_crime_split(tmp_path, capsys):
    from kcal.data import load

    data = load("crime", protocol="official", seed=0)
    rng = np.random.default_rng(4)
    for obj, scale in [("nll", 0.3), ("nll_mmd_local", 1.0)]:  # nll: 3x overconfident, mmd: calibrated-ish
        preds = {}
        for split in ("val", "test"):
            y = getattr(data, split).y.double().numpy()
            std = np.full_like(y, 0.2)
            preds |= {f"{split}_mean": y + 0.2 * rng.normal(size=y.shape), f"{split}_std": std * scale,
                      f"{split}_y": y}  # fmt: skip
        write_run(tmp_path / "local" / "crime" / obj, preds, "crime", obj, recalibrator="conformal")
    assert cli(["local", "--root", str(tmp_path / "local"), "--datasets", "crime"]) == 0
    out = capsys.readouterr().out
    assert "crime: mean LCE_total" in out
    assert_figures([tmp_path / "local" / "figures" / f"lce_crime.{e}" for e in ("png", "pdf")], ["lce_crime"])
    summary = json.loads((tmp_path / "local" / "figures" / "lce_summary.json").read_text())["crime"]
    objs = summary["objectives"]
    assert summary["n_test"] == len(data.test) and summary["bandwidth"] > 0
    assert objs["nll"]["lce_total"]["mean"] > 3 * objs["nll_mmd_local"]["lce_total"]["mean"]
    paths, _ = draw_local_maps(tmp_path / "local", ["crime"], bandwidth=0.5)
    assert_figures([p for p in paths if p.suffix != ".json"], ["lce_crime"])


# ---------------------------------------------------------------------------------------------------------
# the kcal.run.artifacts.finalize hook
# ---------------------------------------------------------------------------------------------------------
@needs("crime")
def test_train_finalize_writes_figures_and_a_figure_error_never_fails_the_run(tmp_path, monkeypatch, caplog):
    from hydra import compose, initialize_config_dir

    from kcal.configs import CONFIG_DIR
    from kcal.run import run

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=["dataset=crime", "dataset.max_train_rows=128", "trainer.max_epochs=1",
                                          "trainer.min_epochs=0", "trainer.progress_bar=false",
                                          "save_checkpoint=false"])  # fmt: skip
    assert cfg.figures is True
    metrics = run(cfg, tmp_path / "ok")
    assert metrics["status"] == "ok"
    assert_figures(sorted((tmp_path / "ok" / "figures").iterdir()), ["calibration"])
    data = regression_calibration(dict(np.load(tmp_path / "ok" / "predictions.npz")), "auto")
    assert abs(data["qce"] - metrics["test/qce"]) <= 2 / data["n"]  # the legend's QCE is metrics.json's

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(kcal.run.artifacts, "draw_run_figures", broken)
    with caplog.at_level(logging.WARNING, logger="kcal.run.train"):
        metrics = run(cfg, tmp_path / "broken")
    assert metrics["status"] == "ok" and (tmp_path / "broken" / "metrics.json").is_file()
    assert any("boom" in r.getMessage() for r in caplog.records)


@needs("crime", "crop-yield")
@pytest.mark.parametrize("dataset", ["crime", "crop-yield"])
def test_local_experiment_config_resolves_the_phi_bandwidth_and_builds_the_objective(dataset):
    from kcal.data import load
    from kcal.kernels import median_heuristic
    from kcal.reruns.local_calibration import compose_local_config, resolve_phi_bandwidth
    from kcal.run.setup import decision_threshold, objective_from_config

    cfg = compose_local_config(dataset, "nll_mmd_local")
    assert cfg.objective.params.bandwidth_z == 2.5  # plain `kcal train` uses this number
    cfg = resolve_phi_bandwidth(cfg)
    feats = list(cfg.objective.params.features)
    assert feats == list(cfg.dataset.local_features) and len(feats) == 2
    data = load(dataset, protocol=cfg.dataset.protocol, seed=cfg.seed)
    assert cfg.objective.params.bandwidth_z == pytest.approx(
        median_heuristic(data.train.x[:, feats], max_rows=1000)
    )
    assert cfg.trainer.max_epochs == 100 and cfg.recalibrator.name == "conformal"
    objective = objective_from_config(cfg, data, decision_threshold(cfg, data))
    x, y = data.train.x[:64], data.train.y[:64]
    loss, base, reg = objective(
        (y + 0.1, torch.ones_like(y)), x, y, generator=torch.Generator().manual_seed(0)
    )
    assert torch.isfinite(loss) and reg != 0
    assert compose_local_config(dataset, "nll").objective.name == "nll"


def test_reproduction_over_several_roots_draws_one_figure_per_dataset(tmp_path, capsys, monkeypatch):
    """A dataset whose objectives were trained in two roots (e.g. a rerun of one objective) gets one
    calibration figure with every objective; --datasets picks, --out places, and one objective in two
    roots is refused with both roots named."""
    rng = np.random.default_rng(7)
    first, second, out = tmp_path / "first", tmp_path / "second", tmp_path / "published"
    for root, obj in [(first, "xe"), (first, "xe_mmd"), (second, "xe_kde")]:
        write_run(root / "toycls" / obj / "seeds" / "seed0", classification_preds(rng), "toycls", obj, 0, epochs=4,
                  history_cols=("val/ece",))  # fmt: skip
    write_run(second / "toyreg" / "nll" / "seeds" / "seed0", regression_preds(rng), "toyreg", epochs=3)
    with pytest.raises(MissingInputError, match="no runs of absent under"):
        draw_reproduction([first, second], datasets=["absent"])
    saved = []
    original = reproduction_figures.save_figure
    monkeypatch.setattr(
        reproduction_figures, "save_figure", lambda fig, path: saved.append(fig) or original(fig, path)
    )
    import kcal.publish.figures.__main__ as figures_cli

    monkeypatch.setattr(figures_cli, "check_datasets", lambda args: None)  # toycls is no registered dataset
    assert cli(["reproduction", str(first), str(second), "--datasets", "toycls", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / "calibration_toycls.png"), str(out / "calibration_toycls.pdf")]
    assert not (first / "figures").exists() and not (out / "calibration_toyreg.png").exists()
    before = saved[0].axes[0]  # row-major: before, after, then their bin-share strips
    drawn = {t.get_text().split(":")[0] for t in before.get_legend().get_texts()}
    assert drawn == {objective_label(o) for o in ("xe", "xe_mmd", "xe_kde")}  # both roots in one figure
    write_run(second / "toycls" / "xe" / "seeds" / "seed0", classification_preds(rng), "toycls", "xe", 0, epochs=4,
              history_cols=("val/ece",))  # fmt: skip
    assert cli(["reproduction", str(first), str(second)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: toycls/xe has seeds under both ") and str(first) in err and str(second) in err
    )
