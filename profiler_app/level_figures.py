"""The typed sub-records of a measured level (`measure.Level`): what only some measurements
have (a GPU's, a streaming sweep's, a sequence sweep's, a sweep with goodput objectives', an
ensemble's or a BLS model's steps).

A stored row and every payload keep them flat in `extra`, under the keys they always had:
each record's field names are those keys (`flat` writes them, `take` reads them back). A
row stored before a key existed, or an engine that measures only some of them
(perf_analyzer's response throughput), keeps just the keys it had (`present`), so that
reading a row and storing it again changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Self

LATENCY_FIELDS = ("avg_us", "p50_us", "p90_us", "p95_us", "p99_us")
SERVER_FIELDS = (
    "server_request_us",
    "queue_us",
    "compute_input_us",
    "compute_infer_us",
    "compute_output_us",
)
COMPUTE_FIELDS = SERVER_FIELDS[2:]  # compute input, infer, output


@dataclass(frozen=True)
class Figures:
    """A flat sub-record: its fields are its `extra` keys."""

    # The keys a read row had (None: all of them).
    present: tuple[str, ...] | None = field(default=None, kw_only=True, compare=False, repr=False)
    _keys: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def names(cls) -> tuple[str, ...]:
        if "_keys" not in cls.__dict__:  # once per class
            cls._keys = tuple(f.name for f in fields(cls) if f.name != "present")
        return cls._keys

    def flat(self) -> dict[str, Any]:
        """Its `extra` entries."""
        keys = self.names() if self.present is None else self.present
        return {k: getattr(self, k) for k in keys}

    def has(self, key: str) -> bool:
        return key in self.names() and (self.present is None or key in self.present)

    @classmethod
    def only(cls, **values: Any) -> Self:
        """A record of some of its figures (the others are not written)."""
        return cls(**values, present=tuple(k for k in cls.names() if k in values))

    @classmethod
    def take(cls, extra: dict[str, Any]) -> Self | None:
        """Its entries, removed from `extra`; None when it has none of them."""
        found = [k for k in cls.names() if k in extra]
        if not found:
            return None
        values = {k: extra.pop(k) for k in found}
        return cls(**values, present=None if len(found) == len(cls.names()) else tuple(found))


@dataclass(frozen=True)
class GpuFigures(Figures):
    """Triton's GPUs during the level or window (its mean utilisation, peak memory)."""

    gpu_utilization: float | None = None  # a fraction
    gpu_memory_bytes: float | None = None

    @classmethod
    def of(cls, sample: Any) -> GpuFigures | None:
        """From a `triton_api.gpus.GpuSample` (None without one)."""
        if sample is None:
            return None
        return cls(sample.utilization, sample.memory_used_bytes)


# A streaming sweep's figures (decoupled models): responses (carrying outputs) per second,
# per request, the empty final-flag ones, and the time to the first response and between
# responses, avg and percentiles (µs). The request latency is the time to the final
# response (the p*_us fields, as perf_analyzer 2.48 reports it). Where one response is one
# token, tokens/s is the response throughput. perf_analyzer reports response_throughput only.
STREAM_TIMES = ("first_response", "inter_response")
# The built-in engine's tokens (one per response, or the elements of --token-output per
# response), AIPerf's figures: tokens/s, tokens per request (its output sequence length)
# and the mean per-request tokens/s after the first token (its throughput per user).
TOKEN_FIELDS = ("output_token_throughput", "tokens_per_request", "output_token_throughput_per_user")


@dataclass(frozen=True)
class StreamFigures(Figures):
    """A streaming sweep's figures (see STREAM_TIMES, TOKEN_FIELDS)."""

    response_throughput: float | None = None
    responses_per_request: float | None = None
    empty_final_responses: int | None = None
    first_response_avg_us: float | None = None
    first_response_p50_us: float | None = None
    first_response_p90_us: float | None = None
    first_response_p95_us: float | None = None
    first_response_p99_us: float | None = None
    inter_response_avg_us: float | None = None
    inter_response_p50_us: float | None = None
    inter_response_p90_us: float | None = None
    inter_response_p95_us: float | None = None
    inter_response_p99_us: float | None = None
    output_token_throughput: float | None = None
    tokens_per_request: float | None = None
    output_token_throughput_per_user: float | None = None

    @classmethod
    def of(cls, summary: Any) -> StreamFigures | None:
        """From an `engine.stream_stats.StreamSummary` (None without one)."""
        if summary is None:
            return None
        values: dict[str, Any] = {
            "response_throughput": summary.response_throughput,
            "responses_per_request": summary.responses_per_request,
            "empty_final_responses": summary.empty_final_responses,
        }
        for name in STREAM_TIMES:
            values.update(_latencies(name, getattr(summary, name)))
        for name in TOKEN_FIELDS:
            values[name] = getattr(summary, name, None)
        return cls(**values)


# A sequence sweep's figures (the built-in engine, sequence models): per position of a
# request in its sequence (first, middle, last; a one-request sequence is first), its
# completed requests, their throughput (infer/s) and latency (avg and percentiles, µs),
# pooled over a level's last windows as its latencies are; and the sequences completed
# (their END answered) and failed (ended by a failed request; a level counts them in every
# window, as its errors).
SEQUENCE_POSITIONS = ("first", "middle", "last")


