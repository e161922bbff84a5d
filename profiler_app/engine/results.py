"""The built-in engine's results: a window, a level and a sweep, with Triton's server-side
breakdown of them, each also in the one shape of a measurement (`profiler_app.measure`).

How a window is cut from the workers' replies and a level merged from its windows is
`merging`; the loop that measures them is `loadgen`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from triton_api.gpus import GpuSample

from .. import measure
from ..level_figures import GoodputFigures, GpuFigures, SequenceFigures, StreamFigures
from ..params import SweepParams
from . import composing, host_load, stats
from .composing import StepServer
from .sequences import SequenceRecords
from .stream_stats import StreamRecords


@dataclass
class ServerBreakdown:
    """Triton's view of the window (averages in µs), from the statistics extension."""

    request_count: int
    inference_count: int
    execution_count: int
    request_us: float  # success: cumulative request time per request
    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float

    @property
    def avg_batch_size(self) -> float:
        return self.inference_count / self.execution_count if self.execution_count else 0.0


@dataclass
class WindowResult:
    level: float
    index: int  # 0-based window number within the level
    duration_s: float
    requests: int
    inferences: int
    throughput: float  # infer/s
    latency: stats.LatencySummary | None
    errors: int
    error_messages: list[str]
    server: ServerBreakdown | None
    client_cpu_us: float  # worker CPU per completed request
    send_rate: float  # requests sent per second
    closed_at: float = 0.0  # wall clock (time.time()) when the window closed
    gpu: GpuSample | None = None  # from Triton's metrics at the window's end, where it has GPUs
    # Raw latencies (ns) of the window, kept so a level pools them like perf_analyzer.
    latencies_ns: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64), repr=False)
    stream: StreamRecords | None = None  # streaming sweeps
    steps: list[StepServer] = field(default_factory=list)  # ensembles, BLS (`composing`)
    sequence: SequenceRecords | None = None  # sequence models
    good: int | None = None  # requests that met every goodput objective (None: none set)
    # Load from several hosts: each host's share ({"host", "requests", "errors"}), and what
    # closing the window cost (`remote.CompositePool.swap`'s times, and the pooling's).
    hosts: list[dict[str, Any]] | None = None
    load_cost: dict[str, float] | None = None

    def chosen_latency_us(self, chosen: int | str) -> float:
        return self.latency.value(chosen) if self.latency else 0.0

    def measured(self) -> measure.Window:
        """The window in the one shape of a measurement (`profiler_app.measure`)."""
        return measure.Window(
            level=self.level,
            throughput=self.throughput,
            requests=self.requests,
            errors=self.errors,
            duration_s=self.duration_s,
            **measure.latency_fields(self.latency),
            **measure.server_fields(self.server),
            stable=None,
            extra={
                "client_cpu_us": self.client_cpu_us,
                "send_rate": self.send_rate,
                "error_messages": self.error_messages,
                "avg_batch": self.server.avg_batch_size if self.server else None,
                # Triton's own count over the same statistics reads as the steps'.
                "server_requests": self.server.request_count if self.server else None,
                **(
                    {measure.INTER_RESPONSE_HISTOGRAM: self.stream.histogram()}
                    if self.stream
                    else {}
                ),
                **({"load_hosts": self.hosts, **(self.load_cost or {})} if self.hosts else {}),
            },
            gpu=GpuFigures.of(self.gpu),
            stream=StreamFigures.of(self.stream.summary(self.duration_s) if self.stream else None),
            sequence=SequenceFigures.of(
                self.sequence.summary(self.duration_s) if self.sequence else None
            ),
            goodput=GoodputFigures.of(self.good, self.requests, self.duration_s),
            steps=composing.rows(self.steps),
            window=self.index,
            closed_at=self.closed_at,
        )


