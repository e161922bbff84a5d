"""One measured level and one measurement window: the one shape of a measurement.

Both engines convert what they measured into it (`LevelResult.measured`,
`WindowResult.measured`, `PaLevel.measured`, `PaWindow.measured`), a sweep stores it as a
`SweepPoint` row (its fields are the row's columns), a search keeps it per candidate
(`search.scoring.level_json`), and exports, websocket events and the REST API (`measure_api`)
show its `to_json`. The chosen-latency view of it (`CurvePoint`) is what the knee, the
verdict and a search's score read.

Field names are the `SweepPoint` columns. Figures that were not measured are None (a
perf_analyzer window knows only the chosen latency); `extra` holds what only some
measurements have (windows, spreads, client CPU, GPU, rounds, a streaming sweep's
`STREAM_FIELDS`: a decoupled model's figures per response and its tokens, a sweep with
objectives its `GOODPUT_FIELDS`, a streaming window its inter-response histogram's counts,
a sequence sweep's `SEQUENCE_FIELDS`: figures by position in the sequence, and an
ensemble's or a BLS model's `steps` (`STEP_FIELDS` each), and the built-in engine's
`INTERVAL` (how sure a level's figures are) and `HOST` (how busy the load generator's
machine was): figures only some sweeps have and nothing filters or sorts on, so they need
no columns of their own). Rows stored before an entry existed simply lack it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

LEVEL_ROW = -1  # SweepPoint.window of a level's summary row

LATENCY_FIELDS = ("avg_us", "p50_us", "p90_us", "p95_us", "p99_us")
SERVER_FIELDS = (
    "server_request_us",
    "queue_us",
    "compute_input_us",
    "compute_infer_us",
    "compute_output_us",
)
# A streaming sweep's `extra` (decoupled models): responses (carrying outputs) per second,
# per request, the empty final-flag ones, and the time to the first response and between
# responses, avg and percentiles (µs). The request latency is the time to the final
# response (the p*_us fields, as perf_analyzer 2.48 reports it). Where one response is one
# token, tokens/s is the response throughput. perf_analyzer reports response_throughput only.
STREAM_TIMES = ("first_response", "inter_response")
# The built-in engine's tokens (one per response, or the elements of --token-output per
# response), AIPerf's figures: tokens/s, tokens per request (its output sequence length)
# and the mean per-request tokens/s after the first token (its throughput per user).
TOKEN_FIELDS = ("output_token_throughput", "tokens_per_request", "output_token_throughput_per_user")
STREAM_FIELDS = (
    "response_throughput",
    "responses_per_request",
    "empty_final_responses",
    *(f"{t}_{s}" for t in STREAM_TIMES for s in ("avg_us", "p50_us", "p90_us", "p95_us", "p99_us")),
    *TOKEN_FIELDS,
)
# An ensemble's or a BLS model's `extra["steps"]`: one entry per composing model (an
# ensemble's steps, nested ensembles expanded to their steps; a BLS model's `calls_models`),
# in step order. Figures as the model's own breakdown: counts over the windows, averages in
# µs per request of that step, and its share of the steps' summed compute (a fraction).
STEP_FIELDS = (
    "model",
    "version",
    "request_count",
    "inference_count",
    "execution_count",
    "avg_batch_size",
    *SERVER_FIELDS,
    "compute_share",
)
COMPUTE_FIELDS = SERVER_FIELDS[2:]  # compute input, infer, output
# A sequence sweep's `extra` (the built-in engine, sequence models): per position of a
# request in its sequence (first, middle, last; a one-request sequence is first), its
# completed requests, their throughput (infer/s) and latency (avg and percentiles, µs),
# pooled over a level's last windows as its latencies are; and the sequences completed
# (their END answered) and failed (ended by a failed request; a level counts them in every
# window, as its errors).
SEQUENCE_POSITIONS = ("first", "middle", "last")
SEQUENCE_FIELDS = (
    *(f"{p}_{s}" for p in SEQUENCE_POSITIONS for s in ("requests", "throughput", *LATENCY_FIELDS)),
    "sequences_completed",
    "sequences_failed",
)
# A sweep with goodput objectives (`profiler_app.goodput`), built-in engine: requests/s
# that met every objective, and their share of the completed requests.
GOODPUT_FIELDS = ("goodput", "good_share")
# A streaming window's `extra[INTER_RESPONSE_HISTOGRAM]`: counts of its inter-response
# times in the bins these edges (µs, 4 per decade, 10 µs to 10 s) make: below the first
# edge, [edge i-1, edge i), at or above the last. The page sums a level's windows.
INTER_RESPONSE_HISTOGRAM = "inter_response_histogram"
INTER_RESPONSE_EDGES_US = tuple(round(10 ** (1 + i / 4), 1) for i in range(25))
# A level's `extra[INTERVAL]` (the built-in engine, `engine.stats.settle`): the interval of
# the median throughput ([low, high], infer/s) and of the median chosen latency ([low, high]
# µs, None when not judged) over the `windows` last windows the level's figures pool, its
# `confidence`, and `settled_by`: "rule" (perf_analyzer's, the last 3 windows), "interval"
# (the interval within the stability percentage) or None (did not settle).
INTERVAL = "interval"
# A level's `extra[HOST]`: the load generator's machine during it (`engine.host_load`).
HOST = "host"
# Old search rows (before the one shape) said `concurrency` for `level`, and kept these
# `extra` entries at the top level; they are still read, and still written for the API.
SEARCH_ALIASES = ("windows", "over_threshold", "avg_batch")


def latency_key(percentile: int | str) -> str:
    """The field of the chosen latency: "avg_us" or "p95_us"."""
    return "avg_us" if percentile == "avg" else f"p{int(percentile)}_us"


def finite(value: Any) -> float | None:
    """None for a missing or infinite figure (JSON has no inf)."""
    return None if value is None or not math.isfinite(value) else float(value)


@dataclass(frozen=True)
class CurvePoint:
    """A measured level at its chosen latency: what the knee, the verdict and a search's
    score compare."""

    level: float  # concurrency or request rate
    throughput: float  # infer/s
    latency_us: float  # the chosen latency (avg or pN)

    @property
    def concurrency(self) -> float:
        """A search's name for the level (it sweeps concurrency only)."""
        return self.level


