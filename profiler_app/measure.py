"""One measured level and one measurement window: the one shape of a measurement.

Both engines convert what they measured into it (`LevelResult.measured`,
`WindowResult.measured`, `PaLevel.measured`, `PaWindow.measured`), a sweep stores it as a
`SweepPoint` row (its columns are the `COLUMNS`), a search keeps it per candidate
(`search.scoring.level_json`), and exports, websocket events and the REST API (`measure_api`)
show its `to_json`. The chosen-latency view of it (`CurvePoint`) is what the knee, the
verdict and a search's score read.

Figures that were not measured are None (a perf_analyzer window knows only the chosen
latency). What only some measurements have is a typed sub-record (`level_figures`): a GPU's
(`gpu`), a streaming sweep's (`stream`: a decoupled model's figures per response and its
tokens), a sequence sweep's (`sequence`: figures by position in the sequence), a sweep with
objectives' (`goodput`), an ensemble's or a BLS model's `steps`, and the built-in engine's
`interval` (how sure a level's figures are). Nothing filters or sorts on them, so they need
no columns of their own: a row keeps them flat in its `extra` column, under the keys they
always had (`to_json` writes them there, `from_json`/`from_point` read them back), beside
the entries that stay free-form (`extra`: windows, spreads, client CPU, send rate, rounds,
a window's error messages and inter-response histogram, the load hosts, the load
generator's machine `HOST`, ...). Rows stored before an entry existed simply lack it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .level_figures import COMPUTE_FIELDS as COMPUTE_FIELDS  # re-exported (read here too)
from .level_figures import (
    LATENCY_FIELDS,
    SERVER_FIELDS,
    STEP_FIELDS,
    Figures,
    GoodputFigures,
    GpuFigures,
    SequenceFigures,
    StepFigures,
    StreamFigures,
    TraceFigures,
    read_steps,
)
from .level_figures import TOKEN_FIELDS as TOKEN_FIELDS  # re-exported
from .level_figures import with_compute_shares as _with_shares

LEVEL_ROW = -1  # SweepPoint.window of a level's summary row

STREAM_FIELDS = StreamFigures.names()
SEQUENCE_FIELDS = SequenceFigures.names()
GOODPUT_FIELDS = GoodputFigures.names()
# A streaming window's `extra[INTER_RESPONSE_HISTOGRAM]`: counts of its inter-response
# times in the bins these edges (µs, 4 per decade, 10 µs to 10 s) make: below the first
# edge, [edge i-1, edge i), at or above the last. The page sums a level's windows.
INTER_RESPONSE_HISTOGRAM = "inter_response_histogram"
INTER_RESPONSE_EDGES_US = tuple(round(10 ** (1 + i / 4), 1) for i in range(25))
# A level's `extra[INTERVAL]` (the built-in engine, `engine.stats.settle`; `LevelInterval`):
# the interval of the median throughput ([low, high], infer/s) and of the median chosen
# latency ([low, high] µs, None when not judged) over the `windows` last windows the level's
# figures pool, its `confidence`, and `settled_by`: "rule" (perf_analyzer's, the last 3
# windows), "interval" (the interval within the stability percentage) or None (did not
# settle).
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


# The sub-records' attributes of a level (`level_figures`; `steps` and `interval` apart),
# flat in `extra` (`measure_api` describes them in this order).
_SUB = {"sub": True}
RECORDS: dict[str, type[Figures]] = {
    "gpu": GpuFigures,
    "stream": StreamFigures,
    "sequence": SequenceFigures,
    "goodput": GoodputFigures,
    "trace": TraceFigures,
}
_RECORD_OF = {key: name for name, kind in RECORDS.items() for key in kind.names()}


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
    # The free-form entries (see the module's docstring). Given a row's `extra`, the
    # constructor moves the sub-records' entries into their attributes.
    extra: dict[str, Any] = field(default_factory=dict)
    gpu: GpuFigures | None = field(default=None, metadata=_SUB)
    stream: StreamFigures | None = field(default=None, metadata=_SUB)
    sequence: SequenceFigures | None = field(default=None, metadata=_SUB)
    goodput: GoodputFigures | None = field(default=None, metadata=_SUB)
    trace: TraceFigures | None = field(default=None, metadata=_SUB)
    steps: tuple[StepFigures, ...] = field(default=(), metadata=_SUB)
    interval: LevelInterval | None = field(default=None, metadata=_SUB)

    def __post_init__(self) -> None:
        extra = dict(self.extra)  # the caller's dict stays as it was
        for name, kind in RECORDS.items():
            if getattr(self, name) is None:
                setattr(self, name, kind.take(extra))
        if not self.steps and (steps := read_steps(extra.get("steps"))) is not None:
            self.steps = steps
            del extra["steps"]
        if self.interval is None and (interval := LevelInterval.read(extra.get(INTERVAL))):
            self.interval = interval
            del extra[INTERVAL]
        self.extra = extra

    def figure(self, name: str) -> float | None:
        """A figure by name: a field ("throughput", "p95_us"), a sub-record's
        ("response_throughput", "first_response_p95_us", "goodput") or an `extra` entry
        ("client_cpu_us"); None where it was not measured (or is not a number)."""
        if name in _FIGURE_FIELDS:
            value = getattr(self, name)
        elif (record := self.record_of(name)) is not None and record.has(name):
            value = getattr(record, name)
        else:
            value = self.extra.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return finite(value)

    def record_of(self, name: str) -> Figures | None:
        """The sub-record that has figure `name`, if the level has it."""
        return getattr(self, _RECORD_OF[name]) if name in _RECORD_OF else None

    def latency(self, key: str) -> float | None:
        """A latency by name ("p95_us", or a streaming sweep's "first_response_p95_us"),
        None where it was not measured."""
        return self.figure(key)

    def curve_point(self, key: str) -> CurvePoint | None:
        """The level at latency `key`; None where that latency is unknown."""
        lat = self.latency(key)
        return None if lat is None else CurvePoint(self.level, self.throughput, lat)

    def stored_extra(self) -> dict[str, Any]:
        """The `extra` column as stored and sent: the free-form entries and the
        sub-records' flat ones."""
        out = dict(self.extra)
        for name in RECORDS:
            record = getattr(self, name)
            if record is not None:
                out.update(record.flat())
        if self.steps:
            out["steps"] = [s.flat() for s in self.steps]
        if self.interval is not None:
            out[INTERVAL] = self.interval.to_json()
        return out

    def columns(self) -> dict[str, Any]:
        """The SweepPoint column values (all but `level`)."""
        return {k: v for k, v in Level.to_json(self).items() if k != "level"}

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in COLUMNS}
        out["extra"] = self.stored_extra()
        return out

    @classmethod
    def from_point(cls, point: Any) -> Level:
        """From a SweepPoint row."""
        return cls(**{name: getattr(point, name) for name in COLUMNS})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Level:
        """From `to_json`, a stored search level (old ones say `concurrency`, and keep
        windows/over_threshold/avg_batch at the top level), or a `point_json` row."""
        level = data["level"] if data.get("level") is not None else data["concurrency"]
        extra = dict(data.get("extra") or {})
        for name in SEARCH_ALIASES:
            if name not in extra and data.get(name) is not None:
                extra[name] = data[name]
        known = set(COLUMNS) - {"level", "extra"}
        values = {k: data[k] for k in known if k in data}
        return cls(level=float(level), extra=extra, **values)


