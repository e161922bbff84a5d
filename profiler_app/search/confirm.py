"""Ranking that survives noise: the top candidates measured again, side by side.

A search measures each candidate once, and the best of many noisy measurements is biased
upwards (the winner's curse): a grid once ranked "1 instance, 100 µs delay" at 1,099
infer/s against 1,881 for "0 µs" on noise alone. So after the strategy, the top other
candidates and the current config (the reference of every gain) are measured again in
`rounds` alternating rounds (A B C, then C B A, ...: as benchmarks/bench_search.py does
offline), each loaded as a config override in turn, so a drift of the machine lands on
all of them alike.

A re-measured candidate is then judged on its rounds only (not on the measurement that
selected it): per concurrency, the median of its rounds (`median_levels`), and its
objective's spread over the rounds (`objective_spread`). Two candidates are tied when
their ranges [min, max] of the objective overlap; a current config tied with the best is
kept ("no change is better than noise").
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import repeats
from .objective import Score

DEFAULT_TOP = 3
DEFAULT_ROUNDS = 3
MAX_TOP = 10
MAX_ROUNDS = 10
# The fields of a level (`runner.level_json`) taken as medians over rounds: a sweep's
# round fields, and the search's batch size.
MEDIAN_FIELDS = (*repeats.MEDIAN_FIELDS, "avg_batch")


def order(keys: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """(round, key) in measuring order: forwards, then backwards, alternating."""
    out: list[tuple[int, str]] = []
    for n in range(1, rounds + 1):
        pass_keys = list(keys) if n % 2 == 1 else list(reversed(keys))
        out.extend((n, key) for key in pass_keys)
    return out


def good_rounds(rounds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rounds if r.get("levels") and not r.get("error")]


def median_levels(rounds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per concurrency measured in every good round: the median of each figure; stable
    only when every round settled there."""
    usable = good_rounds(rounds)
    if not usable:
        return []
    by_round = [{lv["concurrency"]: lv for lv in r["levels"]} for r in usable]
    common = sorted(set.intersection(*(set(levels) for levels in by_round)))
    out = []
    for c in common:
        rows = [levels[c] for levels in by_round]
        level: dict[str, Any] = {"concurrency": c}
        for name in MEDIAN_FIELDS:
            values = [r[name] for r in rows if r.get(name) is not None]
            level[name] = statistics.median(values) if values else None
        level["throughput"] = level["throughput"] or 0.0
        level["stable"] = all(r.get("stable") is not False for r in rows)
        level["windows"] = sum(int(r.get("windows") or 0) for r in rows)
        level["errors"] = sum(int(r.get("errors") or 0) for r in rows)
        level["rounds"] = len(rows)
        out.append(level)
    return out


@dataclass(frozen=True)
class ObjectiveSpread:
    """A candidate's objective over its rounds (throughput in infer/s, or latency in µs)."""

    median: float
    low: float
    high: float
    rounds: int

    @property
    def half_range(self) -> float | None:
        if self.rounds < 2 or self.median == 0:
            return None
        return (self.high - self.low) / 2 / abs(self.median)

    def overlaps(self, other: ObjectiveSpread) -> bool:
        return self.low <= other.high and other.low <= self.high

    def to_json(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
            "half_range": self.half_range,
        }


def objective_spread(
    rounds: Sequence[dict[str, Any]], score_levels: Callable[[list[dict[str, Any]]], Score | None]
) -> ObjectiveSpread | None:
    """The objective of each good round that met the constraints; None with fewer than 2."""
    values = []
    for r in good_rounds(rounds):
        s = score_levels(r["levels"])
        if s is not None and s.feasible and s.objective is not None:
            values.append(s.objective)
    if len(values) < 2:
        return None
    return ObjectiveSpread(statistics.median(values), min(values), max(values), len(values))


def spread_text(spread: ObjectiveSpread | None) -> str:
    if spread is None or spread.half_range is None:
        return ""
    return f"± {spread.half_range * 100:.0f}% over {spread.rounds} rounds"