@dataclass
class Level:
    """One measured level (a sweep's summary row, a search candidate's level)."""

    level: float  # concurrency or request rate
    throughput: float = 0.0  # infer/s
    requests: int = 0
    errors: int = 0
    duration_s: float = 0.0
    avg_us: float | None = None
    p50_us: float | None = None
    p90_us: float | None = None
    p95_us: float | None = None
    p99_us: float | None = None
    server_request_us: float | None = None
    queue_us: float | None = None
    compute_input_us: float | None = None
    compute_infer_us: float | None = None
    compute_output_us: float | None = None
    stable: bool | None = None  # None: not known (a window, a hand-made row)
    extra: dict[str, Any] = field(default_factory=dict)

    def figure(self, name: str) -> float | None:
        """A figure by name: a field ("throughput", "p95_us") or an `extra` entry
        ("response_throughput", "first_response_p95_us", "goodput"); None where it was not
        measured (or is not a number)."""
        value = getattr(self, name) if name in _FIGURE_FIELDS else self.extra.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return finite(value)

    def latency(self, key: str) -> float | None:
        """A latency by name ("p95_us", or a streaming sweep's "first_response_p95_us"),
        None where it was not measured."""
        return self.figure(key)

    def curve_point(self, key: str) -> CurvePoint | None:
        """The level at latency `key`; None where that latency is unknown."""
        lat = self.latency(key)
        return None if lat is None else CurvePoint(self.level, self.throughput, lat)

    def columns(self) -> dict[str, Any]:
        """The SweepPoint column values (all but `level`)."""
        return {f.name: getattr(self, f.name) for f in fields(Level) if f.name != "level"}

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(Level)}

    @classmethod
    def from_point(cls, point: Any) -> Level:
        """From a SweepPoint row."""
        return cls(**{f.name: getattr(point, f.name) for f in fields(Level)})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Level:
        """From `to_json`, a stored search level (old ones say `concurrency`, and keep
        windows/over_threshold/avg_batch at the top level), or a `point_json` row."""
        level = data["level"] if data.get("level") is not None else data["concurrency"]
        extra = dict(data.get("extra") or {})
        for name in SEARCH_ALIASES:
            if name not in extra and data.get(name) is not None:
                extra[name] = data[name]
        known = {f.name for f in fields(Level)} - {"level", "extra"}
        values = {k: data[k] for k in known if k in data}
        return cls(level=float(level), extra=extra, **values)