@dataclass(frozen=True)
class SequenceFigures(Figures):
    """A sequence sweep's figures (see SEQUENCE_POSITIONS)."""

    first_requests: int | None = None
    first_throughput: float | None = None
    first_avg_us: float | None = None
    first_p50_us: float | None = None
    first_p90_us: float | None = None
    first_p95_us: float | None = None
    first_p99_us: float | None = None
    middle_requests: int | None = None
    middle_throughput: float | None = None
    middle_avg_us: float | None = None
    middle_p50_us: float | None = None
    middle_p90_us: float | None = None
    middle_p95_us: float | None = None
    middle_p99_us: float | None = None
    last_requests: int | None = None
    last_throughput: float | None = None
    last_avg_us: float | None = None
    last_p50_us: float | None = None
    last_p90_us: float | None = None
    last_p95_us: float | None = None
    last_p99_us: float | None = None
    sequences_completed: int | None = None
    sequences_failed: int | None = None

    @classmethod
    def of(cls, summary: Any) -> SequenceFigures | None:
        """From an `engine.sequences.SequenceSummary` (None without one)."""
        if summary is None:
            return None
        values: dict[str, Any] = {}
        for name in SEQUENCE_POSITIONS:
            position = getattr(summary, name)
            values[f"{name}_requests"] = position.requests
            values[f"{name}_throughput"] = position.throughput
            values.update(_latencies(name, position.latency))
        return cls(
            **values,
            sequences_completed=summary.sequences_completed,
            sequences_failed=summary.sequences_failed,
        )


@dataclass(frozen=True)
class GoodputFigures(Figures):
    """A sweep with goodput objectives (`profiler_app.goodput`), built-in engine: requests/s
    that met every objective, and their share of the completed requests."""

    goodput: float | None = None
    good_share: float | None = None

    @classmethod
    def of(cls, good: int | None, requests: int, duration_s: float) -> GoodputFigures | None:
        """From the requests that met every objective (None without objectives)."""
        if good is None:
            return None
        return cls(
            good / duration_s if duration_s > 0 else 0.0, good / requests if requests else None
        )


@dataclass(frozen=True)
class TraceFigures(Figures):
    """A traced sample of the level's requests (``trace_sample`` per level, Triton's own
    trace: `level_traces`): how many, and the median of each part of a request, in µs."""

    traced: int | None = None
    traced_total_us: float | None = None
    traced_queue_us: float | None = None
    traced_compute_input_us: float | None = None
    traced_infer_us: float | None = None
    traced_compute_output_us: float | None = None
    traced_response_us: float | None = None


@dataclass(frozen=True)
class StepFigures(Figures):
    """One composing model of an ensemble (its steps, nested ensembles expanded to their
    steps) or a BLS model (its `calls_models`), in step order: `extra["steps"]` holds one
    per step. Figures as the model's own breakdown: counts over the windows, averages in µs
    per request of that step, and its share of the steps' summed compute (a fraction)."""

    model: str = ""
    version: str = ""
    request_count: int | None = None
    inference_count: int | None = None
    execution_count: int | None = None
    avg_batch_size: float | None = None
    server_request_us: float | None = None
    queue_us: float | None = None
    compute_input_us: float | None = None
    compute_infer_us: float | None = None
    compute_output_us: float | None = None
    compute_share: float | None = None

    @classmethod
    def of(cls, model: str, version: str, server: Any) -> StepFigures:
        """From an `engine.results.ServerBreakdown` (None: its statistics could not be read);
        `compute_share` is set by `with_compute_shares`."""
        if server is None:
            return cls(model, version)
        return cls(
            model,
            version,
            server.request_count,
            server.inference_count,
            server.execution_count,
            server.avg_batch_size,
            server.request_us,
            *(getattr(server, k) for k in SERVER_FIELDS[1:]),
        )

    @property
    def compute_us(self) -> float | None:
        """Its compute per request (input + infer + output, µs); None when not measured."""
        parts = [getattr(self, k) for k in COMPUTE_FIELDS]
        return None if all(v is None for v in parts) else sum(float(v or 0.0) for v in parts)


STEP_FIELDS = StepFigures.names()
_STEP_KEYS = frozenset(STEP_FIELDS)


def with_compute_shares(steps: list[StepFigures]) -> tuple[StepFigures, ...]:
    """`steps` with each one's share of the steps' summed compute per request (perf_analyzer
    adds the steps' per-request averages up to an ensemble's compute)."""
    computes = [s.compute_us for s in steps]
    total = sum(c for c in computes if c is not None)
    return tuple(
        replace(s, compute_share=c / total if c is not None and total > 0 else None)
        for s, c in zip(steps, computes, strict=True)
    )


def read_steps(value: Any) -> tuple[StepFigures, ...] | None:
    """Stored `extra["steps"]`, typed; None for what a step record would not write back the
    same (not a list of step entries), which then stays as it was."""
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(s, Mapping) and _STEP_KEYS.issuperset(s) for s in value):
        return None
    return tuple(StepFigures.take(dict(s)) or StepFigures(present=()) for s in value)


def _latencies(prefix: str, lat: Any) -> dict[str, float | None]:
    """`prefix`_avg_us ... `prefix`_p99_us of a `stats.LatencySummary` (None without one)."""
    return {f"{prefix}_{k}": None if lat is None else getattr(lat, k) for k in LATENCY_FIELDS}
