"""One request's timeline, from the server's trace files (`triton_api.traces`), read only
inside ``TRITON_TRACE_ROOTS`` (same host, or a volume shared in compose), never a path a
server names elsewhere."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings

from triton_api.traces import TraceUnavailable, files, records, spans, trace_file

__all__ = ["TraceUnavailable", "timelines"]


def timelines(reported_file: str, model: str, since: datetime) -> list[dict[str, Any]]:
    """The traced requests of ``model`` since ``since``, as timelines (newest first)."""
    base = trace_file(reported_file, list(settings.TRITON_TRACE_ROOTS))
    recent = [f for f in files(base) if f.stat().st_mtime >= since.timestamp()]
    return [s.as_json() for s in spans(records(recent)) if s.model == model]
