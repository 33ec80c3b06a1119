"""The forecast behind a reproduction's ETA: predicted seconds, refined by what finished pieces took, laid
out on the workers."""

import pytest

from kcal.core.progress import Forecast, Progress, Study

CRIME, BLOG = ("trial", "crime", "nll"), ("trial", "blog", "nll")
CRIME_SEEDS = ("seeds", "crime", "nll")


def plan(workers: int) -> Forecast:
    forecast = Forecast(workers)
    forecast.add_study(Study(CRIME, 4, 10.0, [(CRIME_SEEDS, 30.0)]))
    forecast.add_study(Study(BLOG, 4, 100.0, [(("seeds", "blog", "nll"), 300.0)]))
    return forecast


def test_one_worker_runs_the_plan_one_piece_after_the_other():
    forecast = plan(1)
    assert forecast.seconds_left() == pytest.approx(4 * 10 + 30 + 4 * 100 + 300)
    assert forecast.work_left() == pytest.approx(forecast.seconds_left())


def test_a_study_s_seed_chunks_wait_for_its_last_trial():
    """Two workers: crime's trials in pairs (to 20 s), then its chunk (to 50 s) beside blog's first trial (to
    120 s); blog's trials end at 220 and 250 s; blog's chunk runs alone at the end, while the other worker
    idles: not the work over two workers."""
    forecast = plan(2)
    assert forecast.seconds_left() == pytest.approx(250 + 300)
    assert forecast.seconds_left() > forecast.work_left() / 2
    chain = Forecast(2)
    chain.add_study(Study(BLOG, 1, 100.0, [(("seeds", "blog", "nll"), 100.0)]))
    assert chain.seconds_left() == pytest.approx(200)  # trial, then its seeds: nothing runs beside them


def test_finished_pieces_leave_the_plan_and_scale_what_is_left():
    """Crime's trials take twice their prediction: blog's, not yet seen, are expected twice as long too (the
    family's ratio), crime's own a little more than that (its pieces' ratio, pulled towards the family's)."""
    forecast = plan(1)
    for _ in range(3):
        forecast.finished(CRIME, 10.0, 20.0)
    g = (60 + Forecast.N0 * 10) / (30 + Forecast.N0 * 10)  # the trials' ratio, 3 pieces and N0 of prior
    assert forecast.ratio(BLOG) == pytest.approx(g) and 1.5 < g < 2
    assert forecast.ratio(CRIME) == pytest.approx((60 + Forecast.M * g * 10) / (30 + Forecast.M * 10))
    assert forecast.ratio(CRIME_SEEDS) == 1.0  # another family: seeds are not trials
    left = 1 * 10 * forecast.ratio(CRIME) + 30 + 4 * 100 * g + 300
    assert forecast.seconds_left() == pytest.approx(left) and forecast.work_done() == 60
    forecast.finished(CRIME, 10.0, 20.0)
    forecast.finished(CRIME_SEEDS, 30.0, 15.0)  # the last crime pieces: blog's study is all that is left
    assert forecast.studies[0].trials == 0 and forecast.studies[0].chunks == []


def test_a_long_trial_of_a_study_moves_its_estimate_but_does_not_set_it():
    """Trials of one study vary several-fold (batch size, widths): one trial five times as long as three
    others that took their prediction moves the study's estimate by less than 2x."""
    forecast = plan(1)
    for seconds in (100.0, 100.0, 100.0, 500.0):
        forecast.finished(BLOG, 100.0, seconds)
    assert 1.5 < forecast.ratio(BLOG) < 2


def test_progress_with_a_forecast_reports_its_eta_and_share_of_work(capsys):
    class Stage:
        def piece(self, family, n):
            return (CRIME, 10.0 * n) if family == "trial" else (CRIME_SEEDS, 30.0)

    forecast = plan(1)
    total = 4 * 10 + 30 + 4 * 100 + 300
    progress = Progress(total, "protocol", forecast=forecast)
    assert progress.status() == f"protocol 0% ETA {(total // 60)}m{total % 60:02d}s"
    progress.advance(1, "[crime/nll] trial 1/4", "trial", 10.0, stage=Stage())
    assert (
        capsys.readouterr().err
        == f"[crime/nll] trial 1/4 | protocol 1% ETA {(total - 10) // 60}m{(total - 10) % 60:02d}s\n"
    )
    progress.advance(0, "[crime/nll] a surplus trial", "trial", 10.0, stage=Stage())  # not counted: no piece
    assert forecast.work_done() == 10.0


def test_a_busy_machine_stretches_the_time_left_by_its_recent_pace():
    """Pieces that got half a core (wall twice their CPU seconds) lately: the CPU seconds left take twice as
    long; an old slow piece counts less than a recent fast one (weights e^(-age/TAU))."""
    forecast = plan(1)
    forecast.finished(CRIME, 10.0, 20.0, cpu=10.0, at=100.0)
    assert forecast.pace(now=100.0) == pytest.approx(2.0)
    assert forecast.seconds_left(now=100.0) == pytest.approx(2.0 * forecast.work_left())
    forecast.finished(CRIME, 10.0, 10.0, cpu=10.0, at=100.0 + Forecast.TAU)
    w = 2.718281828459045**-1
    assert forecast.pace(now=100.0 + Forecast.TAU) == pytest.approx((w * 20 + 10) / (w * 10 + 10))
    assert forecast.work_done() == 20.0  # CPU seconds


def test_without_a_forecast_the_eta_counts_what_a_resumed_piece_trained_before(capsys, monkeypatch):
    """A point that went on from a snapshot took minutes in this process after an hour before the stop: the ETA's
    rate counts the hour, or it promises the rest in minutes."""
    now = [0.0]
    monkeypatch.setattr("kcal.core.progress.time.perf_counter", lambda: now[0])
    plain, resumed = Progress(6, "paths"), Progress(6, "paths")
    now[0] = 60.0
    plain.advance(1, "[paths adult] xe_mmce λ=1", "point")
    resumed.advance(1, "[paths adult] xe_mmce λ=1", "point", before=3540.0)
    assert "ETA 5m00s" in capsys.readouterr().err.splitlines()[0]
    assert resumed.seconds_left() == pytest.approx(3600.0 * 5)


def test_with_a_forecast_a_resumed_piece_stays_out_of_the_ratios():
    """A seed chunk that went on from a snapshot took this process minutes of an hour's work: its seconds would
    drag the seeds' ratio down, so a forecast leaves it out (as a warm-up piece) and keeps the plan's estimate."""

    class Stage:
        def piece(self, family, n):
            return (CRIME_SEEDS, 30.0)

    def ratio_after(before: float) -> float:
        forecast = plan(1)
        progress = Progress(770, "protocol", forecast=forecast)
        progress.advance(
            1, "[crime/nll] seeds 0-49 of 50", "seeds", 3.0, stage=Stage(), warmup=False, before=before
        )
        return forecast.ratio(CRIME_SEEDS)

    assert ratio_after(0.0) < 0.9  # a 3 s chunk predicted at 30 s pulls the ratio down
    assert ratio_after(3600.0) == pytest.approx(1.0)  # one that went on from a snapshot is left out
