"""Judging one candidate by the search's objective: the levels it is judged on (the medians of
its re-measurements, or its one measurement), in the two metrics the search judges on
(`objective.metrics_for`), scored by `objective.score`, with the spread of its rounds.
"""

from __future__ import annotations

from typing import Any

from .. import measure, repeats
from ..engine.results import LevelResult
from ..models import Search, SearchCandidate
from . import confirm, objective


def level_json(lv: LevelResult) -> dict[str, Any]:
    """A measured level as a candidate stores it (`measure.search_json`)."""
    return measure.search_json(lv.measured())


def constraints_of(search: Search) -> objective.Constraints:
    return objective.Constraints.from_json(search.constraints)


def metrics_of(search: Search) -> objective.Metrics:
    """The two metrics the search judges candidates on (`objective.metrics_for`): from its
    objective and what its measurement streams (a search stored before streaming ones
    existed has no such flag: infer/s and the request latency, as before)."""
    params = search.sweep.params if search.sweep_id else {}
    return objective.metrics_for(
        search.objective,
        constraints_of(search),
        streaming=bool(params.get("streaming")),
        tokens=bool(params.get("token_output")),
    )


def effective_levels(candidate: SearchCandidate) -> list[dict[str, Any]]:
    """What a candidate is judged on: the medians of its re-measurements when it has at
    least two, else its one measurement."""
    rounds = candidate.rounds or []
    if len(confirm.good_rounds(rounds)) >= 2:
        return confirm.median_levels(rounds)
    return list(candidate.levels)


def score_of(candidate: SearchCandidate, search: Search) -> objective.Score | None:
    if candidate.state != SearchCandidate.State.MEASURED:
        return None
    return score_levels(effective_levels(candidate), search, candidate.gpu_memory_bytes)


def spread_of(candidate: SearchCandidate, search: Search) -> repeats.Spread | None:
    """The candidate's objective over its re-measurement rounds (None without two)."""
    if candidate.state != SearchCandidate.State.MEASURED:
        return None
    return confirm.objective_spread(
        candidate.rounds or [],
        lambda levels: score_levels(levels, search, candidate.gpu_memory_bytes),
    )


def score_levels(
    levels: list[dict[str, Any]], search: Search, gpu_memory_bytes: float | None = None
) -> objective.Score | None:
    """The search's objective for measured levels (`level_json` rows, or older ones that
    say `concurrency` only), in its metrics."""
    c, m = constraints_of(search), metrics_of(search)
    points = (m.point(measure.Level.from_json(lv), c) for lv in levels)
    usable = [p for p in points if p is not None]
    memory_mb = gpu_memory_bytes / 2**20 if gpu_memory_bytes else None
    return objective.score(usable, c, search.objective, memory_mb, m)
