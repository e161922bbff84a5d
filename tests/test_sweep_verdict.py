"""The verdict of a sweep: only levels that settled decide it, unstable ones are named with
their spread, and a sweep that did not finish recommends nothing beyond what it measured."""

from __future__ import annotations

from typing import Any

from profiler_app import verdict
from profiler_app.engine import stats
from profiler_app.params import SweepParams


def _level(
    level: float, tput: float, p95_us: float, *, stable: bool = True, spread: float = 0.02
) -> dict[str, Any]:
    return {
        "level": level,
        "window": -1,
        "throughput": tput,
        "requests": 500,
        "p95_us": p95_us,
        "stable": stable,
        "extra": {"windows": 3 if stable else 10, "throughput_spread": spread},
    }


PARAMS = SweepParams(model="m", start=1, end=8, step=1, max_windows=10)
# Settled levels 1-4 still rising; 5-8 did not settle. Believed, they would put the knee at
# 5 ("Concurrency 5 gives 4,200 infer/s").
RISING_THEN_UNSTABLE = [
    _level(1, 1000, 1000),
    _level(2, 1900, 1050),
    _level(3, 2700, 1100),
    _level(4, 3400, 1200),
    _level(5, 4200, 1500, stable=False, spread=0.18),
    _level(6, 4250, 1600, stable=False, spread=0.12),
    _level(7, 4300, 1700, stable=False, spread=0.09),
    _level(8, 4350, 1800, stable=False, spread=0.09),
]
# Settled levels flatten at 4; 6-8 did not settle, beyond what decided the knee.
CURVE = [
    _level(1, 1000, 1000),
    _level(2, 1900, 1050),
    _level(3, 2700, 1100),
    _level(4, 3400, 1200),
    _level(5, 3500, 1500),
    _level(6, 5200, 1600, stable=False, spread=0.18),
    _level(7, 6100, 1700, stable=False, spread=0.12),
    _level(8, 7000, 1800, stable=False, spread=0.09),
]


def test_a_curve_with_unstable_levels_gives_no_recommendation_from_them():
    summary = verdict.summarize(RISING_THEN_UNSTABLE, PARAMS, "succeeded")
    assert summary["knee_level"] == 4 and summary["knee_reason"] == "end"
    assert summary["recommendation"] == (
        "Concurrency 4 gives 3,400 infer/s at p95 1.20 ms; throughput was still rising at "
        "the last level that settled; the levels after it did not."
    )
    assert summary["unstable_levels"] == [5, 6, 7, 8]
    assert summary["caveat"] == (
        "Levels 5–8 did not settle within 10 windows (spread up to 18%): the knee is "
        "uncertain; raise max windows or the window length."
    )


def test_unstable_levels_beyond_the_knee_are_named_and_left_out():
    summary = verdict.summarize(CURVE, PARAMS, "succeeded")
    assert summary["knee_level"] == 4 and summary["knee_reason"] == "gain"
    assert summary["recommendation"].startswith("Concurrency 4 gives 3,400 infer/s")
    assert summary["caveat"] == (
        "Levels 6–8 did not settle within 10 windows (spread up to 18%), so they are left out "
        "of the verdict; raise max windows or the window length."
    )


def test_an_unstable_level_inside_the_knee_makes_the_knee_uncertain():
    curve = [dict(p) for p in CURVE[:5]]
    curve[4] = _level(5, 3500, 1500, stable=False, spread=0.18)  # the level after the knee
    summary = verdict.summarize(curve, PARAMS, "succeeded")
    assert summary["caveat"] == (
        "Level 5 did not settle within 10 windows (spread 18%): the knee is uncertain; raise "
        "max windows or the window length."
    )
    assert summary["knee_level"] == 4 and summary["knee_reason"] == "end"
    # The end of the settled curve is not the end of the range: no "try higher loads".
    assert "try higher loads" not in summary["recommendation"]
    assert "last level that settled" in summary["recommendation"]


def test_a_best_level_within_the_budget_is_never_an_unstable_one():
    params = SweepParams(model="m", start=1, end=8, step=1, latency_threshold_ms=1.65)
    summary = verdict.summarize(CURVE, params, "succeeded")
    assert summary["best_level"] == 5  # 6 (1.6 ms, 5,200 infer/s) fits but did not settle


def test_no_settled_level_means_nothing_to_recommend():
    curve = [_level(lv, 1000 * lv, 1000, stable=False, spread=0.3) for lv in (1, 2)]
    params = SweepParams(model="m", start=1, end=2, max_windows=3)
    summary = verdict.summarize(curve, params, "succeeded")
    assert summary["recommendation"] == (
        "No level settled within 3 windows, so there is nothing to recommend."
    )
    assert summary["knee_level"] is None and summary["best_level"] is None
    assert summary["caveat"].startswith("Levels 1–2 did not settle within 3 windows (spread up")


def test_a_cancelled_or_failed_sweep_states_what_it_measured_and_recommends_nothing_beyond():
    rising = [_level(1, 1000, 1000), _level(2, 1900, 1050), _level(3, 2700, 1100)]
    for state, verb in (("cancelled", "was cancelled"), ("failed", "failed")):
        text = verdict.summarize(rising, PARAMS, state)["recommendation"]
        assert text.startswith(f"The sweep {verb} after measuring concurrency 1–3 of 1:8:1.")
        assert "try higher loads" not in text and "nothing beyond it was measured" in text
    nothing = verdict.summarize([], PARAMS, "interrupted")["recommendation"]
    assert nothing == (
        "The sweep was interrupted before any level completed: nothing to recommend."
    )
    # A finished sweep that settled to its last level may still say so.
    whole = [_level(1, 1000, 1000), _level(2, 1900, 1050)]
    done = verdict.summarize(whole, SweepParams(model="m", start=1, end=2), "succeeded")
    assert done["recommendation"].endswith("so try higher loads.")


def test_a_level_cut_short_is_not_measured_and_a_row_without_the_flag_counts_as_settled():
    cut = {**_level(4, 3400, 1200), "extra": {"cancelled": True}}
    legacy = {**_level(1, 1000, 1000), "stable": None}
    assert not verdict.measured(cut) and verdict.measured(legacy)
    summary = verdict.summarize([legacy, cut], PARAMS, "cancelled")
    assert "concurrency 1 of 1:8:1" in summary["recommendation"] and summary["caveat"] == ""


def test_falling_throughput_reads_falls_never_rises_minus():
    points = [stats.CurvePoint(1, 1000, 1000), stats.CurvePoint(2, 840, 1300)]
    text = stats.recommendation(points)
    assert text.endswith("beyond it throughput falls 16% while p95 rises 30%.")
    assert "-" not in text.split(";")[1]
    flat = stats.recommendation([stats.CurvePoint(1, 1000, 1000), stats.CurvePoint(2, 1002, 1000)])
    assert "throughput stays flat while p95 stays flat" in flat


def test_levels_text_joins_runs_of_the_step():
    assert verdict.levels_text([6, 7, 8], 1) == "6–8"
    assert verdict.levels_text([2, 6, 7, 8], 1) == "2, 6–8"
    assert verdict.levels_text([100, 300], 100) == "100, 300"
    assert verdict.levels_text([0.5, 1.0], 0.5) == "0.5–1"
