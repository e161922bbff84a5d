"""Repeated rounds of a level: the median, the spread, and whether two sweeps differ.

A sweep with `rounds` R > 1 measures every level R times, one round over all the levels
after another (level 1, 2, ..., 8, then 1, 2, ..., 8 again), so that a drift of the
machine (a neighbour's job, thermal throttling) lands on every level alike instead of on
the last ones. Each level's summary row then holds the median of its rounds, and in
`extra["rounds"]` each round's own figures.

The spread of a level is the half range of its rounds relative to their median
((max - min) / 2 / median): "1,000 infer/s ± 4%". Two levels differ beyond noise when
their ranges [min, max] do not overlap; then the difference reads "+18% ± 4%, 3 rounds
each", where ± is the sum of both spreads. A level measured once has no spread: its
difference is stated with "one round: noise unknown".

Each round also keeps its level's interval (`measure.INTERVAL`) and machine load
(`measure.HOST`); the merged row's interval spans the rounds' intervals (the lowest low to
the highest high, at the lowest confidence: no narrower than any round's), and it is
settled by the rule only when every round was.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import measure

# The level-row fields a round contributes, merged as medians over the rounds.
MEDIAN_FIELDS = (
    "throughput",
    "avg_us",
    "p50_us",
    "p90_us",
    "p95_us",
    "p99_us",
    "server_request_us",
    "queue_us",
    "compute_input_us",
    "compute_infer_us",
    "compute_output_us",
)


def _median(values: Sequence[float | None]) -> float | None:
    known = [float(v) for v in values if v is not None and math.isfinite(v)]
    return statistics.median(known) if known else None


def _widest(values: Sequence[float | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return max(known) if known else None


def round_record(round_no: int, fields: Mapping[str, Any]) -> dict[str, Any]:
    """What one round of a level keeps in `extra["rounds"]`."""
    extra = fields.get("extra") or {}
    return {
        "round": round_no,
        **{name: fields.get(name) for name in MEDIAN_FIELDS},
        "requests": fields.get("requests", 0),
        "errors": fields.get("errors", 0),
        "duration_s": fields.get("duration_s", 0.0),
        "stable": fields.get("stable"),
        "windows": extra.get("windows", 0),
        "throughput_spread": extra.get("throughput_spread"),
        "latency_spread": extra.get("latency_spread"),
        "over_threshold": bool(extra.get("over_threshold")),
        **({"load_hosts": extra["load_hosts"]} if extra.get("load_hosts") else {}),
        **{k: extra[k] for k in (measure.INTERVAL, measure.HOST) if extra.get(k)},
    }


def _interval(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The rounds' intervals spanned (see the module docstring); none when a round has
    none (perf_analyzer's, or stored before intervals)."""
    parts = [measure.interval_of({"extra": r}) for r in rounds]
    known = [p for p in parts if p is not None]
    if not known or len(known) < len(parts):
        return {}
    latencies = [p.latency for p in known if p.latency is not None]
    by = {p.settled_by for p in known}
    spanned = measure.LevelInterval(
        low=min(p.low for p in known),
        high=max(p.high for p in known),
        latency=(min(lat[0] for lat in latencies), max(lat[1] for lat in latencies))
        if len(latencies) == len(known)
        else None,
        windows=sum(p.windows for p in known),
        confidence=min(p.confidence for p in known),
        settled_by=None if None in by else ("rule" if by == {"rule"} else "interval"),
    )
    return {measure.INTERVAL: spanned.to_json()}