# The numeric fields of a level (`Level.figure` reads any other name from `extra`).
_FIGURE_FIELDS = frozenset(
    ("throughput", "requests", "errors", "duration_s", *LATENCY_FIELDS, *SERVER_FIELDS)
)


@dataclass
class Window(Level):
    """One measurement window of a level: a level's fields, its number and when it closed.
    (`columns` leaves both out: the number is part of the row's key, closed_at is only
    sent, in the `sweep.window` event.)"""

    window: int = 0  # the stored window number (0-based, rounds after one another)
    closed_at: float | None = None  # wall clock (time.time()) when the engine closed it

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "window": self.window, "closed_at": self.closed_at}


def search_json(level: Level) -> dict[str, Any]:
    """A search candidate's level as stored and sent: `to_json`, plus the names its API has
    always had (`concurrency` for `level`; windows, over_threshold, avg_batch at the top)."""
    aliases = {name: level.extra.get(name) for name in SEARCH_ALIASES}
    return {**level.to_json(), "concurrency": level.level, **aliases}


def latency_fields(lat: Any) -> dict[str, float | None]:
    """The latency fields of a `stats.LatencySummary` (all None without one)."""
    return {k: None if lat is None else getattr(lat, k) for k in LATENCY_FIELDS}


def server_fields(server: Any) -> dict[str, float | None]:
    """The server fields of a `engine.results.ServerBreakdown` (all None without one)."""
    if server is None:
        return dict.fromkeys(SERVER_FIELDS)
    rest = {k: getattr(server, k) for k in SERVER_FIELDS[1:]}
    return {"server_request_us": server.request_us, **rest}


def gpu_fields(sample: Any) -> dict[str, float | None]:
    """`extra` entries of a GPU sample (none without one)."""
    if sample is None:
        return {}
    return {"gpu_utilization": sample.utilization, "gpu_memory_bytes": sample.memory_used_bytes}


def stream_fields(summary: Any) -> dict[str, float | int | None]:
    """`extra` entries of an `engine.stream_stats.StreamSummary` (none without one)."""
    if summary is None:
        return {}
    out: dict[str, float | int | None] = {
        "response_throughput": summary.response_throughput,
        "responses_per_request": summary.responses_per_request,
        "empty_final_responses": summary.empty_final_responses,
    }
    for name in STREAM_TIMES:
        lat = getattr(summary, name)
        for key in LATENCY_FIELDS:
            out[f"{name}_{key}"] = None if lat is None else getattr(lat, key)
    for name in TOKEN_FIELDS:
        out[name] = getattr(summary, name, None)
    return out


def sequence_fields(summary: Any) -> dict[str, float | int | None]:
    """`extra` entries of an `engine.sequences.SequenceSummary` (none without one)."""
    if summary is None:
        return {}
    out: dict[str, float | int | None] = {}
    for name in SEQUENCE_POSITIONS:
        position = getattr(summary, name)
        out[f"{name}_requests"] = position.requests
        out[f"{name}_throughput"] = position.throughput
        for key in LATENCY_FIELDS:
            out[f"{name}_{key}"] = (
                None if position.latency is None else getattr(position.latency, key)
            )
    out["sequences_completed"] = summary.sequences_completed
    out["sequences_failed"] = summary.sequences_failed
    return out


def goodput_fields(good: int | None, requests: int, duration_s: float) -> dict[str, float | None]:
    """`extra` entries of the requests that met every goodput objective (none without
    objectives: `good` None)."""
    if good is None:
        return {}
    return {
        "goodput": good / duration_s if duration_s > 0 else 0.0,
        "good_share": good / requests if requests else None,
    }


