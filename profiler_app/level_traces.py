"""A sweep's traced sample per level (``trace_sample`` N): Triton traces the first N
requests after it is armed, so the sweep arms it before the first level and again after
each level's summary; the trace files that appeared since the last summary are that
level's (their order, not their times, says so). Each level keeps the median of each part
of a request (`TraceFigures`): "at concurrency 8, 70 % of a request is queue".

The worker reads the server's trace files (same host, or a shared volume), only inside
``TRITON_TRACE_ROOTS``; where it cannot, the sweep measures as without tracing and says
why once in its log. Tracing is turned off when the sweep ends, whatever its end.
"""

from __future__ import annotations

import logging
from pathlib import Path
from statistics import median

from django.conf import settings

from registry.servers import Server
from registry.triton_clients import get_client
from triton_api.client import TritonError
from triton_api.traces import TraceUnavailable, files, records, spans, trace_file

from .level_figures import TraceFigures

log = logging.getLogger(__name__)
_PARTS = ("queue", "compute input", "infer", "compute output", "response")


class LevelTracer:
    def __init__(self, server: Server, model: str, per_level: int) -> None:
        self.client = get_client(server)
        self.model = model
        self.per_level = per_level
        self.base: Path | None = None
        self.seen: set[Path] = set()
        try:
            reported = (self.client.trace_settings().get("trace_file") or [""])[0]
            self.base = trace_file(reported, list(settings.TRITON_TRACE_ROOTS))
            self.seen = files(self.base)
            self.arm()
        except (TritonError, TraceUnavailable) as exc:
            self.base = None
            log.warning("sweep of %s not traced: %s", model, exc)

    def arm(self) -> None:
        self.client.update_trace_settings(self.model, {
            "trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "1",
            "trace_count": str(self.per_level),
        })  # fmt: skip

    def take(self) -> TraceFigures | None:
        """The level just measured: the median of its traced requests; armed again for
        the next one."""
        if self.base is None:
            return None
        new = files(self.base) - self.seen
        self.seen |= new
        try:
            self.arm()
        except TritonError as exc:
            log.warning("sweep of %s: tracing not armed again: %s", self.model, exc)
        traced = [s for s in spans(records(list(new))) if s.model == self.model]
        if not traced:
            return None
        by_part: dict[str, list[float]] = {name: [] for name in _PARTS}
        for span in traced:
            for name, _start, length in span.parts:
                by_part[name].append(length * 1000)
        mid = {name: (median(v) if v else None) for name, v in by_part.items()}
        return TraceFigures(
            traced=len(traced),
            traced_total_us=median((s.end_ns - s.start_ns) / 1000 for s in traced),
            traced_queue_us=mid["queue"],
            traced_compute_input_us=mid["compute input"],
            traced_infer_us=mid["infer"],
            traced_compute_output_us=mid["compute output"],
            traced_response_us=mid["response"],
        )

    def stop(self) -> None:
        if self.base is None:
            return
        try:
            self.client.update_trace_settings(self.model, {"trace_level": ["OFF"]})
        except TritonError as exc:
            log.warning("sweep of %s: tracing not turned off: %s", self.model, exc)
