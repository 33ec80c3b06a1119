"""kcal reevaluate: a root's seeds evaluated again from their saved forecasts, with this checkout's code."""

import json

import pandas as pd
import pytest

from kcal.reruns.reevaluate import main, reevaluate

from ..common import copy_root
from ..data.conftest import needs

pytestmark = needs("crime")


def seed_dirs(root):
    return sorted((root / "crime" / "nll_mmd" / "seeds").glob("seed*"))


def test_reevaluation_restores_official_keys_and_records_the_evaluation(
    regression_smoke_root, tmp_path, capsys
):
    root = copy_root(regression_smoke_root, tmp_path / "root")
    seed0 = seed_dirs(root)[0]
    metrics = json.loads((seed0 / "metrics.json").read_text())
    truth = metrics["official/test_recal/nll"]
    exact = {k: v for k, v in metrics.items() if k.startswith(("test/", "test_recal/"))}
    metrics["official/test_recal/nll"] = 999.0  # as an older evaluation code would have left it
    (seed0 / "metrics.json").write_text(json.dumps(metrics))
    results = pd.read_csv(root / "results.csv")
    reevaluate(root)
    again = json.loads((seed0 / "metrics.json").read_text())
    assert again["official/test_recal/nll"] == pytest.approx(truth, rel=1e-12)
    assert {k: again[k] for k in exact} == exact  # the exact keys stay as written
    info = json.loads((seed0 / "run.json").read_text())["evaluation"]
    assert info["changed"] == ["official/test_recal/nll"] and info["commit"] and info["kcal"]
    other = json.loads((seed_dirs(root)[1] / "run.json").read_text())["evaluation"]
    assert other["changed"] == []  # this code's own numbers come back unchanged
    pd.testing.assert_frame_equal(pd.read_csv(root / "results.csv"), results, check_exact=False, rtol=1e-12)
    assert "crime/nll_mmd: 2 seeds evaluated again (1 official values moved)" in capsys.readouterr().out


def test_a_seed_without_forecasts_stops_it_before_anything_is_written(regression_smoke_root, tmp_path):
    root = copy_root(regression_smoke_root, tmp_path / "root")
    (seed_dirs(root)[1] / "predictions.npz").unlink()
    before = (seed_dirs(root)[0] / "metrics.json").read_text()
    with pytest.raises(SystemExit, match="1 finished seed.*kept no predictions.npz.*nothing was written"):
        main([str(root)])
    assert (seed_dirs(root)[0] / "metrics.json").read_text() == before
    assert main([str(root), "--datasets", "blog"]) == 0  # another dataset's seeds are not in the way
