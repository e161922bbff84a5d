"""What a streaming window or level measured beyond its requests: first-response and
inter-response times, responses per request and response throughput, tokens (AIPerf's
output token throughput, tokens per request and output token throughput per user), the
per-request figures goodput checks, and a window's inter-response histogram (from the
records of `stream_slots`, pooled over a level's last windows as its latencies are)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import measure
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
    # AIPerf's token figures: total tokens / duration; tokens per request (its mean output
    # sequence length); the mean over requests of 1 / inter-token latency, (tokens - 1) /
    # (last - first response with outputs), over requests with 2 tokens or more.
    output_token_throughput: float | None = None
    tokens_per_request: float | None = None
    output_token_throughput_per_user: float | None = None


@dataclass
class StreamRecords:
    """The completed requests' streaming records of a window (or several pooled)."""

    first_ns: np.ndarray = field(default_factory=_empty, repr=False)
    responses: np.ndarray = field(default_factory=_empty, repr=False)
    empty_finals: int = 0
    gaps_ns: np.ndarray = field(default_factory=_empty, repr=False)
    # Per completed request, aligned with first_ns: latency (to the final response), the
    # span from its first to its last response with outputs, and its tokens.
    latency_ns: np.ndarray = field(default_factory=_empty, repr=False)
    span_ns: np.ndarray = field(default_factory=_empty, repr=False)
    tokens: np.ndarray = field(default_factory=_empty, repr=False)

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
            latency_ns=cat("latency_ns"),
            span_ns=cat("span_ns"),
            tokens=cat("tokens"),
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
            **self._token_figures(duration_s),
        )

    def _token_figures(self, duration_s: float) -> dict[str, float | None]:
        requests = int(self.tokens.size)
        if not requests:
            return {}
        total = int(self.tokens.sum())
        several = (self.tokens >= 2) & (self.span_ns > 0)
        per_user = (self.tokens[several] - 1) / (self.span_ns[several] / 1e9)
        return {
            "output_token_throughput": total / duration_s if duration_s > 0 else 0.0,
            "tokens_per_request": total / requests,
            "output_token_throughput_per_user": float(per_user.mean()) if per_user.size else None,
        }

    def histogram(self) -> list[int]:
        """Counts of the inter-response times in `measure.INTER_RESPONSE_EDGES_US`' bins."""
        return histogram_counts(self.gaps_ns)


def histogram_counts(gaps_ns: np.ndarray) -> list[int]:
    """Counts per bin of `measure.INTER_RESPONSE_EDGES_US` (µs): bin 0 below the first
    edge, bin i in [edge i-1, edge i), the last one at or above the last edge."""
    edges_ns = np.asarray(measure.INTER_RESPONSE_EDGES_US, dtype=np.float64) * 1000
    bins = np.searchsorted(edges_ns, np.asarray(gaps_ns, dtype=np.float64), side="right")
    return np.bincount(bins, minlength=edges_ns.size + 1).tolist()