@dataclass
class LevelResult:
    level: float
    windows: list[WindowResult]
    stable: bool
    throughput: float  # merged over the last 3 windows (or fewer)
    latency: stats.LatencySummary | None
    server: ServerBreakdown | None
    throughput_spread: float  # max/min - 1 over the last 3 windows
    latency_spread: float
    errors: int
    client_cpu_us: float
    over_threshold: bool = False
    cancelled: bool = False
    gpu: GpuSample | None = None  # mean utilisation, peak memory over the windows
    send_rate: float = 0.0  # requests sent per second over the last windows
    # Request-rate mode: fewer sent than the schedule asked (every thread was waiting for a
    # reply), so the server saw less load than the level says (perf_analyzer's "delayed").
    behind_schedule: bool = False
    stream: StreamRecords | None = None  # streaming sweeps: the last windows' records
    stream_duration_s: float = 0.0  # the last windows' time: response throughput, goodput
    good: int | None = None  # the last windows' requests that met every goodput objective
    steps: list[StepServer] = field(default_factory=list)  # merged like `server`
    # Sequence models: the last windows' positions, their throughput over stream_duration_s
    # (the sequences failed: every window's).
    sequence: SequenceRecords | None = None
    hosts: list[dict[str, Any]] | None = None  # each host's share of the last windows
    # How the windows settled, and the intervals of their medians (`stats.settle`); the
    # load generator's machine during the level (`host_load`).
    settling: stats.Settling | None = None
    host: host_load.HostLoad | None = None

    def measured(self) -> measure.Level:
        """The level in the one shape of a measurement (`profiler_app.measure`)."""
        return measure.Level(
            level=self.level,
            throughput=self.throughput,
            requests=self.latency.count if self.latency else 0,
            errors=self.errors,
            duration_s=sum(w.duration_s for w in self.windows),
            **measure.latency_fields(self.latency),
            **measure.server_fields(self.server),
            stable=self.stable,
            extra={
                "windows": len(self.windows),
                "throughput_spread": measure.finite(self.throughput_spread),
                "latency_spread": measure.finite(self.latency_spread),
                "over_threshold": self.over_threshold,
                "cancelled": self.cancelled,
                "client_cpu_us": self.client_cpu_us,
                "avg_batch": self.server.avg_batch_size if self.server else None,
                # Triton's own count over the same statistics reads as the steps'.
                "server_requests": self.server.request_count if self.server else None,
                "send_rate": self.send_rate,
                "behind_schedule": self.behind_schedule,
                **({"load_hosts": self.hosts} if self.hosts else {}),
                **({measure.HOST: self.host.to_json()} if self.host else {}),
            },
            gpu=GpuFigures.of(self.gpu),
            stream=StreamFigures.of(
                self.stream.summary(self.stream_duration_s) if self.stream else None
            ),
            sequence=SequenceFigures.of(
                self.sequence.summary(self.stream_duration_s) if self.sequence else None
            ),
            goodput=GoodputFigures.of(
                self.good, self.latency.count if self.latency else 0, self.stream_duration_s
            ),
            steps=composing.rows(self.steps),
            interval=measure.LevelInterval.of(self.settling),
        )


@dataclass
class SweepResult:
    params: SweepParams
    levels: list[LevelResult]
    cancelled: bool = False
    stopped_reason: str = ""  # "", "cancelled", "latency threshold", "error: ..."
    outputs: Any = None

    def curve(self) -> list[stats.CurvePoint]:
        key = measure.latency_key(self.params.percentile)
        points = (lv.measured().curve_point(key) for lv in self.levels)
        return [p for p in points if p is not None]

    def recommendation(
        self, *, min_gain_pct: float = 5.0, latency_budget_ms: float | None = None
    ) -> str:
        return stats.recommendation(
            self.curve(),
            mode=self.params.mode,
            latency_label=self.params.latency_label,
            min_gain_pct=min_gain_pct,
            latency_budget_ms=latency_budget_ms or self.params.latency_threshold_ms,
        )
