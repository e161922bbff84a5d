"""What a load worker records: per request its end and latency on CLOCK_MONOTONIC (and,
streaming, its responses, tokens and inter-response gaps), cut window by window into the
"records" reply the coordinator pools (`Recorder.swap`).

The one place that says what a window's raw reply holds; `loadgen` reads it back in
`merging.build_window`, and a load agent forwards it unchanged.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

MAX_MESSAGES = 5  # error messages kept per window


class WindowRecords:
    """``self.records``, tuples led by their end (CLOCK_MONOTONIC ns), taken out window by
    window: what the load workers' `Recorder` and the sequence slots share."""

    records: list[Any]

    def take_records(self, t_end: int) -> list[Any]:
        """The records that ended by ``t_end``; those that completed after the boundary
        stay for the next window (the list is swapped first: workers append while this
        runs)."""
        records, self.records = self.records, []
        late = [r for r in records if r[0] > t_end]
        if late:  # completed after the boundary: they belong to the next window
            self.records[:0] = late
            records = [r for r in records if r[0] <= t_end]
        return records


class Recorder(WindowRecords):
    """Per-request records, swapped out window by window."""

    def __init__(self, streaming: bool = False) -> None:
        self.records: list[tuple[int, int]] = []  # (end_ns, latency_ns); latency -1 = error
        self.streaming = streaming
        # Streaming only, per completed request: (end_ns, first_response_ns, responses,
        # empty responses, latency_ns, span_ns from its first to its last response with
        # outputs, tokens), and (end_ns, inter_response_ns) per gap.
        self.stream: list[tuple[int, int, int, int, int, int, int]] = []
        self.gaps: list[tuple[int, int]] = []
        self.messages: list[str] = []
        self.sent = 0
        self.cpu_mark = time.process_time()

    def error(self, end: int, message: str) -> None:
        self.records.append((end, -1))
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(message)

    def swap(self, t_end: int) -> tuple:
        records = self.take_records(t_end)
        messages, self.messages = self.messages, []
        sent, self.sent = self.sent, 0
        cpu = time.process_time()
        cpu_s, self.cpu_mark = cpu - self.cpu_mark, cpu
        ok = [r for r in records if r[1] >= 0]
        ends = np.fromiter((r[0] for r in ok), dtype=np.int64, count=len(ok))
        lats = np.fromiter((r[1] for r in ok), dtype=np.int64, count=len(ok))
        stream = self._swap_stream(t_end) if self.streaming else None
        return ("records", ends, lats, len(records) - len(ok), messages, cpu_s, sent, stream)

    def _swap_stream(self, t_end: int) -> dict[str, Any]:
        stream, self.stream = (
            [r for r in self.stream if r[0] <= t_end],
            [r for r in self.stream if r[0] > t_end],
        )
        gaps, self.gaps = (
            [g[1] for g in self.gaps if g[0] <= t_end],
            [g for g in self.gaps if g[0] > t_end],
        )
        return {
            "first_ns": np.array([r[1] for r in stream], dtype=np.int64),
            "responses": np.array([r[2] for r in stream], dtype=np.int64),
            "empty_finals": sum(r[3] for r in stream),
            "gaps_ns": np.array(gaps, dtype=np.int64),
            "latency_ns": np.array([r[4] for r in stream], dtype=np.int64),
            "span_ns": np.array([r[5] for r in stream], dtype=np.int64),
            "tokens": np.array([r[6] for r in stream], dtype=np.int64),
        }
