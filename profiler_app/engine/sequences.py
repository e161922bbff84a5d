"""Sequence models in the built-in engine: perf_analyzer's sequence model
(`sequence_manager.cc`), its requests, and what a window measured by position.

A sequence model keeps state per sequence (correlation id) between requests, so every
request carries its sequence's id, the first one START and the last one END. As in
perf_analyzer:

- Each sequence slot (a `Status`: one per concurrent request in concurrency mode, one per
  --num-of-sequences in request-rate mode) runs sequences back to back, one request of a
  sequence at a time (never the next before the previous one completed).
- A sequence's length is --sequence-length moved by a uniform draw within
  ±--sequence-length-variation percent, truncated toward zero, at least 1
  (`GetRandomSequenceLength`); draws are seeded by the sweep's seed, the level and the slot.
- Ids come from --sequence-id-range (END excluded; perf_analyzer's default is from 1 over
  2^32 - 1 ids) and wrap inside it. perf_analyzer hands them out from one counter and
  skips an id still in use; across worker processes a counter would need a lock, so here
  slot g of T takes start + g, start + g + T, ... (wrapping within the range): slots never
  share an id, and a slot has one live sequence at a time, so ids are unique among the
  live sequences of every process. That needs at least T ids (`kind_rules` checks it).
- A level change or the end of a sweep ends every live sequence with one END request
  before the next level starts (perf_analyzer's `CompleteOngoingSequences`); those
  requests fall outside every window.
- A request that fails ends its sequence there (an error with its message, not retried);
  the slot starts a new sequence.

Each completed request is recorded with its position in its sequence: first, middle or
last (a one-request sequence is first). A window or level reports per position its
requests, throughput and latencies (`SequenceSummary`, into `measure.sequence_fields`),
pooled over a level's last windows as its latencies are, with the sequences completed (END
answered) and failed.

Requests stay serialised once: the gRPC ones get the sequence parameters appended as
protobuf map entries (protobuf merges appended fields), the HTTP ones a JSON header cut
around the id (`http_sequence_requests`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from . import stats
from .http_body import request_body
from .stream_slots import _varint

if TYPE_CHECKING:  # the worker processes import this module, never Django's
    from ..params import SweepParams

FIRST, MIDDLE, LAST = 0, 1, 2
POSITIONS = ("first", "middle", "last")  # by the codes above
DEFAULT_ID_COUNT = 2**32 - 1  # perf_analyzer's default range: ids from 1, UINT32_MAX of them
ID_PLACEHOLDER = b'"@@sequence-id@@"'  # where an HTTP request's id goes in its JSON header


@dataclass(frozen=True)
class SequenceSpec:
    """How a sweep's sequences are drawn (its sequence flags), for every worker."""

    length: int
    variation: float  # percent
    id_start: int = 1
    id_count: int = DEFAULT_ID_COUNT
    worker: int = 0  # this worker's number (its checked call's id)

    @classmethod
    def of(cls, params: SweepParams) -> SequenceSpec:
        start, count = id_range(params.sequence_id_range)
        return cls(params.sequence_length, params.sequence_length_variation, start, count)

    def check_id(self) -> int:
        """The id of this worker's checked call (a one-request sequence, before any level:
        the workers' ids differ)."""
        return self.id_start + self.worker % self.id_count


def id_range(text: str) -> tuple[int, int]:
    """(first id, how many) of a --sequence-id-range ("A:B", B excluded; "A" or "" has
    perf_analyzer's default count)."""
    if not text:
        return 1, DEFAULT_ID_COUNT
    parts = [int(p) for p in text.split(":")]
    return parts[0], (parts[1] - parts[0] if len(parts) == 2 else DEFAULT_ID_COUNT)


def draw_length(rng: random.Random, length: int, variation: float) -> int:
    """A sequence's length as perf_analyzer draws it: `length` plus a uniform offset within
    ±`variation` percent of it, truncated toward zero; at least 1."""
    offset = int((2.0 * rng.random() - 1.0) * variation / 100.0 * length)
    return max(1, length + offset)


