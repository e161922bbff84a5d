"""What a streaming window or level measured beyond its requests: first-response and
inter-response times, responses per request and response throughput (from the records
of `stream_slots`, pooled over a level's last windows as its latencies are)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import stats


def _empty() -> np.ndarray:
    return np.empty(0, np.int64)


@dataclass(frozen=True)
class StreamSummary:
    response_throughput: float  # responses carrying outputs per second
    responses_per_request: float
    empty_final_responses: int
    first_response: stats.LatencySummary | None
    inter_response: stats.LatencySummary | None


@dataclass
class StreamRecords:
    """The completed requests' streaming records of a window (or several pooled)."""

    first_ns: np.ndarray = field(default_factory=_empty, repr=False)
    responses: np.ndarray = field(default_factory=_empty, repr=False)
    empty_finals: int = 0
    gaps_ns: np.ndarray = field(default_factory=_empty, repr=False)

    @classmethod
    def pooled(cls, parts: Sequence[StreamRecords | Mapping[str, Any] | None]) -> StreamRecords:
        """One set from workers' swap replies (dicts) or windows' records; None skipped."""
        items = [cls(**p) if isinstance(p, Mapping) else p for p in parts if p is not None]

        def cat(name: str) -> np.ndarray:
            arrays = [getattr(r, name) for r in items]
            return np.concatenate(arrays) if arrays else _empty()

        return cls(
            first_ns=cat("first_ns"),
            responses=cat("responses"),
            empty_finals=sum(r.empty_finals for r in items),
            gaps_ns=cat("gaps_ns"),
        )

    def summary(self, duration_s: float) -> StreamSummary:
        requests = int(self.responses.size)
        responses = int(self.responses.sum())
        return StreamSummary(
            response_throughput=responses / duration_s if duration_s > 0 else 0.0,
            responses_per_request=responses / requests if requests else 0.0,
            empty_final_responses=self.empty_finals,
            first_response=stats.summarize_latencies(self.first_ns.tolist()) if requests else None,
            inter_response=(
                stats.summarize_latencies(self.gaps_ns.tolist()) if self.gaps_ns.size else None
            ),
        )
