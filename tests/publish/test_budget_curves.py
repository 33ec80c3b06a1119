"""kcal.publish.figures.budget_curves: one figure per dataset, every objective a mean line over its runs of the
protocol with their range as a band, whether its trials were kept by the published run, its replicates or both."""

import numpy as np
import pandas as pd
import pytest

from kcal.publish.budget import expected_best
from kcal.publish.figures import budget_curves as budget_figures


def trials(dataset: str, objective: str, values: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"dataset": dataset, "objective": objective, "number": range(len(values)),
                         "state": "complete", "value": values, "direction": "minimize"})  # fmt: skip


def test_runs_band_is_the_mean_and_range_of_the_runs_curves_up_to_the_shortest_run():
    runs = [[0.5, 0.4, 0.3], [0.6, 0.2], [0.9, 0.1, 0.7, 0.8]]
    band = budget_figures.runs_band(runs, maximize=False)
    assert band["k"].tolist() == [1, 2] and band["runs"] == 3 and band["trials"] == (2, 4)
    curves = np.stack([expected_best(v, [1, 2], maximize=False) for v in runs])
    assert np.allclose(band["mean"], curves.mean(0))
    assert np.allclose(band["low"], curves.min(0)) and np.allclose(band["high"], curves.max(0))
    one = budget_figures.runs_band([[0.5, 0.4, 0.3]], maximize=False)
    np.testing.assert_allclose(one["low"], one["mean"])
    np.testing.assert_allclose(one["high"], one["mean"])
    with pytest.raises(ValueError, match="at least one run"):
        budget_figures.runs_band([], maximize=True)


def test_every_objective_is_one_line_and_a_band_over_its_runs(tmp_path, monkeypatch):
    """crime's published studies kept no trials, its replicates did: crime still gets a figure. heart-disease's
    XE has a published and a replicate study, its XE + ECE-KDE only the published one: every objective is one
    line of the same width, a band where two or more runs exist, and the legend says which."""
    drawn = {}
    real_save = budget_figures.save_figure

    def save(fig, path):
        drawn[path.name] = fig
        return real_save(fig, path)

    monkeypatch.setattr(budget_figures, "save_figure", save)
    published = pd.concat(
        [trials("heart-disease", "xe", [0.5, 0.4, 0.3]), trials("heart-disease", "xe_kde", [0.4])]
    )
    replicates = {
        "sampler_seed=1": pd.concat(
            [trials("crime", "nll", [1.0, 0.9]), trials("heart-disease", "xe", [0.6, 0.2, 0.5])]
        ),
        "sampler_seed=2": trials("crime", "nll", [0.8, 0.7, 0.75]),
    }
    written = budget_figures.draw_budget_curves(published, tmp_path, replicates=replicates)
    assert sorted(p.name for p in written if p.suffix == ".png") == [
        "budget_crime.png",
        "budget_heart-disease.png",
    ]
    for name, expected in {
        "budget_crime": ["NLL (2 runs; 2–3 trials, drawn to k = 2)"],
        "budget_heart-disease": ["XE (2 runs; 3 trials each)", "XE + KDE (1 run of 1 trial: no band)"],
    }.items():
        ax = drawn[name].axes[0]
        assert [line.get_label() for line in ax.get_lines()] == expected
        assert len({line.get_linewidth() for line in ax.get_lines()}) == 1  # every objective drawn alike
        legend = ax.get_legend()
        assert [t.get_text() for t in legend.get_texts()] == expected
        assert budget_figures.BAND in legend.get_title().get_text()
        assert budget_figures.LINE in legend.get_title().get_text()
        assert len(ax.collections) == 1  # one band: crime's NLL, heart-disease's XE (XE + KDE has one run)
    band = budget_figures.runs_band([[0.5, 0.4, 0.3], [0.6, 0.2, 0.5]], maximize=False)
    (heart_band,) = drawn["budget_heart-disease"].axes[0].collections
    ys = heart_band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(band["low"].min()) and ys.max() == pytest.approx(band["high"].max())
    xe = drawn["budget_heart-disease"].axes[0].get_lines()[0]
    assert np.allclose(xe.get_ydata(), band["mean"])
