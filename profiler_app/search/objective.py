"""Constraints, the objective, a candidate's score, ranking and the Pareto front.

A candidate is judged on two metrics of each measured level, named once (`Metrics`, from
the objective and what the search measures, `metrics_for`):

- its *throughput-like* metric: infer/s (`max_throughput`, `min_latency`); a decoupled
  model's responses/s, or tokens/s where a token output counts them
  (`max_response_throughput`); the requests/s that met every goodput objective
  (`max_goodput`);
- its *latency-like* metric, at the search's percentile: the request latency, or for a
  search over gRPC streams (a decoupled model) the time to the first response.

Its operating point is the level the objective picks among those meeting every
constraint (the latency budget on the request latency, the first-response budget on the
first response, the floor on infer/s, GPU memory):

- the max objectives: the highest throughput-like metric (ties: the lower latency);
- ``min_latency``: the lowest latency-like metric (ties: the higher throughput).

A candidate with no such level is infeasible; its score then measures how far it misses
(the smallest total relative violation over its levels), so hill climbing can still walk
toward feasibility. A level whose throughput-like metric is 0 (no request met the goodput
objectives) misses by 100%. Scores compare as (feasible, goodness): every feasible
candidate beats every infeasible one; failed candidates (no measurement) have no score.

The ranking, the re-measurement rounds, the Pareto front (its axes are the two metrics),
the report and the page all read the metrics from here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..measure import CurvePoint
from ..measure import Level as MeasuredLevel

OBJECTIVES = ("max_throughput", "min_latency", "max_response_throughput", "max_goodput")
# The objective of each stored search before the others existed reads as it did.
MINIMISE = ("min_latency",)


@dataclass(frozen=True)
class Constraints:
    latency_budget_ms: float | None = None  # the request latency (to the final response)
    percentile: int | str = 95  # 50/90/95/99 or "avg"
    min_throughput: float | None = None  # infer/s
    gpu_memory_limit_mb: float | None = None
    # The time to the first response (a search over gRPC streams), at the percentile.
    first_response_budget_ms: float | None = None

    @property
    def latency_label(self) -> str:
        return "avg" if self.percentile == "avg" else f"p{int(self.percentile)}"

    @property
    def latency_key(self) -> str:
        return "avg_us" if self.percentile == "avg" else f"p{int(self.percentile)}_us"

    @property
    def first_response_label(self) -> str:
        return f"first response {self.latency_label}"

    @property
    def first_response_key(self) -> str:
        return f"first_response_{self.latency_key}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "latency_budget_ms": self.latency_budget_ms,
            "percentile": self.percentile,
            "min_throughput": self.min_throughput,
            "gpu_memory_limit_mb": self.gpu_memory_limit_mb,
        }
        if self.first_response_budget_ms is not None:  # stored searches had no such key
            data["first_response_budget_ms"] = self.first_response_budget_ms
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Constraints:
        pct = data.get("percentile", 95)
        return cls(
            latency_budget_ms=data.get("latency_budget_ms"),
            percentile=pct if pct == "avg" else int(pct),
            min_throughput=data.get("min_throughput"),
            gpu_memory_limit_mb=data.get("gpu_memory_limit_mb"),
            first_response_budget_ms=data.get("first_response_budget_ms"),
        )


# --- the two metrics --------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One figure of a measured level (`measure.Level.figure`) and how it is named."""

    key: str  # "throughput", "response_throughput", "p95_us", "first_response_p95_us", ...
    label: str  # "throughput", "response throughput", "p95", "first response p95"
    unit: str  # "infer/s", "responses/s", "tokens/s", "good requests/s", or "ms"

    @property
    def is_time(self) -> bool:
        return self.unit == "ms"

    def text(self, value: float) -> str:
        """'1,234 responses/s' or '2.90 ms' (times are stored in µs)."""
        if self.is_time:
            return f"{value / 1000:.2f} ms"
        return f"{value:,.0f} {self.unit}"

    def to_json(self) -> dict[str, str]:
        return {"key": self.key, "label": self.label, "unit": self.unit}


INFER_RATE = Metric("throughput", "throughput", "infer/s")
RESPONSE_RATE = Metric("response_throughput", "response throughput", "responses/s")
TOKEN_RATE = Metric("output_token_throughput", "token throughput", "tokens/s")
GOODPUT = Metric("goodput", "goodput", "good requests/s")


