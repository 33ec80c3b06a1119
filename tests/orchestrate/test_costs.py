"""A reproduction's predicted costs come from measured times: the published full studies, a recorded quick
run, and for other profiles the nearest of them scaled by epochs and rows."""

import csv

import pytest

from kcal.core import layout

from ..common import compose_cfg


def cfg(dataset: str, objective: str, *overrides: str):
    return compose_cfg("seeds", f"dataset={dataset}", f"objective={objective}", *overrides)


def published_trial_s(dataset: str, objective: str) -> float:
    with open(layout.published_data("full") / layout.STUDIES_FILE, newline="") as f:
        row = next(r for r in csv.DictReader(f) if (r["dataset"], r["objective"]) == (dataset, objective))
    return float(row["trial_hours"]) * 3600 / sum(int(row[k]) for k in ("complete", "failed", "not_counted"))


def recorded_row(profile: str, dataset: str, label: str) -> dict:
    with open(layout.resources_dir() / layout.TIMINGS_FILE, newline="") as f:
        return next(
            r
            for r in csv.DictReader(f)
            if (r["profile"], r["dataset"], r["label"]) == (profile, dataset, label)
        )


def test_full_trials_cost_what_the_published_studies_measured():
    from kcal.orchestrate.costs import predict

    for dataset, objective in [("crime", "nll"), ("blog", "nll_mmd"), ("adult", "xe_kde")]:
        assert predict(cfg(dataset, objective, "profile=full")).trial_s == pytest.approx(
            published_trial_s(dataset, objective)
        )
    # a blog NLL + MMD trial (36k rows, ~200 s epochs' worth) outweighs a crime one many times
    assert (
        predict(cfg("blog", "nll_mmd", "profile=full")).trial_s
        > 10 * predict(cfg("crime", "nll_mmd", "profile=full")).trial_s
    )


def test_quick_pieces_cost_what_the_recorded_quick_run_measured():
    from kcal.orchestrate.costs import predict

    row = recorded_row("quick", "blog", "nll_mmd@samples=100")
    samples = cfg("blog", "nll_mmd", "profile=quick", "objective.params.num_samples=100")
    got = predict(samples, "nll_mmd@samples=100")
    assert got.chunk_s == pytest.approx(float(row["chunk_s"])) and got.chunk_seeds == pytest.approx(
        float(row["chunk_seeds"])
    )
    assert got.trial_s == pytest.approx(float(recorded_row("quick", "blog", "nll_mmd")["trial_s"]))
    assert got.chunk(5) > got.chunk(3) > got.chunk(2)


def test_unmeasured_pieces_are_scaled_from_measured_ones():
    from kcal.orchestrate.costs import DRAWS_COST, FIXED_S, REGULARISER_COST, predict, profile_epochs

    full = {k: predict(cfg("crime", k, "profile=full")) for k in ("nll", "nll_mmd")}
    # Table 6's reruns have no study of their own: NLL + MMD's seeds, times the draws' cost
    m200 = predict(
        cfg("crime", "nll_mmd", "profile=full", "objective.params.num_samples=200"), "nll_mmd@samples=200"
    )
    assert m200.chunk_s == pytest.approx(full["nll_mmd"].chunk_s * (1 + 190 * DRAWS_COST))
    # an objective the dataset was not swept with: a measured one of it, times the regularisers' ratio
    local = predict(cfg("crime", "nll_mmd_local", "profile=full"))
    assert local.trial_s == pytest.approx(full["nll"].trial_s * REGULARISER_COST["mmd"])
    # a dataset measured nowhere: crime's, times the training rows
    crop = predict(cfg("crop-yield", "nll", "profile=full"))
    from kcal.orchestrate.costs import full_rows

    assert crop.trial_s == pytest.approx(full["nll"].trial_s * full_rows("crop-yield") / full_rows("crime"))
    # smoke (2 epochs, 200 rows) is the quick run (25 epochs) scaled; what a trial costs outside its epochs stays
    quick = predict(cfg("crime", "nll", "profile=quick"))
    smoke = predict(cfg("crime", "nll", "profile=smoke"))
    scale = profile_epochs("smoke") / profile_epochs("quick") * 200 / full_rows("crime")
    assert smoke.trial_s == pytest.approx(FIXED_S + (quick.trial_s - FIXED_S) * scale)
    assert FIXED_S < smoke.trial_s < quick.trial_s
