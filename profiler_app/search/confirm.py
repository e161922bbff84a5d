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
from typing import Any, TypeVar

from .. import measure, repeats
from ..level_figures import Figures, GoodputFigures, StreamFigures
from .objective import Score

F = TypeVar("F", bound=Figures)
DEFAULT_TOP = 3
DEFAULT_ROUNDS = 3
MAX_TOP = 10
MAX_ROUNDS = 10
# The figures of a level (`scoring.level_json`) taken as medians over rounds: a sweep's
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
    only when every round settled there (`level_json` rows, plus `rounds`: how many)."""
    usable = good_rounds(rounds)
    if not usable:
        return []
    by_round = [{lv.level: lv for lv in map(measure.Level.from_json, r["levels"])} for r in usable]
    common = sorted(set.intersection(*(set(levels) for levels in by_round)))
    out = []
    for c in common:
        rows = [levels[c] for levels in by_round]
        medians: dict[str, Any] = {}
        for name in MEDIAN_FIELDS:
            values = [v for v in (r.figure(name) for r in rows) if v is not None]
            medians[name] = statistics.median(values) if values else None
        avg_batch = medians.pop("avg_batch")
        level = measure.Level(
            level=c,
            **{**medians, "throughput": medians["throughput"] or 0.0},
            requests=sum(r.requests for r in rows),
            errors=sum(r.errors for r in rows),
            duration_s=sum(r.duration_s for r in rows),
            stable=all(r.stable is not False for r in rows),
            extra={
                "windows": sum(int(r.extra.get("windows") or 0) for r in rows),
                "avg_batch": avg_batch,
                "over_threshold": any(r.extra.get("over_threshold") for r in rows),
            },
            stream=_median_record(StreamFigures, rows),
            goodput=_median_record(GoodputFigures, rows),
        )
        out.append({**measure.search_json(level), "rounds": len(rows)})
    return out


def _median_record(kind: type[F], rows: Sequence[measure.Level]) -> F | None:
    """Sub-record figures a search may be judged on (`objective.metrics_for`: a streaming
    sweep's, goodput's): medians over the rounds that measured them."""
    found = {}
    for name in kind.names():
        values = [v for v in (r.figure(name) for r in rows) if v is not None]
        if values:
            found[name] = statistics.median(values)
    return kind.only(**found) if found else None


def objective_spread(
    rounds: Sequence[dict[str, Any]], score_levels: Callable[[list[dict[str, Any]]], Score | None]
) -> repeats.Spread | None:
    """The objective (the search's throughput-like metric, or its latency in µs) of each
    good round that met the constraints; None with fewer than 2."""
    values = []
    for r in good_rounds(rounds):
        s = score_levels(r["levels"])
        if s is not None and s.feasible and s.objective is not None:
            values.append(s.objective)
    if len(values) < 2:
        return None
    return repeats.Spread.of(values)


def spread_text(spread: repeats.Spread | None) -> str:
    if spread is None or spread.half_range is None:
        return ""
    return f"± {spread.half_range * 100:.0f}% over {spread.rounds} rounds"