@dataclass(frozen=True)
class Metrics:
    """What a candidate is judged on: the throughput-like metric the max objectives raise
    (a chart's y axis) and the latency-like one `min_latency` lowers (its x axis)."""

    throughput: Metric = INFER_RATE
    latency: Metric = Metric("p95_us", "p95", "ms")

    def to_json(self) -> dict[str, Any]:
        return {"throughput": self.throughput.to_json(), "latency": self.latency.to_json()}

    def point(self, level: MeasuredLevel, constraints: Constraints) -> Judged | None:
        """The level as a candidate is judged on it; None where its latency-like metric
        was not measured."""
        latency = level.figure(self.latency.key)
        if latency is None:
            return None
        keys = {INFER_RATE.key, constraints.latency_key, constraints.first_response_key}
        return Judged(
            level.level,
            level.figure(self.throughput.key) or 0.0,
            latency,
            figures={key: level.figure(key) for key in keys},
        )


def metrics_for(
    objective: str, constraints: Constraints, *, streaming: bool = False, tokens: bool = False
) -> Metrics:
    """The two metrics of a search: `streaming` when it measures over gRPC streams (a
    decoupled model), `tokens` when a token output counts its tokens."""
    latency = (
        Metric(constraints.first_response_key, constraints.first_response_label, "ms")
        if streaming
        else Metric(constraints.latency_key, constraints.latency_label, "ms")
    )
    throughput = INFER_RATE
    if objective == "max_response_throughput":
        throughput = TOKEN_RATE if tokens else RESPONSE_RATE
    elif objective == "max_goodput":
        throughput = GOODPUT
    return Metrics(throughput, latency)


@dataclass(frozen=True)
class Judged(CurvePoint):
    """A level at the search's two metrics (`throughput`, `latency_us`), with the figures
    its constraints read (`figures`, by key). A plain CurvePoint (a sweep's) is judged on
    infer/s and its chosen latency."""

    figures: Mapping[str, float | None] = field(default_factory=dict, compare=False)


# A candidate's measured level as it is judged (a `Judged`, or a sweep's CurvePoint).
Level = CurvePoint


def figure(level: Level, key: str, metrics: Metrics) -> float | None:
    """A figure of a judged level by key: one of its two metrics, or of its `figures`. A
    plain CurvePoint's throughput is infer/s."""
    if key == metrics.throughput.key or (key == INFER_RATE.key and not isinstance(level, Judged)):
        return level.throughput
    if key == metrics.latency.key:
        return level.latency_us
    return getattr(level, "figures", {}).get(key)


@dataclass(frozen=True)
class Score:
    feasible: bool
    goodness: float  # higher is better: the throughput-like metric, -latency, or -violation
    level: Level | None  # the operating point (or the nearest miss)
    objective: float | None  # the objective's metric (µs for a latency); None: infeasible
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


@dataclass(frozen=True)
class _Bound:
    key: str  # the figure it bounds
    what: str  # its name in a reason: "p95", "first response p95", "throughput"
    limit: float  # µs for a time, infer/s for the floor
    upper: bool
    miss: str  # what missing it says


def _bounds(c: Constraints) -> list[_Bound]:
    """The constraints on a level's figures."""
    bounds = []
    if c.latency_budget_ms:
        bounds.append(_Bound(
            c.latency_key, c.latency_label, c.latency_budget_ms * 1000, True,
            f"{c.latency_label} over the {c.latency_budget_ms:g} ms budget",
        ))  # fmt: skip
    if c.first_response_budget_ms:
        bounds.append(_Bound(
            c.first_response_key, c.first_response_label, c.first_response_budget_ms * 1000,
            True,
            f"{c.first_response_label} over the {c.first_response_budget_ms:g} ms "
            "first-response budget",
        ))  # fmt: skip
    if c.min_throughput:
        bounds.append(_Bound(
            INFER_RATE.key, "throughput", c.min_throughput, False,
            f"throughput under {c.min_throughput:g} infer/s",
        ))  # fmt: skip
    return bounds


