"""Goodput: the completed requests per second that met every objective, as AIPerf's
`--goodput "time_to_first_token:200 inter_token_latency:30 request_latency:500"` (ms).

An objective is a metric name and a limit in ms, several separated by spaces. The names
are AIPerf's and this project's:

- `time_to_first_token` (AIPerf) = `first_response`: the time from sending a request to
  its first response;
- `inter_response`: the request's *mean* time between its responses that carry outputs,
  (last - first) / (responses - 1);
- `inter_token_latency` (AIPerf): the request's mean time per token after the first,
  (last - first) / (tokens - 1), AIPerf's (request latency - TTFT) / (OSL - 1) from the
  responses that carry outputs (a trailing empty final flag adds no time). Where one
  response is one token, it is `inter_response`;
- `request_latency`: the time to the request's final response (every sweep has it).

AIPerf's rule: a request is good when every objective's value is at most its limit, and a
request without a value for one of them (a mean gap of a request with a single response)
is not good. Only `request_latency` applies to a model that does not stream.

`parse` is what `params.from_flags` uses for the `goodput` flag; `good_mask` is what the
built-in engine counts per window (`loadgen`). perf_analyzer 2.48 measures no goodput.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np

# Accepted names -> the metric they check (AIPerf's first, then ours).
NAMES = {
    "time_to_first_token": "first_response",
    "inter_token_latency": "inter_token_latency",
    "request_latency": "request_latency",
    "first_response": "first_response",
    "inter_response": "inter_response",
}
# The metrics only a streaming sweep (a decoupled model) measures.
STREAMING_ONLY = ("first_response", "inter_response", "inter_token_latency")
ORDER = ("first_response", "inter_response", "inter_token_latency", "request_latency")


class GoodputError(ValueError):
    """An objective that cannot be read; the message says which part and why."""


def _names() -> str:
    return "time_to_first_token, inter_token_latency, request_latency (AIPerf's) or " + (
        "first_response, inter_response (this project's)"
    )


def parse(text: str) -> dict[str, float]:
    """'time_to_first_token:200 request_latency:500' -> {"first_response": 200.0,
    "request_latency": 500.0} (ms, by the metric checked); {} for empty text. GoodputError
    names the part that is wrong: an unknown name, a missing or non-positive value, or the
    same metric twice."""
    objectives: dict[str, float] = {}
    for part in re.split(r"[\s,]+", text.strip()):
        if not part:
            continue
        name, sep, value = part.partition(":")
        metric = NAMES.get(name.strip().lower())
        if metric is None:
            raise GoodputError(f"{part!r} names no known metric; use {_names()}")
        if not sep or not value.strip():
            raise GoodputError(f"{part!r} has no limit: write {name}:MS, e.g. {name}:200")
        try:
            limit = float(value)
        except ValueError:
            raise GoodputError(f"{part!r}: {value!r} is not a number of ms") from None
        if not math.isfinite(limit) or limit <= 0:
            raise GoodputError(f"{part!r}: the limit must be above 0 ms")
        if metric in objectives:
            raise GoodputError(f"{part!r} sets {metric} a second time")
        objectives[metric] = limit
    return objectives


def text(objectives: Mapping[str, float]) -> str:
    """The canonical text of objectives (`parse` reads it back): our names, fixed order."""
    return " ".join(f"{m}:{objectives[m]:g}" for m in ORDER if m in objectives)


def streaming_only(objectives: Mapping[str, float]) -> list[str]:
    """The objectives that need a streaming sweep."""
    return [m for m in STREAMING_ONLY if m in objectives]


def _mean_gap(span_ns: np.ndarray, count: np.ndarray) -> np.ndarray:
    """span / (count - 1) per request, NaN where count < 2 (no gap: no value)."""
    gaps = np.asarray(count, dtype=np.float64) - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(gaps >= 1, np.asarray(span_ns, dtype=np.float64) / gaps, np.nan)


def good_mask(
    objectives: Mapping[str, float],
    latency_ns: np.ndarray,
    *,
    first_ns: np.ndarray | None = None,
    span_ns: np.ndarray | None = None,
    responses: np.ndarray | None = None,
    tokens: np.ndarray | None = None,
) -> np.ndarray:
    """Per completed request (arrays aligned on it), whether it met every objective.

    `latency_ns`: to the final response; for a streaming sweep also `first_ns` (to the
    first response), `span_ns` (first to last response carrying outputs), `responses`
    (those carrying outputs) and `tokens`. A value that is missing (NaN: fewer than two
    responses or tokens, or a streaming metric of a sweep that did not stream) fails."""
    latency = np.asarray(latency_ns, dtype=np.float64)
    good = np.ones(latency.shape, dtype=bool)
    missing = np.full(latency.shape, np.nan)
    for metric, limit_ms in objectives.items():
        if metric == "request_latency":
            values = latency
        elif metric == "first_response":
            values = missing if first_ns is None else np.asarray(first_ns, dtype=np.float64)
        elif metric == "inter_response":
            values = (
                missing if span_ns is None or responses is None else _mean_gap(span_ns, responses)
            )
        elif metric == "inter_token_latency":
            values = missing if span_ns is None or tokens is None else _mean_gap(span_ns, tokens)
        else:
            raise GoodputError(f"unknown metric {metric!r}")
        good &= values <= limit_ms * 1e6  # NaN compares False: no value, not good
    return good
