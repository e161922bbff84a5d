"""Percentiles, stability and knee detection, mirroring perf_analyzer."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiler_app.engine import stats
from profiler_app.engine.stats import CurvePoint


def test_percentile_index_matches_perf_analyzers_rounding() -> None:
    # int(p/100 * (n-1) + 0.5), as in SummarizeLatency
    assert stats.percentile_index(100, 95) == 94  # 94.05 + .5 -> 94
    assert stats.percentile_index(10, 50) == 5  # 4.5 + .5 -> 5 (halves round up)
    assert stats.percentile_index(1, 99) == 0
    assert stats.percentile_index(21, 95) == 19


def test_percentile_of_sorted_values_picks_the_element() -> None:
    values = list(range(1, 101))
    assert stats.percentile(values, 50) == 51
    assert stats.percentile(values, 99) == 99


@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=300), st.sampled_from([50, 90, 95, 99]))
def test_percentile_is_an_element_between_min_and_max(values: list[int], pct: int) -> None:
    ordered = sorted(values)
    value = stats.percentile(ordered, pct)
    assert value in ordered
    assert ordered[0] <= value <= ordered[-1]


@given(st.lists(st.integers(1, 10**8), min_size=2, max_size=200))
def test_percentiles_never_decrease_with_p(values: list[int]) -> None:
    s = stats.summarize_latencies(values)
    assert s.p50_us <= s.p90_us <= s.p95_us <= s.p99_us
    assert min(values) / 1000 <= s.avg_us <= max(values) / 1000


def test_summary_uses_the_integer_mean_and_sample_deviation() -> None:
    s = stats.summarize_latencies([1000, 2000, 3001])
    assert s.avg_us == 2.0  # 6001 // 3 ns
    assert s.std_us == pytest.approx(math.sqrt(((1000 - 2000) ** 2 + 0 + 1001**2) / 2) / 1000)
    assert s.value("avg") == s.avg_us and s.value(95) == s.p95_us


def test_summary_of_no_latencies_is_an_error() -> None:
    with pytest.raises(ValueError):
        stats.summarize_latencies([])


def test_stability_needs_three_windows() -> None:
    assert not stats.is_stable([100, 100], [10, 10], 10)
    assert stats.is_stable([100, 100, 100], [10, 10, 10], 10)


def test_stability_is_max_over_min_within_the_percentage_for_both_series() -> None:
    assert stats.is_stable([100, 105, 110], [10, 10, 10], 10)  # 110/100 = 1.10
    assert not stats.is_stable([100, 105, 111], [10, 10, 10], 10)
    assert not stats.is_stable([100, 100, 100], [10, 10, 12], 10)
    assert stats.is_stable([100, 100, 100], [10, 10, 12], 10, check_latency=False)


def test_stability_looks_only_at_the_last_three_windows() -> None:
    assert stats.is_stable([10, 500, 100, 101, 102], [1, 99, 10, 10, 10], 5)


def test_a_window_without_throughput_is_never_stable() -> None:
    assert not stats.is_stable([0, 0, 0], [0, 0, 0], 10)


@given(
    st.lists(st.floats(1, 1e6), min_size=3, max_size=10),
    st.lists(st.floats(1, 1e6), min_size=3, max_size=10),
    st.floats(0, 100),
)
def test_stability_agrees_with_the_spread_of_the_last_three(
    ips: list[float], lat: list[float], pct: float
) -> None:
    expected = (
        stats.spread(ips[-3:]) <= pct / 100 + 1e-12 and stats.spread(lat[-3:]) <= pct / 100 + 1e-12
    )
    # At the boundary float rounding may fall either way (pct 0 with [1, 1, 1 + 2e-16]):
    # the same 1e-12 allowance as `expected`.
    assert stats.is_stable(ips, lat, pct) == expected or math.isclose(
        max(stats.spread(ips[-3:]), stats.spread(lat[-3:])), pct / 100, rel_tol=1e-9, abs_tol=1e-12
    )


def test_latency_limit_counts_only_once_three_windows_exist() -> None:
    assert not stats.over_latency_limit([5000, 5000], 1)
    assert stats.over_latency_limit([500, 500, 1000], 1)  # >= the limit, like perf_analyzer
    assert not stats.over_latency_limit([500, 500, 999], 1)
    assert not stats.over_latency_limit([5000, 5000, 5000], None)


def _curve(tputs: list[float], lats_ms: list[float]) -> list[CurvePoint]:
    return [
        CurvePoint(i + 1, t, lat * 1000)
        for i, (t, lat) in enumerate(zip(tputs, lats_ms, strict=True))
    ]


def test_knee_is_where_throughput_stops_gaining() -> None:
    points = _curve([1000, 1900, 2800, 2850, 2860], [1.0, 1.05, 1.1, 1.4, 1.9])
    knee = stats.find_knee(points, min_gain_pct=5)
    assert knee is not None and knee.index == 2 and knee.reason == "gain"


def test_knee_stops_before_the_latency_budget() -> None:
    points = _curve([1000, 1900, 2800, 3600], [1.0, 1.2, 1.6, 2.5])
    knee = stats.find_knee(points, latency_budget_ms=2.0)
    assert knee is not None and knee.index == 2 and knee.reason == "budget"


def test_no_knee_when_even_the_first_level_breaks_the_budget() -> None:
    assert stats.find_knee(_curve([1000], [3.0]), latency_budget_ms=2.0) is None


@given(
    st.lists(st.tuples(st.floats(1, 1e5), st.floats(0.01, 100)), min_size=1, max_size=12),
    st.floats(0, 50),
)
def test_knee_of_a_curve_is_always_one_of_its_levels(
    pairs: list[tuple[float, float]], gain: float
) -> None:
    points = _curve([p[0] for p in pairs], [p[1] for p in pairs])
    knee = stats.find_knee(points, min_gain_pct=gain)
    assert knee is not None and 0 <= knee.index < len(points)


def test_max_throughput_within_a_budget_takes_the_highest_throughput_that_fits() -> None:
    from profiler_app.search import objective

    def best(budget_ms: float) -> stats.CurvePoint | None:
        found = objective.score(
            points, objective.Constraints(latency_budget_ms=budget_ms), "max_throughput"
        )
        return found.level if found is not None and found.feasible else None

    points = _curve([1000, 3000, 2500, 4000], [1.0, 1.5, 1.2, 2.5])
    chosen = best(2.0)
    assert chosen is not None and chosen.throughput == 3000
    assert best(0.5) is None


def test_recommendation_reads_as_one_sentence_with_the_numbers() -> None:
    points = [CurvePoint(1, 956, 1170), CurvePoint(4, 3488, 1450), CurvePoint(8, 3558, 1740)]
    text = stats.recommendation(points, latency_label="p95")
    assert text == (
        "Concurrency 4 gives 3,488 infer/s at p95 1.45 ms; "
        "beyond it throughput rises 2% while p95 rises 20%."
    )


def test_recommendation_says_when_throughput_was_still_rising() -> None:
    text = stats.recommendation(_curve([1000, 2000], [1.0, 1.1]))
    assert "still rising" in text and text.startswith("Concurrency 2 gives 2,000 infer/s")


# --- the interval of a level's median (our addition for busy machines) ---------------------

# A busy machine's level: a warm-up window, then windows around 1,000 infer/s, where a
# neighbour's burst knocks one window up (2), one latency up (5) and one window down (8),
# so no 3 windows in a row are within 10% on both throughput and latency.
NOISY = [500, 1000, 1200, 990, 1005, 1010, 1000, 995, 800, 1015]
NOISY_LAT = [900, 1000, 1010, 990, 1005, 1300, 995, 1012, 1003, 998]


def test_median_interval_is_the_order_statistic_interval_with_at_least_95_percent() -> None:
    nine = stats.median_interval([9, 1, 8, 2, 7, 3, 6, 4, 5])
    assert nine is not None and (nine.low, nine.median, nine.high) == (2, 5, 8)
    assert nine.windows == 9 and nine.confidence == pytest.approx(1 - 2 * 10 / 512)
    # Too few windows for 95%: the whole range, with its own (lower) confidence.
    five = stats.median_interval([3, 1, 2, 5, 4])
    assert five is not None and (five.low, five.high) == (1, 5)
    assert five.confidence == pytest.approx(1 - 2 / 32)
    assert stats.median_interval([]) is None


@given(st.lists(st.floats(1, 1e6), min_size=1, max_size=60))
def test_the_interval_holds_the_median_and_never_claims_more_than_it_covers(
    values: list[float],
) -> None:
    iv = stats.median_interval(values)
    assert iv is not None and iv.low <= iv.median <= iv.high
    assert min(values) <= iv.low and iv.high <= max(values)
    if len(values) >= stats.MIN_INTERVAL_WINDOWS:
        assert iv.confidence >= stats.CONFIDENCE


def test_a_noisy_level_that_fails_the_rule_settles_within_its_interval() -> None:
    # perf_analyzer's rule never holds: every 3 windows in a row spread over 10%.
    assert not any(
        stats.is_stable(NOISY[: i + 1], NOISY_LAT[: i + 1], 10) for i in range(len(NOISY))
    )
    s = stats.settle(NOISY, NOISY_LAT, 10)
    assert s.settled and s.by == "interval" and s.reports_median
    # Judged: the 9 windows after the warm-up; their median and its 96% interval, which
    # leaves out the window knocked up and the one knocked down.
    assert s.windows == 9 and s.throughput is not None and s.latency is not None
    assert (s.throughput.low, s.throughput.median, s.throughput.high) == (990, 1000, 1015)
    assert s.throughput.confidence == pytest.approx(0.961, abs=1e-3)
    assert s.throughput.margin(1000) == 15  # "1,000 ± 15 infer/s": within ±1.5%
    assert (s.latency.low, s.latency.high) == (995, 1012)


def test_settled_within_means_the_intervals_width_is_within_the_stability_percentage() -> None:
    assert stats.settle(NOISY, NOISY_LAT, 3).by == "interval"  # width 25 / 1000
    assert stats.settle(NOISY, NOISY_LAT, 2).by is None
    # The latency's interval counts too, as perf_analyzer's rule checks both.
    jumpy = [900, 1000, 1400, 800, 1300, 700, 1200, 900, 1500, 1000]
    assert stats.settle(NOISY, jumpy, 10).by is None
    assert stats.settle(NOISY, jumpy, 10, check_latency=False).by == "interval"


def test_the_interval_judges_the_windows_after_the_first_once_six_exist() -> None:
    assert [stats.judged_windows(n) for n in (0, 2, 3, 6, 7, 10, 51, 1000)] == [
        0, 2, 3, 3, 6, 9, 50, 50
    ]  # fmt: skip
    early = stats.settle(NOISY[:6], NOISY_LAT[:6], 10)
    assert early.by is None and early.windows == 3 and not early.reports_median


def test_a_level_settled_by_the_rule_is_unchanged() -> None:
    s = stats.settle([10, 500, 100, 101, 102], [1, 99, 10, 10, 10], 5)
    assert s.by == "rule" and s.windows == 3 and not s.reports_median
    assert s.throughput is not None and (s.throughput.low, s.throughput.high) == (100, 102)


def test_a_level_that_never_settles_still_carries_its_interval() -> None:
    wild = [500, 400, 1600, 900, 2000, 700, 1500, 600, 1800, 1000]
    s = stats.settle(wild, NOISY_LAT, 10)
    assert not s.settled and s.reports_median and s.windows == 9
    assert s.throughput is not None and s.throughput.confidence >= stats.CONFIDENCE
    assert (s.throughput.low, s.throughput.median, s.throughput.high) == (600, 1000, 1800)


def test_the_recommendation_shows_a_margin_where_one_is_given() -> None:
    points = [CurvePoint(1, 1000, 1000), CurvePoint(4, 1150, 1450), CurvePoint(8, 1160, 1740)]
    text = stats.recommendation(points, margins={4: 90})
    assert text.startswith("Concurrency 4 gives 1,150 ± 90 infer/s at p95 1.45 ms;")