def _violation(level: Level, c: Constraints, objective: str, m: Metrics) -> tuple[float, list[str]]:
    total, reasons = 0.0, []
    for bound in _bounds(c):
        value = figure(level, bound.key, m)
        if value is None:  # e.g. a first-response budget on levels that did not stream
            total += 1.0
            reasons.append(f"{bound.what} not measured")
            continue
        miss = value / bound.limit - 1 if bound.upper else 1 - value / bound.limit
        if miss > 0:
            total += miss
            reasons.append(bound.miss)
    if objective not in MINIMISE and level.throughput <= 0:
        total += 1.0
        reasons.append(
            "no request met the goodput objectives"
            if m.throughput == GOODPUT
            else f"no {m.throughput.label} measured"
        )
    return total, reasons


def score(
    levels: Sequence[Level],
    constraints: Constraints,
    objective: str,
    gpu_memory_mb: float | None = None,
    metrics: Metrics | None = None,
) -> Score | None:
    """The candidate's score, or None when nothing was measured. `metrics` default to
    infer/s and the request latency (a sweep's levels, a search of a stateless model)."""
    m = metrics or metrics_for(objective, constraints)
    usable = [
        lv
        for lv in levels
        if (figure(lv, INFER_RATE.key, m) or 0) > 0 and math.isfinite(lv.latency_us)
    ]
    if not usable:
        return None
    memory_over = 0.0
    if constraints.gpu_memory_limit_mb and gpu_memory_mb is not None:
        memory_over = max(0.0, gpu_memory_mb / constraints.gpu_memory_limit_mb - 1)

    def miss(lv: Level) -> float:
        return _violation(lv, constraints, objective, m)[0]

    feasible = [lv for lv in usable if miss(lv) == 0]
    if feasible and not memory_over:
        if objective in MINIMISE:
            best = min(feasible, key=lambda lv: (lv.latency_us, -lv.throughput))
            return Score(True, -best.latency_us, best, best.latency_us)
        best = max(feasible, key=lambda lv: (lv.throughput, -lv.latency_us))
        return Score(True, best.throughput, best, best.throughput)
    nearest = min(usable, key=lambda lv: (miss(lv), lv.latency_us))
    violation, reasons = _violation(nearest, constraints, objective, m)
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
    """A point of the throughput/latency plane (the search's two metrics; any payload
    attached)."""

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


def constraints_met(c: Constraints) -> str:
    """', within the 5 ms budget, above the 100 infer/s floor' (what a feasible point met)."""
    parts = [
        f"within the {c.latency_budget_ms:g} ms budget" if c.latency_budget_ms else "",
        f"within the {c.first_response_budget_ms:g} ms first-response budget"
        if c.first_response_budget_ms
        else "",
        f"above the {c.min_throughput:g} infer/s floor" if c.min_throughput else "",
    ]
    return "".join(f", {p}" for p in parts if p)


def gain_sentence(
    description: str,
    best: Score,
    baseline: Score | None,
    constraints: Constraints,
    objective: str,
    metrics: Metrics | None = None,
) -> str:
    """'2 GPU instances with dynamic batching (100 µs): 3.1× throughput at p95 2.9 ms,
    within the 5 ms budget' (in the search's metrics: '1.4× response throughput (1,120 vs
    800 responses/s) at first response p95 21.30 ms, ...')."""
    assert best.level is not None
    m = metrics or metrics_for(objective, constraints)
    tput, lat = m.throughput, m.latency
    met = constraints_met(constraints)
    base = baseline.level if baseline is not None and baseline.feasible else None
    if objective in MINIMISE:
        if base is not None and base.latency_us > 0:
            factor = base.latency_us / best.level.latency_us
            change = (
                f"{factor:.1f}× lower {lat.label} latency ({lat.text(best.level.latency_us)} "
                f"vs {lat.text(base.latency_us)})"
            )
        else:
            change = (
                f"{lat.label} {lat.text(best.level.latency_us)} "
                "(the current config misses the constraints)"
            )
        return f"{description}: {change} at {tput.text(best.level.throughput)}{met}."
    if base is not None and base.throughput > 0:
        factor = best.level.throughput / base.throughput
        noun = "throughput" if tput == INFER_RATE else tput.label
        change = (
            f"{factor:.1f}× {noun} ({best.level.throughput:,.0f} vs {tput.text(base.throughput)})"
        )
    else:
        change = f"{tput.text(best.level.throughput)} (the current config misses the constraints)"
    return f"{description}: {change} at {lat.label} {lat.text(best.level.latency_us)}{met}."
