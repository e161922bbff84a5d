"""Asking for a model's trace, stopping it, and what the trace page reads (`trace_job` turns
it on and off; `traces` reads Triton's files)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs import lifecycle
from registry.servers import Server
from registry.triton_clients import get_client
from triton_api.client import TritonError

from . import traces
from .models import TraceSession
from .trace_job import KIND, session_json, turn_off

MAX_COUNT = 100
LIVE = ("queued", "running", "succeeded")


class TraceRefused(Exception):
    def __init__(self, message: str, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.field, self.status = message, field, status


def _number(value: Any, field: str, low: int, high: int, default: int | None = None) -> int:
    if value in (None, "") and default is not None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise TraceRefused(f"{field} is a whole number", field) from None
    if not low <= number <= high:
        raise TraceRefused(f"{field} is {low} to {high}", field)
    return number


def _current(server: Server, name: str) -> TraceSession | None:
    return (
        TraceSession.objects.filter(
            server=server.name, model=name, state__in=LIVE, ended_at__isnull=True
        )
        .order_by("-id")
        .first()
    )


def start(server: Server, name: str, user: Any, count: Any, minutes: Any) -> TraceSession:
    """Queue turning tracing on for ``name``'s next ``count`` requests (a job); refused
    while a trace of it runs on this server."""
    count_n = _number(count, "count", 1, MAX_COUNT)
    minutes_n = _number(minutes, "minutes", 1, settings.TRACE_MAX_MINUTES, default=5)
    with transaction.atomic():
        if _current(server, name) is not None:
            raise TraceRefused(
                f"{name} is already being traced on {server.name}: stop it first", None, 409
            )
        now = timezone.now()
        session = TraceSession.objects.create(
            model=name, server=server.name, count=count_n, user=user,
            username=user.get_username(), queued_at=now,
            expires_at=now + timedelta(minutes=minutes_n),
        )  # fmt: skip
        lifecycle.enqueue_on_commit(lifecycle.KINDS[KIND], session.pk)
    return session


def stop(server: Server, name: str, user: Any) -> str:
    """Tracing of ``name`` off now; the running session ends "stopped by <user>"."""
    session = _current(server, name)
    if session is None:
        return f"{name} is not being traced on {server.name}"
    if session.state != "succeeded":  # not turned on yet: it never will be
        lifecycle.cancel(lifecycle.KINDS[KIND], session.pk)
    return turn_off(session, f"stopped by {user.get_username()}", user)


def state(server: Server, name: str) -> dict[str, Any]:
    last = TraceSession.objects.filter(server=server.name, model=name).order_by("-id").first()
    found: dict[str, Any] = {"model": name, "server": server.name, "settings": None,
                             "session": session_json(last) if last else None,
                             "timelines": [], "unavailable": None}  # fmt: skip
    try:
        client = get_client(server)
        found["settings"] = client.trace_settings(name)
        reported = (client.trace_settings().get("trace_file") or [""])[0]
    except TritonError as exc:
        found["unavailable"] = exc.message
        return found
    if last is None:
        return found
    try:
        found["timelines"] = traces.timelines(reported, name, last.queued_at or last.expires_at)
    except traces.TraceUnavailable as exc:
        found["unavailable"] = str(exc)
    return found