def interval_fields(settling: Any) -> dict[str, Any]:
    """The `extra` entry of an `engine.stats.Settling` (none without one)."""
    if settling is None or settling.throughput is None:
        return {}
    ips, lat = settling.throughput, settling.latency
    return {
        INTERVAL: {
            "throughput": [ips.low, ips.high],
            "latency": None if lat is None else [lat.low, lat.high],
            "windows": ips.windows,
            "confidence": round(ips.confidence, 4),
            "settled_by": settling.by,
        }
    }


@dataclass(frozen=True)
class LevelInterval:
    """A level row's `extra[INTERVAL]`, read back (see INTERVAL)."""

    low: float
    high: float
    latency: tuple[float, float] | None
    windows: int
    confidence: float
    settled_by: str | None

    def margin(self, around: float) -> float:
        """The ± that covers the interval around the reported throughput."""
        return max(self.high - around, around - self.low, 0.0)

    def relative(self, around: float) -> float | None:
        """`margin` as a fraction of the reported throughput; None when that is not above 0."""
        return self.margin(around) / around if around > 0 else None


def _pair(value: Any) -> tuple[float, float] | None:
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        and all(math.isfinite(v) for v in value)
    ):
        return float(value[0]), float(value[1])
    return None


def interval_of(point: Any) -> LevelInterval | None:
    """The interval of a row (SweepPoint, `Level` or its JSON); None for rows without one
    (stored before it existed, perf_analyzer's, a hand-made row) or with a malformed one."""
    extra = point.get("extra") if isinstance(point, Mapping) else getattr(point, "extra", None)
    data = (extra or {}).get(INTERVAL)
    if not isinstance(data, Mapping):
        return None
    throughput = _pair(data.get("throughput"))
    windows, confidence = data.get("windows"), data.get("confidence")
    if (
        throughput is None
        or not isinstance(windows, int)
        or not isinstance(confidence, int | float)
    ):
        return None
    settled_by = data.get("settled_by")
    return LevelInterval(
        low=throughput[0],
        high=throughput[1],
        latency=_pair(data.get("latency")),
        windows=windows,
        confidence=float(confidence),
        settled_by=settled_by if settled_by in ("rule", "interval") else None,
    )


def point_json(point: Any) -> dict[str, Any]:
    """A stored SweepPoint row: a level row (window -1) or a window."""
    return {**Level.from_point(point).to_json(), "window": point.window}


def step_fields(model: str, version: str, server: Any) -> dict[str, Any]:
    """One `extra["steps"]` entry from a `engine.results.ServerBreakdown` (None: its statistics
    could not be read); `compute_share` is set by `with_compute_shares`."""
    counts: dict[str, Any] = {
        "request_count": None if server is None else server.request_count,
        "inference_count": None if server is None else server.inference_count,
        "execution_count": None if server is None else server.execution_count,
        "avg_batch_size": None if server is None else server.avg_batch_size,
    }
    return {
        "model": model,
        "version": version,
        **counts,
        **server_fields(server),
        "compute_share": None,
    }


def step_compute_us(step: Mapping[str, Any]) -> float | None:
    """A step's compute per request (input + infer + output, µs); None when not measured."""
    parts = [step.get(k) for k in COMPUTE_FIELDS]
    return None if all(v is None for v in parts) else sum(float(v or 0.0) for v in parts)


def with_compute_shares(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`steps` with each one's share of the steps' summed compute per request (perf_analyzer
    adds the steps' per-request averages up to an ensemble's compute)."""
    computes = [step_compute_us(s) for s in steps]
    total = sum(c for c in computes if c is not None)
    for step, compute in zip(steps, computes, strict=True):
        step["compute_share"] = compute / total if compute is not None and total > 0 else None
    return steps


def steps_of(point: Any) -> list[dict[str, Any]]:
    """The `extra["steps"]` of a row (SweepPoint, `Level` or its JSON); [] without them."""
    extra = point.get("extra") if isinstance(point, Mapping) else getattr(point, "extra", None)
    steps = (extra or {}).get("steps")
    return [dict(s) for s in steps if isinstance(s, Mapping)] if isinstance(steps, list) else []