# The SweepPoint columns (the sub-records are kept in `extra`), in order; the numeric ones
# (`Level.figure` reads any other name from a sub-record or `extra`).
COLUMNS = tuple(f.name for f in fields(Level) if not f.metadata.get("sub"))
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


def latency_fields(lat: Any) -> dict[str, Any]:
    """The latency fields of a `stats.LatencySummary` (all None without one)."""
    return {k: None if lat is None else getattr(lat, k) for k in LATENCY_FIELDS}


def server_fields(server: Any) -> dict[str, Any]:
    """The server fields of a `engine.results.ServerBreakdown` (all None without one)."""
    if server is None:
        return dict.fromkeys(SERVER_FIELDS)
    rest = {k: getattr(server, k) for k in SERVER_FIELDS[1:]}
    return {"server_request_us": server.request_us, **rest}


# The stored entries of a summary or a step (what tests compare; the engines build records).
def stream_fields(summary: Any) -> dict[str, float | int | None]:
    """`extra` entries of an `engine.stream_stats.StreamSummary` (none without one)."""
    return _flat(StreamFigures.of(summary))


def sequence_fields(summary: Any) -> dict[str, float | int | None]:
    """`extra` entries of an `engine.sequences.SequenceSummary` (none without one)."""
    return _flat(SequenceFigures.of(summary))


