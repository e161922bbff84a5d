"""The workers' replies merged into a window, and a level's windows into the level, by
perf_analyzer's rules: a window counts the requests that completed inside it, a level
pools its last windows' latencies (never averages percentiles), and Triton's statistics
are diffed over a window and merged weighted by requests.

The shapes they fill are `results`; the loop that calls them is `loadgen`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import goodput
from ..params import SweepParams
from . import composing, gpu, stats
from .composing import StepServer
from .results import LevelResult, ServerBreakdown, WindowResult
from .sequences import SequenceRecords
from .stream_stats import StreamRecords

BEHIND_SCHEDULE = 0.95  # request rate: a level that sent under this share of its rate


def server_diff(
    start: Mapping[str, int] | None, end: Mapping[str, int] | None
) -> ServerBreakdown | None:
    if not start or not end:
        return None
    d = {k: end[k] - start.get(k, 0) for k in end}

    def avg(key: str) -> float:
        count = d[f"{key}_count"]
        return d[f"{key}_ns"] / count / 1000 if count else 0.0

    return ServerBreakdown(
        request_count=d["success_count"],
        inference_count=d["inference_count"],
        execution_count=d["execution_count"],
        request_us=avg("success"),
        queue_us=avg("queue"),
        compute_input_us=avg("compute_input"),
        compute_infer_us=avg("compute_infer"),
        compute_output_us=avg("compute_output"),
    )


def merge_server(items: Sequence[ServerBreakdown | None]) -> ServerBreakdown | None:
    """Windows merged as perf_analyzer merges them (counts and durations added up): each
    average weighted by the requests it is over. Triton counts queue and compute once per
    request, not per execution (a batch of 8 adds 8 to compute_infer's count)."""
    present = [s for s in items if s is not None]
    if not present:
        return None

    def weighted(attr: str) -> float:
        total = sum(s.request_count for s in present)
        return sum(getattr(s, attr) * s.request_count for s in present) / total if total else 0.0

    return ServerBreakdown(
        request_count=sum(s.request_count for s in present),
        inference_count=sum(s.inference_count for s in present),
        execution_count=sum(s.execution_count for s in present),
        request_us=weighted("request_us"),
        queue_us=weighted("queue_us"),
        compute_input_us=weighted("compute_input_us"),
        compute_infer_us=weighted("compute_infer_us"),
        compute_output_us=weighted("compute_output_us"),
    )


def build_window(
    level: float, index: int, start_ns: int, end_ns: int, replies: Sequence[tuple], batch: int
) -> WindowResult:
    lats = np.concatenate([r[2] for r in replies]) if replies else np.empty(0, np.int64)
    errors = sum(r[3] for r in replies)
    messages = [m for r in replies for m in r[4]][:5]
    cpu_s = sum(r[5] for r in replies)
    sent = sum(r[6] for r in replies)
    streaming = any(len(r) > 7 and r[7] is not None for r in replies)
    duration = (end_ns - start_ns) / 1e9
    requests = int(lats.size)
    return WindowResult(
        level=level,
        index=index,
        duration_s=duration,
        requests=requests,
        inferences=requests * batch,
        throughput=requests * batch / duration if duration > 0 else 0.0,
        latency=stats.summarize_latencies(lats.tolist()) if requests else None,
        errors=errors,
        error_messages=messages,
        server=None,
        client_cpu_us=cpu_s / requests * 1e6 if requests else 0.0,
        send_rate=sent / duration if duration > 0 else 0.0,
        latencies_ns=lats,
        stream=StreamRecords.pooled([r[7] for r in replies]) if streaming else None,
        sequence=SequenceRecords.from_replies(replies) if _has_sequences(replies) else None,
    )


def _has_sequences(replies: Sequence[tuple]) -> bool:
    return any(len(r) > 8 and r[8] is not None for r in replies)


def count_good(objectives: Mapping[str, float], window: WindowResult) -> int | None:
    """The window's completed requests that met every goodput objective; None without
    objectives."""
    if not objectives:
        return None
    s = window.stream
    if s is None:
        mask = goodput.good_mask(objectives, window.latencies_ns)
    else:
        mask = goodput.good_mask(
            objectives, s.latency_ns, first_ns=s.first_ns, span_ns=s.span_ns,
            responses=s.responses, tokens=s.tokens,
        )  # fmt: skip
    return int(mask.sum())


def merge_level(
    level: float, windows: list[WindowResult], params: SweepParams, cancelled: bool
) -> LevelResult:
    """A level from its windows. Settled by perf_analyzer's rule (or with too few windows
    for an interval): its last 3 merged, as perf_analyzer merges them. Otherwise its
    windows after the first (`stats.judged_windows`) are pooled, and its throughput is
    their median, the value the interval is about."""
    settling = stats.settle(
        [w.throughput for w in windows],
        [w.chosen_latency_us(params.percentile) for w in windows],
        params.stability_percentage,
    )
    last3 = windows[-stats.STABILITY_WINDOWS :]
    tputs = [w.throughput for w in last3]
    lats = [w.chosen_latency_us(params.percentile) for w in last3]
    last = windows[-settling.windows :] if windows else []
    duration = sum(w.duration_s for w in last)
    requests = sum(w.requests for w in last)
    # perf_analyzer pools the last windows' latencies; a level cancelled before its first
    # window closed has none.
    pooled = np.concatenate([w.latencies_ns for w in last]) if last else np.empty(0)
    latency = stats.summarize_latencies(pooled.tolist()) if pooled.size else None
    cpu_requests = sum(w.requests for w in last)
    send_rate = sum(w.send_rate * w.duration_s for w in last) / duration if duration > 0 else 0.0
    throughput = requests * params.batch_size / duration if duration > 0 else 0.0
    if settling.reports_median and settling.throughput is not None:
        throughput = settling.throughput.median
    return LevelResult(
        level=level,
        windows=windows,
        stable=settling.settled,
        throughput=throughput,
        latency=latency,
        server=merge_server([w.server for w in last]),
        throughput_spread=stats.spread(tputs) if tputs else 0.0,
        latency_spread=stats.spread(lats) if lats else 0.0,
        errors=sum(w.errors for w in windows),
        client_cpu_us=(
            sum(w.client_cpu_us * w.requests for w in last) / cpu_requests if cpu_requests else 0.0
        ),
        cancelled=cancelled,
        gpu=gpu.merge([w.gpu for w in last]),
        send_rate=send_rate,
        behind_schedule=params.mode == "request_rate"
        and _behind(level, send_rate, duration, params),
        stream=StreamRecords.pooled([w.stream for w in last]) if params.streaming else None,
        stream_duration_s=duration,
        sequence=_level_sequences(windows, last),
        good=sum(w.good or 0 for w in last) if params.goodput else None,
        hosts=_level_hosts(last),
        settling=settling if windows else None,
    )


def _level_hosts(last: Sequence[WindowResult]) -> list[dict[str, Any]] | None:
    """Each host's share of the level's last windows (those its figures pool), by host."""
    if not any(w.hosts for w in last):
        return None
    totals: dict[str, dict[str, Any]] = {}
    for window in last:
        for share in window.hosts or []:
            total = totals.setdefault(
                share["host"], {"host": share["host"], "requests": 0, "errors": 0}
            )
            total["requests"] += share["requests"]
            total["errors"] += share["errors"]
    return list(totals.values())


def merge_steps(level: LevelResult, plan: composing.Plan) -> None:
    """A level's steps, each merged over the level's last windows as its own breakdown is;
    an ensemble's breakdown then follows from them (`composing.composed`), so that its
    steps add up to it over the same windows."""
    pooled = level.settling.windows if level.settling else stats.STABILITY_WINDOWS
    last = level.windows[-pooled:]
    if not plan or not last:
        return
    level.steps = [
        StepServer(step, merge_server([w.steps[i].server for w in last]))
        for i, step in enumerate(plan.steps)
    ]
    # Its counts and request time merged as they are; queue and compute from the steps.
    level.server = composing.composed(plan, level.server, level.steps)


def _level_sequences(
    windows: Sequence[WindowResult], last: Sequence[WindowResult]
) -> SequenceRecords | None:
    """The last windows' positions pooled, as the latencies; the sequences failed in every
    window, as the errors."""
    if not any(w.sequence is not None for w in windows):
        return None
    pooled = SequenceRecords.pooled([w.sequence for w in last])
    pooled.failed = sum(w.sequence.failed for w in windows if w.sequence is not None)
    return pooled


def _behind(rate: float, send_rate: float, duration_s: float, params: SweepParams) -> bool:
    """Whether a request-rate level sent clearly fewer requests than its schedule: under
    BEHIND_SCHEDULE of them, and for Poisson arrivals also 3 standard deviations under."""
    expected, sent = rate * duration_s, send_rate * duration_s
    if duration_s <= 0 or sent >= BEHIND_SCHEDULE * expected:
        return False
    return params.arrival != "poisson" or sent < expected - 3 * math.sqrt(expected)
