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
    # Without intervals (perf_analyzer's, or stored before them), how unsure is their spread.
    assert summary["sureness"] == "unsure" and not summary["from_measured"]
    assert summary["sureness_text"] == (
        "Unsure: levels 5–8 did not settle and could move the knee; no interval was recorded "
        "for them (their last 3 windows spread up to 18%)."
    )


def test_unsettled_levels_with_intervals_that_decide_the_knee_are_read_as_measured():
    rows = [
        _with_interval(p, p["throughput"] * 0.9, p["throughput"] * 1.1, None if i >= 4 else "rule")
        for i, p in enumerate(RISING_THEN_UNSTABLE)
    ]
    summary = verdict.summarize(rows, PARAMS, "succeeded")
    assert summary["from_measured"] and summary["knee_level"] == 5
    assert summary["recommendation"] == (
        "Not every level settled within 10 windows, so this is read from what was measured: "
        "concurrency 5 gives 4,200 ± 420 infer/s at p95 1.50 ms; beyond it throughput rises 1% "
        "while p95 rises 7%."
    )
    assert summary["sureness"] == "unsure" and summary["sureness_text"].startswith(
        "Unsure: levels 5–8 did not settle, so this is read from what was measured; the "
        "levels it rests on are known to ±10% of their throughput"
    )
    assert summary["caveat"].startswith("Levels 5–8 did not settle within 10 windows")


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


def test_no_settled_level_means_a_recommendation_from_what_was_measured_graded_unsure():
    # perf_analyzer's levels (no interval): the figures as measured, their spreads named.
    curve = [_level(lv, 1000 * lv, 1000, stable=False, spread=0.3) for lv in (1, 2)]
    params = SweepParams(model="m", start=1, end=2, max_windows=3)
    summary = verdict.summarize(curve, params, "succeeded")
    assert summary["recommendation"] == (
        "No level settled within 3 windows, so this is read from what was measured: "
        "concurrency 2 gives 2,000 infer/s at p95 1.00 ms; throughput was still rising at the "
        "last level, so try higher loads."
    )
    assert summary["from_measured"] and summary["sureness"] == "unsure"
    assert summary["sureness_text"] == (
        "Unsure: no level settled, so this is read from what was measured; no interval was "
        "recorded for them (their last 3 windows spread up to 30%)."
    )
    assert summary["knee_level"] == 2 and summary["best_level"] is None
    assert summary["caveat"].startswith("Levels 1–2 did not settle within 3 windows (spread up")


def _with_interval(
    row: dict[str, Any], low: float, high: float, by: str | None, windows: int = 9
) -> dict[str, Any]:
    interval = {
        "throughput": [low, high],
        "latency": [row["p95_us"] * 0.98, row["p95_us"] * 1.02],
        "windows": windows,
        "confidence": 0.9609,
        "settled_by": by,
    }
    return {**row, "extra": {**row["extra"], "interval": interval}}


# A busy machine, 10 windows a level: nothing met either rule. Each level is the median of
# its 9 windows after the first, with that median's interval.
BUSY = [
    _with_interval(_level(1, 1000, 1000, stable=False, spread=0.2), 950, 1040, None),
    _with_interval(_level(2, 1900, 1050, stable=False, spread=0.25), 1800, 1990, None),
    _with_interval(_level(3, 2700, 1100, stable=False, spread=0.2), 2500, 2840, None),
    _with_interval(_level(4, 2750, 1500, stable=False, spread=0.3), 2600, 2900, None),
]


def test_a_busy_machines_sweep_recommends_from_what_was_measured_with_intervals():
    params = SweepParams(model="m", start=1, end=4, max_windows=10)
    summary = verdict.summarize(BUSY, params, "succeeded")
    assert summary["recommendation"] == (
        "No level settled within 10 windows, so this is read from what was measured: "
        "concurrency 3 gives 2,700 ± 200 infer/s at p95 1.10 ms; beyond it throughput rises "
        "2% while p95 rises 36%."
    )
    assert summary["knee_level"] == 3 and summary["sureness"] == "unsure"
    # How sure: the widest interval it rests on (levels 1-4: level 3's +140/-200 of 2,700),
    # and the knee's neighbour 4 overlaps it.
    assert summary["sureness_text"] == (
        "Unsure: no level settled, so this is read from what was measured; the levels it "
        "rests on are known to ±7% of their throughput (96% intervals of the median over up "
        "to 9 windows); the levels next to it overlap it, so the knee could as well be one "
        "of them."
    )
    budget = SweepParams(model="m", start=1, end=4, max_windows=10, latency_threshold_ms=1.2)
    best = verdict.summarize(BUSY, budget, "succeeded")["recommendation"]
    assert best.endswith(
        "Best within the 1.2 ms budget: concurrency 3 with 2,700 ± 200 infer/s at p95 1.10 ms."
    )