class Ids:
    """The ids of slot `index` of `total`: start + index, start + index + total, ...,
    wrapping to start + index at the end of the range (`count` ids)."""

    def __init__(self, start: int, count: int, index: int, total: int) -> None:
        if not 0 <= index < min(total, count):
            raise ValueError(f"slot {index} of {total} has no id among {count}")
        self.start, self.count, self.index, self.total = start, count, index, total
        self.offset = index

    def take(self) -> int:
        if self.offset >= self.count:
            self.offset = self.index
        seq_id = self.start + self.offset
        self.offset += self.total
        return seq_id


def slot_rng(seed: int, level: float, index: int) -> random.Random:
    """The length draws of slot `index` at a level: the same sweep seed draws the same."""
    return random.Random(f"sequences/{seed}/{level:g}/{index}")


# --- requests -----------------------------------------------------------------------------------


def _grpc_parameter(key: str, value: bytes) -> bytes:
    """A ModelInferRequest.parameters map entry (field 4) with an InferParameter `value`."""
    name = key.encode()
    entry = b"\x0a" + _varint(len(name)) + name + b"\x12" + _varint(len(value)) + value
    return b"\x22" + _varint(len(entry)) + entry


_TRUE = b"\x08\x01"  # InferParameter.bool_param = true
# By (START, END): appended after the id.
GRPC_FLAGS = {
    (True, False): _grpc_parameter("sequence_start", _TRUE),
    (False, False): b"",
    (False, True): _grpc_parameter("sequence_end", _TRUE),
    (True, True): _grpc_parameter("sequence_start", _TRUE) + _grpc_parameter("sequence_end", _TRUE),
}


def grpc_id(seq_id: int) -> bytes:
    """The `sequence_id` parameter: int64_param, which Triton reads as the uint64 id (the
    same bits, so ids over 2^63 go as they are)."""
    return _grpc_parameter("sequence_id", b"\x10" + _varint(seq_id))


class GrpcSequenceRequests:
    """gRPC requests of sequences: the stateless bytes, the id's entry, the flags'."""

    def __init__(self, requests: Sequence[bytes]) -> None:
        self.requests = list(requests)

    def __len__(self) -> int:
        return len(self.requests)

    def tag(self, seq_id: int) -> bytes:
        return grpc_id(seq_id)

    def build(self, payload: int, tag: bytes, start: bool, end: bool) -> bytes:
        return self.requests[payload] + tag + GRPC_FLAGS[start, end]


class HttpSequenceRequests:
    """HTTP requests of sequences: per payload and (START, END), the JSON header around the
    id and the binary data after it (Triton's binary tensor format)."""

    def __init__(
        self,
        parts: Sequence[Mapping[tuple[bool, bool], tuple[bytes, bytes, bytes]]],
        key: Sequence[tuple[str, str]] = (),  # the server's key's header
    ):
        self.parts = list(parts)
        self.headers = {"Content-Type": "application/octet-stream", **dict(key)}

    def __len__(self) -> int:
        return len(self.parts)

    def tag(self, seq_id: int) -> bytes:
        return str(seq_id).encode()

    def build(
        self, payload: int, tag: bytes, start: bool, end: bool
    ) -> tuple[bytes, dict[str, str]]:
        before, after, data = self.parts[payload][start, end]
        header = before + tag + after
        return header + data, {**self.headers, "Inference-Header-Content-Length": str(len(header))}


def http_sequence_requests(
    payloads: Sequence[Sequence[tuple[str, str, np.ndarray]]],
    key: Sequence[tuple[str, str]] = (),
) -> HttpSequenceRequests:
    """Each payload as tritonclient writes a sequence's request, cut at the id."""
    parts = []
    for payload in payloads:
        variants = {}
        for start, end in GRPC_FLAGS:
            body, json_size = request_body(
                payload,
                sequence_id=ID_PLACEHOLDER.strip(b'"').decode(),
                sequence_start=start,
                sequence_end=end,
            )
            size = len(body) if json_size is None else json_size
            before, after = body[:size].split(ID_PLACEHOLDER)
            variants[start, end] = (before, after, body[size:])
        parts.append(variants)
    return HttpSequenceRequests(parts, key)


