"""kcal.publish.retrained: a retrained row is within its published seed SE, or it is flagged."""

import pandas as pd
import pytest

from kcal.core.layout import RESULTS_FILE, published_data
from kcal.publish.retrained import compare, main


def rows(*values):
    return pd.DataFrame(
        [
            {
                "dataset": "crime",
                "objective": "nll",
                "recalibrator": "none",
                "flavour": "exact",
                "metric": m,
                "mean": mean,
                "se": se,
                "n": 50,
            }
            for m, mean, se in values
        ]  # fmt: skip
    )


def test_a_move_within_the_seed_se_passes_and_one_beyond_it_is_flagged():
    published = rows(("nll", 1.0, 0.1), ("crps", 0.5, 0.01), ("kce", 0.0, 0.0))
    retrained = rows(("nll", 1.09, 0.1), ("crps", 0.52, 0.01), ("kce", 0.0, 0.0), ("qce", 0.2, 0.01))
    table = compare(published, retrained).set_index("metric")
    assert table.loc["nll", "within"] and table.loc["nll", "in_se"] == pytest.approx(0.9)
    assert table.loc["crps", "within"] is False and table.loc["crps", "in_se"] == pytest.approx(2.0)
    assert table.loc["kce", "within"]  # a zero SE: the same number
    assert table.loc["qce", "within"] is None  # nothing published to compare with
    assert compare(published, retrained, k=2.5).set_index("metric").loc["crps", "within"]


def test_the_command_exits_1_on_a_metric_outside_and_0_when_all_are_within(tmp_path, capsys):
    published = published_data("full") / RESULTS_FILE
    row = pd.read_csv(published).query("dataset == 'heart-disease' and objective == 'xe'").head(3)
    (tmp_path / "same.csv").write_text(row.to_csv(index=False))
    assert main([str(tmp_path / "same.csv")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 of 3 metrics within 1 published seed SE"
    moved = row.assign(mean=row["mean"] + 3 * row["se"] + 1e-6)
    (tmp_path / "moved.csv").write_text(moved.to_csv(index=False))
    assert main([str(tmp_path / "moved.csv")]) == 1
    assert "OUTSIDE" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([str(tmp_path / "absent.csv")])