def test_a_level_settled_by_its_interval_counts_and_shows_its_margin():
    rows = [
        _with_interval(_level(1, 1000, 1000), 990, 1010, "rule", windows=3),
        _with_interval(_level(2, 1900, 1050, spread=0.14), 1850, 1960, "interval"),
        _with_interval(_level(3, 1950, 1300), 1930, 1970, "rule", windows=3),
    ]
    summary = verdict.summarize(rows, SweepParams(model="m", start=1, end=3), "succeeded")
    assert summary["recommendation"] == (
        "Concurrency 2 gives 1,900 ± 60 infer/s at p95 1.05 ms; beyond it throughput rises 3% "
        "while p95 rises 24%."
    )
    assert summary["sureness"] == "within" and not summary["from_measured"]
    assert summary["sureness_text"] == (
        "Settled within ±3%: level 2 met the 96% intervals of the median over up to 9 "
        "windows rather than perf_analyzer's 3-window rule."
    )
    assert summary["caveat"] == "" and summary["unstable_levels"] == []


def test_levels_settled_by_the_rule_read_exactly_as_before():
    rows = [_with_interval(p, p["throughput"] - 5, p["throughput"] + 5, "rule", 3) for p in CURVE]
    with_intervals = verdict.summarize(rows, PARAMS, "succeeded")
    without = verdict.summarize(CURVE, PARAMS, "succeeded")
    assert with_intervals["recommendation"] == without["recommendation"]
    assert with_intervals["caveat"] == without["caveat"]
    assert with_intervals["sureness"] == without["sureness"] == "settled"
    assert with_intervals["sureness_text"] == without["sureness_text"] == ""


def _busy_host(row: dict[str, Any], busy: float, local: bool, ours: float = 0.4) -> dict[str, Any]:
    host = {"cpus": 2, "busy": busy, "steal": 0.0, "load_per_cpu": 2.4,
            "load_generator": ours, "triton_local": local}  # fmt: skip
    return {**row, "extra": {**row["extra"], "host": host}}


def test_the_host_is_named_as_the_noise_when_it_was_busy_during_levels():
    rows = [_busy_host(p, busy, local=True) for p, busy in zip(CURVE, [0.6, 0.8, 0.93, 0.97,
            0.99, 0.98, 0.5, 0.99], strict=True)]  # fmt: skip
    summary = verdict.summarize(rows, PARAMS, "succeeded")
    assert summary["host_busy_levels"] == [3, 4, 5, 6, 8]
    assert summary["host_note"] == (
        "The host itself is the noise: during concurrency 3–6, 8 the load generator's machine "
        "(2 CPUs) was up to 99% busy (the load generator 40% of it, the rest Triton and "
        "anything else running), and Triton's address is on that machine, so Triton and the "
        "load generator competed for the same CPUs. The figures and their intervals describe "
        "Triton on that busy machine; for cleaner ones run the load from another machine or "
        "stop other work on this one."
    )
    remote = verdict.summarize([_busy_host(CURVE[0], 0.95, local=False)], PARAMS, "succeeded")
    assert "so the load generator competed for CPU." in remote["host_note"]
    assert "the rest other processes" in remote["host_note"]
    quiet = verdict.summarize([_busy_host(p, 0.5, local=True) for p in CURVE], PARAMS, "succeeded")
    assert quiet["host_note"] == "" and quiet["host_busy_levels"] == []
    assert verdict.summarize(CURVE, PARAMS, "succeeded")["host_note"] == ""  # stored before


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