class Status:
    """One sequence slot (perf_analyzer's SequenceStatus): its live sequence, if any."""

    __slots__ = ("ids", "rng", "spec", "seq_id", "tag", "length", "sent", "payload")

    def __init__(self, spec: SequenceSpec, ids: Ids, rng: random.Random, payload: int) -> None:
        self.spec, self.ids, self.rng = spec, ids, rng
        self.seq_id: int | None = None  # None: no live sequence
        self.tag = b""
        self.length = self.sent = 0
        self.payload = payload  # the next payload, in turn

    def next_request(self, requests: Any) -> tuple[Any, int, bool]:
        """(request, position, whether it ends the sequence) of the next request, starting
        a sequence when none is live."""
        if self.seq_id is None:
            self.seq_id = self.ids.take()
            self.tag = requests.tag(self.seq_id)
            self.length = draw_length(self.rng, self.spec.length, self.spec.variation)
            self.sent = 0
        start, end = self.sent == 0, self.sent == self.length - 1
        i = self.payload
        self.payload = (i + 1) % len(requests)
        position = FIRST if start else LAST if end else MIDDLE
        return requests.build(i, self.tag, start, end), position, end

    def answered(self, ended: bool) -> None:
        self.sent += 1
        if ended:
            self.seq_id = None

    def failed(self) -> str:
        """End the sequence after a failed request; what to prefix its message with."""
        where = f"sequence {self.seq_id} (request {self.sent + 1} of {self.length})"
        self.seq_id = None
        return where

    def closing_request(self, requests: Any) -> Any:
        """The END request that ends the live sequence early (a level change, the end)."""
        i = self.payload
        self.payload = (i + 1) % len(requests)
        self.seq_id = None
        return requests.build(i, self.tag, False, True)


# --- what a window measured ------------------------------------------------------------------


def _empty(dtype: Any = np.int64) -> np.ndarray:
    return np.empty(0, dtype)


@dataclass(frozen=True)
class PositionSummary:
    requests: int
    throughput: float  # infer/s
    latency: stats.LatencySummary | None


@dataclass(frozen=True)
class SequenceSummary:
    first: PositionSummary
    middle: PositionSummary
    last: PositionSummary
    sequences_completed: int  # END answered
    sequences_failed: int  # ended by a failed request


@dataclass
class SequenceRecords:
    """Completed requests' positions, with their latencies (the window's, in the same
    order), and the sequences completed and failed, of a window (or several pooled)."""

    positions: np.ndarray = field(default_factory=lambda: _empty(np.int8), repr=False)
    latencies_ns: np.ndarray = field(default_factory=_empty, repr=False)
    completed: int = 0
    failed: int = 0

    @classmethod
    def from_replies(cls, replies: Sequence[tuple]) -> SequenceRecords:
        """From the workers' swap replies: each one's latencies (r[2]) and its sequence
        records (r[8]: positions aligned with them, completed, failed)."""
        parts = [(r[2], r[8]) for r in replies if len(r) > 8 and r[8] is not None]
        return cls.pooled(
            [
                cls(np.asarray(p["positions"], np.int8), lats, p["completed"], p["failed"])
                for lats, p in parts
            ]
        )

    @classmethod
    def pooled(cls, parts: Sequence[SequenceRecords | None]) -> SequenceRecords:
        items = [p for p in parts if p is not None]
        if not items:
            return cls()
        return cls(
            np.concatenate([p.positions for p in items]),
            np.concatenate([p.latencies_ns for p in items]),
            sum(p.completed for p in items),
            sum(p.failed for p in items),
        )

    def summary(self, duration_s: float, batch: int = 1) -> SequenceSummary:
        def at(code: int) -> PositionSummary:
            lats = self.latencies_ns[self.positions == code]
            return PositionSummary(
                requests=int(lats.size),
                throughput=lats.size * batch / duration_s if duration_s > 0 else 0.0,
                latency=stats.summarize_latencies(lats.tolist()) if lats.size else None,
            )

        return SequenceSummary(at(FIRST), at(MIDDLE), at(LAST), self.completed, self.failed)