def _host(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The busiest round's machine load (the page flags a level when any round was busy)."""
    loads = [r[measure.HOST] for r in rounds if isinstance(r.get(measure.HOST), Mapping)]
    if not loads:
        return {}
    return {measure.HOST: max(loads, key=lambda h: (bool(h.get("noisy")), h.get("busy") or 0))}


def _hosts(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Load from several hosts: each host's share summed over the rounds (as the requests
    are), so the shares still add up to the row's requests."""
    totals: dict[str, dict[str, Any]] = {}
    for r in rounds:
        for share in r.get("load_hosts") or []:
            total = totals.setdefault(
                share["host"], {"host": share["host"], "requests": 0, "errors": 0}
            )
            total["requests"] += int(share.get("requests") or 0)
            total["errors"] += int(share.get("errors") or 0)
    return {"load_hosts": list(totals.values())} if totals else {}


def merge_rounds(
    rounds: Sequence[Mapping[str, Any]],
    chosen_key: str,
    latest_extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A level row's fields from its rounds (`round_record`s): medians of every figure,
    stable only when every round settled, windows and requests summed, and the spread
    across rounds of the throughput and of the chosen latency (`chosen_key`, e.g. p95_us).
    The other `extra` entries (client CPU, GPU, send rate) are the latest round's."""
    merged: dict[str, Any] = {
        name: _median([r.get(name) for r in rounds]) for name in MEDIAN_FIELDS
    }
    merged["throughput"] = merged["throughput"] or 0.0
    merged["requests"] = sum(int(r.get("requests") or 0) for r in rounds)
    merged["errors"] = sum(int(r.get("errors") or 0) for r in rounds)
    merged["duration_s"] = sum(float(r.get("duration_s") or 0.0) for r in rounds)
    merged["stable"] = all(bool(r.get("stable")) for r in rounds)
    merged["extra"] = {
        **(latest_extra or {}),
        "rounds": [dict(r) for r in rounds],
        "windows": sum(int(r.get("windows") or 0) for r in rounds),
        # The widest within-round spreads (last 3 windows), as a single round reports them.
        "throughput_spread": _widest([r.get("throughput_spread") for r in rounds]),
        "latency_spread": _widest([r.get("latency_spread") for r in rounds]),
        "round_spread": Spread.of([r.get("throughput") for r in rounds]).half_range,
        "round_latency_spread": Spread.of([r.get(chosen_key) for r in rounds]).half_range,
        "over_threshold": any(r.get("over_threshold") for r in rounds),
        "cancelled": False,
        **_hosts(rounds),
    }
    # The latest round's entries do not speak for the others.
    merged["extra"].pop(measure.INTERVAL, None)
    merged["extra"].pop(measure.HOST, None)
    merged["extra"].update({**_interval(rounds), **_host(rounds)})
    return merged


@dataclass(frozen=True)
class Spread:
    """A figure measured in one or more rounds."""

    median: float
    low: float
    high: float
    rounds: int

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Spread:
        known = [float(v) for v in values if v is not None and math.isfinite(v)]
        if not known:
            return cls(0.0, 0.0, 0.0, 0)
        return cls(statistics.median(known), min(known), max(known), len(known))

    @classmethod
    def of_level(cls, point: Mapping[str, Any], key: str = "throughput") -> Spread:
        """A level row (`measure.point_json`): its rounds, or the row itself as one round."""
        rounds = (point.get("extra") or {}).get("rounds") or []
        if rounds:
            return cls.of([r.get(key) for r in rounds])
        value = point.get(key)
        return cls.of([value])

    def to_json(self, scale: float = 1.0, digits: int = 1) -> dict[str, Any]:
        """The figures, and `text` ("1,234.5 ± 3%", or "1,234.5" from one round) with the
        median divided by `scale` (1000 for µs -> ms)."""
        spread = self.half_range
        value = f"{self.median / scale:,.{digits}f}" if self.rounds else "—"
        return {
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
            "half_range": spread,
            "text": value + (f" ± {spread * 100:.0f}%" if spread is not None else ""),
        }

    @property
    def half_range(self) -> float | None:
        """(max - min) / 2 / median; None with fewer than two rounds."""
        if self.rounds < 2 or self.median <= 0:
            return None
        return (self.high - self.low) / 2 / self.median

    def overlaps(self, other: Spread) -> bool:
        return self.low <= other.high and other.low <= self.high


def _pct(value: float) -> str:
    return f"{value * 100:+.0f}%"


def _rounds_text(a: int, b: int) -> str:
    return f"{a} rounds each" if a == b else f"{a} and {b} rounds"


def difference(base: Spread, other: Spread) -> dict[str, Any]:
    """How `other` differs from `base`: the relative change of the medians, the noise (sum
    of both spreads), whether it is real (ranges apart), and the words for it."""
    if base.rounds == 0 or other.rounds == 0 or base.median <= 0:
        return {"delta": None, "noise": None, "real": None, "text": "not comparable"}
    delta = other.median / base.median - 1
    if base.rounds < 2 or other.rounds < 2:
        return {
            "delta": delta,
            "noise": None,
            "real": None,
            "text": f"{_pct(delta)} (one round: noise unknown; measure with rounds ≥ 2)",
        }
    noise = (base.half_range or 0.0) + (other.half_range or 0.0)
    real = not base.overlaps(other)
    detail = f"{_pct(delta)} ± {noise * 100:.0f}%, {_rounds_text(base.rounds, other.rounds)}"
    return {
        "delta": delta,
        "noise": noise,
        "real": real,
        "text": detail if real else f"within noise ({detail})",
    }
