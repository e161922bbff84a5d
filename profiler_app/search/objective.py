"""Constraints, the objective, a candidate's score, ranking and the Pareto front.

A candidate is measured at one or more concurrency levels. Its operating point is the
level the objective picks among those meeting every constraint:

- ``max_throughput``: the highest throughput whose latency (at the chosen percentile) is
  within the budget and whose throughput is at least the floor;
- ``min_latency``: the lowest latency whose throughput reaches the floor (and, when a
  budget is set too, whose latency is within it).

A candidate with no such level is infeasible; its score then measures how far it misses
(the smallest total relative violation over its levels), so hill climbing can still walk
toward feasibility. Scores compare as (feasible, goodness): every feasible candidate beats
every infeasible one; failed candidates (no measurement) have no score.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..measure import CurvePoint

# A candidate's measured level at the chosen latency (`measure.Level.curve_point`); its
# `concurrency` is its level.
Level = CurvePoint

OBJECTIVES = ("max_throughput", "min_latency")


@dataclass(frozen=True)
class Constraints:
    latency_budget_ms: float | None = None
    percentile: int | str = 95  # 50/90/95/99 or "avg"
    min_throughput: float | None = None  # infer/s
    gpu_memory_limit_mb: float | None = None

    @property
    def latency_label(self) -> str:
        return "avg" if self.percentile == "avg" else f"p{int(self.percentile)}"

    @property
    def latency_key(self) -> str:
        return "avg_us" if self.percentile == "avg" else f"p{int(self.percentile)}_us"

    def to_json(self) -> dict[str, Any]:
        return {
            "latency_budget_ms": self.latency_budget_ms,
            "percentile": self.percentile,
            "min_throughput": self.min_throughput,
            "gpu_memory_limit_mb": self.gpu_memory_limit_mb,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Constraints:
        pct = data.get("percentile", 95)
        return cls(
            latency_budget_ms=data.get("latency_budget_ms"),
            percentile=pct if pct == "avg" else int(pct),
            min_throughput=data.get("min_throughput"),
            gpu_memory_limit_mb=data.get("gpu_memory_limit_mb"),
        )


@dataclass(frozen=True)
class Score:
    feasible: bool
    goodness: float  # higher is better: throughput, -latency, or -violation
    level: Level | None  # the operating point (or the nearest miss)
    objective: float | None  # throughput (infer/s) or latency (µs); None when infeasible
    violation: float = 0.0
    reason: str = ""

    def sort_key(self) -> tuple[int, float]:
        return (1 if self.feasible else 0, self.goodness)

    def better_than(self, other: Score | None, margin: float = 0.0) -> bool:
        """Strictly better, by more than `margin` (relative) when both are feasible."""
        if other is None:
            return True
        if self.feasible != other.feasible:
            return self.feasible
        if self.feasible and margin:
            return self.goodness > other.goodness + abs(other.goodness) * margin
        return self.goodness > other.goodness


def _violation(level: Level, c: Constraints) -> tuple[float, list[str]]:
    total, reasons = 0.0, []
    if c.latency_budget_ms:
        over = level.latency_us / (c.latency_budget_ms * 1000) - 1
        if over > 0:
            total += over
            reasons.append(f"{c.latency_label} over the {c.latency_budget_ms:g} ms budget")
    if c.min_throughput:
        under = 1 - level.throughput / c.min_throughput
        if under > 0:
            total += under
            reasons.append(f"throughput under {c.min_throughput:g} infer/s")
    return total, reasons


def score(
    levels: Sequence[Level],
    constraints: Constraints,
    objective: str,
    gpu_memory_mb: float | None = None,
) -> Score | None:
    """The candidate's score, or None when nothing was measured."""
    usable = [lv for lv in levels if lv.throughput > 0 and math.isfinite(lv.latency_us)]
    if not usable:
        return None
    memory_over = 0.0
    if constraints.gpu_memory_limit_mb and gpu_memory_mb is not None:
        memory_over = max(0.0, gpu_memory_mb / constraints.gpu_memory_limit_mb - 1)
    feasible = [lv for lv in usable if _violation(lv, constraints)[0] == 0]
    if feasible and not memory_over:
        if objective == "min_latency":
            best = min(feasible, key=lambda lv: (lv.latency_us, -lv.throughput))
            return Score(True, -best.latency_us, best, best.latency_us)
        best = max(feasible, key=lambda lv: (lv.throughput, -lv.latency_us))
        return Score(True, best.throughput, best, best.throughput)
    nearest = min(usable, key=lambda lv: (_violation(lv, constraints)[0], lv.latency_us))
    violation, reasons = _violation(nearest, constraints)
    if memory_over:
        violation += memory_over
        reasons.append(f"GPU memory over {constraints.gpu_memory_limit_mb:g} MB")
    return Score(False, -violation, nearest, None, violation, "; ".join(reasons))


def rank(scored: Iterable[tuple[Any, Score | None]]) -> list[tuple[Any, Score | None]]:
    """Best first: feasible by objective, then infeasible by violation, failed last."""
    return sorted(
        scored,
        key=lambda item: (item[1] is not None, item[1].sort_key() if item[1] else (0, 0.0)),
        reverse=True,
    )


@dataclass(frozen=True)
class Point:
    """A point of the throughput/latency plane (any payload attached)."""

    throughput: float
    latency_us: float
    payload: Any = None


def pareto_front(points: Sequence[Point]) -> list[Point]:
    """The points no other point dominates (at least as much throughput at no more latency,
    and strictly better in one), sorted by latency. Duplicates keep their first copy."""
    ordered = sorted(points, key=lambda p: (p.latency_us, -p.throughput))
    front: list[Point] = []
    best_tput = -math.inf
    for p in ordered:
        if p.throughput > best_tput:
            front.append(p)
            best_tput = p.throughput
    return front


def gain_sentence(
    description: str,
    best: Score,
    baseline: Score | None,
    constraints: Constraints,
    objective: str,
) -> str:
    """'2 GPU instances with dynamic batching (100 µs): 3.1× throughput at p95 2.9 ms,
    within the 5 ms budget'."""
    assert best.level is not None
    lat_ms = best.level.latency_us / 1000
    label = constraints.latency_label
    budget = (
        f", within the {constraints.latency_budget_ms:g} ms budget"
        if constraints.latency_budget_ms
        else ""
    )
    floor = (
        f", above the {constraints.min_throughput:g} infer/s floor"
        if constraints.min_throughput
        else ""
    )
    base = baseline.level if baseline is not None and baseline.feasible else None
    if objective == "min_latency":
        if base is not None and base.latency_us > 0:
            factor = base.latency_us / best.level.latency_us
            change = f"{factor:.1f}× lower {label} latency ({lat_ms:.2f} ms vs {base.latency_us / 1000:.2f} ms)"
        else:
            change = f"{label} {lat_ms:.2f} ms (the current config misses the constraints)"
        return f"{description}: {change} at {best.level.throughput:,.0f} infer/s{floor}{budget}."
    if base is not None and base.throughput > 0:
        factor = best.level.throughput / base.throughput
        change = f"{factor:.1f}× throughput ({best.level.throughput:,.0f} vs {base.throughput:,.0f} infer/s)"
    else:
        change = f"{best.level.throughput:,.0f} infer/s (the current config misses the constraints)"
    return f"{description}: {change} at {label} {lat_ms:.2f} ms{budget}{floor}."
