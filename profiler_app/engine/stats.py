"""Statistics for performance sweeps, computed the way perf_analyzer computes them.

Mirrors perf_analyzer's `inference_profiler.cc` (checked against 2.48 and main):

- Percentiles (`SummarizeLatency`): latencies are sorted and pN is the element at index
  `int(N / 100 * (n - 1) + 0.5)`, i.e. the nearest rank on the (n - 1) scale, rounding
  halves up. (Not `ceil(N / 100 * n) - 1`: that rule differs by one element for some n.)
- Average latency is the integer mean in ns; the standard deviation is the sample one.
- Stability (`DetermineStability` / `CheckWindowForStability`): with threshold
  `t = stability_percentage / 100`, a level is stable once the last 3 windows all have
  non-zero throughput and both `max(ips) / min(ips) <= 1 + t` and
  `max(lat) / min(lat) <= 1 + t`, where `lat` is the chosen latency of each window
  (pN when a percentile is chosen, else the average).
- Latency limit (`IsDoneProfiling` / `CheckWithinThreshold`): once 3 windows exist, a
  level stops early when any of the last 3 window latencies is `>=` the limit; a level
  whose merged latency is `>=` the limit ends the sweep.
- A stable level is reported by merging its last 3 windows: all their latencies pooled,
  throughput = requests x batch / summed window durations.

Our addition, for machines where three windows in a row never agree (a busy or small
host): the interval of a level's median (`median_interval`, `settle`). When perf_analyzer's
rule fails, the level keeps measuring, up to its max windows (its time budget), and its
windows after the first are judged together: the level has settled "within ±x%" once the
95% interval of their median throughput, and of their median chosen latency, is no wider
than the stability percentage (the width perf_analyzer allows its three windows). Such a
level reports the median of those windows' throughput (with its interval) and pools their
latencies. A level that settles neither way still carries its interval, so a verdict can
recommend from what was measured and say how sure it is (`profiler_app.verdict`).

The interval is the distribution-free one for a median (order statistics): with n windows,
[x(k), x(n+1-k)] covers the true median with probability 1 - 2 P(Binomial(n, 1/2) <= k-1),
and k is the largest that keeps that at least 95%. It is exact for independent windows,
needs no resampling (so it is deterministic), and is honest on few windows, where a
bootstrap percentile interval of the median is not: at 7 windows the bootstrap's "95%"
interval [x(2), x(6)] covers 87.5%. Below 6 windows no 95% interval exists; the range of
the windows is then given with its own, lower, confidence.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# A level at its chosen latency (re-exported: the knee and recommendation take it), defined
# with the measured level it is read from.
from ..measure import CurvePoint as CurvePoint

STABILITY_WINDOWS = 3  # perf_analyzer's load_parameters_.stability_window
REPORTED_PERCENTILES = (50, 90, 95, 99)


def percentile_index(count: int, percentile: float) -> int:
    """Index of the pN element in a sorted list of `count` values, as perf_analyzer picks it."""
    if count <= 0:
        raise ValueError("no values")
    if not 0 <= percentile <= 100:
        raise ValueError(f"percentile {percentile} is outside 0..100")
    return int(percentile / 100.0 * (count - 1) + 0.5)


def percentile(sorted_values: Sequence[int] | Sequence[float], pct: float) -> float:
    """The pN of already sorted values (perf_analyzer's rule)."""
    return float(sorted_values[percentile_index(len(sorted_values), pct)])


@dataclass(frozen=True)
class LatencySummary:
    """Client latency of a set of requests, in microseconds."""

    count: int
    avg_us: float
    std_us: float
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float

    def value(self, chosen: str | int) -> float:
        """The latency a sweep stabilises and budgets on: "avg" or a percentile (e.g. 95)."""
        if chosen == "avg":
            return self.avg_us
        pct = int(chosen)
        named = {50: self.p50_us, 90: self.p90_us, 95: self.p95_us, 99: self.p99_us}
        if pct not in named:
            raise ValueError(f"percentile must be one of {sorted(named)} or 'avg', not {chosen}")
        return named[pct]


def summarize_latencies(latencies_ns: Sequence[int]) -> LatencySummary:
    """Average, sample standard deviation and p50/p90/p95/p99 (µs) of latencies in ns."""
    values = sorted(latencies_ns)
    n = len(values)
    if n == 0:
        raise ValueError("no completed requests in the window")
    mean_ns = sum(values) // n  # integer mean, as perf_analyzer
    std_us = (
        math.sqrt(sum((v - mean_ns) ** 2 for v in values) / (n - 1)) / 1000 if n > 1 else math.inf
    )
    p = {q: percentile(values, q) / 1000 for q in REPORTED_PERCENTILES}
    return LatencySummary(n, mean_ns / 1000, std_us, p[50], p[90], p[95], p[99])


def spread(values: Sequence[float]) -> float:
    """max/min - 1 (as a fraction): how far apart the values are; inf if any is zero."""
    low, high = min(values), max(values)
    if low <= 0:
        return math.inf
    return high / low - 1


def is_stable(
    throughputs: Sequence[float],
    latencies: Sequence[float],
    stability_percentage: float,
    *,
    check_latency: bool = True,
) -> bool:
    """perf_analyzer's stability rule over the last 3 windows (see the module docstring)."""
    if len(throughputs) < STABILITY_WINDOWS:
        return False
    ips = throughputs[-STABILITY_WINDOWS:]
    if any(v == 0 for v in ips):
        return False
    limit = 1 + stability_percentage / 100.0
    if max(ips) / min(ips) > limit:
        return False
    if not check_latency:
        return True
    lat = latencies[-STABILITY_WINDOWS:]
    if min(lat) <= 0:
        return max(lat) <= 0
    return max(lat) / min(lat) <= limit


# --- the interval of a level's median ------------------------------------------------------

CONFIDENCE = 0.95
# The fewest windows with a 95% interval of their median (1 - 2 / 2^6 = 96.9%): a level
# settles by its interval only from this many windows after its first.
MIN_INTERVAL_WINDOWS = 6
MAX_INTERVAL_WINDOWS = 50  # the latest windows judged (a level of 1000 windows: its last 50)


@dataclass(frozen=True)
class Interval:
    """The median of some windows' values and an interval for it."""

    median: float
    low: float
    high: float
    windows: int
    confidence: float  # the probability that [low, high] holds the true median

    @property
    def width(self) -> float:
        """(high - low) / median: inf when the median is not above 0."""
        return (self.high - self.low) / self.median if self.median > 0 else math.inf

    def margin(self, around: float) -> float:
        """The ± that covers the interval around a reported value (the larger side)."""
        return max(self.high - around, around - self.low, 0.0)


def _binomial_tail(n: int, k: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The median of `values` and the narrowest order-statistic interval with at least
    `confidence` coverage; the whole range (with its lower coverage) when there are too few
    values for that. None without values."""
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    if n == 0:
        return None
    k = 1  # 1-based: [x(k), x(n+1-k)]
    while k < (n + 1) // 2 and 1 - 2 * _binomial_tail(n, k) >= confidence:
        k += 1
    return Interval(
        median=statistics.median(ordered),
        low=ordered[k - 1],
        high=ordered[n - k],
        windows=n,
        confidence=1 - 2 * _binomial_tail(n, k - 1),
    )


@dataclass(frozen=True)
class Settling:
    """How a level's windows settled: `by` "rule" (perf_analyzer's, over the last 3),
    "interval" (the interval of the median, see the module docstring) or None (neither);
    `windows` the last windows its figures pool, and their intervals."""

    by: str | None
    windows: int
    throughput: Interval | None
    latency: Interval | None

    @property
    def settled(self) -> bool:
        return self.by is not None

    @property
    def reports_median(self) -> bool:
        """Whether the level reports the median of its windows (not perf_analyzer's merge
        of the last 3): judged by the interval, settled or not."""
        return self.by != "rule" and self.windows > STABILITY_WINDOWS


def judged_windows(count: int) -> int:
    """How many of a level's last windows the interval judges: those after the first, at
    most MAX_INTERVAL_WINDOWS, once MIN_INTERVAL_WINDOWS of them exist; before that, the
    last 3 (perf_analyzer's)."""
    if count - 1 >= MIN_INTERVAL_WINDOWS:
        return min(count - 1, MAX_INTERVAL_WINDOWS)
    return min(count, STABILITY_WINDOWS)


def settle(
    throughputs: Sequence[float],
    latencies: Sequence[float],
    stability_percentage: float,
    *,
    check_latency: bool = True,
) -> Settling:
    """Whether a level's windows so far have settled, and how (see `Settling`): first
    perf_analyzer's rule (`is_stable`), unchanged; then the interval of the median of the
    windows after the first, whose width must be within the stability percentage for the
    throughput and (with `check_latency`) the chosen latency."""
    limit = stability_percentage / 100.0
    if is_stable(throughputs, latencies, stability_percentage, check_latency=check_latency):
        last = STABILITY_WINDOWS
        return Settling(
            "rule",
            last,
            median_interval(throughputs[-last:]),
            median_interval(latencies[-last:]) if check_latency else None,
        )
    tail = judged_windows(len(throughputs))
    ips = median_interval(throughputs[-tail:]) if tail else None
    lat = median_interval(latencies[-tail:]) if tail and check_latency else None
    by = None
    if (
        len(throughputs) - 1 >= MIN_INTERVAL_WINDOWS
        and ips is not None
        and ips.confidence >= CONFIDENCE
        and ips.width <= limit
        and (lat is None or lat.width <= limit)
    ):
        by = "interval"
    return Settling(by, tail, ips, lat)


def over_latency_limit(latencies_us: Sequence[float], limit_ms: float | None) -> bool:
    """True once 3 windows exist and any of the last 3 has latency >= the limit."""
    if not limit_ms or len(latencies_us) < STABILITY_WINDOWS:
        return False
    return any(v >= limit_ms * 1000 for v in latencies_us[-STABILITY_WINDOWS:])


# --- reading a finished sweep -----------------------------------------------------------------


@dataclass(frozen=True)
class Knee:
    index: int  # index into the points
    reason: str  # "gain" (throughput flattens), "budget" (latency over it) or "end"


def find_knee(
    points: Sequence[CurvePoint],
    *,
    min_gain_pct: float = 5.0,
    latency_budget_ms: float | None = None,
) -> Knee | None:
    """The last level worth running: the one after which throughput gains less than
    `min_gain_pct` per step, or the last one before latency exceeds the budget.

    Points must be sorted by level. Returns None when not even the first level fits the
    budget.
    """
    if not points:
        return None
    budget_us = latency_budget_ms * 1000 if latency_budget_ms else math.inf
    if points[0].latency_us > budget_us:
        return None
    for i in range(len(points) - 1):
        nxt = points[i + 1]
        if nxt.latency_us > budget_us:
            return Knee(i, "budget")
        current = points[i].throughput
        gain = (nxt.throughput - current) / current * 100 if current > 0 else math.inf
        if gain < min_gain_pct:
            return Knee(i, "gain")
    return Knee(len(points) - 1, "end")


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


END_NOTE = "throughput was still rising at the last level, so try higher loads"


def throughput_text(value: float, margin: float | None = None) -> str:
    """'1,150' or, with its interval's margin, '1,150 ± 90'."""
    return f"{value:,.0f}" + (f" ± {margin:,.0f}" if margin is not None else "")


def change_text(pct: float) -> str:
    """'rises 2%', 'falls 16%' or 'stays flat' (never 'rises -16%')."""
    if abs(pct) < 0.5:
        return "stays flat"
    return f"rises {pct:.0f}%" if pct > 0 else f"falls {-pct:.0f}%"


def recommendation(
    points: Sequence[CurvePoint],
    *,
    mode: str = "concurrency",
    latency_label: str = "p95",
    min_gain_pct: float = 5.0,
    latency_budget_ms: float | None = None,
    end_note: str = END_NOTE,
    margins: Mapping[float, float] | None = None,
) -> str:
    """One sentence naming the knee, e.g. "Concurrency 4 gives 3,488 infer/s at p95 1.45 ms;
    beyond it throughput rises 2% while p95 rises 20%".

    `end_note` ends the sentence when throughput still rose at the last point: a sweep that
    stopped early, or whose later levels did not settle, says so instead of "try higher
    loads" (see `profiler_app.verdict`). `margins` (level -> ± infer/s) show a level's
    throughput with its interval: "1,150 ± 90 infer/s"."""
    if not points:
        return "No level completed, so there is nothing to recommend."
    knee = find_knee(points, min_gain_pct=min_gain_pct, latency_budget_ms=latency_budget_ms)
    label = "Concurrency" if mode == "concurrency" else "Request rate"
    if knee is None:
        first = points[0]
        return (
            f"Even {label.lower()} {first.level:g} exceeds the {latency_budget_ms:g} ms budget "
            f"({latency_label} {_ms(first.latency_us)})."
        )
    p = points[knee.index]
    head = (
        f"{label} {p.level:g} gives {throughput_text(p.throughput, (margins or {}).get(p.level))} "
        f"infer/s at {latency_label} {_ms(p.latency_us)}"
    )
    if knee.reason == "end":
        return f"{head}; {end_note}."
    nxt = points[knee.index + 1]
    gain = (nxt.throughput - p.throughput) / p.throughput * 100 if p.throughput else 0.0
    lat_rise = (nxt.latency_us - p.latency_us) / p.latency_us * 100 if p.latency_us else 0.0
    if knee.reason == "budget":
        return (
            f"{head}; the next level ({nxt.level:g}) exceeds the {latency_budget_ms:g} ms "
            f"budget at {latency_label} {_ms(nxt.latency_us)}."
        )
    return (
        f"{head}; beyond it throughput {change_text(gain)} while {latency_label} "
        f"{change_text(lat_rise)}."
    )