def _flat(record: Figures | None) -> dict[str, Any]:
    return {} if record is None else record.flat()


@dataclass(frozen=True)
class LevelInterval:
    """A level's interval (see INTERVAL): `Level.interval`, its row's `extra[INTERVAL]`."""

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

    @classmethod
    def of(cls, settling: Any) -> LevelInterval | None:
        """From an `engine.stats.Settling` (None without one)."""
        if settling is None or settling.throughput is None:
            return None
        ips, lat = settling.throughput, settling.latency
        return cls(
            low=ips.low,
            high=ips.high,
            latency=None if lat is None else (lat.low, lat.high),
            windows=ips.windows,
            confidence=round(ips.confidence, 4),
            settled_by=settling.by,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "throughput": [self.low, self.high],
            "latency": None if self.latency is None else list(self.latency),
            "windows": self.windows,
            "confidence": self.confidence,
            "settled_by": self.settled_by,
        }

    @classmethod
    def parse(cls, data: Any) -> LevelInterval | None:
        """From a stored `extra[INTERVAL]`; None for a malformed one."""
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
        return cls(
            low=throughput[0],
            high=throughput[1],
            latency=_pair(data.get("latency")),
            windows=windows,
            confidence=float(confidence),
            settled_by=settled_by if settled_by in ("rule", "interval") else None,
        )

    @classmethod
    def read(cls, data: Any) -> LevelInterval | None:
        """`parse`, where it writes the same entry back (else the entry stays free-form)."""
        interval = cls.parse(data)
        return interval if interval is not None and interval.to_json() == data else None


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
    if isinstance(point, Level) and point.interval is not None:
        return point.interval
    extra = point.get("extra") if isinstance(point, Mapping) else getattr(point, "extra", None)
    return LevelInterval.parse((extra or {}).get(INTERVAL))


def point_json(point: Any) -> dict[str, Any]:
    """A stored SweepPoint row: a level row (window -1) or a window."""
    return {**Level.from_point(point).to_json(), "window": point.window}


def step_fields(model: str, version: str, server: Any) -> dict[str, Any]:
    """One `extra["steps"]` entry (`StepFigures.of`) as stored."""
    return StepFigures.of(model, version, server).flat()


def with_compute_shares(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored `steps` with their compute shares (`level_figures.with_compute_shares`)."""
    return [s.flat() for s in _with_shares([StepFigures(**s) for s in steps])]


def steps_of(point: Any) -> tuple[StepFigures, ...]:
    """The steps of a row (SweepPoint, `Level` or its JSON); () without them."""
    if isinstance(point, Level) and point.steps:
        return point.steps
    extra = point.get("extra") if isinstance(point, Mapping) else getattr(point, "extra", None)
    steps = (extra or {}).get("steps")
    if not isinstance(steps, list):
        return ()
    return tuple(
        StepFigures.only(**{k: v for k, v in s.items() if k in STEP_FIELDS})
        for s in steps
        if isinstance(s, Mapping)
    )
