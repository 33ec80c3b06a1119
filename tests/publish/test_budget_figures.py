"""kcal.publish.figures.budget: one figure per dataset, a replicate's studies drawn beside the published ones."""

import matplotlib.pyplot as plt
import pandas as pd

from kcal.publish.figures import budget as budget_figures


def trials(dataset: str, objective: str, values: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"dataset": dataset, "objective": objective, "number": range(len(values)),
                         "state": "complete", "value": values, "direction": "minimize"})  # fmt: skip


def test_a_dataset_with_replicate_trials_only_gets_its_figure_and_every_run_is_a_line(tmp_path, monkeypatch):
    """crime's published studies kept no trials, its replicates did: crime still gets a budget figure, with
    one thin line per replicate study; heart-disease's published study keeps its band and one legend entry."""
    drawn = {}
    real_save = budget_figures.save_figure

    def save(fig, path):
        drawn[path.name] = [(line.get_linewidth(), line.get_label()) for line in fig.axes[0].get_lines()]
        return real_save(fig, path)

    monkeypatch.setattr(budget_figures, "save_figure", save)
    published = trials("heart-disease", "xe", [0.5, 0.4, 0.3])
    replicates = {
        "sampler_seed=1": pd.concat(
            [trials("crime", "nll", [1.0, 0.9]), trials("heart-disease", "xe", [0.6, 0.2])]
        ),
        "sampler_seed=2": trials("crime", "nll", [0.8, 0.7, 0.75]),
    }
    written = budget_figures.draw_budget_curves(published, tmp_path, replicates=replicates)
    assert sorted(p.name for p in written if p.suffix == ".png") == [
        "budget_crime.png",
        "budget_heart-disease.png",
    ]
    crime = drawn["budget_crime"]
    assert len(crime) == 2 and all(width < 1.0 for width, _ in crime)
    assert [label for _, label in crime].count("NLL (2 replicates)") == 1
    heart = drawn["budget_heart-disease"]
    assert len(heart) == 2 and heart[0][0] > heart[1][0]  # the published curve, then the thinner replicate
    assert heart[0][1] == "XE (n = 3)"
    plt.close("all")
